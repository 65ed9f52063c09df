"""A reference run's physical limits: device-to-device copy and matmul throughput, raw CuPy and
through kit, beside the datasheet's (`physical_limits_table`), and what they say of kit's wrapper
on large operations (`physical_limits_sentence`). `scripts/gpu-check` measures them with CUDA
events; kit.reference shows them beside your machine's figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kit.measurement import tables
from kit.measurement.reference_runs import run_label

__all__ = ["COPY_UNLIKE", "NOT_INTERLEAVED", "physical_limits_sentence", "physical_limits_table"]

_LIMITS = (  # (part key, what it measures) in the order the table shows them
    ("d2d_copy_gb_s", "device-to-device copy, GB/s"),
    ("matmul_float32_tflops", "float32 matmul {size}^3, TFLOP/s"),
    ("matmul_float16_tflops", "float16 matmul {size}^3, TFLOP/s"),
)


# why a run's kit and CuPy copy figures are not one operation: reports written before gpu-check
# timed CuPy's a.copy() against kit's dup, interleaved ("cupy_copy_gb_s")
COPY_UNLIKE = (
    "not like for like in this run: CuPy's figure copies into an array allocated beforehand, kit's dup "
    "allocates its result and then copies, and the two were timed one after the other"
)


NOT_INTERLEAVED = "the same call both ways, but timed one after the other, not interleaved"


@dataclass
class _Limit:
    what: str
    cupy: float  # CuPy's median beside the datasheet
    kit: float
    against: float  # CuPy's median on the operation kit's figure is compared with
    cupy_range: tuple[float, float]
    kit_range: tuple[float, float]
    unlike: str = ""  # why kit's figure and CuPy's are not the same operation ("" when they are)
    sequential: bool = False  # timed one after the other rather than interleaved


def _limit_figures(p: dict[str, Any]) -> list[_Limit]:
    """Each limit from the part, with whether its kit and CuPy figures measure the same operation,
    timed interleaved (the report says so with "interleaved"; older reports did neither for the copy)."""
    out = []
    sequential = not p.get("interleaved", False)
    for key, what in _LIMITS:
        m = p[key]
        if key == "d2d_copy_gb_s":  # the copy: CuPy's figures in one block, kit's in another
            k, same = p["kit_dup_gb_s"], p.get("cupy_copy_gb_s")
            c = same or m
            out.append(_Limit(what, m["median"], k["median"], c["median"], (c["min"], c["max"]),
                              (k["min"], k["max"]), "" if same else COPY_UNLIKE, sequential))  # fmt: skip
        else:
            out.append(
                _Limit(what.format(size=m["size"]), m["cupy_median"], m["kit_median"], m["cupy_median"],
                       tuple(m["cupy_min_max"]), tuple(m["kit_min_max"]), "", sequential)
            )  # fmt: skip
    return out


def _fig(value: float) -> str:
    """A throughput as the limits table prints it: whole GB/s above 1,000, one decimal below."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.1f}"


def physical_limits_table(report: dict[str, Any]) -> tables.Table | str:
    """A reference run's device-to-device copy and matmul figures, raw CuPy and through kit, beside
    the datasheet's (from the report; `scripts/gpu-check` measures them with CUDA events), as a
    `kit.tables.Table` (HTML in a notebook, text in a terminal); a sentence where the run has none."""
    p = report.get("parts", {}).get("physical_limits")
    if not p or "d2d_copy_gb_s" not in p:
        return f"{run_label(report)}: no physical limits measured in this run"
    sheet = p.get("datasheet") or {}

    def share(value: float, peak: float | None) -> str:
        return f"{value / peak:.0%} of {peak:g}" if peak else "no datasheet figure"

    peaks = (
        (sheet.get("hbm_tb_s"), 1e3, " TB/s"),
        (sheet.get("fp32_tflops"), 1.0, ""),
        (sheet.get("fp16_tensor_tflops"), 1.0, " (dense tensor cores)"),
    )
    rows, notes = [], []
    for lim, (peak, scale, unit) in zip(_limit_figures(p), peaks):
        against = share(lim.cupy / scale, peak) + unit if peak else share(lim.cupy, None)
        shown = not (lim.unlike or lim.sequential)  # a ratio only of one operation, timed in turn
        ratio = f"{lim.kit / lim.against:.1%}" if shown else "—"  # the note says why
        rows.append([lim.what, _fig(lim.cupy), _fig(lim.kit), ratio, against])
        if lim.unlike:
            notes.append(f"{lim.what.split(',')[0]}: {lim.unlike}, so kit / CuPy is not shown.")
        elif lim.sequential:
            notes.append(f"{lim.what.split(',')[0]}: {NOT_INTERLEAVED}, so kit / CuPy is not shown.")
        elif lim.against != lim.cupy:
            notes.append(f"{lim.what.split(',')[0]}: kit / CuPy sets kit's dup beside CuPy's a.copy(), "
                         f"{_fig(lim.against)} GB/s (both allocate and copy, interleaved).")  # fmt: skip
    sheet_column = "CuPy / datasheet" + (f" ({sheet['form']})" if sheet else "")
    return tables.Table(
        ["measured", "CuPy", "kit", "kit / CuPy", sheet_column],
        rows,
        notes=[
            "CuPy: the raw CuPy call; kit: the same through kit; medians. A copy's GB/s counts the bytes "
            "read and the bytes written.",
            *notes,
        ],
        title=f"on {run_label(report)}: {p['method']}",
        text_columns=["measured", sheet_column],
    )


def physical_limits_sentence(report: dict[str, Any]) -> str:
    """What the run's physical limits say of kit's wrapper on large operations, one clause a limit:
    kit's median as a share of raw CuPy's, and whether the two ranges of repeats overlap (then the
    run shows no difference) or lie apart (then it does, in that direction). "" where the run has
    no physical limits."""
    p = report.get("parts", {}).get("physical_limits")
    if not p or "d2d_copy_gb_s" not in p:
        return ""
    clauses = []
    for lim in _limit_figures(p):
        name = lim.what.split(",")[0]
        if lim.unlike:
            clauses.append(f"{name}: {lim.unlike}, so no direction is drawn from it")
            continue
        if lim.sequential:  # as the table: no ratio, no direction
            clauses.append(f"{name}: kit {_fig(lim.kit)} against CuPy's {_fig(lim.against)}, {NOT_INTERLEAVED}, "
                           "so neither a ratio nor a direction is drawn from them")  # fmt: skip
            continue
        (c_lo, c_hi), (k_lo, k_hi) = lim.cupy_range, lim.kit_range
        ranges = f"{_fig(k_lo)}-{_fig(k_hi)} against {_fig(c_lo)}-{_fig(c_hi)}"
        if k_lo <= c_hi and c_lo <= k_hi:
            verdict = f"the ranges of the repeats overlap ({ranges}): no difference this run can show"
        else:
            side = "below" if k_hi < c_lo else "above"
            verdict = f"kit's whole range of repeats lies {side} CuPy's ({ranges})"
        clauses.append(f"{name}: kit {_fig(lim.kit)} against CuPy's {_fig(lim.against)}, "
                       f"{lim.kit / lim.against:.1%} of it; {verdict}")  # fmt: skip
    return f"On the {run_label(report)}, through kit against raw CuPy: " + "; ".join(clauses) + "."
