import io
import re

from kit.data import ArrayIterator, load_digits
from kit.nn import mlp
from kit.training.listeners import PerformanceListener, ScoreIterationListener, StatsRecorder, TrainingDashboard


def test_listeners_report_in_dl4js_formats(tmp_path):
    train, _ = load_digits()
    out = io.StringIO()
    score = ScoreIterationListener(10, stream=out)
    perf = PerformanceListener(5, report_score=True, stream=out)
    stats = StatsRecorder(tmp_path / "run.jsonl", memory_every=5)
    net = mlp(64, hidden=(16,), n_out=10)
    net.fit(ArrayIterator(train, batch_size=64), epochs=2, listeners=[score, perf, stats])
    perf.close()
    assert len(score.lines) == net.iteration // 10
    assert re.fullmatch(r"Score at iteration 10 is \d+\.\d+", score.lines[0])
    pattern = (
        r"ETL: [\d.]+ ms; iteration \d+; iteration time: [\d.]+ ms; samples/sec: \d+\.\d{3}; "
        r"batches/sec: \d+\.\d{3}; score: [\d.]+; GC: \[python gc: \d+ \(\d+ms\)\];"
    )
    assert perf.lines and all(re.fullmatch(pattern, line) for line in perf.lines), perf.lines[:2]
    records = StatsRecorder.read(tmp_path / "run.jsonl")
    assert [r["iteration"] for r in records] == list(range(1, net.iteration + 1))
    assert all(r["score"] > 0 for r in records) and "rss_bytes" in records[4]
    assert records[0]["epoch"] == 0 and records[-1]["epoch"] == 1


def test_dashboard_outside_a_kernel_prints_throttled_lines(capsys):
    train, _ = load_digits()
    dash = TrainingDashboard(total_iterations=23)
    net = mlp(64, hidden=(16,), n_out=10)
    net.fit(ArrayIterator(train, batch_size=64), epochs=1, listeners=[dash])
    out = capsys.readouterr().out
    assert "training: 23/23" in out and "memory:" in out
    assert len(dash.scores) == 23


def test_progress_bar_counts_iterations():
    from kit.training.listeners import ProgressBarListener

    train, _ = load_digits()
    bar = ProgressBarListener(total=23, disable=False, file=io.StringIO())
    mlp(64, hidden=(8,), n_out=10).fit(ArrayIterator(train, batch_size=64), epochs=1, listeners=[bar])
    assert bar.bar.n == 23
    bar.close()


def test_stats_recorder_names_a_path_it_cannot_write_at_the_call(tmp_path):
    """A missing folder or a folder as the path was said by fit at its first iteration, bare."""
    import pytest

    with pytest.raises(FileNotFoundError, match=r"StatsRecorder\(.*\): the directory .* does not exist"):
        StatsRecorder(tmp_path / "missing" / "run.jsonl")
    with pytest.raises(IsADirectoryError, match=r"StatsRecorder\(.*\): that path is a directory"):
        StatsRecorder(tmp_path)
