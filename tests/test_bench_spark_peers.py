"""The Spark side-by-side's goal lines follow kit's one rule: no timing verdict from a loaded run or a
slowed baseline (a negative sync overhead); the seeded accuracies always get one."""

import os

import pytest

from kit.bench.spark_peers import DEFAULT_ROW, SINGLE_ROW, TARGET, goals

CORES = os.cpu_count() or 1


def _rows(kit_overhead, peer_overhead, kit_time=9.0, peer_time=8.0, kit_acc=0.80, peer_acc=0.81):
    return [
        {
            "system": "kit gang, every step",
            "overhead_ms": kit_overhead,
            "to_target_s": kit_time,
            "final_accuracy": kit_acc,
        },
        {
            "system": "TorchDistributor (DDP)",
            "overhead_ms": peer_overhead,
            "to_target_s": peer_time,
            "final_accuracy": peer_acc,
        },
    ]


@pytest.mark.parametrize(
    ("rows", "load", "expected"),
    [
        (_rows(2.0, 2.6), (0.5,), ("met", "NOT met", "NOT met")),
        (_rows(3.0, 2.6, 7.0), (0.5,), ("NOT met", "met", "NOT met")),
        (_rows(-30.0, 2.6), (0.5,), ("no verdict", "no verdict", "NOT met")),  # kit's baseline slowed
        (_rows(2.0, -1.0), (0.5,), ("no verdict", "no verdict", "NOT met")),  # the peer's
        (_rows(2.0, 2.6, kit_acc=0.806), (CORES + 1.0,), ("no verdict", "no verdict", "met")),  # loaded
        (_rows(2.0, 2.6, float("nan"), float("nan")), (0.5,), ("met", "not reached", "NOT met")),
        (_rows(2.0, 2.6, 9.0, float("nan")), (0.5,), ("met", "met", "NOT met")),  # only kit reached it
    ],
    ids=["kit-faster", "kit-sooner", "kit-baseline-slowed", "peer-baseline-slowed", "loaded", "neither", "kit-only"],
)
def test_goal_lines(rows, load, expected):
    lines = list(goals(rows, load).values())
    assert [line.startswith(e) for line, e in zip(lines, expected)] == [True] * 3, lines
    assert len(lines) == 3 and f"time_to_{TARGET}_s <= TorchDistributor's" in goals(rows, load)


def test_no_peer_no_goals():
    assert goals(_rows(1.0, 1.0)[:1]) == {"all": "not compared: TorchDistributor did not run"}


def test_no_kit_row_no_goals_and_says_which():
    assert goals(_rows(1.0, 1.0)[1:]) == {"all": "not compared: kit gang, every step did not run"}


@pytest.mark.parametrize(
    ("default", "single", "expected"),
    [(0.845, 0.847, "met"), (0.842, 0.847, "met"), (0.819, 0.847, "NOT met"), (0.86, 0.847, "met")],
    ids=["within", "at-the-edge", "restarted-updater", "above"],
)
def test_the_defaults_goal_reads_the_default_row_against_network_fit(default, single, expected):
    rows = [
        *_rows(2.0, 2.6),
        {"system": DEFAULT_ROW, "final_accuracy": default},
        {"system": SINGLE_ROW, "final_accuracy": single},
    ]
    line = goals(rows)["defaults' final_accuracy >= Network.fit's - 0.005"]
    assert line.startswith(expected) and f"({default:.4g} vs {single:.4g})" in line, line
    assert "defaults' final_accuracy >= Network.fit's - 0.005" in goals(rows[2:])  # without TorchDistributor too
    assert not any(k.startswith("defaults'") for k in goals(_rows(2.0, 2.6)))  # no default row: no line
