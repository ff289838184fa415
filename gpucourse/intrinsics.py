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

Logging costs a Python call per tile, so it checks small shapes only. At the sizes that are timed the
grader passes :func:`counting_mma` instead: ``mma_16x16`` plus a tally, in compiled code, of the calls
and of a fingerprint of their operands at secret positions (:func:`start_tally`, :func:`read_tally`);
:func:`check_tally` then says whether the calls were one per pair of input tiles, on those tiles.
"""

from __future__ import annotations

import math

import numpy as np
from numba import carray, njit, objmode, types
from numba.extending import intrinsic

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


# The counting intrinsic's state, one float64 buffer: [calls, fingerprint, then for a's tile and b's tile in turn
# SAMPLES positions (row * 16 + column) and SAMPLES weights]. Compiled code
# reaches it through its address, compiled in as a constant: numba freezes a global array as a read-only constant,
# and an objmode block (how _logging_mma records) costs microseconds a call, as much as the multiply itself.
# The buffer is only ever written in place, so the address holds for the life of the process (and of its forks).
SAMPLES = 8
_TALLY_WORDS = 2 + 4 * SAMPLES
_tally = np.zeros(_TALLY_WORDS)
_TALLY_ADDRESS = _tally.ctypes.data


@intrinsic
def _float64_pointer(typingctx, address):
    """(compiled code) ``address`` as a pointer to float64s."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return types.CPointer(types.float64)(address), codegen


# Never cached: the buffer's address is compiled in.
# The fingerprint samples SAMPLES elements of each operand, not all 256: a weighted sum over a whole tile does not
# vectorise on a strided view (the baseline's operands) and cost 270 ns a call, twice the multiply itself. Sampled, the
# tally costs about 35 ns a call (16 samples: 75 ns), on contiguous and strided tiles alike, so a speed ratio stays fair
# (the reference solution against the strided baseline, on an AMD EPYC: 5.4-5.7x with mma_16x16, 5.2-5.5x with this).
@njit(cache=False)
def counting_mma(a_tile, b_tile, c_tile):
    """mma_16x16(a_tile, b_tile, c_tile), and the call tallied: one more call, and the fingerprint
    (weighted sum of a_tile's sampled elements) * (the same of b_tile's) added, at the secret positions
    and weights of :func:`start_tally`."""
    mma_16x16(a_tile, b_tile, c_tile)
    tally = carray(_float64_pointer(_TALLY_ADDRESS), (_TALLY_WORDS,))
    a_print, b_print = 0.0, 0.0
    for s in range(SAMPLES):
        a_at, b_at = int(tally[2 + s]), int(tally[2 + 2 * SAMPLES + s])
        a_print += a_tile[a_at // 16, a_at % 16] * tally[2 + SAMPLES + s]
        b_print += b_tile[b_at // 16, b_at % 16] * tally[2 + 3 * SAMPLES + s]
    tally[0] += 1.0
    tally[1] += a_print * b_print


def new_tally_secret() -> np.ndarray:
    """A fresh secret for a tally, from the system's entropy: (2, 2, SAMPLES) float64, for a's tiles and b's, the
    positions sampled (row * 16 + column, distinct) and their weights."""
    rng = np.random.default_rng()
    return np.array([(rng.choice(TILE * TILE, SAMPLES, replace=False), rng.standard_normal(SAMPLES)) for _ in range(2)])


def start_tally(secret: np.ndarray) -> None:
    """Start tallying :func:`counting_mma`'s calls in this process, under ``secret`` (of :func:`new_tally_secret`)."""
    secret = np.asarray(secret, dtype=np.float64)
    if secret.shape != (2, 2, SAMPLES) or not np.all((secret[:, 0] >= 0) & (secret[:, 0] < TILE * TILE) & (secret[:, 0] % 1 == 0)):
        raise ValueError(f"a tally's secret is (2, 2, {SAMPLES}), positions in 0..255 first, got {secret.shape}")
    _tally[:2] = 0.0
    _tally[2:] = secret.reshape(-1)


def read_tally() -> dict:
    """``{"calls": int, "fingerprint": float}`` since :func:`start_tally`; the tally and its secret are wiped."""
    tally = {"calls": int(_tally[0]), "fingerprint": float(_tally[1])}
    _tally[:] = 0.0
    return tally


def check_tally(calls, tally, secret: np.ndarray, *, name: str = "the tensorized matmul") -> int:
    """The number of intrinsic calls tallied (:func:`read_tally`) while ``fn(a, b, counting_mma)`` ran for each
    ``(a, b)`` in ``calls``, after checking that they were one per pair of zero-padded input tiles, on those tiles.

    Raises AssertionError unless the count is ``ceil(m/16) * ceil(k/16) * ceil(n/16)`` per call and the fingerprint
    is the sum of ``print(A[i, p]) * print(B[p, j])`` over every pair of tiles of every call: calls on zero tiles,
    on a scratch tile or on other tiles than the inputs' fail (unless they match the right tiles at every sampled
    position), since the positions and weights are drawn for each tally and never leave the grader and the intrinsic.
    """
    if not isinstance(tally, dict) or type(tally.get("calls")) is not int or type(tally.get("fingerprint")) is not float:
        raise AssertionError(f"{name}: the counting intrinsic's tally did not come back")
    a_secret, b_secret = np.asarray(secret, dtype=np.float64)
    due, fingerprint, scale = 0, 0.0, 0.0
    for a, b in calls:
        m, k = a.shape
        n = b.shape[1]
        due += math.prod(-(-size // TILE) for size in (m, k, n))
        a_prints, b_prints = _tile_prints(a, a_secret), _tile_prints(b, b_secret)  # [i, p] and [p, j]: each tile's print
        fingerprint += float(a_prints.sum(axis=0) @ b_prints.sum(axis=1))
        scale += float(np.abs(a_prints).sum(axis=0) @ np.abs(b_prints).sum(axis=1))
    shapes = ", ".join(dict.fromkeys(f"{a.shape} @ {b.shape}" for a, b in calls))
    if tally["calls"] != due:
        raise AssertionError(f"{name} made {tally['calls']} mma calls where {due} were due ({len(calls)} call(s) on {shapes}): "
                             "one per pair of 16 x 16 tiles of the zero-padded inputs, and every multiply-add through the mma it is given")
    # The sums differ in order only (float64 throughout): ~1e-12 of the scale, where one pair of tiles is ~1e-5 of it.
    if not abs(tally["fingerprint"] - fingerprint) <= 1e-9 * scale + 1e-300:
        raise AssertionError(f"{name}: its {due} mma calls on {shapes} were not on the tiles of the inputs: each call must multiply "
                             "the zero-padded tiles A[i, p] and B[p, j], each pair once")
    return tally["calls"]


def _tile_prints(matrix: np.ndarray, secret: np.ndarray) -> np.ndarray:
    """(rows / 16, cols / 16), rounded up: each zero-padded 16 x 16 tile of ``matrix``'s print, the weighted sum of
    its elements at the sampled positions (``secret``: positions, weights), as :func:`counting_mma` takes it."""
    rows, cols = matrix.shape
    tile_rows, tile_cols = -(-rows // TILE), -(-cols // TILE)
    padded = np.zeros((tile_rows * TILE, tile_cols * TILE))
    padded[:rows, :cols] = matrix
    at, weights = secret[0].astype(np.int64), secret[1]
    sampled = padded.reshape(tile_rows, TILE, tile_cols, TILE)[:, at // TILE, :, at % TILE]  # (SAMPLES, tile_rows, tile_cols)
    return np.einsum("sip,s->ip", sampled, weights)


def _tile(matrix: np.ndarray, row: int, col: int) -> np.ndarray:
    return np.ascontiguousarray(matrix[row * TILE:(row + 1) * TILE, col * TILE:(col + 1) * TILE])
