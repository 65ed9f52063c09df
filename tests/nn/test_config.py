"""kit.nn.config: a network's configuration is one validated value that round-trips through JSON
(what a model file and a Spark executor receive), and every bad field is refused naming it."""

import json

import pytest

from kit.nn import Network, lenet, mlp
from kit.nn.config import FORMAT, NetworkConfig, NetworkConfigError

BASE = mlp(4, hidden=(3,), n_out=2).configuration


@pytest.mark.parametrize(
    "make",
    [lambda: mlp(4, hidden=(3,), n_out=2), lambda: mlp(8, hidden=(5, 5), n_out=3, activation="tanh", seed=7),
     lambda: lenet(size=12), lambda: mlp(4, hidden=(3,), n_out=2, dtype="float16", master_dtype="float32",
                                         loss_scale="dynamic")],
    ids=["mlp", "tanh-mlp", "lenet", "mixed-precision"],
)  # fmt: skip
def test_a_configuration_round_trips_through_json_and_builds_the_same_network(make):
    cfg = make().configuration
    text = cfg.to_json()
    assert json.loads(text)["format"] == FORMAT
    again = NetworkConfig.from_json(text)
    assert again == cfg and Network.from_config(again).configuration == cfg
    assert NetworkConfig.from_dict(cfg) is cfg


def test_a_float32_configuration_writes_no_mixed_precision_fields():
    data = BASE.to_dict()
    assert "master_dtype" not in data and "loss_scale" not in data
    assert isinstance(data["input_shape"], list) and isinstance(data["layers"], list)


def test_replace_makes_a_checked_variant():
    variant = BASE.replace(training_workspace_mode="NONE")
    assert variant.training_workspace_mode == "NONE" and BASE.training_workspace_mode == "SEPARATE"
    with pytest.raises(NetworkConfigError, match="training_workspace_mode='SOME': use one of NONE, SINGLE, SEPARATE"):
        BASE.replace(training_workspace_mode="SOME")


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("layers", [], "needs at least one layer"),
        ("layers", [{"n_out": 3}], "each a dict with a 'type'"),
        ("input_shape", (4, 0), r"input_shape=\(4, 0\): every dimension must be a positive integer"),
        ("input_shape", (True,), "every dimension must be a positive integer"),
        ("loss", "mse", "loss='mse': must be a dict with a 'type'"),
        ("l2", -0.1, "l2=-0.1: must be a finite number >= 0"),
        ("l2", float("nan"), "l2=nan"),
        ("l2", True, "l2=True: must be a finite number >= 0"),
        ("seed", -1, "seed=-1: must be an integer >= 0"),
        ("dtype", "int32", "NetworkConfig.dtype='int32'"),
        ("inference_workspace_mode", "ALL", "use one of NONE, SINGLE, SEPARATE"),
        ("format", "kit.Network/0", "this kit reads 'kit.Network/1'"),
    ],
)
def test_a_bad_field_is_refused_naming_it(field, value, said):
    with pytest.raises(NetworkConfigError, match=said):
        BASE.replace(**{field: value})
    assert issubclass(NetworkConfigError, ValueError)


def test_a_dictionary_with_unknown_or_missing_fields_is_refused_naming_them():
    with pytest.raises(NetworkConfigError, match=r"unknown field\(s\) \['colour'\]"):
        NetworkConfig.from_dict({**BASE.to_dict(), "colour": "red"})
    data = BASE.to_dict()
    del data["loss"]
    with pytest.raises(NetworkConfigError, match="loss"):
        NetworkConfig.from_dict(data)
    with pytest.raises(NetworkConfigError, match="a network configuration is a dict, got list"):
        NetworkConfig.from_dict([1, 2])
