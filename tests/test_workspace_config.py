"""kit.workspaces.workspace_config: ND4J's defaults, every check a WorkspaceConfig makes at
construction (each error naming the field, the value and what it may be), the policies given as
strings, and the process-wide debug switches. What the policies do in a workspace: test_workspace.py."""

import dataclasses

import numpy as np
import pytest

from kit.state import STATE
from kit.workspaces.workspace_config import (
    AllocationPolicy,
    DebugMode,
    LearningPolicy,
    ResetPolicy,
    SpillPolicy,
    WorkspaceConfig,
    get_debug_mode,
    set_debug_mode,
    track_allocation_sites,
)
from kit.workspaces.workspace_errors import WorkspaceConfigError


def test_defaults_are_nd4js():
    cfg = WorkspaceConfig()
    assert (cfg.initial_size, cfg.max_size, cfg.overallocation_limit) == (0, 0, 0.3)
    assert cfg.policy_allocation is AllocationPolicy.OVERALLOCATE
    assert cfg.policy_learning is LearningPolicy.FIRST_LOOP
    assert cfg.policy_spill is SpillPolicy.EXTERNAL
    assert cfg.policy_reset is ResetPolicy.BLOCK_LEFT


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_size": -5}, r"WorkspaceConfig\.initial_size=-5: must be a whole number >= 0"),
        ({"min_size": 1.5}, r"WorkspaceConfig\.min_size=1\.5: must be a whole number >= 0"),
        ({"max_size": True}, r"WorkspaceConfig\.max_size=True: must be a whole number >= 0"),
        ({"cycles_before_initialization": -1}, r"cycles_before_initialization=-1: must be a whole number >= 0"),
        ({"overallocation_limit": -1}, r"overallocation_limit=-1: must be a finite number >= 0"),
        ({"overallocation_limit": float("nan")}, r"overallocation_limit=nan: must be a finite number >= 0"),
        ({"overallocation_limit": "0.3"}, r"overallocation_limit='0\.3': must be a finite number >= 0"),
        ({"policy_allocation": "LOOSE"}, r"policy_allocation='LOOSE': use one of STRICT, OVERALLOCATE"),
        ({"policy_learning": 3}, r"policy_learning=3: use one of NONE, FIRST_LOOP, OVER_TIME"),
        ({"policy_reset": "ring"}, r"policy_reset='ring': use one of BLOCK_LEFT, ENDOFBUFFER_REACHED"),
        ({"min_size": 10, "max_size": 5}, r"min_size=10 is larger than max_size=5"),
        ({"policy_learning": "OVER_TIME"}, r"OVER_TIME needs cycles_before_initialization >= 1 \(got 0\)"),
        (
            {"policy_reset": "ENDOFBUFFER_REACHED", "overallocation_limit": 0.5},
            r"\(ENDOFBUFFER_REACHED\) with OVERALLOCATE needs overallocation_limit >= 1\.0.* got 0\.5",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_bad_configuration_is_refused_at_construction_naming_the_field_and_value(kwargs, message):
    with pytest.raises(WorkspaceConfigError, match=message):
        WorkspaceConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_size": 10, "max_size": 0},  # max_size 0: no cap, so any min_size
        {"min_size": 5, "max_size": 5},
        {"policy_learning": "OVER_TIME", "cycles_before_initialization": 1},  # the remedy the error names
        {"policy_reset": "ENDOFBUFFER_REACHED", "overallocation_limit": 1.0},  # the remedy the error names
        {"policy_reset": "ENDOFBUFFER_REACHED", "policy_allocation": "STRICT"},  # the rule is OVERALLOCATE's
        {"initial_size": np.int64(1024), "overallocation_limit": 0},
    ],
    ids=["no cap", "min equals max", "over time after 1", "circular room for two", "circular strict", "numpy int"],
)
def test_the_configurations_at_the_edge_of_each_rule_are_accepted(kwargs):
    cfg = WorkspaceConfig(**kwargs)
    for field, value in kwargs.items():
        got = getattr(cfg, field)
        assert (got.value if hasattr(got, "value") else got) == value


@pytest.mark.parametrize(
    ("field", "enum_type"),
    [
        ("policy_allocation", AllocationPolicy),
        ("policy_learning", LearningPolicy),
        ("policy_spill", SpillPolicy),
        ("policy_reset", ResetPolicy),
    ],
)
def test_every_policy_may_be_given_by_its_name_in_any_case(field, enum_type):
    extra = {"cycles_before_initialization": 2, "overallocation_limit": 1.0}  # so that every member is valid
    for member in enum_type:
        for name in (member.value, member.value.lower(), member):
            assert getattr(WorkspaceConfig(**{field: name}, **extra), field) is member


def test_a_configuration_is_frozen_and_circular_only_when_reset_at_the_end_of_its_buffer():
    cfg = WorkspaceConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.initial_size = 10
    assert not cfg.circular
    assert WorkspaceConfig(policy_reset=ResetPolicy.ENDOFBUFFER_REACHED, overallocation_limit=1.0).circular


@pytest.fixture
def restored_switches():
    mode, sites = STATE.debug_mode, STATE.track_sites
    yield
    STATE.debug_mode, STATE.track_sites = mode, sites


@pytest.mark.usefixtures("restored_switches")
def test_the_debug_mode_is_set_by_member_or_name_and_a_bad_one_names_the_choices():
    for mode in DebugMode:
        set_debug_mode(mode.value.lower())
        assert get_debug_mode() is mode is STATE.debug_mode
    with pytest.raises(WorkspaceConfigError) as error:
        set_debug_mode("VERBOSE")
    assert str(error.value) == "debug mode 'VERBOSE': use one of DISABLED, SPILL_EVERYTHING, BYPASS_EVERYTHING"
    assert get_debug_mode() is DebugMode.BYPASS_EVERYTHING  # the last good one stays
    for name in str(error.value).split("use one of ")[1].split(", "):  # each choice the error offers runs
        set_debug_mode(name)
        assert get_debug_mode().name == name


@pytest.mark.usefixtures("restored_switches")
def test_allocation_site_tracking_is_a_process_wide_switch():
    track_allocation_sites()
    assert STATE.track_sites is True
    track_allocation_sites(False)
    assert STATE.track_sites is False
    track_allocation_sites(1)
    assert STATE.track_sites is True
    with pytest.raises(TypeError, match=r"track_allocation_sites\(enabled='False'\): True or False"):
        track_allocation_sites("False")  # a true string: it switched tracking on
    assert STATE.track_sites is True
