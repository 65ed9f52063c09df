"""kit.reference_runs: reading gpu-check reports from a folder (oldest first, refused in words when
they are not reports), a figure inside one by its path, and the label a column shows for a run."""

import json

import pytest

from kit.measurement.reference_runs import chapter_figure, chapter_mode, lookup, reference_runs, run_label, run_labels

REPORT = {
    "machine": {"gpu": "G1", "date": "2026-12-01T10:05:00+00:00"},
    "parts": {
        "bench": {"rows": [{"regime": "plain", "ms": 0.31}, {"regime": "workspace", "ms": 0.29, "n": [1, 2, 3]}]},
        "chapters": {"01.ipynb": {"mode": "quick (KIT_QUICK=1)", "figures": {"half": 0.99}}},
    },
}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("bench.rows[regime=plain].ms", 0.31),
        ("bench.rows[regime=workspace].n[-1]", 3),
        ("bench.rows[1].ms", 0.29),
        ("bench.rows[regime=workspace].n[0]", 1),
        ("bench.rows[regime=caching].ms", None),  # no such row
        ("bench.rows[5].ms", None),  # no such index
        ("bench.rows.ms", None),  # a key asked of a list
        ("missing.part", None),
        ("chapters.01.ipynb", None),  # dots split keys: a chapter's figures are read by chapter_figure
    ],
)
def test_lookup_follows_keys_selectors_and_indices_and_says_none_where_nothing_is(path, value):
    assert lookup(REPORT, path) == value


def test_lookup_refuses_a_path_it_cannot_read_naming_where():
    with pytest.raises(ValueError, match=r"reference path 'bench\.rows\[\]': cannot read from position 10 \('\[\]'\)"):
        lookup(REPORT, "bench.rows[]")


def test_the_chapters_figures_and_their_modes_are_found_by_name():
    assert chapter_figure(REPORT, "half") == 0.99 and chapter_mode(REPORT, "half") == "quick (KIT_QUICK=1)"
    assert chapter_figure(REPORT, "other") is None and chapter_mode(REPORT, "other") == ""


def test_a_run_is_labelled_by_gpu_and_date_and_by_the_time_where_two_share_a_day():
    assert run_label(REPORT) == "G1 (2026-12-01)"
    later = {"machine": {"gpu": "G1", "date": "2026-12-01T18:40:00+00:00"}, "parts": {}}
    host = {"machine": {"host": "box", "backend": "numpy", "date": "2026-12-02T00:00:00+00:00"}, "parts": {}}
    assert run_labels([REPORT, later, host]) == ["G1 (2026-12-01 10:05 UTC)", "G1 (2026-12-01 18:40 UTC)",
                                                 "box, numpy, no GPU (2026-12-02)"]  # fmt: skip


def test_a_folder_of_reports_is_read_oldest_first_and_other_files_are_left_alone(tmp_path):
    newer = {**REPORT, "machine": {"gpu": "G2", "date": "2026-12-09T00:00:00+00:00"}}
    (tmp_path / "a.json").write_text(json.dumps(newer))
    (tmp_path / "b.json").write_text(json.dumps(REPORT))
    (tmp_path / "notes.txt").write_text("not a report")
    runs = reference_runs(tmp_path)
    assert [r["machine"]["gpu"] for r in runs] == ["G1", "G2"] and [r["file"] for r in runs] == ["b.json", "a.json"]
    assert all(r["machine"].get("date") for r in reference_runs())  # the shipped ones are reports too


@pytest.mark.parametrize(
    ("text", "said"),
    [("{", r"bad\.json: not valid JSON .*; copy gpu-check's report unchanged"),
     ('{"parts": {}}', r"bad\.json: expected a gpu-check report with 'machine' and 'parts', found keys \['parts'\]"),
     ("[1]", "found keys list")],
)  # fmt: skip
def test_a_file_that_is_not_a_report_is_refused_naming_it(tmp_path, text, said):
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(ValueError, match=said):
        reference_runs(tmp_path)


def test_a_folder_that_is_not_there_is_refused_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a directory; pass the folder that holds the reports"):
        reference_runs(tmp_path / "nowhere")
