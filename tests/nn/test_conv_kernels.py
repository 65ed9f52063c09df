"""The convolution and pooling kernels against the kernels they replaced (kept below, verbatim in
their math, as the reference): forward outputs, parameter gradients and input gradients on random
inputs, for several shapes, strides and paddings, in all three workspace modes."""

import numpy as np
import pytest

import kit
from kit.data import DataSet
from kit.nn import AvgPool2D, BatchNorm, Conv2D, Dense, Flatten, MaxPool2D, Network, ReLU, WorkspaceMode
from kit.nn.workspace_mgr import ArrayType

# ---- the old kernels (kit before issue 15), on plain NumPy arrays -------------------------


def _old_padded(x, p, fill):
    if p == 0:
        return x
    b, c, h, w = x.shape
    out = np.full((b, c, h + 2 * p, w + 2 * p), fill, dtype=x.dtype)
    out[:, :, p : p + h, p : p + w] = x
    return out


def _old_windows(xpad, k, s, oh, ow):
    """(B, OH, OW, C, k, k) view of every window of xpad (B, C, Hp, Wp)."""
    sb, sc, sh, sw = xpad.strides
    b, c = xpad.shape[:2]
    return np.lib.stride_tricks.as_strided(xpad, (b, oh, ow, c, k, k), (sb, sh * s, sw * s, sc, sh, sw))


def _old_columns(x, k, s, p, oh, ow):
    b, c = x.shape[:2]
    cols = np.empty((b, oh, ow, c, k, k), x.dtype)
    np.copyto(cols, _old_windows(_old_padded(x, p, 0.0), k, s, oh, ow))
    return cols.reshape(b * oh * ow, c * k * k)


def old_conv(x, w, bias, eps, k, s, p):
    """(y, dW, db, dx): im2col (B*OH*OW, C*k*k) rows, one matmul; col2im by k*k strided adds."""
    b, c, h, w_in = x.shape
    oc, oh, ow = eps.shape[1:]
    cols = _old_columns(x, k, s, p, oh, ow)
    out = cols @ w.reshape(oc, -1).T
    y = out.reshape(b, oh, ow, oc).transpose(0, 3, 1, 2) + bias.reshape(1, oc, 1, 1)
    e2 = np.ascontiguousarray(eps.transpose(0, 2, 3, 1)).reshape(b * oh * ow, oc)
    dw = (e2.T @ _old_columns(x, k, s, p, oh, ow)).reshape(w.shape)
    db = eps.sum(axis=(0, 2, 3))
    dc = (e2 @ w.reshape(oc, -1)).reshape(b, oh, ow, c, k, k)
    target = np.zeros((b, c, h + 2 * p, w_in + 2 * p), x.dtype)
    for i in range(k):
        for j in range(k):
            target[:, :, i : i + s * oh : s, j : j + s * ow : s] += dc[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return y, dw, db, target[:, :, p : p + h, p : p + w_in]


def _old_window_matrix(x, k, s, p, fill, oh, ow):
    b, c = x.shape[:2]
    flat = np.empty((b, oh, ow, c, k, k), x.dtype)
    np.copyto(flat, _old_windows(_old_padded(x, p, fill), k, s, oh, ow))
    return flat.transpose(0, 3, 1, 2, 4, 5).reshape(b, c, oh, ow, k * k)


def _old_scatter(eps, x_shape, k, s, p, weight):
    b, c, h, w = x_shape
    oh, ow = eps.shape[2:]
    target = np.zeros((b, c, h + 2 * p, w + 2 * p), eps.dtype)
    for i in range(k):
        for j in range(k):
            target[:, :, i : i + s * oh : s, j : j + s * ow : s] += weight(i * k + j)
    return target[:, :, p : p + h, p : p + w]


def old_maxpool(x, eps, k, s, p):
    oh, ow = eps.shape[2:]
    flat = _old_window_matrix(x, k, s, p, -np.inf, oh, ow)
    arg = np.argmax(flat, axis=-1)
    y = np.max(flat, axis=-1)
    return y, _old_scatter(eps, x.shape, k, s, p, lambda o: (arg == o).astype(eps.dtype) * eps)


def old_avgpool(x, eps, k, s, p):
    oh, ow = eps.shape[2:]
    y = np.mean(_old_window_matrix(x, k, s, p, 0.0, oh, ow), axis=-1)
    return y, _old_scatter(eps, x.shape, k, s, p, lambda o: eps * (1.0 / (k * k)))


def old_batchnorm(x, gamma, beta, running_mean, running_var, eps, training, decay=0.9, epsilon=1e-5):
    """(y, d gamma, d beta, dx, new running mean, new running var), reductions by np.mean/np.sum."""
    axes, view = ((0,), (1, -1)) if x.ndim == 2 else ((0, 2, 3), (1, -1, 1, 1))
    if training:
        mean, var = x.mean(axis=axes), ((x - x.mean(axis=axes).reshape(view)) ** 2).mean(axis=axes)
        running_mean = running_mean * decay + mean * (1 - decay)
        running_var = running_var * decay + var * (1 - decay)
    else:
        mean, var = running_mean, running_var
    inv_std = 1.0 / np.sqrt(var + epsilon)
    xhat = (x - mean.reshape(view)) * inv_std.reshape(view)
    y = xhat * gamma.reshape(view) + beta.reshape(view)
    d_gamma, d_beta = (eps * xhat).sum(axis=axes), eps.sum(axis=axes)
    scale = (gamma * inv_std).reshape(view)
    if not training:
        return y, d_gamma, d_beta, eps * scale, running_mean, running_var
    n = x.size // x.shape[1]
    dx = scale * (eps - d_beta.reshape(view) / n - xhat * d_gamma.reshape(view) / n)
    return y, d_gamma, d_beta, dx, running_mean, running_var


# ---- running the new layers ---------------------------------------------------------------


def run_layer(layer, x, eps, mode, training=True, params=None):
    """(y, {param: grad}, dx) of one layer inside a Network, float32, in `mode`."""
    net = Network([layer], x.shape[1:], dtype="float32", training_workspace_mode=mode, input_gradient=True)
    if params is not None:
        net.set_params(params)
    mgr = net.train_mgr
    with mgr.iteration():
        y = net._forward(kit.asarray(x), mgr, training)
        y_host = y.numpy().copy()
        e = mgr.create(ArrayType.ACTIVATION_GRAD, y.shape, y.dtype, y.device)
        e.assign(eps)  # through kit: a raw CuPy array refuses a NumPy source
        dx = net._backward(e, mgr).numpy().copy()
    grads = {name: g.numpy().copy() for name, g in layer.grads.items()}
    return y_host, grads, dx


MODES = list(WorkspaceMode)
CONV_CASES = [  # (in C, H, W), out channels, kernel, stride, padding
    ((1, 12, 10), 6, 5, 1, 2),  # LeNet's first layer: same size, by convolving eps
    ((3, 9, 7), 4, 3, 1, 0),  # valid: col2im
    ((3, 9, 8), 5, 3, 2, 1),  # stride 2 with padding: col2im
    ((4, 7, 6), 3, 1, 2, 0),  # the 1x1 shortcut
    ((4, 5, 6), 3, 1, 1, 0),  # 1x1 stride 1: eps is its own column matrix
    ((2, 8, 8), 3, 2, 1, 1),  # even kernel, padding: output larger than the input
    ((2, 9, 9), 3, 3, 3, 0),  # windows side by side
    ((2, 10, 9), 3, 4, 2, 1),
]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-oc{c[1]}-k{c[2]}-s{c[3]}-p{c[4]}")
@pytest.mark.parametrize("keep", [True, False], ids=["kept-columns", "recomputed-columns"])
@pytest.mark.parametrize("per_example_max", [4096, 0], ids=["per-example-products", "one-product"])
@pytest.mark.parametrize("chunk", [3, 2, 1], ids=["whole-batch", "chunks-of-2", "one-example-chunks"])
def test_conv_matches_the_old_kernels(case, mode, keep, per_example_max, chunk, monkeypatch):
    (c, h, w), oc, k, s, p = case
    monkeypatch.setattr(Conv2D, "keep_columns", keep)
    monkeypatch.setattr(kit.nn.conv, "PER_EXAMPLE_MAX_WEIGHTS", per_example_max)
    rng = np.random.default_rng(hash(case) % 2**32)
    layer = Conv2D(oc, k, stride=s, padding=p)
    x = rng.standard_normal((3, c, h, w)).astype(np.float32)
    weights = rng.standard_normal(oc * c * k * k + oc).astype(np.float32)
    probe = Conv2D(oc, k, stride=s, padding=p)
    out_shape = probe.build((c, h, w))
    # the columns' working memory that makes chunks of `chunk` examples (the last one shorter: 3 = 2 + 1)
    monkeypatch.setattr(Conv2D, "column_bytes", chunk * max(c * out_shape[1] * out_shape[2], oc * h * w) * k * k * 4)
    assert probe.chunk(3, 4) == chunk
    eps = rng.standard_normal((3, *out_shape)).astype(np.float32)
    y, grads, dx = run_layer(layer, x, eps, mode, params=weights)
    assert layer.per_example == (per_example_max > 0)
    w4 = weights[: oc * c * k * k].reshape(oc, c, k, k)
    ry, rdw, rdb, rdx = old_conv(x, w4, weights[oc * c * k * k :], eps, k, s, p)
    for new, old in ((y, ry), (grads["W"], rdw), (grads["b"], rdb), (dx, rdx)):
        assert new.shape == old.shape
        np.testing.assert_allclose(new, old, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(old).max()))


POOL_CASES = [  # (in C, H, W), kernel, stride, padding
    ((2, 8, 6), 2, 2, 0),  # tiles exactly: the reshape views, written not added
    ((3, 7, 5), 2, 2, 0),  # stride == kernel but a leftover row and column
    ((2, 7, 5), 3, 2, 1),  # overlapping and padded
    ((1, 6, 6), 3, 1, 1),
    ((2, 9, 8), 2, 3, 0),  # gaps between windows
    ((2, 12, 12), 3, 3, 0),
]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[0]}-k{c[1]}-s{c[2]}-p{c[3]}")
@pytest.mark.parametrize(("cls", "old"), [(MaxPool2D, old_maxpool), (AvgPool2D, old_avgpool)], ids=["max", "avg"])
def test_pooling_matches_the_old_kernels(cls, old, case, mode):
    (c, h, w), k, s, p = case
    rng = np.random.default_rng(hash(case) % 2**32)
    out_shape = cls(k, s, p).build((c, h, w))
    x = rng.standard_normal((4, c, h, w)).astype(np.float32)
    x[0] = np.maximum(x[0], 0)  # ReLU'd input: many windows of equal zeros, so ties decide
    x[1] = np.round(x[1])  # more ties, between non-zero values
    eps = rng.standard_normal((4, *out_shape)).astype(np.float32)
    y, _, dx = run_layer(cls(k, s, p), x, eps, mode)
    ry, rdx = old(x, eps, k, s, p)
    np.testing.assert_allclose(y, ry, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, rdx, rtol=1e-6, atol=1e-6)
    assert y.shape == ry.shape and dx.shape == rdx.shape


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("shape", [(5,), (3, 4, 4), (6, 7, 5)])
@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_batchnorm_matches_the_old_kernels(shape, training, mode):
    rng = np.random.default_rng(sum(shape))
    c = shape[0]
    x = (rng.standard_normal((6, *shape)) * 3 + 1).astype(np.float32)
    eps = rng.standard_normal(x.shape).astype(np.float32)
    gamma, beta = rng.standard_normal(c), rng.standard_normal(c)
    r_mean, r_var = rng.standard_normal(c), rng.random(c) + 0.5
    params = np.concatenate([gamma, beta, r_mean, r_var]).astype(np.float32)
    layer = BatchNorm()
    y, grads, dx = run_layer(layer, x, eps, mode, training=training, params=params)
    ref = old_batchnorm(x.astype(np.float64), gamma, beta, r_mean, r_var, eps.astype(np.float64), training)
    new = (y, grads["gamma"], grads["beta"], dx, layer.params["mean"].numpy(), layer.params["var"].numpy())
    for got, want in zip(new, ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("case", [((2, 8, 6), 2, 2, 0), ((2, 7, 5), 3, 2, 1)])
def test_maxpool_backward_after_an_inference_forward_finds_the_same_winners(case):
    (c, h, w), k, s, p = case
    rng = np.random.default_rng(3)
    x = np.maximum(rng.standard_normal((3, c, h, w)), 0).astype(np.float32)
    eps = rng.standard_normal((3, *MaxPool2D(k, s, p).build((c, h, w)))).astype(np.float32)
    _, _, trained = run_layer(MaxPool2D(k, s, p), x, eps, WorkspaceMode.SEPARATE, training=True)
    _, _, inferred = run_layer(MaxPool2D(k, s, p), x, eps, WorkspaceMode.SEPARATE, training=False)
    np.testing.assert_array_equal(trained, inferred)
    np.testing.assert_allclose(inferred, old_maxpool(x, eps, k, s, p)[1], rtol=1e-6, atol=1e-6)


def _act_bytes(net, ds):
    """Bytes the activations workspace hands out per iteration."""
    net.fit_batch(ds)
    return net.workspace_stats()["training"]["WS_ALL_LAYERS_ACT"]["max_cycle_bytes"]


def test_kept_columns_live_in_the_activations_workspace_and_are_counted(monkeypatch):
    """SEPARATE resets working memory after each layer, so kept columns must be ACTIVATIONS:
    the activations workspace grows by (at least) their bytes, and kept_bytes reports them."""
    rng = np.random.default_rng(0)
    ds = DataSet(rng.random((8, 2, 10, 10)), rng.integers(0, 3, 8), num_classes=3)

    def build():
        return Network(
            [Conv2D(4, 3, padding=1), ReLU(), Conv2D(5, 3, stride=2), Flatten(), Dense(3)],
            (2, 10, 10),
            training_workspace_mode="SEPARATE",
        )

    monkeypatch.setattr(Conv2D, "keep_columns", True)  # always (the default keeps those that fit column_bytes)
    kept_net = build()
    act_kept = _act_bytes(kept_net, ds)
    kept = [layer.kept_bytes for layer in kept_net.layers if isinstance(layer, Conv2D)]
    assert kept == [2 * 9 * 8 * 10 * 10 * 4, 4 * 9 * 8 * 4 * 4 * 4]  # C*k*k * B*OH*OW float32
    monkeypatch.setattr(Conv2D, "keep_columns", False)
    plain_net = build()
    act_plain = _act_bytes(plain_net, ds)
    assert all(layer.kept_bytes == 0 for layer in plain_net.layers if isinstance(layer, Conv2D))
    assert act_kept - act_plain >= sum(kept)
    np.testing.assert_allclose(kept_net.params().numpy(), plain_net.params().numpy(), rtol=1e-6, atol=1e-7)
    kept_net.output(ds.features)  # inference keeps nothing
    assert all(layer.kept_bytes == 0 for layer in kept_net.layers if isinstance(layer, Conv2D))
    monkeypatch.setattr(Conv2D, "keep_columns", True)
    monkeypatch.setattr(Conv2D, "keep_columns_max_bytes", 20_000)  # only the second layer's fit
    capped = build()
    capped.fit_batch(ds)
    assert [layer.kept_bytes for layer in capped.layers if isinstance(layer, Conv2D)] == [0, kept[1]]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "layer",
    [lambda: Conv2D(4, 3, stride=1, padding=1), lambda: Conv2D(4, 3, stride=2, padding=1), lambda: MaxPool2D(2)],
)
def test_the_same_kernels_on_cupy(layer):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    out_shape = layer().build((3, 8, 8))
    eps = rng.standard_normal((4, *out_shape)).astype(np.float32)
    results = {}
    for dev in ("cpu:0", "gpu:0"):
        with kit.device(dev):
            results[dev] = run_layer(layer(), x, eps, WorkspaceMode.SEPARATE)
    (cy, cg, cdx), (gy, gg, gdx) = results["cpu:0"], results["gpu:0"]
    np.testing.assert_allclose(gy, cy, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gdx, cdx, rtol=1e-4, atol=1e-4)
    for name in cg:
        np.testing.assert_allclose(gg[name], cg[name], rtol=1e-4, atol=1e-3)
