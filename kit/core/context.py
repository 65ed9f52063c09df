"""The allocation context: which workspace new arrays go to on this thread.

    >>> import kit
    >>> kit.context.current_workspace() is None  # None: the heap
    True
    >>> ws = kit.get_workspace_for_current_thread(name="CONTEXT")
    >>> with ws:
    ...     inside = kit.context.current_workspace()
    ...     with kit.scope_out_of_workspaces():  # heap allocations inside an open workspace
    ...         keep = kit.zeros((10,))
    >>> inside is ws, keep.is_attached
    (True, False)
    >>> ws.destroy()

One thread-local slot, read by `kit.memory.allocate` on every allocation and written only by
workspaces entering and leaving their scopes (kit.workspace) and by `scope_out_of_workspaces`.
It sits below both, so neither has to reach into the other's module state.

A generator that yields inside `with kit.scope_out_of_workspaces():` does not take its caller out
of the caller's workspace: the block belongs to the generator's frame, its arrays go to the heap
and the caller's where they went before. (A `contextlib.contextmanager` that yields inside the
block means the opposite, and gets it.) Scopes still nest: the innermost open workspace wins.

    >>> ws = kit.get_workspace_for_current_thread(name="CONTEXT")
    >>> def rows():
    ...     with kit.scope_out_of_workspaces():
    ...         yield kit.zeros((2,))                # made in the generator: the heap
    >>> with ws:
    ...     for row in rows():
    ...         mine = kit.zeros((2,))               # made by the caller: its workspace
    ...         print(row.is_attached, mine.workspace is ws)
    False True
    >>> ws.destroy()
"""

from __future__ import annotations

import contextlib
import sys
from types import FrameType
from typing import Any

from kit.state import STATE

__all__ = ["current_workspace", "scope_out_of_workspaces", "set_current_workspace"]

_SUSPENDABLE = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
_CONTEXTLIB = contextlib.__file__


_tls = STATE.thread  # this thread's slots (kit.state): `.ws` is the current workspace


class _OutOfWorkspaces:
    """What `scope_out_of_workspaces` makes current while a workspace is open: the heap for the
    code inside its block, and `parent` (the workspace that was current) for code outside it.
    `frame` is set when the block is in a generator (or coroutine): the block is then suspended
    whenever that frame is not on the running stack. `physical` is None, so `allocate`'s one
    comparison sends every allocation past the workspace fast path to `resolve`."""

    __slots__ = ("frame", "parent")
    physical = None
    name = None

    def __init__(self, parent: Any, frame: FrameType | None) -> None:
        self.parent, self.frame = parent, frame


def _on_stack(frame: FrameType) -> bool:
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


def resolve(ws: Any) -> Any:
    """The workspace new arrays go to when `ws` is current: `ws` itself, or, for a
    scope_out_of_workspaces block, None (the heap) unless the generator that holds the block is
    suspended, when it is what was current before the block (looked up the same way)."""
    while ws.__class__ is _OutOfWorkspaces:
        if ws.frame is None or _on_stack(ws.frame):
            return None
        ws = ws.parent
    return ws


def suspended_between(top: Any, ws: Any) -> bool:
    """True when everything current above `ws` (from `top` down) is scope_out_of_workspaces blocks
    of suspended generators: `ws` may close under them, as its caller did not open them."""
    node = top
    while node is not ws:
        if node.__class__ is not _OutOfWorkspaces or node.frame is None or _on_stack(node.frame):
            return False
        node = node.parent
    return True


def current_workspace() -> Any:
    """The workspace new arrays go to on this thread, or None (heap)."""
    ws = _tls.ws
    return ws if ws is None or ws.__class__ is not _OutOfWorkspaces else resolve(ws)


def set_current_workspace(ws: Any) -> Any:
    """Make `ws` (or None) current on this thread; returns the previous one."""
    previous = _tls.ws
    _tls.ws = ws
    return previous


def _block_frame() -> FrameType | None:
    """The frame of the `with` statement entering the block when it is a generator's (not one
    run by contextlib to enter a context manager): the block is bound to that frame."""
    f = sys._getframe(2)
    if not f.f_code.co_flags & _SUSPENDABLE:
        return None
    driver = f.f_back
    if driver is not None and driver.f_code.co_filename == _CONTEXTLIB:
        return None  # @contextmanager: the caller's `with` body is meant to be out of workspaces
    return f


class scope_out_of_workspaces:  # noqa: N801 - used like a function: with kit.scope_out_of_workspaces():
    """Inside the block, new arrays go to the heap even while a workspace is open. In a
    generator, only the generator's own code is out of workspaces (see the module docstring)."""

    def __enter__(self) -> None:
        current = _tls.ws
        if current is None:  # nothing open: the heap already; nothing to restore
            self._marker = None
            return
        self._marker = _tls.ws = _OutOfWorkspaces(current, _block_frame())

    def __exit__(self, *exc: object) -> None:
        marker = self._marker
        if marker is None:
            return
        self._marker = None
        marker.frame = None
        current = _tls.ws
        if current is marker:
            _tls.ws = marker.parent
            return
        # a workspace opened while the generator was suspended is still open: take the block out
        # of the chain below it, so closing that workspace makes the caller's workspace current
        node = current
        while node is not None and node.parent is not marker:
            node = node.parent
        if node is not None:
            node.parent = marker.parent
