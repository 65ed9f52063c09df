"""The modules one MLP training step passes through at iteration 20 (a sys.setprofile trace), with
replay off (the layers' code, as the book teaches it) and on (the kernels replayed): a ratchet,
so that a thin forwarding module or a helper called per step does not creep back onto the path
a reader follows with a debugger."""

import collections
import contextlib
import os
import sys

import numpy as np
import pytest

import kit
from kit.data import DataSet
from kit.nn import mlp
from kit.nn.replay import replay_off

# the ratchet: lower it when the path gets shorter (issue 42's gauge; 19 and 15 on e24e6a7, 13 and 9 on f94d4cf)
MODULES = {"replay-off": 11, "replay-on": 8}


def _modules_of_one_step(replayed: bool) -> dict[str, list[str]]:
    """kit's modules whose code ran during iteration 20 of an MLP, each with the functions that ran."""
    root = os.path.dirname(kit.__file__) + os.sep
    rng = np.random.default_rng(0)
    ds = DataSet(rng.standard_normal((8, 12)).astype("float32"), np.eye(5, dtype="float32")[rng.integers(0, 5, 8)])
    net = mlp(12, hidden=(16,), n_out=5)
    with contextlib.nullcontext() if replayed else replay_off():
        for _ in range(19):
            net.fit_batch(ds)
        seen = collections.defaultdict(set)

        def profile(frame, event, arg):
            if event == "call" and frame.f_code.co_filename.startswith(root):
                seen[frame.f_code.co_filename[len(root) :]].add(frame.f_code.co_name)

        sys.setprofile(profile)
        try:
            net.fit_batch(ds)
        finally:
            sys.setprofile(None)
    assert (net.train_plans.used > 0) == replayed, net.train_plans.declined
    return {module: sorted(funcs) for module, funcs in sorted(seen.items())}


@pytest.mark.parametrize("mode", sorted(MODULES))
def test_the_modules_an_mlp_step_passes_through_stay_at_the_ratchet(mode):
    modules = _modules_of_one_step(replayed=mode == "replay-on")
    listed = "\n".join(f"  {m}: {', '.join(f)}" for m, f in modules.items())
    assert len(modules) <= MODULES[mode], f"{len(modules)} modules, over {MODULES[mode]}:\n{listed}"
    assert len(modules) == MODULES[mode], f"{len(modules)} modules now: lower MODULES[{mode!r}]\n{listed}"


def test_the_trace_sees_the_taught_path_only_when_replay_is_off():
    off, on = _modules_of_one_step(replayed=False), _modules_of_one_step(replayed=True)
    assert "forward" in off["nn/layers.py"] and "nn/layers.py" not in on  # Dense.forward: a breakpoint stops
    assert "nn/replay.py" in on and "nn/replay.py" not in off
    assert "dense_into" in on["nn/kernels.py"]  # the kernels run either way
