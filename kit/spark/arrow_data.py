"""A DataFrame as kit's training data through Apache Arrow: many examples per element, no Python per row.

    >>> import numpy as np, pyarrow as pa
    >>> from kit.spark.arrow_data import column_to_numpy
    >>> column_to_numpy(pa.array([[1.0, 2.0], [3.0, 4.0]]), "features")   # array<double>: (n, width)
    array([[1., 2.],
           [3., 4.]])
    >>> column_to_numpy(pa.array([[1.0], [2.0, 3.0]]), "features")
    Traceback (most recent call last):
    ValueError: column 'features': rows hold 1 to 2 values (row 0 of the batch holds 1, row 1 holds 2); kit needs ...

`dataframe_batches(df, features, label)` reads Spark's own Arrow writer (`Dataset.toArrowBatchRdd`)
in a Python task: the rows cross from the JVM to Python once (mapInArrow would send them back to the
JVM), as record batches of `examples_per_element` rows, each turned into NumPy at once: array
columns (nested too: (n, h, w)) and pyspark.ml Vectors, dense and sparse. The result, kit's RDD format:

    an RDD whose elements are (features ndarray [n, *input_shape], labels ndarray [n] or [n, C])

with n <= `examples_per_element`, in the DataFrame's row order within each partition. Features keep
the column's dtype; scalar labels are checked by kit.labels' rule here, so a bad one is named by its
partition and row. The row-at-a-time path (`rows_rdd`) is kept for PySpark without pyarrow.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kit.data.labels import class_indices
from kit.spark.elements import BadElementError, partition_error

__all__ = ["EXAMPLES_PER_ELEMENT", "arrow_batch_rdd", "arrow_missing", "column_to_numpy", "dataframe_batches"]

EXAMPLES_PER_ELEMENT = 1024
VECTOR_FIELDS = ("type", "size", "indices", "values")  # MLlib's VectorUDT.sqlType, as Arrow carries it


def arrow_missing() -> str | None:
    """Why the Arrow path cannot run here (pyarrow not importable), or None."""
    try:
        import pyarrow  # noqa: F401
    except ImportError as exc:
        return f"pyarrow is not importable ({exc})"
    return None


def _is_vector(t: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_struct(t) and tuple(t.field(i).name for i in range(t.num_fields)) == VECTOR_FIELDS


def _is_list(t: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _refuse_nulls(array: Any, name: str) -> None:
    if array.null_count:
        first = int(np.flatnonzero(~np.asarray(array.is_valid()))[0])
        raise ValueError(
            f"column {name!r}: {array.null_count} of {len(array)} rows are null (row {first} of this batch is); "
            f"drop them first: df.na.drop(subset=[{name!r}])"
        )


def _lengths(array: Any) -> np.ndarray:
    import pyarrow as pa

    if pa.types.is_fixed_size_list(array.type):
        return np.full(len(array), array.type.list_size, np.int64)
    return np.diff(np.asarray(array.offsets, dtype=np.int64))


def _same_width(lengths: np.ndarray, name: str) -> int:
    if lengths.size and lengths.min() != lengths.max():
        odd = int(np.flatnonzero(lengths != lengths[0])[0])
        raise ValueError(
            f"column {name!r}: rows hold {lengths.min()} to {lengths.max()} values (row 0 of the batch holds "
            f"{lengths[0]}, row {odd} holds {lengths[odd]}); kit needs the same number in every row (one input shape)"
        )
    return int(lengths[0]) if lengths.size else 0


def _lists_to_numpy(array: Any, name: str) -> np.ndarray:
    """array<...array<number>>: (n, w1, w2, ...), every row the same shape."""
    shape = [len(array)]
    while _is_list(array.type):
        _refuse_nulls(array, name)
        shape.append(_same_width(_lengths(array), name))
        array = array.flatten()  # the child values of this (possibly sliced) array only
    _refuse_nulls(array, name)
    return _numbers(array, name).reshape(shape)


def _numbers(array: Any, name: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    t = array.type
    if pa.types.is_decimal(t):
        array = pc.cast(array, pa.float64())
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        raise TypeError(f"column {name!r} holds {t}; kit reads numbers, arrays of numbers, or ml Vectors")
    return array.to_numpy(zero_copy_only=False)


def _vectors_to_numpy(array: Any, name: str) -> np.ndarray:
    """MLlib Vectors (type 1 dense: values; type 0 sparse: size, indices, values) as (n, size) float64."""
    import pyarrow.compute as pc

    _refuse_nulls(array, name)
    kind, size, indices, values = array.flatten()  # flatten(): the children with this array's offset applied
    dense = np.asarray(kind.to_numpy(zero_copy_only=False)) == 1
    lengths = _lengths(values)
    sizes = np.asarray(pc.fill_null(size, 0).to_numpy(zero_copy_only=False), np.int64)
    width = _same_width(np.where(dense, lengths, sizes), name)
    flat = values.flatten().to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    n = len(array)
    if dense.all():
        return flat.reshape(n, width)
    out = np.zeros((n, width), np.float64)
    starts = np.asarray(values.offsets, np.int64)[:-1] if len(values) else np.zeros(0, np.int64)
    rows = np.repeat(np.arange(n), lengths)
    columns = np.arange(flat.size) - np.repeat(starts - (starts[0] if n else 0), lengths)
    sparse_values = np.repeat(~dense, lengths)
    columns[sparse_values] = indices.flatten().to_numpy(zero_copy_only=False)
    out[rows, columns] = flat
    return out


def column_to_numpy(array: Any, name: str) -> np.ndarray:
    """One Arrow column of n rows as a NumPy array with n first: numbers (n,), arrays (n, w, ...),
    ml Vectors (n, size). Nulls and rows of unequal length are refused naming the column."""
    if hasattr(array, "combine_chunks"):  # a ChunkedArray (a Table's column)
        array = array.combine_chunks()
    if _is_vector(array.type):
        return _vectors_to_numpy(array, name)
    if _is_list(array.type):
        return _lists_to_numpy(array, name)
    _refuse_nulls(array, name)
    return _numbers(array, name)


def _check_rows(x: np.ndarray, y: np.ndarray, names: tuple[str, str], partition: int, first_row: int) -> None:
    """Finite features and scalar labels by kit.labels' rule, a bad one named by its partition and row."""
    features, label = names
    finite = np.isfinite(x.reshape(len(x), -1)).all(axis=1) if x.dtype.kind == "f" else np.ones(len(x), bool)
    if not finite.all():
        row = first_row + int(np.flatnonzero(~finite)[0])
        message = f"DataFrame row {row} of the partition: features (column {features!r}) contain NaN or infinity"
        raise BadElementError((partition, row), message)
    if y.ndim != 1 or y.dtype.kind == "b":
        return  # one-hot or probability rows: the DataSet that batches them checks them
    try:
        class_indices(y)
    except ValueError:
        row = next(r for r in range(len(y)) if _label_error(y[r : r + 1]))
        message = _label_error(y[row : row + 1]).replace(" at index 0", "")
        where = f"DataFrame row {first_row + row} of the partition, column {label!r}"
        raise BadElementError((partition, first_row + row), f"{where}: {message}") from None


def _label_error(y: np.ndarray) -> str:
    """kit.labels' refusal of these labels, or "" where they pass."""
    try:
        class_indices(y)
    except ValueError as exc:
        return str(exc)
    return ""


def read_task(schema: Any, names: tuple[str, str], examples_per_element: int) -> Any:
    """On an executor: the partition's Arrow record batches (IPC bytes, as the JVM wrote them) in,
    (features [n, ...], labels [n, ...]) pairs out, n <= `examples_per_element`."""

    def run(partition: int, batches: Iterator[bytes]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        import pyarrow as pa

        row = 0
        try:
            for message in batches:
                batch = pa.ipc.read_record_batch(pa.py_buffer(message), schema)
                x = column_to_numpy(batch.column(0), names[0])
                y = column_to_numpy(batch.column(1), names[1])
                _check_rows(x, y, names, partition, row)
                row += len(x)
                for start in range(0, len(x), examples_per_element):
                    yield x[start : start + examples_per_element], y[start : start + examples_per_element]
        except Exception as exc:
            raise partition_error(partition, "reading the DataFrame", exc) from exc

    return run


def arrow_batch_rdd(selected: Any, rows_per_batch: int) -> Any:
    """The JVM RDD of `selected`'s rows as Arrow record batches (Spark's Dataset.toArrowBatchRdd,
    what collect-as-Arrow uses: `rows_per_batch` rows a batch where this Spark takes the number,
    else spark.sql.execution.arrow.maxRecordsPerBatch)."""
    from py4j.protocol import Py4JError

    zone = selected.sparkSession.conf.get("spark.sql.session.timeZone")
    try:
        return selected._jdf.toArrowBatchRdd(rows_per_batch, zone, False, False)
    except Py4JError:  # a Spark without the four-argument form: the session's batch size
        return selected._jdf.toArrowBatchRdd()


def dataframe_batches(df: Any, features: str, label: str, examples_per_element: int = EXAMPLES_PER_ELEMENT) -> Any:
    """The RDD of (features [n, ...], labels [n, ...]) NumPy pairs, read column-wise through Arrow
    (the columns already checked on the driver by kit.spark.rdd_data.dataframe_columns). The rows
    cross from the JVM to Python once: the JVM writes Arrow record batches and the Python tasks
    read them (not mapInArrow, whose output would go back to the JVM and cross again)."""
    from pyspark import RDD
    from pyspark.serializers import NoOpSerializer
    from pyspark.sql.pandas.types import to_arrow_schema

    selected = df.select(features, label)
    schema = to_arrow_schema(selected.schema)  # the batches carry no schema: the JVM's, from the same types
    sc = df.sparkSession.sparkContext
    batches = RDD(arrow_batch_rdd(selected, examples_per_element).toJavaRDD(), sc, NoOpSerializer())
    return batches.mapPartitionsWithIndex(read_task(schema, (features, label), examples_per_element), True)
