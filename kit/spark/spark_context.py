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
import shutil
import sys
from collections.abc import Iterator
from typing import Any

from kit.settings import install_hint
from kit.tables import wrap

__all__ = ["SparkUnavailableError", "local_spark_context", "require_spark", "spark_missing"]


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


@contextlib.contextmanager
def _stderr_to_devnull() -> Iterator[None]:
    """File descriptor 2 points at /dev/null inside the block: a process started there (Spark's
    JVM, and the Python workers it forks) keeps writing its stderr there for its whole life."""
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def local_spark_context(
    master: str = "local[2]",
    app_name: str = "kit",
    driver_memory: str = "1g",
    conf: dict[str, str] | None = None,
    quiet: bool = False,
) -> Any:
    """A SparkContext whose executors run this Python, with clear errors. Spark's own web UI stays
    on (http://localhost:4040 while the context lives, the next free port if taken): what DL4J's
    users were told to turn off was DL4J's training UI, whose dependencies clashed with Spark's;
    `conf={"spark.ui.enabled": "false"}` turns it off. `quiet=True` starts the JVM with its stderr
    on /dev/null (its start-up warnings and log4j lines, a notebook's red boxes); kit's errors
    still arrive as Python exceptions. It applies only when this call starts the JVM."""
    if not isinstance(quiet, bool):
        raise TypeError(f"local_spark_context(quiet={quiet!r}): True or False")
    why = spark_missing()
    if why:
        raise SparkUnavailableError(why)
    from pyspark import SparkConf, SparkContext

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):  # one machine: bind to loopback, and Spark prints no host name or address
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {"spark.driver.memory": driver_memory, **(conf or {})}
    spark_conf = SparkConf().setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        spark_conf = spark_conf.set(key, value)
    try:
        with _stderr_to_devnull() if quiet else contextlib.nullcontext():
            sc = SparkContext.getOrCreate(spark_conf)
    except Exception as exc:
        raise SparkUnavailableError(
            f"Spark could not start with master {master!r}: {type(exc).__name__}: {str(exc)[:400]}; "
            "check `java -version` (Spark needs Java 17) and that nothing else holds the driver port"
        ) from exc
    sc.setLogLevel("ERROR")
    return sc


SparkUnavailableError.__module__ = "kit.spark.network"  # the public path, as tracebacks name it
