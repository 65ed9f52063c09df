"""Memory workspaces (ND4J's): arenas for cyclic workloads, with loud misuse.

    workspace           Workspace (its scope, its cycles, carving), get_workspace_for_current_thread (the door)
    workspace_config    ND4J's four policies, WorkspaceConfig, the debug switches
    workspace_arena     the Arena a workspace owns: its block, the write pointer, the size it learns
    workspace_cycles    whether an array of an earlier cycle may still be used, and the error saying why
    workspace_registry  the per-thread table of workspaces
    workspace_errors    every way a workspace refuses, each its own class

Built on kit.core (memory, context, devices); kit.arrays sits above. `kit.Workspace`,
`kit.WorkspaceConfig` and `kit.workspace` are the names chapters use.
"""
