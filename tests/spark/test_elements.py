"""kit.spark.elements and the other executor tasks: a task is a generator over a partition, and
Spark may close it before its end (a `take`, a cancelled job, a lost sibling in a barrier stage).
Closing must stop it quietly: a task that wraps every exception into its PartitionError must not
wrap GeneratorExit, or Python reports "Exception ignored" and the close raises."""

import ast
import pathlib
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from kit.nn import mlp
from kit.spark import elements as el
from kit.spark.executor_eval import eval_task

KIT_SPARK = pathlib.Path(el.__file__).parent
RNG = np.random.default_rng(5)
X, Y = RNG.random((12, 4)).astype(np.float32), RNG.integers(0, 3, 12)
TAGGED = [((0, i), (X[i : i + 2], Y[i : i + 2])) for i in range(0, 12, 2)]  # (source, element)
BATCHES = [(X[i : i + 2], np.eye(3, dtype=np.float32)[Y[i : i + 2]]) for i in range(0, 12, 2)]


def _eval(_tmp):
    net = mlp(4, hidden=(5,), n_out=3, seed=2)
    return eval_task(net.configuration.to_json(), SimpleNamespace(value=net.params().numpy()), ("score",), 4, 3), [
        (X, Y)
    ]


TASKS = {
    "count_examples": lambda _tmp: (el.count_examples, TAGGED),
    "cut_task": lambda _tmp: (el.cut_task(2, 3, None), TAGGED),
    "count_task": lambda _tmp: (el.count_task, BATCHES),
    "round_records": lambda _tmp: (el.round_records(1, 6), BATCHES),
    "export_records": lambda _tmp: (el.export_records(1, 6), BATCHES),
    "export_task": lambda tmp: (el.export_task(str(tmp), 1), BATCHES),
    "eval_task": _eval,
}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_task_closed_after_its_first_result_stops_quietly(name, tmp_path):
    task, data = TASKS[name](tmp_path)
    gen = task(0, iter(data))
    assert next(gen) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gen.close()  # raised PartitionError("... GeneratorExit") when the task caught BaseException
    with pytest.raises(StopIteration):
        next(gen)


def _failing(data):
    yield from data[:1]
    raise OSError("the disk went away")


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_task_whose_input_fails_still_names_its_partition(name, tmp_path):
    task, data = TASKS[name](tmp_path)
    with pytest.raises(el.PartitionError, match=r"partition 0 .*OSError: the disk went away"):
        list(task(0, _failing(data)))


def _yielding_functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            own = [n for n in ast.walk(node) if isinstance(n, (ast.Yield, ast.YieldFrom))]
            if own:
                yield node


def _wraps_base_exception(handler: ast.ExceptHandler) -> bool:
    """A handler of BaseException (or a bare except) that does not simply re-raise what it caught."""
    caught = handler.type
    names = [caught] if not isinstance(caught, ast.Tuple) else caught.elts
    broad = caught is None or any(isinstance(n, ast.Name) and n.id == "BaseException" for n in names)
    reraises = any(isinstance(n, ast.Raise) and n.exc is None for n in ast.walk(handler))
    return broad and not reraises


def test_no_generator_in_kit_spark_wraps_generatorexit():
    found = []
    for path in sorted(KIT_SPARK.glob("*.py")):
        for fn in _yielding_functions(ast.parse(path.read_text())):
            for node in ast.walk(fn):
                if isinstance(node, ast.Try) and any(
                    isinstance(n, (ast.Yield, ast.YieldFrom)) for stmt in node.body for n in ast.walk(stmt)
                ):
                    found += [f"{path.name}:{h.lineno}" for h in node.handlers if _wraps_base_exception(h)]
    assert found == [], f"catch Exception, not BaseException, around a yield: {found}"


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        (
            "def f():\n    try:\n        yield 1\n    except BaseException as e:\n        raise ValueError() from e",
            True,
        ),
        ("def f():\n    try:\n        yield 1\n    except:\n        raise ValueError()", True),
        ("def f():\n    try:\n        yield 1\n    except Exception as e:\n        raise ValueError() from e", False),
        ("def f():\n    try:\n        yield 1\n    except BaseException:\n        cleanup()\n        raise", False),
    ],
)
def test_the_rule_tells_a_wrapping_handler_from_a_harmless_one(source, flagged):
    (fn,) = _yielding_functions(ast.parse(source))
    (node,) = [n for n in ast.walk(fn) if isinstance(n, ast.Try)]
    assert _wraps_base_exception(node.handlers[0]) is flagged
