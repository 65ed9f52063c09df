"""A DataFrame becomes kit's training data through Arrow (mapInArrow), many examples per element:
every column type kit reads (dense and sparse ml Vectors, array<float>, array<double>, nested
arrays, mixed dense and sparse rows) gives the same arrays as the row-at-a-time path, in the
DataFrame's order; a null or ragged row is refused naming the column, and the printed remedy runs."""

import re

import numpy as np
import pytest

from kit.nn import Sgd, mlp
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, SparkTrainingError
from kit.spark.rdd_data import as_rdd, rows_rdd

N, D = 200, 12


@pytest.fixture(scope="module")
def spark(sc):
    from pyspark.sql import SparkSession

    return SparkSession(sc)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D))
    x[rng.random((N, D)) < 0.6] = 0.0  # mostly zeros: sparse vectors hold few entries
    return x, rng.integers(0, 3, N)


def _cells(x, kind):
    from pyspark.ml.linalg import Vectors

    if kind == "dense vector":
        return [Vectors.dense(r.tolist()) for r in x]
    if kind == "sparse vector":
        return [Vectors.sparse(D, {j: float(v) for j, v in enumerate(r) if v}) for r in x]
    if kind == "dense and sparse vectors":
        sparse = _cells(x, "sparse vector")
        return [Vectors.dense(r.tolist()) if i % 3 else sparse[i] for i, r in enumerate(x)]
    if kind == "array<array<float>>":
        return [r.reshape(3, 4).astype(np.float32).tolist() for r in x]
    return [r.tolist() for r in x]


COLUMN_KINDS = {  # kind: (Spark type of the column, dtype and shape of one example read back)
    "dense vector": ("vector", np.float64, (D,)),
    "sparse vector": ("vector", np.float64, (D,)),
    "dense and sparse vectors": ("vector", np.float64, (D,)),
    "array<float>": ("array<float>", np.float32, (D,)),
    "array<double>": ("array<double>", np.float64, (D,)),
    "array<array<float>>": ("array<array<float>>", np.float32, (3, 4)),
}


def _frame(spark, x, y, kind, partitions=3):
    from pyspark.sql.types import ArrayType, DoubleType, FloatType, StructField, StructType

    spark_type = COLUMN_KINDS[kind][0]
    rows = [(c, float(v)) for c, v in zip(_cells(x, kind), y)]
    if spark_type == "vector":
        df = spark.createDataFrame(rows, ["features", "label"])
    else:
        column = {
            "array<float>": ArrayType(FloatType()),
            "array<double>": ArrayType(DoubleType()),
            "array<array<float>>": ArrayType(ArrayType(FloatType())),
        }[spark_type]
        schema = StructType([StructField("features", column), StructField("label", DoubleType())])
        df = spark.createDataFrame(rows, schema)
    assert df.schema["features"].dataType.simpleString() == spark_type
    return df.repartition(partitions) if partitions != 1 else df.coalesce(1)


def _stacked(rdd):
    per_partition = rdd.glom().collect()
    elements = [e for part in per_partition for e in part]
    x = np.concatenate([e[0] for e in elements])
    y = np.concatenate([e[1] for e in elements])
    return x, y, elements


@pytest.mark.parametrize("kind", sorted(COLUMN_KINDS))
def test_every_column_kind_reads_as_the_row_path_does_many_examples_per_element(spark, data, kind):
    x, y = data
    df = _frame(spark, x, y, kind, partitions=1).cache()
    arrow_x, arrow_y, elements = _stacked(as_rdd(df))
    rows_x, rows_y, _ = _stacked(rows_rdd(df, "features", "label"))
    _, dtype, shape = COLUMN_KINDS[kind]
    assert len(elements) < N / 10  # whole batches, not one element per row
    assert arrow_x.dtype == dtype and arrow_x.shape == (N, *shape)
    np.testing.assert_array_equal(arrow_x, rows_x.reshape(arrow_x.shape))  # the row path, bit for bit
    np.testing.assert_array_equal(arrow_x.reshape(N, D), x.astype(dtype))  # and the source, in order
    np.testing.assert_array_equal(arrow_y, rows_y)
    np.testing.assert_array_equal(arrow_y, y)
    df.unpersist()


def test_order_kept_within_each_partition_across_partitions(spark, data):
    x, y = data
    df = _frame(spark, x, y, "array<double>", partitions=1)
    from pyspark.sql import functions

    df = df.withColumn("i", functions.monotonically_increasing_id())
    df = df.repartition(4, "label").sortWithinPartitions("i")
    rows = df.select("features", "label").rdd.glom().collect()
    arrow = as_rdd(df).glom().collect()
    assert len(arrow) == len(rows) == 4
    for row_part, arrow_part in zip(rows, arrow):
        want = np.array([r[0] for r in row_part]).reshape(-1, D)
        got = np.concatenate([e[0] for e in arrow_part]) if arrow_part else np.zeros((0, D))
        np.testing.assert_array_equal(got, want)


def test_examples_per_element_cuts_an_arrow_batch(spark, data):
    from kit.spark.arrow_data import dataframe_batches

    x, y = data
    df = _frame(spark, x, y, "dense vector", partitions=1)
    sizes = [len(e[1]) for e in dataframe_batches(df, "features", "label", examples_per_element=64).collect()]
    assert sizes == [64, 64, 64, 8]


def _fit(sc, df):
    net = mlp(D, hidden=(8,), n_out=3, updater=Sgd(0.1), seed=0)
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=1, rdd_training_approach="DIRECT")
    SparkNetwork(sc, net, tm).fit(df)
    return net


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("null features", r"column 'features': 1 of \d+ rows are null .*df\.na\.drop\(subset=\['features'\]\)"),
        pytest.param(  # `-m slow` (CI)
            "null label",
            r"column 'label': 1 of \d+ rows are null .*df\.na\.drop\(subset=\['label'\]\)",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_null_row_is_refused_naming_the_column_and_the_printed_remedy_runs(sc, spark, data, fault, said):
    from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType

    x, y = data
    rows = [(r.tolist(), float(v)) for r, v in zip(x, y)]
    rows[5] = (None, rows[5][1]) if fault == "null features" else (rows[5][0], None)
    schema = StructType([StructField("features", ArrayType(DoubleType())), StructField("label", DoubleType())])
    df = spark.createDataFrame(rows, schema).coalesce(1)
    with pytest.raises(SparkTrainingError, match=said) as raised:
        _fit(sc, df)
    remedy = re.search(r"df\.na\.drop\(subset=\['(\w+)'\]\)", str(raised.value))
    fixed = df.na.drop(subset=[remedy.group(1)])  # the remedy as printed
    assert fixed.count() == N - 1
    _fit(sc, fixed)


def test_rows_of_unequal_length_are_refused_naming_the_column(sc, spark, data):
    x, y = data
    rows = [(r.tolist(), float(v)) for r, v in zip(x, y)]
    rows[7] = (rows[7][0][:-1], rows[7][1])
    df = spark.createDataFrame(rows, ["features", "label"]).coalesce(1)
    with pytest.raises(SparkTrainingError, match=r"column 'features': rows hold 11 to 12 values .*row 7 holds 11"):
        _fit(sc, df)


def test_nan_features_are_named_by_their_dataframe_row(sc, spark, data):
    x, y = data
    rows = [(r.tolist(), float(v)) for r, v in zip(x, y)]
    rows[9][0][3] = float("nan")
    df = spark.createDataFrame(rows, ["features", "label"]).coalesce(1)
    with pytest.raises(SparkTrainingError, match=r"partition 0 \(element 9, .*DataFrame row 9 .*NaN"):
        _fit(sc, df)


# ---- one crossing (issue 44 item 3): the rows go from the JVM to Python once ------------------
# Counted in the lineage Spark runs: PySpark's PythonRDDs, and SQL's Python operators (Spark
# names each RDD a plan node makes after the node: MapInArrow, ArrowEvalPython, ...).
PYTHON_NODES = re.compile(r"InArrow|InPandas|EvalPython|Python")


def _python_passes(rdd):
    """The Python passes over the data in `rdd`'s lineage (the JVM's RDDs, walked to the source)."""
    seen, todo, passes = set(), [rdd._jrdd.rdd()], []
    while todo:
        node = todo.pop()
        if node.id() in seen:
            continue
        seen.add(node.id())
        scope = node.scope()
        name = scope.get().name() if scope.isDefined() else ""
        if node.getClass().getSimpleName() == "PythonRDD" or PYTHON_NODES.search(name):
            passes.append(name or "PythonRDD")
        deps = node.dependencies().iterator()
        while deps.hasNext():
            todo.append(deps.next().rdd())
    return passes


def _same_batches(batches):
    yield from batches


def test_the_rows_cross_from_the_jvm_to_python_once(spark, data, tmp_path):
    """A DataFrame read from Parquet (a source in the JVM): kit's elements are one Python pass over
    it. What mapInArrow then DataFrame.rdd makes (the path before) counts two, so the count can fail."""
    x, y = data
    _frame(spark, x, y, "array<double>", partitions=2).write.parquet(str(tmp_path / "frame"))
    df = spark.read.parquet(str(tmp_path / "frame"))
    rdd = as_rdd(df)
    assert _python_passes(rdd) == ["PythonRDD"]
    got_x, got_y, _ = _stacked(rdd)
    want = df.select("features", "label").collect()
    np.testing.assert_array_equal(got_x, np.array([r[0] for r in want]))
    np.testing.assert_array_equal(got_y, np.array([r[1] for r in want]))
    selected = df.select("features", "label")
    twice = selected.mapInArrow(_same_batches, selected.schema).rdd.map(tuple)
    assert sorted(_python_passes(twice)) == ["MapInArrow", "PythonRDD"]
