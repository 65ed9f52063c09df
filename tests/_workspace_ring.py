"""What the workspace tests share (test_workspace.py, test_workspace_cycles.py): a workspace for this
thread by name, and a full circular one."""

import kit
from kit.workspaces.workspace import AllocationPolicy, LearningPolicy, ResetPolicy, WorkspaceConfig


def ws_named(name, **cfg):
    return kit.get_workspace_for_current_thread(WorkspaceConfig(**cfg), name)


def _full_ring(name: str) -> tuple[kit.Workspace, list]:
    """A 4,096-byte circular workspace holding 4 batches of 1,024 bytes (batch i full of i): full."""
    cfg = dict(
        initial_size=4096,
        policy_reset=ResetPolicy.ENDOFBUFFER_REACHED,
        policy_allocation=AllocationPolicy.STRICT,
        policy_learning=LearningPolicy.NONE,
    )
    ws = ws_named(name, **cfg)
    batches = []
    for i in range(4):  # 4 x 1024 bytes fill the ring exactly
        with ws:
            batches.append(kit.full((256,), float(i)))
    return ws, batches
