"""A Network's state as values and files: its configuration, its state arrays, copies between
networks, and save/load (.npz with a checked JSON header, never pickle).

    >>> from kit.nn import Dense, Network
    >>> net = Network([Dense(3)], input_shape=(4,), seed=1)
    >>> twin = Network.from_config(net.config())
    >>> twin.configuration == net.configuration, sorted(net.state_arrays())
    (True, ['params', 'updater_m', 'updater_v'])

`NetworkState` is a mixin of kit.nn.network.Network and opens by declaring what it needs from it;
the file format is kit.nn.persistence's.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from kit.arrays.checks import all_finite, check_cast, check_finite
from kit.arrays.ndarray import NDArray
from kit.nn.config import NetworkConfig
from kit.nn.layers import layer_from_config
from kit.nn.losses import loss_from_config
from kit.nn.persistence import ModelFileError, read_model, write_model
from kit.nn.updaters import updater_from_config

if TYPE_CHECKING:
    from kit.nn.layers import Sequential
    from kit.nn.losses import Loss
    from kit.nn.mixed import LossScaler
    from kit.nn.turn_lock import TurnLock
    from kit.nn.updaters import Updater
    from kit.nn.workspace_mgr import WorkspaceMode

__all__ = ["NetworkState"]


class NetworkState:
    """Configuration, state arrays, copies and files of a Network."""

    # needs from its host (kit.nn.network.Network):
    body: Sequential
    input_shape: tuple[int, ...]
    loss: Loss
    loss_scaler: LossScaler | None
    updater: Updater
    updater_state: dict[str, NDArray]
    l2: float
    seed: int
    dtype: np.dtype
    master_dtype: np.dtype
    mixed: bool
    training_workspace_mode: WorkspaceMode
    inference_workspace_mode: WorkspaceMode
    flat_params: NDArray
    flat_master: NDArray  # float32 master weights of a mixed-precision network, else flat_params
    lock: TurnLock
    iteration: int
    epoch: int

    @property
    def configuration(self) -> NetworkConfig:
        """The whole configuration as one validated value (JSON round-trip: `to_json()`)."""
        return NetworkConfig(
            layers=tuple(layer.config() for layer in self.body.layers),
            input_shape=self.input_shape,
            loss=self.loss.config(),
            updater=self.updater.config(),
            l2=self.l2,
            seed=self.seed,
            dtype=self.dtype.name,
            training_workspace_mode=self.training_workspace_mode.value,
            inference_workspace_mode=self.inference_workspace_mode.value,
            master_dtype=self.master_dtype.name if self.mixed else None,
            loss_scale=self.loss_scaler.config() if self.loss_scaler is not None else None,
        )

    def config(self) -> dict[str, Any]:
        """`configuration` as plain JSON types."""
        return self.configuration.to_dict()

    @classmethod
    def from_config(cls, cfg: NetworkConfig | dict[str, Any], device: Any = None) -> Self:
        cfg = NetworkConfig.from_dict(cfg)
        return cls(
            [layer_from_config(c) for c in cfg.layers],
            cfg.input_shape,
            loss=loss_from_config(cfg.loss),
            updater=updater_from_config(cfg.updater),
            l2=cfg.l2,
            seed=cfg.seed,
            dtype=cfg.dtype,
            device=device,
            training_workspace_mode=cfg.training_workspace_mode,
            inference_workspace_mode=cfg.inference_workspace_mode,
            master_dtype=cfg.master_dtype,
            loss_scale=cfg.loss_scale,
        )

    def state_arrays(self) -> dict[str, NDArray]:
        """The arrays that make up the trained state: flat parameters, master weights (mixed
        precision) and updater state. The loss scaler's state is `loss_scaler.state()`."""
        master = {"master": self.flat_master} if self.mixed else {}
        return {"params": self.flat_params, **master, **{f"updater_{k}": v for k, v in self.updater_state.items()}}

    def copy_state_from(self, other: Self) -> None:
        """Copy parameters, updater state and counters from a network of the same configuration."""
        if other is self:
            return
        mine, theirs = self.configuration, other.configuration
        if (mine.layers, mine.input_shape) != (theirs.layers, theirs.input_shape):
            raise ValueError(
                f"copy_state_from: the architectures differ ({_architecture(theirs)} into {_architecture(mine)}); "
                "copy state only between networks built from the same layers"
            )
        ours, source = self.state_arrays(), other.state_arrays()
        if self.mixed != other.mixed:
            raise ValueError(
                f"copy_state_from: one network keeps master weights and the other does not (master_dtype "
                f"{other.master_dtype} for dtype {other.dtype} into {self.master_dtype} for {self.dtype}); build both "
                "with the same dtype and master_dtype, or use set_params() to copy parameters only"
            )
        if sorted(ours) != sorted(source):
            raise ValueError(
                f"copy_state_from: updater {type(other.updater).__name__} keeps state {sorted(source)} but "
                f"{type(self.updater).__name__} needs {sorted(ours)}; use the same updater, or set_params() "
                "to copy parameters only"
            )
        for key, dst in ours.items():  # every value fits before any is copied: a refused copy changes nothing
            _check_state("copy_state_from", key, source[key].data)
            if dst.dtype != source[key].dtype:
                values = source[key].numpy()
                with np.errstate(over="ignore"):
                    check_cast(values, values.astype(dst.dtype), f"copy_state_from: {key}", f" (into {dst.dtype})")
        first, second = sorted((self, other), key=id)  # one order for every pair: two copies the other way round
        with first.lock, second.lock:  # cannot deadlock; save() on either side sees one whole state
            for key, dst in ours.items():
                dst.assign(source[key])
            if self.loss_scaler is not None and other.loss_scaler is not None:
                self.loss_scaler.load_state(other.loss_scaler.state())
            self.iteration, self.epoch = other.iteration, other.epoch

    def save(self, path: str | os.PathLike) -> None:
        """NumPy .npz (no pickle) + JSON header with SHA-256 checks; atomic. Safe while another
        thread trains: the arrays are copied between two iterations."""
        with self.lock:  # fit_batch holds it for a whole iteration: the snapshot is consistent
            arrays = {k: v.numpy().copy() for k, v in self.state_arrays().items()}
            if self.loss_scaler is not None:  # covered by the file's checksums like every array
                arrays["loss_scaler"] = self.loss_scaler.state()
            counters = {"iteration": self.iteration, "epoch": self.epoch}
            config = self.config()
        for key, values in arrays.items():  # load() refuses them: a file that cannot be read back is not written
            _check_state("save", key, values)
        write_model(path, config, arrays, counters)

    @classmethod
    def load(cls, path: str | os.PathLike, device: Any = None) -> Self:
        path = os.fspath(path)
        config, arrays, counters = read_model(path)
        try:
            net = cls.from_config(config, device=device)
        except (ValueError, TypeError, KeyError) as exc:
            raise ModelFileError(f"{path}: the configuration does not build a network ({exc})") from None
        expected = {k: v.shape for k, v in net.state_arrays().items()}
        if net.loss_scaler is not None:
            expected["loss_scaler"] = (3,)
        stored = {k: v.shape for k, v in arrays.items()}
        if expected != stored:
            raise ModelFileError(f"{path}: stored arrays {stored} but the configuration needs {expected}")
        try:
            net.set_params(arrays.pop("params"))
            if net.loss_scaler is not None:
                net.loss_scaler.load_state(arrays.pop("loss_scaler"))
        except ValueError as exc:
            raise ModelFileError(f"{path}: {exc}") from None
        for key, value in arrays.items():  # the master weights after set_params: every stored digit
            net.state_arrays()[key].assign(value)
        net.iteration, net.epoch = counters["iteration"], counters["epoch"]
        return net


def _architecture(cfg: NetworkConfig) -> str:
    return f"input {cfg.input_shape}, layers " + ", ".join(c["type"] for c in cfg.layers)


def _check_state(where: str, key: str, values: Any) -> None:
    """Refuse a state array holding NaN or infinity, naming it: set_params and load refuse one."""
    if not all_finite(values):
        check_finite(
            values,
            key,
            where,
            then="; the network's state is not finite (see fit's errors); nothing was written or copied. Train "
            "again from a saved model, or set_params() finite values",
        )
