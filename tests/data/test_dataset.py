"""kit.data.dataset: DataSet's label forms and refusals, split/take/detach/to, and ArrayIterator's
epochs (more in tests/data/test_data.py: one-hot checks, coverage of every example, views)."""

import re

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, DataSet


def numbered(n=10, classes=3):
    """Feature row i is [2i, 2i+1], so every example can be found again by its first feature."""
    return DataSet(np.arange(2.0 * n).reshape(n, 2), np.arange(n) % classes, num_classes=classes)


def test_a_label_column_means_the_same_for_ints_and_floats():
    as_int = DataSet(np.zeros((3, 2)), np.array([[0], [1], [1]]))
    as_float = DataSet(np.zeros((3, 2)), np.array([[0.0], [1.0], [1.0]]))
    assert as_int.labels.shape == as_float.labels.shape == (3, 1)
    assert as_int.labels.numpy().tolist() == as_float.labels.numpy().tolist()


def test_rows_without_num_classes_are_regression_targets_kept_as_given():
    targets = np.array([[0.5, 1.5], [2.0, -3.0]])
    np.testing.assert_array_equal(DataSet(np.zeros((2, 2)), targets).labels.numpy(), targets)
    column = DataSet(np.zeros((2, 2)), np.array([[0.5], [7.0]]))  # one target per example, not classes
    assert column.labels.numpy().tolist() == [[0.5], [7.0]] and column.num_classes == 1
    classes = DataSet(np.zeros((2, 2)), np.array([[2], [0]]), num_classes=3)  # a column of classes: one-hot
    assert classes.labels.numpy().tolist() == [[0, 0, 1], [1, 0, 0]]


def test_whole_number_features_take_the_default_float_dtype_and_floats_keep_theirs():
    assert DataSet(np.zeros((2, 2), np.int32), [0, 1]).features.dtype == kit.backend.get_default_dtype()
    half = DataSet(np.zeros((2, 2), np.float16), [0, 1])
    assert half.features.dtype == half.labels.dtype == np.float16  # the labels follow the features


@pytest.mark.parametrize(
    ("features", "labels", "kwargs", "error", "message"),
    [
        (
            np.zeros((2, 2)),
            np.array([[np.nan, 1.0], [2.0, 3.0]]),
            {},
            ValueError,
            r"labels contain NaN or infinity \(1 values; first at index \[0, 0\]\)",
        ),
        (np.zeros((2, 2)), np.eye(2), {"num_classes": 3}, ValueError, "labels have 2 columns but num_classes=3"),
        (np.zeros((2, 2)), 3, {}, ValueError, "got a scalar"),
        (np.zeros((2, 2)), np.zeros((2, 2, 2)), {}, ValueError, r"got shape \(2, 2, 2\)"),
        (np.array([["a", "b"]]), [0], {}, TypeError, "features must be numbers, got dtype <U1"),
        (np.zeros((1, 2)), ["x"], {}, TypeError, "labels must be numbers, got dtype <U1"),
    ],
)
def test_bad_data_is_refused_naming_what_is_wrong(features, labels, kwargs, error, message):
    with pytest.raises(error, match=message):
        DataSet(features, labels, **kwargs)


def test_split_is_seeded_disjoint_and_complete():
    ds = numbered(10)
    first, rest = ds.split(0.3, seed=1)
    assert (first.num_examples, rest.num_examples) == (3, 7) and len(ds) == 10
    ids = np.concatenate([first.features.numpy()[:, 0], rest.features.numpy()[:, 0]])
    assert sorted(ids.tolist()) == [2.0 * i for i in range(10)]
    again, _ = ds.split(0.3, seed=1)
    np.testing.assert_array_equal(again.features.numpy(), first.features.numpy())
    other, _ = ds.split(0.3, seed=2)
    assert other.features.numpy()[:, 0].tolist() != first.features.numpy()[:, 0].tolist()
    for bad in (0, 1.0, -0.5, float("nan"), "0.3", True):
        with pytest.raises(
            ValueError, match=rf"split\(fraction={re.escape(repr(bad))}\): must be a finite number in \(0, 1\)"
        ):
            ds.split(bad)
    with pytest.raises(
        ValueError, match=r"fraction=0.01\) of 10 examples leaves 0 in the first part and 10 in the rest"
    ):
        ds.split(0.01)
    first, _ = ds.split(0.1)  # the remedy's smallest fraction gives each part an example
    assert first.num_examples == 1


def test_take_keeps_features_and_labels_together_in_the_order_given():
    ds = numbered(6)
    picked = ds.take([4, 1])
    assert picked.features.numpy().tolist() == [[8.0, 9.0], [2.0, 3.0]]
    assert picked.labels.numpy().argmax(axis=1).tolist() == [1, 1]  # 4 % 3, 1 % 3
    assert repr(picked) == "DataSet(2 examples, features (2,), 3 classes)"


def test_take_inside_a_workspace_makes_heap_arrays_that_outlive_it():
    ds = numbered(6)
    with kit.get_workspace_for_current_thread(name="TAKE_WS"):
        picked = ds.take([0, 5])
    assert not picked.features.is_attached and picked.features.numpy()[:, 0].tolist() == [0.0, 10.0]


def test_detach_copies_a_batch_out_of_its_workspace():
    with kit.get_workspace_for_current_thread(name="DETACH_WS"):
        inside = DataSet(kit.ones((2, 3)), kit.asarray(np.eye(2)))
        assert inside.features.is_attached
        kept = inside.detach()
    assert not kept.features.is_attached and not kept.labels.is_attached
    assert float(kept.features.sum()) == 6.0 and kept.labels.numpy().tolist() == [[1, 0], [0, 1]]


def test_to_another_device_moves_both_arrays_and_is_itself_when_already_there(host_devices):
    ds = numbered(4)
    assert ds.to(ds.device) is ds
    target = kit.Device(f"cpu:{host_devices - 1}")
    moved = ds.to(target)
    assert moved.device is target and moved.labels.device is target
    np.testing.assert_array_equal(moved.features.numpy(), ds.features.numpy())


def test_array_iterator_takes_a_tuple_and_refuses_a_bad_batch_size():
    it = ArrayIterator((np.zeros((5, 2)), [0, 1, 0, 1, 0]), 2, drop_last=True)
    assert len(it) == 2 and [b.num_examples for b in it] == [2, 2]
    assert len(ArrayIterator(numbered(5), 2)) == 3
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match=rf"ArrayIterator\(batch_size={bad!r}\): must be a whole number >= 1"):
            ArrayIterator(numbered(5), bad)


def test_a_shuffled_iterator_draws_a_new_order_each_epoch_and_the_same_orders_again():
    def orders(it, epochs=3):
        return [np.concatenate([b.features.numpy()[:, 0] for b in it]).tolist() for _ in range(epochs)]

    ds = numbered(12)
    first = orders(ArrayIterator(ds, 5, shuffle=True, seed=7))
    assert len({tuple(o) for o in first}) == 3  # each epoch its own order
    assert first == orders(ArrayIterator(ds, 5, shuffle=True, seed=7))  # seeded by (seed, epoch)
    assert orders(ArrayIterator(ds, 5), 1)[0] == [2.0 * i for i in range(12)]  # unshuffled: as given
