"""kit.spark.master_options (issue 42 item 3): each master's arguments are one frozen options
object, checked at construction. A table over both masters and every argument: the options carry
it (normalised as the checks normalise it), the master reads it, nothing can change it after
construction, and the masters' signatures are the options' fields (a new argument without a row
here fails the table). No Spark is started."""

import dataclasses
import inspect
import pickle

import pytest

from kit.parallel import TrainingMode
from kit.spark import ParameterAveragingTrainingMaster, RDDTrainingApproach, Repartition, SharedTrainingMaster
from kit.spark.master_options import AveragingOptions, SharedOptions, ThresholdSettings

# argument -> (a value other than the default, what the options hold for it)
COMMON = {
    "batch_size_per_worker": (7, 7),
    "num_workers": (3, 3),
    "rdd_data_set_num_examples": (2, 2),
    "worker_prefetch_num_batches": (4, 4),
    "repartition": ("NEVER", Repartition.NEVER),
    "rdd_training_approach": ("DIRECT", RDDTrainingApproach.DIRECT),
    "export_directory": ("EXPORT_DIR", "EXPORT_DIR"),
    "collect_training_stats": (True, True),
    "worker_workspace_mode": ("SINGLE", "SINGLE"),
    "worker_periodic_gc": (False, False),
    "worker_gc_window_ms": (100, 100),
    "round_timeout": (12, 12.0),
    "aggregation_depth": (3, 3),
    "checkpoint_every": (2, 2),
    "checkpoint_directory": ("CHECKPOINT_DIR", "CHECKPOINT_DIR"),
    "barrier": (True, True),
    "gpus_per_task": (0.5, 0.5),
}
OWN = {
    ParameterAveragingTrainingMaster: {
        "averaging_frequency": (3, 3),
        "save_updater": (False, False),
        "execution": ("gang", "gang"),  # kit.spark.gang's: the default is "auto"
        "exchange": ("gradients", "gradients"),  # needs averaging_frequency=1 (EXTRA)
        "collective": ("allgather", "allgather"),
    },
    SharedTrainingMaster: {
        "batches_per_round": (3, 3),
        "initial_threshold": (2e-3, 2e-3),
        "min_target_sparsity": (1e-3, 1e-3),
        "max_target_sparsity": (0.1, 0.1),
        "decay_rate": (0.9, 0.9),
        "keep_state_on_driver": (True, True),
        "average_updates": (False, False),
        "threshold_update_multiple": (None, None),  # DL4J's adaptive threshold alone
    },
}
EXTRA = {"exchange": {"averaging_frequency": 1}}  # what a row's value needs beside it
ROWS = [(cls, name) for cls in OWN for name in (*COMMON, *OWN[cls])]


def _value(cls, name, tmp_path):
    given, held = {**COMMON, **OWN[cls]}[name]
    dirs = {"EXPORT_DIR": str(tmp_path / "export"), "CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    return dirs.get(given, given), dirs.get(held, held)


def test_the_table_names_every_argument_of_both_masters():
    for cls, options in ((ParameterAveragingTrainingMaster, AveragingOptions), (SharedTrainingMaster, SharedOptions)):
        assert cls.Options is options
        fields = {f.name for f in dataclasses.fields(options)}
        assert fields == set(COMMON) | set(OWN[cls])
        parameters = list(inspect.signature(cls).parameters.values())
        assert {p.name for p in parameters} == fields
        positional = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert positional == [
            "batch_size_per_worker",
            "averaging_frequency" if options is AveragingOptions else "batches_per_round",
        ]
        for p in parameters:  # the defaults a user sees are the ones the options apply
            assert p.default == getattr(cls().options, p.name) or p.name in (
                "checkpoint_every",
                "repartition",
                "rdd_training_approach",
            )


@pytest.mark.parametrize(("cls", "name"), ROWS, ids=[f"{c.__name__[:6]}-{n}" for c, n in ROWS])
def test_each_argument_is_carried_by_the_frozen_options(cls, name, tmp_path):
    given, held = _value(cls, name, tmp_path)
    extra = {"checkpoint_directory": str(tmp_path / "checkpoints")} if name == "checkpoint_every" else {}
    extra.update(EXTRA.get(name, {}))
    tm = cls(**{name: given}, **extra)
    default = cls()
    assert getattr(tm.options, name) == held and getattr(tm, name) == held
    assert getattr(default.options, name) != held  # the row's value is not the default: the argument got through
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(tm.options, name, given)
    with pytest.raises(AttributeError, match=rf"{cls.__name__}\.{name} is fixed at construction"):
        setattr(tm, name, given)
    again = pickle.loads(pickle.dumps(tm.options))  # Spark pickles what a task's closure holds
    assert again == tm.options and hash(again) == hash(tm.options)


@pytest.mark.parametrize("cls", list(OWN))
def test_an_unknown_argument_names_the_master_and_its_arguments(cls):
    with pytest.raises(TypeError, match=rf"^{cls.__name__}\(\) got an unexpected keyword argument 'batchsize'.*"):
        cls(batchsize=3)
    with pytest.raises(TypeError, match="its arguments: batch_size_per_worker, "):
        cls(1, 2, 3)


def test_the_mode_is_parallel_wrappers_enum_and_the_threshold_is_typed():
    averaging, shared = ParameterAveragingTrainingMaster(), SharedTrainingMaster(initial_threshold=1e-3)
    assert averaging.mode is TrainingMode.AVERAGING and shared.mode is TrainingMode.SHARED_GRADIENTS
    assert averaging.options.threshold_settings is None
    assert shared.options.threshold_settings == ThresholdSettings(1e-3, 1e-4, 1 / 16, 0.5 ** (1 / 20))
    shared.threshold["initial_threshold"] = 1.0  # a copy: the options do not move
    assert shared.threshold["initial_threshold"] == 1e-3


def test_the_checkpoint_settings_are_what_they_were_before_the_options():
    assert ParameterAveragingTrainingMaster(20, 2, save_updater=False).training_settings() == {
        "master": "ParameterAveragingTrainingMaster",
        "batch_size_per_worker": 20,
        "batches_per_round": 2,
        "repartition": "ALWAYS",
        "save_updater": False,
        "threshold": None,
    }
    shared = SharedTrainingMaster(20, 3).training_settings()
    assert shared["batches_per_round"] == 3 and shared["save_updater"] is None
    assert shared["threshold"] == {
        "initial_threshold": 1e-3,
        "min_target_sparsity": 1e-4,
        "max_target_sparsity": 1 / 16,
        "decay_rate": 0.5 ** (1 / 20),
        "average_updates": True,
        "threshold_update_multiple": 1.0,
    }


UPDATE_MULTIPLE_BAD = [
    (0, r"\(threshold_update_multiple=0\): must be a number > 0 .*or None for DL4J's adaptive threshold alone"),
    (-2.0, r"\(threshold_update_multiple=-2.0\): must be a number > 0"),
    (float("inf"), r"\(threshold_update_multiple=inf\): must be finite"),
    ("1", r"\(threshold_update_multiple='1'\): must be a number"),
    (True, r"\(threshold_update_multiple=True\): must be a number"),
]


@pytest.mark.parametrize(("value", "said"), UPDATE_MULTIPLE_BAD, ids=[repr(v) for v, _ in UPDATE_MULTIPLE_BAD])
def test_the_threshold_update_multiple_is_checked_at_the_call_and_its_remedies_run(value, said):
    with pytest.raises(ValueError, match=rf"^SharedTrainingMaster{said}"):
        SharedTrainingMaster(16, threshold_update_multiple=value)
    for remedy in (None, 1.0, 3):  # the error's remedies: None, or a number > 0
        held = SharedTrainingMaster(16, threshold_update_multiple=remedy).options.threshold_update_multiple
        assert held == (None if remedy is None else float(remedy))


GANG_BAD = [
    ({"execution": "fast"}, r"\(execution='fast'\): must be one of 'auto', 'gang', 'rounds'"),
    ({"exchange": "states"}, r"\(exchange='states'\): must be one of 'parameters', 'gradients'"),
    ({"collective": "mpi"}, r"\(collective='mpi'\): must be one of 'auto', 'gloo', 'nccl', 'allgather'"),
    ({"collective": ["gloo"]}, r"\(collective=\['gloo'\]\): must be one of"),
    ({"exchange": "gradients"}, r"\(averaging_frequency=5, exchange='gradients'\): .*averaging_frequency=1"),
    (
        {"exchange": "gradients", "averaging_frequency": 1, "execution": "rounds"},
        r"\(execution='rounds', exchange='gradients'\): .*execution='gang' or 'auto'",
    ),
]


@pytest.mark.parametrize(("kwargs", "said"), GANG_BAD, ids=[str(k) for k, _ in GANG_BAD])
def test_the_gang_options_are_checked_in_the_options_at_the_call(kwargs, said):
    with pytest.raises(ValueError, match=rf"^ParameterAveragingTrainingMaster{said}"):
        ParameterAveragingTrainingMaster(**kwargs)
    with pytest.raises(ValueError, match=said):
        AveragingOptions(**kwargs)


def test_the_gang_options_default_to_a_gang_where_one_can_run():
    assert ParameterAveragingTrainingMaster().options.execution == "auto"  # issue 44: the gang is the default
    gradients = ParameterAveragingTrainingMaster(16, 1, exchange="gradients")
    assert (gradients.execution, gradients.exchange, gradients.collective) == ("auto", "gradients", "auto")
    assert not hasattr(SharedTrainingMaster(), "execution")  # the gang is parameter averaging's
