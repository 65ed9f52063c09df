"""kit.measurement.load with children_are_ours: a descendant's CPU counts as this process's work
even where it ends inside the block (reaped by this process or a descendant: TorchDistributor's
ranks, a subprocess run), never its time from before the block; and the accounting on given
readings (`tree_work`), table-driven. CPU seconds, not wall time: the assertions hold on a busy machine."""

import subprocess
import sys

import pytest

from kit.measurement.load import machine_load, tree_work

BURN = 0.4
BURNER = f"import time\nwhile time.process_time() < {BURN}: pass\n"


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
    assert _own_seconds(BURNER, started_before=False) >= BURN * 0.9


def test_a_grandchild_that_ends_inside_the_block_is_ours():
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURNER!r}], check=True)\n"
    assert _own_seconds(code, started_before=False) >= BURN * 0.9


def test_a_childs_time_from_before_the_block_is_not_counted():
    assert _own_seconds(BURNER, started_before=True) < BURN * 0.5
