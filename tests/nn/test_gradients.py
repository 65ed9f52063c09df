"""Every layer's and loss's gradients against a float64 central-difference reference."""

import numpy as np
import pytest

import kit
from kit.nn import (
    MSE,
    AvgPool2D,
    BatchNorm,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    GlobalAvgPool,
    MaxPool2D,
    Network,
    ReLU,
    Residual,
    Sequential,
    Sigmoid,
    Softmax,
    SoftmaxCrossEntropy,
    Tanh,
    WorkspaceMode,
    conv,
)
from kit.nn.losses import Loss
from kit.nn.workspace_mgr import ArrayType


class Projection(Loss):
    """loss = sum(out * R) for a fixed random R: its gradient is R, so every output matters."""

    def __init__(self, r):
        self.r = r

    def value_and_grad(self, out, labels, mgr):
        g = mgr.create(ArrayType.ACTIVATION_GRAD, out.shape, out.dtype, out.device)
        g.data[...] = self.r
        return float((out.data * self.r).sum()), g


def run(net, x, training):
    """(loss, flat param gradient, input gradient) with the dropout mask reseeded every call."""
    kit.seed(123)
    mgr = net.train_mgr
    with mgr.iteration():
        out = net._forward(kit.asarray(x), mgr, training)
        loss, eps = net.loss.value_and_grad(out, None, mgr)
        dx = net._backward(eps, mgr).numpy().copy()
    return loss, net.flat_grads.numpy().copy(), dx


def check(layers, input_shape, batch=3, training=True, mode=WorkspaceMode.NONE, h=1e-6, tol=1e-5, seed=0):
    rng = np.random.default_rng(seed)
    probe = Network(layers, input_shape, dtype="float64", training_workspace_mode=mode)
    net = Network(
        list(probe.body.layers),
        input_shape,
        loss=Projection(rng.standard_normal((batch, *probe.output_shape))),
        dtype="float64",
        training_workspace_mode=mode,
        seed=seed,
        input_gradient=True,
    )
    params = net.flat_params.numpy()
    # generic values (BN gamma != 1); running statistics random but with a positive variance
    params[...] = rng.standard_normal(params.shape) * 0.5 + params * 0.5
    fixed = ~np.array([_trainable(net, i) for i in range(params.size)], dtype=bool)
    params[fixed] = np.abs(params[fixed]) + 0.5
    x = rng.standard_normal((batch, *input_shape))
    _, grad_p, grad_x = run(net, x, training)

    def loss_at():
        return run(net, x, training)[0]

    num_p = np.zeros_like(params)
    for i in range(params.size):
        if not _trainable(net, i):
            continue
        keep = params[i]
        params[i] = keep + h
        up = loss_at()
        params[i] = keep - h
        down = loss_at()
        params[i] = keep
        num_p[i] = (up - down) / (2 * h)
    num_x = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        keep = x[i]
        x[i] = keep + h
        up = run(net, x, training)[0]
        x[i] = keep - h
        down = run(net, x, training)[0]
        x[i] = keep
        num_x[i] = (up - down) / (2 * h)
    mask = np.array([_trainable(net, i) for i in range(params.size)], dtype=bool)
    np.testing.assert_allclose(grad_p[mask], num_p[mask], rtol=tol, atol=tol)
    np.testing.assert_allclose(grad_x, num_x, rtol=tol, atol=tol)
    return net


def _trainable(net, i):
    offset = 0
    for _, spec in net._specs:
        size = int(np.prod(spec.shape))
        if offset <= i < offset + size:
            return spec.trainable
        offset += size
    return True


@pytest.mark.parametrize(
    ("name", "layers", "shape"),
    [
        ("dense", [Dense(4)], (5,)),
        ("relu", [Dense(4), ReLU()], (3,)),
        ("tanh", [Tanh()], (4,)),
        ("sigmoid", [Sigmoid()], (4,)),
        ("softmax", [Softmax()], (5,)),
        ("dropout", [Dropout(0.6)], (6,)),
        ("flatten", [Flatten(), Dense(3)], (2, 2, 2)),
        ("conv", [Conv2D(3, 3)], (2, 5, 5)),
        ("conv stride+pad", [Conv2D(2, 3, stride=2, padding=1)], (2, 5, 5)),
        ("conv 1x1", [Conv2D(2, 1, stride=2)], (3, 4, 4)),
        ("maxpool", [MaxPool2D(2)], (2, 4, 4)),
        ("maxpool overlap pad", [MaxPool2D(3, stride=2, padding=1)], (1, 5, 5)),
        ("avgpool", [AvgPool2D(2)], (2, 4, 4)),
        ("avgpool pad", [AvgPool2D(3, stride=1, padding=1)], (1, 4, 4)),
        ("global avg pool", [GlobalAvgPool()], (3, 3, 2)),
        ("batchnorm 1d", [BatchNorm()], (4,)),
        ("batchnorm 2d", [BatchNorm()], (2, 3, 3)),
        ("residual identity", [Residual(2)], (2, 4, 4)),
        ("residual 1x1", [Residual(3, use_1x1conv=True, stride=2)], (2, 4, 4)),
        ("sequential", [Sequential([Dense(3), Tanh()]), Dense(2)], (4,)),
    ],
)
def test_layer_gradients_match_finite_differences(name, layers, shape):
    check(layers, shape)


@pytest.mark.parametrize(
    ("name", "layers", "shape"),
    [
        ("conv same size: eps convolved", [Conv2D(3, 5, padding=2)], (2, 6, 5)),
        ("conv 1x1 stride 1", [Conv2D(2, 1)], (3, 3, 4)),
        ("conv stride 2 rectangular", [Conv2D(2, 3, stride=2)], (2, 7, 6)),
        ("conv even kernel padded", [Conv2D(2, 2, padding=1)], (1, 4, 5)),
        ("conv windows side by side", [Conv2D(2, 2, stride=2)], (2, 4, 6)),
        ("maxpool leftover rows", [MaxPool2D(2)], (2, 5, 7)),
        ("maxpool gaps", [MaxPool2D(2, stride=3)], (1, 8, 7)),
        ("maxpool overlap rectangular", [MaxPool2D(3, stride=1, padding=1)], (2, 4, 5)),
        ("avgpool overlap padded stride 2", [AvgPool2D(3, stride=2, padding=1)], (2, 5, 6)),
        ("avgpool leftover rows", [AvgPool2D(2)], (1, 5, 4)),
    ],
)
def test_kernel_paths_match_finite_differences(name, layers, shape):
    """Each path of the convolution and pooling kernels (issue 15) on its own."""
    check(layers, shape)


@pytest.mark.parametrize("mode", list(WorkspaceMode))
def test_conv_gradients_with_recomputed_columns(mode, monkeypatch):
    monkeypatch.setattr(Conv2D, "keep_columns", False)
    check([Conv2D(2, 3, padding=1), ReLU(), Conv2D(2, 3, stride=2)], (2, 5, 5), mode=mode)


@pytest.mark.parametrize(
    ("layers", "shape"),
    [
        ([Conv2D(3, 3, padding=1)], (2, 5, 4)),
        ([Conv2D(2, 3, stride=2, padding=1)], (2, 5, 5)),
        ([Conv2D(3, 3)], (2, 5, 6)),
        ([Conv2D(2, 1)], (3, 3, 4)),
    ],
)
def test_conv_gradients_with_one_product_for_the_batch(layers, shape, monkeypatch):
    """Small filter banks multiply per example; large ones (ResNet's) take the one-product path."""
    monkeypatch.setattr(conv, "PER_EXAMPLE_MAX_WEIGHTS", 0)
    check(layers, shape)


def test_maxpool_gradient_after_an_inference_forward():
    check([MaxPool2D(3, stride=2, padding=1)], (2, 5, 5), training=False)


def test_batchnorm_in_eval_mode():
    check([BatchNorm()], (2, 3, 3), training=False)


@pytest.mark.parametrize("mode", [WorkspaceMode.SINGLE, WorkspaceMode.SEPARATE])
def test_gradients_are_the_same_in_workspaces(mode):
    check([Conv2D(2, 3, padding=1), BatchNorm(), ReLU(), MaxPool2D(2), Flatten(), Dense(3)], (1, 4, 4), mode=mode)


@pytest.mark.parametrize("loss", [SoftmaxCrossEntropy(), MSE()])
def test_loss_gradients_match_finite_differences(loss):
    rng = np.random.default_rng(1)
    net = Network([Dense(4)], (3,), loss=loss, dtype="float64", training_workspace_mode="NONE")
    z = rng.standard_normal((5, 4)) * 3
    if isinstance(loss, SoftmaxCrossEntropy):
        t = np.eye(4)[rng.integers(0, 4, 5)]
    else:
        t = rng.standard_normal((5, 4))
    labels = kit.asarray(t)
    mgr = net.train_mgr
    with mgr.iteration():
        _value, grad = loss.value_and_grad(kit.asarray(z.copy()), labels, mgr)
        grad = grad.numpy().copy()
    num = np.zeros_like(z)
    h = 1e-6
    for i in np.ndindex(z.shape):
        zp, zm = z.copy(), z.copy()
        zp[i] += h
        zm[i] -= h
        with mgr.iteration():
            up = loss.value(kit.asarray(zp), labels, mgr)
            down = loss.value(kit.asarray(zm), labels, mgr)
        num[i] = (up - down) / (2 * h)
    np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-8)


def test_softmax_cross_entropy_is_stable_for_huge_logits():
    net = Network([Dense(3)], (2,), dtype="float64", training_workspace_mode="NONE")
    mgr = net.train_mgr
    with mgr.iteration():
        value, grad = SoftmaxCrossEntropy().value_and_grad(
            kit.asarray(np.array([[1000.0, -1000.0, 0.0]])), kit.asarray(np.array([[1.0, 0, 0]])), mgr
        )
        assert np.isfinite(value) and value < 1e-6
        assert np.all(np.isfinite(grad.numpy()))
