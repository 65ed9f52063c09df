"""kit.nn.mixed: the LossScaler's arguments, its decisions step by step (back off on inf/NaN,
grow after growth_interval clean steps, give up below its floor), its specs, state and merging,
the master dtype's rule, and the loss seed scaled without overflowing float16. Mixed precision
through a Network (accuracy, save/load, the parallel paths): test_mixed_precision.py."""

import numpy as np
import pytest

import kit
from kit.core.backend import resolve_dtype
from kit.nn.mixed import LossScaleError, LossScaler, master_dtype_for, scale_seed


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"growth_interval": 0}, r"growth_interval=0\): must be a whole number >= 1 \(clean steps"),
        ({"growth_interval": 1.5}, r"growth_interval=1\.5\)"),
        ({"growth_interval": True}, r"growth_interval=True\)"),
        ({"init_scale": 0}, r"init_scale=0\): must be a finite number in \(0, 3.40282e\+38\]"),
        ({"init_scale": float("nan")}, r"init_scale=nan\)"),
        ({"min_scale": -1.0}, r"min_scale=-1\.0\)"),
        ({"growth_factor": 1.0}, r"growth_factor=1\.0\): must be a finite number in \(1, 65536\]"),
        ({"backoff_factor": 1.0}, r"backoff_factor=1\.0\): must be a finite number in \(0, 1\)"),
        ({"init_scale": 1e-6, "min_scale": 1e-3}, r"initial scale is below the floor; raise init_scale"),
        ({"dynamic": "yes"}, r"dynamic='yes'"),
        ({"init_scale": 1e300}, r"init_scale=1e\+300\): must be a finite number in \(0, 3.40282e\+38\]"),
        ({"growth_factor": 1e300}, r"growth_factor=1e\+300\)"),
        ({"growth_interval": np.int64(3), "init_scale": np.float32(8)}, None),
    ],
)
def test_loss_scaler_arguments_are_checked_at_the_call(kw, message):
    if message is None:  # NumPy's numbers are numbers
        assert LossScaler(**kw).scale == 8.0
        return
    with pytest.raises(ValueError, match=message):
        LossScaler(**kw)


def _decisions(scaler, finite_steps):
    """(applied?, scale after) for each step's finiteness."""
    return [(scaler.update(f), scaler.scale) for f in finite_steps]


def test_a_dynamic_scaler_backs_off_on_overflow_and_grows_after_its_interval():
    scaler = LossScaler(8.0, growth_interval=3, growth_factor=4.0, backoff_factor=0.25)
    got = _decisions(scaler, [True, True, False, True, True, True, True])
    assert got == [(True, 8.0), (True, 8.0), (False, 2.0), (True, 2.0), (True, 2.0), (True, 8.0), (True, 8.0)]
    assert (scaler.skipped_steps, scaler.clean_steps) == (1, 1)  # the overflow reset the clean count


def test_a_fixed_scaler_skips_non_finite_steps_but_never_moves_its_scale():
    scaler = LossScaler.from_spec(1024)
    assert not scaler.dynamic and scaler.config() == 1024.0
    assert _decisions(scaler, [False, True, True, False]) == [
        (False, 1024.0),
        (True, 1024.0),
        (True, 1024.0),
        (False, 1024.0),
    ]
    assert scaler.skipped_steps == 2


def test_a_scale_that_would_fall_below_its_floor_raises_and_changes_nothing():
    scaler = LossScaler(1.0, min_scale=0.25)
    assert _decisions(scaler, [False, False]) == [(False, 0.5), (False, 0.25)]
    with pytest.raises(
        LossScaleError, match=r"fall to 0\.125, below min_scale 0\.25, after 3 skipped steps in a row"
    ) as error:
        scaler.update(False)
    assert "Lower the learning rate" in str(error.value) and "dtype='float32'" in str(error.value)
    assert (scaler.scale, scaler.skipped_steps) == (0.25, 2)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("Dynamic", r"Net\(loss_scale='Dynamic'\): unknown loss scale \(did you mean 'dynamic'\?\)"),
        ("auto", r"Net\(loss_scale='auto'\): unknown loss scale; give None"),
        ({"type": "dynamic", "scale": 2.0}, r"a saved loss scale is \{'type': 'dynamic', ...\}"),
        (0, r"Net\(loss_scale=0\): give None"),
        (True, r"Net\(loss_scale=True\)"),
    ],
)
def test_a_bad_loss_scale_spec_names_where_and_what(spec, message):
    with pytest.raises(ValueError, match=message):
        LossScaler.from_spec(spec, where="Net")


def test_every_spec_form_makes_a_fresh_scaler_and_a_config_round_trips():
    assert LossScaler.from_spec(None) is None
    dynamic = LossScaler.from_spec("dynamic")
    assert dynamic.dynamic and dynamic.scale == 2.0**16 and dynamic.growth_interval == 2000
    used = LossScaler(32.0, growth_interval=5)
    used.update(False)
    fresh = LossScaler.from_spec(used)  # its settings, not its state
    assert fresh is not used and fresh.scale == 32.0 and fresh.skipped_steps == 0
    assert LossScaler.from_spec(used.config()).config() == used.config()


def test_state_round_trips_and_a_bad_state_is_refused_naming_it():
    scaler = LossScaler(64.0, growth_interval=10)
    _decisions(scaler, [True, False, True, True])
    other = LossScaler()
    other.load_state(scaler.state())
    assert (other.scale, other.skipped_steps, other.clean_steps) == (32.0, 1, 2)
    for bad in ([0.0, 0, 0], [1.0, -1, 0], [np.nan, 0, 0], [1.0, 2.0]):
        with pytest.raises(ValueError, match=r"expected \[scale > 0, skipped steps >= 0, clean steps >= 0\]"):
            other.load_state(bad)


def test_merged_replicas_take_the_smallest_scale_most_skips_and_fewest_clean_steps():
    a, b = LossScaler(64.0), LossScaler(16.0)
    a.load_state([64.0, 1, 7])
    b.load_state([16.0, 3, 2])
    np.testing.assert_array_equal(LossScaler.merged([a, b]), [16.0, 3, 2])
    np.testing.assert_array_equal(LossScaler.merge_states([[8.0, 0, 9], [4.0, 5, 4], [2.0, 1, 6]]), [2.0, 5, 4])


@pytest.mark.parametrize(
    ("dtype", "master", "want"),
    [("float16", None, "float16"), ("float16", "float32", "float32"), ("float32", "float64", "float64")],
)
def test_the_master_dtype_is_at_least_as_wide_as_the_compute_dtype(dtype, master, want):
    assert master_dtype_for(np.dtype(dtype), master, resolve_dtype) == np.dtype(want)


def test_the_loss_seed_is_scaled_in_float32_so_2_to_the_16_does_not_overflow_float16():
    eps = kit.asarray(np.array([1e-3, -2e-4, 0.5], dtype=np.float16))
    want = (np.array([1e-3, -2e-4, 0.5], dtype=np.float16).astype(np.float32) * 2.0**16).astype(np.float16)
    assert float(np.finfo(np.float16).max) < 2.0**16  # the scale itself is inf in float16
    scale_seed(eps, 2.0**16)
    assert eps.dtype == np.float16 and np.isfinite(eps.numpy()).all()
    np.testing.assert_array_equal(eps.numpy(), want)
