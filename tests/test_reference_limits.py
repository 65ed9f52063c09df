"""kit.reference_limits: the physical limits' copy row and matmuls are compared only like for like
(the same call both ways, interleaved), or no ratio and no direction is drawn."""

from kit import reference


def _limits(copy_like: bool, interleaved: bool, kit_range=(39.0, 41.0)):
    m = {"size": 8, "cupy_median": 50.0, "cupy_min_max": [49.0, 51.0], "kit_median": 40.0, "kit_min_max": kit_range}
    p = {
        "method": "m",
        "d2d_copy_gb_s": {"median": 100.0, "min": 99.0, "max": 101.0},
        "kit_dup_gb_s": {"median": 90.0, "min": 89.0, "max": 91.0},
        "matmul_float32_tflops": m,
        "matmul_float16_tflops": m,
    }
    if copy_like:
        p["cupy_copy_gb_s"] = {"median": 95.0, "min": 94.0, "max": 96.0}
    if interleaved:
        p["interleaved"] = True
    return {"machine": {"gpu": "G", "date": "2026-12-01T00:00:00+00:00"}, "parts": {"physical_limits": p}}


def test_a_copy_that_is_not_like_for_like_gets_no_ratio_and_no_direction():
    old = _limits(copy_like=False, interleaved=False)
    sentence = reference.physical_limits_sentence(old)
    assert "device-to-device copy: not like for like in this run" in sentence
    assert "so no direction is drawn from it" in sentence and "kit 90.0 against" not in sentence
    # the matmuls: the same call both ways, but not interleaved: no direction even with ranges apart
    assert "not interleaved, so neither a ratio nor a direction is drawn" in sentence and "lies below" not in sentence
    assert "% of it" not in sentence  # no ratio of figures timed one after the other, as in the table
    table = str(reference.physical_limits_table(old))
    assert "not like for like" in table and "90.0%" not in table and "89.8%" not in table
    new = reference.physical_limits_sentence(_limits(copy_like=True, interleaved=True))
    assert "device-to-device copy: kit 90.0 against CuPy's 95.0, 94.7% of it; kit's whole range" in new
    assert "float32 matmul 8^3: kit 40.0 against CuPy's 50.0, 80.0% of it; kit's whole range" in new
    assert "94.7%" in str(reference.physical_limits_table(_limits(copy_like=True, interleaved=True)))
