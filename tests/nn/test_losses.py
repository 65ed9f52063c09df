"""kit.nn.losses: each loss's value and gradient, against the formula worked out in NumPy by hand; the
registry a saved configuration names a loss by; the words a classification loss refuses outputs in."""

import numpy as np
import pytest

import kit
from kit.nn import MSE, SoftmaxCrossEntropy
from kit.nn.losses import Loss, loss_from_config, rows_of_scores
from kit.nn.workspace_mgr import LayerWorkspaceMgr, WorkspaceMode

RNG = np.random.default_rng(42)
Z = RNG.normal(size=(5, 4))  # logits or outputs, a batch of 5
LABELS = np.eye(4)[RNG.integers(0, 4, 5)]  # one-hot rows


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _by_hand(loss, z, t):
    if isinstance(loss, SoftmaxCrossEntropy):
        return -(t * np.log(_softmax(z))).sum() / len(z), (_softmax(z) - t) / len(z)
    return ((z - t) ** 2).mean(), 2 * (z - t) / z.size


@pytest.mark.parametrize("loss", [SoftmaxCrossEntropy(), MSE()], ids=["SoftmaxCrossEntropy", "MSE"])
def test_value_and_gradient_are_the_formulas(loss):
    mgr = LayerWorkspaceMgr(WorkspaceMode.NONE)
    value, grad = loss.value_and_grad(kit.array(Z), kit.array(LABELS), mgr)
    expected_value, expected_grad = _by_hand(loss, Z, LABELS)
    assert value == pytest.approx(expected_value, rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), expected_grad, rtol=1e-12, atol=1e-15)
    assert loss.value(kit.array(Z), kit.array(LABELS), mgr) == pytest.approx(expected_value, rel=1e-12)


@pytest.mark.parametrize(("loss", "activated"), [(SoftmaxCrossEntropy(), _softmax(Z)), (MSE(), Z)],
                         ids=["SoftmaxCrossEntropy: probabilities", "MSE: the outputs"])  # fmt: skip
def test_activate_writes_the_prediction(loss, activated):
    result = kit.zeros(Z.shape, dtype=Z.dtype)
    loss.activate(kit.array(Z), result, LayerWorkspaceMgr(WorkspaceMode.NONE))
    np.testing.assert_allclose(result.numpy(), activated, rtol=1e-12)


@pytest.mark.parametrize("loss", [SoftmaxCrossEntropy(), MSE()], ids=["SoftmaxCrossEntropy", "MSE"])
def test_a_saved_configuration_names_the_loss_it_makes_again(loss):
    again = loss_from_config(loss.config())
    assert type(again) is type(loss) and loss.config() == {"type": type(loss).__name__}
    assert SoftmaxCrossEntropy.classification and not MSE.classification


def test_an_unknown_loss_in_a_configuration_is_refused_naming_the_known_ones():
    with pytest.raises(
        ValueError, match=r"unknown loss \{'type': 'Hinge'\} in a saved configuration; known: \[.*'MSE'"
    ):
        loss_from_config({"type": "Hinge"})


def test_a_classification_loss_refuses_outputs_that_are_not_rows_of_scores_naming_the_remedy():
    with pytest.raises(ValueError, match=r"output has shape \(5, 2, 2\) \(each example \(2, 2\)\); end the layers"):
        rows_of_scores((5, 2, 2), "SoftmaxCrossEntropy")
    mgr = LayerWorkspaceMgr(WorkspaceMode.NONE)
    with pytest.raises(ValueError, match="SoftmaxCrossEntropy scores one row of class scores per example"):
        SoftmaxCrossEntropy().value_and_grad(kit.array(Z.reshape(5, 2, 2)), kit.array(Z.reshape(5, 2, 2)), mgr)


def test_a_loss_of_ones_own_is_registered_and_replayed_only_on_its_own_promise():
    class Halved(MSE):
        def value_and_grad(self, out, labels, mgr):
            value, grad = super().value_and_grad(out, labels, mgr)
            return value / 2, grad

    class Promised(MSE):
        replayable = True

        def activate(self, out, result, mgr):
            super().activate(out, result, mgr)

    try:
        assert Loss.registry["Halved"] is Halved and type(loss_from_config({"type": "Halved"})) is Halved
        assert MSE.replayable and not Halved.replayable and Promised.replayable
    finally:
        del Loss.registry["Halved"], Loss.registry["Promised"]
