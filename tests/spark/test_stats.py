"""kit.spark.stats: chapter 7 draws the stats timeline in the colours of export_stats_html's page,
through a public name."""

import kit.spark.stats as stats


def test_every_phase_has_a_public_colour():
    assert "PHASE_COLORS" in stats.__all__
    assert set(stats.PHASE_COLORS) == {*stats.DRIVER_PHASES, *stats.WORKER_PHASES}
    assert not hasattr(stats, "_COLORS")


def test_the_exported_page_uses_those_colours(tmp_path):
    run = stats.SparkTrainingStats(
        "ParameterAveragingTrainingMaster",
        rounds=[{"start": 0.0, "broadcast_ms": 2.0, "job_ms": 40.0, "aggregate_ms": 1.0}],
        workers=[
            {
                "worker": 0,
                "examples": 32,
                "start": 0.002,
                "load_ms": 1.5,
                "get_model_ms": 0.5,
                "fit_ms": 30.0,
                "export_ms": 0.5,
            }
        ],
    )
    page = tmp_path / "stats.html"
    stats.export_stats_html(run, page)
    text = page.read_text()
    assert all(colour in text for colour in stats.PHASE_COLORS.values())
