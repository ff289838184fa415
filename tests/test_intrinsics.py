"""gpucourse.intrinsics: the 16 x 16 intrinsic, and the check that its calls did a matmul's work;
gpucourse.check's njit_only and mma_calls, as a notebook uses them."""

from __future__ import annotations

import linecache

import numpy as np
import pytest
from numba import njit

from gpucourse import check, intrinsics
from gpucourse.intrinsics import check_log, logged_call, mma_16x16, new_key

RNG = np.random.default_rng(7)


@njit
def packed(a, b, mma):
    """A tensorized matmul for the tests: zero-padded copies, one mma call per pair of tiles."""
    m, k = a.shape
    n = b.shape[1]
    mp, kp, np_ = (m + 15) // 16 * 16, (k + 15) // 16 * 16, (n + 15) // 16 * 16
    ap, bp, cp = np.zeros((mp, kp), a.dtype), np.zeros((kp, np_), a.dtype), np.zeros((mp, np_), a.dtype)
    ap[:m, :k] = a
    bp[:k, :n] = b
    for i in range(0, mp, 16):
        for j in range(0, np_, 16):
            for p in range(0, kp, 16):
                mma(ap[i:i + 16, p:p + 16].copy(), bp[p:p + 16, j:j + 16].copy(), cp[i:i + 16, j:j + 16])
    return cp[:m, :n].copy()


@njit
def extra_zero_call(a, b, mma):
    out = packed(a, b, mma)
    zero = np.zeros((16, 16), a.dtype)
    mma(zero, zero, np.zeros((16, 16), a.dtype))
    return out


def inputs(m, k, n, dtype=np.float32):
    return RNG.uniform(-1, 1, (m, k)).astype(dtype), RNG.uniform(-1, 1, (k, n)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mma_accumulates_a_tile_product(dtype):
    a, b = inputs(16, 16, 16, dtype)
    c = np.ones((16, 16), dtype)
    mma_16x16(a, b, c)
    np.testing.assert_allclose(c, 1 + a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_mma_refuses_other_shapes():
    with pytest.raises(ValueError, match="16 x 16 tiles only"):
        mma_16x16(np.zeros((8, 16), np.float32), np.zeros((16, 16), np.float32), np.zeros((8, 16), np.float32))


@pytest.mark.parametrize("shape", [(40, 50, 70), (16, 16, 16), (1, 1, 1)])
def test_a_tensorized_matmul_passes_with_its_exact_count(shape):
    a, b = inputs(*shape)
    key = new_key(1)
    output, calls = logged_call(packed, a, b, key)
    assert check_log(a, b, output, calls, key) == np.prod([-(-size // 16) for size in shape])
    assert intrinsics._log == [] and intrinsics._key == [None], "the log is left clean"
    np.testing.assert_allclose(packed(a, b, mma_16x16), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_an_extra_call_on_zero_tiles_fails():
    a, b = inputs(20, 20, 20)
    key = new_key(2)
    output, calls = logged_call(extra_zero_call, a, b, key)
    with pytest.raises(AssertionError, match="1 call\\(s\\) on tiles that are not such a pair"):
        check_log(a, b, output, calls, key)


def test_a_missing_pair_fails():
    a, b = inputs(20, 20, 20)
    key = new_key(3)
    output, calls = logged_call(packed, a, b, key)
    with pytest.raises(AssertionError, match="1 pair\\(s\\) never multiplied"):
        check_log(a, b, output, calls[1:], key)


def test_an_output_not_built_from_the_calls_fails():
    a, b = inputs(20, 20, 20)
    key = new_key(4)
    _, calls = logged_call(packed, a, b, key)
    with pytest.raises(AssertionError, match="not built from the mma calls' results"):
        check_log(a, b, a @ b, calls, key)
    with pytest.raises(AssertionError, match="expected a numpy array of shape"):
        check_log(a, b, (a @ b)[:5], calls, key)


def cell_function(source: str, name: str):
    """``name`` as a notebook cell defines it: its source known to linecache under a cell's file name."""
    filename = f"<cell {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np, "njit": njit}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the test's own code
    return namespace[name]


def test_njit_only_checks_the_cell_as_the_grader_will():
    own = cell_function("@njit\ndef own(a, b):\n    c = np.zeros((a.shape[0], b.shape[1]), a.dtype)\n    return c\n", "own")
    assert check.njit_only(own) is own
    blas = cell_function("@njit\ndef blas(a, b):\n    return a @ b\n", "blas")
    with pytest.raises(AssertionError, match="the grader will refuse its cell: line 3: `@` is NumPy's matmul"):
        check.njit_only(blas)
    plain = cell_function("def plain(a, b):\n    return a\n", "plain")
    with pytest.raises(AssertionError, match="not compiled with numba's @njit"):
        check.njit_only(plain)


def test_mma_calls_counts_and_checks_in_a_notebook():
    a, b = inputs(33, 17, 20)
    assert check.mma_calls(packed, a, b) == 3 * 2 * 2
    with pytest.raises(AssertionError, match="not one per pair"):
        check.mma_calls(extra_zero_call, a, b)
