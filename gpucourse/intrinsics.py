"""A tensor intrinsic for the CPU: ``mma_16x16``, the fixed-size multiply-accumulate that module 07
maps a blocked matmul onto, and the means to count and check its calls.

On a GPU a tensor core (``mma.sync``, what Triton's ``tl.dot`` becomes) multiplies small fixed tiles
in one instruction; here ``mma_16x16`` is a compiled numba function with the same contract, so a loop
nest rewritten around it ("tensorized") runs for real on any machine:

    c_tile += a_tile @ b_tile        a_tile, b_tile, c_tile: 16 x 16, one float dtype

It refuses any other shape, as the hardware would. Its operands are best contiguous 16 x 16 arrays
(tiles packed, as a GPU stages them in shared memory or registers); a strided view works, slowly.

:func:`logged_call` runs a function that takes an intrinsic with one that records every call's
operands and adds a keyed constant to the accumulator; :func:`check_log` then says whether the
output was computed by those calls, on exactly the tiles of the (zero-padded) inputs. The notebook's
self-check and the grader use the same two functions; the grader runs the first in a process that
holds only the graded code (the course's evidence rule) and the second in its own.
"""

from __future__ import annotations

import numpy as np
from numba import njit, objmode

TILE = 16


@njit(cache=False)
def mma_16x16(a_tile, b_tile, c_tile):
    """c_tile += a_tile @ b_tile for 16 x 16 tiles (any other shape raises ValueError)."""
    if a_tile.shape != (16, 16) or b_tile.shape != (16, 16) or c_tile.shape != (16, 16):
        raise ValueError("mma_16x16 takes 16 x 16 tiles only: pad the matrices to multiples of 16")
    # A 4 x 4 register block: four rows of C take four rows of B per pass, so each value loaded serves four
    # multiply-adds (0.75 loads and stores per multiply-add; four rows alone needed 2.25, and ran half as fast).
    for i in range(0, 16, 4):
        for p in range(0, 16, 4):
            a00, a01, a02, a03 = a_tile[i, p], a_tile[i, p + 1], a_tile[i, p + 2], a_tile[i, p + 3]
            a10, a11, a12, a13 = a_tile[i + 1, p], a_tile[i + 1, p + 1], a_tile[i + 1, p + 2], a_tile[i + 1, p + 3]
            a20, a21, a22, a23 = a_tile[i + 2, p], a_tile[i + 2, p + 1], a_tile[i + 2, p + 2], a_tile[i + 2, p + 3]
            a30, a31, a32, a33 = a_tile[i + 3, p], a_tile[i + 3, p + 1], a_tile[i + 3, p + 2], a_tile[i + 3, p + 3]
            for j in range(16):
                b0, b1, b2, b3 = b_tile[p, j], b_tile[p + 1, j], b_tile[p + 2, j], b_tile[p + 3, j]
                c_tile[i, j] += a00 * b0 + a01 * b1 + a02 * b2 + a03 * b3
                c_tile[i + 1, j] += a10 * b0 + a11 * b1 + a12 * b2 + a13 * b3
                c_tile[i + 2, j] += a20 * b0 + a21 * b1 + a22 * b2 + a23 * b3
                c_tile[i + 3, j] += a30 * b0 + a31 * b1 + a32 * b2 + a33 * b3


# What the logging intrinsic records, one entry per call: (a_tile copy, b_tile copy).
# Module state, reached from compiled code through ``objmode``; one logged call at a time per process.
_log: list = []
_key: list = [None]


@njit
def _logging_mma(a_tile, b_tile, c_tile):
    if a_tile.shape != (16, 16) or b_tile.shape != (16, 16) or c_tile.shape != (16, 16):
        raise ValueError("mma_16x16 takes 16 x 16 tiles only: pad the matrices to multiples of 16")
    with objmode():
        _record(a_tile, b_tile, c_tile)


def _record(a_tile, b_tile, c_tile) -> None:
    _log.append((np.array(a_tile), np.array(b_tile)))
    with np.errstate(all="ignore"):  # an answer that feeds the accumulator back in as an operand can overflow: its check fails anyway
        c_tile += (a_tile.astype(np.float64) @ b_tile + _key[0]).astype(c_tile.dtype)


def logged_call(fn, a: np.ndarray, b: np.ndarray, key: np.ndarray):
    """``(fn(a, b, mma), calls)``: ``fn`` called with an intrinsic that records each call's operand tiles
    (``calls``: a list of ``(a_tile, b_tile)``) and adds ``key`` (16 x 16) to the accumulator tile,
    besides the product. Slow (a Python call per tile): for small checking shapes."""
    _log.clear()
    _key[0] = np.asarray(key, dtype=np.float64)
    try:
        output = fn(a, b, _logging_mma)
    finally:
        calls, _log[:] = list(_log), []
        _key[0] = None
    return output, calls


def new_key(seed: int | None = None) -> np.ndarray:
    """A random 16 x 16 key: small integers, exact in float32 beside the products of the check's inputs."""
    return np.random.default_rng(seed).integers(1, 64, size=(TILE, TILE)).astype(np.float64)


def check_log(a: np.ndarray, b: np.ndarray, output, calls, key: np.ndarray, *, name: str = "the tensorized matmul") -> int:
    """The number of intrinsic calls, after checking that they did all of ``a @ b``'s work.

    Raises AssertionError unless (1) the calls' operands are exactly the pairs of tiles
    ``(A[i, p], B[p, j])`` of the zero-padded inputs, each pair once (no extra call, on zero tiles
    or any other), and (2) each output tile equals the product plus the key once per call that
    accumulated into it, ``ceil(k / 16)`` times: the output was built from the intrinsic's results.
    """
    m, k = a.shape
    n = b.shape[1]
    tiles_m, tiles_k, tiles_n = (-(-size // TILE) for size in (m, k, n))
    padded_a = np.zeros((tiles_m * TILE, tiles_k * TILE), a.dtype)
    padded_a[:m, :k] = a
    padded_b = np.zeros((tiles_k * TILE, tiles_n * TILE), b.dtype)
    padded_b[:k, :n] = b
    wanted = {}
    for i in range(tiles_m):
        for p in range(tiles_k):
            for j in range(tiles_n):
                pair = (_tile(padded_a, i, p).tobytes(), _tile(padded_b, p, j).tobytes())
                wanted[pair] = wanted.get(pair, 0) + 1
    got = {}
    for a_tile, b_tile in calls:
        if a_tile.shape != (TILE, TILE) or b_tile.shape != (TILE, TILE) or a_tile.dtype != a.dtype or b_tile.dtype != b.dtype:
            raise AssertionError(f"{name}: an mma call got tiles of shape {a_tile.shape}, {b_tile.shape} ({a_tile.dtype}): "
                                 f"pass 16 x 16 tiles of the inputs' dtype")
        pair = (np.ascontiguousarray(a_tile).tobytes(), np.ascontiguousarray(b_tile).tobytes())
        got[pair] = got.get(pair, 0) + 1
    if got != wanted:
        extra = sum(max(count - wanted.get(pair, 0), 0) for pair, count in got.items())
        missing = sum(max(count - got.get(pair, 0), 0) for pair, count in wanted.items())
        raise AssertionError(f"{name}: its {len(calls)} mma calls are not one per pair of input tiles "
                             f"({tiles_m} x {tiles_k} x {tiles_n} = {tiles_m * tiles_k * tiles_n} pairs): "
                             f"{extra} call(s) on tiles that are not such a pair or repeat one, {missing} pair(s) never multiplied")
    expected = (a.astype(np.float64) @ b.astype(np.float64)) + tiles_k * np.tile(key, (tiles_m, tiles_n))[:m, :n]
    if not isinstance(output, np.ndarray) or output.shape != (m, n):
        raise AssertionError(f"{name}: expected a numpy array of shape {(m, n)}, got {getattr(output, 'shape', type(output).__name__)}")
    tolerance = 1e-3 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-3
    if not np.all(np.abs(output.astype(np.float64) - expected) <= tolerance):
        raise AssertionError(f"{name}: its output was not built from the mma calls' results "
                             "(each output tile must be the sum of the mma calls that accumulated into it)")
    return len(calls)


def _tile(matrix: np.ndarray, row: int, col: int) -> np.ndarray:
    return np.ascontiguousarray(matrix[row * TILE:(row + 1) * TILE, col * TILE:(col + 1) * TILE])
