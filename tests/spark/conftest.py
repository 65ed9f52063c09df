"""One local[2] SparkContext for the whole test session (starting Spark costs seconds)."""

import pytest

from kit.spark import local_spark_context, spark_missing


@pytest.fixture(scope="session")
def sc():
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
