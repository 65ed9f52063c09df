"""kit.nn.recompute: a recomputed block (activation checkpointing) gives the same training step as a
stored one, keeps its input and output only (its insides live in WS_RECOMPUTE, one block at a time),
and the choice is saved in the network's configuration and checked."""

import math

import numpy as np
import pytest

from kit.data import DataSet
from kit.nn import BatchNorm, Conv2D, Dense, GlobalAvgPool, Network, ReLU, Residual, Sgd, resnet18
from kit.nn.workspace_mgr import WorkspaceMode
from kit.workspaces.workspace import ALIGNMENT


def carved(nbytes):
    """Bytes an array of `nbytes` takes in an arena (aligned blocks)."""
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


@pytest.mark.parametrize("mode", list(WorkspaceMode), ids=lambda m: m.value)
def test_a_recomputed_block_gives_the_same_step_and_keeps_its_input_and_output_only(mode, monkeypatch):
    monkeypatch.setattr(Conv2D, "keep_columns", False)  # the blocks' own arrays only, to count them
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal((3, 2, 6, 6)), rng.integers(0, 3, 3)

    def run(recompute):
        net = Network(
            [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), Residual(4, recompute=recompute),
             Residual(5, use_1x1conv=True, stride=2, recompute=recompute), GlobalAvgPool(), Dense(3)],
            (2, 6, 6), dtype="float64", seed=9, training_workspace_mode=mode, updater=Sgd(0.1),
        )  # fmt: skip
        for _ in range(3):
            net.fit_batch(DataSet(x, y, num_classes=3))
        stats = net.workspace_stats()["training"]
        act = stats.get("WS_ALL_LAYERS_ACT", {}).get("max_cycle_bytes")
        return net.params().numpy().copy(), act, stats.get("WS_RECOMPUTE", {}).get("max_cycle_bytes")

    (stored, act_stored, none), (recomputed, act_recomputed, block) = run(False), run(True)
    np.testing.assert_array_equal(stored, recomputed)  # parameters and BatchNorm's running statistics
    assert none is None
    if mode is WorkspaceMode.SEPARATE:  # each block now keeps its output only, the rest is in WS_RECOMPUTE
        f64 = lambda *shape: carved(8 * math.prod(shape))  # noqa: E731
        b1 = 4 * f64(3, 4, 6, 6) + 2 * f64(2, 4)  # conv1, bn1, conv2, bn2 (+ statistics)
        b2 = 5 * f64(3, 5, 3, 3) + 2 * f64(2, 5)  # and the 1x1 shortcut
        assert act_stored - act_recomputed == (b1 - f64(3, 4, 6, 6)) + (b2 - f64(3, 5, 3, 3))
        assert block == b1  # the larger block's insides, one block at a time


def test_recompute_is_saved_in_the_configuration_and_checked():
    net = resnet18(size=8, recompute=True)
    blocks = [layer for layer in net.body.layers if isinstance(layer, Residual)]
    assert len(blocks) == 8 and all(b.recompute and b.config()["recompute"] for b in blocks)
    twin = Network.from_config(net.configuration)
    assert all(b.recompute for b in twin.body.layers if isinstance(b, Residual))
    assert "recompute" not in Residual(4).config()  # files written before it existed read the same
    with pytest.raises(TypeError, match=r"Residual\(recompute='yes'\): True or False"):
        Residual(4, recompute="yes")
