"""Datasets that ship with the course's dependencies, so nothing is downloaded at run time.

:func:`load_digits` gives scikit-learn's bundled handwritten digits (1,797 real 8 × 8 scans,
UCI's "Optical Recognition of Handwritten Digits", stored inside the scikit-learn package) as
image tensors, with one fixed train/test split that every notebook, test and grader shares.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

SPLITS = ("train", "test")
TEST_SIZE = 360  # of 1,797: 20 %, and the same 360 images for everyone
SPLIT_SEED = 2024  # numpy's PCG64 permutation of this seed is stable across numpy versions
PIXEL_MAX = 16.0  # the scans hold counts 0-16 (on pixels in a 4 × 4 block of the 32 × 32 original)


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) uint8, labels (1797,), the fixed permutation whose first TEST_SIZE are the test split)."""
    table = _bundled_table()
    images = table[:, :-1].astype(np.uint8).reshape(-1, 8, 8)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(images))
    return images, table[:, -1].astype(np.int64), order


def _bundled_table() -> np.ndarray:
    """scikit-learn's digits table (1797 rows: 64 pixels, then the label), read from the file inside the
    package without importing scikit-learn (1.3 s of imports in every process that loads the digits);
    through ``sklearn.datasets.load_digits`` should the file have moved."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise ModuleNotFoundError("the digits come with scikit-learn: pip install scikit-learn")
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    if path.is_file():
        return np.loadtxt(path, delimiter=",")
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    return np.column_stack([bunch.data, bunch.target])


def load_digits(split: str = "train", *, size: int = 8, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """One split of the digits: ``(images, labels)``.

    images: (n, 1, size, size) in ``dtype``, values in [0, 1]; labels: (n,) int64 in 0-9.
    ``split``: "train" (1,437 images) or "test" (360); the split is fixed.
    ``size``: 8 (the scans as they are) or more, upsampled bilinearly (16 gives a CNN room for two poolings).
    ``device``: where the tensors go (default: the CPU).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not isinstance(size, int) or size < 8:
        raise ValueError(f"size must be an int of at least 8 (the scans are 8 × 8), got {size!r}")
    images, labels, order = _digits()
    chosen = order[:TEST_SIZE] if split == "test" else order[TEST_SIZE:]
    x = torch.from_numpy(images[chosen]).to(torch.float32).div_(PIXEL_MAX).unsqueeze(1)
    if size != 8:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False).clamp_(0.0, 1.0)
    y = torch.from_numpy(labels[chosen])
    return x.to(device=device, dtype=dtype), y.to(device=device)


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """logits: (n, classes), labels: (n,) -> the fraction of rows whose largest logit is the label."""
    if logits.ndim != 2 or logits.shape[0] != labels.shape[0]:
        raise ValueError(f"logits must be (n, classes) for {labels.shape[0]} labels, got shape {tuple(logits.shape)}")
    return float((logits.argmax(dim=1).cpu() == labels.cpu()).float().mean())
