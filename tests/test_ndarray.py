"""NDArray ops against NumPy on random shapes and broadcasts; errors by message; counters."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kit
from kit.core.memory import heap_allocations

FLOATS = st.floats(-10, 10, allow_nan=False, width=32)
BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "subtract": (lambda a, b: a - b, np.subtract),
    "multiply": (lambda a, b: a * b, np.multiply),
    "maximum": (lambda a, b: kit.maximum(a, b), np.maximum),
    "minimum": (lambda a, b: kit.minimum(a, b), np.minimum),
    "less": (lambda a, b: a < b, np.less),
    "greater_equal": (lambda a, b: a >= b, np.greater_equal),
    "equal": (lambda a, b: a == b, np.equal),
}


@st.composite
def broadcast_pair(draw, dtype=np.float32):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=5))
    a = draw(hnp.arrays(dtype, shapes.input_shapes[0], elements=FLOATS))
    b = draw(hnp.arrays(dtype, shapes.input_shapes[1], elements=FLOATS))
    return a, b


@settings(max_examples=60, deadline=None)
@given(pair=broadcast_pair(), op=st.sampled_from(sorted(BINARY)))
def test_binary_ops_match_numpy_with_broadcasting(pair, op):
    a, b = pair
    kit_fn, np_fn = BINARY[op]
    got = kit_fn(kit.array(a), kit.array(b)).numpy()
    want = np_fn(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(pair=broadcast_pair())
def test_division_and_scalars_match_numpy(pair):
    a, b = pair
    b = np.where(np.abs(b) < 0.5, np.float32(1.0), b)
    np.testing.assert_allclose((kit.array(a) / kit.array(b)).numpy(), a / b, rtol=1e-6)
    np.testing.assert_allclose((2.5 - kit.array(a)).numpy(), 2.5 - a, rtol=1e-6)
    np.testing.assert_allclose((kit.array(a) * 3).numpy(), a * 3, rtol=1e-6)
    assert (kit.array(a) * 3).dtype == np.float32  # Python scalars do not widen (NEP 50)


@settings(max_examples=40, deadline=None)
@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=6), elements=FLOATS))
def test_unary_ops_match_numpy(x):
    k = kit.array(x)
    np.testing.assert_allclose(k.exp().numpy(), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(k.tanh().numpy(), np.tanh(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(k.abs().sqrt().numpy(), np.sqrt(np.abs(x)), rtol=1e-6)
    np.testing.assert_allclose((k.abs() + 1).log().numpy(), np.log(np.abs(x) + 1), rtol=1e-6)
    np.testing.assert_array_equal((-k).numpy(), -x)
    np.testing.assert_array_equal(k.clip(-1, 2).numpy(), np.clip(x, -1, 2))
    np.testing.assert_array_equal(kit.where(k > 0, k, 0.0).numpy(), np.where(x > 0, x, np.float32(0)))


@st.composite
def array_and_axis(draw):
    x = draw(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=5), elements=FLOATS))
    axis = draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    return x, axis, draw(st.booleans())


@settings(max_examples=60, deadline=None)
@given(case=array_and_axis(), op=st.sampled_from(["sum", "mean", "max", "min", "var", "argmax"]))
def test_reductions_match_numpy(case, op):
    x, axis, keepdims = case
    got = getattr(kit.array(x), op)(axis=axis, keepdims=keepdims).numpy()
    want = getattr(np, op)(x, axis=axis, keepdims=keepdims)
    assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 5), k=st.integers(1, 5), n=st.integers(1, 5), batch=st.sampled_from([(), (2,), (3, 1)]))
def test_matmul_matches_numpy(m, k, n, batch):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.standard_normal((*batch, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose((kit.array(a) @ kit.array(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    v = rng.standard_normal(k).astype(np.float32)
    np.testing.assert_allclose((kit.array(a) @ kit.array(v)).numpy(), a @ v, rtol=1e-5, atol=1e-5)


def test_every_op_allocates_exactly_once_through_kit():
    x, y = kit.ones((4, 3)), kit.ones((4, 3))
    cond, idx = x > 0, kit.array([0, 2], dtype="int64")
    ops = [
        lambda: x + y,
        lambda: x * 2.0,
        lambda: x.exp(),
        lambda: x.sum(axis=0),
        lambda: x.mean(),
        lambda: x.argmax(axis=1),
        lambda: x @ y.T,
        lambda: x.dup(),
        lambda: x.astype("float64"),
        lambda: x > y,
        lambda: kit.where(cond, x, y),
        lambda: x[idx],
    ]
    for op in ops:
        before = heap_allocations(this_thread=True)
        op()
        assert heap_allocations(this_thread=True) - before == 1
    before = heap_allocations(this_thread=True)
    _ = x[1:3].reshape(-1).T  # views allocate nothing
    x.transpose()
    assert heap_allocations(this_thread=True) == before


def test_heap_results_numpy_allocates_are_counted_and_equal_the_allocate_path():
    # on the plain host heap NumPy allocates each result inside the ufunc (as raw NumPy does);
    # with the caching allocator on, the same ops go through kit.memory.allocate + out=
    rng = np.random.default_rng(3)
    x = kit.array(rng.standard_normal((5, 4)).astype(np.float32))
    y = kit.array(rng.standard_normal((5, 4)).astype(np.float32))
    i = kit.array(np.arange(20, dtype=np.int64).reshape(5, 4))
    z = kit.array(np.float32(2.5))  # 0-d
    ops = [
        lambda: x + y,
        lambda: 1.5 - x,
        lambda: x > y,
        lambda: i / 3,
        lambda: x.exp(),
        lambda: x @ y.T,
        lambda: x[0] @ y[0],  # 1-d @ 1-d: a 0-d result
        lambda: z * 2.0,  # 0-d op scalar: NumPy returns a scalar, kit a 0-d array
        lambda: x.sum(),
        lambda: i.mean(axis=0),
        lambda: x.max(axis=1, keepdims=True),
        lambda: x.min(axis=[0, 1]),
    ]
    heap = []
    for op in ops:
        before = (heap_allocations(this_thread=True), kit.memory.heap_bytes(this_thread=True))
        r = op()
        after = (heap_allocations(this_thread=True), kit.memory.heap_bytes(this_thread=True))
        assert after[0] - before[0] == 1 and after[1] - before[1] == r.nbytes
        assert type(r.data) is np.ndarray and r.data.flags.writeable and r.workspace is None
        heap.append(r.numpy())
    kit.memory.set_max_host_cache(1 << 20)
    try:
        cached = [op().numpy() for op in ops]
    finally:
        kit.memory.set_max_host_cache(0)
    for h, c in zip(heap, cached):
        assert h.dtype == c.dtype and h.shape == c.shape
        np.testing.assert_array_equal(h, c)


def test_bool_arithmetic_gives_numpys_dtype_on_the_heap_and_in_a_workspace():
    a, b = kit.asarray(np.array([True, False, True])), kit.asarray(np.array([True, True, True]))
    ops = {"floor_divide": lambda: a // b, "remainder": lambda: a % b, "power": lambda: a**b, "add": lambda: a + b}
    heap = {name: op().numpy() for name, op in ops.items()}
    ws = kit.get_workspace_for_current_thread(name="BOOL_OPS")
    try:
        with ws:
            inside = {name: op().numpy() for name, op in ops.items()}
    finally:
        ws.destroy()
    for name in ops:
        expected = getattr(np, name)(a.numpy(), b.numpy())
        for got in (heap[name], inside[name]):
            assert got.dtype == expected.dtype, name
            np.testing.assert_array_equal(got, expected)


def test_heap_results_of_transposed_arrays_are_laid_out_like_allocated_ones():
    x = kit.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    for r in (x.T * 2, 2 - x.T, x.T + x.T, x.T.exp(), -x.T):
        assert r.data.flags.c_contiguous  # as kit.memory.allocate lays results out
        before = heap_allocations(this_thread=True)
        v = r.reshape(-1)
        assert heap_allocations(this_thread=True) == before and np.shares_memory(v.data, r.data)


def test_shape_errors_name_both_shapes():
    with pytest.raises(kit.ShapeError, match=r"add: shapes \(3, 4\) and \(5,\) cannot be broadcast"):
        kit.ones((3, 4)) + kit.ones((5,))
    with pytest.raises(kit.ShapeError, match=r"matmul: shapes \(2, 3\) and \(4, 5\) do not align"):
        kit.ones((2, 3)) @ kit.ones((4, 5))
    with pytest.raises(kit.ShapeError, match=r"reshape: cannot reshape an array of shape \(2, 3\)"):
        kit.ones((2, 3)).reshape(4, 2)
    with pytest.raises(kit.ShapeError, match=r"sum: axis 2 is out of bounds for an array of shape \(2, 3\)"):
        kit.ones((2, 3)).sum(axis=2)
    with pytest.raises(kit.ShapeError, match=r"cannot write a result of shape \(2, 3\) into \(3,\)"):
        x = kit.ones((3,))
        x += kit.ones((2, 3))


def test_device_mismatch_names_both_devices_and_never_copies():
    a, b = kit.logical_devices(2, "cpu:0")
    x, y = kit.ones((2,), device=a), kit.ones((2,), device=b)
    with pytest.raises(kit.DeviceMismatchError, match=r"cpu:0/logical0of2 and cpu:0/logical1of2"):
        x + y
    with pytest.raises(kit.DeviceMismatchError, match="never copies"):
        x @ y
    moved = y.to(a)
    assert moved.device is a and (x + moved).numpy().tolist() == [2.0, 2.0]


def test_unsupported_dtype_is_named():
    with pytest.raises(TypeError, match="unsupported dtype complex128"):
        kit.array(np.ones(3, dtype=np.complex128))
    with pytest.raises(TypeError, match="unsupported dtype"):
        kit.zeros((2,), dtype=object)
    with pytest.raises(TypeError, match=r"int64 array in place"):
        x = kit.arange(3)
        x += 0.5


def test_creation_functions():
    np.testing.assert_array_equal(kit.zeros((2, 3)).numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(kit.full((2,), 7, dtype="int32").numpy(), [7, 7])
    np.testing.assert_array_equal(kit.arange(5).numpy(), np.arange(5))
    np.testing.assert_allclose(kit.arange(1, 2, 0.25).numpy(), [1, 1.25, 1.5, 1.75])
    np.testing.assert_array_equal(kit.arange(10, 0, -3).numpy(), np.arange(10, 0, -3))
    assert kit.arange(5).dtype == np.int64 and kit.arange(0, 1, 0.5).dtype == np.float32
    r = kit.rand((1000,))
    assert r.dtype == np.float32 and 0 <= float(r.min()) and float(r.max()) < 1
    assert kit.randn((10,), dtype="float16").dtype == np.float16
    with pytest.raises(kit.ShapeError, match="negative dimensions"):
        kit.zeros((2, -1))


def test_asarray_is_zero_copy_on_the_cpu_and_array_copies():
    raw = np.arange(6, dtype=np.float32)
    shared, copied = kit.asarray(raw), kit.array(raw)
    raw[0] = 42
    assert shared.numpy()[0] == 42 and copied.numpy()[0] == 0
    assert np.shares_memory(np.asarray(shared), raw)


def test_shape_ops():
    x = kit.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    np.testing.assert_array_equal(x.transpose(2, 0, 1).numpy(), x.numpy().transpose(2, 0, 1))
    np.testing.assert_array_equal(x.T.reshape(-1).numpy(), x.numpy().T.reshape(-1))  # non-contiguous reshape copies
    np.testing.assert_array_equal(kit.concatenate([x, x], axis=1).numpy(), np.concatenate([x.numpy()] * 2, axis=1))
    np.testing.assert_array_equal(kit.stack([x, x], axis=-1).numpy(), np.stack([x.numpy()] * 2, axis=-1))
    assert x[0:1].squeeze(0).shape == (3, 4) and x.expand_dims(0).shape == (1, 2, 3, 4)
    with pytest.raises(kit.ShapeError, match="differ off axis"):
        kit.concatenate([x, kit.ones((2, 2, 2))], axis=1)


@pytest.mark.gpu
def test_gpu_round_trip_and_ops_match_cpu():
    g = kit.Device("gpu:0")
    a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    x = kit.array(a, device=g)
    assert x.device is g
    np.testing.assert_allclose((x @ x.T).sum(axis=1).numpy(), (a @ a.T).sum(axis=1), rtol=1e-4)
    np.testing.assert_array_equal(x.to("cpu:0").numpy(), a)
    with pytest.raises(kit.DeviceMismatchError, match="gpu:0"):
        x + kit.array(a, device="cpu:0")  # named: under KIT_BACKEND=cupy the default device is the GPU


def float16_cases() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [
        np.ones((100_000, 2), np.float16),  # a float16 accumulator overflows (65504) on the way to the sum
        (rng.standard_normal((4096, 3)) * 100 + 1000).astype(np.float16),  # large mean, small spread
        rng.random((7, 5)).astype(np.float16),
    ]


def float16_reference(x: np.ndarray, op: str, axis: int | None) -> np.ndarray:
    """The float64 answer, cast to float16 as kit's result is (inf where it does not fit)."""
    with np.errstate(over="ignore"):
        return getattr(np, op)(x.astype(np.float64), axis=axis).astype(np.float16).astype(np.float64)


@pytest.mark.parametrize("op", ["sum", "mean", "var", "max", "min"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_every_float16_reduction_agrees_with_float64(op, axis):
    """float16 reductions accumulate in float32: NumPy's float16 var of 100,000 ones is inf."""
    for x in float16_cases():
        got = getattr(kit.asarray(x, device="cpu:0"), op)(axis=axis).numpy()
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float64), float16_reference(x, op, axis), rtol=2e-3, atol=1e-3)
        with kit.workspace.get_workspace_for_current_thread(name="F16_REDUCE", device="cpu:0") as _:
            in_ws = getattr(kit.asarray(x, device="cpu:0"), op)(axis=axis).numpy()
        np.testing.assert_array_equal(in_ws, got)


# ---- regressions for the defects issue 13's adversarial pass found ------------------------------


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "var"])
def test_reductions_match_numpy_for_every_dtype(op, dtype):
    rng = np.random.default_rng(1)
    x = (
        (rng.random((300, 7)) * 4).astype(dtype)
        if dtype.startswith("float")
        else rng.integers(0, 9, (300, 7)).astype(dtype)
    )
    for axis in (None, 0, 1):
        got = getattr(kit.asarray(x), op)(axis=axis).numpy()
        want = getattr(np, op)(x, axis=axis)
        assert got.dtype == want.dtype, (op, dtype, axis)
        if dtype == "float16":  # kit adds float16 in float32: compare with the exact answer, not NumPy's float16 sum
            want = getattr(np, op)(x.astype(np.float64), axis=axis).astype(np.float16)
        np.testing.assert_allclose(got, want, rtol=2e-3 if dtype == "float16" else 1e-6)


def test_float16_mean_of_many_ones_is_one_as_in_numpy():
    x = np.ones(100_000, np.float16)
    assert float(kit.asarray(x).mean()) == float(np.mean(x)) == 1.0
