"""Every remedy kit's error messages print in code form runs as printed.

Two ways of finding them: read the strings of kit/core/devices.py and kit/core/device_objects.py (where the
device objects and their errors live), kit/core/backend.py and kit/settings.py (docstrings aside) for
`kit.<...>(...)` calls and `VAR=value` settings; and raise each error those modules word, and read
the remedies from the real messages (where values are filled in). Each remedy then runs in a fresh
Python: a call after `import kit`, a setting as the environment of `import kit`.

The rest of kit (the second half of this file): each error message elsewhere in kit/ that prints code
a user would type is raised, the remedy is read from the real message, and run in this process.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _datasets import random_dataset

import kit
from kit import backend, settings
from kit.core.devices import devices, set_host_device_count
from kit.data import ArrayIterator, DataSet
from kit.nn import Adam, Dense, Network, Sgd, mlp
from kit.nn.evaluation import ROC, Evaluation
from kit.training.earlystopping import (
    ClassificationScoreCalculator,
    EarlyStoppingConfig,
    EarlyStoppingParallelTrainer,
    MaxEpochsTerminationCondition,
)
from kit.workspaces.workspace import WorkspaceConfig

REPO = Path(__file__).resolve().parents[1]
MODULES = ("kit/core/devices.py", "kit/core/device_objects.py", "kit/core/backend.py", "kit/settings.py")
CALL = re.compile(r"\bkit(?:\.\w+)+\((?:[^()]|\([^()]*\))*\)")
SETTING = re.compile(r"\b((?:KIT|BACKEND_PRIORITY)_[A-Z_]+)=([A-Za-z0-9_.-]+)")
FILLED = "\x00"  # where an f-string fills in a value


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(path: Path) -> list[str]:
    """The module's string literals, docstrings aside; an f-string with FILLED where a value goes."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            out.append("".join(v.value if isinstance(v, ast.Constant) else FILLED for v in node.values))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            out.append(node.value)
    return out


def _remedies(text: str) -> set[str]:
    calls = set(CALL.findall(text))
    calls |= {f"{var}={value}" for var, value in SETTING.findall(text)}
    return calls


def _source_remedies() -> set[str]:
    found = set()
    for name in MODULES:
        for text in _strings(REPO / name):
            found |= {r for r in _remedies(text) if FILLED not in r}
    return found


def _raised(make: Callable[[], object]) -> str:
    with pytest.raises(Exception) as info:  # any error kit words
        make()
    return str(info.value)


def _message_remedies() -> set[str]:
    """Raise every error these modules word, and read the remedies from the messages."""
    messages = [_raised(lambda: kit.Device("cpu:1")), _raised(lambda: kit.Device(f"gpu:{kit.devices.gpu_count()}"))]
    previous = set_host_device_count(3)
    try:
        messages += [_raised(lambda: kit.Device("cpu:5")), _raised(lambda: kit.Device("cpu:64"))]
    finally:
        set_host_device_count(previous)
    messages.append(_raised(lambda: set_host_device_count(100_000)))
    previous_precision = backend.get_matmul_precision()
    messages.append(_raised(lambda: backend.set_matmul_precision("tf32")))
    assert backend.get_matmul_precision() == previous_precision
    messages.append(_raised(lambda: backend.resolve_dtype("quad")))
    bad = {
        "KIT_HOST_DEVICES": ["abc", "100000"],
        "KIT_DEFAULT_DTYPE": ["int7", "bfloat16"],
        "KIT_QUICK": ["maybe"],
        "KIT_MATMUL_PRECISION": ["fast"],
        "KIT_SEED": ["x"],
        "KIT_BACKEND": ["tpu"],
        "KIT_BACKEND_STRICT": ["perhaps"],
        "BACKEND_PRIORITY_CPU": ["low"],
        "BACKEND_PRIORITY_GPU": ["high"],
    }
    for variable, values in bad.items():
        for value in values:
            try:
                settings.load({variable: value})
            except settings.SettingError as exc:
                messages.append(str(exc))
            else:
                assert (variable, value) == ("KIT_DEFAULT_DTYPE", "bfloat16")  # fine where ml_dtypes is installed
    found = set()
    for message in messages:
        found |= _remedies(message)
    return found


SOURCE = _source_remedies()
MESSAGES = _message_remedies()


def test_the_remedies_are_found():
    """The finder sees what the messages say (so an empty search cannot pass for a clean one)."""
    assert "kit.devices()" in SOURCE and "kit.backend.set_matmul_precision('high')" in SOURCE
    assert "kit.set_default_dtype('float16')" in SOURCE and "KIT_HOST_DEVICES=2" in SOURCE
    assert "kit.devices.set_host_device_count(2)" in MESSAGES  # the advice for Device('cpu:1')
    assert "kit.devices.set_host_device_count(6)" in MESSAGES  # for cpu:5 of 3
    assert "KIT_HOST_DEVICES=2" in MESSAGES and "KIT_QUICK=1" in MESSAGES and "BACKEND_PRIORITY_GPU=0" in MESSAGES


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "BACKEND_PRIORITY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return {**env, **changes}


@pytest.mark.parametrize("remedy", sorted(SOURCE | MESSAGES))
def test_each_remedy_runs_as_printed(remedy):
    if "(" in remedy:
        cmd, env = ["-c", f"import kit\nprint(repr({remedy}))"], _env()
    else:
        variable, value = remedy.split("=", 1)
        cmd, env = ["-c", "import kit; print(kit.settings.load())"], _env(**{variable: value})
    out = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert out.returncode == 0, f"{remedy!r} does not run:\n{out.stderr[-2000:]}"


def test_kit_devices_is_the_list_and_the_module():
    """The clash the advice fell into: kit.devices was the function, so kit.devices.X raised AttributeError."""
    assert kit.devices() == kit.devices.devices()
    assert kit.devices.set_host_device_count is set_host_device_count
    assert devices() == kit.devices()  # the function, imported from the module


# ---- the remedies the rest of kit prints: each error raised, its remedy read from the message, run ----
#
# Above: kit/core/devices.py, kit/core/backend.py and kit/settings.py, each remedy run in a fresh Python. Below:
# every other error message in kit/ that prints code a user would type (found by grepping kit/ for
# "call ", "use ", "pass ", "set ", "run ", "pip install" and "kit." in error messages). Each test raises
# the error, reads the remedy out of the real message, and runs it, in this process.


def _printed(message: str, pattern: str) -> str:
    """The remedy `pattern` (a regular expression with one group) finds in `message`."""
    found = re.search(pattern, message)
    assert found, f"no remedy matching {pattern!r} in: {message}"
    return found.group(1)


def _one_of(message: str) -> list[str]:
    """The names after 'use one of' (a comma-separated list, or a Python list)."""
    listed = _printed(message, r"use one of (.+)$")
    return ast.literal_eval(listed) if listed.startswith("[") else [n.strip() for n in listed.split(",")]


@pytest.fixture
def two_host_devices():
    previous = set_host_device_count(2)
    yield
    set_host_device_count(previous)


@pytest.mark.usefixtures("two_host_devices")
def test_the_to_device_remedies_run_as_printed():
    a, b = kit.ones((3,), device="cpu:0"), kit.ones((3,), device="cpu:1")
    move = _printed(_raised(lambda: a + b), r"move one with (\.to\('[^']+'\)) first")
    assert (a + eval(f"b{move}")).numpy().tolist() == [2, 2, 2]
    net, x = mlp(4, hidden=(3,), n_out=2), kit.zeros((2, 4), device="cpu:1")
    move = _printed(_raised(lambda: net.output(x)), r"use (\.to\('[^']+'\))")
    assert net.output(eval(f"x{move}")).shape == (2, 2)


@pytest.mark.gpu
def test_the_asarray_remedy_for_host_data_meeting_a_gpu_array_runs_as_printed():
    g, x = kit.ones((3,), device="gpu:0"), np.ones(3, np.float32)
    wrap = _printed(_raised(lambda: g + x), r"wrap it with (kit\.asarray\(x, device='[^']+'\))")
    assert (g + eval(wrap)).numpy().tolist() == [2, 2, 2]


def test_the_astype_remedies_for_whole_number_features_run_as_printed():
    net, x = mlp(4, hidden=(3,), n_out=2), kit.zeros((2, 4), dtype="int32")
    cast = _printed(_raised(lambda: net.output(x)), r"convert with (\.astype\('\w+'\))")
    assert net.output(eval(f"x{cast}")).shape == (2, 2)
    cast = _printed(_raised(lambda: DataSet(x, [0, 1])), r"convert with (\.astype\('\w+'\))")
    assert DataSet(eval(f"x{cast}"), [0, 1]).features.dtype.kind == "f"


def test_the_fit_remedy_for_a_tuple_runs_as_printed():
    net = mlp(4, hidden=(3,), n_out=3)
    features, labels = np.zeros((3, 4), np.float32), np.array([0, 1, 2])
    remedy = _printed(_raised(lambda: net.fit((features, labels))), r"wrap features and labels in a DataSet: (.+)$")
    assert eval(remedy, {"net": net, "DataSet": DataSet, "features": features, "labels": labels}) is net
    assert net.iteration == 1


def test_the_set_params_remedy_of_copy_state_from_runs():
    pairs = [
        (mlp(4, hidden=(3,), n_out=2, updater=Adam()), mlp(4, hidden=(3,), n_out=2, updater=Sgd(0.1), seed=1)),
        (
            mlp(4, hidden=(3,), n_out=2, dtype="float16", master_dtype="float32"),
            mlp(4, hidden=(3,), n_out=2, dtype="float16", seed=1),
        ),
    ]
    for into, source in pairs:
        message = _raised(lambda into=into, source=source: into.copy_state_from(source))
        assert _printed(message, r"or (?:use )?(set_params\(\)) to copy parameters only") == "set_params()"
        into.set_params(source.params())  # the parameters only, as it says
        assert into.params().numpy().tolist() == source.params().numpy().tolist()


def test_the_master_dtype_remedies_run_as_printed():
    message = _raised(lambda: mlp(4, hidden=(3,), n_out=2, master_dtype="float16"))
    pair = _printed(message, r"use (master_dtype='\w+' with dtype='\w+')").replace(" with ", ", ")
    mixed = eval(f"mlp(4, hidden=(3,), n_out=2, {pair})", {"mlp": mlp})
    assert mixed.mixed and mixed.flat_master.dtype == "float32" and mixed.dtype == "float16"
    leave = _printed(message, r"or leave (master_dtype=None)")
    assert not eval(f"mlp(4, hidden=(3,), n_out=2, {leave})", {"mlp": mlp}).mixed


def test_each_weight_initialisation_the_error_names_builds_a_network():
    message = _raised(lambda: Network([Dense(3, weight_init="bogus")], (4,)))
    names = re.findall(r"'([^']+)'", message.split(": use ", 1)[1])
    assert names == ["xavier", "he", "normal:<std>", "zeros", "ones"]
    for name in names:
        net = Network([Dense(3, weight_init=name.replace("<std>", "0.1"))], (4,))
        assert np.all(np.isfinite(net.params().numpy()))


def test_each_name_a_use_one_of_error_lists_is_accepted():
    net = mlp(4, hidden=(3,), n_out=2)
    cases = {  # the error, and what to do with each name it lists
        lambda: mlp(4, hidden=(3,), n_out=2, activation="swish"): lambda n: mlp(4, hidden=(3,), n_out=2, activation=n),
        lambda: net.configuration.replace(training_workspace_mode="BOTH"): lambda n: Network.from_config(
            net.configuration.replace(training_workspace_mode=n)
        ),
        lambda: WorkspaceConfig(policy_spill="sideways"): lambda n: WorkspaceConfig(policy_spill=n),
        lambda: kit.set_debug_mode("loud"): kit.set_debug_mode,
        lambda: ClassificationScoreCalculator("AUC", None): lambda n: ClassificationScoreCalculator(
            n, DataSet([[0.0] * 4, [1.0] * 4], [0, 1], num_classes=2)
        ).calculate_score(net),
    }
    for make, take in cases.items():
        names = _one_of(_raised(make))
        assert len(names) >= 3, names
        for name in names:
            take(name)
    kit.set_debug_mode("DISABLED")


def test_the_evaluation_remedies_run_as_printed():
    ev = Evaluation(3)
    labels, predictions = np.eye(3)[[0, 1, 2, 2]], np.eye(3)[[0, 1, 2, 0]]
    call = _printed(_raised(ev.accuracy), r"call (eval\(labels, predictions\)) first")
    eval(f"ev.{call}", {"ev": ev, "labels": labels, "predictions": predictions})
    assert ev.accuracy() == 0.75
    roc = ROC()
    roc.eval(labels, predictions)
    message = _raised(roc.calculate_auc)
    average = _printed(message, r"use (calculate_average_auc\(\))")
    assert 0 <= eval(f"roc.{average}", {"roc": roc}) <= 1
    assert "give a class" in message and 0 <= roc.calculate_auc(0) <= 1


def test_the_matmul_remedy_for_a_scalar_runs():
    s, v = kit.array(2.0), kit.ones((3,))
    assert _printed(_raised(lambda: s @ v), r"; use (\*)$") == "*"
    assert (s * v).numpy().tolist() == [2, 2, 2]


def test_a_new_parallel_early_stopping_trainer_trains_again_as_the_error_says():
    def trainer():
        cfg = EarlyStoppingConfig(
            epoch_termination_conditions=[MaxEpochsTerminationCondition(1)],
            score_calculator=ClassificationScoreCalculator("ACCURACY", random_dataset(16, seed=3)),
        )
        return EarlyStoppingParallelTrainer(cfg, net, ArrayIterator(random_dataset(), 16), workers=2)

    net = mlp(6, hidden=(4,), n_out=3)
    used = trainer()
    used.fit()
    assert "make a new trainer" in _raised(used.fit)
    assert trainer().fit().total_epochs == 1 and net.epoch == 2


def test_a_new_memory_timeline_records_as_the_error_says():
    with kit.memory_timeline() as used:
        pass
    make = _printed(_raised(used.start), r"make a new one with (kit\.memory_timeline\(\))")
    with eval(make) as fresh:
        kit.zeros((16,))
    assert fresh.events


def test_the_detach_remedy_for_another_thread_runs_as_printed():
    ws = kit.get_workspace_for_current_thread(name="REMEDY_OWNER")
    got = {}
    with ws:
        x = kit.ones((4,))

        def use(a, key):
            try:
                got[key] = float(a.sum())
            except Exception as exc:
                got[key] = str(exc)

        t = threading.Thread(target=use, args=(x, "raw"))
        t.start()
        t.join()
        remedy = _printed(got["raw"], r"Call (\.detach\(\)) on the owning thread and hand over the copy")
        t = threading.Thread(target=use, args=(eval(f"x{remedy}"), "copy"))  # the copy, made on this thread
        t.start()
        t.join()
    assert got["copy"] == 4.0


def test_the_remedies_for_an_array_from_a_closed_scope_run_as_printed():
    outer = kit.get_workspace_for_current_thread(name="REMEDY_OUTER")
    inner = kit.get_workspace_for_current_thread(name="REMEDY_INNER")
    with inner:
        x = kit.ones((3,))
    message = _raised(x.sum)
    detach = _printed(message, r"Keep a result past its scope with (\.detach\(\)) inside the scope")
    leverage = _printed(message, r"or (\.leverage_to\('<outer workspace>'\)) into an open outer workspace")
    track = _printed(message, r"\((kit\.workspace\.track_allocation_sites\(True\)) adds where it was allocated")
    with inner:
        kept = eval(f"kit.ones((3,)){detach}")
    assert float(kept.sum()) == 3.0
    with outer:
        with inner:
            lifted = eval(f"kit.ones((3,)){leverage.replace('<outer workspace>', 'REMEDY_OUTER')}")
        assert lifted.workspace is outer and float(lifted.sum()) == 3.0
    eval(track)
    with inner:
        y = kit.ones((3,))
    assert re.search(r"allocated at .*test_remedies\.py:\d+", _raised(y.sum))


def test_the_class_index_remedy_for_bad_label_rows_runs():
    net, x = mlp(4, hidden=(4,), n_out=3), np.zeros((3, 4), np.float32)
    rows = np.array([[0, 2.0, -1.0], [1, 0, 0], [0, 0, 1]])
    message = _raised(lambda: net.fit_batch(DataSet(x, rows)))
    top = int(_printed(message, r"give class indices \(N,\) of whole numbers 0\.\.(\d+)"))
    indices = [1, 0, top]  # class indices 0..top, as printed
    assert np.isfinite(net.fit_batch(DataSet(x, indices, num_classes=top + 1)))


@pytest.mark.skipif(backend.gpu_status()[0], reason="a GPU is usable here: a strict GPU choice does not fail")
def test_unsetting_the_strict_flag_falls_back_to_the_cpu_as_printed():
    env = {"KIT_BACKEND": "cupy", "KIT_BACKEND_STRICT": "1"}
    variable = _printed(_raised(lambda: backend.choose(env)), r"; unset (\w+) to fall back to the CPU")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert backend.choose({k: v for k, v in env.items() if k != variable}).name == "numpy"
