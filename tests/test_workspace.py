"""Workspaces: stale use always raises, policies do what they say, cycles allocate nothing."""

import gc
import re
import threading
import tracemalloc

import numpy as np
import pytest
from _workspace_ring import _full_ring, ws_named
from hypothesis import given, settings
from hypothesis import strategies as st

import kit
from kit.core.memory import heap_allocations
from kit.workspaces.workspace import (
    AllocationPolicy,
    ArrayFromClosedScopeError,
    ArrayFromDestroyedWorkspaceError,
    LearningPolicy,
    ResetPolicy,
    SpillPolicy,
    StaleArrayError,
    WorkspaceConfig,
    WorkspaceConfigError,
    WorkspaceFullError,
    WorkspaceScopeError,
    WorkspaceThreadError,
)

# every way of touching an array: each must check the generation first
EVERY_OP = {
    "add": lambda a: a + 1,
    "radd": lambda a: 1 + a,
    "iadd": lambda a: a.__iadd__(1),
    "matmul": lambda a: a @ a.T,
    "exp": lambda a: a.exp(),
    "neg": lambda a: -a,
    "sum": lambda a: a.sum(),
    "argmax": lambda a: a.argmax(),
    "compare": lambda a: a > 0,
    "clip": lambda a: a.clip(0, 1),
    "reshape": lambda a: a.reshape(-1),
    "transpose": lambda a: a.T,
    "getitem": lambda a: a[0],
    "setitem": lambda a: a.__setitem__(0, 1.0),
    "dup": lambda a: a.dup(),
    "astype": lambda a: a.astype("float64"),
    "numpy": lambda a: a.numpy(),
    "__array__": lambda a: np.asarray(a),
    "float": lambda a: float(a[0, 0]),
    "tolist": lambda a: a.tolist(),
    "detach": lambda a: a.detach(),
    "where": lambda a: kit.where(a > 0, a, 0.0),
    "concatenate": lambda a: kit.concatenate([a, a]),
    "data": lambda a: a.data,
}


@pytest.mark.parametrize("op", sorted(EVERY_OP))
def test_every_op_raises_on_an_array_from_a_closed_scope(op):
    ws = ws_named("EVERY")
    with ws:
        x = kit.ones((3, 3))
    with pytest.raises(ArrayFromClosedScopeError) as info:
        EVERY_OP[op](x)
    message = str(info.value)
    assert "'EVERY'" in message and "cycle 1" in message and ".detach()" in message and "leverage_to" in message


def test_destroy_invalidates_and_releases_the_arena():
    ws = ws_named("DESTROY", initial_size=1 << 16)
    assert ws.capacity >= 1 << 16
    with ws:
        x = kit.ones((10,))
    ws.destroy()
    assert ws.capacity == 0 and ws.arena.block is None
    with pytest.raises(ArrayFromDestroyedWorkspaceError, match="destroyed"):
        x.numpy()
    with pytest.raises(WorkspaceScopeError, match="was destroyed"):
        with ws:
            pass
    assert kit.get_workspace_for_current_thread(name="DESTROY") is not ws  # a fresh one


def test_destroy_releases_memory_for_real():
    ws = ws_named("BIG", initial_size=64 << 20, policy_allocation=AllocationPolicy.STRICT)
    with ws:
        kit.ones((16 << 20,))  # touch the pages (64 MiB of float32)
    tracemalloc.start()
    try:
        ws2 = ws_named("BIG2", initial_size=8 << 20, policy_allocation=AllocationPolicy.STRICT)

        def held_by_workspaces():  # only memory allocated in kit/core/memory.py, where an arena's block is made
            only = [tracemalloc.Filter(True, kit.memory.__file__)]
            return sum(s.size for s in tracemalloc.take_snapshot().filter_traces(only).statistics("filename"))

        held = held_by_workspaces()
        ws2.destroy()
        gc.collect()
        released = held - held_by_workspaces()
    finally:
        tracemalloc.stop()
    assert released >= 8 << 20
    ws.destroy()


def test_detach_leverage_migrate():
    outer, inner = ws_named("OUTER"), ws_named("INNER")
    with outer:
        with inner:
            t = kit.arange(4, dtype="float32")
            assert t.is_attached and t.workspace is inner
            d = t.detach()
            up = t.leverage_to("OUTER")
            par = t.leverage()
            assert up.workspace is outer and par.workspace is outer
            assert not d.is_attached and d.detach() is d
            with pytest.raises(kit.workspace.NoSuchWorkspaceError, match="'NOPE' does not exist"):
                t.leverage_to("NOPE", enforce_existence=True)
            assert t.leverage_to("NOPE") is t
        assert up.sum().item() == 6.0  # still valid: OUTER is open
        h = kit.asarray(np.ones(2, np.float32))
        m = h.migrate()
        assert m.workspace is outer and m.is_valid
    assert d.numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(StaleArrayError):
        up + 1
    assert kit.ones(2).migrate() is not None and not kit.ones(2).migrate(detach_on_no_ws=True).is_attached


def test_scope_out_of_workspaces_allocates_on_the_heap():
    ws = ws_named("SCOPE")
    with ws:
        with kit.scope_out_of_workspaces():
            keep = kit.ones((3,))
        inside = kit.ones((3,))
    assert not keep.is_attached and keep.sum().item() == 3.0
    assert inside.is_attached and not inside.is_valid


# ---- policies -----------------------------------------------------------------------


def run_cycle(ws, sizes):
    with ws:
        return [kit.empty((n,), dtype="float32") for n in sizes]


def test_first_loop_learns_the_first_cycle_then_stops_spilling():
    ws = ws_named("FIRST")
    run_cycle(ws, [100, 200])  # 400 + 800 bytes, each aligned to 64 -> 448 + 832
    assert ws.spilled_count == 2 and ws.max_cycle_bytes == 448 + 832
    assert ws.capacity >= int(1280 * 1.3)  # OVERALLOCATE x 1.3
    run_cycle(ws, [100, 200])
    assert ws.spilled_count == 2  # no new spills


def test_strict_allocation_is_exact_and_none_learning_keeps_initial():
    strict = ws_named("STRICT", policy_allocation=AllocationPolicy.STRICT)
    run_cycle(strict, [160])
    assert strict.capacity == 640
    fixed = ws_named("FIXED", initial_size=1024, policy_learning=LearningPolicy.NONE)
    run_cycle(fixed, [1000])  # 4000 bytes > capacity -> spill, and no learning
    run_cycle(fixed, [1000])
    assert fixed.capacity == int(1024 * 1.3) // 64 * 64 + (64 if int(1024 * 1.3) % 64 else 0)
    assert fixed.spilled_count == 2


def test_over_time_learns_after_n_cycles():
    ws = ws_named("OVERTIME", policy_learning=LearningPolicy.OVER_TIME, cycles_before_initialization=3)
    run_cycle(ws, [16])
    run_cycle(ws, [64])
    assert ws.capacity == 0
    run_cycle(ws, [32])
    assert ws.capacity >= 256  # sized from the largest of the three cycles
    before = ws.spilled_count
    run_cycle(ws, [64])
    assert ws.spilled_count == before


def test_spill_fail_raises_and_reallocate_grows():
    fail = ws_named("FAIL", initial_size=256, policy_learning=LearningPolicy.NONE, policy_spill=SpillPolicy.FAIL)
    with fail:
        kit.empty((16,))
        with pytest.raises(WorkspaceFullError, match=r"workspace 'FAIL' is full: 4000 bytes .*SpillPolicy.FAIL") as e:
            kit.empty((1000,))
    # the remedy as printed: an initial_size of that many bytes (max_size, which it offered too, only caps growth)
    (size,) = re.findall(r"raise initial_size to at least (\d+) bytes", str(e.value))
    policies = {"policy_learning": LearningPolicy.NONE, "policy_spill": SpillPolicy.FAIL}
    enough = ws_named("ENOUGH", initial_size=int(size), **policies)
    with enough:
        kit.empty((16,))
        kit.empty((1000,))
    grow = ws_named("GROW", initial_size=256, policy_learning=LearningPolicy.NONE, policy_spill=SpillPolicy.REALLOCATE)
    run_cycle(grow, [1000])
    assert grow.capacity >= 4032 and grow.arena_allocations == 2
    spills = grow.spilled_count
    run_cycle(grow, [1000])
    assert grow.spilled_count == spills
    external = ws_named("EXT", initial_size=256, policy_learning=LearningPolicy.NONE)
    run_cycle(external, [1000])
    run_cycle(external, [1000])
    assert external.capacity < 4000 and external.spilled_count == 2


def test_max_and_min_size_bound_the_arena():
    capped = ws_named("CAP", max_size=1024, policy_allocation=AllocationPolicy.STRICT)
    run_cycle(capped, [10_000])
    assert capped.capacity == 1024
    floor = ws_named("FLOOR", min_size=1 << 20)
    run_cycle(floor, [4])
    assert floor.capacity >= 1 << 20


def test_debug_modes():
    kit.workspace.set_debug_mode("SPILL_EVERYTHING")
    ws = ws_named("DBG")
    run_cycle(ws, [8, 8, 8])
    assert ws.spilled_count == 3 and ws.capacity == 0  # no learning either
    kit.workspace.set_debug_mode(kit.DebugMode.BYPASS_EVERYTHING)
    with ws:
        x = kit.ones((3,))
    assert not x.is_attached and x.sum().item() == 3.0
    kit.workspace.set_debug_mode("DISABLED")
    with pytest.raises(WorkspaceConfigError, match="use one of DISABLED"):
        kit.workspace.set_debug_mode("LOUD")


def test_invalid_configs_are_clear():
    with pytest.raises(WorkspaceConfigError, match="overallocation_limit=-1"):
        WorkspaceConfig(overallocation_limit=-1)
    with pytest.raises(WorkspaceConfigError, match="min_size=10 is larger than max_size=5"):
        WorkspaceConfig(min_size=10, max_size=5)
    with pytest.raises(WorkspaceConfigError, match=r"cycles_before_initialization >= 1"):
        WorkspaceConfig(policy_learning=LearningPolicy.OVER_TIME)
    with pytest.raises(WorkspaceConfigError, match=r"overallocation_limit >= 1\.0"):
        WorkspaceConfig(policy_reset=ResetPolicy.ENDOFBUFFER_REACHED)
    with pytest.raises(WorkspaceConfigError, match="initial_size=-5"):
        WorkspaceConfig(initial_size=-5)
    with pytest.raises(WorkspaceConfigError, match="policy_spill='SOMETIMES': use one of FAIL, EXTERNAL, REALLOCATE"):
        WorkspaceConfig(policy_spill="SOMETIMES")
    assert WorkspaceConfig(policy_spill="fail").policy_spill is SpillPolicy.FAIL
    ws_named("TWICE")
    with pytest.raises(WorkspaceConfigError, match="already exists"):
        ws_named("TWICE", initial_size=10)


# ---- zero allocations, RSS, threads -----------------------------------------------------


def mlp_like_step(x, w1, w2):
    h = (x @ w1).tanh()
    z = h @ w2
    p = (z - z.max(axis=1, keepdims=True)).exp()
    p = p / p.sum(axis=1, keepdims=True)
    return (h.T @ p).sum() + p.mean()


def test_zero_heap_allocations_per_iteration_after_learning():
    x, w1, w2 = kit.rand((32, 64)), kit.rand((64, 48)), kit.rand((48, 10))
    ws = ws_named("ZERO")
    with ws:
        mlp_like_step(x, w1, w2)  # learning cycle: spills, then the arena is sized
    before = heap_allocations(this_thread=True)
    for _ in range(20):
        with ws:
            mlp_like_step(x, w1, w2)
    assert heap_allocations(this_thread=True) == before
    assert ws.spilled_count == ws.stats()["spilled_count"] > 0  # only the learning cycle spilled
    # the same loop without a workspace allocates on every op
    before = heap_allocations(this_thread=True)
    mlp_like_step(x, w1, w2)
    assert heap_allocations(this_thread=True) - before >= 12


def test_tracemalloc_sees_no_numpy_buffers_created_in_a_learned_cycle():
    x, w1, w2 = kit.rand((32, 64)), kit.rand((64, 48)), kit.rand((48, 10))
    ws = ws_named("TRACE")

    def body():
        return [mlp_like_step(x, w1, w2), x @ w1, (x @ w1).tanh(), x.exp()]

    with ws:
        body()  # the learning cycle
    numpy_domain = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]

    def numpy_bytes_created_in_cycle(use_ws):
        kept = []  # keep every intermediate alive so tracemalloc still sees its buffer
        tracemalloc.start()
        try:
            snap0 = tracemalloc.take_snapshot().filter_traces(numpy_domain)
            if use_ws:
                with ws:
                    kept += body()
                    snap1 = tracemalloc.take_snapshot().filter_traces(numpy_domain)
            else:
                kept += body()
                snap1 = tracemalloc.take_snapshot().filter_traces(numpy_domain)
        finally:
            tracemalloc.stop()
        return sum(s.size_diff for s in snap1.compare_to(snap0, "filename") if s.size_diff > 0)

    assert numpy_bytes_created_in_cycle(use_ws=True) == 0
    assert numpy_bytes_created_in_cycle(use_ws=False) >= 32 * 48 * 4  # the heap version is visible


def test_ten_thousand_cycles_keep_rss_flat():
    x = kit.rand((64, 64))
    ws = ws_named("RSS")
    for _ in range(200):  # warm-up: learning, allocator pools, lazy imports
        with ws:
            (x @ x).tanh().sum()
    gc.collect()
    start = kit.readings.rss_bytes()
    for _ in range(10_000):
        with ws:
            (x @ x).tanh().sum()
    gc.collect()
    grown = kit.readings.rss_bytes() - start
    assert grown < 4 << 20, f"RSS grew by {grown} bytes over 10,000 cycles"
    assert ws.cycles == 10_200 and ws.arena_allocations == 1


def test_two_threads_with_their_own_workspaces_never_interfere():
    results, errors = {}, []
    barrier = threading.Barrier(2)

    def worker(tid):
        try:
            ws = kit.get_workspace_for_current_thread(name="WORKER")  # same name, own workspace
            barrier.wait()
            acc = 0.0
            for i in range(300):
                with ws:
                    v = kit.full((128,), float(tid * 1000 + i))
                    acc += (v * 2).sum().item()
            results[tid] = (acc, ws.cycles, id(ws))
        except Exception as exc:  # surfaced to the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for tid in (1, 2):
        expected = sum(2 * 128 * float(tid * 1000 + i) for i in range(300))
        assert results[tid][0] == expected and results[tid][1] == 300
    assert results[1][2] != results[2][2]


def test_a_workspace_refuses_other_threads():
    ws = ws_named("MINE")
    caught = []

    def intruder():
        try:
            with ws:
                pass
        except WorkspaceThreadError as exc:
            caught.append(str(exc))

    t = threading.Thread(target=intruder, name="intruder")
    t.start()
    t.join()
    assert caught and "belongs to thread 'MainThread', not 'intruder'" in caught[0]


# ---- random op sequences across exits, resets, nesting and destroy ------------------------

ACTIONS = st.lists(
    st.sampled_from(["enter_a", "exit", "enter_b", "alloc", "use", "destroy_a", "detach"]), min_size=5, max_size=40
)


@settings(max_examples=80, deadline=None)
@given(actions=ACTIONS, ops=st.lists(st.sampled_from(sorted(EVERY_OP)), min_size=40, max_size=40))
def test_random_sequences_raise_exactly_when_the_model_says_stale(actions, ops):
    """A model of the semantics: an array is valid iff it is on the heap, or its workspace
    is open in the very cycle that made it and was not destroyed. kit must agree every time."""
    names = {"enter_a": "HA", "enter_b": "HB"}
    open_stack, cycle = [], {"HA": 0, "HB": 0}
    arrays = []  # (array, workspace name or None, cycle)
    wss = {n: kit.get_workspace_for_current_thread(name=n) for n in ("HA", "HB")}
    try:
        for step, action in enumerate(actions):
            if action in names:
                name = names[action]
                if name in open_stack:
                    continue
                wss[name].__enter__()
                open_stack.append(name)
                cycle[name] += 1
            elif action == "exit" and open_stack:
                wss[open_stack.pop()].__exit__(None, None, None)
            elif action == "alloc":
                where = open_stack[-1] if open_stack else None
                arrays.append((kit.full((2, 2), float(step)), where, cycle.get(where), float(step)))
            elif action == "detach" and arrays:
                arr, where, cyc, value = arrays[step % len(arrays)]
                valid = where is None or (where in open_stack and cycle[where] == cyc)
                if valid:
                    arrays.append((arr.detach(), None, None, value))
            elif action == "destroy_a" and "HA" not in open_stack:
                wss["HA"].destroy()
                wss["HA"] = kit.get_workspace_for_current_thread(name="HA")
                cycle["HA"] += 1000  # nothing from before can match again
            elif action == "use" and arrays:
                arr, where, cyc, value = arrays[step % len(arrays)]
                valid = where is None or (where in open_stack and cycle[where] == cyc)
                op = EVERY_OP[ops[step % len(ops)]]
                if valid:
                    assert arr.is_valid
                    op(arr)
                    assert arr.is_valid
                else:
                    assert not arr.is_valid
                    with pytest.raises(StaleArrayError):
                        op(arr)
    finally:
        while open_stack:
            wss[open_stack.pop()].__exit__(None, None, None)
        for ws in wss.values():
            ws.destroy()


def test_an_array_carved_while_closed_never_becomes_valid_again():
    ws = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 12), "CLOSED_CARVE")
    try:
        with ws:
            pass
        data, owner = ws.alloc((4,), np.dtype(np.float32))  # Workspace.alloc, no cycle open
        a = kit.ndarray.wrap(data, ws.device, owner)
        for _ in range(2):
            with ws:
                kit.zeros((4,)) + 9  # the next cycles reuse the memory
            with pytest.raises(StaleArrayError):
                a.numpy()
    finally:
        ws.destroy()


# ---- a learned ring (circular REALLOCATE) grows only past its block, as ND4J's trimmed mode ----


def _ring_capacities(cycles_of_bytes):
    from kit.workspaces.workspace import AllocationPolicy

    cfg = WorkspaceConfig(
        policy_reset=ResetPolicy.ENDOFBUFFER_REACHED,
        policy_learning=LearningPolicy.FIRST_LOOP,
        policy_spill=SpillPolicy.REALLOCATE,
        policy_allocation=AllocationPolicy.STRICT,
    )
    ws = kit.get_workspace_for_current_thread(cfg, f"RING{id(cycles_of_bytes)}")
    capacities = []
    for arrays in cycles_of_bytes:
        with ws:
            for nbytes in arrays:
                kit.zeros((nbytes // 4,))
        capacities.append(ws.capacity)
    ws.destroy()
    return capacities


def test_a_learned_ring_keeps_its_size_for_cycles_that_fit_its_block():
    """The ring learned from 2 x 8 KiB cycles is 16,384 x 1.3 = 21,312 B (ND4J's initialBlockSize).
    A 20 KiB cycle fits the block: the ring stays (kit regrew it to 26,624 B on any cycle larger
    than the first). A 24 KiB cycle does not: it grows, as ND4J's trimmed mode does
    (Nd4jWorkspace.alloc: requiredMemory + cycleAllocations > initialBlockSize)."""
    two, two_and_a_half, three = [8192, 8192], [8192, 8192, 4096], [8192, 8192, 8192]
    assert _ring_capacities([two, two, two_and_a_half, two_and_a_half, two]) == [21312] * 5
    grown = _ring_capacities([two, two, three, three, two])
    assert grown[:2] == [21312, 21312]
    assert grown[2] >= int(24576 * 1.3) and grown[2:] == [grown[2]] * 3  # learned once more, then kept


@pytest.mark.parametrize("policy", list(AllocationPolicy))
@pytest.mark.parametrize("circular", [False, True], ids=["block", "circular"])
@pytest.mark.parametrize("max_size", [1024, 1000, 5000])
def test_max_size_caps_the_arena_after_over_allocation(policy, circular, max_size):
    """max_size=1024 with the default OVERALLOCATE learned a 1,344-byte arena (the cap was applied
    before the 30 %); ND4J's init() caps after it. Every policy, block or circular, learning from
    small or large cycles: the arena never exceeds max_size."""
    if circular and policy is AllocationPolicy.OVERALLOCATE:
        extra = {"overallocation_limit": 1.0}  # a ring needs room for two cycles (ND4J's rule)
    else:
        extra = {}
    cfg = {"max_size": max_size, "policy_allocation": policy, "policy_spill": SpillPolicy.REALLOCATE, **extra}
    if circular:
        cfg["policy_reset"] = ResetPolicy.ENDOFBUFFER_REACHED
    for first in ([100, 200], [10_000]):
        ws = ws_named(f"CAPPED{max_size}{policy.name}{circular}{len(first)}", **cfg)
        for _ in range(4):
            run_cycle(ws, first)
            assert ws.capacity <= max_size, (first, ws.capacity)
        ws.destroy()


# ---- regressions for the defects issue 13's adversarial pass found ------------------------------


@settings(max_examples=40, deadline=None)
@given(
    shapes=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    how=st.sampled_from(["numpy", "asarray", "array"]),
    cycles=st.integers(1, 3),
)
def test_no_host_array_from_a_workspace_changes_after_its_cycle(shapes, how, cycles):
    ws = kit.get_workspace_for_current_thread(name="PROP_ALIAS")
    with ws:
        arrays = [kit.full((n,), float(i + 1)) for i, n in enumerate(shapes)]
        take = {"numpy": lambda a: a.numpy(), "asarray": np.asarray, "array": np.array}[how]
        hosts = [take(a) for a in arrays]
    expected = [h.copy() for h in hosts]
    for c in range(cycles):  # later cycles write other values over the same arena
        with ws:
            for n in shapes:
                kit.full((n,), -7.0 - c)
    for h, e in zip(hosts, expected):
        np.testing.assert_array_equal(h, e)
        h[...] = 99  # writing to the copy corrupts nothing
    with ws:
        fresh = kit.full((shapes[0],), 5.0)
        assert fresh.numpy().tolist() == [5.0] * shapes[0]


def test_a_generator_dropped_inside_another_scope_does_not_leave_its_workspace_open():
    inner = kit.get_workspace_for_current_thread(name="GEN_WS")
    outer = kit.get_workspace_for_current_thread(name="OUTER_WS")

    def batches():
        with inner:
            yield kit.ones((3,))

    gen = batches()
    next(gen)  # the generator is suspended inside `with inner:`
    with outer:
        with pytest.raises(WorkspaceScopeError, match="closed while 'OUTER_WS' is current"):
            gen.close()  # what dropping it does
        assert kit.context.current_workspace() is outer
    assert not inner.is_scope_active and not outer.is_scope_active
    assert kit.context.current_workspace() is None


@pytest.mark.parametrize(
    "cfg",
    [
        {},
        {"policy_spill": SpillPolicy.REALLOCATE},
        {"policy_learning": LearningPolicy.OVER_TIME, "cycles_before_initialization": 3},
    ],
    ids=["first-loop", "reallocate", "over-time"],
)
def test_a_replayed_cycle_counts_and_retires_as_a_scope_does(cfg):
    """Workspace.replay_cycle (a planned training step's door): one whole cycle with the carves a
    recorded one made, as `with ws:` around those carves would leave the workspace."""
    scoped, replayed = ws_named("REPLAY_A", **cfg), ws_named("REPLAY_B", **cfg)
    try:
        kept = {}
        for ws in (scoped, replayed):
            for _ in range(4):  # learn the arena's size (over 3 cycles at most), then one cycle more
                with ws:
                    before = ws.tally()
                    kept[ws.name] = [kit.zeros((4, 3)) for _ in range(3)]
                    after = ws.tally()
        carves = (after[0] - before[0], after[1] - before[1], after[2])
        with scoped:
            [kit.zeros((4, 3)) for _ in range(3)]
        replayed.replay_cycle(*carves)

        def counts(ws):
            return {k: v for k, v in ws.stats().items() if k != "name"}

        assert counts(replayed) == counts(scoped)
        assert not replayed.is_scope_active and kit.context.current_workspace() is None
        errors = []
        for ws in (scoped, replayed):
            with pytest.raises(StaleArrayError) as err:
                kept[ws.name][0] + 1
            errors.append((type(err.value), str(err.value).replace(ws.name, "WS")))
        assert errors[0] == errors[1]
    finally:
        scoped.destroy()
        replayed.destroy()


def test_a_replayed_cycle_is_refused_in_an_open_or_circular_workspace():
    ring, _ = _full_ring("REPLAY_RING")
    plain = ws_named("REPLAY_OPEN")
    try:
        with pytest.raises(WorkspaceScopeError, match=r"REPLAY_RING.*circular.*with ws:"):
            ring.replay_cycle(1, 64, 64)
        with plain:
            with pytest.raises(WorkspaceScopeError, match=r"REPLAY_OPEN.*open.*with ws:"):
                plain.replay_cycle(1, 64, 64)
            assert plain.is_scope_active and plain.cycles == 0  # nothing counted
        assert plain.cycles == 1
        with plain:  # the remedy the message names
            kit.zeros((16,))
        assert plain.cycles == 2 and plain.allocations == 1
    finally:
        ring.destroy()
        plain.destroy()
