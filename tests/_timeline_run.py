"""What the timeline tests share (test_timeline.py, test_timeline_views.py): equal batches of the digits,
this thread's workspaces by name, and an MLP trained inside a timeline."""

import threading

import kit
from kit.data import DataSet
from kit.nn import Nesterovs, WorkspaceMode, mlp


def batches(train, n, size=64):
    x, y = train.features.numpy(), train.labels.numpy()
    return [DataSet(x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]) for i in range(n)]


def this_threads_workspaces(names):
    mine = threading.get_ident()
    return {ws.name: ws for ws in kit.workspace.all_workspaces() if ws.name in names and ws.thread_id == mine}


def trained_in_timeline(train):
    """A fresh SEPARATE-mode MLP trained on 5 equal batches inside a timeline: its workspaces are
    made (and learn) while it records. (Nesterovs: its update carves a working array; Sgd's
    writes over the gradient and carves none: test_timeline.py shows it.)"""
    net = mlp(64, hidden=(32,), n_out=10, updater=Nesterovs(0.1), training_workspace_mode=WorkspaceMode.SEPARATE)
    with kit.memory_timeline() as tl:
        for ds in batches(train, 5):
            net.fit(ds)
    names = {e["workspace"] for e in tl.events if e["workspace"] is not None}
    return tl, this_threads_workspaces(names)
