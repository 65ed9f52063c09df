"""Layers: each forward has its backward right beside it (micrograd's habit).

    >>> import numpy as np
    >>> from kit.nn import Dense, Network, ReLU, Sequential
    >>> block = Sequential([Dense(64), ReLU(), Dense(10)])
    >>> net = Network(block, input_shape=(32,))     # builds each layer: (32,) -> (64,) -> (10,)
    >>> net.output(np.ones((5, 32), dtype="float32")).shape
    (5, 10)

The contract (DL4J's, for layer authors): `forward(x, mgr, training)` returns an array made
with `mgr.create(ArrayType.ACTIVATIONS, ...)`; `backward(eps, mgr)` writes parameter
gradients into the views `self.grads[name]` and returns the input gradient made with
`mgr.create(ArrayType.ACTIVATION_GRAD, ...)`. Temporaries come from FF_/BP_WORKING_MEM, so
no layer allocates around kit. The array code is in kit.nn.kernels, written once against `xp`
(NumPy or CuPy) on the raw arrays (`.data`, which checks staleness), with `out=` everywhere.

A layer whose arithmetic is all kit.nn.kernels calls on arrays from `mgr` says `replayable = True`
(kit.nn.replay); a subclass with its own forward or backward is not, unless it says so itself.

Here: the base class, Dense and ReLU (an MLP's layers, and the rule that lets ReLU run in place,
`mark_in_place`), Dropout, Flatten and Sequential; the other activations are in kit.nn.activations.
Shapes are written per example in `build` (no batch axis) and with the batch in comments.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kit.arrays.ndarray import NDArray
from kit.core.arguments import real, whole
from kit.core.shapes import BOOL_DTYPE
from kit.nn.init import check_init
from kit.nn.kernels import (
    copy_into,
    dense_backward_into,
    dense_into,
    dropout_backward_into,
    dropout_into,
    relu_backward_into,
    relu_into,
    uniform_into,
)
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = [
    "HYPER_CHANGES",
    "Dense",
    "Dropout",
    "Flatten",
    "Hyper",
    "Layer",
    "ParamSpec",
    "ReLU",
    "Sequential",
    "hyper_values",
    "layer_from_config",
    "mark_in_place",
    "relu_grad_into",
]

ACT, GRAD, FF, BP = ArrayType.ACTIVATIONS, ArrayType.ACTIVATION_GRAD, ArrayType.FF_WORKING_MEM, ArrayType.BP_WORKING_MEM


class Hyper:
    """A layer's hyperparameter that its recorded steps read (BatchNorm's eps, Dropout's retain),
    checked by `check` whenever it is set (at the layer's call and later alike). Changing one after
    the layer was made drops every recorded plan (HYPER_CHANGES[0] changes), so the next step runs
    the layer's code with the new value instead of replaying the old one; ParallelWrapper hands
    the model's values to its replicas at each fit (`hyper_values`)."""

    def __init__(self, check: Callable[[object], object]) -> None:
        self.check = check

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj, self.slot)

    def __set__(self, obj: object, value: object) -> None:
        value = self.check(value)
        changed = self.slot in obj.__dict__  # the value the layer was made with is no change
        setattr(obj, self.slot, value)
        if changed:
            HYPER_CHANGES[0] = object()


def hyper_values(layer: Layer) -> dict[str, Any]:
    """A layer's `Hyper` values by name (its sublayers' are theirs: see `sublayers()`)."""
    return {
        v.name: getattr(layer, v.name) for c in type(layer).__mro__ for v in vars(c).values() if isinstance(v, Hyper)
    }


# HYPER_CHANGES[0]: a new object whenever any layer's `Hyper` value changed, which a plan compares by
# identity (read as an item, not through a function: a replayed step calls nothing here)
HYPER_CHANGES = [object()]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: its name, shape, how to initialise it, whether L2 applies, and whether
    the updater trains it (BatchNorm's running statistics are parameters that are not)."""

    name: str
    shape: tuple[int, ...]
    init: str  # "xavier" | "he" | "normal:<std>" | "zeros" | "ones"
    fan_in: int = 1
    fan_out: int = 1
    regularize: bool = False
    trainable: bool = True


class Layer:
    """Base class. Subclasses register themselves by class name for save/load."""

    registry: ClassVar[dict[str, type[Layer]]] = {}
    weight_init: str | None = None
    skip_input_grad = False  # set on a network's first layer, whose input gradient is unused

    # Composite layers (Sequential, residual blocks: those with sublayers) scope their
    # sublayers' calls themselves; set per class from whether it defines `sublayers`
    is_composite = False
    # In SEPARATE mode a leaf layer's forward and backward each run in a working-memory scope
    # (FF_/BP_WORKING_MEM, reset after the call). A layer that asks for no working memory in
    # one of them says so here and skips that scope; were it to ask anyway, mgr.create would
    # raise (the working-memory workspace is not open).
    forward_working_memory = True
    backward_working_memory = True
    # kit.nn.replay: every array forward and backward write goes through a kit.nn.kernels call, so a
    # step recorded at that seam replays this layer (composites: when their sublayers are)
    replayable = False
    runs_in_place = False  # ReLU: may write its output over its input (mark_in_place decides)
    # Memory: whether backward reads this layer's output (an activation's y). A layer that does
    # not (Dense, Conv2D, BatchNorm, pooling, Dropout) lets the ReLU after it run in place, over
    # that output (`in_place`, set by the container that holds them: mark_in_place)
    output_read_by_backward = True
    in_place = False
    # Memory (SEPARATE's gradient slots): whether this composite may hand back the gradient it is
    # given once its first layer has read it. Only a container that never reads that gradient again
    # says so, for the composites it holds (Sequential, the Network's body); a composite inside
    # anything else (a user's layer that sends one gradient down two paths) keeps it for its caller
    releases_given_gradient = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        Layer.registry[cls.__name__] = cls
        cls.is_composite = cls.sublayers is not Layer.sublayers
        # a subclass that writes its own forward/backward gets a working-memory scope for it
        # unless it says otherwise itself (Dense's False must not pass to a Dense that allocates)
        for call in ("forward", "backward"):
            flag = f"{call}_working_memory"
            if call in cls.__dict__ and flag not in cls.__dict__:
                setattr(cls, flag, True)
        # likewise a subclass's own forward or backward is not replayed on its parent's promise
        if ("forward" in cls.__dict__ or "backward" in cls.__dict__) and "replayable" not in cls.__dict__:
            cls.replayable = False
        # a subclass's own forward or backward may not honour in_place (or may read its input)
        if ("forward" in cls.__dict__ or "backward" in cls.__dict__) and "runs_in_place" not in cls.__dict__:
            cls.runs_in_place = False
        # and a subclass's own backward may read its output, unless it says it does not
        if "backward" in cls.__dict__ and "output_read_by_backward" not in cls.__dict__:
            cls.output_read_by_backward = True

    def __init__(self) -> None:
        self.params: dict[str, NDArray] = {}
        self.grads: dict[str, NDArray] = {}
        self.input_shape: tuple[int, ...] | None = None
        self.output_shape: tuple[int, ...] | None = None

    # ---- building ------------------------------------------------------------------
    def build(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Record the per-example input shape; return the per-example output shape."""
        self.input_shape = tuple(input_shape)
        self.output_shape = self._output_shape(self.input_shape)
        return self.output_shape

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return input_shape

    def param_specs(self) -> list[ParamSpec]:
        return []

    def sublayers(self) -> list[Layer]:
        return []

    def bind(self, params: dict[str, NDArray], grads: dict[str, NDArray]) -> None:
        """Receive views into the network's flat parameter and gradient buffers."""
        self.params, self.grads = params, grads

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__}

    def describe(self) -> str:
        n = sum(math.prod(s.shape) for s in self.param_specs())
        return f"{type(self).__name__}: {self.input_shape} -> {self.output_shape}, {n:,} params"

    # ---- computing -----------------------------------------------------------------
    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        raise NotImplementedError

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        raise NotImplementedError

    def check_training_batch(self, batch: int, index: int) -> None:
        """Refuse, in words, a training batch of `batch` examples this layer cannot learn from
        (`index`: its place in the network, for the message). Nothing to refuse by default."""

    def _check_input(self, x: NDArray) -> None:
        if x.shape[1:] != self.input_shape:
            raise ValueError(
                f"{type(self).__name__}: expected input of shape (batch, {', '.join(map(str, self.input_shape))}), "
                f"got {x.shape}"
            )


def layer_from_config(cfg: dict[str, Any]) -> Layer:
    cfg = dict(cfg)
    kind = cfg.pop("type")
    cls = Layer.registry.get(kind)
    if cls is None:
        raise ValueError(f"unknown layer type {kind!r} in a saved configuration; known: {sorted(Layer.registry)}")
    if kind in ("Sequential",):
        return cls([layer_from_config(c) for c in cfg["layers"]])  # type: ignore[call-arg]
    if "blocks" in cfg:  # residual blocks hold sub-configs
        return cls.from_config(cfg)  # type: ignore[attr-defined]
    return cls(**cfg)


# ---------------------------------------------------------------------------------------


class Dense(Layer):
    """y = x @ W + b.   x: (B, n_in) -> y: (B, n_out)."""

    forward_working_memory = backward_working_memory = False
    output_read_by_backward = False  # backward reads x, W and eps
    replayable = True

    def __init__(self, n_out: int, weight_init: str = "xavier") -> None:
        super().__init__()
        self.n_out, self.weight_init = whole("Dense", "n_out", n_out, 1), check_init("Dense", weight_init)

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 1:
            raise ValueError(
                f"Dense needs flat inputs (batch, features), got per-example shape {input_shape}; add Flatten()"
            )
        return (self.n_out,)

    def param_specs(self) -> list[ParamSpec]:
        (n_in,) = self.input_shape  # type: ignore[misc]
        return [
            ParamSpec("W", (n_in, self.n_out), self.weight_init, n_in, self.n_out, regularize=True),
            ParamSpec("b", (self.n_out,), "zeros"),
        ]

    def config(self) -> dict[str, Any]:
        return {"type": "Dense", "n_out": self.n_out, "weight_init": self.weight_init}

    # The hot layers read `_data` / `_device` of arrays they own (parameters: views of the
    # network's flat heap buffer; results: fresh from mgr.create) and the checked `.data` once
    # for each array that comes in.
    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        raw = x.data
        if raw.shape[1:] != self.input_shape:
            self._check_input(x)
        self._x = x if mgr.backward_follows else None  # inference keeps nothing of the batch
        dev = x._device
        y = mgr.create(ACT, (raw.shape[0], self.n_out), raw.dtype, dev)  # (B, n_out)
        params = self.params
        dense_into(dev.xp, raw, params["W"]._data, params["b"]._data, y._data)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray | None:
        dev = eps._device
        x, e = self._x.data, eps.data  # (B, n_in), (B, n_out)
        self._x = None  # used up: on the heap (NONE) the input is freed with this step, not the next
        # the network's first layer: nobody needs d loss / d input
        dx = None if self.skip_input_grad else mgr.create(GRAD, x.shape, x.dtype, dev)
        w, grads = self.params["W"]._data, self.grads
        dense_backward_into(dev.xp, x, e, w, grads["W"]._data, grads["b"]._data, None if dx is None else dx._data)
        return dx


class ReLU(Layer):
    """max(x, 0); backward reads the output (where it is positive). It runs in place, over its
    input, where the layer before it does not read its own output in backward (`in_place`, set
    when its container is built: kit.nn.layers.mark_in_place), as PyTorch's ReLU(inplace=True)."""

    forward_working_memory = False
    runs_in_place = True
    replayable = True

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        raw, dev = x.data, x._device
        y = x if self.in_place else mgr.create(ACT, raw.shape, raw.dtype, dev)
        relu_into(dev.xp, raw, y._data)
        self._y = y if mgr.backward_follows else None
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        e = eps._data  # checked in relu_grad_into
        dx = mgr.create(GRAD, e.shape, e.dtype, eps._device)
        y, self._y = self._y, None  # used up, as Dense's input
        relu_grad_into(eps, y, dx, mgr)
        return dx


def relu_grad_into(eps: NDArray, y: NDArray, out: NDArray, mgr: LayerWorkspaceMgr) -> None:
    """out = eps where the ReLU output y was positive, else 0 (the mask in BP working memory)."""
    e, dev = eps.data, eps._device
    mask = mgr.create(BP, e.shape, BOOL_DTYPE, dev)._data
    relu_backward_into(dev.xp, e, y.data, mask, out.data)


class Dropout(Layer):
    """Inverted dropout. `retain` is DL4J's `dropOut(p)`: the probability of *keeping* a unit."""

    output_read_by_backward = False  # backward reads the mask
    replayable = True
    retain = Hyper(
        lambda v: real("Dropout", "retain", v, 0, 1, low_open=True, what=" (the probability of keeping a unit)")
    )

    def __init__(self, retain: float = 0.5) -> None:
        super().__init__()
        self.retain = retain  # checked by its Hyper

    def config(self) -> dict[str, Any]:
        return {"type": "Dropout", "retain": self.retain}

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        xp = x.device.xp
        y = mgr.create(ACT, x.shape, x.dtype, x.device)
        if not training or self.retain == 1.0:
            copy_into(xp, x.data, y.data)
            self._mask = None
            return y
        # uniform draws in working memory (the generators fill float32/float64 only), then the
        # scaled keep-mask in ACTIVATIONS: backward needs it later in the same iteration
        draws = mgr.create(FF, x.shape, np.float64 if x.dtype == np.float64 else np.float32, x.device)
        uniform_into(x.device, draws.data)
        mask = mgr.create(ACT, x.shape, x.dtype, x.device)
        dropout_into(xp, x.data, draws.data, self.retain, mask.data, y.data)
        self._mask = mask if mgr.backward_follows else None
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp = eps.device.xp
        dx = mgr.create(GRAD, eps.shape, eps.dtype, eps.device)
        dropout_backward_into(xp, eps.data, None if self._mask is None else self._mask.data, dx.data)
        self._mask = None  # used up
        return dx


class Flatten(Layer):
    """(B, ...) -> (B, prod(...)): a view, no copy."""

    forward_working_memory = backward_working_memory = False
    replayable = True  # a view: nothing to compute

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (math.prod(input_shape),)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        return x.reshape(x.shape[0], -1)

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        return eps.reshape(eps.shape[0], *self.input_shape)  # type: ignore[misc]


class Sequential(Layer):
    """Layers applied in order; itself a layer, so blocks nest."""

    replayable = True  # computes nothing itself: replayed where each of its layers is

    def __init__(self, layers: list[Layer]) -> None:
        super().__init__()
        if not layers:
            raise ValueError("Sequential needs at least one layer")
        self.layers = list(layers)

    def build(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        self.input_shape = tuple(input_shape)
        shape = self.input_shape
        for layer in self.layers:
            shape = layer.build(shape)
            if layer.is_composite:  # this loop reads no gradient twice: its composites may hand theirs back
                layer.releases_given_gradient = True
        self.output_shape = shape
        mark_in_place(self.layers)
        return shape

    @property  # type: ignore[override]
    def output_read_by_backward(self) -> bool:  # its output is its last layer's
        return self.layers[-1].output_read_by_backward

    def sublayers(self) -> list[Layer]:
        return self.layers

    def config(self) -> dict[str, Any]:
        return {"type": "Sequential", "layers": [layer.config() for layer in self.layers]}

    # call_forward / call_backward for each layer, written out: this loop runs every layer call
    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        separate = mgr.separate
        for layer in self.layers:
            if separate and layer.forward_working_memory and not layer.is_composite:
                with mgr.layer_call():
                    x = layer.forward(x, mgr, training)
            else:
                x = layer.forward(x, mgr, training)
        return x

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        """Each layer's backward, last first; each gradient it made is handed back (mgr.release)
        once the layer below it has read it, and the one given in too where the caller allows it
        (`releases_given_gradient`: a Sequential or the Network holding this one)."""
        separate = mgr.separate
        given, free_given = eps, self.releases_given_gradient
        for layer in reversed(self.layers):
            if separate and layer.backward_working_memory and not layer.is_composite:
                with mgr.layer_call():
                    dx = layer.backward(eps, mgr)
            else:
                dx = layer.backward(eps, mgr)
            if separate and (free_given or eps is not given):
                mgr.release(eps, keep=dx)
            eps = dx
        return eps


def mark_in_place(layers: list[Layer]) -> None:
    """Let each layer that can run in place (ReLU) do so where the layer before it in `layers`
    does not read its own output in backward: its output then serves as both. Never the first
    layer, whose input comes from outside the list (the caller's data, or a block's input that
    another path reads too)."""
    for before, layer in itertools.pairwise(layers):
        if type(layer).runs_in_place:
            layer.in_place = not before.output_read_by_backward


def call_forward(layer: Layer, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
    """Run one layer's forward; in SEPARATE mode a leaf layer gets its own working-memory scope."""
    if layer.is_composite or not mgr.separate or not layer.forward_working_memory:
        return layer.forward(x, mgr, training)
    with mgr.layer_call():
        return layer.forward(x, mgr, training)


def call_backward(layer: Layer, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
    if layer.is_composite or not mgr.separate or not layer.backward_working_memory:
        return layer.backward(eps, mgr)
    with mgr.layer_call():
        return layer.backward(eps, mgr)
