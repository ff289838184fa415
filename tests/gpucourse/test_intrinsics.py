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


@njit
def zero_tile_calls(a, b, mma):
    """As many calls as packed makes, on zero tiles, and the product by plain loops (module 07's own_intrinsic_when_large)."""
    m, k = a.shape
    n = b.shape[1]
    zero, scratch = np.zeros((16, 16), a.dtype), np.zeros((16, 16), a.dtype)
    for _ in range(((m + 15) // 16) * ((k + 15) // 16) * ((n + 15) // 16)):
        mma(zero, zero, scratch)
    c = np.zeros((m, n), a.dtype)
    for i in range(m):
        for p in range(k):
            for j in range(n):
                c[i, j] += a[i, p] * b[p, j]
    return c


def test_the_counting_intrinsic_tallies_one_call_per_pair_of_tiles():
    """counting_mma multiplies as mma_16x16 does; its tally passes check_tally for a block of two calls (float64
    inputs are tallied in the module 07 reference's grading)."""
    calls = [inputs(33, 17, 20), inputs(33, 17, 20)]
    secret = intrinsics.new_tally_secret()
    intrinsics.start_tally(secret)
    outputs = [packed(a, b, intrinsics.counting_mma) for a, b in calls]
    tally = intrinsics.read_tally()
    assert intrinsics.check_tally(calls, tally, secret) == 2 * 3 * 2 * 2
    for (a, b), output in zip(calls, outputs):
        np.testing.assert_allclose(output, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert intrinsics.read_tally() == {"calls": 0, "fingerprint": 0.0}, "reading wipes the tally"
    assert not intrinsics._tally.any(), "and its secret"


def test_a_tally_fails_missing_calls_and_calls_on_other_tiles():
    a, b = inputs(33, 17, 20)
    for fn, message in [(extra_zero_call, "made 13 mma calls where 12 were due"), (zero_tile_calls, "were not on the tiles of the inputs")]:
        secret = intrinsics.new_tally_secret()
        intrinsics.start_tally(secret)
        fn(a, b, intrinsics.counting_mma)
        with pytest.raises(AssertionError, match=message):
            intrinsics.check_tally([(a, b)], intrinsics.read_tally(), secret)
    with pytest.raises(AssertionError, match="tally did not come back"):
        intrinsics.check_tally([(a, b)], {"calls": 12}, secret)


def test_mma_counted_checks_every_call_and_timed_block_in_a_notebook():
    """check.mma_counted: fn(a, b) with counting_mma, its tally checked after each call and each timed block."""
    own = cell_function("@njit\ndef own(a, b, mma):\n    c = np.zeros((a.shape[0], b.shape[1]), a.dtype)\n    return c\n", "own")
    with pytest.raises(AssertionError, match="own made 0 mma calls where 12 were due"):
        check.mma_counted(own)(*inputs(33, 17, 20))
    counted = check.MmaCounted(packed)  # the test file is no answer cell: counted without the gate
    a, b = inputs(33, 17, 20)
    np.testing.assert_allclose(counted(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    seconds, outputs = counted.timed_block([inputs(33, 17, 20), inputs(20, 40, 5)])
    assert seconds > 0 and [output.shape for output in outputs] == [(33, 20), (20, 5)]
    with pytest.raises(AssertionError, match="were not on the tiles of the inputs"):
        check.MmaCounted(zero_tile_calls).timed_block([inputs(33, 17, 20)])
