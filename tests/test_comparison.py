"""kit.training.comparison: a Comparison built from given rows and per-repeat seconds, as
compare_devices builds one: its notes, its HTML and text tables (a flagged figure greyed, not its
row), and the speedup sentence in each of its branches. compare_devices itself: test_compare.py."""

import re

import numpy as np
import pytest

from kit.training.compare import Comparison, assess_row


def test_the_html_table_is_narrow_enough_for_a_notebook_column():
    """JupyterLab's notebook column with the file browser open is about 800 px: the HTML form keeps
    the spread in the epoch time's cell, leaves samples_per_s to the text form, and its headers
    wrap after each underscore; the text form keeps every column."""
    rows = [
        {
            "devices": d,
            "kind": k,
            "reliable": True,
            "epoch_s": e,
            "spread": 0.05,
            "samples_per_s": 500.0,
            "speedup": s,
            "speedup_vs_share": None if d == 1 else 0.9,
            "efficiency": s / d,
            "predicted_speedup": 1.5,
            "copies_per_epoch": 285,
            "copied_MB_per_epoch": 114.0,
            "warnings": [],
        }
        for d, k, e, s in ((1, "physical cpu:0", 2.0, 1.0), (2, "logical (share cpu:0)", 1.25, 1.6))
    ]
    page = Comparison(rows=rows)._repr_html_()
    heads = re.findall(r"<th [^>]*>(.*?)</th>", page)
    assert len(heads) == 10 and "epoch (s) ±spread" in heads and "samples_per_s" not in page
    assert "1.25 ±5%" in page and "copied MB per epoch" in heads and 'title="copied_MB_per_epoch"' in page
    assert not any("_" in h for h in heads), heads  # headers in words: none breaks at an underscore
    assert "samples_per_s" in Comparison(rows=rows).table()


def test_the_table_says_how_its_speedups_are_taken():
    rows = [
        {"devices": d, "kind": "k", "reliable": True, "epoch_s": e, "speedup": s, "warnings": []}
        for d, e, s in ((1, 0.429, 1.0), (2, 0.473, 0.972))
    ]
    notes = Comparison(rows=rows).notes()
    assert any("median over repeats" in n and "not the ratio of the epoch_s medians" in n for n in notes)


def _comparison(one_s, share_s, two_s, shared=True, cores=2):
    """A Comparison built from given per-repeat seconds, as compare_devices builds one."""
    from kit.measurement.measure import Timing
    from kit.training.compare import _baseline_warnings

    timings = {1: Timing("1", one_s, 1), "share": Timing("share", share_s, 1), 2: Timing("2", two_s, 1)}
    rows = []
    for n in (1, 2):
        t = timings[n]
        each = [b / x for b, x in zip(timings[1].seconds, t.seconds)]
        vs = [b / x for b, x in zip(timings["share"].seconds, t.seconds)] if n > 1 else None
        row = {
            "devices": n,
            "kind": "physical cpu:0" if n == 1 else "logical (share cpu:0)",
            "epoch_s": t.median,
            "spread": t.spread,
            "speedup": float(np.median(each)),
            "speedups": each,
            "speedup_vs_share": float(np.median(vs)) if vs else None,
            "speedups_vs_share": vs,
            "efficiency": float(np.median(each)) / n,
            "predicted_speedup": 1.5 if n > 1 else 1.0,
            "copies_per_epoch": 0.0,
        }
        base = {"baseline": _baseline_warnings(timings, 1), "share_baseline": _baseline_warnings(timings, "share")}
        rows.append(assess_row(row, t.warnings, shared=shared, cores=cores, **(base if n > 1 else {})))
    model = {
        "baseline": {"threads": cores, "epoch_s": 0.5, "share_threads": 1, "share_epoch_s": 0.62},
    }
    return Comparison(rows=rows, model=model, timings=timings)


def test_a_flagged_baseline_greys_only_the_speedup_it_divides():
    """Read 29: a row greyed whole and marked NO because the every-core baseline was flagged, while
    its speedup vs share (a clean baseline, a clean timing) was read in a sentence. Flags are per
    figure: the speedup and efficiency greyed, the epoch time and speedup vs share not, `reliable`
    says partly, the plot crosses the flagged speedup, and the sentences agree with the table."""
    import matplotlib

    matplotlib.use("Agg")
    result = _comparison([0.5, 0.36, 0.65, 0.5, 0.52], [0.62, 0.6, 0.65, 0.623, 0.7], [0.44, 0.38, 0.49, 0.47, 0.45])
    one, two = result.rows
    assert one["flags"]["epoch_s"] and two["flags"]["speedup"] and two["flags"]["efficiency"]
    assert not two["flags"]["epoch_s"] and not two["flags"]["speedup_vs_share"]
    assert not two["reliable"] and two["warnings"] == two["flags"]["speedup"]
    page = result._repr_html_()
    grey = re.findall(r'<td style="[^"]*#999[^"]*">([^<]*)</td>', page)
    plain = re.findall(r'<td style="(?:(?!#999)[^"])*">([^<]*)</td>', page)
    assert f"{two['speedup']:.3g}" in grey and f"{two['efficiency']:.3g}" in grey
    assert f"{two['speedup_vs_share']:.3g}" in plain and any(v.startswith(f"{two['epoch_s']:.3g} ±") for v in plain)
    assert ">partly</span>" in page and ">NO</span>" in page
    assert "UNRELIABLE 2 device(s) (speedup, efficiency): its baseline (1 device) was flagged" in page
    assert "speedup vs share" in page.split("<ul")[1] and "speedup_vs_share" not in page.split("<ul")[1]
    text = result.table()
    assert f"{two['speedup']:.3g}*" in text and f"{two['speedup_vs_share']:.3g}*" not in text
    ax = result.plot()
    crosses = [line for line in ax.get_lines() if line.get_label() == "UNRELIABLE (see table)"]
    assert list(crosses[0].get_xdata()) == [1, 2]  # both speedups over every core divide by a flagged time
    # the sentences: no conclusion for the flagged speedup, the table's own figure for the clean one
    flagged = result.speedup_sentence(2, name="two workers")
    assert flagged.startswith("No conclusion") and "one device (every core): spread ±" in flagged
    clean = result.speedup_sentence(2, vs_share=True, name="two workers")
    assert f"its median, {two['speedup_vs_share']:.2f}x, is the table's speedup vs share" in clean
    assert f"{min(two['speedups_vs_share']):.2f}x to {max(two['speedups_vs_share']):.2f}x" in clean
    assert "in every repeat two workers took the shorter epoch" in clean
    ratio_of_medians = result.timings["share"].median / result.timings[2].median
    assert f"{ratio_of_medians:.3g}x" not in clean  # not the other basis


def test_the_speedup_sentence_turns_with_the_repeats():
    """Each branch: every repeat one way, the other way, both sides of 1, and a speedup beyond
    the device count (flagged by its own rule, not by a timing)."""
    even = [1.0, 1.02, 0.98, 1.01, 0.99]
    faster = _comparison(even, even, [0.6, 0.61, 0.59, 0.6, 0.62])
    assert "in every repeat two workers took the shorter epoch" in faster.speedup_sentence(2, name="two workers")
    slower = _comparison(even, even, [1.5, 1.52, 1.49, 1.5, 1.51])
    text = slower.speedup_sentence(2, name="two workers")
    assert "in every repeat two workers took the longer epoch" in text and "efficiency 0.33" in text
    mixed = _comparison(even, even, [0.99, 1.03, 0.97, 1.02, 0.98])
    assert "both sides of 1: no direction" in mixed.speedup_sentence(2)
    beyond = _comparison(even, even, [0.3, 0.31, 0.29, 0.3, 0.3])
    text = beyond.speedup_sentence(2, name="two workers")
    assert text.startswith("No conclusion") and "run: speedup 3.33x exceeds the 2 device(s)" in text
    assert beyond.rows[1]["flags"]["speedup"] and not beyond.rows[1]["flags"]["epoch_s"]
    busy = _comparison(even, even, [0.6, 0.61, 0.59, 0.6, 0.62])
    for t in busy.timings.values():
        t.load = 0.7
    busy.rows = [assess_row(r, busy.timings[r["devices"]].warnings, True, 2) for r in busy.rows]
    text = busy.speedup_sentence(2, name="two workers")
    assert "two workers and one device (every core): machine busy" in text  # one reason, both names
    with pytest.raises(ValueError, match="no speedup_vs_share for 1 device"):
        faster.speedup_sentence(1, vs_share=True)


def test_a_comparison_is_reliable_only_when_every_row_is():
    rows = [{"devices": 1, "reliable": True}, {"devices": 2, "reliable": True}]
    assert Comparison(rows=rows).reliable
    rows[1]["reliable"] = False
    assert not Comparison(rows=rows).reliable
