"""Issue 44 item B: honest plumbing. local_spark_context keeps the master spark-submit (or a running
context, or PYSPARK_SUBMIT_ARGS) gave and says when it is not the one the call named; Spark's log
level is the user's (a lost task is said, quiet=True or not); kit.data imports without pooch (an
executor needs no download library); an export_directory that does not exist yet is created."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark
import pytest

from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster, local_spark_context, spark_missing

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"

REPORT = textwrap.dedent(
    """
    import json, sys, warnings
    from kit.spark import local_spark_context
    calls = json.loads(sys.argv[1])
    out = []
    for call in calls:
        if call == "stop":
            sc.stop()
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sc = local_spark_context(*call, conf={"spark.ui.enabled": "false"})
        out.append({"master": sc.master, "warnings": [str(w.message) for w in caught]})
    print("REPORT " + json.dumps(out))
    sc.stop()
    """
)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def _report(tmp_path, calls, submit=None, **env):
    script = tmp_path / "job.py"
    script.write_text(REPORT)
    cmd = [sys.executable, str(script), json.dumps(calls)]
    if submit:  # spark-submit runs the script with PYSPARK_PYTHON, from the pyspark package's SPARK_HOME
        env = {"PYSPARK_PYTHON": sys.executable, "SPARK_HOME": str(Path(pyspark.__file__).parent), **env}
        cmd = [
            str(SPARK_SUBMIT),
            "--master",
            submit,
            "--conf",
            "spark.ui.enabled=false",
            str(script),
            json.dumps(calls),
        ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_env(**env), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("REPORT ")]
    return json.loads(line[len("REPORT ") :])


@pytest.fixture(scope="module")
def have_spark():
    why = spark_missing()
    if why:
        pytest.skip(why)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("submit", "env", "calls", "expected"),
    [
        (None, {}, [[]], [("local[2]", None)]),
        (None, {}, [["local[1]"]], [("local[1]", None)]),
        ("local[1]", {}, [[]], [("local[1]", None)]),  # the regression: spark-submit's master, not local[2]
        ("local[1]", {}, [["local[2]"]], [("local[1]", "the one spark-submit gave this driver")]),
        (
            None,
            {"PYSPARK_SUBMIT_ARGS": "--master local[1] pyspark-shell"},
            [["local[2]"]],
            [("local[1]", "the one PYSPARK_SUBMIT_ARGS gave this driver")],
        ),
        (  # a context already running is returned, said; the warning's remedy (stop it first) works
            None,
            {},
            [["local[1]"], ["local[2]"], "stop", ["local[2]"]],
            [("local[1]", None), ("local[1]", "already running in this process"), ("local[2]", None)],
        ),
    ],
)
def test_every_way_a_master_is_chosen(have_spark, tmp_path, submit, env, calls, expected):
    got = _report(tmp_path, calls, submit, **env)
    assert [g["master"] for g in got] == [master for master, _ in expected]
    for g, call, (master, said) in zip(got, [c for c in calls if c != "stop"], expected):
        if said is None:
            assert g["warnings"] == []
        else:
            (message,) = g["warnings"]
            assert f"local_spark_context(master={call[0]!r}): using master {master!r}" in message
            assert said in message


@pytest.mark.slow
@pytest.mark.parametrize("quiet", [False, True])
def test_a_lost_task_is_said_on_stderr_whatever_quiet_is(have_spark, tmp_path, quiet):
    """kit no longer sets Spark's log level to ERROR for the whole process, and quiet=True drops
    only the JVM's start-up lines: Spark's warning about a lost task reaches stderr."""
    code = (
        "from kit.spark import local_spark_context\n"
        f"sc = local_spark_context('local[1]', conf={{'spark.ui.enabled': 'false'}}, quiet={quiet})\n"
        "try:\n"
        "    sc.parallelize([1], 1).map(lambda v: v // 0).collect()\n"
        "except Exception:\n"
        "    print('failed as it should')\n"
        "sc.stop()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=_env())
    assert r.returncode == 0 and "failed as it should" in r.stdout, r.stderr[-2000:]
    assert "WARN TaskSetManager: Lost task 0.0" in r.stderr
    if quiet:
        assert "Setting default log level" not in r.stderr and "NativeCodeLoader" not in r.stderr


def test_local_spark_context_refuses_a_master_that_is_not_a_url():
    with pytest.raises(TypeError, match=r"local_spark_context\(master=2\): a Spark master URL such as 'local\[2\]'"):
        local_spark_context(2)


BLOCK_POOCH = textwrap.dedent(
    """
    import sys
    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name == "pooch" or name.startswith("pooch."):
                raise ImportError("pooch is blocked here (an executor without it)")
    sys.meta_path.insert(0, Refuse())
    {body}
    """
)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("import kit.data; print('imported', 'pooch' in sys.modules)", "imported False"),
        ("from kit.data import load_digits; print('digits', load_digits()[0].num_examples > 0)", "digits True"),
        ("import kit.spark.executor; print('executor imported', 'pooch' in sys.modules)", "executor imported False"),
        (
            "from kit.data.datasets import _download\n"
            "try:\n    _download(__import__('pathlib').Path('unused'))\n"
            "except ImportError as e:\n    print('download:', e)",
            "download: load_fashion_mnist(download=True) needs pooch",
        ),
    ],
)
def test_kit_data_imports_without_pooch(tmp_path, body, expected):
    """An executor imports kit.data (DataSet) to train; only downloading needs pooch."""
    code = BLOCK_POOCH.format(body=body)
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=_env(), cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert expected in r.stdout


@pytest.mark.parametrize("cls", [ParameterAveragingTrainingMaster, SharedTrainingMaster])
@pytest.mark.parametrize(
    ("given", "made"),
    [
        ("new", "new"),
        ("new/deeper", "new/deeper"),
        ("file://{tmp}/url", "url"),
        ("existing", "existing"),
    ],
)
def test_an_export_directory_that_does_not_exist_yet_is_created(tmp_path, cls, given, made):
    (tmp_path / "existing").mkdir()
    path = given.format(tmp=tmp_path) if given.startswith("file://") else str(tmp_path / given)
    tm = cls(export_directory=path)
    assert tm.export_directory == path
    assert (tmp_path / made).is_dir()


@pytest.mark.parametrize("cls", [ParameterAveragingTrainingMaster, SharedTrainingMaster])
def test_an_export_directory_that_is_a_file_is_refused_in_words(tmp_path, cls):
    afile = tmp_path / "a-file"
    afile.write_text("")
    with pytest.raises(ValueError, match=r"export_directory=.*a-file.*is a file"):
        cls(export_directory=str(afile))
