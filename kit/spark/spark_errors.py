"""What a failed Spark job says to the user: `SparkTrainingError`, worded from Spark's own error.

    >>> from kit.spark.spark_errors import spark_error
    >>> error = spark_error(RuntimeError("Python worker exited unexpectedly; Lost task 3.0 in stage 7.0"), "fit")
    >>> str(error)[:80]
    'Spark fit failed: the Python worker process computing partition 3 (stage 7) died'

kit's own task errors carry a "[kit.spark] partition N" mark, which is quoted; a Python worker
that died is said in words, with the partition Spark lost; anything else is the first line of
Spark's error, never a Java stack. `SparkNetwork.watched` raises these; re-exported by
kit.spark.network and kit.spark.
"""

from __future__ import annotations

import re

__all__ = ["SparkTrainingError", "spark_error"]


class SparkTrainingError(RuntimeError):
    """A Spark task failed; the message names the partition (and round), the cause is chained."""


def is_spark_error(exc: BaseException) -> bool:
    """An error raised by Spark itself (Py4J's Java errors), not by kit's own checks on the driver."""
    return type(exc).__module__.startswith(("py4j", "pyspark"))


_MARK = re.compile(r"\[kit\.spark\] partition (\d+)[^\n]*")
_LOST = re.compile(r"Lost task (\d+)\.\d+ in stage (\d+)\.\d+")
_CRASHED = "Python worker exited unexpectedly"


def spark_error(exc: BaseException, what: str) -> SparkTrainingError:
    """What a failed Spark action says to the user: kit's own partition message when a kit task
    raised; a Python worker that died said in words (the process crashed or was killed), with
    the partition Spark lost; else the first line of Spark's error, never a Java stack."""
    text = str(exc)
    found = _MARK.search(text)
    if found:
        return SparkTrainingError(f"Spark {what} failed in {found.group(0)[len('[kit.spark] ') :]}")
    lost = _LOST.search(text)
    where = f"partition {lost.group(1)} (stage {lost.group(2)})" if lost else "a partition"
    if _CRASHED in text:
        return SparkTrainingError(
            f"Spark {what} failed: the Python worker process computing {where} died (crashed or was killed: out "
            "of memory, a signal, os._exit in code that builds the RDD); nothing of it reached the network. Check "
            "the executors' memory (spark.executor.memory; driver_memory in local mode) and the RDD's own functions"
        )
    first = next((line.strip() for line in text.splitlines() if "Exception" in line or "Error" in line), text[:300])
    return SparkTrainingError(f"Spark {what} failed in {where}: {type(exc).__name__}: {first[:600]}")


SparkTrainingError.__module__ = "kit.spark.network"  # the public path, as tracebacks name it
