"""Shared test set-up: quick mode for notebooks, and GPU tests skipped where CuPy sees no GPU."""

import os
import re

os.environ.setdefault("KIT_QUICK", "1")

import pytest

import kit
from kit import backend
from kit.core.devices import set_host_device_count


def pytest_configure(config):
    """pytest-xdist's `--dist loadfile` hands out files in collection order once reordering is off
    (its default sorts files by their number of tests, which sends the chapters and the Spark files,
    few tests but the heaviest, to the end, where one process runs them while the other idles)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    _ids_are_stable(items)
    _leave_slow_to_ci(config, items)
    _heaviest_files_first(items)
    ok, why = backend.gpu_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _ids_are_stable(items):
    """CI runs the tests in two processes (pytest-xdist), which must collect the same ids: an id that
    spells an object's address (`<function <lambda> at 0x...>`) differs between processes."""
    unstable = [item.nodeid for item in items if re.search(r" at 0x[0-9a-f]+", item.nodeid)]
    if unstable:
        raise pytest.UsageError(
            f"{len(unstable)} test ids name a memory address, which differs from process to process "
            f"(first: {unstable[0]}); give that parametrize `ids=[...]` with fixed names"
        )


def _leave_slow_to_ci(config, items):
    """The README's plain `pytest` is the fast default: tests marked `slow` (real browsers, clusters,
    fresh venvs, whole benchmarks) are left out, and CI runs them after with `pytest -m slow`.
    Naming files or nodes, or giving any `-m`, runs what was asked for, slow or not."""
    if config.option.markexpr or config.args_source != pytest.Config.ArgsSource.TESTPATHS:
        return
    slow = [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]


def _heaviest_files_first(items):
    """Order files longest first, so the two processes of `-n 2 --dist loadfile` end together: the
    chapters (a kernel each, every cell a test), then tests/spark and the other files that use `sc`
    (Spark jobs, a JVM), then the rest by their number of tests, most first; the last files handed
    out are small ones that fill the gap. Tests keep their order within a file."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(str(item.path), []).append(item)

    def weight(group: list) -> tuple[int, int]:
        if group[0].path.suffix == ".ipynb":
            return (0, -len(group))
        uses_spark = group[0].path.parent.name == "spark" or any("sc" in getattr(i, "fixturenames", ()) for i in group)
        return (1 if uses_spark else 2, -len(group))

    items[:] = [item for group in sorted(files.values(), key=weight) for item in group]


@pytest.fixture(autouse=True)
def _clean_kit_state():
    """Each test starts from kit's state as at import: kit.state.reset() closes and destroys this
    thread's workspaces and puts every setting, counter and registry back."""
    yield
    kit.state.reset()


@pytest.fixture(scope="session")
def sc():
    """One local[2] SparkContext per test process (starting Spark costs seconds), shared by every
    file that trains on Spark in-process: tests/spark, the labels' and chapter 7's checks. Only this
    fixture stops it. A file that called `local_spark_context()` would get this running context back,
    and stopping it would leave every later file in the process a dead `sc` (the cause of the
    two-process failures, where files share processes in an order that varies from run to run)."""
    from kit.spark import local_spark_context, spark_missing

    why = spark_missing()
    if why:
        pytest.skip(why)
    context = local_spark_context(
        "local[2]",
        app_name="kit-tests",
        driver_memory="512m",
        conf={"spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "false"},
    )
    yield context
    context.stop()


@pytest.fixture(autouse=True)
def _sc_still_running(request):
    """A test that uses `sc` finds it running, or is told which rule was broken (not a timeout later)."""
    if "sc" in request.fixturenames:
        context = request.getfixturevalue("sc")
        if context._jsc is None:
            pytest.fail(
                "the session's SparkContext `sc` was stopped by an earlier test in this process; only the `sc` "
                "fixture in tests/conftest.py may stop it (use `sc`, never stop what local_spark_context() returns)"
            )
    yield


@pytest.fixture(params=[1, 2, 3], ids=["1-host-device", "2-host-devices", "3-host-devices"])
def host_devices(request):
    """Run a multi-device test on the CPU as one device (logical slots), then as 2 and 3
    simulated host devices: separate placement domains, like separate GPUs (JAX's trick)."""
    previous = set_host_device_count(request.param)
    yield request.param
    set_host_device_count(previous)
