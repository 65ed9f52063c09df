"""Read 29, ch4 43: the d2l sentence quoted kit's epoch as 4.28 x PyTorch's while the table's
medians give 12.97 / 2.98 = 4.35. The sentence says its basis (the median of the per-epoch ratios,
and over which epochs) and, where the table's medians take other epochs, what they give."""

from __future__ import annotations

import copy
from statistics import median

from kit import reference
from kit.bench.d2l_table import _torch_sentences, d2l_table


def _d2l(epochs: int) -> dict:
    """A d2l part as `_side_entry` writes one: PyTorch's first epoch slow, the ratios from epoch 2 on."""
    kit_s = [13.0 + 0.1 * i for i in range(epochs)]
    torch_s = [4.2] + [3.0] * (epochs - 1)
    steady = slice(1, None) if epochs > 2 else slice(None)
    ratios = [k / t for k, t in zip(kit_s[steady], torch_s[steady])]
    side = {
        "epoch_seconds": torch_s,
        "median_epoch_seconds": median(torch_s),
        "test_accuracy": 0.92,
        "kit_over_this_epoch_ratio": median(ratios),
        "ratio_min_max": [min(ratios), max(ratios)],
    }
    return {"kit": {"median_epoch_seconds": median(kit_s)}, "pytorch": side, "pytorch_fp32": copy.deepcopy(side)}


def test_the_ratio_says_its_epochs_and_what_the_tables_medians_give():
    d = _d2l(10)
    first, second = _torch_sentences(d)[:2]
    assert "the median of the per-epoch ratios over epochs 2-10, each epoch timed against the same epoch" in first
    medians = d["kit"]["median_epoch_seconds"] / d["pytorch"]["median_epoch_seconds"]
    assert f"the table's medians count epoch 1 too, and give {medians:.2f} x" in first
    assert "median of the per-epoch ratios, epochs 2-10" in second and "the table's medians give" in second
    assert "epochs 2 on" not in first + second


def test_two_epochs_take_every_epoch_as_the_table_does():
    first = _torch_sentences(_d2l(2))[0]
    assert "over epochs 1-2" in first and "the table's medians" not in first


def test_the_shipped_run_states_its_basis():
    for run in reference.reference_runs():
        d = run.get("parts", {}).get("d2l")
        if not d or "pytorch" not in d:
            continue
        text = d2l_table(run)
        n = len(d["pytorch"]["epoch_seconds"])
        assert f"over epochs 2-{n}, each epoch timed against the same epoch of the other" in text
        medians = d["kit"]["median_epoch_seconds"] / d["pytorch"]["median_epoch_seconds"]
        assert f"give {medians:.2f} x" in text
