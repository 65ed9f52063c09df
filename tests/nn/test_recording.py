"""kit.nn.recording: what a recorded step notes. `record` keeps each kernel call (function,
arguments, result) of this thread only and nothing once it ends; a nested recording keeps its
calls to itself; KeepMgr stops noting past its byte budget; Recorder hands out the network's own
arrays and notes each one and each scope it closed."""

import threading

import numpy as np

from kit.nn import Sgd, mlp
from kit.nn.kernels import TAPE, relu_into, tanh_into
from kit.nn.recording import KeepMgr, Recorder, record
from kit.nn.workspace_mgr import ArrayType


def test_record_notes_each_kernel_call_with_its_arguments_and_result_then_stops():
    x, y = np.array([-1.0, 2.0]), np.empty(2)
    result, calls = record(lambda: (relu_into(np, x, y), "done")[1])
    assert result == "done"
    assert [(f.__name__, a[1] is x, a[2] is y, r) for f, a, r in calls] == [("relu_into", True, True, None)]
    assert TAPE.calls is None
    relu_into(np, x, y)
    assert len(calls) == 1  # nothing noted once the recording ended


def test_a_nested_recording_keeps_its_calls_and_another_thread_records_nothing():
    x, y = np.array([0.5]), np.empty(1)

    def outer():
        relu_into(np, x, y)
        _, inner = record(lambda: tanh_into(np, x, y))
        worker = threading.Thread(target=relu_into, args=(np, x, y))
        worker.start()
        worker.join(timeout=10)
        return inner

    inner, calls = record(outer)
    assert [f.__name__ for f, _, _ in inner] == ["tanh_into"]
    assert [f.__name__ for f, _, _ in calls] == ["relu_into"]  # not the inner one, not the other thread's


def test_keep_mgr_stops_the_tape_past_its_byte_budget():
    net = mlp(4, hidden=(8,), n_out=2)
    mgr = KeepMgr(net.device, max_bytes=64)

    def run():
        mgr.create(ArrayType.ACTIVATIONS, (4,), np.float32, net.device)  # 16 bytes: within
        assert TAPE.calls is not None and not mgr.over
        mgr.create(ArrayType.ACTIVATIONS, (32,), np.float32, net.device)  # 128 more: over
        assert TAPE.calls is None and mgr.over

    record(run)
    assert mgr.recorded == 16 + 128


def test_the_recorder_hands_out_the_networks_arrays_and_notes_them_and_the_scopes_it_closed():
    net = mlp(4, hidden=(8,), n_out=2, updater=Sgd(0.1))
    rec = Recorder(net.train_mgr)
    with rec.iteration():
        with rec.layer_call():
            a = rec.create(ArrayType.FF_WORKING_MEM, (3,), np.float32, net.device)
            assert rec.made == [a.data] and a.workspace is not None  # the network's own workspace
    assert len(rec.scopes) == 2 and not rec.reentered
    _, before, after = rec.scopes[0]  # the layer call's scope closed first
    assert after[0] - before[0] == 1  # one allocation in it
