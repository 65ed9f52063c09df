"""The workspace error family: every way a workspace can refuse, each its own class.

    >>> import kit
    >>> issubclass(kit.workspace.ArrayFromClosedScopeError, kit.workspace.StaleArrayError)
    True

`StaleArrayError` and its four subclasses say *why* an array may no longer be used (its scope
closed, its workspace was reopened or destroyed, a circular buffer lapped it); the others are
misuse of the workspace itself (a full arena, the wrong thread, scopes closed out of order, a bad
config). They live here so that the configuration, the arena and the per-thread table can raise them
without importing one another; `kit.workspace` re-exports every one as its own (`__module__`).
"""

from __future__ import annotations

__all__ = [
    "ArrayFromClosedScopeError",
    "ArrayFromDestroyedWorkspaceError",
    "ArrayFromOldCycleError",
    "ArrayOverwrittenError",
    "NoSuchWorkspaceError",
    "StaleArrayError",
    "WorkspaceConfigError",
    "WorkspaceError",
    "WorkspaceFullError",
    "WorkspaceScopeError",
    "WorkspaceThreadError",
]


class WorkspaceError(RuntimeError):
    """Base of every workspace error."""


class WorkspaceConfigError(WorkspaceError, ValueError):
    """An invalid WorkspaceConfig value."""


class StaleArrayError(WorkspaceError):
    """An array was used after the workspace memory it lives in moved on."""


class ArrayFromClosedScopeError(StaleArrayError):
    """ND4J's 'leaked workspace pointer': the array's cycle ended when its scope closed."""


class ArrayFromOldCycleError(StaleArrayError):
    """ND4J's 'outdated workspace pointer': the workspace was reopened since."""


class ArrayFromDestroyedWorkspaceError(StaleArrayError):
    """The workspace was destroyed and its arena released."""


class ArrayOverwrittenError(StaleArrayError):
    """A circular workspace wrapped around and overwrote the array's memory."""


class WorkspaceFullError(WorkspaceError, MemoryError):
    """SpillPolicy.FAIL and the arena is full."""


class WorkspaceThreadError(WorkspaceError):
    """A workspace was used from a thread that does not own it."""


class WorkspaceScopeError(WorkspaceError):
    """Scopes closed out of order, or a workspace used after destroy."""


class NoSuchWorkspaceError(WorkspaceError, KeyError):
    """leverage_to(name) named a workspace this thread does not have open."""


for _error in (
    WorkspaceError,
    WorkspaceConfigError,
    StaleArrayError,
    ArrayFromClosedScopeError,
    ArrayFromOldCycleError,
    ArrayFromDestroyedWorkspaceError,
    ArrayOverwrittenError,
    WorkspaceFullError,
    WorkspaceThreadError,
    WorkspaceScopeError,
    NoSuchWorkspaceError,
):
    _error.__module__ = "kit.workspaces.workspace"  # the public path, as tracebacks and pickles name it
del _error
