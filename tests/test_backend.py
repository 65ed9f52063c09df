import warnings

import numpy as np
import pytest

import kit
from kit import backend
from kit.state import STATE


def test_default_choice_is_numpy_without_a_usable_gpu():
    ok, _ = backend.gpu_status()
    choice = backend.choose({})
    assert choice.name == ("cupy" if ok else "numpy")


def test_cpu_priority_above_gpu_chooses_numpy():
    choice = backend.choose({"BACKEND_PRIORITY_CPU": "200", "BACKEND_PRIORITY_GPU": "100"})
    assert choice.name == "numpy"
    assert "BACKEND_PRIORITY_CPU=200" in choice.reason


def test_kit_backend_numpy_wins_over_priorities():
    assert backend.choose({"KIT_BACKEND": "numpy", "BACKEND_PRIORITY_GPU": "1000"}).name == "numpy"


def test_bad_backend_name_is_a_clear_error():
    with pytest.raises(kit.settings.SettingError, match=r"KIT_BACKEND='tpu' is not a backend: 'numpy' \(CPU\)"):
        backend.choose({"KIT_BACKEND": "tpu"})


def test_bad_priority_is_a_clear_error():
    with pytest.raises(kit.settings.SettingError, match="BACKEND_PRIORITY_GPU='high' is not an integer"):
        backend.choose({"BACKEND_PRIORITY_GPU": "high"})


def test_a_strict_flag_that_is_not_yes_or_no_is_refused():
    with pytest.raises(kit.settings.SettingError, match="KIT_BACKEND_STRICT='sure' is not a yes/no value"):
        backend.choose({"KIT_BACKEND": "numpy", "KIT_BACKEND_STRICT": "sure"})


@pytest.mark.skipif(backend.gpu_status()[0], reason="a GPU is usable here")
def test_gpu_asked_but_unusable_warns_once_and_falls_back():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = backend.choose({"KIT_BACKEND": "cupy"})
    assert choice.name == "numpy"
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1
    assert "KIT_BACKEND=cupy" in messages[0] and "using NumPy on the CPU" in messages[0]


@pytest.mark.skipif(backend.gpu_status()[0], reason="a GPU is usable here")
def test_gpu_asked_strictly_but_unusable_raises():
    with pytest.raises(backend.BackendError, match="a GPU backend was asked for"):
        backend.choose({"KIT_BACKEND": "cupy", "KIT_BACKEND_STRICT": "1"})


@pytest.mark.skipif(backend.gpu_status()[0], reason="a GPU is usable here")
def test_default_priorities_without_gpu_fall_back_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backend.choose({}).name == "numpy"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("float32", np.float32),
        ("half", np.float16),
        ("FLOAT16", np.float16),
        ("double", np.float64),
        ("int32", np.int32),
    ],
)
def test_dtype_aliases(name, expected):
    assert backend.resolve_dtype(name) == np.dtype(expected)


def test_unsupported_dtypes_are_named():
    with pytest.raises(TypeError, match="unsupported dtype complex64"):
        backend.resolve_dtype(np.complex64)
    with pytest.raises(TypeError, match="unknown dtype 'quad'"):
        backend.resolve_dtype("quad")
    with pytest.raises(TypeError, match="int32 is not floating; the default dtype must be one of float16, float32"):
        kit.set_default_dtype("int32")


def test_bfloat16_says_what_is_missing_or_works():
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        with pytest.raises(TypeError, match="ml_dtypes"):
            backend.resolve_dtype("bfloat16")
    else:
        assert backend.resolve_dtype("bf16").name == "bfloat16"


def test_set_default_dtype_changes_creation_and_returns_previous():
    previous = kit.set_default_dtype("float16")
    try:
        assert previous == np.float32
        assert kit.zeros((2,)).dtype == np.float16
        assert kit.array([1.5, 2.5]).dtype == np.float16
    finally:
        kit.set_default_dtype(previous)
    assert kit.zeros((2,)).dtype == np.float32


def test_matmul_precision_is_set_read_and_restored(monkeypatch):
    monkeypatch.setattr(STATE, "matmul_precision", None)
    monkeypatch.delenv("KIT_MATMUL_PRECISION", raising=False)
    monkeypatch.delenv("CUPY_TF32", raising=False)
    assert backend.get_matmul_precision() == "highest"  # float32, CuPy's and NumPy's default
    assert backend.set_matmul_precision("high") == "highest"
    assert backend.get_matmul_precision() == "high"
    assert backend.set_matmul_precision("highest") == "high"


@pytest.mark.parametrize("bad", ["tf32", "HIGH", None, 1])
def test_a_bad_matmul_precision_names_the_value_and_a_remedy_that_runs(monkeypatch, bad):
    monkeypatch.setattr(STATE, "matmul_precision", "highest")
    with pytest.raises(ValueError, match=r"set_matmul_precision\(.*\): .*one of \['high', 'highest'\]") as info:
        backend.set_matmul_precision(bad)
    assert repr(bad) in str(info.value)
    assert backend.get_matmul_precision() == "highest"  # nothing changed
    remedy = str(info.value).split("e.g. ", 1)[1]
    eval(remedy, {"kit": __import__("kit")})
    assert backend.get_matmul_precision() == "high"


def test_the_precision_comes_from_the_environment(monkeypatch):
    for env, cupy_env, expected in (("high", None, "high"), (None, "1", "high"), (None, "0", "highest")):
        monkeypatch.setattr(STATE, "matmul_precision", None)
        for var, value in (("KIT_MATMUL_PRECISION", env), ("CUPY_TF32", cupy_env)):
            if value is None:
                monkeypatch.delenv(var, raising=False)
            else:
                monkeypatch.setenv(var, value)
        assert backend.get_matmul_precision() == expected  # CuPy's own switch, when set, is reported
    monkeypatch.setattr(STATE, "matmul_precision", None)
    monkeypatch.setenv("KIT_MATMUL_PRECISION", "fast")
    with pytest.raises(ValueError, match="KIT_MATMUL_PRECISION='fast'"):
        backend.get_matmul_precision()
