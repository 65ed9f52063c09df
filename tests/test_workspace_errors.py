"""kit.workspaces.workspace_errors: the workspace error family, one class for each way a workspace
refuses, each caught by the base a user would reach for, and each named by its public path."""

import pickle

import pytest

import kit
from kit.workspaces import workspace_errors
from kit.workspaces.workspace import WorkspaceConfig

# each error, and the built-in exceptions besides WorkspaceError that `except` may catch it as
FAMILY = {
    "WorkspaceError": (RuntimeError,),
    "WorkspaceConfigError": (ValueError,),
    "StaleArrayError": (),
    "ArrayFromClosedScopeError": ("StaleArrayError",),
    "ArrayFromOldCycleError": ("StaleArrayError",),
    "ArrayFromDestroyedWorkspaceError": ("StaleArrayError",),
    "ArrayOverwrittenError": ("StaleArrayError",),
    "WorkspaceFullError": (MemoryError,),
    "WorkspaceThreadError": (),
    "WorkspaceScopeError": (),
    "NoSuchWorkspaceError": (KeyError,),
}


def test_the_family_is_every_error_the_module_exports():
    assert set(FAMILY) == set(workspace_errors.__all__)


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_each_error_is_a_workspace_error_and_what_else_it_promises(name):
    cls = getattr(workspace_errors, name)
    assert issubclass(cls, workspace_errors.WorkspaceError) and issubclass(cls, RuntimeError)
    for base in FAMILY[name]:
        assert issubclass(cls, getattr(workspace_errors, base) if isinstance(base, str) else base), (name, base)
    stale = name != "StaleArrayError" and issubclass(cls, workspace_errors.StaleArrayError)
    assert stale == ("StaleArrayError" in FAMILY[name])


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_each_error_is_named_by_its_public_path_and_survives_a_round_trip(name):
    cls = getattr(workspace_errors, name)
    assert cls.__module__ == "kit.workspaces.workspace"
    assert getattr(kit.workspace, name) is cls  # `except kit.workspace.X` catches it
    again = pickle.loads(pickle.dumps(cls("said")))  # what a worker process sends back
    assert type(again) is cls and again.args == ("said",)


def test_an_array_used_after_its_scope_closed_is_caught_as_stale():
    ws = kit.get_workspace_for_current_thread(WorkspaceConfig(), "ERRORS_WS")
    try:
        with ws:
            x = kit.ones((2,))
        with pytest.raises(workspace_errors.StaleArrayError) as info:
            x.sum()
        assert type(info.value) is workspace_errors.ArrayFromClosedScopeError
    finally:
        ws.destroy()


def test_a_bad_configuration_is_caught_as_a_value_error():
    with pytest.raises(ValueError, match="overallocation_limit=-1") as info:
        WorkspaceConfig(overallocation_limit=-1)
    assert isinstance(info.value, workspace_errors.WorkspaceConfigError)
