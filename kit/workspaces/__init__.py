"""Memory workspaces (ND4J's): arenas for cyclic workloads, with loud misuse.

    workspace           Workspace, get_workspace_for_current_thread, leverage and scope (the public door)
    workspace_config    ND4J's four policies, WorkspaceConfig, the debug switches
    workspace_cycles    entering and leaving a scope; whether an array of an earlier cycle may be used
    workspace_registry  the per-thread table of workspaces
    workspace_errors    every way a workspace refuses, each its own class

Built on kit.core (memory, context, devices); kit.arrays sits above. `kit.Workspace`,
`kit.WorkspaceConfig` and `kit.workspace` are the names chapters use.
"""
