"""A workspace's configuration: ND4J's four policies, `WorkspaceConfig`, and the process-wide debug switches.

    >>> import kit
    >>> cfg = kit.WorkspaceConfig(policy_learning="over_time", cycles_before_initialization=3)
    >>> cfg.policy_learning, cfg.circular
    (<LearningPolicy.OVER_TIME: 'OVER_TIME'>, False)
    >>> kit.WorkspaceConfig(policy_learning=kit.LearningPolicy.OVER_TIME)
    Traceback (most recent call last):
    kit.workspaces.workspace.WorkspaceConfigError: WorkspaceConfig: LearningPolicy.OVER_TIME needs ...

AllocationPolicy: room over the learned size; LearningPolicy: when the arena is sized; SpillPolicy:
what happens when an array does not fit; ResetPolicy: scoped or circular. A config is frozen and
checked whole at construction. `DebugMode` and allocation-site tracking are process-wide
(`kit.state.STATE`). Everything here is re-exported by `kit.workspace`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from kit.state import STATE
from kit.workspaces.workspace_errors import WorkspaceConfigError

__all__ = [
    "AllocationPolicy",
    "DebugMode",
    "LearningPolicy",
    "ResetPolicy",
    "SpillPolicy",
    "WorkspaceConfig",
    "get_debug_mode",
    "set_debug_mode",
    "track_allocation_sites",
]


class AllocationPolicy(enum.Enum):
    STRICT = "STRICT"  # exactly the learned/initial size
    OVERALLOCATE = "OVERALLOCATE"  # size * (1 + overallocation_limit)


class LearningPolicy(enum.Enum):
    NONE = "NONE"
    FIRST_LOOP = "FIRST_LOOP"
    OVER_TIME = "OVER_TIME"


class SpillPolicy(enum.Enum):
    FAIL = "FAIL"
    EXTERNAL = "EXTERNAL"
    REALLOCATE = "REALLOCATE"


class ResetPolicy(enum.Enum):
    BLOCK_LEFT = "BLOCK_LEFT"  # scoped: offsets reset when the scope is left
    ENDOFBUFFER_REACHED = "ENDOFBUFFER_REACHED"  # circular: reset when the end is reached


class DebugMode(enum.Enum):
    DISABLED = "DISABLED"
    SPILL_EVERYTHING = "SPILL_EVERYTHING"  # every allocation spills; no learning
    BYPASS_EVERYTHING = "BYPASS_EVERYTHING"  # workspaces do nothing: all on the heap


@dataclass(frozen=True)
class WorkspaceConfig:
    """ND4J's WorkspaceConfiguration, with its defaults. Sizes in bytes."""

    initial_size: int = 0
    min_size: int = 0
    max_size: int = 0  # 0: no cap
    overallocation_limit: float = 0.3
    policy_allocation: AllocationPolicy = AllocationPolicy.OVERALLOCATE
    policy_learning: LearningPolicy = LearningPolicy.FIRST_LOOP
    policy_spill: SpillPolicy = SpillPolicy.EXTERNAL
    policy_reset: ResetPolicy = ResetPolicy.BLOCK_LEFT
    cycles_before_initialization: int = 0

    def __post_init__(self) -> None:
        for field in ("initial_size", "min_size", "max_size", "cycles_before_initialization"):
            value = getattr(self, field)
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
                raise WorkspaceConfigError(f"WorkspaceConfig.{field}={value!r}: must be a whole number >= 0")
        for field, enum_type in (
            ("policy_allocation", AllocationPolicy),
            ("policy_learning", LearningPolicy),
            ("policy_spill", SpillPolicy),
            ("policy_reset", ResetPolicy),
        ):
            value = getattr(self, field)
            if not isinstance(value, enum_type):
                try:  # a name, in any case; None is no policy ("NONE" is LearningPolicy's, named as such)
                    if not isinstance(value, str):
                        raise ValueError(value)
                    object.__setattr__(self, field, enum_type(value.upper()))
                except ValueError:
                    names = ", ".join(m.name for m in enum_type)
                    raise WorkspaceConfigError(f"WorkspaceConfig.{field}={value!r}: use one of {names}") from None
        lim = self.overallocation_limit
        number = isinstance(lim, int | float | np.integer | np.floating) and not isinstance(lim, bool)
        if not number or not math.isfinite(lim) or lim < 0:
            raise WorkspaceConfigError(f"WorkspaceConfig.overallocation_limit={lim!r}: must be a finite number >= 0")
        object.__setattr__(self, "overallocation_limit", float(lim))
        if self.max_size and self.min_size > self.max_size:
            raise WorkspaceConfigError(
                f"WorkspaceConfig: min_size={self.min_size} is larger than max_size={self.max_size}"
            )
        if self.policy_learning is LearningPolicy.OVER_TIME and self.cycles_before_initialization < 1:
            raise WorkspaceConfigError(
                "WorkspaceConfig: LearningPolicy.OVER_TIME needs cycles_before_initialization >= 1 "
                f"(got {self.cycles_before_initialization}); the arena is sized after that many cycles"
            )
        if self.circular and self.policy_allocation is AllocationPolicy.OVERALLOCATE and lim < 1.0:
            raise WorkspaceConfigError(
                f"WorkspaceConfig: a circular workspace (ENDOFBUFFER_REACHED) with OVERALLOCATE needs "
                f"overallocation_limit >= 1.0 (ND4J's rule: room for at least two cycles), got {lim}"
            )

    @property
    def circular(self) -> bool:
        return self.policy_reset is ResetPolicy.ENDOFBUFFER_REACHED


STATE.debug_mode = DebugMode.DISABLED  # the process-wide debug mode and allocation-site tracking live in STATE


def set_debug_mode(mode: DebugMode | str) -> None:
    """ND4J's workspace debug modes, process-wide: DISABLED, SPILL_EVERYTHING, BYPASS_EVERYTHING."""
    if not isinstance(mode, DebugMode):
        try:
            mode = DebugMode(str(mode).upper())
        except ValueError:
            raise WorkspaceConfigError(
                f"debug mode {mode!r}: use one of {', '.join(m.name for m in DebugMode)}"
            ) from None
    STATE.debug_mode = mode


def get_debug_mode() -> DebugMode:
    return STATE.debug_mode


def track_allocation_sites(enabled: bool = True) -> None:
    """Debug switch: remember where (file:line) each workspace array was allocated, and
    print it in stale-array errors. Costs a stack walk per allocation."""
    if not isinstance(enabled, bool | int | np.bool_):  # "False" is a true string; 0 and 1 read as they say
        raise TypeError(f"track_allocation_sites(enabled={enabled!r}): True or False")
    STATE.track_sites = bool(enabled)
