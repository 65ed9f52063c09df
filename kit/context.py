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
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["current_workspace", "scope_out_of_workspaces", "set_current_workspace"]


class _Context(threading.local):
    ws: Any = None  # a class default, so every thread reads None until it opens a workspace


_tls = _Context()


def current_workspace() -> Any:
    """The workspace new arrays go to on this thread, or None (heap)."""
    return _tls.ws


def set_current_workspace(ws: Any) -> Any:
    """Make `ws` (or None) current on this thread; returns the previous one."""
    previous = _tls.ws
    _tls.ws = ws
    return previous


class scope_out_of_workspaces:  # noqa: N801 - used like a function: with kit.scope_out_of_workspaces():
    """Inside the block, new arrays go to the heap even while a workspace is open."""

    def __enter__(self) -> None:
        self._saved = set_current_workspace(None)

    def __exit__(self, *exc: Any) -> None:
        set_current_workspace(self._saved)
