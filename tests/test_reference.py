"""kit.reference: reference runs (gpu-check reports) loaded from a folder, and the table that shows
this machine's figures beside them, each column labelled with where it ran. Real JSON files in a
temporary folder, written the way scripts/gpu_check.py writes them."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from _reports import flagged_report as _flagged_report

from kit import measure, reference


def write_report(folder, name, gpu="NVIDIA H100 80GB HBM3", date="2026-12-01T09:30:00+00:00", parts=None):
    report = {
        "kind": "kit gpu-check",
        "machine": {"gpu": gpu, "date": date, "commit": "89abcdef0123456789", "backend": "cupy", "host": "gpu-1"},
        "parts": parts
        if parts is not None
        else {
            "benchmarks": {
                "workspaces": {
                    "result": {
                        "rows": [
                            {"regime": "plain", "ms_per_iter": 0.42},
                            {"regime": "workspace", "ms_per_iter": 0.40, "ratio_to_plain": 0.95},
                        ]
                    }
                }
            },
            "resnet18_fashion_mnist": {"test_accuracy": 0.9134, "epoch_seconds": [12.5, 11.9]},
        },
    }
    (folder / name).write_text(json.dumps(report, indent=1))
    return report


def test_empty_folder_says_no_reference_run_and_still_shows_this_machine(tmp_path):
    table = reference.beside({"ms per step": 1.5, "accuracy": 0.9}, {"accuracy": "x.y"}, directory=tmp_path)
    text = str(table)
    assert reference.reference_runs(tmp_path) == []
    assert "no reference run recorded yet" in text and "scripts/gpu-check" in text
    assert "kit/data/reference_runs/" in text
    assert table.columns[1].startswith("your machine (cpu:0")
    assert table.rows == [["ms per step", 1.5], ["accuracy", 0.9]]


def test_report_column_is_labelled_with_gpu_and_date_and_picks_values(tmp_path):
    write_report(tmp_path, "h100.json")
    picks = {
        "workspace / plain": "benchmarks.workspaces.result.rows[regime=workspace].ratio_to_plain",
        "plain ms": "benchmarks.workspaces.result.rows[0].ms_per_iter",
        "last epoch s": lambda r: reference.lookup(r, "resnet18_fashion_mnist.epoch_seconds[-1]"),
        "not recorded": "benchmarks.parallel.result.summary.goal",
    }
    measured = {"workspace / plain": 1.02, "plain ms": 1.3, "last epoch s": 300.0, "not recorded": 2.0}
    table = reference.beside(measured, picks, directory=tmp_path, device="cpu:0")
    assert table.columns == [
        "quantity",
        "your machine (cpu:0)",
        "NVIDIA H100 80GB HBM3 (2026-12-01)",
    ]
    assert [row[2] for row in table.rows] == [0.95, 0.42, 11.9, None]
    text = table.text()
    assert "no reference run" not in text
    assert "— (not in this run)" in text.splitlines()[-1]
    assert repr(table) == text  # a notebook cell shows the table itself
    # the commit is a developer's detail: kept in the report, not shown to a reader
    assert "89abcde" not in text and "commit" not in text and "89abcde" not in table._repr_html_()
    assert reference.reference_runs(tmp_path)[0]["machine"]["commit"].startswith("89abcde")


def test_two_runs_of_one_gpu_on_one_day_are_told_apart_by_their_time(tmp_path):
    write_report(tmp_path, "a.json", date="2026-12-01T09:30:00+00:00")
    write_report(tmp_path, "b.json", date="2026-12-01T17:05:00+00:00")
    write_report(tmp_path, "c.json", gpu="NVIDIA A100", date="2026-12-01T12:00:00+00:00")
    table = reference.beside({"accuracy": 0.8}, directory=tmp_path, device="cpu:0")
    assert table.columns[2:] == [
        "NVIDIA H100 80GB HBM3 (2026-12-01 09:30 UTC)",
        "NVIDIA A100 (2026-12-01)",
        "NVIDIA H100 80GB HBM3 (2026-12-01 17:05 UTC)",
    ]


def test_several_runs_are_columns_oldest_first_and_non_json_files_are_ignored(tmp_path):
    write_report(tmp_path, "b.json", gpu="NVIDIA H200", date="2027-01-05T00:00:00+00:00")
    write_report(tmp_path, "a.json", gpu="NVIDIA A100", date="2026-11-01T00:00:00+00:00")
    (tmp_path / "README.md").write_text("not a report")
    runs = reference.reference_runs(tmp_path)
    assert [r["machine"]["gpu"] for r in runs] == ["NVIDIA A100", "NVIDIA H200"]
    assert [r["file"] for r in runs] == ["a.json", "b.json"]
    table = reference.beside(
        {"accuracy": 0.8}, {"accuracy": "resnet18_fashion_mnist.test_accuracy"}, directory=tmp_path
    )
    assert table.rows == [["accuracy", 0.8, 0.9134, 0.9134]]
    assert "NVIDIA A100 (2026-11-01" in table.columns[2] and "NVIDIA H200 (2027-01-05" in table.columns[3]


def test_cpu_dry_run_report_is_labelled_as_host_not_gpu(tmp_path):
    report = write_report(tmp_path, "dry.json", gpu=None)
    del report["machine"]["gpu"]
    report["machine"]["backend"] = "numpy"
    (tmp_path / "dry.json").write_text(json.dumps(report))
    label = reference.run_label(reference.reference_runs(tmp_path)[0])
    assert label == "gpu-1, numpy, no GPU (2026-12-01)"


def test_bad_inputs_name_the_problem(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON"):
        reference.reference_runs(tmp_path)
    (tmp_path / "broken.json").write_text(json.dumps({"date": "x"}))
    with pytest.raises(ValueError, match=r"broken.json: expected a gpu-check report .*\['date'\]"):
        reference.reference_runs(tmp_path)
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        reference.reference_runs(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"picks \['typo'\] name no measured quantity"):
        reference.beside({"a": 1.0}, {"typo": "x"}, directory=tmp_path / "missing")
    with pytest.raises(ValueError, match="cannot read from position"):
        reference.lookup({"parts": {"a": {"b": 1}}}, "a[b")


def test_package_folder_ships_its_readme_and_only_valid_reports():
    folder = resources.files("kit.data").joinpath("reference_runs")
    assert "GPU" in folder.joinpath("README.md").read_text(encoding="utf-8")
    for run in reference.reference_runs():  # every shipped report names where and when it ran
        assert run["machine"].get("gpu") and run["machine"].get("date") and run["machine"].get("commit")


def test_a_quantity_without_a_pick_is_found_among_the_chapters_figures(tmp_path):
    import json

    from kit import reference

    report = {
        "kind": "kit gpu-check",
        "machine": {"gpu": "NVIDIA H100", "date": "2026-12-01T10:00:00+00:00", "commit": "0123456789ab"},
        "parts": {"chapters": {"05_parallel_inference.ipynb": {"figures": {"BATCHED / SEQUENTIAL": 6.5}}}},
    }
    (tmp_path / "h100.json").write_text(json.dumps(report))
    table = reference.beside({"BATCHED / SEQUENTIAL": 3.0, "other": 1.0}, directory=tmp_path, device="cpu:0")
    assert table.rows == [["BATCHED / SEQUENTIAL", 3.0, 6.5], ["other", 1.0, None]]
    assert reference.reported()["BATCHED / SEQUENTIAL"] == 3.0


def _shipped_runs_with(part: str) -> list[dict]:
    runs = [r for r in reference.reference_runs() if part in r.get("parts", {})]
    assert runs, f"no shipped reference run has a {part!r} part"
    return runs


def test_the_d2l_table_says_what_its_report_measured():
    """Every number and direction in the d2l sentences comes from the report (chapter 4 prints them)."""
    from kit.bench.d2l import ACCURACY_GOAL, EPOCH_RATIO_GOAL, d2l_table

    for run in _shipped_runs_with("d2l"):
        d, text = run["parts"]["d2l"], d2l_table(run)
        assert reference.run_label(run) in text
        for key in ("kit", "kit_tf32"):
            if key in d:
                acc = d[key]["test_accuracy"]
                assert f"{acc:.4f}, {'reaches' if acc >= ACCURACY_GOAL else 'falls short of'} d2l's" in text
        for key in ("pytorch", "pytorch_fp32"):
            assert f"{d[key]['median_epoch_seconds']:.2f}" in text and f"{d[key]['test_accuracy']:.4f}" in text
            r = d[key]["kit_over_this_epoch_ratio"]
            kit_key = d[key].get("kit_side", "kit")
            label = {"kit": "float32 matmuls", "kit_tf32": "TF32 matmuls"}[kit_key]
            assert f"kit's epoch with {label} took {r:.2f} x its epoch" in text
        r = d["pytorch"]["kit_over_this_epoch_ratio"]
        assert f"goal <= {EPOCH_RATIO_GOAL} x: {'met' if r <= EPOCH_RATIO_GOAL else 'NOT met'})" in text
        # the median the table prints is the median of the epochs the report holds
        epochs = sorted(d["kit"]["epoch_seconds"])
        mid = (epochs[len(epochs) // 2] + epochs[(len(epochs) - 1) // 2]) / 2
        assert abs(d["kit"]["median_epoch_seconds"] - mid) < 1e-3
        if run["machine"].get("gpu_count", 1) == 1:
            assert "there is no 2-GPU row" in text and "logical slots of the one GPU" in text


def test_the_d2l_table_turns_with_the_numbers(tmp_path):
    """The same sentences with the goals met, and a run without the part says so."""
    from kit.bench.d2l import d2l_table

    run = json.loads(json.dumps(_shipped_runs_with("d2l")[0]))
    d = run["parts"]["d2l"]
    d["kit"]["test_accuracy"] = 0.9312
    d["pytorch"]["kit_over_this_epoch_ratio"] = 1.2  # its epochs' range still the shipped run's, 4.1-4.9 x:
    assert "x: within the spread: not shown either way)" in d2l_table(run)  # figure and epochs disagree
    d["pytorch"]["ratio_min_max"] = [1.15, 1.3]
    text = d2l_table(run)
    assert "0.9312, reaches d2l's 0.91" in text and "took 1.20 x its epoch" in text and "x: met)" in text
    # a run with kit in TF32 beside it: PyTorch's default row is timed against that one
    d["kit_tf32"] = dict(d["kit"], test_accuracy=0.8999, test_accuracy_per_epoch=[0.8, 0.85, 0.9, 0.88, 0.8999])
    d["pytorch"]["kit_side"] = "kit_tf32"
    text = d2l_table(run)
    assert "kit (CuPy; TF32 matmuls)" in text and "with TF32 matmuls after the last epoch, 0.8999, falls short" in text
    assert "(epochs 3-5: 0.8800-0.9000)" in text and "kit's epoch with TF32 matmuls took 1.20 x" in text
    assert "kit's CuPy matmuls ran in float32" not in text
    run["machine"]["gpu_count"] = 2
    assert "no 2-GPU row" not in d2l_table(run)
    del run["parts"]["d2l"]
    assert d2l_table(run).endswith("no d2l table in this run")


def test_the_physical_limits_table_puts_the_measured_beside_the_datasheet():
    from kit.measurement.tables import WIDTH, Table

    for run in _shipped_runs_with("physical_limits"):
        p, table = run["parts"]["physical_limits"], reference.physical_limits_table(run)
        assert isinstance(table, Table)  # HTML in a notebook, not a monospaced text table
        text, sheet = str(table), p["datasheet"]
        assert f"{p['d2d_copy_gb_s']['median']:,.0f}" in text and f"{p['kit_dup_gb_s']['median']:,.0f}" in text
        assert f"{p['d2d_copy_gb_s']['median'] / 1e3 / sheet['hbm_tb_s']:.0%} of {sheet['hbm_tb_s']:g} TB/s" in text
        for dtype, peak in (("float32", "fp32_tflops"), ("float16", "fp16_tensor_tflops")):
            m = p[f"matmul_{dtype}_tflops"]
            assert f"{m['cupy_median']:.1f}" in text and f"{m['kit_median']:.1f}" in text
            ratio = f"{m['kit_median'] / m['cupy_median']:.1%}"  # the kit / CuPy column: only of a run timed in turn
            assert (ratio in text) == bool(p.get("interleaved")), (ratio, text)
            assert f"{m['cupy_median'] / sheet[peak]:.0%} of {sheet[peak]:g}" in text
        # the date and the device are shown; the commits stay in the report
        assert "commit" not in text and p["commit"][:7] not in text and p["commit"][:7] not in table._repr_html_()
        assert run["machine"]["gpu"] in table.title and run["machine"]["date"][:10] in table.title
        assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert reference.physical_limits_table({"machine": {"gpu": "G", "date": "2026"}, "parts": {}}).endswith(
        "no physical limits measured in this run"
    )


def _limits(cupy, cupy_range, kit, kit_range):
    m = {"size": 8, "cupy_median": cupy, "cupy_min_max": cupy_range, "kit_median": kit, "kit_min_max": kit_range}
    copy = {"median": 100.0, "min": 99.0, "max": 101.0}
    return {
        "machine": {"gpu": "G", "date": "2026-12-01T00:00:00+00:00", "commit": "0123456789"},
        "parts": {
            "physical_limits": {
                "method": "m",
                "d2d_copy_gb_s": copy,
                "kit_dup_gb_s": {"median": 90.0, "min": 89.0, "max": 91.0},
                "cupy_copy_gb_s": copy,  # the same allocate-and-copy as kit's dup (read 30: like for like)
                "interleaved": True,
                "matmul_float32_tflops": m,
                "matmul_float16_tflops": m,
            }
        },
    }


def test_the_physical_limits_sentence_reads_a_difference_only_where_the_ranges_lie_apart():
    """kit's figure as a share of CuPy's, and a direction only where the ranges of repeats do not overlap."""
    apart = reference.physical_limits_sentence(_limits(50.0, [49.0, 51.0], 40.0, [39.0, 41.0]))
    assert "kit 40.0 against CuPy's 50.0, 80.0% of it; kit's whole range of repeats lies below CuPy's" in apart
    assert "device-to-device copy: kit 90.0 against CuPy's 100.0, 90.0% of it; kit's whole range" in apart
    above = reference.physical_limits_sentence(_limits(50.0, [49.0, 51.0], 60.0, [59.0, 61.0]))
    assert "lies above CuPy's (59.0-61.0 against 49.0-51.0)" in above
    overlap = reference.physical_limits_sentence(_limits(50.0, [40.0, 51.0], 45.0, [44.0, 50.0]))
    assert "90.0% of it; the ranges of the repeats overlap (44.0-50.0 against 40.0-51.0): no difference" in overlap
    assert "commit" not in overlap and "0123456" not in overlap
    assert reference.physical_limits_sentence({"machine": {}, "parts": {}}) == ""


def test_bench_d2l_refuses_an_unknown_initialisation_before_loading_anything():
    from kit.bench.d2l import bench_d2l

    with pytest.raises(ValueError, match=r"bench_d2l\(init='he'\): 'd2l' .* or 'default'"):
        bench_d2l(init="he")


def test_a_column_of_quick_mode_chapter_figures_says_so():
    """The shipped H100 report ran the chapters in quick mode: a table that shows its chapter figures
    beside this machine's says so under the table (a note per such column), in text and in HTML."""
    from kit import reference

    runs = reference.reference_runs()
    chapter_figures = {
        name: value
        for run in runs
        for chapter in run.get("parts", {}).get("chapters", {}).values()
        if isinstance(chapter, dict) and str(chapter.get("mode", "")).startswith("quick")
        for name, value in chapter.get("figures", {}).items()
    }
    if not chapter_figures:
        pytest.skip("no reference run with quick-mode chapter figures is shipped")
    name = next(iter(chapter_figures))
    table = reference.beside({name: 1.0})
    assert "quick-mode run" in table.text() and "quick-mode run" in table._repr_html_()
    plain = reference.beside({"a quantity no run reported": 1.0})
    assert "quick-mode run" not in plain.text()


def test_a_figure_from_a_flagged_run_is_marked_flagged_in_its_cell(tmp_path):
    """Chapter 2 showed "workspace / plain time 1.13" beside the H100's figure, unmarked, from a run
    printed UNRELIABLE just above: a figure from a flagged timing says so in its own cell."""
    from kit.measurement.measure import Timing

    write_report(tmp_path, "h100.json")
    busy = Timing("workspace", [0.010, 0.011, 0.010], 10, load=0.5)
    clean = Timing("plain", [0.010, 0.0101, 0.010], 10)
    table = reference.beside(
        {"ratio": 1.13, "clean ratio": 1.0, "a timing": busy, "from clean": 2.0},
        flagged={"ratio": [clean, busy], "clean ratio": clean, "from clean": [clean]},
        directory=tmp_path,
        device="cpu:0",
    )
    cells = {row[0]: row[1] for row in table._cells()}
    assert cells == {"ratio": "1.13 (flagged)", "clean ratio": "1", "a timing": "0.01 (flagged)", "from clean": "2"}
    assert table.flagged == {"ratio", "a timing"}
    assert table.rows[2][1] == busy.median  # a Timing shows its median
    assert reference.FLAGGED_NOTE in table.note and "1.13 (flagged)" in table._repr_html_()
    unmarked = reference.beside({"ratio": 1.0}, flagged={"ratio": clean}, directory=tmp_path)
    assert "(flagged)" not in unmarked.text()
    by_bool = reference.beside({"a": 1.0, "b": 2.0}, flagged={"a": True, "b": False}, directory=tmp_path)
    assert by_bool.flagged == {"a"}
    with pytest.raises(ValueError, match="flagged names 'typo'"):
        reference.beside({"ratio": 1.0}, flagged={"typo": clean}, directory=tmp_path)


def test_chapter_mode_names_the_mode_of_the_chapter_run_that_reported_a_figure():
    report = {"parts": {"chapters": {"05.ipynb": {"mode": "quick (KIT_QUICK=1)", "figures": {"rps": 1.0}}}}}
    assert reference.chapter_mode(report, "rps").startswith("quick")
    assert reference.chapter_mode(report, "absent") == ""


def test_the_d2l_sentence_says_a_shortfall_inside_d2ls_rounding_is_no_difference():
    """d2l gives its accuracy to two decimals: 0.906 against 0.91 is inside that rounding, and the
    sentence says so; a real shortfall is stated plainly; a reached goal says reaches."""
    from kit.bench.d2l_table import _KIT_ROWS, ACCURACY_GOAL, D2L_ROUNDING, _kit_sentences

    key = next(iter(_KIT_ROWS))
    near, far, met = (_kit_sentences({key: {"test_accuracy": a}})[0] for a in (0.906, 0.85, ACCURACY_GOAL + 0.001))
    assert "falls short" in near and "inside" not in near and "not a difference this one run can show" in near
    assert "falls short" in far and "rounding" not in far
    assert "reaches" in met and "rounding" not in met
    assert ACCURACY_GOAL - 0.906 < D2L_ROUNDING


# a reference run's own flags reach its column and every sentence that quotes it


def test_a_reference_figure_its_own_report_flags_is_marked_in_its_column_and_refused_by_quote(tmp_path):
    _flagged_report(tmp_path)
    path = "benchmarks.workspaces.result.rows[regime={}].{}"
    picks = {
        "ratio": path.format("workspace", "ratio_to_plain"),
        "plain ms": path.format("plain", "ms_per_iter"),
        "allocations": path.format("workspace", "kit_heap_allocs_per_iter"),
        "small": "benchmarks.arrays.result.summary.small_added_us_median",
        "large": "benchmarks.arrays.result.summary.large_overhead_pct_median",
    }
    measured = {"ratio": 1.06, "plain ms": 0.67, "allocations": 0, "small": 1.1, "large": 3.0, "half": 0.13,
                "other": 1.0}  # fmt: skip
    ref = reference.beside(measured, picks, directory=tmp_path, device="cpu:0")
    cells = {r[0]: r for r in ref._cells()}
    assert cells["ratio"][2] == "0.833 (flagged)"  # the row's spread, ±28%, is over the limit
    assert cells["small"][2] == "2.5 (flagged)"  # the goal line it feeds is marked unreliable
    assert cells["half"][2] == "0.99 (flagged)"  # the chapter run recorded it as flagged
    # a count is not a timing; an unflagged row, goal or chapter figure stays unmarked
    for name, shown in (("allocations", "0"), ("plain ms", "1.18"), ("large", "1"), ("other", "2")):
        assert cells[name][2] == shown, name
    assert "spread ±28% is wider than ±25%" in ref.note and "'added per small op (median)'" in ref.note
    assert "(flagged)" in ref._repr_html_()
    [(_run, value, why)] = ref.quote("ratio")
    assert value == 0.833 and "±28%" in why
    assert ref.quote("plain ms")[0][2] == ""


def test_gpu_check_records_the_figures_a_chapter_showed_as_flagged():
    busy = measure.Timing("w", [0.010, 0.011, 0.010], 10, load=0.5)
    reference.beside({"read30 q": busy, "read30 clean": 1.0}, device="cpu:0")
    flags = reference.reported_flags()
    assert "read30 q" in flags and "read30 clean" not in flags


def test_the_shipped_h100_reference_marks_its_own_flagged_figures():
    runs = [r for r in reference.reference_runs() if "h100" in r.get("file", "")]
    for run in runs:
        pick = "benchmarks.workspaces.result.rows[regime=workspace].ratio_to_plain"
        if reference.lookup(run, pick) is not None and "unreliable" in str(
            reference.lookup(run, "benchmarks.workspaces.result.summary.goal_time")
        ):
            assert reference.reference_flag(run, pick)
