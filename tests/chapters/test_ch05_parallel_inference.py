"""Chapter 5, read against what runs: a follow-up sentence follows the verdict above it; every figure
computed from a timing carries that timing's flag; the NumPy forward computes in the network's
dtype; the reference sentence sets no float64 figure beside this run. Each test runs the chapter's
own cells on constructed timings, one per branch, and reads what they display."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import numpy as np
import pytest
from _chapter_cells import cell as _cell
from _chapter_cells import run as _run

from kit import measure, prose
from kit.measurement.measure import Timing
from kit.measurement.tables import Table
from kit.parallel import InferenceMode

CH5 = "05_parallel_inference.ipynb"
SEQ, BAT = InferenceMode.SEQUENTIAL, InferenceMode.BATCHED


def _sweep(seconds: dict[tuple, list[float]], batches: dict[int, float], load: float = 0.0):
    t = {cfg: Timing(str(cfg), s, 1, load) for cfg, s in seconds.items()}
    table = {(m, c): (100.0, t[m, c].spread, 1.0, 2.0, batches[c] if m is BAT else 1.0) for (m, c) in seconds}
    return t, table


@pytest.mark.parametrize(
    ("bat_1", "load", "said"),
    [
        ([0.020, 0.021, 0.019], 0.0, "the two modes were the same within the spread there, as expected"),
        ([0.010, 0.0101, 0.0099], 0.0, "so batching cannot explain the difference the verdict above found there"),
        ([0.020, 0.021, 0.019], 0.9, "the verdict above draws no conclusion there"),
    ],
    ids=["same", "apart", "flagged"],
)
def test_ch5_batches_of_one_follow_the_verdict(bat_1, load, said):
    seconds = {
        (SEQ, 1): [0.020, 0.0205, 0.0195],
        (BAT, 1): bat_1,
        (SEQ, 64): [1.2, 1.25, 1.22],
        (BAT, 64): [0.7, 0.69, 0.71],
    }
    t, table = _sweep(seconds, {1: 1.0, 64: 15.6}, load)
    shown = _run(
        _cell(CH5, "sweep_t = t"), t=t, table=table, clients_list=[1, 64], requests=100, InferenceMode=InferenceMode
    )
    follow = [s for s in shown if "each batch held one request" in s]
    assert len(follow) == 1, shown
    branches = ("same within the spread there", "cannot explain", "draws no conclusion there")
    assert [b for b in branches if b in follow[0]] == [b for b in branches if b in said]
    # the verdict the follow-up reads is the one displayed above it
    verdict = shown[0]
    if "same within the spread there" in said:
        assert "the same within the spread of the repeats" in verdict
    elif "cannot explain" in said:
        assert "x faster" in verdict
    else:
        assert verdict.startswith("No conclusion")


@pytest.mark.parametrize(
    ("async_seq", "async_bat", "said"),
    [
        ([1 / 5000] * 3, [1 / 9000] * 3, "and neither mode moved beyond them"),
        ([1 / 5000] * 3, [1 / 17000] * 3, "why BATCHED moved as it did is not measured here"),
        ([1 / 10000] * 3, [1 / 17000] * 3, "why BATCHED and SEQUENTIAL moved as they did is not measured here"),
    ],
    ids=["neither", "one", "both"],
)
def test_ch5_asyncio_gives_no_reason_for_a_move_it_did_not_find(async_seq, async_bat, said):
    modes = (SEQ, BAT)
    sweep_t = {(SEQ, 64): Timing("s", [1.0, 1.05, 0.97], 1), (BAT, 64): Timing("b", [1.0, 1.04, 0.98], 1)}
    timing = {SEQ: Timing("SEQUENTIAL", async_seq, 6400), BAT: Timing("BATCHED", async_bat, 6400)}
    table = {(SEQ, 64): (5000.0,), (BAT, 64): (9000.0,)}
    shown = _run(
        _cell(CH5, "# asyncio tasks against"),
        timing=timing,
        sweep_t=sweep_t,
        table=table,
        modes=modes,
        InferenceMode=InferenceMode,
    )
    assert said in shown[0], shown[0]
    if "neither" in said:
        assert "not measured here" not in shown[0]


# every figure from a timing carries the timing's flag


BUSY = 0.9  # other processes' share of the CPU: over kit.measure's LOAD_LIMIT


FLAG = measure.FLAGGED  # " (flagged)"


def _timing(name: str, seconds: list[float], number: int = 1, load: float = 0.0) -> Timing:
    return Timing(name, seconds, number, load)


def _exec(source: str, **names) -> dict:
    """Run a chapter cell's `source` with `names`; its namespace after (what it displayed under "shown")."""
    shown: list[str] = []
    env = {"display": lambda x: shown.append(str(x)), "prose": prose, "measure": measure, **names, "shown": shown}
    exec(compile(source, "<chapter cell>", "exec"), env)
    return env


@pytest.mark.parametrize("load", [0.0, BUSY], ids=["clean", "flagged"])
def test_ch5_throughput_ratios_carry_the_flag_of_their_timings(load, capsys):
    modes = (SEQ, BAT)
    per_request = {SEQ: [1 / 4500, 1 / 4600, 1 / 4400], BAT: [1 / 16000, 1 / 15500, 1 / 16500]}
    timing = {m: _timing(m.value, per_request[m], 6400, load) for m in modes}
    sweep_t = {(SEQ, 64): _timing("s", [1.75, 1.8, 1.7]), (BAT, 64): _timing("b", [0.94, 0.95, 0.93])}
    table = {(SEQ, 64): (3665.0,), (BAT, 64): (6797.0,)}
    b64 = 6797.0 / 3665.0
    env = dict(
        modes=modes,
        timing=timing,
        sweep_t=sweep_t,
        table=table,
        per_request=per_request,
        b64_threads=b64,
        InferenceMode=InferenceMode,
        statistics=statistics,
    )
    _run(_cell(CH5, "# the throughput ratios of the two runs"), **env)
    out = capsys.readouterr().out.replace("\n  ", " ")
    ratios = [s / b for s, b in zip(per_request[SEQ], per_request[BAT])]
    flagged = [f"{1 / timing[m].median / table[m, 64][0]:.2f}" for m in modes]
    flagged += [f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}-{max(ratios):.2f}"]
    assert f"threads {b64:.2f} (the ratio" in out  # section 2's timings are clean: its ratio stands
    for figure in flagged:
        assert (figure + FLAG in out) == bool(load), (figure, out)
    assert ("(flagged): computed from a timing kit.measure flagged" in out) == bool(load)


@pytest.mark.parametrize("flagged", [[], ["plan.output (planned)"], ["hand-written NumPy"]])
def test_ch5_forward_ratios_carry_the_flag_of_their_timings(flagged, capsys):
    names = ["net.output (unplanned)", "plan.output (planned)", "hand-written NumPy"]
    tf = {
        n: _timing(n, [s, s * 1.01, s * 0.99], 10_000, BUSY if n in flagged else 0.0)
        for n, s in zip(names, [49e-6, 44e-6, 36e-6])
    }
    _run(_cell(CH5, "# the forwards' medians as ratios"), tf=tf, net=SimpleNamespace(dtype=np.dtype("float32")))
    out = capsys.readouterr().out
    planned, unplanned = 44 / 36, 49 / 36
    assert (f"= {planned:.2f}{FLAG};" in out) == bool(flagged), out
    assert (f"= {unplanned:.2f}{FLAG}" in out) == ("hand-written NumPy" in flagged), out


@pytest.mark.parametrize("others", [0.0, BUSY], ids=["clean", "busy"])
def test_ch5_one_shot_runs_flag_their_figures_when_the_machine_was_busy(others, capsys):
    load_reading = SimpleNamespace(others=others)
    # section 4: the batch-limit table and the sentence under it
    per_limit = {1: (3991.0, 18.84, 1.0), 4: (6381.0, 13.43, 3.9), 16: (7128.0, 14.59, 10.2), 64: (6036.0, 17.03, 10.2)}
    largest = {1: 1, 4: 4, 16: 16, 64: 57}
    names = dict(per_limit=per_limit, largest=largest, limit_load=load_reading, Table=Table)
    env = _exec(_cell(CH5, "# the runs' table"), **names)
    table = env["shown"][0]
    for tput, p99, _ in per_limit.values():
        assert (f"{tput:.0f}{FLAG}" in table and f"{p99:.2f}{FLAG}" in table) == bool(others), table
    assert ("UNRELIABLE" in table) == bool(others)
    sentence = _run(_cell(CH5, "limits = sorted(per_limit)"), **names, limit_figure=env["limit_figure"])[0]
    for _, p99, _ in per_limit.values():
        assert (f"{p99:.2f} ms{FLAG}" in sentence) == bool(others), sentence
    # section 6: INPLACE's one run, printed and in its sentence
    lat = list(np.linspace(0.0001, 0.005, 200))
    inplace = {"inplace_load": load_reading, "lat": lat, "tput": 5073.0, "np": np, "replicas": 2}
    capsys.readouterr()
    env = _exec(_cell(CH5, "# one run: its figures carry the flag"), **inplace)
    printed = capsys.readouterr().out
    p50, p99 = np.percentile(lat, 50) * 1e3, np.percentile(lat, 99) * 1e3
    for figure in ("5073 req/s", f"{p50:.2f} ms", f"{p99:.2f} ms"):
        assert (figure + FLAG in printed) == bool(others), printed
    names = {k: v for k, v in env.items() if k not in ("display", "shown", "__builtins__")}
    said = _run(_cell(CH5, 'display(prose.sentence(\n    f"With 16 clients sharing'), **names)[0]
    assert (f"{p50:.2f} ms{FLAG}" in said and f"{p99:.2f} ms{FLAG}" in said) == bool(others), said


# like-for-like dtypes, and the sentences under the forwards


def test_ch5_numpy_forward_is_handed_the_network_s_dtype():
    """The chapter's cell: the NumPy side gets the example cast to the network's dtype and the
    cell asserts it (with float64 features, as the digits DataSet holds)."""
    import kit
    from kit.measurement.tables import Table
    from kit.nn import mlp

    source = _cell(CH5, "plan = net.plan_inference(batch_size=1)")
    assert "x1.astype(net.dtype)" in source and "numpy_forward(x1_same)" in source
    assert "numpy_forward(x1)" not in source
    net = mlp(64, hidden=(16,), n_out=10)
    features = np.random.default_rng(0).random((4, 64))  # float64, as the chapter's features
    env = {"net": net, "X": features, "np": np, "kit": kit, "QUICK": True, "Table": Table, "display": print}
    env.update(prose=prose, measure=measure)
    exec(compile(source, "<chapter cell>", "exec"), env)
    # the forward really computes in float32 on what it is handed
    assert env["numpy_forward"](env["x1_same"]).dtype == np.float32
    assert env["numpy_forward"](features[:1]).dtype == np.float64  # what the chapter timed before


def _forwards(unplanned, planned, numpy_):
    return {
        "net.output (unplanned)": Timing("net.output (unplanned)", unplanned, 1000),
        "plan.output (planned)": Timing("plan.output (planned)", planned, 1000),
        "hand-written NumPy": Timing("hand-written NumPy", numpy_, 1000),
    }


def test_ch5_bookkeeping_sentence_says_when_it_bought_nothing():
    source = _cell(CH5, "flags = prose.flags(list(tf.values()))")
    tied = _run(source, tf=_forwards([0.0413, 0.042, 0.041], [0.0411, 0.0415, 0.041], [0.03, 0.031, 0.0305]))
    assert "the same within the spread" in tied[0]
    assert "on this run that showed as no difference in time" in tied[-1]
    apart = _run(source, tf=_forwards([0.06, 0.061, 0.0605], [0.041, 0.0415, 0.0411], [0.03, 0.031, 0.0305]))
    assert "faster" in apart[0] and "no difference" not in apart[-1]


def test_ch5_reference_sentence_sets_no_float64_figure_beside_this_run():
    """The shipped H100 report holds the planned / NumPy ratio from a run whose NumPy side computed
    in float64: the chapter names that and quotes no ratio from it."""
    from kit import reference
    from kit.nn import mlp

    net = mlp(64, hidden=(16,), n_out=10)
    plan_name = f"planned / NumPy time per call, batch 1, both {net.dtype}"
    rps = "BATCHED requests per second, 64 clients"
    old_run = {
        "machine": {"gpu": "NVIDIA H100 80GB HBM3", "backend": "cupy"},
        "parts": {
            "chapters": {
                CH5: {
                    "mode": "quick (KIT_QUICK=1)",
                    "figures": {"planned / NumPy time per call, batch 1": 14.9, rps: 1734.0},
                }
            }
        },
    }
    ref = SimpleNamespace(
        rows=[["x", 1.0, 2.0], [plan_name, 1.1, None], [rps, 9893.0, 1734.0]], runs=[old_run], flagged=set()
    )
    import kit

    weights = [(np.ones((64, 16), np.float32), None)]
    source = _cell(CH5, "# What each row compares")
    (text,) = _run(
        source, ref=ref, reference=reference, kit=kit, net=net, Ws=weights, QUICK=True, PLAN=plan_name,
        REQUESTS_QUICK=30, REQUESTS_FULL=150,
    )  # fmt: skip
    assert "computed in float64" in text and "the next GPU run measures it again" in text
    assert "14.9" not in text and "three small matrix products" not in text
    # the throughput row's caveat is said whatever the planned / NumPy row holds (read 32: a `continue`
    # for the missing plan figure skipped it), and it draws no direction between the two runs
    assert "1,734 requests per second, comes from a quick-mode run" in text
    assert "They are not the same measurement, so no direction is drawn between the two." in text
    assert "orders of magnitude" not in text
