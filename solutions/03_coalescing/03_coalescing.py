# %% [markdown]
# # Assignment 03: memory coalescing — sectors, bank conflicts, a tiled transpose and a layout change
#
# This assignment checks the ideas of lecture 03 (`course/03_coalescing.ipynb`).
# You will count what a warp's memory request costs, write a tiled transpose that a GPU's memory likes, and measure a structure-of-arrays rewrite on your own CPU.
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
from gpucourse import check, sim, timing

SIMULATED = kernels.simulator_active()
rng = np.random.default_rng(0)

# %% nbgrader={"grade_id": "warp_helpers", "locked": true}
def floats(stride=1, offset=0):
    """Byte addresses of a full warp whose lane k reads float number offset + k * stride."""
    return [4 * (offset + lane * stride) for lane in range(32)]


# %% [markdown]
# ## Question 1: sectors per request (2 points)
#
# Global memory moves data in 32-byte **sectors**.
# Write `sectors_per_request(addresses, bytes_per_lane=4, sector_bytes=32)`: given the byte addresses of one warp's active lanes (a list of ints, at most 32), each lane reading a naturally aligned word of `bytes_per_lane` bytes, return how many distinct sectors the request touches.
# Lanes that read the same word need its sector only once; an empty request touches none.
# Write Questions 1-3 yourself: the hidden tests switch off the course package's own models (`gpucourse.sim`) while they call yours.
#
# About 2 lines.

# %% nbgrader={"grade_id": "sectors_per_request", "solution": true}
def sectors_per_request(addresses, bytes_per_lane=4, sector_bytes=32):
    """Distinct sector_bytes-sized sectors holding the bytes of one warp's active lanes."""
    ### BEGIN SOLUTION
    return len({sector for a in addresses for sector in range(a // sector_bytes, (a + bytes_per_lane - 1) // sector_bytes + 1)})
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_sectors_per_request", "grade": true, "points": 2}
"""sectors_per_request counts the sectors of coalesced, offset, strided and broadcast requests."""
check.assert_equal(sectors_per_request(floats()), 4, name="32 consecutive floats")
check.assert_equal(sectors_per_request(floats(offset=1)), 5, name="32 consecutive floats starting one float late")
check.assert_equal(sectors_per_request(floats(stride=2)), 8, name="every other float")
check.assert_equal(sectors_per_request(floats(stride=0)), 1, name="all lanes reading one float")
### BEGIN HIDDEN TESTS
check.assert_equal(sectors_per_request(floats(stride=8)), 32, name="stride 8")
check.assert_equal(sectors_per_request(floats(stride=100)), 32, name="stride 100")
check.assert_equal(sectors_per_request([]), 0, name="no active lanes")
check.assert_equal(sectors_per_request([4 * lane for lane in range(9)]), 2, name="9 active lanes")
check.assert_equal(sectors_per_request([8 * lane for lane in range(32)], bytes_per_lane=8), 8, name="32 doubles")
check.assert_equal(sectors_per_request([16 * lane for lane in range(32)], bytes_per_lane=16), 16, name="32 float4s")
check.assert_equal(sectors_per_request([lane for lane in range(32)], bytes_per_lane=1), 1, name="32 bytes")
check.assert_equal(sectors_per_request(floats(), sector_bytes=64), 2, name="64-byte sectors")
check.assert_equal(sectors_per_request([0, 128, 0, 128, 4]), 2, name="repeated addresses")
with check.forbidden("gpucourse.sim"):
    check.assert_equal(sectors_per_request(floats(offset=3)), 5, name="without the course's own model")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: load efficiency (1 point)
#
# Write `load_efficiency(addresses, bytes_per_lane=4)`: the bytes the lanes asked for over the bytes moved, where bytes moved are whole 32-byte sectors.
# Count each distinct byte asked for once (lanes reading the same word share it), so the result is at most 1.0.
# Raise `ValueError` for a request with no active lanes.
# Use your `sectors_per_request`.

# %% nbgrader={"grade_id": "load_efficiency", "solution": true}
def load_efficiency(addresses, bytes_per_lane=4):
    """Distinct requested bytes / (32 × sectors moved), for one warp request."""
    ### BEGIN SOLUTION
    if not addresses:
        raise ValueError("a request needs at least one active lane")
    requested = len({byte for a in addresses for byte in range(a, a + bytes_per_lane)})
    return requested / (32 * sectors_per_request(addresses, bytes_per_lane))
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_load_efficiency", "grade": true, "points": 1}
"""load_efficiency is 1.0 for a coalesced warp and falls with offsets and strides."""
check.assert_approx(load_efficiency(floats()), 1.0, name="coalesced")
check.assert_approx(load_efficiency(floats(offset=1)), 128 / 160, name="offset by one float")
check.assert_approx(load_efficiency(floats(stride=2)), 0.5, name="stride 2")
### BEGIN HIDDEN TESTS
check.assert_approx(load_efficiency(floats(stride=32)), 0.125, name="stride 32")
check.assert_approx(load_efficiency(floats(stride=0)), 4 / 32, name="a broadcast")
check.assert_approx(load_efficiency([8 * lane for lane in range(32)], bytes_per_lane=8), 1.0, name="doubles")
check.assert_approx(load_efficiency([0]), 4 / 32, name="one lane")
try:
    load_efficiency([])
except ValueError:
    pass
else:
    raise AssertionError("load_efficiency([]) should raise ValueError")
with check.forbidden("gpucourse.sim"):
    check.assert_approx(load_efficiency(floats(stride=4)), 0.25, name="without the course's own model")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 3: bank conflicts (2 points)
#
# Shared memory has 32 banks of 4-byte words: word `w` is in bank `w % 32`.
# Write `bank_conflict_degree(word_addresses, banks=32)`: given the word addresses one warp's active lanes read, return the largest number of *distinct* words any single bank must serve.
# 1 means conflict-free; lanes reading the same word are served together (a broadcast, not a conflict); an empty request has degree 0.
#
# About 4 lines.

# %% nbgrader={"grade_id": "bank_conflict_degree", "solution": true}
def bank_conflict_degree(word_addresses, banks=32):
    """Most distinct words any one bank must serve for this warp request (1 = conflict-free)."""
    ### BEGIN SOLUTION
    per_bank = {}
    for word in word_addresses:
        per_bank.setdefault(word % banks, set()).add(word)
    return max((len(words) for words in per_bank.values()), default=0)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_bank_conflict_degree", "grade": true, "points": 2}
"""bank_conflict_degree finds conflicts, and tells them from broadcasts."""
check.assert_equal(bank_conflict_degree(range(32)), 1, name="one word per bank")
check.assert_equal(bank_conflict_degree([2 * lane for lane in range(32)]), 2, name="stride 2")
check.assert_equal(bank_conflict_degree([32 * lane for lane in range(32)]), 32, name="a column of a 32-wide tile")
check.assert_equal(bank_conflict_degree([7] * 32), 1, name="everyone reading one word")
### BEGIN HIDDEN TESTS
check.assert_equal(bank_conflict_degree([33 * lane for lane in range(32)]), 1, name="a column of a padded 33-wide tile")
check.assert_equal(bank_conflict_degree([0, 32, 32, 64, 1]), 3, name="repeats in a conflicting bank")
check.assert_equal(bank_conflict_degree([]), 0, name="no active lanes")
check.assert_equal(bank_conflict_degree([16 * lane for lane in range(32)]), 16, name="stride 16")
check.assert_equal(bank_conflict_degree([lane * 3 for lane in range(32)]), 1, name="odd stride 3")
check.assert_equal(bank_conflict_degree([0, 16, 32, 48], banks=16), 4, name="16 banks")
with check.forbidden("gpucourse.sim"):
    check.assert_equal(bank_conflict_degree([4 * lane for lane in range(32)]), 4, name="without the course's own model")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 4: a tiled transpose (4 points)
#
# Below is a naive transpose: block `(bx, by)` covers a `TILE × TILE` tile of `x`, its `TILE × BLOCK_ROWS` threads each copy `TILE / BLOCK_ROWS` rows, and each thread writes `out[col, row] = x[row, col]`.
# Its loads are coalesced (a warp reads along a row of `x`), but its stores are not: a warp writes down a column of `out`, 32 rows apart.
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
# Graded: correctness (2 points), and what the tracer counts in the simulator (2 points): global loads *and* stores at most 1.25 × 4 sectors per request on average (the naive kernel's stores need about 23 on a 40 × 70 matrix), and a mean bank-conflict degree of the shared-memory accesses of at most 1.25.
# On a GPU, an extra item times it against the naive kernel.
# About 15 lines.

# %% nbgrader={"grade_id": "naive_transpose", "locked": true}
TILE = 32
BLOCK_ROWS = 8  # threads per block: TILE × BLOCK_ROWS = 256; each copies TILE // BLOCK_ROWS rows
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
"""Traced in the simulator: transpose_tiled's global accesses are coalesced and its shared tile conflict-free."""
SECTOR_MARGIN, CONFLICT_MARGIN = 1.25 * 4, 1.25


def traced(kernel, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros((cols, rows), dtype=np.float32)
    grid, block = transpose_launch(x.shape)
    with sim.trace() as t:
        kernel[grid, block](x, out)
    check.assert_close(out, np.ascontiguousarray(x.T), rtol=0, atol=0, name=f"traced transpose of {rows}×{cols}")
    return t


tiled = traced(transpose_tiled, 40, 70)
if not tiled.available:
    # A kernel compiled for this GPU cannot be traced; the grader traces it in the simulator on every machine.
    print("traced counts need numba's simulator: the grader traces your kernel there; on this GPU the speed item measures the effect")
else:
    naive = traced(transpose_naive, 40, 70)
    for kind in ("load", "store"):
        got = tiled.sectors_per_request(kind=kind)
        before = f"{naive.sectors_per_request(kind=kind):.2f}" if naive.available else "not traced here"
        print(f"global {kind}s: {got:.2f} sectors/request (naive kernel: {before}; modelled from the trace)")
        assert got <= SECTOR_MARGIN, f"global {kind}s take {got:.2f} sectors per request on average, need at most {SECTOR_MARGIN}"
    degree = tiled.bank_conflict_degree()
    print(f"shared memory: mean bank-conflict degree {degree:.2f} (modelled)")
    assert degree <= CONFLICT_MARGIN, f"mean bank-conflict degree {degree:.2f}, need at most {CONFLICT_MARGIN}: pad the tile"
    ### BEGIN HIDDEN TESTS
    tiled = traced(transpose_tiled, 64, 96)
    assert tiled.sectors_per_request(kind="store") <= SECTOR_MARGIN, "stores are not coalesced on a 64×96 matrix"
    assert tiled.bank_conflict_degree() <= CONFLICT_MARGIN, "bank conflicts on a 64×96 matrix"
    ### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_transpose_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: the tiled transpose beats the naive one by 1.5x on a 4096 x 4096 matrix."""
SPEEDUP_NEEDED = {"cuda": 1.5}
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
# Coalescing is one case of a general rule: memory hardware moves whole blocks (32-byte sectors on a GPU, 64-byte cache lines on a CPU), so data used together should sit together.
# The particles below are stored as an **array of structures** (AoS): one row of 8 float32 fields per particle, `x, y, z, vx, vy, vz, mass, charge`.
# `drift_aos` advances them `steps` time steps under gravity, touching 6 of the 8 fields, each operation striding 32 bytes through memory.
#
# Write `drift_soa(fields, dt, steps)` doing the same on a **structure of arrays** (SoA): `fields` has shape `(8, n)`, one contiguous row per field (`fields[0]` is every particle's x).
# Update `fields` in place and return it; the results must match `drift_aos` on the same particles (within float32 rounding).
# No Python loop over particles: a loop over the steps is expected.
#
# 1 point for correctness, 2 for speed: at least 4× faster than `drift_aos` with 50,000 particles and 20 steps, measured on fresh particles on your CPU (the reference reaches 12-15× on the course's 2-core machine; one thread).
# About 5 lines.

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


def check_drift(n, dt, steps):
    particles = random_particles(n)
    fields = np.ascontiguousarray(particles.T)
    expected = drift_aos(particles.copy(), dt, steps).T
    result = drift_soa(fields, dt, steps)
    check.assert_close(result, np.ascontiguousarray(expected), rtol=1e-5, atol=1e-5, name=f"{n} particles after {steps} steps")


check_drift(1000, np.float32(0.01), 5)
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
