"""The Spark side-by-side's goal lines follow kit's one rule: no timing verdict from a run other
processes loaded (the run's own Spark and PyTorch processes are not others) or from a slowed baseline
(a negative sync overhead); the seeded accuracies always get one."""

import pytest

from kit.bench.spark_peers import DEFAULT_ROW, SINGLE_ROW, TARGET, goals, timing_flag
from kit.measurement.goals import FLAGGED, NO_VERDICT
from kit.measurement.load import LOAD_LIMIT, LoadReading

QUIET = LoadReading(cores=2, wall=60.0, others=0.02, own=0.1)
OTHERS_BUSY = LoadReading(cores=2, wall=60.0, others=0.6, own=0.4)  # another process took over a core
OWN_BUSY = LoadReading(cores=2, wall=60.0, others=0.03, own=0.97)  # its own two workers: load average >= 2


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
        (_rows(2.0, 2.6), QUIET, ("met", "NOT met", "NOT met")),
        (_rows(3.0, 2.6, 7.0), QUIET, ("NOT met", "met", "NOT met")),
        (_rows(-30.0, 2.6), QUIET, ("no verdict", "no verdict", "NOT met")),  # kit's baseline slowed
        (_rows(2.0, -1.0), QUIET, ("no verdict", "no verdict", "NOT met")),  # the peer's
        (_rows(2.0, 2.6, kit_acc=0.806), OTHERS_BUSY, ("no verdict", "no verdict", "met")),  # loaded by others
        (_rows(2.0, 2.6, kit_acc=0.806), OWN_BUSY, ("met", "NOT met", "met")),  # busy with its own work only
        (_rows(2.0, 2.6, float("nan"), float("nan")), QUIET, ("met", "not reached", "NOT met")),
        (_rows(2.0, 2.6, 9.0, float("nan")), QUIET, ("met", "met", "NOT met")),  # only kit reached it
    ],
    ids=[
        "kit-faster",
        "kit-sooner",
        "kit-baseline-slowed",
        "peer-baseline-slowed",
        "others-busy",
        "own-busy",
        "neither",
        "kit-only",
    ],
)
def test_goal_lines(rows, load, expected):
    lines = list(goals(rows, load).values())
    assert [line.startswith(e) for line, e in zip(lines, expected)] == [True] * 3, lines
    assert len(lines) == 3 and f"time_to_{TARGET}_s <= TorchDistributor's" in goals(rows, load)


@pytest.mark.parametrize(
    ("load", "verdict"),
    [
        (None, True),
        (QUIET, True),
        (OWN_BUSY, True),  # the bench's own workers at full load: still a verdict
        (LoadReading(cores=2, others=LOAD_LIMIT, own=0.9), True),  # at the limit
        (LoadReading(cores=2, others=LOAD_LIMIT + 0.01, own=0.0), False),
        (OTHERS_BUSY, False),
        (LoadReading(cores=64, others=0.5, own=0.01), False),  # many cores, half of them others'
    ],
    ids=["none", "quiet", "own-busy", "at-the-limit", "just-over", "others-busy", "many-cores"],
)
def test_the_load_flag_reads_other_processes_share_only(load, verdict):
    flag = timing_flag(load)
    assert (flag == "") == verdict, flag
    lines = goals(_rows(2.0, 2.6), load)
    timing = [v for k, v in lines.items() if "TorchDistributor's -" not in k]
    assert all(line.startswith(NO_VERDICT) != verdict for line in timing), lines
    assert all((FLAGGED in line) != verdict for line in timing), lines  # a flagged run's figures carry the flag
    if not verdict:
        assert "other processes used" in flag and "%" in flag, flag


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
