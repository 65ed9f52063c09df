"""kit.core.device_rng: one generator per device, seeded from `kit.seed`: the same seed draws the same
numbers, different devices draw different ones, and a seed or a reset forgets every generator."""

import numpy as np

import kit
from kit.core.device_rng import seed_for
from kit.core.devices import as_device, set_host_device_count


def _draw(device="cpu:0"):
    return kit.randn((8,), device=device).numpy()


def test_the_same_seed_draws_the_same_numbers_and_another_seed_others():
    kit.seed(3)
    first = _draw()
    kit.seed(3)
    assert (_draw() == first).all()
    kit.seed(4)
    assert not np.allclose(_draw(), first)


def test_a_generator_goes_on_drawing_until_the_next_seed():
    kit.seed(0)
    a, b = _draw(), _draw()
    assert not np.allclose(a, b)
    kit.seed(0)
    assert (_draw() == a).all() and (_draw() == b).all()


def test_each_device_draws_its_own_numbers_reproducibly():
    previous = set_host_device_count(2)
    try:
        kit.seed(1)
        zero, one = _draw("cpu:0"), _draw("cpu:1")
        assert not np.allclose(zero, one)
        kit.seed(1)
        assert (_draw("cpu:1") == one).all() and (_draw("cpu:0") == zero).all()  # in either order
    finally:
        set_host_device_count(previous)


def test_each_device_gets_a_seed_of_its_own_from_the_base_seed():
    previous = set_host_device_count(3)
    try:
        kit.seed(5)
        seeds = [seed_for(as_device(f"cpu:{i}")) for i in range(3)]
        assert len(set(seeds)) == 3 and all(0 <= s < 2**31 for s in seeds)
        kit.seed(6)
        assert seeds[0] != seed_for(as_device("cpu:0"))
    finally:
        set_host_device_count(previous)


def test_a_reset_forgets_the_generators_so_the_draws_start_again():
    kit.seed(9)
    first = _draw()
    kit.state.reset()
    kit.seed(9)
    assert (_draw() == first).all()
