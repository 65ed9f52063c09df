"""Starting Spark from kit: a local SparkContext whose executors run this Python, and what is
missing when Spark cannot start (PySpark, Java 17), said with the fix.

    >>> from kit.spark import spark_missing
    >>> spark_missing() is None or "Java" in spark_missing() or "PySpark" in spark_missing()
    True

Importing this module does not import PySpark; `local_spark_context` does. Re-exported by
kit.spark.network and kit.spark.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from kit.measurement.tables import wrap
from kit.settings import install_hint

__all__ = ["SparkMasterWarning", "SparkUnavailableError", "local_spark_context", "require_spark", "spark_missing"]


class SparkUnavailableError(RuntimeError):
    """Spark cannot start here: the message names what is missing (PySpark, Java) and the fix.

    In IPython or Jupyter it shows as its message alone, wrapped at words, without a traceback:
    the message says what is missing and what to run, and the frames of kit and PySpark under it
    would bury that in a notebook (`_render_traceback_`, IPython's hook for an exception that
    renders itself; a script still prints the whole traceback).

        >>> SparkUnavailableError("Spark needs Java 17")._render_traceback_()
        ['SparkUnavailableError: Spark needs Java 17']
    """

    def _render_traceback_(self) -> list[str]:
        # a `command` stays on one line, so that it can be copied whole
        text = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), f"SparkUnavailableError: {self}")
        return [line.replace("\0", " ") for line in wrap(text).splitlines()]


def spark_missing() -> str | None:
    """Why Spark cannot start here (None when PySpark and Java are both present)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return f'PySpark is not installed: {install_hint("spark")} (or pip install "pyspark>=3.5")'
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no `java` on PATH"
        return (
            f"Spark needs Java 17 and finds none ({where}): on Debian/Ubuntu "
            "`apt-get install -y openjdk-17-jre-headless`, elsewhere install a JRE 17 and set JAVA_HOME"
        )
    return None


def require_spark(what: str = "this chapter") -> str:
    """Say, before anything needs it, whether Spark can start here: one line when it can, and
    otherwise raise SparkUnavailableError naming what is missing and what supplies it, which a
    notebook shows as that message alone, so that running on stops at it.

        >>> from kit.spark import spark_missing
        >>> spark_missing() is not None or require_spark().startswith("Spark can start here")
        True
    """
    why = spark_missing()
    if why:
        raise SparkUnavailableError(
            f"{what} runs on Spark, which cannot start here. {why}. Then run {what} again from the top."
        )
    import pyspark

    return f"Spark can start here: PySpark {pyspark.__version__} and a Java runtime are installed."


# what Spark's JVM prints on stderr every time it starts, whatever happens later: quiet=True
# drops these lines only (a warning about a lost or retried task still comes through)
START_UP_NOISE = re.compile(
    r"WARNING: Using incubator modules|Using Spark's default log4j profile|Setting default log level to|"
    r"To adjust logging level use sc\.setLogLevel|WARN NativeCodeLoader: Unable to load native-hadoop"
)


class SparkMasterWarning(UserWarning):
    """local_spark_context got a master other than the one its call named (spark-submit's, or a
    SparkContext already running): the message names both."""


def _forward_stderr(read_fd: int, write_fd: int) -> None:
    """Copy lines from the JVM's stderr pipe to the process's own stderr, less the start-up noise."""
    with os.fdopen(read_fd, "rb") as pipe:
        for line in pipe:
            if not START_UP_NOISE.search(line.decode("utf-8", "replace")):
                os.write(write_fd, line)


@contextlib.contextmanager
def _stderr_filtered() -> Iterator[None]:
    """File descriptor 2 is a pipe inside the block: a process started there (Spark's JVM, and
    the Python workers it forks) keeps writing its stderr into it for its whole life, and a
    daemon thread forwards every line to this process's stderr except Spark's start-up noise
    (START_UP_NOISE): log lines about lost tasks, retries and errors still reach the user."""
    saved = os.dup(2)  # the thread writes here for the life of the process
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    threading.Thread(target=_forward_stderr, args=(read_fd, saved), daemon=True, name="kit-spark-stderr").start()
    try:
        yield
    finally:
        os.dup2(saved, 2)


def _submitted_master() -> tuple[str | None, str]:
    """The master chosen before kit was called, and who chose it: spark-submit (or the pyspark
    shell: the JVM is there already and this Python connects to it), PYSPARK_SUBMIT_ARGS'
    --master, or none (kit starts Spark with the master its call names)."""
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit started this driver: its JVM holds the conf
        SparkContext._ensure_initialized()
        return SparkConf().get("spark.master", None), "spark-submit"
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    for i, arg in enumerate(args):
        if arg == "--master" and i + 1 < len(args):
            return args[i + 1], "PYSPARK_SUBMIT_ARGS"
        if arg.startswith("--master="):
            return arg.split("=", 1)[1], "PYSPARK_SUBMIT_ARGS"
    return None, ""


def _say_master(asked: str | None, got: str, where: str) -> None:
    if asked is not None and asked != got:
        warnings.warn(
            f"local_spark_context(master={asked!r}): using master {got!r}, {where}; the master argument applies "
            "only where kit starts Spark itself (to use another master, stop that context first, or submit "
            "with --master)",
            SparkMasterWarning,
            stacklevel=3,
        )


def local_spark_context(
    master: str | None = None,
    app_name: str = "kit",
    driver_memory: str = "1g",
    conf: dict[str, str] | None = None,
    quiet: bool = False,
) -> Any:
    """A SparkContext whose executors run this Python, with clear errors.

    The master: a SparkContext already running in this process is returned as it is; a driver
    started by spark-submit (`spark-submit --master spark://host:7077 job.py`, or the pyspark
    shell) keeps the master spark-submit gave it, as does one whose PYSPARK_SUBMIT_ARGS name a
    --master; otherwise kit starts Spark with `master` (default "local[2]"). When the context's
    master is not the `master` the call named, a SparkMasterWarning says which it got and why
    (`sc.master` always tells). app_name and driver_memory likewise never replace what
    spark-submit set; `conf` entries are set.

    Spark's log level is left to the user (WARN; `sc.setLogLevel(...)`). Spark's web UI stays on
    (http://localhost:4040; what DL4J's users turned off was DL4J's training UI), and
    `conf={"spark.ui.enabled": "false"}` turns it off. `quiet=True`, when this call starts the
    JVM, drops the lines it prints every time it starts (START_UP_NOISE) and nothing else."""
    if not isinstance(quiet, bool):
        raise TypeError(f"local_spark_context(quiet={quiet!r}): True or False")
    if master is not None and not (isinstance(master, str) and master):
        raise TypeError(f"local_spark_context(master={master!r}): a Spark master URL such as 'local[2]', or None")
    why = spark_missing()
    if why:
        raise SparkUnavailableError(why)
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        _say_master(master, active.master, "that of the SparkContext already running in this process")
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        submitted, source = _submitted_master()
    except Exception as exc:
        raise SparkUnavailableError(
            f"Spark could not start: {type(exc).__name__}: {str(exc)[:400]}; check `java -version` (Spark needs "
            "Java 17)"
        ) from exc
    chosen = submitted or master or "local[2]"
    if chosen.startswith("local"):  # one machine: bind to loopback, and Spark prints no host name or address
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark_conf = SparkConf()  # spark-submit's settings, where it started this driver
    if not submitted:
        spark_conf = spark_conf.setMaster(chosen)
    spark_conf.setIfMissing("spark.app.name", app_name)
    spark_conf.setIfMissing("spark.driver.memory", driver_memory)
    for key, value in (conf or {}).items():
        spark_conf = spark_conf.set(key, value)
    try:
        with _stderr_filtered() if quiet else contextlib.nullcontext():
            sc = SparkContext.getOrCreate(spark_conf)
    except Exception as exc:
        raise SparkUnavailableError(
            f"Spark could not start with master {chosen!r}: {type(exc).__name__}: {str(exc)[:400]}; "
            "check `java -version` (Spark needs Java 17) and that nothing else holds the driver port"
        ) from exc
    if submitted:
        _say_master(master, sc.master, f"the one {source} gave this driver")
    return sc


SparkUnavailableError.__module__ = "kit.spark.network"  # the public path, as tracebacks name it
