"""Issue 45, chapters 4 and 5.

Item 3: the folded solutions promised a printout the checks never made ("the check prints which
class kit raises"), and chapter 5's exercise 2 could not be solved from the page. Each exercise
is answered wrong and right through the chapter's own checker and check cell; the right answer is
the one its solution states, worked out here independently (chapter 4's bytes counted on four
simulated devices, not taken from the formula); what a solution says of its check is what the
check does; what a solution uses, the page shows.

Item 5: chapter 5 printed throughput ratios from timings its own table flags. Each cell that prints
a figure computed from a timing runs here on constructed timings, clean and flagged: flagged, every
such figure carries "(flagged)"; clean, none does. And no code cell of chapter 5 prints a timing's
figure without going through one of kit's flagging paths.

Item 6: the d2l table set kit's 0.906 only beside d2l's rounded 0.91. It now names the same-run gap
to PyTorch, from the report's numbers, with what differed between the sides, each claim checked here
against the code it describes (kit's and PyTorch's), and says what the run cannot tell."""

from __future__ import annotations

import math
import re
import statistics
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from _chapter_cells import cell as _cell
from _chapter_cells import cells
from _chapter_cells import run as _run

from kit import measure, prose, reference
from kit.bench.d2l_table import d2l_table, same_run_gap
from kit.core.devices import reset_transfer_stats, set_host_device_count, transfer_stats
from kit.data import ArrayIterator, DataSet, load_digits
from kit.measurement.measure import Timing
from kit.measurement.tables import Table
from kit.nn import Adam, Sgd, mlp
from kit.parallel import InferenceMode, ParallelInference, ParallelWrapper

CH4, CH5 = "04_multi_device_training.ipynb", "05_parallel_inference.ipynb"
SEQ, BAT = InferenceMode.SEQUENTIAL, InferenceMode.BATCHED


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


def _exec(source: str, **names) -> dict:
    """Run a chapter cell's `source` with `names`; its namespace after (what it displayed under "shown")."""
    shown: list[str] = []
    env = {"display": lambda x: shown.append(str(x)), "prose": prose, "measure": measure, **names, "shown": shown}
    exec(compile(source, "<chapter cell>", "exec"), env)
    return env


def _check(chapter: str, capsys, **names) -> str:
    """The chapter's checker and its check cell, run with `names` (the answers among them): what they print."""
    env = {"prose": prose, **names}
    exec(compile(_cell(chapter, "# Exercise checker"), "<checker>", "exec"), env)
    capsys.readouterr()
    exec(compile(_cell(chapter, "# the check of the exercises"), "<check>", "exec"), env)
    return capsys.readouterr().out


# ---------------------------------------------------------------- item 3: chapter 4's exercises


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
    out = _check(CH4, capsys, **CH4_NAMES, **answers)
    for words in said:
        assert words in out, out
    if "not quite" in said[0]:
        assert " ".join(out.split()).count("(the Solutions at the end of the chapter work it out)") == 2


# ---------------------------------------------------------------- item 3: chapter 5's exercises


def _ch5_names() -> dict:
    _, test = load_digits()
    net = mlp(64, hidden=(32,), n_out=10, seed=0)
    source = _cell(CH5, "def load(pi, clients, requests, check=False):")
    env = {"np": np, "threading": threading, "time": time, "net": net, "X": test.features.numpy()}
    exec(compile(source.split("\nwith ParallelInference")[0], "<load>", "exec"), env)  # the chapter's load()
    env["ParallelInference"] = ParallelInference
    exec(compile(_cell(CH5, "ex_limit, ex_clients = 8, 3"), "<answers>", "exec"), env)
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
    out = _check(CH5, capsys, **env)
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
    solution, check = _solution(chapter, n), _cell(chapter, "# the check of the exercises")
    if re.search(r"check[^.]*\bprints?\b", solution):
        assert "print(" in check.split(f'check("exercise {n}"', 1)[1].split("check(", 1)[0]
    assert "the check prints kit" not in solution and "prints which" not in solution


# ---------------------------------------------------------------- item 5: chapter 5's figures carry their flags

BUSY = 0.9  # other processes' share of the CPU: over kit.measure's LOAD_LIMIT
FLAG = measure.FLAGGED  # " (flagged)"


def _timing(name: str, seconds: list[float], number: int = 1, load: float = 0.0) -> Timing:
    return Timing(name, seconds, number, load)


@pytest.mark.parametrize("load", [0.0, BUSY], ids=["clean", "flagged"])
def test_ch5_throughput_ratios_carry_the_flag_of_their_timings(load, capsys):
    modes = (SEQ, BAT)
    per_request = {SEQ: [1 / 4500, 1 / 4600, 1 / 4400], BAT: [1 / 16000, 1 / 15500, 1 / 16500]}
    timing = {m: _timing(m.value, per_request[m], 6400, load) for m in modes}
    sweep_t = {(SEQ, 64): _timing("s", [1.75, 1.8, 1.7]), (BAT, 64): _timing("b", [0.94, 0.95, 0.93])}
    table = {(SEQ, 64): (3665.0,), (BAT, 64): (6797.0,)}
    b64 = 6797.0 / 3665.0
    env = dict(
        modes=modes,
        timing=timing,
        sweep_t=sweep_t,
        table=table,
        per_request=per_request,
        b64_threads=b64,
        InferenceMode=InferenceMode,
        statistics=statistics,
    )
    _run(_cell(CH5, "# the throughput ratios of the two runs"), **env)
    out = capsys.readouterr().out.replace("\n  ", " ")
    ratios = [s / b for s, b in zip(per_request[SEQ], per_request[BAT])]
    flagged = [f"{1 / timing[m].median / table[m, 64][0]:.2f}" for m in modes]
    flagged += [f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}-{max(ratios):.2f}"]
    assert f"threads {b64:.2f} (the ratio" in out  # section 2's timings are clean: its ratio stands
    for figure in flagged:
        assert (figure + FLAG in out) == bool(load), (figure, out)
    assert ("(flagged): computed from a timing kit.measure flagged" in out) == bool(load)


@pytest.mark.parametrize("flagged", [[], ["plan.output (planned)"], ["hand-written NumPy"]])
def test_ch5_forward_ratios_carry_the_flag_of_their_timings(flagged, capsys):
    names = ["net.output (unplanned)", "plan.output (planned)", "hand-written NumPy"]
    tf = {
        n: _timing(n, [s, s * 1.01, s * 0.99], 10_000, BUSY if n in flagged else 0.0)
        for n, s in zip(names, [49e-6, 44e-6, 36e-6])
    }
    _run(_cell(CH5, "# the forwards' medians as ratios"), tf=tf, net=SimpleNamespace(dtype=np.dtype("float32")))
    out = capsys.readouterr().out
    planned, unplanned = 44 / 36, 49 / 36
    assert (f"= {planned:.2f}{FLAG};" in out) == bool(flagged), out
    assert (f"= {unplanned:.2f}{FLAG}" in out) == ("hand-written NumPy" in flagged), out


@pytest.mark.parametrize("others", [0.0, BUSY], ids=["clean", "busy"])
def test_ch5_one_shot_runs_flag_their_figures_when_the_machine_was_busy(others, capsys):
    load_reading = SimpleNamespace(others=others)
    # section 4: the batch-limit table and the sentence under it
    per_limit = {1: (3991.0, 18.84, 1.0), 4: (6381.0, 13.43, 3.9), 16: (7128.0, 14.59, 10.2), 64: (6036.0, 17.03, 10.2)}
    largest = {1: 1, 4: 4, 16: 16, 64: 57}
    names = dict(per_limit=per_limit, largest=largest, limit_load=load_reading, Table=Table)
    env = _exec(_cell(CH5, "# the runs' table"), **names)
    table = env["shown"][0]
    for tput, p99, _ in per_limit.values():
        assert (f"{tput:.0f}{FLAG}" in table and f"{p99:.2f}{FLAG}" in table) == bool(others), table
    assert ("UNRELIABLE" in table) == bool(others)
    sentence = _run(_cell(CH5, "limits = sorted(per_limit)"), **names, limit_figure=env["limit_figure"])[0]
    for _, p99, _ in per_limit.values():
        assert (f"{p99:.2f} ms{FLAG}" in sentence) == bool(others), sentence
    # section 6: INPLACE's one run, printed and in its sentence
    lat = list(np.linspace(0.0001, 0.005, 200))
    inplace = {"inplace_load": load_reading, "lat": lat, "tput": 5073.0, "np": np, "replicas": 2}
    capsys.readouterr()
    env = _exec(_cell(CH5, "# one run: its figures carry the flag"), **inplace)
    printed = capsys.readouterr().out
    p50, p99 = np.percentile(lat, 50) * 1e3, np.percentile(lat, 99) * 1e3
    for figure in ("5073 req/s", f"{p50:.2f} ms", f"{p99:.2f} ms"):
        assert (figure + FLAG in printed) == bool(others), printed
    names = {k: v for k, v in env.items() if k not in ("display", "shown", "__builtins__")}
    said = _run(_cell(CH5, 'display(prose.sentence(\n    f"With 16 clients sharing'), **names)[0]
    assert (f"{p50:.2f} ms{FLAG}" in said and f"{p99:.2f} ms{FLAG}" in said) == bool(others), said


# the names a chapter-5 cell computes a timing's figure from, and the paths that flag such a figure
TIMING_FIGURES = re.compile(
    r"\.median\b|percentile\(|\btput\b|_ratio\b|b64_threads|per_limit\[|table\[|\{seconds|\{s[12]\b"
)
FLAG_PATHS = re.compile(
    r'\["flags"\]|'
    r"flagged_figure|_figure\(|flag_column|compare_timings|no_conclusion|prose\.flags|mark\(|flagged="
)
PRINTS = re.compile(r"\bprint\(|prose\.show\(|prose\.sentence\(|display\(")


@pytest.mark.parametrize("chapter", [CH4, CH5])
def test_no_cell_prints_a_timing_figure_outside_the_flagging_paths(chapter):
    offenders = []
    for i, c in enumerate(cells(chapter)):
        source = "".join(c["source"])
        if c["cell_type"] != "code" or not PRINTS.search(source):
            continue
        printed = [
            line for line in source.splitlines() if TIMING_FIGURES.search(line) and ('f"' in line or "f'" in line)
        ]
        if printed and not FLAG_PATHS.search(source):
            offenders.append(f"cell {i}: {printed[0].strip()[:100]}")
    assert not offenders, "figures from timings printed without kit's flag:\n" + "\n".join(offenders)


# ---------------------------------------------------------------- item 6: the d2l table's same-run gap


def _d2l_runs() -> list[dict]:
    return [r for r in reference.reference_runs() if "pytorch" in r.get("parts", {}).get("d2l", {})]


def test_the_shipped_d2l_table_names_the_same_run_gap_to_pytorch():
    runs = _d2l_runs()
    assert runs, "no shipped reference run with a d2l table"
    for run in runs:
        d, text = run["parts"]["d2l"], d2l_table(run)
        kit_acc = d["kit"]["test_accuracy"]
        for key, label in (("pytorch", "TF32 convolutions"), ("pytorch_fp32", "float32 convolutions")):
            if key in d and d[key].get("kit_side", "kit") == "kit":
                gap = d[key]["test_accuracy"] - kit_acc
                assert f"{gap:.4f} below PyTorch's {d[key]['test_accuracy']:.4f} with {label}" in text
                assert f"({round(gap * 10_000):,} of the 10,000 test examples)" in text
        assert "Not known from this run: which of these differences, if any, makes the gap" in text
        assert not re.search(r"because|caused by|due to|the cause is", text)  # no cause claimed


def _report(kit_acc=0.906, torch_acc=0.9223, fp32_acc=0.9216, init=None, tf32_kit=None) -> dict:
    d = {
        "setup": "ResNet-18 (d2l, 28x28), Fashion-MNIST 60000 train / 10000 test, batch 256, SGD lr 0.1, 10 epoch(s)",
        "kit": {"test_accuracy": kit_acc, "matmuls": "float32"},
    }
    if init is not None:
        d["init"] = init
    if tf32_kit is not None:
        d["kit_tf32"] = {"test_accuracy": tf32_kit, "test_accuracy_per_epoch": [0.9] * 10}
    for key, acc in (("pytorch", torch_acc), ("pytorch_fp32", fp32_acc)):
        if acc is not None:
            d[key] = {
                "test_accuracy": acc,
                **({"kit_side": "kit_tf32" if key == "pytorch" else "kit"} if tf32_kit is not None else {}),
            }
    return d


@pytest.mark.parametrize(
    ("report", "said", "unsaid"),
    [
        (
            _report(),
            [
                "0.0163 below PyTorch's 0.9223",
                "(163 of the 10,000",
                "the gap is there without TF32",
                "predates `kit bench d2l`'s init setting",
            ],
            [],
        ),
        (_report(init="d2l"), ["both drew every convolution and dense weight from d2l's N(0, 0.01)"], ["predates"]),
        (_report(init="default"), ["each library kept its own, kit He-normal"], ["predates"]),
        (_report(kit_acc=0.93), ["0.0077 above PyTorch's 0.9223", "0.0084 above PyTorch's 0.9216"], ["without TF32"]),
        (_report(kit_acc=0.9216, fp32_acc=0.9216), ["level with PyTorch's 0.9216"], ["without TF32"]),
        (_report(fp32_acc=None), ["0.0163 below PyTorch's 0.9223"], ["without TF32", "float32 convolutions ("]),
        (
            _report(tf32_kit=0.915, init="d2l"),
            [
                "kit's 0.9150 with TF32 matmuls is 0.0073 below PyTorch's 0.9223",
                "kit's 0.9060 with float32 matmuls is 0.0156 below PyTorch's 0.9216",
            ],
            [],
        ),
        (_report(torch_acc=None, fp32_acc=None), [], ["In the same run"]),
    ],
    ids=["shipped", "d2l-init", "own-init", "kit-above", "level", "no-fp32-row", "tf32-pairs", "no-pytorch"],
)
def test_the_gap_sentences_follow_the_report(report, said, unsaid):
    text = "\n".join(same_run_gap(report))
    for words in said:
        assert words in text, (words, text)
    for words in unsaid:
        assert words not in text, (words, text)
    if "pytorch" in report:
        assert "Not known from this run" in text and "none was varied on its own" in text


def test_what_the_gap_sentence_says_of_kit_is_kits_code():
    """The sentence's claims about kit's side: BatchNorm's decay 0.9 and eps 1e-5, its running
    variance the biased batch variance; resnet18's own init He-normal convolutions, a Xavier-normal
    dense layer, zero biases; im2col in Conv2D."""
    import inspect

    from kit.nn import BatchNorm, Dense, Network, conv, resnet18

    sig = inspect.signature(BatchNorm)
    assert (sig.parameters["decay"].default, sig.parameters["eps"].default) == (0.9, 1e-5)
    assert inspect.signature(resnet18).parameters["weight_init"].default == "he"
    assert "im2col" in conv.__doc__
    x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
    net = Network([BatchNorm(), Dense(2)], input_shape=(5,), updater=Sgd(1e-9), seed=0)
    net.fit(DataSet(x, np.zeros(6, dtype=np.int64), num_classes=2), epochs=1)  # one training step
    bn = next(layer for layer in net.layers if isinstance(layer, BatchNorm))
    running = bn.params["var"].numpy()
    biased, unbiased = x.var(axis=0, ddof=0), x.var(axis=0, ddof=1)
    assert np.allclose(running, 0.9 + 0.1 * biased, rtol=1e-4)  # the batch's own variance
    assert not np.allclose(running, 0.9 + 0.1 * unbiased, rtol=1e-4)


def test_what_the_gap_sentence_says_of_pytorch_is_pytorchs_code():
    torch = pytest.importorskip("torch")
    from kit.bench.d2l import _torch_model

    bn = torch.nn.BatchNorm2d(3)
    assert (bn.momentum, bn.eps) == (0.1, 1e-5)
    x = torch.randn(4, 3, 2, 2)
    bn.train()
    bn(x)
    unbiased = x.transpose(0, 1).reshape(3, -1).var(dim=1, unbiased=True)
    assert torch.allclose(bn.running_var, 0.9 + 0.1 * unbiased, rtol=1e-5)
    own = _torch_model(torch.device("cpu"), d2l_init=False)
    d2l = _torch_model(torch.device("cpu"), d2l_init=True)
    for module, d2l_module in zip(own.modules(), d2l.modules()):
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            bound = 1 / math.sqrt(module.weight[0].numel())
            assert module.weight.abs().max() <= bound and module.bias.abs().max() <= bound  # U(±1/√fan-in)
            assert module.weight.abs().max() > 0.9 * bound
            assert abs(float(d2l_module.weight.detach().std()) - 0.01) < 0.002  # d2l's N(0, 0.01)
            assert d2l_module.bias.abs().max() <= bound and d2l_module.bias.abs().max() > 0  # left at PyTorch's own
