"""`python -m kit bench spark`'s options: `--standalone`, `--epochs`, `--seeds`, `--models` and `--examples`
refused, in one line before anything starts, where they do not apply or are bad; and (slow) the side-by-side
run on a standalone cluster the benchmark starts, its rows, goals and load reading in the JSON (a small job:
`--examples 256`, the logic's check, not the benchmark's figures)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit import bench
from kit.__main__ import main
from kit.spark import spark_missing

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["bench", "arrays", "--standalone"],
            "--standalone: only `bench spark` takes it; run `bench arrays` without it",
        ),
        (["bench", "train", "--epochs", "3"], "--epochs: only `bench spark` takes it; run `bench train` without it"),
        (["bench", "spark", "--epochs", "0"], "--epochs 0: a whole number >= 1, e.g. --epochs 10"),
        (["bench", "spark", "--standalone", "--epochs", "-2"], "--epochs -2: a whole number >= 1, e.g. --epochs 10"),
        (["bench", "memory", "--seeds", "3"], "--seeds: only `bench spark` takes it; run `bench memory` without it"),
        (["bench", "spark", "--seeds", "0"], "--seeds 0: a whole number >= 1, e.g. --seeds 3"),
        (
            ["bench", "arrays", "--models", "mlp"],
            "--models: only `bench spark` takes it; run `bench arrays` without it",
        ),
        (
            ["bench", "spark", "--models", "lenet"],
            "--models lenet: one or more of mlp, resnet18, comma-separated, e.g. --models mlp",
        ),
        (
            ["bench", "spark", "--models", "mlp,mlp"],
            "--models mlp,mlp: one or more of mlp, resnet18, comma-separated, e.g. --models mlp",
        ),
        (
            ["bench", "spark", "--standalone", "--models", "mlp"],
            "--models: the rounds table's models; --standalone runs the side-by-side alone: drop --models",
        ),
        (
            ["bench", "train", "--examples", "256"],
            "--examples: only `bench spark` takes it; run `bench train` without it",
        ),
        (["bench", "spark", "--examples", "100"], "--examples 100: a whole number >= 128, e.g. --examples 1024"),
    ],
    ids=[
        "standalone-not-spark",
        "epochs-not-spark",
        "epochs-zero",
        "epochs-negative",
        "seeds-not-spark",
        "seeds-zero",
        "models-not-spark",
        "models-unknown",
        "models-twice",
        "models-standalone",
        "examples-not-spark",
        "examples-too-few",
    ],
)
def test_bad_options_are_refused_in_one_line_before_anything_runs(argv, says, capsys):
    if spark_missing() and "spark" in argv:
        pytest.skip(spark_missing())
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"python -m kit bench: error: {says}", line


def test_an_option_another_benchmark_takes_is_said_before_its_value():
    """`bench arrays --epochs 0` said "e.g. --epochs 10", and that said "only bench spark takes it"."""
    for options in ({"epochs": 0}, {"models": "bogus"}, {"seeds": 2.5}):
        with pytest.raises(bench.BenchOptionError, match=r"only `bench spark` takes it; run `bench arrays` without it"):
            bench.options_for("arrays", **options)


@pytest.mark.parametrize(
    ("name", "options", "passed"),
    [
        ("arrays", {}, {}),  # the remedy: the same benchmark without the option takes none
        ("spark", {"standalone": True}, {"standalone": True}),
        ("spark", {"epochs": 10}, {"epochs": 10}),
        ("spark", {"standalone": False, "epochs": None}, {}),
        ("spark", {"standalone": True, "seeds": 3}, {"standalone": True, "seeds": 3}),
        ("spark", {"models": "mlp", "examples": 256}, {"models": ("mlp",), "examples": 256}),
        ("spark", {"models": ("resnet18", "mlp")}, {"models": ("resnet18", "mlp")}),  # run's: already split
        ("spark", {"standalone": True, "examples": 128}, {"standalone": True, "examples": 128}),
    ],
)
def test_options_reach_only_the_spark_benchmark(name, options, passed):
    assert bench.options_for(name, **options) == passed


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_spark_standalone_runs_the_side_by_side_on_a_cluster_it_starts(tmp_path):
    why = spark_missing()
    if why:
        pytest.skip(why)
    out = tmp_path / "peers.json"
    cmd = [sys.executable, "-m", "kit", "bench", "spark", "--standalone", "--quick", "--examples", "256"]
    cmd += ["--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=840, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["benchmark"] == "spark (standalone)" and "standalone, 2 workers of 1 core" in result["device"]
    peers = result["peers"]
    rows = {r["system"]: r for r in peers["rows"]}
    assert rows["kit gang, every step"]["execution"] == "gang", rows  # 2 slots: the gang ran on the cluster
    assert "kit Network.fit (one process)" in rows and peers["epochs"] == 1
    assert peers["steps_per_epoch"] == 8 and peers["test_examples"] == 128  # --examples 256: 8 steps of 32
    assert 0.0 <= peers["machine_load_by_others"] <= 1.0 and len(peers["load_average"]) == 2
    assert "goal[final_accuracy >= TorchDistributor's - 0.005]" in result["summary"] or (
        peers["torch_distributor"] != "ran"
    )
    assert "other processes used" in result["summary"]["peers_note"]
    assert "kit gang, every step" in done.stdout  # printed, as the JSON holds it
