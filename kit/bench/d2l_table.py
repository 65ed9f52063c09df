"""The d2l table of a reference run (`kit/data/reference_runs/*.json`), as `python -m kit bench d2l`
(kit.bench.d2l) measured it: each side's median epoch, test accuracy and device memory, and the
sentences that read them, every number taken from the report (`d2l_table` as text,
`d2l_result_table` as a `kit.tables.Table`).

Beside d2l's rounded figure, kit's accuracy is set against PyTorch's in the same run (`same_run_gap`),
with what differed between the two sides as `kit bench d2l`'s code has them (initial weights, batch
order, BatchNorm's running variance, how the convolutions sum) and what the run cannot say: one run
a side, nothing varied alone, so no cause of the gap is known from it.
"""

from __future__ import annotations

import re
from typing import Any

from kit.measurement import measure, tables
from kit.measurement.reference_runs import run_label

__all__ = ["ACCURACY_GOAL", "D2L_ROUNDING", "EPOCH_RATIO_GOAL", "d2l_result_table", "d2l_table", "same_run_gap"]

EPOCH_RATIO_GOAL = 1.5  # the goal: kit's epoch time at most 1.5 x PyTorch's on the same device
ACCURACY_GOAL = 0.91  # d2l reports about 0.91-0.92 after 10 epochs
D2L_ROUNDING = 0.005  # d2l gives its accuracy to two decimals: a figure within this of the goal rounds to it


def _gb(n: Any) -> str:
    return f"{n / 1e9:.1f} GB" if isinstance(n, (int, float)) else "—"


_KIT_ROWS = {"kit": "float32 matmuls", "kit_tf32": "TF32 matmuls"}


def _accuracy_range(side: dict[str, Any]) -> str:
    """The last half of the epochs' test accuracies, lowest to highest, where the report has them."""
    per = side.get("test_accuracy_per_epoch")
    if not per or len(per) < 4:
        return ""
    tail = per[len(per) // 2 :]
    return f" (epochs {len(per) - len(tail) + 1}-{len(per)}: {min(tail):.4f}-{max(tail):.4f})"


def d2l_table(report: dict[str, Any]) -> str:
    """The d2l table of one reference run (`kit/data/reference_runs/*.json`), with the sentences
    that read it, every number taken from the report."""
    parts = _d2l_parts(report)
    if isinstance(parts, str):
        return parts
    title, head, cells, text = parts
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(4)]
    lines = [*title, ""]
    lines += [" | ".join(v.ljust(w) for v, w in zip(r, widths)) for r in [head, *cells]]
    lines.append("-" * len(lines[-1]))
    return "\n".join(lines + text)


def d2l_result_table(report: dict[str, Any]) -> tables.Table | str:
    """`d2l_table` as a `kit.tables.Table` (HTML in a notebook: a wide table scrolls in its box
    instead of wrapping), the sentences as notes under it; the same text where there is no table."""
    parts = _d2l_parts(report)
    if isinstance(parts, str):
        return parts
    title, head, cells, text = parts
    columns = ["run", *head[1:]]
    return tables.Table(columns, [list(c) for c in cells], text, " ".join(title), text_columns=["run", "GPU memory"])


def _d2l_parts(report: dict[str, Any]) -> tuple[list[str], tuple[str, ...], list[tuple[str, ...]], list[str]] | str:
    """The table's title, head, cells and sentences, or a line saying the run has no d2l table."""
    d = report.get("parts", {}).get("d2l")
    if not d or "kit" not in d:
        return f"{run_label(report)}: no d2l table in this run"
    head = ("", "epoch, median s", "test accuracy", "GPU memory")
    cells = [(n, f"{s['median_epoch_seconds']:.2f}", f"{s['test_accuracy']:.4f}", m) for n, s, m in _d2l_rows(d)]
    title = [f"{d['setup']}", f"on {run_label(report)}"]
    text = _kit_sentences(d) + same_run_gap(d) + _torch_sentences(d) + _several_device_rows(report)
    return title, head, cells, text


def _d2l_rows(d: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """Each side's label, its part of the report, and the GPU memory it held."""
    rows = []
    for key, label in _KIT_ROWS.items():
        if key in d:
            pool = _gb(d[key].get("device_pool_bytes")) + " held by CuPy's pool"
            rows.append((f"kit (CuPy; {label})", d[key], pool))
    for key, label in (("pytorch", "TF32 convolutions, its default"), ("pytorch_fp32", "float32 convolutions")):
        if key in d:
            side = d[key]
            version = side["version"].split("+")[0]
            rows.append(
                (f"PyTorch {version} ({label})", side, _gb(side.get("peak_allocated_bytes")) + " peak allocated")
            )
    return rows


def _kit_sentences(d: dict[str, Any]) -> list[str]:
    """One sentence for each kit side: its last test accuracy against d2l's."""
    text = []
    for key, label in _KIT_ROWS.items():
        if key in d:
            acc = d[key]["test_accuracy"]
            reach = "reaches" if acc >= ACCURACY_GOAL else "falls short of"
            gap = ACCURACY_GOAL - acc
            rounding = (
                f" by {gap:.4f}, less than d2l's own rounding (it gives about 0.91-0.92, to two decimals): "
                "a shortfall this size is not a difference this one run can show"
                if 0 < gap < D2L_ROUNDING
                else ""
            )
            text.append(
                f"kit's test accuracy with {label} after the last epoch, {acc:.4f}, {reach} d2l's {ACCURACY_GOAL}"
                f"{rounding}{_accuracy_range(d[key])}."
            )
    return text


_TORCH_ROWS = {"pytorch": "TF32 convolutions", "pytorch_fp32": "float32 convolutions"}
# each library's own initial weights, as kit's zoo.resnet18 (weight_init='he') and PyTorch's
# Conv2d/Linear.reset_parameters draw them
_OWN_INIT = (
    "kit He-normal convolutions, N(0, 2/fan-in), a Xavier-normal dense layer and zero biases, PyTorch "
    "U(±1/√fan-in) weights and biases (Kaiming-uniform with a = √5)"
)


def _init_words(d: dict[str, Any]) -> str:
    """The initial weights both sides started from, as the report records them (`init`), or, for a
    report from before `kit bench d2l` recorded it, as the code of that time drew them."""
    init = d.get("init")
    if init == "d2l":
        return (
            "both drew every convolution and dense weight from d2l's N(0, 0.01), each from its own generator, the "
            "same distribution but not the same numbers; the biases, which d2l's recipe leaves alone, start at zero "
            "in kit and at PyTorch's U(±1/√fan-in)"
        )
    if init == "default":
        return f"each library kept its own, {_OWN_INIT}"
    return (
        "this report names none, as it predates `kit bench d2l`'s init setting, and each library then kept its "
        f"own, {_OWN_INIT}, rather than d2l's N(0, 0.01)"
    )


def _recipe(d: dict[str, Any]) -> str:
    """'SGD with lr 0.1 on batches of 256', from the report's setup line ('SGD' where it says neither)."""
    found = re.search(r"batch (\d+), SGD lr ([\d.e-]+)", d.get("setup", ""))
    return f"SGD with lr {found.group(2)} on batches of {found.group(1)}" if found else "SGD"


def same_run_gap(d: dict[str, Any]) -> list[str]:
    """kit's test accuracy against PyTorch's in the same run (each PyTorch row against the kit row it
    is timed against), in accuracy and in test examples; what differed between the two sides, as
    `kit bench d2l`'s code has them; and what this one run cannot tell. Empty where the run has no
    PyTorch row."""
    paired: dict[str, list[str]] = {}  # kit side -> the PyTorch rows set against it
    for key in _TORCH_ROWS:
        if key in d:
            side = d[key].get("kit_side", "kit")
            paired.setdefault(side if side in d else "kit", []).append(key)
    if not paired:
        return []
    found = re.search(r"(\d+) test", d.get("setup", ""))
    n_test = int(found.group(1)) if found else 0
    clauses = []
    for side, keys in paired.items():
        acc = d[side]["test_accuracy"]
        against = []
        for key in keys:
            gap = d[key]["test_accuracy"] - acc
            words = "level with" if not gap else f"{abs(gap):.4f} {'below' if gap > 0 else 'above'}"
            examples = f" ({round(abs(gap) * n_test):,} of the {n_test:,} test examples)" if n_test and gap else ""
            against.append(f"{words} PyTorch's {d[key]['test_accuracy']:.4f} with {_TORCH_ROWS[key]}{examples}")
        clauses.append(f"kit's {acc:.4f} with {_KIT_ROWS[side]} is " + " and ".join(against))
    text = ["In the same run, " + "; ".join(clauses) + "."]
    if "pytorch" in d and "pytorch_fp32" in d and "pytorch_fp32" in paired.get("kit", []):
        fp32_gap = d["pytorch_fp32"]["test_accuracy"] - d["kit"]["test_accuracy"]
        step = abs(d["pytorch"]["test_accuracy"] - d["pytorch_fp32"]["test_accuracy"])
        if fp32_gap > step:
            text.append(
                f"With float32 arithmetic on both sides the gap is {fp32_gap:.4f}, and PyTorch's own TF32 and "
                f"float32 rows are {step:.4f} apart: the gap is there without TF32."
            )
    text += [
        "What differed between the two sides, as `kit bench d2l`'s code has them. The initial weights: "
        + _init_words(d)
        + ". The batches: each library shuffled the same examples with its own generator. The running variance "
        "BatchNorm keeps for testing: the batch variance in kit, the unbiased one in PyTorch, n/(n-1) times it for a "
        "channel's n values in a batch (momentum 0.1, kit's decay 0.9, and eps 1e-5 on both). The order a "
        "convolution sums in: im2col and CuPy's matrix products in kit, cuDNN's own algorithms in PyTorch.",
        f"The same on both sides: the network layer for layer, {_recipe(d)} and neither momentum nor weight decay, "
        "the mean cross-entropy, the same arrays scaled to [0, 1] with no augmentation, and testing with the "
        "running statistics.",
    ]
    unknown = (
        "Not known from this run: which of these differences, if any, makes the gap (none was varied on its own), "
        "nor how far another seed or batch order would move either accuracy (one run a side); the report keeps "
        "no per-example results, so the two models cannot be compared example by example (McNemar)"
    )
    if any("test_accuracy_per_epoch" not in d[side] for side in paired):
        unknown += ", nor kit's accuracy after each epoch"
    text.append(unknown + ".")
    return text


def _ratio_basis(d: dict[str, Any], p: dict[str, Any], first: bool) -> tuple[str, str]:
    """Which epochs kit's ratio to a PyTorch side is the median of (`_side_entry` pairs each epoch
    with the same epoch, and leaves the first out when there are more than two), and, where that is
    not every epoch, the ratio of the table's medians, which take every epoch ("" where they agree)."""
    epochs = len(p.get("epoch_seconds") or [])
    if not epochs:  # an older report: its ratios were taken from epoch 2 on
        return "epochs 2 on", ""
    start = 2 if epochs > 2 else 1
    span = f"epochs {start}-{epochs}" if epochs > start else f"epoch {epochs}"
    if first:
        basis = f"the median of the per-epoch ratios over {span}, each epoch timed against the same epoch of the other"
    else:
        basis = f"median of the per-epoch ratios, {span}"
    kit_side = d.get(p.get("kit_side", "kit"), {})
    if start == 1 or "median_epoch_seconds" not in kit_side:
        return basis, ""
    of_medians = kit_side["median_epoch_seconds"] / p["median_epoch_seconds"]
    if first:
        return basis, f"; the table's medians count epoch 1 too, and give {of_medians:.2f} x"
    return basis, f"; the table's medians give {of_medians:.2f} x"


def _torch_sentences(d: dict[str, Any]) -> list[str]:
    """One sentence for each PyTorch side: its accuracy and kit's epoch time over its own, with the
    epochs that ratio is taken over (the first sentence says how, the next one only which)."""
    text = []
    for key, label in (("pytorch", "with its defaults"), ("pytorch_fp32", "with float32 convolutions")):
        if key not in d:
            continue
        p = d[key]
        r = p["kit_over_this_epoch_ratio"]
        kit_label = _KIT_ROWS[p.get("kit_side", "kit")]
        lo, hi = p["ratio_min_max"]
        basis, medians = _ratio_basis(d, p, first=not text or key == "pytorch")
        sentence = (
            f"PyTorch {label} reached {p['test_accuracy']:.4f}{_accuracy_range(p)}; kit's epoch with {kit_label} "
            f"took {r:.2f} x its epoch ({basis}, range {lo:.2f}-{hi:.2f} x{medians}"
        )
        if key == "pytorch":
            sentence += f"; goal <= {EPOCH_RATIO_GOAL} x: {measure.goal_verdict(r, '<=', EPOCH_RATIO_GOAL, (lo, hi))}"
        text.append(sentence + ").")
    if "pytorch" in d and "pytorch_fp32" in d and "kit_tf32" not in d:
        text.append(
            "The gap between PyTorch's two rows is what TF32 on the tensor cores buys it here; kit's CuPy matmuls "
            "ran in float32 in this run."
        )
    return text


def _several_device_rows(report: dict[str, Any]) -> list[str]:
    """The rows for more than one device, from the run's `kit bench parallel`, labelled for what they are."""
    par = report.get("parts", {}).get("benchmarks", {}).get("parallel", {}).get("result")
    if not par:
        return []
    rows = {r["case"]: r for r in par["rows"]}
    two = next((r for c, r in rows.items() if c.endswith(", 2 workers")), None)
    host = next((r for c, r in rows.items() if c.endswith(", 2 simulated host devices")), None)
    gpus = report.get("machine", {}).get("gpu_count", 1)
    if gpus > 1 or two is None or host is None:
        return []
    mode = "quick mode, " if report["parts"]["benchmarks"]["parallel"].get("quick") else ""
    return [
        f"This run had {gpus} GPU, so there is no 2-GPU row: the several-device figures are `kit bench parallel`'s "
        f"({mode}an MLP, not this ResNet): 2 workers on two logical slots of the one GPU ran at "
        f"{two['speedup_vs_1']:.2f} x one worker's samples/s, and 2 simulated host devices (the CPU) at "
        f"{host['speedup_vs_1']:.2f} x."
    ]
