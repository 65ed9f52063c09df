"""`scope_out_of_workspaces` in a generator belongs to the generator's frame.

The defect: a generator that yields inside `with kit.scope_out_of_workspaces():` left the block
"open" for its caller, so every array the caller made in its own workspace went to the heap,
silently. Then the class: every way a suspended block can meet its caller's code (a for loop,
next(), every kind of op, nested generators, a workspace opened or closed while the generator is
suspended, a generator abandoned or never finished, async generators), and the two ways a block
is meant to cover its caller (a contextlib.contextmanager, an ExitStack)."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest

import kit
from kit.core.context import current_workspace
from kit.workspaces.workspace import WorkspaceConfig


@pytest.fixture
def ws():
    w = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 16), "CALLER")
    yield w
    kit.destroy_all_workspaces_for_current_thread()


def heap_rows(n=3):
    with kit.scope_out_of_workspaces():
        for i in range(n):
            row = kit.full((4,), float(i))
            assert row.workspace is None  # the generator's own arrays: the heap, every time it resumes
            yield row


# every kind of op the caller may run while the generator is suspended (the fast NumPy paths too)
CALLER_OPS = {
    "zeros": lambda r: kit.zeros((4,)),
    "add": lambda r: r + 1,
    "mul scalar": lambda r: r * 2.0,
    "exp": lambda r: r.exp(),
    "sum": lambda r: r.reshape(2, 2).sum(axis=0),
    "matmul": lambda r: r.reshape(2, 2) @ r.reshape(2, 2),
    "where": lambda r: kit.where(r > 0, r, 0.0),
    "dup": lambda r: r.dup(),
    "astype": lambda r: r.astype("float64"),
}


@pytest.mark.parametrize("op", list(CALLER_OPS))
def test_the_caller_s_arrays_stay_in_its_workspace_while_the_generator_is_suspended(ws, op):
    with ws:
        for row in heap_rows():
            mine = CALLER_OPS[op](row)
            assert mine.workspace is ws, f"{op}: the caller's array went to the heap"
            assert current_workspace() is ws
        assert current_workspace() is ws
    assert current_workspace() is None


def test_next_by_hand_and_an_abandoned_generator(ws):
    with ws:
        gen = heap_rows()
        first = next(gen)
        assert first.workspace is None
        assert kit.zeros((2,)).workspace is ws
        assert next(gen).workspace is None  # resumed: its block is out of workspaces again
        assert kit.zeros((2,)).workspace is ws
        gen.close()  # abandoned mid-block
        assert current_workspace() is ws
        assert kit.zeros((2,)).workspace is ws
    assert current_workspace() is None


def test_a_generator_never_finished_lets_the_workspace_close_without_error(ws):
    """The caller keeps a generator it did not finish: closing the workspace is not an out-of-order
    close (the caller did not open the block; it used to raise WorkspaceScopeError here), and the
    next cycle works. Resumed inside a workspace the caller opened after its block, the generator's
    arrays go to that innermost open workspace, and using one after its cycle raises, loudly."""
    with ws:
        gen = heap_rows(5)
        next(gen)
    assert current_workspace() is None
    assert kit.zeros((2,)).workspace is None
    with ws:
        assert kit.zeros((2,)).workspace is ws
        with pytest.raises(AssertionError):  # heap_rows asserts its row is on the heap: here it is in ws
            next(gen)
    assert current_workspace() is None
    stray = heap_rows(2)
    with ws:
        next(stray)
        assert kit.zeros((2,)).workspace is ws
    stray.close()
    assert current_workspace() is None
    assert kit.zeros((2,)).workspace is None


def test_nested_generators(ws):
    def outer():
        with kit.scope_out_of_workspaces():
            for row in heap_rows(2):
                assert kit.zeros((1,)).workspace is None  # outer's own block, while inner is suspended
                yield row

    with ws:
        for row in outer():
            assert row.workspace is None
            assert (row + 1).workspace is ws


def test_a_workspace_opened_and_closed_while_the_generator_is_suspended(ws):
    inner = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 12), "INNER")
    with ws:
        gen = heap_rows()
        next(gen)
        with inner:
            assert kit.zeros((2,)).workspace is inner
            kept = kit.ones((2,)).leverage()  # the parent of INNER is the caller's workspace
            assert kept.workspace is ws
        assert current_workspace() is ws
        assert kit.zeros((2,)).workspace is ws
        assert next(gen).workspace is None  # resumed where the caller is: its block again
        # the generator is closed while INNER is open: INNER stays current, then gives back ws
        with inner:
            gen.close()
            assert current_workspace() is inner
            assert kit.zeros((2,)).workspace is inner
        assert current_workspace() is ws
    assert current_workspace() is None


def test_in_the_generator_itself_the_block_is_out_of_workspaces_as_before(ws):
    """Inside the generator, its block works as ever: a workspace the generator itself opens
    inside the block takes allocations, and closing it goes back to the heap."""
    own = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 12), "GEN_OWN")

    def gen():
        with kit.scope_out_of_workspaces():
            with own:
                yield kit.zeros((1,)).workspace is own
            yield kit.zeros((1,)).workspace is None

    with ws:
        it = gen()
        assert next(it) is True
        # the caller while the generator sits inside `with own:` inside its block: that is the
        # generator lending a workspace (a documented misuse); the block itself lends nothing
        assert next(it) is True
        assert kit.zeros((1,)).workspace is ws
        it.close()


def test_a_contextmanager_helper_covers_the_caller_s_block_as_meant(ws):
    @contextlib.contextmanager
    def on_the_heap():
        with kit.scope_out_of_workspaces():
            yield

    with ws:
        with on_the_heap():
            assert kit.zeros((2,)).workspace is None
            assert (kit.ones((2,)) + 1).workspace is None
        assert kit.zeros((2,)).workspace is ws


def test_an_exit_stack_covers_the_caller_s_block_as_meant(ws):
    with ws:
        with contextlib.ExitStack() as stack:
            stack.enter_context(kit.scope_out_of_workspaces())
            assert kit.zeros((2,)).workspace is None
        assert kit.zeros((2,)).workspace is ws


def test_an_async_generator_is_bound_to_its_frame_too(ws):
    async def rows():
        with kit.scope_out_of_workspaces():
            for i in range(2):
                yield kit.full((2,), float(i))

    async def consume():
        seen = []
        with ws:
            async for row in rows():
                seen.append((row.workspace is None, kit.zeros((2,)).workspace is ws))
        return seen

    assert asyncio.run(consume()) == [(True, True), (True, True)]


def test_no_workspace_open_is_unchanged_and_values_are_right():
    out = [(r * 2).numpy() for r in heap_rows(3)]
    np.testing.assert_array_equal(np.stack(out), np.repeat(np.arange(3.0)[:, None] * 2, 4, axis=1))
    assert current_workspace() is None
