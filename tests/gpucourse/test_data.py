"""gpucourse.data: the digits bundled with scikit-learn, one fixed split, nothing downloaded."""

import numpy as np
import pytest
import torch

from gpucourse import data


def test_the_split_is_fixed_disjoint_and_covers_every_digit():
    train_x, train_y = data.load_digits("train")
    test_x, test_y = data.load_digits("test")
    assert (train_x.shape, test_x.shape) == ((1437, 1, 8, 8), (360, 1, 8, 8))
    assert train_y.dtype == torch.int64 and set(train_y.tolist()) == set(test_y.tolist()) == set(range(10))
    assert float(train_x.min()) == 0.0 and float(train_x.max()) == 1.0
    _, _, order = data._digits()
    assert len(set(order[:360]) & set(order[360:])) == 0 and sorted(order) == list(range(1797))
    # The same 360 test images on every machine: the first labels of the split, written down once.
    assert test_y[:10].tolist() == [4, 2, 0, 3, 7, 0, 2, 0, 7, 5]


def test_the_images_are_scikit_learns_digits():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images, labels, order = data._digits()
    assert np.array_equal(images, bunch.images.astype(np.uint8)) and np.array_equal(labels, bunch.target)
    test_x, test_y = data.load_digits("test", dtype=torch.float64)
    assert test_x.dtype == torch.float64
    assert np.allclose(test_x[:, 0].numpy(), bunch.images[order[:360]] / 16.0) and np.array_equal(test_y.numpy(), bunch.target[order[:360]])


def test_upsampled_images_keep_their_range_and_labels():
    x16, y16 = data.load_digits("test", size=16)
    x8, y8 = data.load_digits("test")
    assert x16.shape == (360, 1, 16, 16) and torch.equal(y16, y8)
    assert 0.0 <= float(x16.min()) and float(x16.max()) <= 1.0
    assert torch.allclose(x16.mean(dim=(2, 3)), x8.mean(dim=(2, 3)), atol=0.03)  # the same picture, finer


@pytest.mark.parametrize("kwargs, message", [({"split": "validation"}, "split must be one of"), ({"size": 4}, "at least 8"),
                                             ({"size": 12.0}, "must be an int")])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        data.load_digits(**kwargs)


def test_accuracy_counts_the_rows_whose_largest_logit_is_the_label():
    logits = torch.tensor([[0.1, 2.0], [3.0, -1.0], [0.0, 0.5], [1.0, 0.0]])
    assert data.accuracy(logits, torch.tensor([1, 0, 0, 0])) == 0.75
    with pytest.raises(ValueError, match=r"\(n, classes\)"):
        data.accuracy(torch.zeros(3), torch.zeros(3, dtype=torch.long))
