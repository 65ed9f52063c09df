"""The arena a workspace owns (kit.workspaces.workspace_arena): carving, and the size each learning policy answers.

The arena is told what it needs (the largest cycle, how many ran) and never reaches back into the
workspace that owns it; the workspace calls down into it and keeps the scopes and counters.
"""

import numpy as np
import pytest

import kit
from kit.core.devices import as_device
from kit.workspaces.workspace import Workspace, WorkspaceConfig
from kit.workspaces.workspace_arena import ALIGNMENT, Arena

F32 = np.dtype(np.float32)


def arena(**config):
    return Arena(WorkspaceConfig(**config), as_device("cpu:0").physical)


def test_carving_moves_the_write_pointer_by_aligned_sizes_and_stops_at_the_end():
    a = arena()
    assert a.carve((4,), F32) is None and a.offset == 0  # no block yet
    a.replace(3 * ALIGNMENT)
    first = a.carve((4,), F32)  # 16 bytes take one 64-byte line
    assert first.shape == (4,) and a.offset == ALIGNMENT and a.holds(a.base) and not a.holds(a.base + a.capacity)
    assert a.carve((20,), F32).shape == (20,) and a.offset == 3 * ALIGNMENT  # 80 bytes: two lines
    assert a.carve((1,), F32) is None and a.offset == 3 * ALIGNMENT  # full: the workspace spills or wraps
    assert a.carve((0, 3), F32) is None  # nothing to carve
    a.move_to(0)  # the next cycle asks for the same: the same view, not a new one
    assert a.carve((4,), F32) is first


def test_a_new_block_starts_empty_and_forgets_the_old_views():
    a = arena()
    a.replace(ALIGNMENT)
    old = a.carve((4,), F32)
    raw = a.replace(100)  # rounded up to whole lines; the raw allocation holds one line more
    assert a.capacity == 2 * ALIGNMENT and raw.nbytes == 3 * ALIGNMENT and a.blocks_made == 2 and a.offset == 0
    assert a.carve((4,), F32) is not old
    a.release()
    assert a.block is None and a.capacity == 0 and a.carve((4,), F32) is None


# (config, [(largest cycle, cycles ended), ...], the size each answer asks for: 0 keeps the block)
LEARNING = {
    "FIRST_LOOP, STRICT": (
        dict(policy_allocation="STRICT"),
        [(1000, 1), (5000, 2)],
        [1000, 0],  # sized once; EXTERNAL spills the rest
    ),
    "FIRST_LOOP, over-allocated 30 %": (dict(), [(1000, 1)], [1300]),
    "OVER_TIME after 3": (
        dict(policy_learning="OVER_TIME", cycles_before_initialization=3),
        [(1000, 1), (1000, 2), (1000, 3)],
        [0, 0, 1300],
    ),
    "NONE": (dict(policy_learning="NONE"), [(1000, 1), (9000, 5)], [0, 0]),
    "REALLOCATE grows past its block": (
        dict(policy_allocation="STRICT", policy_spill="REALLOCATE"),
        [(1000, 1), (1024, 2), (2000, 3)],
        [1000, 0, 2000],
    ),
    "circular, REALLOCATE grows past its ring block": (
        dict(policy_reset="ENDOFBUFFER_REACHED", overallocation_limit=1.0, policy_spill="REALLOCATE"),
        [(1000, 1), (1200, 2), (1400, 3)],
        [2600, 0, 3640],  # the ring block is the cycle x 1.3, then doubled; 1200 fits the 1300 block
    ),
    "max_size caps after over-allocation, whole lines": (dict(max_size=1000), [(2000, 1)], [960]),
    "min_size is the least": (dict(min_size=4096, policy_allocation="STRICT"), [(100, 1)], [4096]),
}


@pytest.mark.parametrize("case", sorted(LEARNING))
def test_each_learning_policy_answers_with_the_size_nd4j_would_give(case):
    config, cycles, sizes = LEARNING[case]
    a = arena(**config)
    answers = []
    for largest, ended in cycles:
        size = a.learn(largest, ended)
        answers.append(size)
        if size > a.capacity:  # what the workspace does with the answer
            a.replace(size)
    assert answers == sizes


def test_the_workspace_owns_its_arena_and_the_arena_holds_no_way_back_up():
    ws = kit.get_workspace_for_current_thread(WorkspaceConfig(), "ARENA")
    try:
        with ws:
            kit.ones((250,))  # 1000 bytes: spilled while the arena learns (FIRST_LOOP)
        with ws:
            kit.ones((250,))
        assert isinstance(ws.arena, Arena) and ws.capacity == ws.arena.capacity == 1344  # 1024 x 1.3, whole lines
        assert ws.arena_allocations == ws.arena.blocks_made == 1 and ws.stats()["used"] == ws.arena.offset == 0
        held = [getattr(ws.arena, slot) for slot in Arena.__slots__]
        assert not any(isinstance(value, Workspace) for value in held)  # told what it needs, never its owner
    finally:
        ws.destroy()
    assert ws.arena.block is None
