"""kit.nn.init: each weight initialisation draws DL4J's distribution, in buffer order, from the seed."""

import math

import numpy as np
import pytest

from kit.nn import ParamSpec
from kit.nn.init import initial_values

N = 200_000  # draws per check: the sample's standard deviation lies within 1 % of the true one


@pytest.mark.parametrize(
    ("init", "fan_in", "fan_out", "std"),
    [
        ("xavier", 30, 10, math.sqrt(2 / 40)),  # DL4J XAVIER: N(0, 2 / (fan_in + fan_out))
        ("he", 30, 10, math.sqrt(2 / 30)),  # DL4J RELU (He): N(0, 2 / fan_in)
        ("relu", 50, 1, math.sqrt(2 / 50)),
        ("normal:0.01", 1, 1, 0.01),  # d2l's N(0, 0.01)
        ("normal:2.5", 7, 3, 2.5),
    ],
)
def test_each_random_initialisation_draws_its_distribution(init, fan_in, fan_out, std):
    values = initial_values([ParamSpec("W", (N,), init, fan_in=fan_in, fan_out=fan_out)], seed=0)
    assert values.dtype == np.float64 and values.shape == (N,)
    assert abs(values.mean()) < 0.01 * std
    assert values.std() == pytest.approx(std, rel=0.01)


@pytest.mark.parametrize(("init", "value"), [("zeros", 0.0), ("ones", 1.0)])
def test_constant_initialisations_fill_their_value(init, value):
    assert (initial_values([ParamSpec("b", (2, 3), init)], seed=0) == value).all()


def test_the_values_lie_in_buffer_order_and_the_seed_decides_them():
    specs = [ParamSpec("W", (3, 4), "he", fan_in=3), ParamSpec("b", (4,), "ones"), ParamSpec("V", (5,), "xavier")]
    values = initial_values(specs, seed=7)
    assert values.shape == (12 + 4 + 5,)
    assert (values[12:16] == 1.0).all() and (values[:12] != 0).all() and (values[16:] != 0).all()
    assert (initial_values(specs, seed=7) == values).all()
    assert not np.allclose(initial_values(specs, seed=8), values)


def test_an_unknown_initialisation_is_refused_naming_it_and_the_choices():
    with pytest.raises(ValueError, match=r"unknown weight initialisation 'glorot': use 'xavier', 'he'"):
        initial_values([ParamSpec("W", (2,), "glorot")], seed=0)
