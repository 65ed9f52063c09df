"""A workspace's arena: one aligned block of device memory, carved front to back, that learns its size.

    >>> import numpy as np
    >>> from kit.core.devices import as_device
    >>> from kit.workspaces.workspace_arena import Arena
    >>> from kit.workspaces.workspace_config import WorkspaceConfig
    >>> arena = Arena(WorkspaceConfig(), as_device("cpu:0").physical)
    >>> arena.carve((16,), np.dtype(np.float32)) is None     # no block yet: nothing fits
    True
    >>> arena.learn(largest_cycle=128, cycles=1)             # FIRST_LOOP: the first cycle's 128 bytes, +30 %
    166
    >>> _ = arena.replace(166)                               # rounded up to whole 64-byte lines
    >>> arena.carve((16,), np.dtype(np.float32)).shape, arena.offset, arena.capacity
    ((16,), 64, 192)

What a `kit.workspaces.workspace.Workspace` owns and calls down into (as CuPy's pool owns its
arenas): the block, the write pointer (`offset`), the views it carved (a cyclic workload asks for
the same (offset, shape, dtype) every cycle, so last cycle's view is reused: same memory, same
semantics), and what it learned about its size (ND4J's initializeWorkspace).

The arena knows nothing of scopes, generations, threads or errors: `learn` is told the largest
cycle and how many ran, and answers with the size it should have; the workspace decides what that
means for the arrays already handed out (Workspace._resize) and counts what it carves.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kit.core import memory
from kit.core.memory import data_address
from kit.workspaces.workspace_config import AllocationPolicy, LearningPolicy, SpillPolicy, WorkspaceConfig

__all__ = ["ALIGNMENT", "Arena"]

ALIGNMENT = memory.ALIGNMENT  # 64 bytes: where the block and every carve from it start
_VIEWS_KEPT = 8192  # views remembered before the table starts over


class Arena:
    """One block on one physical device, carved by a bump pointer; sized from the cycles it serves."""

    __slots__ = (
        "base",
        "block",
        "blocks_made",
        "capacity",
        "config",
        "offset",
        "physical",
        "ring_block",
        "sized",
        "views",
    )

    def __init__(self, config: WorkspaceConfig, physical: Any) -> None:
        self.config = config
        self.physical = physical
        self.block: Any = None  # the aligned bytes every carve is a view of
        self.views: dict[tuple, tuple[Any, int]] = {}  # (offset, shape, dtype) -> (view, aligned size)
        self.base = 0  # the block's address
        self.capacity = 0
        self.offset = 0  # the write pointer: where the next carve starts
        self.blocks_made = 0
        self.sized = False  # learned (or given) its size: the learning policy has had its say
        self.ring_block = 0  # a circular arena's room for one cycle, before over-allocation

    # ---- the block -----------------------------------------------------------------
    def replace(self, nbytes: int) -> Any:
        """A new block of `nbytes` (rounded up to ALIGNMENT), the write pointer at its front;
        returns the raw allocation, which holds ALIGNMENT bytes more (kit.memory.aligned_bytes)."""
        nbytes = -(-int(nbytes) // ALIGNMENT) * ALIGNMENT
        self.block = None
        # the blocks freed since (an outgrown block, the learning cycle's spills) are cached by CuPy's
        # pool or kept by the C heap: the arena now owns this memory, so hand them back first
        memory.give_back_freed(self.physical)
        with self.physical.activate():
            raw, self.block = memory.aligned_bytes(self.physical.xp, nbytes)  # on an aligned address
        self.views = {}
        self.base = data_address(self.block)
        self.capacity = nbytes
        self.offset = 0
        self.blocks_made += 1
        memory.count(self.physical, nbytes + ALIGNMENT)
        return raw

    def release(self) -> None:
        """Drop the block (arrays carved from it keep their memory alive, as NumPy views do)."""
        self.block = None
        self.views = {}
        self.capacity = 0

    def carve(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """An array of `shape` and `dtype` at the write pointer, which moves past it to the next
        aligned address; None when it does not fit (or holds no bytes: nothing to carve)."""
        off = self.offset
        hit = self.views.get((off, shape, dtype))
        if hit is not None:  # the views are dropped with the block: a hit lies inside this one
            data, size = hit
            self.offset = off + size
            return data
        nbytes = math.prod(shape) * dtype.itemsize
        size = (nbytes + ALIGNMENT - 1) & -ALIGNMENT
        if nbytes == 0 or off + size > self.capacity:
            return None
        data = self.block[off : off + nbytes].view(dtype).reshape(shape)
        if len(self.views) >= _VIEWS_KEPT:
            self.views.clear()
        self.views[(off, shape, dtype)] = (data, size)
        self.offset = off + size
        return data

    def move_to(self, offset: int) -> None:
        """Put the write pointer at `offset` (0: the front, for a new cycle or a new lap)."""
        self.offset = offset

    def holds(self, address: int) -> bool:
        """True when `address` lies inside this block (not a spill on the heap)."""
        return 0 <= address - self.base < self.capacity

    # ---- learning its size ---------------------------------------------------------
    def learn(self, largest_cycle: int, cycles: int) -> int:
        """After a cycle: the size this arena should have now by its learning policy (`size_for`),
        or 0 when the policy keeps it. `largest_cycle`: the most bytes one cycle asked for so far;
        `cycles`: how many cycles have ended."""
        cfg = self.config
        if not self.sized:
            first = cfg.policy_learning is LearningPolicy.FIRST_LOOP
            later = cfg.policy_learning is LearningPolicy.OVER_TIME and cycles >= cfg.cycles_before_initialization
            return self.size_for(largest_cycle) if first or later else 0
        if cfg.policy_spill is not SpillPolicy.REALLOCATE:
            return 0
        # ND4J grows only when currentSize > 0, so an arena learned from an empty first cycle stays
        # empty and spills forever; kit grows it too. A circular one is ND4J's "trimmed mode"
        # (Nd4jWorkspace.alloc / initializeWorkspace): a ring learned from small first cycles (a
        # prefetch queue whose first batch was short) grows when a cycle outgrows its block, the
        # learned cycle x 1.3, instead of lapping live data; a cycle that fits the block keeps it
        room = self.ring_block if cfg.circular else self.capacity
        return self.size_for(largest_cycle) if largest_cycle > room else 0

    def size_for(self, largest_cycle: int) -> int:
        """The size for cycles of `largest_cycle` bytes (ND4J initializeWorkspace): over-allocated
        as the policy says, at least min_size, never past max_size; the arena counts as sized."""
        cfg = self.config
        size = largest_cycle
        if cfg.max_size:
            size = min(size, cfg.max_size)
        if cfg.circular:
            size = int(size * 1.3)
            self.ring_block = size  # ND4J's initialBlockSize: one cycle's room, before overallocation
        if cfg.policy_allocation is AllocationPolicy.OVERALLOCATE:
            size = int(size * (1 + cfg.overallocation_limit))
        size = max(size, cfg.min_size)
        if cfg.max_size:  # ND4J's init(): the cap holds after over-allocation too; the block is whole
            size = min(size, cfg.max_size - cfg.max_size % ALIGNMENT)  # aligned blocks, never past the cap
        self.sized = True
        return size

    def start(self) -> Any:
        """The block a config's `initial_size` asks for, made now (over-allocated as the policy says,
        never past max_size), after which the arena counts as sized; None (and nothing made) without
        one. Returns what `replace` returns."""
        cfg = self.config
        if cfg.initial_size <= 0:
            return None
        size = cfg.initial_size
        if cfg.policy_allocation is AllocationPolicy.OVERALLOCATE:
            size = int(size * (1 + cfg.overallocation_limit))
        if cfg.max_size:
            size = min(size, cfg.max_size)
        self.sized = True
        return self.replace(size)
