"""The Spark side-by-side's goal lines follow kit's one rule: no timing verdict from a run other
processes loaded (the run's own Spark and PyTorch processes are not others) or from a slowed baseline
(a negative sync overhead); the seeded accuracies always get one."""

import numpy as np
import pytest

from kit.bench.spark_peers import (
    DEFAULT_ROW,
    SINGLE_ROW,
    TARGET,
    _kit_net,
    goals,
    mean_gap_interval,
    over_seeds,
    peers_table,
    timing_flag,
)
from kit.measurement.goals import FLAGGED, NO_VERDICT, median_interval
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
        {"system": DEFAULT_ROW, "overhead_ms": 2.0, "to_target_s": 9.0, "final_accuracy": default},
        {"system": SINGLE_ROW, "final_accuracy": single},
    ]
    line = goals(rows)["defaults' final_accuracy >= Network.fit's - 0.005"]
    assert line.startswith(expected) and f"({default:.4g} vs {single:.4g})" in line, line
    assert "defaults' final_accuracy >= Network.fit's - 0.005" in goals(rows[2:])  # without TorchDistributor too
    assert not any(k.startswith("defaults'") for k in goals(_rows(2.0, 2.6)))  # no default row: no line


def _defaults(overhead, to_target, accuracy):
    return {"system": DEFAULT_ROW, "overhead_ms": overhead, "to_target_s": to_target, "final_accuracy": accuracy}


PEER = (8.0, 0.81)  # TorchDistributor's time to the target and final accuracy in the rows below


@pytest.mark.parametrize(
    ("defaults", "peer", "load", "expected"),
    [
        # issue 44's own table (TorchDistributor: +2.6 ms, 0.82 after 20.7 s, 0.862; the defaults below)
        (_defaults(22.5, 66.3, 0.819), (20.7, 0.862), QUIET, ("NOT met", "NOT met", "NOT met")),
        (_defaults(2.3, 4.8, 0.860), PEER, QUIET, ("met", "met", "met")),  # what the gang defaults do
        (_defaults(2.3, 4.8, 0.805), PEER, QUIET, ("met", "met", "met")),  # at the edge: 0.81 - 0.005
        (_defaults(2.3, 4.8, 0.804), PEER, QUIET, ("met", "met", "NOT met")),
        (_defaults(2.3, 4.8, 0.860), PEER, OTHERS_BUSY, ("no verdict", "no verdict", "met")),  # timings say nothing
        (_defaults(-1.0, 4.8, 0.860), PEER, QUIET, ("no verdict", "no verdict", "met")),  # kit's baseline slowed
        (_defaults(2.3, float("nan"), 0.860), PEER, QUIET, ("met", "NOT met", "met")),  # never reached 0.82
    ],
    ids=["issue-44-table", "gang-defaults", "at-the-edge", "just-under", "others-busy", "baseline-slowed", "unreached"],
)
def test_the_defaults_row_is_read_against_torchdistributor_as_the_issue_s_table_read_it(defaults, peer, load, expected):
    rows = [*_rows(2.0, 2.6, 9.0, peer[0], 0.80, peer[1]), defaults]
    lines = goals(rows, load)
    keys = [k for k in lines if k.startswith("defaults'") and "TorchDistributor" in k]
    assert keys == [
        "defaults' overhead_per_step_ms <= TorchDistributor's",
        f"defaults' time_to_{TARGET}_s <= TorchDistributor's",
        "defaults' final_accuracy >= TorchDistributor's - 0.005",
    ]
    assert [lines[k].startswith(e) for k, e in zip(keys, expected)] == [True] * 3, lines
    figures = f"({defaults['final_accuracy']:.4g} vs {rows[1]['final_accuracy']:.4g})"
    assert figures in lines[keys[2]], lines
    # the gang every step keeps its own three lines beside them
    assert {k: lines[k] for k in goals(rows[:2], load)} == goals(rows[:2], load)


def _seeded(kit, peer, column="overhead_ms"):
    """The two rows over seeds (over_seeds), `column` taking each seed's value from the lists."""
    runs = []
    for k, p in zip(kit, peer):
        rows = _rows(2.0, 2.6)
        rows[0].update({"call_s": 1.0, "per_step_ms": 3.0, "to_target_s": 9.0, column: k})
        rows[1].update({"call_s": 1.0, "per_step_ms": 3.0, "to_target_s": 9.0, column: p})
        runs.append(rows)
    return over_seeds(runs)


@pytest.mark.parametrize(
    ("column", "kit", "peer", "starts"),
    [
        ("overhead_ms", [2.0, 2.1, 2.2], [2.6, 2.5, 2.7], "met"),  # every seed's pair met
        ("overhead_ms", [2.8, 2.9, 3.0], [2.6, 2.5, 2.7], "NOT met"),
        ("overhead_ms", [2.0, 2.6, 2.4], [2.6, 2.4, 2.5], "within the spread"),  # pairs on both sides
        # ten seeds, one pair the other way: the gaps' median within its 2nd to 9th lowest (98 %), all below 0
        (
            "overhead_ms",
            [3.5, 3.4, 4.3, 3.6, 3.7, 3.3, 3.9, 3.8, 3.6, 3.4],
            [4.1, 4.7, 4.0, 4.4, 4.5, 5.6, 4.9, 4.7, 4.4, 4.2],
            "met",
        ),
        (
            "overhead_ms",
            [3.5, 3.4, 4.3, 4.6, 4.7, 3.3, 3.9, 3.8, 3.6, 3.4],
            [4.1, 4.7, 4.0, 4.4, 4.5, 5.6, 4.9, 4.7, 4.4, 4.2],
            "within the spread",
        ),
        ("overhead_ms", [1.0, 2.0, 3.0], [2.6, 2.5, 2.7], NO_VERDICT),  # kit's spread ±50 %
        ("overhead_ms", [2.0, 2.1, 2.2], [2.0, 3.0, 4.0], NO_VERDICT),  # the peer's ±33 %
        ("to_target_s", [15.2, 6.2, 6.8], [22.8, 22.7, 19.2], "met"),  # ±67 %: a seed's curve, a cold first fit
        ("to_target_s", [9.0, 9.5, 9.2], [20.0, 30.0, 9.0], "within the spread"),  # the pairs decide
        ("final_accuracy", [0.860, 0.861, 0.862], [0.855, 0.856, 0.857], "met"),  # the gap's interval above -0.005
        ("final_accuracy", [0.852, 0.861, 0.861], [0.856, 0.854, 0.849], "within the spread"),  # the interval across
        ("final_accuracy", [0.840, 0.841, 0.842], [0.855, 0.856, 0.857], "NOT met"),
    ],
    ids=[
        "met",
        "not-met",
        "straddles",
        "ten-seeds-one-pair-the-other-way",
        "ten-seeds-three-pairs-the-other-way",
        "kit-spread",
        "peer-spread",
        "target-wide-but-paired",
        "target-pairs-straddle",
        "acc-met",
        "acc-straddles",
        "acc-not-met",
    ],
)
def test_a_goal_over_seeds_pairs_each_seeds_runs(column, kit, peer, starts):
    ours, theirs = _seeded(kit, peer, column)
    key = {
        "overhead_ms": "overhead_per_step_ms <= TorchDistributor's",
        "to_target_s": f"time_to_{TARGET}_s <= TorchDistributor's",
        "final_accuracy": "final_accuracy >= TorchDistributor's - 0.005",
    }[column]
    line = goals([ours, theirs], QUIET)[key]
    assert line.startswith(starts), line
    if starts == NO_VERDICT:
        assert FLAGGED in line and "spread over the seeds" in line, line
    elif column == "final_accuracy":  # seeds do not pair across frameworks: Welch's interval of the means' gap
        lo, hi = mean_gap_interval(kit, peer)
        assert f"95% interval {lo:+.3g} to {hi:+.3g}" in line and lo < np.mean(kit) - np.mean(peer) < hi, line
        assert ours[column] == pytest.approx(np.mean(kit))  # the mean
    else:  # a seed's two runs ran back to back: they pair, each pair shown
        gaps = [a - b for a, b in zip(kit, peer)]
        assert f"per seed {', '.join(f'{g:+.3g}' for g in gaps)}" in line, line
        lo, hi, _ = median_interval(gaps)
        assert f"their median within {lo:+.3g} to {hi:+.3g}" in line, line
        assert ours[column] == pytest.approx(float(np.median(kit)))  # the median


@pytest.mark.timeout(300)
def test_the_side_by_side_over_two_seeds_runs_each_system_once_a_seed(sc):
    """Network.fit alone (the cheapest row), seeds 0 and 1: the row holds both seeds' figures, each
    seed's network starts elsewhere, and the first seed's per-example results are kept."""
    peers = peers_table(sc, quick=True, systems=(), size=(256, 128), seeds=2)
    (single,) = peers["rows"]
    assert single["system"] == SINGLE_ROW and peers["seeds"] == 2
    assert all(len(v) == 2 for v in single["per_seed"].values()), single["per_seed"]
    assert single["final_accuracy"] == pytest.approx(np.mean(single["per_seed"]["final_accuracy"]))
    assert list(peers["right"]) == [SINGLE_ROW] and peers["right"][SINGLE_ROW].shape == (128,)
    first, second = (_kit_net(seed).params().numpy() for seed in (0, 1))
    assert not np.array_equal(first, second)  # the seed reaches the network
