"""NetworkConfig: a network's whole configuration as one validated, JSON-round-tripping value.

    >>> from kit.nn import Network, mlp
    >>> from kit.nn.config import NetworkConfig
    >>> net = mlp(64, hidden=(128,), n_out=10)
    >>> cfg = net.configuration
    >>> cfg
    NetworkConfig(layers=({'type': 'Dense', 'n_out': 128, 'weight_init': 'he'}, ...), input_shape=(64,), ...)
    >>> text = cfg.to_json()                         # what a model file and a Spark executor receive
    >>> text
    '{"dtype": "float32", "format": "kit.Network/1", ..., "training_workspace_mode": "SEPARATE", ...}'
    >>> Network.from_config(NetworkConfig.from_json(text)).configuration == cfg
    True
    >>> cfg.replace(training_workspace_mode="NONE")  # a variant (ParallelWrapper's replicas)
    NetworkConfig(..., training_workspace_mode='NONE', inference_workspace_mode='SEPARATE', ...)

Layers, loss and updater are kept as their JSON dictionaries (each layer's `config()`), so a
configuration never holds live objects and travels as text: no pickle anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from kit.core import backend
from kit.nn.mixed import LossScaler, master_dtype_for

__all__ = ["FORMAT", "NetworkConfig", "NetworkConfigError"]

FORMAT = "kit.Network/1"
_MODES = ("NONE", "SINGLE", "SEPARATE")


class NetworkConfigError(ValueError):
    """A network configuration with a missing, unknown or mistyped field."""


def _typed(name: str, value: Any, kinds: tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise NetworkConfigError(f"NetworkConfig.{name}={value!r}: must be {what}")
    return value


@dataclass(frozen=True)
class NetworkConfig:
    layers: tuple[dict[str, Any], ...]
    input_shape: tuple[int, ...]
    loss: dict[str, Any]
    updater: dict[str, Any]
    l2: float = 0.0
    seed: int = 0
    dtype: str = "float32"
    training_workspace_mode: str = "SEPARATE"
    inference_workspace_mode: str = "SEPARATE"
    master_dtype: str | None = None  # mixed precision: the updater's copy (None: the same as dtype)
    loss_scale: float | dict[str, Any] | None = None  # a fixed scale, or a dynamic LossScaler's config()
    format: str = FORMAT

    def __post_init__(self) -> None:
        layers = _typed("layers", self.layers, (list, tuple), "a list of layer configurations")
        if not layers or not all(isinstance(c, dict) and isinstance(c.get("type"), str) for c in layers):
            raise NetworkConfigError(
                f"NetworkConfig.layers: needs at least one layer, each a dict with a 'type', got {layers!r}"
            )
        object.__setattr__(self, "layers", tuple(dict(c) for c in layers))
        shape = _typed("input_shape", self.input_shape, (list, tuple), "a tuple of positive integers")
        if not shape or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
            raise NetworkConfigError(
                f"NetworkConfig.input_shape={tuple(shape)!r}: every dimension must be a positive integer "
                "(the shape of one example, without the batch axis)"
            )
        object.__setattr__(self, "input_shape", tuple(shape))
        for name in ("loss", "updater"):
            value = getattr(self, name)
            if not isinstance(value, dict) or not isinstance(value.get("type"), str):
                raise NetworkConfigError(f"NetworkConfig.{name}={value!r}: must be a dict with a 'type'")
        l2 = _typed("l2", self.l2, (int, float), "a finite number >= 0")
        if not math.isfinite(l2) or l2 < 0:
            raise NetworkConfigError(f"NetworkConfig.l2={l2!r}: must be a finite number >= 0")
        object.__setattr__(self, "l2", float(l2))
        if _typed("seed", self.seed, (int,), "an integer >= 0") < 0:
            raise NetworkConfigError(f"NetworkConfig.seed={self.seed!r}: must be an integer >= 0 (NumPy's seeds are)")
        try:
            dt = backend.resolve_dtype(self.dtype, floating_only=True)
        except TypeError as exc:
            raise NetworkConfigError(f"NetworkConfig.dtype={self.dtype!r}: {exc}") from None
        object.__setattr__(self, "dtype", dt.name)
        self._check_precision(dt)
        for name in ("training_workspace_mode", "inference_workspace_mode"):
            value = getattr(self, name)
            value = getattr(value, "value", value)
            if value not in _MODES:
                raise NetworkConfigError(f"NetworkConfig.{name}={value!r}: use one of {', '.join(_MODES)}")
            object.__setattr__(self, name, value)
        if self.format != FORMAT:
            raise NetworkConfigError(f"NetworkConfig.format={self.format!r}: this kit reads {FORMAT!r}")

    def _check_precision(self, dt: Any) -> None:
        """master_dtype (never narrower than dtype; equal means None) and loss_scale (normalised
        to a number or the dynamic scaler's settings), checked as Network checks them."""
        try:
            master = master_dtype_for(dt, self.master_dtype, backend.resolve_dtype, "NetworkConfig")
            scaler = LossScaler.from_spec(self.loss_scale, "NetworkConfig")
        except (ValueError, TypeError) as exc:
            raise NetworkConfigError(str(exc)) from None
        object.__setattr__(self, "master_dtype", None if master == dt else master.name)
        object.__setattr__(self, "loss_scale", None if scaler is None else scaler.config())

    # ---- conversions ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (lists for tuples): what `json.dumps` writes. The mixed-precision
        fields appear only when set, so a float32 network's JSON is what it always was."""
        out = dataclasses.asdict(self)
        out["layers"] = [dict(c) for c in self.layers]
        out["input_shape"] = list(self.input_shape)
        for name in ("master_dtype", "loss_scale"):
            if out[name] is None:
                del out[name]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> NetworkConfig:
        if isinstance(data, NetworkConfig):
            return data
        if not isinstance(data, dict):
            raise NetworkConfigError(f"a network configuration is a dict, got {type(data).__name__}: {data!r:.80}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise NetworkConfigError(f"network configuration: unknown field(s) {unknown}; known: {sorted(names)}")
        missing = sorted(n for n in ("layers", "input_shape", "loss", "updater") if n not in data)
        if missing:
            raise NetworkConfigError(f"network configuration: missing field(s) {missing}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> NetworkConfig:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise NetworkConfigError(f"network configuration: not valid JSON ({exc})") from None

    def replace(self, **changes: Any) -> NetworkConfig:
        return dataclasses.replace(self, **changes)
