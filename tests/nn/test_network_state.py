"""kit.nn.network_state: a Network's state as values and files. save/load round-trips exactly and
refuses a tampered or broken file, a save leaves no temporary, and state from another
architecture is refused."""

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, load_digits
from kit.nn import Adam, ModelFileError, Network, mlp


@pytest.fixture(scope="module")
def digits():
    return load_digits()


def test_save_load_round_trips_exactly_and_refuses_tampering(digits, tmp_path):
    train, test = digits
    net = mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2))
    net.fit(ArrayIterator(train, batch_size=64), epochs=1)
    path = tmp_path / "net.npz"
    net.save(path)
    back = Network.load(path)
    np.testing.assert_array_equal(back.params().numpy(), net.params().numpy())
    np.testing.assert_array_equal(back.updater_state["m"].numpy(), net.updater_state["m"].numpy())
    np.testing.assert_array_equal(back.output(test.features).numpy(), net.output(test.features).numpy())
    assert back.iteration == net.iteration and back.config() == net.config()
    # continued training matches too (updater state restored)
    net.fit(ArrayIterator(train, batch_size=64), epochs=1)
    back.fit(ArrayIterator(train, batch_size=64), epochs=1)
    np.testing.assert_array_equal(back.params().numpy(), net.params().numpy())

    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["params"] = arrays["params"].copy()
    arrays["params"][3] += 1.0
    tampered = tmp_path / "tampered.npz"
    np.savez(tampered, **arrays)
    with pytest.raises(ModelFileError, match="does not match its SHA-256"):
        Network.load(tampered)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ModelFileError, match="not a readable kit model file"):
        Network.load(broken)


def test_save_is_atomic_and_leaves_no_temporary(tmp_path):
    net = mlp(8, hidden=(4,), n_out=2)
    net.save(tmp_path / "a.npz")
    net.save(tmp_path / "a.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz"]


def test_state_from_another_architecture_with_the_same_count_is_refused():
    a = mlp(6, hidden=(4,), n_out=3)  # 6*4+4 + 4*3+3 = 43 parameters
    b = mlp(4, hidden=(5,), n_out=3)  # 4*5+5 + 5*3+3 = 43 parameters, another network
    assert a.num_params == b.num_params == 43
    with pytest.raises(ValueError, match="architectures differ"):
        a.copy_state_from(b)


@pytest.mark.parametrize(("updater", "names"), [(Adam(1e-2), ["params", "updater_m", "updater_v"]), (None, None)])
def test_a_config_rebuilds_an_equal_network_and_copy_state_from_makes_it_answer_alike(updater, names):
    from kit.nn import Sgd

    net = mlp(5, hidden=(4,), n_out=3, seed=1, updater=updater or Sgd(0.1))
    names = names or ["params"]  # Sgd keeps no state of its own
    twin = Network.from_config(net.config())
    assert twin.configuration == net.configuration and sorted(net.state_arrays()) == names
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    net.fit_batch(kit.data.DataSet(x, [0, 2], num_classes=3))  # state that a fresh network lacks
    twin.copy_state_from(net)
    for name, array in net.state_arrays().items():
        np.testing.assert_array_equal(twin.state_arrays()[name].numpy(), array.numpy())
    np.testing.assert_array_equal(twin.output(x).numpy(), net.output(x).numpy())
