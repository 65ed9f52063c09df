"""kit.nn.updaters: each updater's step against its textbook formula in float64 NumPy, the saved
configuration read back, the state's dtype, and the in-place (scratch) form of each update."""

from __future__ import annotations

import numpy as np
import pytest

import kit
from kit.nn.updaters import Adam, Nesterovs, Sgd, Updater, state_dtype, updater_from_config
from kit.nn.workspace_mgr import LayerWorkspaceMgr, WorkspaceMode


def _steps(upd: Updater, p0: np.ndarray, grads: list[np.ndarray]) -> np.ndarray:
    """`upd` applied to a copy of `p0` once per gradient (steps counted from 1), through kit."""
    params = kit.asarray(p0.copy())
    state = {k: kit.zeros(p0.shape, dtype=state_dtype(p0.dtype)) for k in upd.state_names}
    mgr = LayerWorkspaceMgr(WorkspaceMode.NONE)
    for step, g in enumerate(grads, start=1):
        with mgr.updater():
            upd.apply(params, kit.asarray(g.copy()), state, step, mgr)
    return params.numpy()


def _sgd(p, grads, lr):
    for g in grads:
        p = p - lr * g
    return p


def _nesterovs(p, grads, lr, mu):
    v = np.zeros_like(p)
    for g in grads:
        v_new = mu * v - lr * g
        p = p - mu * v + (1 + mu) * v_new  # DL4J's form of Nesterov momentum
        v = v_new
    return p


def _adam(p, grads, lr, b1, b2, eps):
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)  # Kingma & Ba's bias correction
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p


@pytest.mark.parametrize(
    ("updater", "reference"),
    [
        (Sgd(0.1), lambda p, gs: _sgd(p, gs, 0.1)),
        (Nesterovs(0.05, 0.9), lambda p, gs: _nesterovs(p, gs, 0.05, 0.9)),
        (Nesterovs(0.2, 0.0), lambda p, gs: _sgd(p, gs, 0.2)),  # no momentum: plain SGD
        (Adam(1e-2), lambda p, gs: _adam(p, gs, 1e-2, 0.9, 0.999, 1e-8)),
        (Adam(0.1, beta1=0.5, beta2=0.9, epsilon=1e-3), lambda p, gs: _adam(p, gs, 0.1, 0.5, 0.9, 1e-3)),
    ],
    ids=["Sgd", "Nesterovs", "Nesterovs-mu0", "Adam", "Adam-betas"],
)
def test_each_updater_takes_the_steps_of_its_formula(updater, reference):
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(7)
    grads = [rng.standard_normal(7) for _ in range(4)]
    got = _steps(updater, p0, grads)
    np.testing.assert_allclose(got, reference(p0, grads), rtol=1e-12, atol=1e-14)
    assert not np.allclose(got, p0)


def test_adams_first_step_moves_each_parameter_by_the_learning_rate_against_its_gradient_sign():
    """Bias correction makes step 1 m_hat / sqrt(v_hat) = g / |g|: every parameter moves by lr."""
    g = np.array([1e-3, -2.0, 50.0])
    got = _steps(Adam(0.01, epsilon=1e-12), np.zeros(3), [g])
    np.testing.assert_allclose(got, -0.01 * np.sign(g), rtol=1e-8)


@pytest.mark.parametrize(
    "updater", [Sgd(0.3), Nesterovs(0.05, 0.5), Adam(2e-3, 0.8, 0.99, 1e-6)], ids=["Sgd", "Nesterovs", "Adam"]
)
def test_a_saved_configuration_builds_the_same_updater(updater):
    cfg = updater.config()
    back = updater_from_config(cfg)
    assert type(back) is type(updater) and back.config() == cfg
    assert cfg["type"] == type(updater).__name__


def test_an_unknown_updater_in_a_configuration_names_it_and_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown updater 'AdaDelta'.*known: \[.*'Adam'.*'Nesterovs'.*'Sgd'"):
        updater_from_config({"type": "AdaDelta", "lr": 0.1})


@pytest.mark.parametrize(("param", "state"), [("float16", "float32"), ("float32", "float32"), ("float64", "float64")])
def test_the_state_is_float32_at_least(param, state):
    assert state_dtype(np.dtype(param)) == np.dtype(state)


def test_a_subclass_is_registered_under_its_name_and_read_back_from_its_configuration():
    class Halved(Sgd):
        def apply(self, params, grads, state, step, mgr, scratch=False):
            super().apply(params, grads, state, step, mgr, scratch)
            params.data *= 0.5

    try:
        assert Updater.registry["Halved"] is Halved
        back = updater_from_config({"type": "Halved", "lr": 0.25})
        assert type(back) is Halved and back.lr == 0.25
        np.testing.assert_allclose(_steps(back, np.ones(2), [np.ones(2)]), 0.5 * (1 - 0.25))
    finally:
        del Updater.registry["Halved"]


def _kit_updaters() -> list[str]:
    from kit.nn.updaters import Updater

    return sorted(name for name, cls in Updater.registry.items() if cls.__module__ == "kit.nn.updaters")


@pytest.mark.parametrize("updater", _kit_updaters())
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_update_in_its_own_gradient_array_equals_the_one_with_a_temporary(updater, dtype):
    """scratch=True (mixed precision's unscaled gradient; every update of an updater whose
    `exact_in_place` says so) lets the updater overwrite the gradient instead of carving a
    temporary: the same steps, bit for bit where `exact_in_place` claims it (Sgd and Nesterovs do
    the very same arithmetic), else to the dtype's rounding (Adam forms (1 - beta1) g in place),
    and one temporary fewer."""
    import kit
    from kit.nn import updaters
    from kit.nn.updaters import state_dtype
    from kit.nn.workspace_mgr import LayerWorkspaceMgr, WorkspaceMode

    rng = np.random.default_rng(0)
    upd = getattr(updaters, updater)(1e-2)
    p0 = rng.standard_normal(1000).astype(dtype)
    grads = [(rng.standard_normal(1000) * 10.0 ** rng.integers(-6, 2)).astype(dtype) for _ in range(5)]
    results, carved = {}, {}
    for scratch in (False, True):
        params = kit.asarray(p0.copy())
        state = {k: kit.zeros((1000,), dtype=state_dtype(np.dtype(dtype))) for k in upd.state_names}
        mgr = LayerWorkspaceMgr(WorkspaceMode.NONE)  # every temporary is a counted heap allocation
        before = kit.memory.heap_allocations(this_thread=True)
        for step, g in enumerate(grads, start=1):
            g = kit.asarray(g.copy())
            with mgr.updater():
                upd.apply(params, g, state, step, mgr, scratch=scratch)
        carved[scratch] = kit.memory.heap_allocations(this_thread=True) - before
        results[scratch] = params.numpy()
    tol = {"float32": 1e-6, "float64": 1e-14}[dtype]
    if upd.exact_in_place:  # a Network lends it flat_grads: the claim holds bit for bit
        np.testing.assert_array_equal(results[True], results[False])
    else:
        np.testing.assert_allclose(results[True], results[False], rtol=tol, atol=tol)
    assert not np.array_equal(results[True], p0)
    assert carved[True] < carved[False], carved


def test_an_updater_subclass_with_its_own_apply_keeps_its_gradient_unless_it_says_otherwise():
    """Sgd writes its update over the gradient (exact_in_place); a subclass whose apply() reads the
    gradient after Sgd's step is not lent it, so what it reads is the gradient."""
    from kit.data import DataSet
    from kit.nn import Sgd, mlp

    class Clipped(Sgd):  # records the gradient's norm after the step, as a monitoring subclass might
        def apply(self, params, grads, state, step, mgr, scratch=False):
            before = grads.numpy().copy()
            super().apply(params, grads, state, step, mgr, scratch)
            self.same = np.array_equal(grads.numpy(), before)

    class Declared(Clipped):
        exact_in_place = True  # its apply hands scratch on and reads nothing after

    assert Sgd.exact_in_place and not Clipped.exact_in_place and Declared.exact_in_place
    rng = np.random.default_rng(0)
    ds = DataSet(rng.standard_normal((8, 6)).astype("float32"), np.eye(3, dtype="float32")[rng.integers(0, 3, 8)])
    plain, declared = (mlp(6, hidden=(4,), n_out=3, updater=cls(0.1), seed=1) for cls in (Clipped, Declared))
    for _ in range(3):
        plain.fit_batch(ds)
        declared.fit_batch(ds)
        assert plain.updater.same and not declared.updater.same  # lent the gradient only where declared
    np.testing.assert_array_equal(plain.flat_params.numpy(), declared.flat_params.numpy())  # same steps
