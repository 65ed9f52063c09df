"""kit.measure: autorange, interleaving, spread, load readings and the verdicts (no timing asserted)."""

import hashlib
import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import psutil
import pytest

from kit import measure


def test_autorange_reaches_the_minimum_time_with_the_fewest_calls():
    calls = []
    assert measure.autorange(lambda: calls.append(1), min_time=0.02) >= 10  # a no-op needs many calls
    slow = measure.autorange(lambda: time.sleep(0.03), min_time=0.02)
    assert slow == 1  # one call already lasts long enough
    with pytest.raises(ValueError, match="min_time"):
        measure.autorange(lambda: None, min_time=0)


def test_compare_interleaves_and_rotates_the_order():
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in "abc"}
    out = measure.compare(fns, repeats=3, number=1, warmup=False)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert {k: len(t.seconds) for k, t in out.items()} == {"a": 3, "b": 3, "c": 3}
    same = measure.compare(fns, repeats=2, min_time=0.001, same_number=True)
    assert len({t.number for t in same.values()}) == 1
    with pytest.raises(ValueError, match="repeats"):
        measure.compare(fns, repeats=0)
    with pytest.raises(ValueError, match="at least one variant"):
        measure.compare({})


def test_compare_in_slices_runs_the_variants_part_by_part_in_turn():
    """`slices`: each variant's calls of a repeat in parts, the variants taking turns part by part
    (a call of microseconds meets the machine at the same moments as the variants beside it)."""
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in "ab"}
    out = measure.compare(fns, repeats=2, number=4, warmup=False, slices=2)
    assert order == list("aabbaabb" + "bbaabbaa")  # the order rotated per repeat, as without slices
    assert {k: (t.number, len(t.seconds)) for k, t in out.items()} == {"a": (4, 2), "b": (4, 2)}


@pytest.mark.parametrize(("number", "slices"), [(5, 3), (2, 4), (7, 1), (1, 1), ({"a": 6, "b": 1}, 3)])
def test_slices_add_up_to_the_calls_of_a_repeat_whatever_they_divide(number, slices):
    calls = {"a": 0, "b": 0}
    fns = {k: (lambda k=k: calls.__setitem__(k, calls[k] + 1)) for k in calls}
    out = measure.compare(fns, repeats=3, number=number, warmup=False, slices=slices)
    expected = number if isinstance(number, dict) else dict.fromkeys(calls, number)
    assert calls == {k: 3 * n for k, n in expected.items()}
    assert {k: t.number for k, t in out.items()} == expected


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "3", None])
def test_compare_refuses_slices_that_are_no_count_of_parts(bad):
    with pytest.raises(ValueError, match=re.escape(f"compare(slices={bad!r}): must be a whole number of parts")):
        measure.compare({"a": lambda: None}, repeats=1, number=1, slices=bad)


def test_median_spread_and_flags_follow_the_numbers():
    t = measure.Timing("x", [1.0, 1.1, 0.9, 1.0, 1.0], number=1, load=0.0)
    assert t.median == 1.0 and t.spread == pytest.approx(0.1) and t.reliable
    assert "±10%" in str(t) and "UNRELIABLE" not in str(t)
    wide = measure.Timing("x", [1.0, 2.0, 0.5], number=1)
    assert not wide.reliable and "spread" in wide.warnings[0]
    busy = measure.Timing("x", [1.0, 1.0], number=1, load=0.6)
    assert not busy.reliable and "60%" in busy.warnings[0] and "UNRELIABLE" in str(busy)


def test_speedup_above_the_device_count_is_flagged():
    assert measure.speedup_warnings(1.8, 2) == []
    assert measure.speedup_warnings(2.01, 2) == []  # within timer tolerance
    flagged = measure.speedup_warnings(9.0, 2, shared=True)
    assert any("exceeds the 2 device" in w for w in flagged) and any("efficiency 4.50 > 1" in w for w in flagged)
    assert measure.speedup_warnings(3.0, 4, shared=True, cores=2)  # 4 slots cannot beat 2 shared cores


def test_load_reading_sees_a_busy_competing_process():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        with measure.machine_load() as load:
            time.sleep(1.0)  # this process idles; the spinner runs
    finally:
        spinner.kill()
        spinner.wait()
    assert load.wall >= 1.0
    assert load.busy_cores > 0.3  # a spinning process gets well over a third of a core in a second
    assert load.own < 0.05


# ---------------------------------------------------------------------------------------
# the load check against real processes: children (reaped or running), own threads, idle

# burns argv[1] seconds of CPU time (not wall time: the same work however loaded the machine is)
BURN = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < float(sys.argv[1]): pass"
# burns argv[1] s, says "ready", waits for a line on stdin, then burns argv[2] s and exits
BURN_READY_GO = (
    "import sys, time\n"
    "def burn(s):\n    t = time.process_time()\n    while time.process_time() - t < s: pass\n"
    "burn(float(sys.argv[1]))\nprint('ready', flush=True)\nsys.stdin.readline()\nburn(float(sys.argv[2]))"
)


def _system_busy() -> float:
    """The whole machine's busy CPU seconds, written independently of kit.measure: everything
    in /proc/stat but idle, iowait and guest time (guest is already inside user)."""
    c = psutil.cpu_times()
    left_out = ("idle", "iowait", "guest", "guest_nice")
    return sum(c) - sum(getattr(c, k, 0.0) for k in left_out)


def _own() -> float:
    """This process's own CPU seconds (all threads, no children)."""
    t = os.times()
    return t.user + t.system


def _children() -> float:
    """CPU seconds of this process's reaped children."""
    t = os.times()
    return t.children_user + t.children_system


@dataclass
class Bracket:
    """Independent readings just outside and just inside a `machine_load()` window. Since the
    inner window lies within the load window and the outer one around it, the other processes'
    CPU seconds the load window saw lie between `lower` = busy(inner) - own(outer) and `upper` =
    busy(outer) - own(inner), whatever else the machine runs meanwhile."""

    load: measure.LoadReading
    lower: float = 0.0
    upper: float = 0.0

    @property
    def counted(self) -> float:
        """Other processes' CPU seconds as the load reading reports them."""
        return self.load.others * self.load.cores * self.load.wall

    @property
    def own(self) -> float:
        return self.load.own * self.load.cores * self.load.wall

    @property
    def tolerance(self) -> float:
        # /proc/stat counts 10 ms ticks per CPU: a tick or two per CPU at each end of a window
        return 0.05 + 0.02 * self.load.cores


@contextmanager
def bracketed():
    busy0, own0 = _system_busy(), _own()
    with measure.machine_load() as load:
        b = Bracket(load)
        ibusy0, iown0 = _system_busy(), _own()
        yield b
        ibusy1, iown1 = _system_busy(), _own()
    busy1, own1 = _system_busy(), _own()
    b.lower = (ibusy1 - ibusy0) - (own1 - own0)
    b.upper = (busy1 - busy0) - (iown1 - iown0)
    assert b.lower - b.tolerance <= b.counted <= b.upper + b.tolerance, (b.lower, b.counted, b.upper)


def test_children_reaped_inside_the_block_count_as_other_load_and_flag_the_run():
    """Regression: a child's CPU time used to be subtracted as this process's own once it was
    reaped, so a block that ran children read as an idle machine. One CPU-bound child per core
    keeps every core busy with processes other than this one (the children, or whatever outside
    load slows them down) while this process only waits: the run must read far above the limit."""
    cores = psutil.cpu_count() or 1

    def block():
        children = [subprocess.Popen([sys.executable, "-c", BURN, "0.4"]) for _ in range(cores)]
        time.sleep(0.1)  # the block also waits, beside its children
        for child in children:
            assert child.wait() == 0  # reaped inside the block

    reaped0 = _children()
    with bracketed() as b:
        block()
    reaped = _children() - reaped0
    assert reaped >= 0.4 * cores
    assert b.counted >= reaped - b.tolerance  # every second the children ran counts as other load
    assert b.load.others > measure.LOAD_LIMIT
    timing = measure.measure(block, "children", number=1, repeats=1, warmup=False)
    assert timing.load > measure.LOAD_LIMIT and not timing.reliable
    assert timing.warnings[0].startswith("machine busy: other processes used")


def test_load_with_a_child_reaped_that_ran_mostly_before_the_block():
    """A child that burned 0.5 s before the block and 0.3 s inside it, reaped inside: its 0.8 s
    used to be subtracted from the 0.3 s the machine saw, hiding everything else running."""
    child = subprocess.Popen(
        [sys.executable, "-c", BURN_READY_GO, "0.5", "0.3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        with bracketed() as b:
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.wait() == 0  # at least 0.3 s of its CPU time lies inside the block
    finally:
        child.kill()
        child.wait()
    assert b.counted >= 0.3 - b.tolerance


def test_load_counts_a_child_still_running_at_the_end_of_the_block():
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        ps = psutil.Process(child.pid)
        with bracketed() as b:
            t0 = sum(ps.cpu_times()[:2])
            while sum(ps.cpu_times()[:2]) - t0 < 0.3:  # until it ran 0.3 s of CPU inside the block
                time.sleep(0.02)
            ran = sum(ps.cpu_times()[:2]) - t0
    finally:
        child.kill()
        child.wait()
    assert b.counted >= ran - b.tolerance
    assert b.own < b.tolerance  # this process only polled


def test_this_processs_busy_threads_are_its_own_load_not_other_processes():
    """Threads that burn CPU in parallel (hashlib lets go of the GIL) are this process's time:
    counted in `own`, and kept out of `others` (at most the machine's busy time minus them)."""
    cores = psutil.cpu_count() or 1
    data = bytes(1 << 20)

    def burn():
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.3:
            hashlib.sha256(data).digest()

    with bracketed() as b:
        threads = [threading.Thread(target=burn) for _ in range(cores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert b.own >= 0.3 * cores - b.tolerance
    # the bracket's upper bound already takes the threads' >= 0.3 s x cores out of the machine's busy time
    assert b.counted <= b.upper + b.tolerance


def test_an_idle_block_reads_no_load_of_its_own():
    with bracketed() as b:
        time.sleep(0.3)
    assert b.own < b.tolerance
    assert 0.0 <= b.load.others <= 1.0 and b.load.wall >= 0.3


def test_format_seconds():
    assert measure.format_seconds(1.5) == "1.5 s"
    assert measure.format_seconds(0.0123) == "12.3 ms"
    assert measure.format_seconds(4.2e-6) == "4.2 µs"


def test_machine_load_counts_children_as_ours_only_when_asked():
    """A child process burns a fixed amount of CPU inside the block and stays alive until the
    block has ended. By default its work is other processes' load; with children_are_ours it is
    this process's own. CPU seconds, not wall time: the assertion holds on a busy machine."""
    import subprocess
    import sys

    burn = 0.3
    child_code = (
        "import sys, time\n"
        f"while time.process_time() < {burn}: pass\n"
        "print('done', flush=True)\n"
        "sys.stdin.read()\n"  # alive until the parent closes stdin
    )
    readings = {}
    for ours in (False, True):
        child = subprocess.Popen(
            [sys.executable, "-c", child_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            with measure.machine_load(children_are_ours=ours) as load:
                assert child.stdout.readline().strip() == "done"
            readings[ours] = load
        finally:
            child.stdin.close()
            child.wait(timeout=30)
    for ours, load in readings.items():
        own_seconds = load.own * load.wall * load.cores
        if ours:
            assert own_seconds >= burn * 0.9, (own_seconds, load)  # the child's burn counted as ours
        else:
            assert own_seconds < burn * 0.5, (own_seconds, load)  # the parent only waited on a pipe
            assert load.others * load.wall * load.cores >= burn * 0.9 - 0.05  # the child's burn is others'


def test_mark_flagged_marks_a_flagged_panel_and_leaves_a_clean_one_alone():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kit.measurement.measure import FLAGGED_TITLE, Timing, mark_flagged

    clean = {"a": Timing("a", [1.0, 1.01, 1.02], 1), "b": Timing("b", [2.0, 2.01, 2.02], 1)}
    noisy = {"c": Timing("c", [1.0, 3.0, 2.0], 1), "d": Timing("d", [1.0, 1.0, 1.0], 1, load=0.9)}
    # (timings, flagged at all, the whole panel refused and faded)
    for timings, flagged, whole in ((clean, False, False), (noisy, True, True), ({**clean, **noisy}, True, False)):
        _, ax = plt.subplots()
        bars = ax.bar([0, 1], [1, 2])
        ax.set_title("time per step")
        assert mark_flagged(ax, timings) is flagged
        title = ax.get_title()
        assert (FLAGGED_TITLE in title) is whole and title.startswith("time per step")
        assert all((p.get_alpha() or 1.0) < 1.0 for p in bars.patches) is whole
        if flagged and not whole:  # some flagged: the title names them, and only them; the clean ones stand
            named = " ".join(title.split())
            assert "flagged by kit.measure: c and d; read no time from them" in named
            assert not re.search(r"\ba\b", named)  # the clean one is not named
        plt.close("all")
    # measure.compare names each Timing by its key, which may be a number (ch4: the frequencies F)
    _, ax = plt.subplots()
    by_f = {1: Timing(1, [1.0, 1.01, 1.02], 1), 20: Timing(20, [1.0, 3.0, 2.0], 1)}
    assert mark_flagged(ax, by_f) and "flagged by kit.measure: 20; read no time from it" in ax.get_title()
    plt.close("all")


def test_a_flagged_timing_prints_its_flag_on_wrapped_lines_of_its_own():
    from kit.measurement.measure import Timing

    t = Timing("x", [1.0, 2.0, 1.5], 3, load=0.7)
    lines = str(t).splitlines()
    assert lines[0].startswith("1.5 s per call ±33%") and "UNRELIABLE" not in lines[0]
    assert lines[1].startswith("  UNRELIABLE: machine busy") and all(len(line) <= 100 for line in lines)
    assert " ".join(part.strip() for part in lines[1:]) == "UNRELIABLE: " + "; ".join(t.warnings)


@pytest.mark.parametrize("spread", [0.2, 0.2449, 0.2496, 0.25, 0.25004, 0.2504, 0.2549, 0.26])
def test_a_printed_spread_falls_on_the_same_side_of_the_limit_as_the_flag(spread):
    """A spread just over ±25 % is flagged; printed whole it would read "±25%", the limit itself. Every
    place kit prints a spread goes through format_spread, which keeps the decimals that tell."""
    base = 1.0
    t = measure.Timing("t", [base * (1 - spread), base, base * (1 + spread)], 1)
    shown = float(measure.format_spread(t.spread).strip("±%"))
    assert (shown > measure.SPREAD_LIMIT * 100) == (not t.reliable) == (t.spread > measure.SPREAD_LIMIT)
    if not t.reliable:
        assert measure.format_spread(t.spread) in str(t) and measure.format_spread(t.spread) in t.warnings[0]


@pytest.mark.parametrize("load", [0.1, 0.2, 0.20004, 0.2004, 0.21])
def test_a_printed_load_falls_on_the_same_side_of_the_limit_as_the_flag(load):
    shown = float(measure.format_load(load).strip("%"))
    assert (shown > measure.LOAD_LIMIT * 100) == (load > measure.LOAD_LIMIT)


def test_no_spread_or_load_is_printed_whole_by_hand():
    """The class, swept: in kit's source and in every chapter's code, a spread or a load is printed
    through format_spread / format_load, never with a bare `:.0%` that can round a flagged value onto
    the limit."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bare = re.compile(r"\{[^{}]*(spread|load|others)[^{}]*:\.0%\}")
    texts = {p: p.read_text() for p in (root / "kit").rglob("*.py")}
    for nb in (root / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        texts[nb] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    found = [
        f"{path.relative_to(root)}: {m.group(0)}"
        for path, text in texts.items()
        for m in bare.finditer(text)
        if "LIMIT" not in m.group(0)
    ]
    assert not found, "print these with measure.format_spread / format_load:\n" + "\n".join(found)


def test_tuple_keys_of_compare_read_as_words_in_every_flag_and_sentence():
    """measure.compare names each Timing by its key; ch5's keys are (InferenceMode, clients)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kit import prose
    from kit.measurement.measure import Timing, join_labels, label, mark_flagged
    from kit.parallel import InferenceMode

    key = (InferenceMode.BATCHED, 4)
    assert label(key) == "BATCHED, 4" and label(7) == "7" and label("plain") == "plain"
    assert join_labels(["a"]) == "a" and join_labels(["a", "b", "c"]) == "a, b and c"
    assert join_labels([key, (InferenceMode.SEQUENTIAL, 4), "x"]) == "BATCHED, 4; SEQUENTIAL, 4 and x"
    busy = {k: Timing(k, [1.0, 1.01, 1.02], 1, load=0.6) for k in [key, (InferenceMode.SEQUENTIAL, 16)]}
    clean = Timing((InferenceMode.SEQUENTIAL, 1), [2.0, 2.01, 2.02], 1)
    (flag,) = prose.flags(list(busy.values()))
    assert flag.startswith("BATCHED, 4 and SEQUENTIAL, 16: machine busy"), flag
    _, ax = plt.subplots()
    assert mark_flagged(ax, [*busy.values(), clean])
    assert "flagged by kit.measure: BATCHED, 4 and SEQUENTIAL, 16; read no time from them" in " ".join(
        ax.get_title().split()
    )
    plt.close("all")
    fast = Timing(key, [1.0, 1.01, 1.02], 1)
    said = prose.compare_timings(fast, clean)
    assert said.startswith("**BATCHED, 4** took") and "**SEQUENTIAL, 1**" in said and "InferenceMode" not in said


def test_compare_runs_as_many_untimed_calls_as_warmup_says_and_counts_them_in_its_progress():
    """A workload whose workspaces learn over several cycles (SEPARATE: two) needs more than one
    untimed call, or its first timed repeat carries the learning (ResNet-18's took twice a step)."""
    calls, seen = {"a": 0, "b": 0}, []

    def fn(k):
        return lambda: calls.__setitem__(k, calls[k] + 1)

    measure.compare(
        {k: fn(k) for k in calls}, repeats=2, number=1, warmup=3, progress=lambda d, t, n: seen.append((d, t))
    )
    assert calls == {"a": 3 + 2, "b": 3 + 2}  # 3 untimed + 2 timed repeats of 1 call
    assert seen[-1] == (2 * (3 + 2), 2 * (3 + 2))
    calls.update(a=0, b=0)
    measure.compare({k: fn(k) for k in calls}, repeats=2, number=1, warmup=False)
    assert calls == {"a": 2, "b": 2}
    calls.update(a=0, b=0)
    measure.compare({k: fn(k) for k in calls}, repeats=1, number=1, warmup=np.int64(2))  # a NumPy count too
    assert calls == {"a": 3, "b": 3}
    for bad in (-1, 1.5, "3", None):
        with pytest.raises(ValueError, match=r"compare\(warmup="):
            measure.compare({"a": fn("a")}, repeats=1, number=1, warmup=bad)


# a figure from a flagged measurement carries the flag, and no goal gives it a verdict


VERDICTS = ("-> met", "-> NOT met", "not shown either way")


GOAL_FORMS = [
    ("<=", 1.3, 2.0, None, None),
    ("<=", 2.5, 1.5, None, None),
    (">=", 4.0, 3.0, (3.5, 4.5), None),
    ("<", 1.06, 1.0, (0.9, 1.2), None),
    (">", 0.9, 1.0, None, [0.8, 0.85, 0.9, 0.95, 1.1]),
    ("<=", 1.02, 1.03, None, [0.99, 1.0, 1.01, 1.02, 1.03, 1.04, 1.05]),
]


@pytest.mark.parametrize(("op", "value", "limit", "per_repeat", "repeats"), GOAL_FORMS)
def test_every_goal_form_from_a_flagged_measurement_flags_its_figure_and_gives_no_verdict(
    op, value, limit, per_repeat, repeats
):
    clean = measure.goal("g", value, op, limit, "ms", True, per_repeat, repeats)
    flagged = measure.goal("g", value, op, limit, "ms", False, per_repeat, repeats)
    assert any(v in clean for v in VERDICTS) and "(flagged)" not in clean
    assert not any(v in flagged for v in VERDICTS), flagged
    figure = clean.split(": ", 1)[1].split(" ms", 1)[0]
    assert flagged.startswith(f"g: {figure} ms (flagged)") and measure.NO_VERDICT in flagged
    assert flagged.endswith("[unreliable measurement: see the warnings]")  # what kit.reference reads
    interval = per_repeat or (repeats and measure.median_interval(repeats)[:2])
    assert measure.goal_verdict(value, op, limit, interval or None, reliable=False) == measure.NO_VERDICT
    assert measure.goal_verdict(value, op, limit, interval or None) in clean


def test_a_goal_on_per_repeat_ratios_that_straddle_the_target_is_not_a_verdict():
    line = measure.goal("workspace time / plain time", 1.06, "<=", 1, per_repeat=(0.93, 1.15))
    assert line.endswith("1.06 (per repeat 0.93-1.15) -> within the spread: not shown either way (goal <= 1)")
    assert "NOT met" in measure.goal("t", 1.06, "<=", 1, per_repeat=(1.01, 1.15))
    assert "-> met" in measure.goal("t", 0.9, "<=", 1, per_repeat=(0.85, 0.99))
    # no range: the verdict reads the figure alone, as before
    assert measure.goal("t", 1.06, "<=", 1) == "t: 1.06 -> NOT met (goal <= 1)"


# histogram_bins: bins that show the distribution (no bin holds more than a quarter of the values)


def _old_bins_share(ms: np.ndarray) -> float:
    """The share of the fullest bin under the chapter's old rule: 30 linear bins over the fastest 99 %."""
    body = ms[ms <= np.quantile(ms, 0.99)]
    counts, _ = np.histogram(body, bins=30)
    return counts.max() / len(ms)


def _distributions() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(45)
    return {
        # the finding's run: 450 iterations, a tight body and 2 % of spikes (410 landed in one bin)
        "body and spikes": np.concatenate([rng.normal(0.45, 0.01, 441), rng.uniform(1.5, 8.0, 9)]),
        "lognormal": rng.lognormal(-0.8, 0.3, 450),
        "bimodal": np.concatenate([rng.normal(0.4, 0.01, 300), rng.normal(0.9, 0.02, 150)]),
        "exponential tail": 0.3 + rng.exponential(0.05, 450),
        "uniform": rng.uniform(0.3, 0.6, 450),
        "timer steps": np.round(rng.normal(0.45, 0.03, 450), 3),  # values repeat at the clock's resolution
        "few values": rng.normal(0.45, 0.02, 12),
    }


@pytest.mark.parametrize("name", list(_distributions()))
def test_histogram_bins_hold_every_value_and_no_bin_more_than_a_quarter(name):
    ms = np.abs(_distributions()[name]) + 1e-3
    edges = measure.histogram_bins(ms)
    counts, _ = np.histogram(ms, edges)
    assert counts.sum() == len(ms) and edges[0] == ms.min() and edges[-1] == ms.max()
    assert np.all(np.diff(edges) > 0) and np.allclose(np.diff(np.log(edges)), np.log(edges[1] / edges[0]))
    assert counts.max() <= measure.MAX_BIN_SHARE * len(ms), (name, counts.max(), len(edges) - 1)


def test_the_old_bins_put_most_iterations_in_one_bin_where_the_new_ones_do_not():
    ms = _distributions()["body and spikes"]
    assert _old_bins_share(ms) > 0.8  # the finding, reproduced
    counts, _ = np.histogram(ms, measure.histogram_bins(ms))
    assert counts.max() / len(ms) <= 0.25


@pytest.mark.parametrize(
    ("values", "said"),
    [([], "0 values"), ([0.0, 1.0], "the smallest 0"), ([1.0, float("nan")], "some NaN or infinite"), ([-1.0], "-1")],
)
def test_histogram_bins_refuses_what_is_not_a_time_naming_it(values, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        measure.histogram_bins(values)
