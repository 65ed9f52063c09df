"""The per-thread table of workspaces, and the questions asked of it: which workspace is `name`
here, which one is open outside this one, which are alive anywhere.

    >>> import kit
    >>> from kit.workspaces.workspace import get_manager
    >>> ws = kit.get_workspace_for_current_thread(name="TABLE")
    >>> get_manager().named("TABLE") == [ws]
    True
    >>> ws.destroy(); get_manager().named("TABLE")
    []

ND4J's BasicWorkspaceManager keeps a ThreadLocal map; kit keeps one `_Manager` per thread in
`STATE.thread.manager`, keyed by (name, device). Creating a workspace is `kit.workspace`'s job
(`get_workspace_for_current_thread`); this module only finds, lists and forgets them, so it needs
no `Workspace` class and the class can call `forget` from `destroy()` without an import circle.
Everything here is re-exported by `kit.workspace`.
"""

from __future__ import annotations

from typing import Any

from kit.core.context import current_workspace, resolve
from kit.core.devices import AnyDevice, as_device
from kit.state import STATE
from kit.workspaces.workspace_errors import NoSuchWorkspaceError, WorkspaceScopeError

__all__ = [
    "all_workspaces",
    "destroy_all_workspaces_for_current_thread",
    "get_manager",
    "leverage_target",
    "parent_of_current_workspace",
]

_thread = STATE.thread  # this thread's slots: .ws (the current workspace), .manager
Workspace = Any  # kit.workspace.Workspace, named in hints only (importing it here would be a circle)


class _Manager:
    """One thread's workspaces, keyed by (name, device): a workspace belongs to one device, so
    "STEP" on cpu:0 and "STEP" on cpu:1 are two arenas (ND4J binds a thread to one device; kit's
    threads may use several, so the device is part of the key). The device object, not its name:
    two sets of logical devices both have a "cpu:0/logical0of2", and their slots are not one."""

    def __init__(self) -> None:
        self.workspaces: dict[tuple[str, AnyDevice], Workspace] = {}

    def get(self, name: str, device: AnyDevice) -> Workspace | None:
        return self.workspaces.get((name, device))

    def named(self, name: str) -> list[Workspace]:
        """This thread's workspaces called `name`, on any device."""
        return [ws for (n, _), ws in self.workspaces.items() if n == name]

    def forget(self, ws: Workspace) -> None:
        """Drop `ws` from the table (its destroy() calls this); a newer one of that name stays."""
        key = (ws.name, ws.device)
        if self.workspaces.get(key) is ws:
            del self.workspaces[key]


def get_manager() -> _Manager:
    mgr = _thread.manager
    if mgr is None:
        mgr = _thread.manager = _Manager()
    return mgr


def destroy_all_workspaces_for_current_thread() -> int:
    """Destroy every workspace of this thread, on every device (they must all be closed). Returns how many."""
    mgr = get_manager()
    open_ones = [f"{ws.name} ({ws.device.name})" for ws in mgr.workspaces.values() if ws.is_scope_active]
    if open_ones:
        raise WorkspaceScopeError(f"cannot destroy workspaces that are open: {open_ones}; leave their scopes first")
    victims = list(mgr.workspaces.values())
    for ws in victims:
        ws.destroy()
    return len(victims)


@STATE.on_reset
def _close_and_destroy_this_threads_workspaces() -> None:
    """kit.state.reset(): this thread's workspaces, open or not, are closed and destroyed."""
    for ws in list(get_manager().workspaces.values()):
        ws._open = False
    destroy_all_workspaces_for_current_thread()


def leverage_target(name: str, enforce_existence: bool = False, device: AnyDevice | None = None) -> Workspace | None:
    """The open workspace `name` on `device` (default: the default device) of this thread that
    leverage_to copies into, or None (ND4J: the array stays where it is) unless
    `enforce_existence` asks for an error. A workspace of that name on another device is never
    the target: an array is not copied between devices by leverage_to."""
    dev = as_device(device)
    mgr = get_manager()
    target = mgr.get(name, dev) or next((ws for ws in mgr.named(name) if ws.physical is dev.physical), None)
    if target is None or not target.is_scope_active:
        if enforce_existence:
            elsewhere = [ws.device.name for ws in mgr.named(name) if ws.physical is not dev.physical]
            state = "does not exist" if target is None else "is not open"
            where = (
                f" (it exists on {', '.join(elsewhere)}: leverage_to copies within a device; .to({elsewhere[0]!r}) "
                f"copies the array to {elsewhere[0]}, into its workspace when that is the current one)"
                if elsewhere
                else ""
            )
            raise NoSuchWorkspaceError(
                f"leverage_to({name!r}): workspace {name!r} {state} on {dev.name} on this thread{where}"
            )
        return None
    return target


def parent_of_current_workspace() -> Workspace | None:
    """The workspace that was current when the current one was opened (leverage's target)."""
    current = current_workspace()
    parent = current.parent if current is not None else None
    return resolve(parent) if parent is not None else None  # through a suspended generator's block


def all_workspaces() -> list[Workspace]:
    """Every live workspace of every thread (for panels and stats)."""
    with STATE.lock:
        return [ws for ws in list(STATE.workspaces) if not ws.destroyed]
