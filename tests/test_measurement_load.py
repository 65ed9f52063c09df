"""kit.measurement.load: the machine's load while kit measures, against real processes (a
spinner, CPU-bound children reaped or running, this process's own threads, an idle block), each
reading bracketed by independent /proc/stat readings; children counted as ours only when asked;
the printed load on the flag's side of the limit; the note a one-run timing carries. With
children_are_ours, a descendant's CPU counts as this process's work even where it ends inside the
block (TorchDistributor's ranks, a subprocess run), never its time from before the block; and the
accounting on given readings (`tree_work`), table-driven: CPU seconds, holding on a busy machine."""

import hashlib
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import psutil
import pytest

from kit import measure
from kit.measurement.load import LoadMeter, LoadReading, machine_load, tree_work, unchecked_note


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


@pytest.mark.parametrize("load", [0.1, 0.2, 0.20004, 0.2004, 0.21])
def test_a_printed_load_falls_on_the_same_side_of_the_limit_as_the_flag(load):
    shown = float(measure.format_load(load).strip("%"))
    assert (shown > measure.LOAD_LIMIT * 100) == (load > measure.LOAD_LIMIT)


@pytest.mark.parametrize(("others", "flagged"), [(0.05, False), (0.2, False), (0.20004, True), (0.9, True)])
def test_a_one_run_note_says_it_was_not_repeated_and_flags_a_busy_machine(others, flagged):
    note = unchecked_note(LoadReading(cores=4, wall=1.0, others=others))
    assert note.startswith(f"one run, not repeated: other processes used {measure.format_load(others)} of the CPU")
    assert ("(machine busy: flagged, read no time from it)" in note) is flagged
    assert ("kit.measure's repeated timings say how much a time can vary" in note) is not flagged


def test_busy_cores_are_the_others_share_times_the_cores():
    assert LoadReading(cores=8, wall=2.0, others=0.25).busy_cores == 2.0
    assert LoadReading(cores=1, wall=2.0, others=0.0).busy_cores == 0.0


def test_a_load_meter_reads_from_its_creation_and_keeps_reading():
    """This process's own work between creation and read() is `own`, bounded as a share of the machine."""
    meter = LoadMeter()
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.2:  # 0.2 s of this thread's CPU
        pass
    first = meter.read()
    own_seconds = first.own * first.cores * first.wall
    assert own_seconds >= 0.2 - 0.05 and 0.0 <= first.others <= 1.0 and 0.0 <= first.own <= 1.0
    second = meter.read()
    assert second.wall > first.wall  # from the same start, not from the last read


TREE_BURN = 0.4
TREE_BURNER = f"import time\nwhile time.process_time() < {TREE_BURN}: pass\n"


@pytest.mark.parametrize(
    ("before", "after", "work"),
    [
        ({1: (1.0, 0.0)}, {1: (1.5, 0.0)}, 0.5),  # this process alone
        ({1: (1.0, 0.0), 2: (3.0, 0.0)}, {1: (1.0, 0.0), 2: (5.0, 0.0)}, 2.0),  # a live descendant
        ({1: (1.0, 0.0)}, {1: (1.0, 0.7)}, 0.7),  # a child born and reaped inside the block
        ({1: (1.0, 0.0), 2: (3.0, 0.0)}, {1: (1.0, 3.5)}, 0.5),  # a child reaped inside: its earlier 3 s left out
        ({1: (1.0, 0.0), 2: (3.0, 1.0)}, {1: (1.0, 4.5)}, 0.5),  # ... and what it had reaped before
        ({1: (1.0, 0.0), 2: (0.0, 0.0)}, {1: (1.0, 0.0), 2: (0.0, 2.0)}, 2.0),  # a grandchild reaped by a child
        ({1: (1.0, 0.0), 2: (3.0, 0.0)}, {1: (1.0, 0.0)}, 0.0),  # a child nobody of ours reaped: not ours
    ],
    ids=["self", "live", "born-and-reaped", "reaped", "reaped-with-kids", "grandchild", "orphaned"],
)
def test_tree_work(before, after, work):
    assert tree_work(before, after) == pytest.approx(work)


def _own_seconds(code: str, started_before: bool) -> float:
    """CPU seconds machine_load(children_are_ours=True) counts as ours while a child runs `code`
    (started inside the block, or before it and ended inside), the child reaped inside."""
    if started_before:
        child = subprocess.Popen(
            [sys.executable, "-c", code + "print('done', flush=True)\nimport sys\nsys.stdin.read()\n"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout.readline().strip() == "done"  # its burn is over before the block
    with machine_load(children_are_ours=True) as load:
        if started_before:
            child.stdin.close()
            child.wait(timeout=30)
        else:
            subprocess.run([sys.executable, "-c", code], timeout=60, check=True)
    return load.own * load.wall * load.cores


def test_a_child_that_ends_inside_the_block_is_ours():
    assert _own_seconds(TREE_BURNER, started_before=False) >= TREE_BURN * 0.9


def test_a_grandchild_that_ends_inside_the_block_is_ours():
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {TREE_BURNER!r}], check=True)\n"
    assert _own_seconds(code, started_before=False) >= TREE_BURN * 0.9


def test_a_childs_time_from_before_the_block_is_not_counted():
    assert _own_seconds(TREE_BURNER, started_before=True) < TREE_BURN * 0.5


# How a descendant can end inside the block, each way its CPU must still count as ours: waited for
# by its parent (reaping adds its time to the parent's), or reaped by nobody of the tree: its parent
# ended first and init took it (an orphan, seen in the tree before), or its parent ignored SIGCHLD
# and the kernel reaped it.
# The burner burns TREE_BURN CPU seconds, then idles a second, so the sampler's last reading has it all.
TREE_BURN_IDLE = TREE_BURNER + "time.sleep(1.0)\n"
_LAUNCH = "import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', {burner!r}])\n"
_WAIT_GONE = (
    "import os, time\nt = time.monotonic()\n"
    "while time.monotonic() - t < 60:\n"
    "    try:\n        os.kill(p.pid, 0)\n    except ProcessLookupError:\n        break\n"
    "    time.sleep(0.05)\n"
)
ENDINGS = {
    "waited-child": TREE_BURN_IDLE,
    "waited-grandchild": _LAUNCH.format(burner=TREE_BURN_IDLE) + "p.wait(timeout=60)\n",
    "auto-reaped-grandchild": "import signal\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
    + _LAUNCH.format(burner=TREE_BURN_IDLE)
    + _WAIT_GONE,
    # its parent ends while it burns, unwaited for, without stopping it
    "orphaned-grandchild": _LAUNCH.format(burner=TREE_BURN_IDLE) + "import time\ntime.sleep(0.5)\nprint(p.pid)\n",
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_descendant_counts_as_ours_however_it_ends(ending):
    with machine_load(children_are_ours=True) as load:
        child = subprocess.run([sys.executable, "-c", ENDINGS[ending]], timeout=60, check=True, capture_output=True)
        if ending == "orphaned-grandchild":  # its parent is gone: wait for init to reap it
            pid, t0 = int(child.stdout), time.monotonic()
            while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() - t0 < 60, "the orphaned burner did not end within 60 s"
                time.sleep(0.05)
    assert load.own * load.wall * load.cores >= TREE_BURN * 0.9
