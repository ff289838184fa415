# %% [markdown]
# # Assignment 03: memory coalescing — sectors, bank conflicts, a tiled transpose and a layout change
#
# This assignment checks the ideas of lecture 03 (`course/03_coalescing.ipynb`).
# You will work out which warps a 2-D block of threads forms and what their memory requests cost, write a tiled transpose that a GPU's memory likes, and measure a structure-of-arrays rewrite on your own CPU.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other inputs and edge cases.
# - Without a GPU your kernel runs in numba's CUDA simulator, and the course's kernel tracer counts the sectors and bank conflicts a GPU would see (modelled); the GPU speed item waits for a GPU regrade.
#
# Points: 14 autograded (2 of them on a GPU).

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %% nbgrader={"grade_id": "imports", "locked": true}
# The GPU or the simulator must be chosen before numba.cuda is first imported.
from gpucourse import kernels

MODE = kernels.use_gpu_or_simulator()

import math

import numpy as np
import torch
from numba import cuda

import gpucourse
from gpucourse import check, sim, thresholds, timing

SIMULATED = kernels.simulator_active()
rng = np.random.default_rng(0)

# %% [markdown]
# ## Question 1: sectors per warp of a 2-D block (2 points)
#
# Kernels on matrices launch 2-D blocks, but the hardware still runs them as warps of 32 threads.
# Threads are numbered x first: thread `(tx, ty)` of a block of `block_dim = (block_x, block_y)` threads has the linear id `tx + ty * block_x`.
# Warp 0 is ids 0-31, warp 1 ids 32-63, and so on; when `block_x * block_y` is not a multiple of 32, the last warp is partial (its missing lanes are idle and ask for nothing).
# So one warp can be part of a row of the block, one whole row, or several rows.
#
# Write `sectors_per_warp(block_dim, width, transposed=False, element_bytes=4)`.
# The block (at the origin of the grid) reads a row-major 2-D array `width` elements wide, of `element_bytes`-byte elements, starting at a 32-byte-aligned address.
# Thread `(tx, ty)` reads element `[ty, tx]`, or element `[tx, ty]` when `transposed`.
# Return a list with the number of 32-byte sectors each warp's request touches, in warp order.
# The array has as many rows as the block needs, but the columns it reads must exist: raise `ValueError` when `width` is smaller than `block_x` (than `block_y` when `transposed`).
#
# You may call the lecture's model, `sim.sectors_per_request(addresses, bytes_per_lane)`, on each warp's byte addresses: forming the warps and computing their addresses is the question.
# About 10 lines.

# %% nbgrader={"grade_id": "sectors_per_warp", "solution": true}
def sectors_per_warp(block_dim, width, transposed=False, element_bytes=4):
    """block_dim: (block_x, block_y); thread (tx, ty) reads [ty, tx] (or [tx, ty]) of a row-major array `width` wide.
    -> list of 32-byte sectors per warp, in warp order."""
    ### BEGIN SOLUTION
    block_x, block_y = block_dim
    if width < (block_y if transposed else block_x):
        raise ValueError(f"a {width}-wide array has no column {(block_y if transposed else block_x) - 1} for this block to read")
    threads = block_x * block_y
    sectors = []
    for first in range(0, threads, 32):  # warps are runs of 32 linear ids; the last may be short
        addresses = []
        for thread in range(first, min(first + 32, threads)):
            tx, ty = thread % block_x, thread // block_x
            row, col = (tx, ty) if transposed else (ty, tx)
            addresses.append((row * width + col) * element_bytes)
        sectors.append(sim.sectors_per_request(addresses, element_bytes))
    return sectors
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_sectors_per_warp", "grade": true, "points": 2}
"""sectors_per_warp forms the warps of 2-D blocks (whole, partial and multi-row) and counts each warp's sectors."""
# Rows of a 1024-wide float32 array are 4096 bytes apart, so rows never share a sector there.
# (32, 8): warp w is row w, 32 consecutive floats from a 4096-byte boundary: 128 bytes = 4 sectors; 256 threads = 8 warps.
check.assert_equal(sectors_per_warp((32, 8), 1024), [4] * 8, name="a 32 × 8 block on a 1024-wide array")
# (16, 16): warp w is rows 2w and 2w + 1, 16 floats (64 bytes, 2 sectors) of each: 2 × 2 = 4; 8 warps.
check.assert_equal(sectors_per_warp((16, 16), 1024), [4] * 8, name="a 16 × 16 block on a 1024-wide array (warps span two rows)")
# (16, 16) transposed, width 16: lane (tx, ty) reads byte 64·tx + 4·ty, ty in {2w, 2w+1}: both in sector 2·tx + w // 4, so 16 sectors.
check.assert_equal(sectors_per_warp((16, 16), 16, transposed=True), [16] * 8, name="a 16 × 16 block reading a 16-wide array transposed")
### BEGIN HIDDEN TESTS
# (8, 32): warp w is rows 4w..4w+3, 8 floats = 32 aligned bytes each: 4 × 1 = 4 sectors; 8 warps.
check.assert_equal(sectors_per_warp((8, 32), 1024), [4] * 8, name="an 8 × 32 block (four rows per warp)")
# (64, 4): warp w is half of row w // 2: 32 floats from 4096·(w // 2) + 128·(w % 2), aligned: 4 sectors; 8 warps.
check.assert_equal(sectors_per_warp((64, 4), 1024), [4] * 8, name="a 64 × 4 block (two warps per row)")
# (24, 3) = 72 threads: warps of 32, 32, 8 lanes.
# Warp 0: row 0 tx 0-23 (96 B = 3 sectors) + row 1 tx 0-7 (32 B = 1) = 4; warp 1: row 1 tx 8-23 (bytes 32-95 of the row: 2) + row 2 tx 0-15 (2) = 4;
# warp 2: row 2 tx 16-23 (bytes 64-95: 1).
check.assert_equal(sectors_per_warp((24, 3), 1024), [4, 4, 1], name="a 24 × 3 block (72 threads, a partial last warp)")
# (16, 16) of doubles: each row's 16 doubles are 128 bytes = 4 sectors, two rows per warp: 8.
check.assert_equal(sectors_per_warp((16, 16), 1024, element_bytes=8), [8] * 8, name="a 16 × 16 block of doubles")
# (32, 8) transposed on a 1024-wide array: lane tx reads row tx, 4096 bytes from its neighbour: 32 sectors.
check.assert_equal(sectors_per_warp((32, 8), 1024, transposed=True), [32] * 8, name="a 32 × 8 block reading a 1024-wide array transposed")
# (8, 32) on a 10-wide array: warp w reads elements 40w + 10j + (0..7), j = 0..3, all within elements 40w..40w+37,
# and every one of their sectors 5w..5w+4 (8 elements each) holds one of them: 5 sectors.
check.assert_equal(sectors_per_warp((8, 32), 10), [5] * 8, name="an 8 × 32 block on a 10-wide array (rows share sectors)")
# 1-D blocks: (256, 1) is 8 warps of 32 consecutive floats (4 sectors); (100, 1) on 100 floats is 32 + 32 + 32 + 4 lanes,
# the last reading bytes 384-399, inside one sector (384 = 12 × 32).
check.assert_equal(sectors_per_warp((256, 1), 1024), [4] * 8, name="a 1-D block of 256 threads")
check.assert_equal(sectors_per_warp((100, 1), 100), [4, 4, 4, 1], name="a 1-D block of 100 threads")
# (40, 1) transposed on a 1-wide array (a column): lane tx reads element tx, consecutive: 32 lanes = 4 sectors, then 8 lanes = 1.
check.assert_equal(sectors_per_warp((40, 1), 1, transposed=True), [4, 1], name="a 40 × 1 block reading a one-column array transposed")
for block_dim, width, transposed in (((32, 8), 16, False), ((8, 32), 16, True)):
    try:
        got = sectors_per_warp(block_dim, width, transposed)
    except ValueError:
        pass
    else:
        raise AssertionError(f"sectors_per_warp({block_dim}, {width}, transposed={transposed}) should raise ValueError "
                             f"(the array is too narrow for the block), got {got!r}")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: load efficiency of a block (1 point)
#
# Write `block_load_efficiency(block_dim, width, transposed=False, element_bytes=4)`: the efficiency of the whole block's read of Question 1.
# It is the bytes asked for over the bytes moved: the sum over warps of the distinct bytes each warp asked for, divided by 32 × the total number of sectors the warps touched.
# Use your `sectors_per_warp`.
#
# About 3 lines.

# %% nbgrader={"grade_id": "block_load_efficiency", "solution": true}
def block_load_efficiency(block_dim, width, transposed=False, element_bytes=4):
    """Bytes the block's threads asked for / bytes its warps moved in whole 32-byte sectors (at most 1.0)."""
    ### BEGIN SOLUTION
    block_x, block_y = block_dim
    # Every thread reads its own element, so the warps ask for block_x · block_y distinct elements in all.
    requested = block_x * block_y * element_bytes
    return requested / (32 * sum(sectors_per_warp(block_dim, width, transposed, element_bytes)))
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_block_load_efficiency", "grade": true, "points": 1}
"""block_load_efficiency weighs the bytes a block asked for against the sectors its warps moved."""
# (32, 8): 256 × 4 = 1024 bytes asked, 8 warps × 4 sectors × 32 = 1024 moved.
check.assert_approx(block_load_efficiency((32, 8), 1024), 1.0, name="a 32 × 8 block on a 1024-wide array")
# (16, 16) transposed, width 16: 1024 bytes asked, 8 warps × 16 sectors × 32 = 4096 moved.
check.assert_approx(block_load_efficiency((16, 16), 16, transposed=True), 0.25, name="a 16 × 16 block reading a 16-wide array transposed")
### BEGIN HIDDEN TESTS
# (32, 8) transposed, width 1024: 1024 bytes asked, 8 × 32 × 32 = 8192 moved.
check.assert_approx(block_load_efficiency((32, 8), 1024, transposed=True), 0.125, name="a 32 × 8 block reading transposed")
# (24, 3): 72 × 4 = 288 bytes asked, (4 + 4 + 1) × 32 = 288 moved: a partial warp wastes lanes, not bytes.
check.assert_approx(block_load_efficiency((24, 3), 1024), 1.0, name="a 24 × 3 block (a partial last warp)")
# (8, 32) on a 10-wide array: 1024 bytes asked, 8 warps × 5 sectors × 32 = 1280 moved.
check.assert_approx(block_load_efficiency((8, 32), 10), 0.8, name="an 8 × 32 block on a 10-wide array")
# (16, 16) of doubles transposed, width 16: lane (tx, ty) reads byte 128·tx + 8·ty, the warp's two ty share a sector:
# 16 sectors per warp; 256 × 8 = 2048 bytes asked, 8 × 16 × 32 = 4096 moved.
check.assert_approx(block_load_efficiency((16, 16), 16, transposed=True, element_bytes=8), 0.5,
                    name="a 16 × 16 block of doubles reading a 16-wide array transposed")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 3: bank conflicts of a tile read by a 2-D block (2 points)
#
# Shared memory has 32 banks of 4-byte words: word `w` is in bank `w % 32`.
# A warp's request is served in as many passes as the most *distinct* words any one bank must deliver (its bank-conflict degree; lanes reading the same word share it).
#
# Write `tile_conflict_degrees(block_dim, tile_width, padding=0, transposed=False)`.
# A block of `block_dim` threads reads a float32 shared-memory tile stored row by row, each row `tile_width + padding` words long (the padding words hold no data); word 0 is the tile's first element.
# Thread `(tx, ty)` reads `tile[ty, tx]`, or `tile[tx, ty]` when `transposed`.
# Return the bank-conflict degree of each warp, in warp order, the warps formed as in Question 1.
# Raise `ValueError` when `tile_width` is smaller than `block_x` (than `block_y` when `transposed`).
# You may call the lecture's model, `sim.bank_conflict_degree(word_addresses)`, on each warp's word addresses.
#
# This is Question 4's tile: its blocks are `(TILE, BLOCK_ROWS)` = (32, 8) threads, which store rows of the tile (`tile[ty, tx]`) and read it back by columns (`tile[tx, ty]`).
# `tile_conflict_degrees((32, 8), 32, transposed=True)` is what that read costs in a `TILE × TILE` tile, and `padding=1` is the `TILE_PADDED` tile you will declare.
# With other block shapes (the lecture's 16 × 16 blocks, say) a warp spans several rows of the block, and the padding that fixes the read may not.
#
# About 10 lines.

# %% nbgrader={"grade_id": "tile_conflict_degrees", "solution": true}
def tile_conflict_degrees(block_dim, tile_width, padding=0, transposed=False):
    """block_dim: (block_x, block_y); thread (tx, ty) reads tile[ty, tx] (or tile[tx, ty]) of a float32 tile
    with rows of tile_width + padding words. -> list of bank-conflict degrees per warp, in warp order."""
    ### BEGIN SOLUTION
    block_x, block_y = block_dim
    if tile_width < (block_y if transposed else block_x):
        raise ValueError(f"a {tile_width}-wide tile has no column {(block_y if transposed else block_x) - 1} for this block to read")
    threads, row_words = block_x * block_y, tile_width + padding
    degrees = []
    for first in range(0, threads, 32):  # warps are runs of 32 linear ids; the last may be short
        words = []
        for thread in range(first, min(first + 32, threads)):
            tx, ty = thread % block_x, thread // block_x
            row, col = (tx, ty) if transposed else (ty, tx)
            words.append(row * row_words + col)
        degrees.append(sim.bank_conflict_degree(words))
    return degrees
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_tile_conflict_degrees", "grade": true, "points": 2}
"""tile_conflict_degrees finds the bank conflicts of each warp of a block reading a tile by rows or by columns."""
# Question 4's block, (32, 8): warp w is ty = w, lanes tx = 0..31.
# Rows: lane tx reads word 32w + tx, bank tx: 32 banks, one word each.
check.assert_equal(tile_conflict_degrees((32, 8), 32), [1] * 8, name="a 32 × 8 block reading rows of a 32-wide tile")
# Columns: lane tx reads word 32·tx + w, all in bank w: 32 distinct words.
check.assert_equal(tile_conflict_degrees((32, 8), 32, transposed=True), [32] * 8, name="a 32 × 8 block reading columns of a 32-wide tile")
# Padded: word 33·tx + w is in bank (tx + w) % 32: all different.
check.assert_equal(tile_conflict_degrees((32, 8), 32, padding=1, transposed=True), [1] * 8,
                   name="a 32 × 8 block reading columns of a 32-wide tile padded by 1")
### BEGIN HIDDEN TESTS
# (16, 16) columns of a 16-wide tile: warp w is tx = 0..15, ty in {2w, 2w+1}; word 16·tx + ty is in bank 16·(tx % 2) + ty:
# 4 banks, each holding the 8 words of one parity of tx: 8-way.
check.assert_equal(tile_conflict_degrees((16, 16), 16, transposed=True), [8] * 8, name="a 16 × 16 block reading columns of a 16-wide tile")
# Padded by 1: word 17·tx + ty; for ty = 2w the banks are 2w + {0, 2, ..., 14, 17, 19, ..., 31}, for ty = 2w + 1 the same set
# plus one, and the two sets share one bank only (2w: words 2w and 256 + 2w): 2-way.
check.assert_equal(tile_conflict_degrees((16, 16), 16, padding=1, transposed=True), [2] * 8,
                   name="a 16 × 16 block reading columns of a 16-wide tile padded by 1")
# (32, 32) columns of a tile padded by 2: word 34·tx + w is in bank (2·tx + w) % 32, tx and tx + 16 share it: 2-way, 32 warps.
check.assert_equal(tile_conflict_degrees((32, 32), 32, padding=2, transposed=True), [2] * 32,
                   name="a 32 × 32 block reading columns of a 32-wide tile padded by 2")
# (24, 3) columns of a 32-wide tile: lane (tx, ty) reads word 32·tx + ty, bank ty.
# Warp 0: ty 0 × 24 lanes, ty 1 × 8; warp 1: ty 1 × 16, ty 2 × 16; warp 2: ty 2 × 8 lanes.
check.assert_equal(tile_conflict_degrees((24, 3), 32, transposed=True), [24, 16, 8], name="a 24 × 3 block (a partial last warp) reading columns")
# (8, 32) columns of a 32-wide tile: warp w is tx = 0..7, ty = 4w..4w+3; word 32·tx + ty in bank ty: 4 banks of 8 words.
check.assert_equal(tile_conflict_degrees((8, 32), 32, transposed=True), [8] * 8, name="an 8 × 32 block reading columns of a 32-wide tile")
# Padded by 1: bank (tx + ty) % 32, and tx + ty takes one value for at most 4 of the 8 × 4 lanes: 4-way.
check.assert_equal(tile_conflict_degrees((8, 32), 32, padding=1, transposed=True), [4] * 8,
                   name="an 8 × 32 block reading columns of a 32-wide tile padded by 1")
try:
    got = tile_conflict_degrees((32, 8), 16)
except ValueError:
    pass
else:
    raise AssertionError(f"tile_conflict_degrees((32, 8), 16) should raise ValueError (the tile is too narrow for the block), got {got!r}")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 4: a tiled transpose (4 points)
#
# Below is a naive transpose: block `(bx, by)` covers a `TILE × TILE` tile of `x`, its `TILE × BLOCK_ROWS` threads each copy `TILE / BLOCK_ROWS` rows, and each thread writes `out[col, row] = x[row, col]`.
# Its loads are coalesced (a warp reads along a row of `x`), but its stores are not: a warp writes down a column of `out`, 32 rows apart.
# Why 32 × 8 threads for a 32 × 32 tile, when the lecture launched 32 × 32 (one thread per element)? This is the launch of NVIDIA's transpose (Mark Harris, "An Efficient Matrix Transpose in CUDA C/C++", NVIDIA Technical Blog, 2013): more work per thread, fewer threads per block.
# Each thread computes its indices once for 4 elements and has 4 independent loads in flight, and a 256-thread block leaves room for several blocks per SM, so one block waiting at its barrier does not leave the SM idle.
# A warp is still one row of 32 threads, so the lecture's sector and bank-conflict counts per request carry over.
#
# Write `transpose_tiled(x, out)` with the **same launch** (`transpose_launch(x.shape)`, blocks of `(TILE, BLOCK_ROWS)` threads):
# 1. load the tile from `x` into a shared array, a warp reading along a row of `x`;
# 2. `cuda.syncthreads()`;
# 3. write the tile to `out` transposed, a warp writing along a row of `out`: it reads a *column* of the shared tile.
#
# Reading a column of a `TILE × TILE` float32 tile makes every lane of the warp hit the same bank (a 32-way conflict): declare the tile `(TILE, TILE_PADDED)` and the padding spreads a column over all banks.
# A shared array's shape must be numbers the compiler can see: literals or module constants such as `TILE_PADDED`; an expression like `TILE + 1` runs in the simulator, but no GPU compiler accepts it (and the grader compiles your kernel for a real GPU).
# `x` is `(rows, cols)` float32 of any shape: neither side need be a multiple of `TILE`, so check bounds on both the load and the store.
#
# Graded: correctness (2 points), and what the tracer counts in the simulator (2 points), on a 40 × 70 matrix and on a larger one drawn when graded, as totals over the whole launch: no data race, and the sectors of the global loads and of the stores, each at most 1.25 × the least a transpose needs (what the naive kernel's coalesced loads move, reading x and reading a matrix of out's shape), and the shared-memory wavefronts (a request costs as many as its bank-conflict degree), at most 1.25 × one per tile store and tile load.
# On a 40 × 70 matrix the naive kernel's stores move 8 times the least (2800 sectors for 350), an unpadded tile makes 11 times the wavefronts (2920 for 260), and the reference moves exactly the least. Extra accesses only add to totals.
# On a GPU, an extra item (2 points) times it against the naive kernel on a 4096 × 4096 matrix and needs 1.5×.
# That threshold is modelled, not yet measured: no GPU has run this item; `gpucourse.thresholds` models about 4× on every card in `gpu_specs` (V100, T4, A100, L4, H100, H200) from the sectors each kernel moves, an upper bound since the L2 cache merges part of the naive kernel's stores, and `scripts/gpu_check.sh` will calibrate it on the first GPU run.
# About 15 lines.

# %% nbgrader={"grade_id": "naive_transpose", "locked": true}
TILE = 32
BLOCK_ROWS = 8  # threads per block: TILE × BLOCK_ROWS = 256; each copies TILE // BLOCK_ROWS rows (NVIDIA's transpose blog post, Harris 2013)
TILE_PADDED = TILE + 1  # one column of padding; a module constant, so the compiler sees a constant shape


def transpose_launch(shape):
    """(grid, block) for a transpose of a (rows, cols) matrix: one block per TILE × TILE tile."""
    rows, cols = shape
    return (math.ceil(cols / TILE), math.ceil(rows / TILE)), (TILE, BLOCK_ROWS)


@cuda.jit
def transpose_naive(x, out):
    """out[c, r] = x[r, c]: coalesced loads, stores 32 rows apart."""
    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x
    for k in range(0, TILE, BLOCK_ROWS):
        row = cuda.blockIdx.y * TILE + cuda.threadIdx.y + k
        if row < x.shape[0] and col < x.shape[1]:
            out[col, row] = x[row, col]


def run_naive_transpose(x, out):
    """Launch transpose_naive on (device) arrays or CUDA tensors; returns out."""
    grid, block = transpose_launch(x.shape)
    transpose_naive[grid, block](x, out)
    return out


# %% nbgrader={"grade_id": "transpose_tiled", "solution": true}
@cuda.jit
def transpose_tiled(x, out):
    """out[c, r] = x[r, c] through a padded shared-memory tile; x: (rows, cols) float32, any shape."""
    ### BEGIN SOLUTION
    tile = cuda.shared.array((TILE, TILE_PADDED), np.float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col = cuda.blockIdx.x * TILE + tx
    for k in range(0, TILE, BLOCK_ROWS):
        row = cuda.blockIdx.y * TILE + ty + k
        if row < x.shape[0] and col < x.shape[1]:
            tile[ty + k, tx] = x[row, col]
    cuda.syncthreads()
    out_col = cuda.blockIdx.y * TILE + tx  # a row of out is a column of x
    for k in range(0, TILE, BLOCK_ROWS):
        out_row = cuda.blockIdx.x * TILE + ty + k
        if out_row < out.shape[0] and out_col < out.shape[1]:
            out[out_row, out_col] = tile[tx, ty + k]
    ### END SOLUTION


def run_tiled_transpose(x, out):
    """Launch transpose_tiled like the naive kernel; returns out."""
    grid, block = transpose_launch(x.shape)
    transpose_tiled[grid, block](x, out)
    return out


# %% nbgrader={"grade_id": "test_transpose_correct", "grade": true, "points": 2}
"""transpose_tiled transposes matrices whose sides are not multiples of TILE."""
check.written(transpose_tiled)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)


def check_transpose(rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full((cols, rows), np.nan, dtype=np.float32)
    grid, block = transpose_launch(x.shape)
    transpose_tiled[grid, block](x, out)
    check.assert_close(out, np.ascontiguousarray(x.T), rtol=0, atol=0, name=f"transpose of a {rows}×{cols} matrix")


check_transpose(40, 70)
### BEGIN HIDDEN TESTS
check_transpose(1, 1)
check_transpose(33, 5)
check_transpose(64, 32)
check_transpose(3, 97)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_transpose_traced", "grade": true, "points": 2}
"""Traced in the simulator: transpose_tiled has no data race and moves no more sectors and wavefronts than the work needs."""
check.written(transpose_tiled)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)
MARGIN = 1.25  # allowed above the least the transpose needs


def traced(kernel, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros((cols, rows), dtype=np.float32)
    grid, block = transpose_launch(x.shape)
    with sim.trace() as t:
        kernel[grid, block](x, out)
    check.assert_race_free(t, name=f"the {rows}×{cols} transpose")  # read from the trace, never from the output
    check.assert_close(out, np.ascontiguousarray(x.T), rtol=0, atol=0, name=f"traced transpose of {rows}×{cols}")
    return t


def coalesced_sectors(rows, cols):
    """32-byte sectors that whole warps move reading a rows × cols float32 matrix along its rows, as the naive kernel
    reads x: one request per 32 consecutive floats of a row, from a 256-byte-aligned start (as cudaMalloc gives)."""
    total = 0
    for row in range(rows):
        for start in range(0, cols, 32):
            first, last = 4 * (row * cols + start), 4 * (row * cols + min(start + 32, cols)) - 1
            total += last // 32 - first // 32 + 1
    return total


def least_needed(rows, cols):
    """The least a rows × cols transpose through a shared tile needs, from the naive kernel's coalesced loads:
    loads as it reads x, stores as it would read a cols × rows matrix, and one conflict-free shared
    store and load for each of those warp requests. Totals, so extra work never helps."""
    requests = rows * math.ceil(cols / 32) + cols * math.ceil(rows / 32)
    return {"load": coalesced_sectors(rows, cols), "store": coalesced_sectors(cols, rows), "wavefronts": requests}


def check_traced(rows, cols):
    tiled = traced(transpose_tiled, rows, cols)
    if not tiled.available:
        return False
    least = least_needed(rows, cols)
    got = {"load": tiled.sectors(kind="load"), "store": tiled.sectors(kind="store"), "wavefronts": tiled.wavefronts()}
    for what, figure in got.items():
        unit = "shared-memory wavefronts" if what == "wavefronts" else f"sectors for global {what}s"
        print(f"{rows}×{cols}: {figure} {unit}, the least needed {least[what]} (modelled)")
        hint = "pad the tile" if what == "wavefronts" else "each warp should touch 32 consecutive floats"
        assert figure <= MARGIN * least[what], f"{rows}×{cols}: {figure} {unit}, need at most {MARGIN} × {least[what]}: {hint}"
    return True


if not check_traced(40, 70):
    # A kernel compiled for this GPU cannot be traced; the grader traces it in the simulator on every machine.
    print("traced counts need numba's simulator: the grader traces your kernel there; on this GPU the speed item measures the effect")
### BEGIN HIDDEN TESTS
else:
    import random

    # Drawn when graded, larger than every visible size, sides not multiples of TILE: 12 blocks and their edges.
    draw = random.SystemRandom()
    check_traced(draw.randint(97, 111), draw.randint(65, 79))  # 4 × 3 blocks, partial at both edges
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_transpose_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: the tiled transpose beats the naive one by 1.5x on a 4096 x 4096 matrix."""
# Modelled, not yet measured: about 4x on every card in gpu_specs from the sectors moved (memory-bound everywhere;
# gpucourse.thresholds.transpose_speed), less where L2 merges stores; scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 1.5}
print(thresholds.describe("test_transpose_speed", SPEEDUP_NEEDED))
check.written(transpose_tiled)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)
small = rng.standard_normal((33, 5)).astype(np.float32)  # first, a small transpose through the launcher
check.assert_close(run_tiled_transpose(small, np.zeros((5, 33), np.float32)), np.ascontiguousarray(small.T), rtol=0, atol=0,
                   name="run_tiled_transpose on a 33×5 matrix")
if kernels.gpu_or_explain("the tiled transpose runs 2-3x faster than the naive one (stores coalesced)"):
    def fresh_matrices():
        x = torch.randn(4096, 4096, device="cuda")
        return x, torch.empty(4096, 4096, device="cuda")

    def check_timed(args, output):
        check.assert_close(output, args[0].T.contiguous(), rtol=0, atol=0, name="a timed transpose")

    result = timing.compare_speed(run_naive_transpose, run_tiled_transpose, fresh_matrices, check=check_timed, rounds=7)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="tiled vs naive transpose")

# %% [markdown]
# ## Question 5: structure of arrays on the CPU (3 points)
#
# The particles below are stored as an **array of structures** (AoS): one row of 8 float32 fields per particle, `x, y, z, vx, vy, vz, mass, charge`.
# `drift_aos` advances them `steps` time steps under gravity, touching 6 of the 8 fields.
#
# Write `drift_soa(fields, dt, steps)` doing the same on a **structure of arrays** (SoA): `fields` has shape `(8, n)`, one contiguous row per field (`fields[0]` is every particle's x).
# Update `fields` in place and return it; the results must match `drift_aos` on the same particles (within float32 rounding).
# No Python loop over particles: a loop over the steps is expected.
#
# 1 point for correctness, 2 for speed: at least 4× faster than `drift_aos` with 50,000 particles and 20 steps, measured on fresh particles on your CPU (the reference reaches 15-25× on the course's 2-core machine; one thread).
# About 5 lines.
#
# What this speedup measures: numpy's vectorisation, not memory traffic.
# 50,000 particles take 1.6 MB, which stay in the L2 or L3 cache of most CPUs.
# `particles[:, 0:3] += particles[:, 3:6] * dt` makes numpy start an inner loop of 3 elements for every particle, and numpy pays a fixed cost per inner loop; on the SoA layout each operation is a few long passes over contiguous rows, which numpy runs with SIMD instructions.
# Lecture 03 (section 5) measures both parts, and shows the layout's own effect on memory, where it belongs: in compiled loops over more particles than the cache holds.

# %% nbgrader={"grade_id": "aos_baseline", "locked": true}
FIELDS = ("x", "y", "z", "vx", "vy", "vz", "mass", "charge")
GRAVITY = np.float32(9.81)


def drift_aos(particles, dt, steps):
    """particles: (n, 8) float32, one row per particle. Each step: vz -= g·dt, then position += velocity·dt."""
    for _ in range(steps):
        particles[:, 5] -= GRAVITY * dt
        particles[:, 0:3] += particles[:, 3:6] * dt
    return particles


def random_particles(n):
    """(n, 8) float32 particles: positions and velocities in [-1, 1), positive masses and charges."""
    particles = rng.uniform(-1, 1, (n, 8)).astype(np.float32)
    particles[:, 6:] = np.abs(particles[:, 6:]) + 0.1
    return particles


# %% nbgrader={"grade_id": "drift_soa", "solution": true}
def drift_soa(fields, dt, steps):
    """fields: (8, n) float32, one contiguous row per field; the update of drift_aos, in place; returns fields."""
    ### BEGIN SOLUTION
    position, velocity = fields[0:3], fields[3:6]
    for _ in range(steps):
        velocity[2] -= GRAVITY * dt
        position += velocity * dt
    return fields
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_drift_soa_correct", "grade": true, "points": 1}
"""drift_soa returns drift_aos's results, on the structure-of-arrays layout."""


def check_drift(n, dt, steps, what="particles"):
    particles = random_particles(n)
    fields = np.ascontiguousarray(particles.T)
    expected = drift_aos(particles.copy(), dt, steps).T
    result = drift_soa(fields, dt, steps)
    check.assert_close(result, np.ascontiguousarray(expected), rtol=1e-5, atol=1e-5, name=f"{n} {what} after {steps} steps")


check_drift(1000, np.float32(0.01), 5)
check_drift(1000, np.float32(0.01), 5, what="new particles of the same shape")  # a result kept from the previous call is wrong
### BEGIN HIDDEN TESTS
check_drift(1, np.float32(0.5), 1)
check_drift(777, np.float32(0.001), 0)
check_drift(5000, np.float32(0.02), 30)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_drift_soa_speed", "grade": true, "points": 2}
"""drift_soa beats drift_aos by the required factor on fresh particles, measured on this machine."""
SPEEDUP_NEEDED = {"cpu": 4.0, "cuda": 4.0}  # numpy runs on the CPU either way


def fresh_fields():
    return np.ascontiguousarray(random_particles(50_000).T), np.float32(0.01), 20


def as_particles(fields, dt, steps):
    return np.ascontiguousarray(fields.T), dt, steps


def check_timed_fields(args, output):
    assert output.shape == (8, 50_000), f"expected the (8, 50000) fields back, got shape {output.shape}"


### BEGIN HIDDEN TESTS
_made = {}  # id of a timed input -> the seed it was made from (drift_soa updates its input in place)


def fields_from(seed):
    """The (8, 50000) fields of random_particles, made again from ``seed``."""
    particles = np.random.default_rng(seed).uniform(-1, 1, (50_000, 8)).astype(np.float32)
    particles[:, 6:] = np.abs(particles[:, 6:]) + 0.1
    return np.ascontiguousarray(particles.T)


def fresh_fields():
    seed = int(rng.integers(1 << 62))
    fields = fields_from(seed)
    _made[id(fields)] = seed
    return fields, np.float32(0.01), 20


def check_timed_fields(args, output):
    """Graded: every value of every timed output, against drift_aos on the same input made again."""
    fields, dt, steps = args
    assert output.shape == (8, 50_000), f"expected the (8, 50000) fields back, got shape {output.shape}"
    expected = drift_aos(np.ascontiguousarray(fields_from(_made[id(fields)]).T), dt, steps).T
    check.assert_close(output, expected, rtol=1e-5, atol=1e-5, name="timed fields")
### END HIDDEN TESTS


result = timing.compare_speed(drift_aos, drift_soa, fresh_fields, baseline_inputs=as_particles, check=check_timed_fields, rounds=7)
check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="drift_soa vs drift_aos")
