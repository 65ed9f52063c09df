"""Every checked exercise of every chapter is answered wrong, right and not at all through the chapter's
own check cells, the right answer read from the chapter's own folded solution (and worked out here
independently where kit can count it); no solution promises a printout its check does not make, and
what a solution uses, the page shows."""

from __future__ import annotations

import ast
import math
import re
import threading
import time

import numpy as np
import pytest
from _chapter_cells import cell as _cell_starting
from _chapter_cells import cells
from _chapter_cells import cells as _cells
from _chapter_cells import holding as _cell
from _chapter_cells import run_in as _run
from _chapter_cells import scope as _scope
from _chapter_cells import source as _source
from _chapter_cells import words as _words

from kit import prose
from kit.core.devices import reset_transfer_stats, set_host_device_count, transfer_stats
from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import Adam, Sgd, mlp
from kit.parallel import ParallelInference, ParallelWrapper

CH1, CH2, CH3 = "01_arrays_and_backends", "02_workspaces", "03_training_with_workspaces"
CH4, CH5 = "04_multi_device_training.ipynb", "05_parallel_inference.ipynb"


# chapters 1-3


def _solutions(chapter: str) -> dict[int, str]:
    """Each folded solution's text, by exercise number."""
    text = _cell(chapter, "## Solutions", "markdown")
    parts = re.findall(r"<summary>Exercise (\d+)</summary>(.*?)</details>", text, re.S)
    return {int(n): body for n, body in parts}


def _answer(chapter: str, exercise: int):
    """The answer the chapter's folded solution states ("**Answer: `...`.**")."""
    (shown,) = re.findall(r"\*\*Answer: `([^`]+)`\.\*\*", _solutions(chapter)[exercise])
    return ast.literal_eval(shown)


EXERCISES = {
    CH1: (["x = kit.arange(6", "def check(name, answer"], {1: "answer_1", 2: "answer_2"}),
    CH2: (["from kit import AllocationPolicy as A", "def check(name, answer", "first_cycle, ring_bytes ="],
          {1: "answer_1", 2: "answer_2"}),
    CH3: (["def conv_net(mode)", "def check(name, answer"], {1: "answer_1", 2: "answer_2", 4: "answer_4"}),
}  # fmt: skip


def _wrong(right):
    return "WS_ALL_LAYERS_ACT" if isinstance(right, str) else right + 1


@pytest.fixture(scope="module")
def chapter_scopes():
    """Each chapter's names the exercise checks read, made by running the chapter's own cells."""
    from kit.data import ArrayIterator, load_digits
    from kit.nn import mlp

    scopes = {}
    for chapter, (first, _) in EXERCISES.items():
        scope = _scope()
        if chapter == CH3:  # what sections 1 and 4 define before the conv net (the digits, the MLP factory)
            train, _ = load_digits()
            scope.update(train=train, digits_train=train, ArrayIterator=ArrayIterator, mlp=mlp)
        for marker in first:
            source = _cell(chapter, marker)
            if marker == "def conv_net(mode)":  # its definitions: the three modes' training after them is section 3's
                source = source.split("\nrows = {}")[0]
            _run(source, scope)
        scopes[chapter] = scope
    return scopes


def _check(chapter: str, scope: dict, answers: dict) -> dict[int, str]:
    """Run the chapter's hidden exercise check with `answers`: each exercise's line."""
    scope.update(answers)
    printed = _run(_cell(chapter, "# the check of the exercises (hidden in the book)"), scope)
    lines = {}
    for line in _words(printed.replace("\nexercise", "\n\nexercise")).split("exercise ")[1:]:
        n, said = line.split(":", 1)
        lines[int(n)] = said.strip()
    return lines


@pytest.mark.parametrize("chapter", list(EXERCISES))
def test_each_exercise_answered_wrong_right_and_not_at_all(chapter, chapter_scopes):
    scope = chapter_scopes[chapter]
    names = EXERCISES[chapter][1]
    right = {names[n]: _answer(chapter, n) for n in names}
    said = _check(chapter, scope, right)
    assert set(said) == set(names), said
    for n in names:  # the folded solution's answer is the one the check accepts
        assert said[n].startswith(f"correct ({right[names[n]]!r})"), (chapter, n, said[n])
    wrong = {name: _wrong(value) for name, value in right.items()}
    said = _check(chapter, scope, wrong)
    for n in names:  # a wrong answer gets the hint, never the answer
        assert said[n].startswith(f"not quite: you said {wrong[names[n]]!r}. Hint:"), (chapter, n, said[n])
        assert repr(right[names[n]]) not in said[n]
    said = _check(chapter, scope, dict.fromkeys(names.values()))
    assert all(said[n].startswith("not answered yet. Hint:") for n in names), said
    # the checks the solutions' figures rest on (the chapter's `check` cell before its solutions) hold
    checks = [_source(c) for c in _cells(chapter) if "check" in c["metadata"].get("tags", [])]
    facts = [s for s in checks if "solutions below state" in s]
    assert len(facts) == 1
    _check(chapter, scope, right)
    assert _run(facts[0], scope).strip().endswith("checked")


@pytest.mark.parametrize("chapter", [CH1, CH2, CH3])
def test_no_solution_promises_a_printout_and_every_checked_exercise_has_an_answer(chapter):
    solutions = _solutions(chapter)
    exercises = _cell(chapter, "## Exercises", "markdown")
    checked = {int(n) for n in re.findall(r"check\(\"exercise (\d+)\"", _cell(chapter, "# the check of the exercises"))}
    for n, body in solutions.items():
        said = _words(body)
        assert not re.search(r"check\w* prints|prints kit's|printed by the check", said), (chapter, n, said)
        if n in checked:
            _answer(chapter, n)  # stated, and parseable
        else:
            assert "Open" in said and "(Open)" in re.findall(rf"^{n}\. \(Open\)", exercises, re.M)[0], (chapter, n)
    assert checked <= set(solutions)


def test_chapter_1_exercise_2_follows_from_the_rule_section_6_states():
    """Section 6: "once the spacing between neighbouring float16 totals exceeds twice the increment,
    adding the increment changes nothing"; the answer is the first n where the spacing exceeds 6,
    no tie between two neighbours deciding it (ties to even are not shown in the chapter)."""
    rule = _words(_cell(CH1, "## 6. Half precision", "markdown"))
    assert "exceeds twice the increment, adding the increment changes nothing" in rule
    by_rule = next(n for n in range(1, 70000) if float(np.spacing(np.float16(n))) > 2 * 3 and float(np.float16(n)) == n)
    assert by_rule == _answer(CH1, 2) == 8192
    assert "n + 3" in _cell(CH1, "## Exercises", "markdown")


# chapters 4 and 5


def _markdown(chapter: str, starts: str) -> str:
    (text,) = [
        s for c in cells(chapter) if c["cell_type"] == "markdown" and (s := "".join(c["source"])).startswith(starts)
    ]
    return text


def _solution(chapter: str, n: int) -> str:
    text = _markdown(chapter, "## Solutions")
    return text.split(f"<summary>Exercise {n}</summary>", 1)[1].split("</details>", 1)[0]


def _bold(text: str) -> str:
    (answer,) = re.findall(r"\*\*(.+?)\*\*", text)
    return answer


def _check_printed(chapter: str, capsys, **names) -> str:
    """The chapter's checker and its check cell, run with `names` (the answers among them): what they print."""
    env = {"prose": prose, **names}
    exec(compile(_cell_starting(chapter, "# Exercise checker"), "<checker>", "exec"), env)
    capsys.readouterr()
    exec(compile(_cell_starting(chapter, "# the check of the exercises"), "<check>", "exec"), env)
    return capsys.readouterr().out


def _bytes_per_averaging_counted() -> int:
    """Exercise 1 measured: the bytes kit's wrapper moves between four simulated devices for one more
    averaging (two rounds against one, less the extra round's data), with Adam, in float32."""
    rng = np.random.default_rng(0)
    moved = {}
    previous = set_host_device_count(4)
    try:
        for rounds in (1, 2):
            n = 4 * 8 * rounds  # four workers, batches of 8
            data = DataSet(rng.random((n, 784)).astype(np.float32), rng.integers(0, 10, n), num_classes=10)
            data = data.to("cpu:0")
            net = mlp(784, hidden=(512, 256), n_out=10, updater=Adam(1e-3), seed=0, device="cpu:0")
            reset_transfer_stats()
            with ParallelWrapper(
                net, devices=[f"cpu:{i}" for i in range(4)], averaging_frequency=1, prefetch_buffer=0
            ) as pw:
                pw.fit(ArrayIterator(data, 8), epochs=1)
                assert pw.averagings == rounds
            # the data the three other workers were sent: their batches, features and labels
            sent = sum(b.features.nbytes + b.labels.nbytes for i, b in enumerate(ArrayIterator(data, 8)) if i % 4)
            moved[rounds] = sum(nbytes for _, nbytes in transfer_stats().values()) - sent
    finally:
        set_host_device_count(previous)
        reset_transfer_stats()
    return moved[2] - moved[1]


def test_ch4_exercise_1_solution_is_the_bytes_kit_moves_and_the_page_shows_its_p():
    stated = int(_bold(_solution(CH4, 1)).replace(",", ""))
    assert stated == _bytes_per_averaging_counted()
    p = mlp(784, hidden=(512, 256), n_out=10).num_params
    assert f"P = {p:,}".replace(",", "{,}") in _solution(CH4, 1)
    # the page shows that P: section 2's worked example prints it
    (shown,) = [
        c
        for c in cells(CH4)
        if "".join(c["source"]).startswith("from kit.training.compare import predict_epoch_seconds")
    ]
    assert f"parameters P = {p:,}" in "".join("".join(o.get("text", [])) for o in shown["outputs"])


def test_ch4_exercise_2_solution_is_the_averagings_kit_counts():
    solution = _solution(CH4, 2)
    stated = int(_bold(solution).split()[0])
    rounds = math.ceil(128 / 2)  # the solution's reasoning: B / N rounds, one averaging per F, one for the rest
    assert f"$B / N = {rounds}$" in solution and f"= {rounds // 10}$ times" in solution
    assert f"for the {rounds % 10} rounds left over" in solution
    assert stated == rounds // 10 + (rounds % 10 > 0) == 7
    tiny = DataSet(np.zeros((128, 4), dtype=np.float32), np.zeros(128, dtype=np.int64), num_classes=2)
    with ParallelWrapper(
        mlp(4, hidden=(4,), n_out=2, updater=Sgd(0.1), seed=0), workers=2, averaging_frequency=10, prefetch_buffer=0
    ) as pw:
        pw.fit(ArrayIterator(tiny, 1), epochs=1)
        assert pw.averagings == stated


CH4_NAMES = dict(
    mlp=mlp, Adam=Adam, Sgd=Sgd, DataSet=DataSet, np=np, ParallelWrapper=ParallelWrapper, ArrayIterator=ArrayIterator
)


@pytest.mark.parametrize(
    ("answers", "said"),
    [
        ({"answer_1": None, "answer_2": None}, ["exercise 1: not answered yet", "exercise 2: not answered yet"]),
        (
            {"answer_1": 4 * 535_818, "answer_2": 6},
            ["exercise 1: not quite: you said 2143272", "exercise 2: not quite: you said 6"],
        ),
        ({"answer_1": "right", "answer_2": "right"}, ["exercise 1: correct (38578896)", "exercise 2: correct (7)"]),
    ],
    ids=["unanswered", "wrong", "right"],
)
def test_ch4_checks_answer_each_exercise(answers, said, capsys):
    if answers["answer_1"] == "right":  # the solutions' answers
        answers = {
            "answer_1": int(_bold(_solution(CH4, 1)).replace(",", "")),
            "answer_2": int(_bold(_solution(CH4, 2)).split()[0]),
        }
    out = _check_printed(CH4, capsys, **CH4_NAMES, **answers)
    for words in said:
        assert words in out, out
    if "not quite" in said[0]:
        assert " ".join(out.split()).count("(the Solutions at the end of the chapter work it out)") == 2


def _ch5_names() -> dict:
    _, test = load_digits()
    net = mlp(64, hidden=(32,), n_out=10, seed=0)
    source = _cell_starting(CH5, "def load(pi, clients, requests, check=False):")
    env = {"np": np, "threading": threading, "time": time, "net": net, "X": test.features.numpy()}
    exec(compile(source.split("\nwith ParallelInference")[0], "<load>", "exec"), env)  # the chapter's load()
    env["ParallelInference"] = ParallelInference
    exec(compile(_cell_starting(CH5, "ex_limit, ex_clients = 8, 3"), "<answers>", "exec"), env)
    return env


def test_ch5_exercise_2_can_be_tried_on_the_page_and_its_solution_is_what_kit_raises():
    env = _ch5_names()
    with pytest.raises(Exception) as raised:  # what the exercise tells the reader to try
        env["closed"].output(env["X"][0])
    solution = _solution(CH5, 2)
    assert _bold(solution) == type(raised.value).__name__ == "RuntimeError"
    assert f'("{raised.value}")' in solution
    assert "closed.output(X[0])" in _markdown(CH5, "## Exercises")


def test_ch5_exercise_1_solution_is_the_cap_the_cell_sets():
    env = _ch5_names()
    assert int(_bold(_solution(CH5, 1))) == min(env["ex_limit"], env["ex_clients"]) == 3
    assert f"the cell's {env['ex_limit']} and {env['ex_clients']}" in _solution(CH5, 1)


@pytest.mark.parametrize("how", ["unanswered", "wrong", "right", "right, as the class"])
def test_ch5_checks_answer_each_exercise(how, capsys):
    env = _ch5_names()
    right = {"answer_1": int(_bold(_solution(CH5, 1))), "answer_2": _bold(_solution(CH5, 2))}
    answers = {
        "unanswered": {"answer_1": None, "answer_2": None},
        "wrong": {"answer_1": 8, "answer_2": "ValueError"},
        "right": right,
        "right, as the class": {**right, "answer_2": RuntimeError},
    }[how]
    env.update(answers, check=None)
    out = _check_printed(CH5, capsys, **env)
    if how == "unanswered":
        assert "exercise 1: not answered yet" in out and "exercise 2: not answered yet" in out
        assert "merged at most" not in out  # nothing given away before an answer
    elif how == "wrong":
        assert "exercise 1: not quite: you said 8" in out and "exercise 2: not quite: you said 'ValueError'" in out
    else:
        assert "exercise 1: correct (3)" in out and "exercise 2: correct ('RuntimeError')" in out
    if how != "unanswered":  # what solution 1 says the check prints, it prints
        assert re.search(r"the check's server merged at most [123] request\(s\) this time", out), out
        assert "prints the largest batch its server merged" in _solution(CH5, 1)


@pytest.mark.parametrize(("chapter", "n"), [(CH4, 1), (CH4, 2), (CH5, 1), (CH5, 2)])
def test_no_solution_promises_what_its_check_does_not_do(chapter, n):
    """A solution may say the check prints only what the check cell's source prints."""
    solution, check = _solution(chapter, n), _cell_starting(chapter, "# the check of the exercises")
    if re.search(r"check[^.]*\bprints?\b", solution):
        assert "print(" in check.split(f'check("exercise {n}"', 1)[1].split("check(", 1)[0]
    assert "the check prints kit" not in solution and "prints which" not in solution
