"""DL4J's own workspace tests, ported (nd4j-tests, org.nd4j.linalg.workspace), with the assertions
DL4J makes read in kit's terms: ND4J's currentSize is kit's `capacity`, its initialBlockSize the
ring's block (`_ring_block`: one cycle's room before over-allocation), spilled and external
allocations kit's `spilled_count`. Where kit differs on purpose, the test says how."""

from __future__ import annotations

import kit
from kit.workspaces.workspace import (
    ALIGNMENT,
    AllocationPolicy,
    LearningPolicy,
    ResetPolicy,
    SpillPolicy,
    WorkspaceConfig,
)


def _aligned(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def test_variable_time_series_2():
    """SpecialWorkspaceTests.testVariableTimeSeries2: a ring (OVERALLOCATE 3.0, REALLOCATE,
    FIRST_LOOP, ENDOFBUFFER_REACHED) learned from a cycle of two 500-float arrays, then 100 cycles
    of three. DL4J asserts, after the first cycle and again after the 100: currentSize ==
    initialBlockSize * 4, and at the end no spilled, pinned or external allocation.

    Read against ND4J's source (Nd4jWorkspace.alloc and close): a cycle larger than the block puts
    the ring in "trimmed mode", its allocations pinned on the heap until the ring is reallocated
    two generations later, from the larger cycle; the final assertion compares with that new
    block. kit grows the ring at the end of the first larger cycle instead, from that cycle, with
    nothing on the heap meanwhile (the cycle still fits the over-allocated ring): the same end
    state, without pinned allocations."""
    cfg = WorkspaceConfig(
        initial_size=0,
        overallocation_limit=3.0,
        policy_allocation=AllocationPolicy.OVERALLOCATE,
        policy_spill=SpillPolicy.REALLOCATE,
        policy_learning=LearningPolicy.FIRST_LOOP,
        policy_reset=ResetPolicy.ENDOFBUFFER_REACHED,
    )
    ws = kit.get_workspace_for_current_thread(cfg, "WS1_peer")
    try:
        with ws:
            kit.zeros((500,), dtype="float32")
            kit.zeros((500,), dtype="float32")
        required = _aligned(500 * 4) * 2  # kit aligns each array to 64 bytes (ND4J to 8)
        assert ws.spilled_bytes == required  # the learning cycle spilled all of it
        assert ws._ring_block == int(required * 1.3)
        assert ws.capacity == _aligned(ws._ring_block * 4)
        spilled = ws.spilled_count
        for _ in range(100):
            with ws:
                for _ in range(3):
                    kit.zeros((500,), dtype="float32")
        assert ws.capacity == _aligned(ws._ring_block * 4)  # DL4J's assertion, on the block now
        assert ws._ring_block == int(_aligned(500 * 4) * 3 * 1.3)  # learned from the larger cycle
        assert ws.spilled_count == spilled  # nothing spilled, nothing external or pinned
        assert ws.arena_allocations == 2  # the ring grew once
    finally:
        ws.destroy()
