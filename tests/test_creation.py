"""kit.creation: shapes and dtypes each function gives, what `array` copies and `asarray` shares,
seeded random values, one allocation through kit.memory per array, and the errors that name a bad
shape, step or dtype (more in tests/test_ndarray.py: values of zeros/full/arange/rand)."""

import numpy as np
import pytest

import kit
from kit import memory
from kit.arrays.ndarray import ShapeError

DEFAULT = kit.backend.get_default_dtype()


def allocations(make):
    """How many heap allocations `make()` counts on this thread, and what it made."""
    before = memory.heap_allocations(this_thread=True)
    out = make()
    return memory.heap_allocations(this_thread=True) - before, out


@pytest.mark.parametrize(
    ("make", "fill"),
    [
        (lambda s, **kw: kit.zeros(s, **kw), 0),
        (lambda s, **kw: kit.ones(s, **kw), 1),
        (lambda s, **kw: kit.full(s, 2.5, **kw), 2.5),
    ],
    ids=["zeros", "ones", "full"],
)
@pytest.mark.parametrize("shape", [3, np.int64(3), [2, 3], (2, 0, 4), ()])
def test_a_shape_is_an_int_or_a_sequence_of_ints_and_the_default_dtype_is_the_default(make, fill, shape):
    count, x = allocations(lambda: make(shape))
    want = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
    assert x.shape == want and x.dtype == DEFAULT and count == 1  # one allocation, through kit.memory
    np.testing.assert_array_equal(x.numpy(), np.full(want, fill, DEFAULT))
    assert make(shape, dtype="float64").dtype == np.float64


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ("ab", r"a shape is an int or a tuple of ints, got 'ab'"),
        ("12", r"a shape is an int or a tuple of ints, got '12'"),  # not (1, 2)
        (True, r"a shape is an int or a tuple of ints, got True"),
        (2.0, r"a shape is an int or a tuple of ints, got 2.0"),
        ((2, 1.5j), r"a shape is an int or a tuple of ints, got \(2, 1\.5j\)"),
        ((2, -1), r"negative dimensions are not allowed, got shape \(2, -1\)"),
    ],
)
def test_a_bad_shape_is_refused_naming_it_and_the_call(shape, message):
    for make in (kit.empty, kit.zeros, kit.ones, kit.rand):
        with pytest.raises(ShapeError, match=rf"^{make.__name__}: {message}"):
            make(shape)
    with pytest.raises(ShapeError, match=rf"^full: {message}"):
        kit.full(shape, 7.0)


def test_like_functions_keep_shape_dtype_and_device_unless_told_otherwise():
    x = kit.full((2, 3), 4, dtype="int32")
    for made, fill in ((kit.zeros_like(x), 0), (kit.ones_like(x), 1), (kit.full_like(x, 9), 9)):
        assert (made.shape, made.dtype, made.device) == ((2, 3), np.int32, x.device)
        assert made.numpy().tolist() == [[fill] * 3] * 2
    assert kit.empty_like(x).shape == (2, 3) and kit.empty_like(x, dtype="float64").dtype == np.float64
    assert kit.full_like(x, 0.5, dtype="float16").numpy().tolist() == [[0.5] * 3] * 2


@pytest.mark.parametrize(
    "args",
    [(5,), (2, 9), (10, 0, -3), (0, 1, 0.1), (1.5, -2, -0.5), (5, 2), (0, 0)],
    ids=str,
)
def test_arange_has_numpy_s_length_and_values(args):
    got, want = kit.arange(*args).numpy(), np.arange(*args)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want.astype(got.dtype), rtol=1e-6)
    assert got.dtype == (np.int64 if all(isinstance(a, int) for a in args) else DEFAULT)


def test_arange_counts_exactly_past_float32_and_refuses_a_zero_step():
    big = 2**53  # the scratch cumulative sum is float64 for floats, int64 for ints: exact here
    assert kit.arange(big, big + 3).numpy().tolist() == [big, big + 1, big + 2]
    assert kit.arange(0, 3, dtype="float64").numpy().tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match=r"arange\(step=0\): the step must not be 0"):
        kit.arange(0, 1, 0)


def test_array_copies_and_infers_dtypes_as_numpy_does_but_for_python_floats():
    assert kit.array([1.5, 2]).dtype == DEFAULT  # Python floats: the default floating dtype
    assert kit.array([1, 2]).dtype == np.int64 and kit.array([True]).dtype == np.bool_
    assert kit.array(np.array([1.5])).dtype == np.float64  # a NumPy array keeps its dtype
    assert kit.array(3.0).shape == () and float(kit.array(3.0)) == 3.0
    source = kit.ones((3,))
    copy = kit.array(source)
    copy[0] = 7
    assert source.numpy().tolist() == [1, 1, 1] and copy.numpy().tolist() == [7, 1, 1]
    assert kit.array(source, dtype="float64").dtype == np.float64


def test_asarray_returns_the_same_array_when_nothing_changes_and_converts_otherwise():
    x = kit.ones((2,), dtype="float64")
    assert kit.asarray(x) is x and kit.asarray(x, dtype="float64") is x
    converted = kit.asarray(x, dtype="float32")
    assert converted is not x and converted.dtype == np.float32 and converted.numpy().tolist() == [1, 1]
    raw = np.arange(3, dtype=np.int16)
    count, wrapped = allocations(lambda: kit.asarray(raw))
    assert count == 0 and np.shares_memory(np.asarray(wrapped), raw)  # wrapped, not allocated
    assert kit.asarray(raw, dtype="float32").dtype == np.float32  # another dtype: a copy


@pytest.mark.parametrize("make", [kit.array, kit.asarray])
def test_inputs_kit_cannot_hold_are_refused_naming_why(make):
    with pytest.raises(TypeError, match=r"unsupported dtype complex128; kit supports float16, float32"):
        make(np.array([1 + 2j]))
    with pytest.raises(ShapeError, match=r"array: cannot make a rectangular array from the input"):
        make([[1, 2], [3]])


@pytest.mark.parametrize("make", [kit.rand, kit.randn])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_random_arrays_are_seeded_and_come_in_every_float_dtype(make, dtype):
    kit.seed(11)
    first = make((4, 5), dtype=dtype).numpy()
    kit.seed(11)
    again = make((4, 5), dtype=dtype).numpy()
    assert first.dtype == dtype and first.shape == (4, 5)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(make((4, 5), dtype=dtype).numpy(), first)  # the generator moved on


def test_random_values_have_their_distribution():
    kit.seed(0)
    u, n = kit.rand((20_000,), dtype="float64").numpy(), kit.randn((20_000,), dtype="float64").numpy()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.03


@pytest.mark.parametrize(("make", "name"), [(kit.rand, "rand"), (kit.randn, "randn")])
def test_random_integers_are_refused_naming_the_dtype(make, name):
    with pytest.raises(TypeError, match=rf"{name}: random values need a floating dtype, got int32"):
        make((3,), dtype="int32")


def test_arrays_made_inside_a_workspace_live_in_it_and_on_the_device_asked_for(host_devices):
    ws = kit.get_workspace_for_current_thread(name="CREATION_WS")
    with ws:
        made = [kit.zeros((2,)), kit.full((2,), 1.0), kit.arange(3), kit.array([1.0]), kit.rand((2,))]
        assert all(a.workspace is ws for a in made)
    last = kit.Device(f"cpu:{host_devices - 1}")
    for a in (kit.zeros((2,), device=last), kit.array([1.0], device=last), kit.randn((2,), device=last)):
        assert a.device is last and not a.is_attached
