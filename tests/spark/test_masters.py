"""kit.spark.masters: the two training masters and their parts under one name. Each master's
defaults are DL4J's (and kit's where DL4J has none); every name the module exports is the object
kit.spark and the module that defines it export, so a reader finds one class under three names."""

import importlib

import pytest

import kit.spark
from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster, masters


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (
            ParameterAveragingTrainingMaster,
            {
                "batch_size_per_worker": 16,
                "averaging_frequency": 5,
                "save_updater": True,
                "num_workers": None,
                "resolved_num_workers": None,
                "worker_prefetch_num_batches": 0,
                "aggregation_depth": 2,
                "collect_training_stats": False,
            },
        ),
        (
            SharedTrainingMaster,
            {
                "batch_size_per_worker": 16,
                "num_workers": None,
                "resolved_num_workers": None,
                "worker_prefetch_num_batches": 2,
                "aggregation_depth": 2,
                "collect_training_stats": False,
                "batches_per_round": 5,
                "threshold": {  # DL4J's initial threshold; dense (2-bit) messages within the band
                    "initial_threshold": 1e-3,
                    "min_target_sparsity": 1e-4,
                    "max_target_sparsity": 1 / 16,
                    "decay_rate": 0.5 ** (1 / 20),
                },
                "average_updates": True,  # the round moves by the workers' mean update, as averaging does
                "keep_state_on_driver": False,  # residuals and Adam moments stay on the executors
                "threshold_update_multiple": 1.0,  # each step's threshold >= its largest update entry
            },
        ),
    ],
)
def test_every_masters_defaults(cls, expected):
    tm = cls()
    assert {key: getattr(tm, key) for key in expected} == expected
    assert (tm.repartition.value, tm.rdd_training_approach.value) == ("ALWAYS", "EXPORT")


def test_every_name_masters_exports_is_the_object_of_the_module_that_defines_it():
    defined_in_kit = {name for name, obj in vars(masters).items() if getattr(obj, "__module__", "").startswith("kit.")}
    assert sorted(masters.__all__) == sorted(defined_in_kit)  # re-exports only, every one listed
    for name in masters.__all__:
        obj = getattr(masters, name)
        home = importlib.import_module(obj.__module__)
        assert getattr(home, name) is obj, name
        assert home.__name__ in masters.__doc__, f"{name}: its module {home.__name__} is not named in the docstring"
        if hasattr(kit.spark, name):
            assert getattr(kit.spark, name) is obj, name
