"""Watching memory: readings, the memory timeline and live panels.

    readings            one dictionary with every "how much?" (heap, cache, workspaces, RSS, GPU)
    timeline            every allocation and release while it records (timeline_views: tables, plots, traces)
    panels              how a live panel shows itself (panel_live: its running badge)
    widgets             the memory, timing, training and per-worker panels

Above kit.core, kit.workspaces and kit.measurement; `kit.readings`, `kit.widgets` and
`kit.memory_timeline` are re-exported by `kit`.
"""
