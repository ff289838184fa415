# %% [markdown]
# # Assignment 07: compiling a matmul — traffic, loop order, blocks, a tensor intrinsic, Triton
#
# This assignment checks the ideas of lecture 07 (`course/07_ml_compilation.ipynb`).
# You will count what a tiled matmul moves, then write the matmul four times as a compiler would lower it: in a cache-friendly loop order, blocked for the cache and the registers, mapped onto a 16 × 16 tensor intrinsic, and as a Triton kernel.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other inputs and edge cases.
# - Everything runs on a CPU: Questions 2-4 are numba `@njit` loops, timed for real on your machine; Triton kernels run in Triton's interpreter. The Triton speed item waits for a GPU regrade.
#
# **Your own loops, in one cell.** Questions 2-4 grade loop nests, so each answer cell must hold only your compiled loops: `@njit` functions that use NumPy's allocators (`np.zeros`, `np.empty`, ...), `math`, a few builtins and the functions of that same cell.
# No `@`, no `np.dot`, no call to a function of another cell.
# When graded, each of these cells runs in a fresh process with only this notebook's setup cells; it is checked before it runs, and the message says which line is not allowed (the tests check it here too, as the grader will).
#
# Points: 16 autograded (2 of them on a GPU), 1 graded by hand.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %% nbgrader={"grade_id": "imports", "locked": true}
import math

import numpy as np
import torch
from numba import njit

import gpucourse
from gpucourse import check, kernels, thresholds, timing
from gpucourse.intrinsics import TILE, counting_mma, mma_16x16

try:
    TRITON_ON_GPU = kernels.use_triton_gpu_or_interpreter()  # before `import triton`: without a GPU, its interpreter
    import triton
    import triton.language as tl
except ImportError as missing:  # Triton's wheels are for Linux on x86-64 only
    print(f"{missing}\nQuestion 5 needs Triton (use Colab for it); the other questions work without it.")

print(f"Running on {gpucourse.describe('cpu')} (device class {gpucourse.device_class()!r})")
RNG = np.random.default_rng(0)


def matmul_inputs(m, k, n, dtype=np.float32):
    """Fresh (m, k) and (k, n) matrices of values in [-1, 1)."""
    return (RNG.uniform(-1, 1, (m, k)).astype(dtype), RNG.uniform(-1, 1, (k, n)).astype(dtype))


def check_matmul(a, b, output, name):
    """output == a @ b, within float32 rounding of a k-long sum."""
    expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)
    check.assert_close(output, expected, rtol=1e-4, atol=1e-4 * math.sqrt(a.shape[1]), name=f"{name} on {a.shape} @ {b.shape} {a.dtype}")


# %% [markdown]
# ## Question 1: what a tiled matmul moves (2 points)
#
# The lecture's cache model of the tiled loop nest: each output tile `C[i0:i0+T, j0:j0+T]` stays in cache while its sum is built; for each `p0`, the tile `A[i0:i0+T, p0:p0+T]` and the tile `B[p0:p0+T, j0:j0+T]` are read from memory once; each element of `C` is written to memory once.
# Tiles at the edges are clipped to the matrix (a 70-row matrix in tiles of 32 has row tiles of 32, 32 and 6 rows).
#
# Write `matmul_flops_bytes(m, k, n, tile, itemsize=4)`: the FLOPs of `(m, k) @ (k, n)` (one multiply and one add per term) and the bytes this model moves, as a tuple of two ints.
# Raise `ValueError` unless every size is a positive int.
#
# About 6 lines.

# %% nbgrader={"grade_id": "matmul_flops_bytes", "solution": true}
def matmul_flops_bytes(m, k, n, tile, itemsize=4):
    """(FLOPs, bytes moved) of the tiled (m, k) @ (k, n) under the lecture's cache model."""
    ### BEGIN SOLUTION
    if not all(type(size) is int and size > 0 for size in (m, k, n, tile, itemsize)):
        raise ValueError(f"sizes must be positive ints, got m={m!r}, k={k!r}, n={n!r}, tile={tile!r}, itemsize={itemsize!r}")
    row_tiles, col_tiles = -(-m // tile), -(-n // tile)
    # Every A tile is read once per column of output tiles; every B tile once per row of output tiles.
    elements = col_tiles * m * k + row_tiles * k * n + m * n
    return 2 * m * k * n, itemsize * elements
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_matmul_flops_bytes", "grade": true, "points": 2}
"""matmul_flops_bytes: exact FLOPs and bytes under the cache model, for tiles that divide the sizes and tiles that do not."""
check.assert_equal(matmul_flops_bytes(64, 64, 64, 32), (2 * 64 ** 3, 4 * (2 * 64 ** 3 // 32 + 64 * 64)), name="matmul_flops_bytes(64, 64, 64, 32)")
check.assert_equal(matmul_flops_bytes(4, 4, 4, 4, itemsize=8), (128, 8 * 48), name="one tile of each, float64")
check.assert_equal(matmul_flops_bytes(70, 10, 20, 32)[0], 28000, name="FLOPs of (70, 10) @ (10, 20)")
check.assert_raises(ValueError, matmul_flops_bytes, 64, 64, 64, 0, name="matmul_flops_bytes with tile=0")
### BEGIN HIDDEN TESTS
def model_bytes(m, k, n, tile, itemsize):
    """The model, tile by tile: the grader's own count."""
    total = 0
    for i0 in range(0, m, tile):
        for j0 in range(0, n, tile):
            rows, cols = min(tile, m - i0), min(tile, n - j0)
            for p0 in range(0, k, tile):
                depth = min(tile, k - p0)
                total += rows * depth + depth * cols
            total += rows * cols
    return itemsize * total


for sizes in [(70, 10, 20, 32), (1, 1, 1, 1), (100, 37, 3, 16), (33, 65, 129, 64), (5, 7, 11, 100), (128, 96, 64, 32)]:
    for itemsize in (4, 2):
        check.assert_equal(matmul_flops_bytes(*sizes, itemsize=itemsize), (2 * sizes[0] * sizes[1] * sizes[2], model_bytes(*sizes, itemsize)),
                           name=f"matmul_flops_bytes{sizes} itemsize={itemsize}")
for bad in [(0, 4, 4, 4), (4, 4, 4, -1), (4.0, 4, 4, 4)]:
    check.assert_raises(ValueError, matmul_flops_bytes, *bad, name=f"matmul_flops_bytes{bad}")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: the loop order (2 points)
#
# `matmul_ijk` below is the textbook loop nest: for each `C[i, j]`, a dot product down a column of `B`, one cache line per element in row-major memory.
# Write `matmul_reordered(a, b)`, an `@njit` matmul with a cache-friendly loop order (the lecture measured three), returning a new array of `a`'s dtype.
# Graded: the values for float32 and float64 inputs of any shape (1 point); the speed on fresh 256 × 256 float32 inputs (1 point): at least 5× faster than `matmul_ijk` (the reference solution measured 21× on a 2-core AMD EPYC, one thread).
#
# About 10 lines.

# %% nbgrader={"grade_id": "ijk_setup", "locked": true}
@njit
def matmul_ijk(a, b):
    """(m, k) @ (k, n) -> (m, n), one dot product per output element."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for j in range(n):
            total = c[i, j]  # a zero of a's dtype
            for p in range(k):
                total += a[i, p] * b[p, j]
            c[i, j] = total
    return c


# %% nbgrader={"grade_id": "matmul_reordered", "solution": true}
@njit
def matmul_reordered(a, b):
    """(m, k) @ (k, n) -> (m, n), a new array of a's dtype, with a cache-friendly loop order."""
    ### BEGIN SOLUTION
    # The order i, p, j: the inner loop walks rows of B and C.
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for p in range(k):
            a_ip = a[i, p]
            for j in range(n):
                c[i, j] += a_ip * b[p, j]
    return c
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_matmul_reordered_correct", "grade": true, "points": 1}
"""matmul_reordered matches a @ b for float32 and float64, on shapes that are not square."""
reordered = check.njit_only(matmul_reordered)
for shape, dtype in [((33, 17, 45), np.float32), ((33, 17, 45), np.float64), ((1, 1, 1), np.float32)]:
    a, b = matmul_inputs(*shape, dtype=dtype)
    check_matmul(a, b, reordered(a, b), "matmul_reordered")
### BEGIN HIDDEN TESTS
for shape, dtype in [((1, 300, 2), np.float64), ((128, 64, 1), np.float32), ((7, 129, 65), np.float32)]:
    a, b = matmul_inputs(*shape, dtype=dtype)
    check_matmul(a, b, reordered(a, b), "matmul_reordered")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_matmul_reordered_speed", "grade": true, "points": 1}
"""matmul_reordered is 5x faster than matmul_ijk on fresh 256 x 256 float32 inputs."""
SPEEDUP_NEEDED = {"cpu": 5.0, "cuda": 5.0}  # numba loops run on the CPU on every machine
reordered = check.njit_only(matmul_reordered)
result = timing.compare_speed(matmul_ijk, reordered, lambda: matmul_inputs(256, 256, 256),
                              check=lambda args, output: check_matmul(*args, output, "a timed matmul_reordered"), rounds=9)
check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="matmul_reordered vs matmul_ijk")

# %% [markdown]
# ## Question 3: blocks for the cache and the registers (3 points)
#
# From here on the baseline is `matmul_ikj` below: the reordered loop nest, as the lecture wrote it.
# It streams all of `B` once per row of `A`; on a wide product, (128, 1024) @ (1024, 4096) in float32, `B` is 16 MB, more than any core's L2 cache, so every row of `A` reads `B` from the L3 cache or memory.
#
# Write `matmul_blocked(a, b, tile=128)`, an `@njit` matmul blocked as the lecture showed, at two levels:
# - a panel of `B` (`tile` rows by `tile` columns) stays in cache while every row of `A` streams past it (loops over `j0` and `p0` outside, rows inside);
# - in the registers: one pass over the panel's columns updates several rows of `C` from several rows of the panel, so that each value loaded serves several multiply-adds.
#   The lecture's four rows of `C` per row of the panel take 9 loads and stores for 4 multiply-adds; four rows of `C` times four rows of the panel per pass (`c0[j] += a00 * b0[j] + a01 * b1[j] + a02 * b2[j] + a03 * b3[j]`, and so on for `c1` to `c3`) take 12 for 16.
#
# It must be correct for any shape and any `tile` (partial tiles at the edges, rows of `C` and of the panel left over when they do not come in whole groups: a small helper function in the same cell that adds a rectangle of the product one row at a time handles them).
# Graded: the values on shapes and tiles that do not divide each other (1 point); the speed on fresh (128, 1024) @ (1024, 4096) float32 inputs with the default tile (2 points): at least 1.3× faster than `matmul_ikj`.
# Measured on two 2-core machines, one thread: a cache panel alone 1.1-1.6× there (memory-bound either way, and noisy); four rows of `C` per pass 2.1× at `tile=64` on an AMD EPYC (512 KB of L2 per core) but 1.4× at 64 and 1.8× at 128 on an Intel Xeon (2 MB of L2); the reference solution, four rows by four, 2.3-2.9× on the Xeon at `tile=128` under the grader (2.7× in a full test run).
# On square matrices up to 1024, blocking gains less, as the lecture showed.
#
# About 35 lines.

# %% nbgrader={"grade_id": "ikj_setup", "locked": true}
@njit
def matmul_ikj(a, b):
    """(m, k) @ (k, n) -> (m, n) in the order i, p, j (Question 2's loop order): the baseline of Questions 3 and 4."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for p in range(k):
            a_ip = a[i, p]
            for j in range(n):
                c[i, j] += a_ip * b[p, j]
    return c


WIDE = (128, 1024, 4096)  # (m, k, n) of the timed product: B is 16 MB in float32


def wide_inputs():
    return matmul_inputs(*WIDE)


# %% nbgrader={"grade_id": "matmul_blocked", "solution": true}
### BEGIN SOLUTION
@njit
def add_panel(a, b, c, i0, i1, p0, p1, j0, j1):
    """c[i0:i1, j0:j1] += a[i0:i1, p0:p1] @ b[p0:p1, j0:j1], a row of C and a row of the panel at a time."""
    for i in range(i0, i1):
        c_row = c[i, j0:j1]
        for p in range(p0, p1):
            a_ip = a[i, p]
            b_row = b[p, j0:j1]
            for j in range(j1 - j0):
                c_row[j] += a_ip * b_row[j]
### END SOLUTION


@njit
def matmul_blocked(a, b, tile=128):
    """(m, k) @ (k, n) -> (m, n), blocked for the cache (tile x tile panels of B) and for the registers."""
    ### BEGIN SOLUTION
    # A tile x tile panel of B kept in cache; per pass, four rows of C take four rows of the panel, so each value
    # loaded serves four multiply-adds.
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    rows4 = m - m % 4
    for j0 in range(0, n, tile):
        j1 = min(j0 + tile, n)
        for p0 in range(0, k, tile):
            p1 = min(p0 + tile, k)
            p4 = p1 - (p1 - p0) % 4
            for i in range(0, rows4, 4):
                c0, c1, c2, c3 = c[i, j0:j1], c[i + 1, j0:j1], c[i + 2, j0:j1], c[i + 3, j0:j1]
                for p in range(p0, p4, 4):
                    b0, b1, b2, b3 = b[p, j0:j1], b[p + 1, j0:j1], b[p + 2, j0:j1], b[p + 3, j0:j1]
                    a00, a01, a02, a03 = a[i, p], a[i, p + 1], a[i, p + 2], a[i, p + 3]
                    a10, a11, a12, a13 = a[i + 1, p], a[i + 1, p + 1], a[i + 1, p + 2], a[i + 1, p + 3]
                    a20, a21, a22, a23 = a[i + 2, p], a[i + 2, p + 1], a[i + 2, p + 2], a[i + 2, p + 3]
                    a30, a31, a32, a33 = a[i + 3, p], a[i + 3, p + 1], a[i + 3, p + 2], a[i + 3, p + 3]
                    for j in range(j1 - j0):
                        x0, x1, x2, x3 = b0[j], b1[j], b2[j], b3[j]
                        c0[j] += a00 * x0 + a01 * x1 + a02 * x2 + a03 * x3
                        c1[j] += a10 * x0 + a11 * x1 + a12 * x2 + a13 * x3
                        c2[j] += a20 * x0 + a21 * x1 + a22 * x2 + a23 * x3
                        c3[j] += a30 * x0 + a31 * x1 + a32 * x2 + a33 * x3
                add_panel(a, b, c, i, i + 4, p4, p1, j0, j1)  # the panel's last rows, fewer than four
            add_panel(a, b, c, rows4, m, p0, p1, j0, j1)  # the rows of C left over
    return c
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_matmul_blocked_correct", "grade": true, "points": 1}
"""matmul_blocked matches a @ b on shapes that are not multiples of the tile, with several tiles."""
blocked = check.njit_only(matmul_blocked)
for shape, tile, dtype in [((70, 45, 33), 16, np.float32), ((70, 45, 33), 64, np.float64), ((9, 200, 130), 64, np.float32)]:
    a, b = matmul_inputs(*shape, dtype=dtype)
    check_matmul(a, b, blocked(a, b, tile), f"matmul_blocked(tile={tile})")
### BEGIN HIDDEN TESTS
for shape, tile, dtype in [((1, 1, 1), 64, np.float32), ((6, 7, 5), 3, np.float64), ((131, 67, 257), 32, np.float32), ((3, 100, 2), 7, np.float32)]:
    a, b = matmul_inputs(*shape, dtype=dtype)
    check_matmul(a, b, blocked(a, b, tile), f"matmul_blocked(tile={tile})")
a, b = matmul_inputs(66, 66, 66)
check_matmul(a, b, blocked(a, b), "matmul_blocked with its default tile")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_matmul_blocked_speed", "grade": true, "points": 2}
"""matmul_blocked (default tile) is 1.3x faster than matmul_ikj on fresh (128, 1024) @ (1024, 4096) float32 inputs."""
SPEEDUP_NEEDED = {"cpu": 1.3, "cuda": 1.3}  # numba loops run on the CPU on every machine
blocked = check.njit_only(matmul_blocked)
result = timing.compare_speed(matmul_ikj, blocked, wide_inputs, check=lambda args, output: check_matmul(*args, output, "a timed matmul_blocked"),
                              rounds=9, charge_cpu_time=True)
check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="matmul_blocked vs matmul_ikj")

# %% [markdown]
# ## Question 4: map the blocks onto a tensor intrinsic (4 points)
#
# `mma_16x16(a_tile, b_tile, c_tile)` (from `gpucourse.intrinsics`, imported above) is this course's tensor intrinsic: `c_tile += a_tile @ b_tile` for 16 × 16 tiles, and no other shape, as a tensor core multiplies fixed tiles.
# Write `matmul_tensorized(a, b, mma)`, an `@njit` matmul in which **every** multiply-add is done by calls `mma(a_tile, b_tile, c_tile)` of the intrinsic it is given, for any shape: pad `a` and `b` with zeros to multiples of 16, multiply tile by tile, and return the `(m, n)` result (a new array of `a`'s dtype).
# The values and the speed are measured with `counting_mma` (also from `gpucourse.intrinsics`): `mma_16x16` that also counts its calls and samples their operands at positions drawn afresh each time, so that after every call, and every timed block of calls, the test checks that your function made exactly one call per pair of tiles, `ceil(m/16) · ceil(k/16) · ceil(n/16)` calls, each on the zero-padded tiles `(A[i, p], B[p, j])`.
# Values computed without the intrinsic, or with it on other tiles, at any size, score 0 on both.
# Graded:
# - the values on shapes that are not multiples of 16, with those calls (1 point);
# - the calls (2 points): the same count, each call accumulating into output tile `(i, j)`, with your output built from what those calls returned. When graded, the calls are recorded by the grader's own intrinsic, which also checks what it returns went into your output: calling it on extra tiles (zeros, say) or computing the output some other way fails.
# - the speed on fresh (128, 1024) @ (1024, 1024) float32 inputs, with those calls in every timed call (1 point): at least 1.5× faster than `matmul_tensorized_strided` below, which makes the same calls (through `counting_mma` too) on strided views of the padded matrices (`B` is 4 MB, more than a core's L2 cache).
#   `mma_16x16` is fastest on contiguous tiles: copy ("pack") the tiles of `a` and `b` into contiguous 16 × 16 blocks first, as a GPU stages tiles in shared memory.
#   On a 2-core Intel Xeon, one thread, the reference solution (packed) measured 4-5× the strided version under the grader with `mma_16x16` (and 1.6-1.8× `matmul_ikj` on the wide product); `counting_mma`'s tally adds about the same time per call to both sides (on a 2-core AMD EPYC under the grader: 5.4-5.9× with `mma_16x16`, 4.5-4.9× with `counting_mma`).
#
# About 25 lines.

# %% nbgrader={"grade_id": "strided_setup", "locked": true}
@njit
def matmul_tensorized_strided(a, b, mma):
    """(m, k) @ (k, n) -> (m, n), every multiply-add in mma on 16 x 16 *views* of the zero-padded matrices: the baseline of the speed item."""
    m, k = a.shape
    n = b.shape[1]
    mp, kp, np_ = (m + 15) // 16 * 16, (k + 15) // 16 * 16, (n + 15) // 16 * 16
    a_pad, b_pad, c_pad = np.zeros((mp, kp), a.dtype), np.zeros((kp, np_), a.dtype), np.zeros((mp, np_), a.dtype)
    a_pad[:m, :k] = a
    b_pad[:k, :n] = b
    for i in range(0, mp, 16):
        for j in range(0, np_, 16):
            for p in range(0, kp, 16):
                mma(a_pad[i:i + 16, p:p + 16], b_pad[p:p + 16, j:j + 16], c_pad[i:i + 16, j:j + 16])
    return c_pad[:m, :n].copy()


# %% nbgrader={"grade_id": "matmul_tensorized", "solution": true}
### BEGIN SOLUTION
@njit
def packed_tiles(x, tile_rows, tile_cols):
    """x: (rows, cols) -> (tile_rows, tile_cols, 16, 16), zero-padded: [i, j] is the contiguous tile (i, j) of x."""
    rows, cols = x.shape
    tiles = np.zeros((tile_rows, tile_cols, 16, 16), dtype=x.dtype)
    for i in range(tile_rows):
        for j in range(tile_cols):
            r, c = min(16, rows - 16 * i), min(16, cols - 16 * j)
            tiles[i, j, :r, :c] = x[16 * i:16 * i + r, 16 * j:16 * j + c]
    return tiles
### END SOLUTION


@njit
def matmul_tensorized(a, b, mma):
    """(m, k) @ (k, n) -> (m, n), every multiply-add in mma(a_tile, b_tile, c_tile) on 16 x 16 tiles packed contiguous."""
    ### BEGIN SOLUTION
    m, k = a.shape
    n = b.shape[1]
    tiles_m, tiles_k, tiles_n = (m + 15) // 16, (k + 15) // 16, (n + 15) // 16
    a_tiles, b_tiles = packed_tiles(a, tiles_m, tiles_k), packed_tiles(b, tiles_k, tiles_n)
    c = np.empty((m, n), dtype=a.dtype)
    acc = np.zeros((16, 16), dtype=a.dtype)
    for i in range(tiles_m):
        for j in range(tiles_n):
            acc[:, :] = 0
            for p in range(tiles_k):
                mma(a_tiles[i, p], b_tiles[p, j], acc)
            rows, cols = min(16, m - 16 * i), min(16, n - 16 * j)
            c[16 * i:16 * i + rows, 16 * j:16 * j + cols] = acc[:rows, :cols]  # the output tile, cropped at the edges
    return c
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_matmul_tensorized_correct", "grade": true, "points": 1}
"""matmul_tensorized(a, b, counting_mma) matches a @ b on shapes that are not multiples of 16, with one mma call per pair of tiles."""
tensorized = check.mma_counted(matmul_tensorized)  # tensorized(a, b): matmul_tensorized(a, b, counting_mma), its calls checked
for shape, dtype in [((40, 50, 70), np.float32), ((16, 16, 16), np.float64), ((3, 5, 2), np.float32)]:
    a, b = matmul_inputs(*shape, dtype=dtype)
    check_matmul(a, b, tensorized(a, b), "matmul_tensorized")
### BEGIN HIDDEN TESTS
for shape, dtype in [((1, 1, 1), np.float64), ((33, 17, 65), np.float32), ((100, 3, 31), np.float32)]:
    a, b = matmul_inputs(*shape, dtype=dtype)
    check_matmul(a, b, tensorized(a, b), "matmul_tensorized")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_matmul_tensorized_calls", "grade": true, "points": 2}
"""matmul_tensorized calls mma exactly once per pair of zero-padded input tiles, and builds its output from those calls."""
for shape in [(40, 50, 70), (16, 16, 16)]:
    a, b = matmul_inputs(*shape)
    calls = check.mma_calls(matmul_tensorized, a, b)
    check.assert_equal(calls, math.prod(-(-size // TILE) for size in shape), name=f"mma calls of matmul_tensorized on {shape}")
### BEGIN HIDDEN TESTS
for shape in [(17, 16, 1), (33, 65, 20), (5, 40, 5)]:
    a, b = matmul_inputs(*shape, dtype=np.float64 if shape[0] == 5 else np.float32)
    calls = check.mma_calls(matmul_tensorized, a, b)
    check.assert_equal(calls, math.prod(-(-size // TILE) for size in shape), name=f"mma calls of matmul_tensorized on {shape}")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_matmul_tensorized_speed", "grade": true, "points": 1}
"""matmul_tensorized(a, b, counting_mma), its mma calls checked, is 1.5x faster than matmul_tensorized_strided on fresh (128, 1024) @ (1024, 1024) float32 inputs."""
SPEEDUP_NEEDED = {"cpu": 1.5, "cuda": 1.5}  # numba loops run on the CPU on every machine
# 15 rounds: one call a block (60 ms), and a burst of other load on a shared grader once lifted a copy of the baseline to 1.5x in 9.
# Both sides call counting_mma (the same work a call); the answer's calls are also checked, block by block, at the size that is timed.
tensorized = check.mma_counted(matmul_tensorized)
a, b = matmul_inputs(128, 1024, 1024)
check_matmul(a, b, tensorized(a, b), "matmul_tensorized")  # one call first: its calls at this size are checked before any timing
result = timing.compare_speed(matmul_tensorized_strided, tensorized, lambda: matmul_inputs(128, 1024, 1024),
                              baseline_inputs=lambda a, b: (a, b, counting_mma),
                              check=lambda args, output: check_matmul(*args, output, "a timed matmul_tensorized"), rounds=15,
                              charge_cpu_time=True)
check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="matmul_tensorized vs matmul_tensorized_strided")
### BEGIN HIDDEN TESTS
import dataclasses  # noqa: E402

# Three rounds in four as well as the median: on a busy CI machine a copy of the baseline once reached a 1.5x median in
# 15 rounds (2026-12-06); its lower quartile stays near 1x, the reference's near 3.7x.
check.assert_speedup(dataclasses.replace(result, speedup=result.low), check.required_speedup(SPEEDUP_NEEDED),
                     name="matmul_tensorized vs matmul_tensorized_strided, lower quartile of the rounds")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 5: the same schedule in Triton (5 points, 2 of them on a GPU)
#
# Write the kernel `matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr)`: `C = A @ B` for an `(M, K)` matrix `A` and a `(K, N)` matrix `B`, written into the `(M, N)` matrix `C`, each given by a pointer and its strides (in elements).
# It is launched on a 1-D grid of `cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)` programs; each computes one `BLOCK_M × BLOCK_N` tile of `C` (which tile each program takes is yours: row by row, or grouped as the lecture showed), looping over `K` in steps of `BLOCK_K` with `tl.dot`, accumulating in float32.
# Mask the loads and the store so that `M`, `N` and `K` need not be multiples of the blocks: the tests launch shapes that are not, and give `C` as a window of a larger buffer whose other elements must stay untouched.
# Then write the launcher `triton_matmul(a, b)` that allocates `C` (float32, on `a`'s device) and launches your kernel with block sizes of your choice.
#
# Graded:
# - the kernel (2 points), launched by the tests themselves with 16 × 16 × 16 blocks. When graded, your kernel's source is compiled by Triton for a real GPU (sm_80) first, then run in a fresh process that holds only that source (Triton's interpreter on a CPU), where every load and store is also checked to stay inside the tensors the kernel was given: a load without a mask reads past the end of `A` or `B`.
# - the launcher (1 point): `triton_matmul` must launch your kernel, and the kernel must do all the work: the test counts what one call runs, and besides your kernel's launches torch may only allocate (`torch.empty`), never compute (no `@`, no `torch.matmul`). When graded it is counted in a fresh process holding only the setup cells, your launcher's cell and your kernel, so keep the launcher's cell to `torch.empty...`, the tensors' shapes and strides, `triton.cdiv` and the launch (no `torch.compile`).
# - on a GPU, `triton_matmul` against `torch.matmul` (cuBLAS) on 4096 × 4096 float16 matrices (2 points), first checked as the launcher item checks it, then timed where it was checked: at least 0.5× cuBLAS's speed (a speedup of 0.5). That threshold is modelled, not yet measured (`gpucourse.thresholds`: both compute-bound on the tensor cores, which the roofline cannot tell apart, on every card in `gpu_specs`: V100, T4, A100, L4, H100, H200); `scripts/gpu_check.sh` will calibrate it on the first GPU run. Pick blocks that suit a GPU (64 or 128) in your launcher.
#
# The kernel's answer cell below holds its first lines; write its body in place of the `raise` line.
#
# About 20 lines, with the launcher.

# %% nbgrader={"grade_id": "matmul_kernel", "solution": true}
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[tile] = A[rows, :] @ B[:, cols] for this program's BLOCK_M x BLOCK_N tile, masked at the edges."""
    ### BEGIN SOLUTION
    tiles_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    rows = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + depth
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak, mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn, mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))
    ### END SOLUTION


# %% nbgrader={"grade_id": "triton_matmul", "solution": true}
def triton_matmul(a, b):
    """a: (M, K), b: (K, N) on one device -> (M, N) float32 computed by matmul_kernel."""
    ### BEGIN SOLUTION
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32, device=a.device)
    block_m, block_n, block_k = (128, 128, 32) if a.is_cuda else (32, 32, 32)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c
    ### END SOLUTION


# %% nbgrader={"grade_id": "matmul_kernel_setup", "locked": true}
BLOCK = 16  # the tests' BLOCK_M = BLOCK_N = BLOCK_K
PAD = BLOCK  # rows and columns of NaN around C, as wide as a block: an unmasked store at an edge lands there


def check_matmul_kernel(kernel, m, k, n):
    """Launch ``kernel`` on fresh (m, k) @ (k, n) float32 inputs, C a window of a NaN buffer, and check both."""
    device = gpucourse.device()
    a, b = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
    buffer = torch.full((m + PAD, n + PAD), float("nan"), device=device)
    c = buffer[:m, :n]  # row stride n + PAD: a store without a mask lands in the NaN border
    grid = (triton.cdiv(m, BLOCK) * triton.cdiv(n, BLOCK),)
    launch = check.written(kernel)[grid]  # unwritten: its stub's error here, not Triton's
    launch(a, b, buffer, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
           BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK)
    # On an Ampere or newer GPU, tl.dot rounds float32 inputs to TF32 (10-bit mantissa) by default (Triton's `input_precision`);
    # a T4 or V100 has no TF32 and multiplies in full FP32. The tolerance covers both.
    check.assert_close(buffer[:m, :n], a @ b, rtol=1e-2, atol=1e-2 * math.sqrt(k), name=f"matmul_kernel on ({m}, {k}) @ ({k}, {n})")
    border = torch.cat([buffer[:m, n:].reshape(-1), buffer[m:].reshape(-1)])
    assert bool(torch.isnan(border).all()), f"matmul_kernel on ({m}, {k}) @ ({k}, {n}) wrote outside C: mask the store"


def check_triton_matmul(launcher, a, b):
    """One counted call of ``launcher`` on a and b: the right values, computed by Triton kernels alone."""
    name = f"triton_matmul on {tuple(a.shape)} @ {tuple(b.shape)} {a.dtype}"
    output, ops = check.counted_call(launcher, a, b, counter=check.launched_ops)
    check.assert_close(output, (a.double() @ b.double()).float(), rtol=2e-2, atol=2e-2 * math.sqrt(a.shape[1]), name=name)
    check.assert_kernels_did_the_work(ops, name=name)


# %% nbgrader={"grade_id": "test_matmul_kernel", "grade": true, "points": 2}
"""matmul_kernel, launched by the test with 16 x 16 x 16 blocks, computes A @ B on shapes that are not multiples of the blocks and writes nothing outside C."""
check_matmul_kernel(matmul_kernel, 32, 32, 32)  # whole blocks
check_matmul_kernel(matmul_kernel, 40, 50, 70)  # every edge partial
### BEGIN HIDDEN TESTS
check_matmul_kernel(matmul_kernel, 1, 1, 1)
check_matmul_kernel(matmul_kernel, 17, 100, 3)
check_matmul_kernel(matmul_kernel, 64, 7, 33)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_triton_matmul_launch", "grade": true, "points": 1}
"""triton_matmul launches your kernel, which does all the work (torch only allocates C), on fresh inputs, twice per shape."""
for m, k, n in [(40, 50, 70), (40, 50, 70), (16, 16, 16)]:
    check_triton_matmul(triton_matmul, torch.randn(m, k, device=gpucourse.device()), torch.randn(k, n, device=gpucourse.device()))
### BEGIN HIDDEN TESTS
for m, k, n in [(1, 1, 1), (70, 33, 9)]:
    check_triton_matmul(triton_matmul, torch.randn(m, k, device=gpucourse.device()), torch.randn(k, n, device=gpucourse.device()))
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_triton_matmul_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: triton_matmul, launching only your kernel, reaches 0.5x the speed of torch.matmul (cuBLAS) on 4096 x 4096 float16 matrices."""
# Modelled, not yet measured (gpucourse.thresholds.triton_matmul_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 0.5}
print(thresholds.describe("test_triton_matmul_speed", SPEEDUP_NEEDED))
check_triton_matmul(triton_matmul, torch.randn(40, 50, device=gpucourse.device()), torch.randn(50, 70, device=gpucourse.device()))  # first, a small call
if gpucourse.device_class() != "cuda":
    print("needs a GPU: there tl.dot runs on the tensor cores, as cuBLAS does")
else:
    def half_inputs(n):
        return torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda", dtype=torch.float16)

    def check_timed_matmul(args, output):
        check.assert_close(output, (args[0] @ args[1]).float(), rtol=2e-2, atol=1.0, name="a timed triton_matmul")

    check_triton_matmul(triton_matmul, *half_inputs(4096))  # at the timed size too: the kernel does all the work there
    # Timed where it was counted (when graded: the process holding only the setup cells, the launcher and its kernel).
    result = timing.compare_speed(lambda a, b: torch.matmul(a, b).float(), check.torch_only(triton_matmul), lambda: half_inputs(4096),
                                  check=check_timed_matmul)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="triton_matmul vs torch.matmul")

# %% [markdown]
# ## Question 6: why tensor cores need the tiled form (1 point, graded by hand)
#
# A tensor core executes `D = A·B + C` on small fixed tiles: on an A100 one warp-wide `mma.sync` instruction multiplies a 16 × 16 half-precision tile by a 16 × 8 one (shape m16n8k16: PTX ISA, "Warp-level matrix instructions: mma"), and CUDA's `wmma` API hands out 16 × 16 × 16 fragments, two such instructions each (CUDA C++ Programming Guide, "Warp Matrix Functions").
# The A100's tensor cores reach 312 TFLOP/s of FP16, 16 times its 19.5 TFLOP/s of ordinary FP32 (NVIDIA A100 datasheet).
# Explain why a compiler can only use it after the loop nest has been tiled and tensorized as in Questions 3-4, and what would go wrong if the loops were left in the `ijk` order of `matmul_ijk`.
# Use the numbers: the arithmetic intensity a 16 × 16 × 16 fragment step has (FLOPs per byte of its operands) against the intensity a whole card needs to keep its tensor cores busy (an A100: 312 TFLOP/s of FP16 against 2 TB/s of memory).
# Three to five sentences.

# %% [markdown] nbgrader={"grade_id": "tensor_core_answer", "solution": true, "grade": true, "points": 1}
# YOUR ANSWER HERE
#
# BEGIN SOLUTION
# The instruction's unit of work is a whole tile product (16 × 16 × 16 for a `wmma` fragment, m16n8k16 for one `mma.sync`): its operands must be two tiles already loaded into registers (from shared memory), so the loop nest must first be split into tiles whose innermost block is exactly that product; loops in `ijk` order produce one scalar multiply-add at a time, which no tensor instruction can take.
# One tile step does 2 · 16³ = 8192 FLOPs on 2 · 16² half-precision values, 1 KB, about 8 FLOP/byte; an A100 needs 312 TFLOP/s / 2 TB/s ≈ 156 FLOP/byte from memory to keep its tensor cores busy.
# So each loaded tile must be reused many times: blocks of 128 × 128 outputs staged in shared memory (each A and B value then serves 128 multiply-adds: per K step of depth k, 2 · 128 · 128 · k FLOPs on 2 · 128 · k half-precision values, 64 FLOP/byte whatever k is, since k cancels; only larger output blocks raise it) are what lift the intensity towards the ridge point; the `ijk` order rereads a column of B per output element and would leave the tensor cores waiting on memory at a few percent of their peak.
# END SOLUTION
