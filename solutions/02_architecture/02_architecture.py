# %% [markdown]
# # Assignment 02: GPU architecture — your first kernels and a register budget
#
# This assignment checks the ideas of lecture 02 (`course/02_architecture.ipynb`).
# You will write four CUDA kernels in Python with numba-cuda, choose a launch configuration, and work out the register budget that keeps a launch's occupancy, the other way round from the lecture's occupancy calculator.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other sizes (1 element, sizes that are not multiples of 32, grids smaller and larger than the data), so test your kernels beyond the visible examples.
# - Without a GPU your kernels run in numba's CUDA simulator: correct results, no speed, and every simulated thread is a Python thread, so the tests keep sizes small.
#   The one speed question is measured on a GPU only; on a CPU-only grader it waits for a GPU regrade.
#
# Points: 15 autograded (2 of them on a GPU), 1 graded by hand.

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
from gpucourse import check, gpu_specs, sim, thresholds, timing

SIMULATED = kernels.simulator_active()
rng = np.random.default_rng(0)

# %% [markdown]
# ## Question 1: a grid-stride kernel (2 points)
#
# Write `saxpy_kernel(a, x, y, out)` so that `out[i] = a * x[i] + y[i]` for every element, **whatever grid it is launched with**: more threads than elements, or far fewer.
# Use a grid-stride loop: thread `cuda.grid(1)` handles its element, then jumps ahead by `cuda.gridsize(1)`, the number of threads in the whole grid.
# `x`, `y` and `out` are 1-D arrays of the same length; `a` is a number.
#
# About 3 lines.

# %% nbgrader={"grade_id": "saxpy_kernel", "solution": true}
@cuda.jit
def saxpy_kernel(a, x, y, out):
    """out = a * x + y, element by element; x, y, out: (n,), any launch configuration."""
    ### BEGIN SOLUTION
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        out[i] = a * x[i] + y[i]
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_saxpy", "grade": true, "points": 2}
"""saxpy_kernel is correct with a grid smaller than the data and with one larger than it."""
check.written(saxpy_kernel)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)


def check_saxpy(n, blocks, threads, dtype=np.float32):
    x, y = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    out = np.full(n, np.nan, dtype=dtype)
    saxpy_kernel[blocks, threads](2.5, x, y, out)
    check.assert_close(out, (2.5 * x.astype(np.float64) + y).astype(dtype), rtol=1e-5, atol=1e-5,
                       name=f"saxpy with n={n}, {blocks} blocks × {threads} threads")


check_saxpy(1000, 2, 64)  # 128 threads for 1000 elements: each thread handles about 8
check_saxpy(300, 4, 128)  # 512 threads for 300 elements: 212 threads have nothing to do
### BEGIN HIDDEN TESTS
check_saxpy(1, 1, 32)
check_saxpy(1, 3, 64)
check_saxpy(33, 1, 1)  # a single thread does everything
check_saxpy(97, 2, 48, dtype=np.float64)
check_saxpy(4099, 5, 96)
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: a 2-D kernel (2 points)
#
# Write `bias_relu_kernel(x, bias, out)`: `out[i, j] = max(x[i, j] + bias[j], 0)` for a matrix `x` of shape `(rows, cols)` and a `bias` of shape `(cols,)`.
# It is launched on a 2-D grid with one thread per element, the grid's x dimension along the columns and y along the rows, as in the lecture: `j, i = cuda.grid(2)` gives the column `j` and the row `i`.
# (Neighbouring threads of a warp then touch neighbouring addresses of a row, which module 03 shows is what memory wants.)
# The matrix's sides are not multiples of the block's, so some threads fall outside it: they must do nothing.
#
# About 4 lines.

# %% nbgrader={"grade_id": "bias_relu_kernel", "solution": true}
@cuda.jit
def bias_relu_kernel(x, bias, out):
    """out[i, j] = max(x[i, j] + bias[j], 0); x, out: (rows, cols), bias: (cols,); one thread per element."""
    ### BEGIN SOLUTION
    j, i = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        out[i, j] = max(x[i, j] + bias[j], 0.0)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_bias_relu", "grade": true, "points": 2}
"""bias_relu_kernel matches numpy on a matrix whose sides are not multiples of the block."""
check.written(bias_relu_kernel)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)


def check_bias_relu(rows, cols, block=(8, 8), dtype=np.float32):
    """block: (threads along columns, threads along rows)."""
    x = rng.standard_normal((rows, cols)).astype(dtype)
    bias = rng.standard_normal(cols).astype(dtype)
    out = np.full((rows, cols), np.nan, dtype=dtype)
    grid = (math.ceil(cols / block[0]), math.ceil(rows / block[1]))
    bias_relu_kernel[grid, block](x, bias, out)
    check.assert_close(out, np.maximum(x + bias, 0), name=f"bias_relu on a {rows}×{cols} matrix with {block} blocks")


check_bias_relu(37, 21)
### BEGIN HIDDEN TESTS
check_bias_relu(1, 1)
check_bias_relu(1, 45, block=(32, 1))
check_bias_relu(33, 3, block=(4, 16), dtype=np.float64)
check_bias_relu(9, 70, block=(16, 4))
### END HIDDEN TESTS

# %% [markdown]
# ## Question 3: a per-block sum in shared memory (2 points)
#
# Write `block_sum_kernel(x, partial)`. It is launched with `SUM_BLOCK` threads per block and enough blocks to cover `x`; block `b` writes into `partial[b]` the sum of its chunk `x[b * SUM_BLOCK : (b + 1) * SUM_BLOCK]` (elements past the end of `x` count as 0).
# Do it the GPU way:
# 1. each thread loads one element into a shared array of `SUM_BLOCK` entries (`cuda.shared.array(SUM_BLOCK, np.float64)`: this notebook imports numpy as `np`, and numba accepts numpy's dtypes);
# 2. `cuda.syncthreads()`, so that every load is done before anyone reads;
# 3. a tree: in each step the first half of the active threads add the second half's values to theirs, then synchronise again;
# 4. thread 0 writes the block's total.
#
# In the simulator, the tests also count your kernel's shared arrays and barriers, and trace it for data races (two threads touching one word, one of them writing, with no barrier between them; or two blocks touching one word, which only atomics may do), on a size drawn when graded.
# The tracer follows element accesses (through slices too, element by element) and refuses whole-array operations such as a slice's `.sum()`: index one element at a time (`values[t]`).
# About 12 lines.

# %% nbgrader={"grade_id": "sum_block", "locked": true}
SUM_BLOCK = 64  # threads per block of block_sum_kernel; a power of two, a compile-time constant

# %% nbgrader={"grade_id": "block_sum_kernel", "solution": true}
@cuda.jit
def block_sum_kernel(x, partial):
    """partial[b] = sum of x[b*SUM_BLOCK : (b+1)*SUM_BLOCK]; x: (n,) float64, one thread per element."""
    ### BEGIN SOLUTION
    values = cuda.shared.array(SUM_BLOCK, np.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    values[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = SUM_BLOCK // 2
    while step > 0:
        if t < step:
            values[t] += values[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = values[0]
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_block_sum", "grade": true, "points": 2}
"""block_sum_kernel gives each block's sum, and (in the simulator) uses shared memory, with barriers and no race."""
check.written(block_sum_kernel)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)


def check_block_sum(n, extra_blocks=0):
    x = rng.standard_normal(n)
    blocks = math.ceil(n / SUM_BLOCK) + extra_blocks
    partial = np.full(blocks, np.nan)
    with sim.record_kernel_calls() as calls, sim.trace() as t:
        block_sum_kernel[blocks, SUM_BLOCK](x, partial)
    check.assert_race_free(t, name=f"block_sum_kernel on {n} elements")  # read from the trace, never from the sums
    padded = np.zeros(blocks * SUM_BLOCK)
    padded[:n] = x
    check.assert_close(partial, padded.reshape(blocks, SUM_BLOCK).sum(axis=1), rtol=1e-9, atol=1e-9,
                       name=f"block sums of {n} elements in {blocks} blocks")
    if calls.available:  # counted in the simulator only
        assert calls["shared.array"] > 0, "block_sum_kernel never allocated a shared array (cuda.shared.array)"
        assert calls["syncthreads"] >= blocks * SUM_BLOCK, "every thread must wait at a barrier (syncthreads) after loading its value"


check_block_sum(150)
### BEGIN HIDDEN TESTS
check_block_sum(1)
check_block_sum(SUM_BLOCK)
check_block_sum(SUM_BLOCK + 1, extra_blocks=1)  # the extra block only sees padding: its sum is 0
import random  # noqa: E402  (hidden: drawn when graded, so no answer can know the size)

check_block_sum(random.SystemRandom().randint(6 * SUM_BLOCK + 1, 12 * SUM_BLOCK - 1))  # 7 to 12 blocks, a partial last one
### END HIDDEN TESTS

# %% [markdown]
# ## Question 4: a histogram with atomics (2 points)
#
# Write `histogram_kernel(values, bins)`: for every element `v` of `values` (integers in `0 .. len(bins) - 1`), add 1 to `bins[v]`.
# `bins` arrives filled with zeros; any launch configuration must work (grid-stride again).
# Many threads update the same bin at once: `bins[v] += 1` is a read, an add and a write, and on a GPU concurrent ones lose updates.
# Use `cuda.atomic.add`.
#
# The simulator runs threads one at a time, so a missing atomic rarely shows there; in the simulator the tests trace your kernel instead: every value needs an atomic addition, and no plain write to global memory is allowed (each would race on a GPU). On a GPU they count the lost updates too.
# About 2 lines.

# %% nbgrader={"grade_id": "histogram_kernel", "solution": true}
@cuda.jit
def histogram_kernel(values, bins):
    """bins[v] += 1 for each v in values, atomically; values: (n,) ints in [0, len(bins)), any launch."""
    ### BEGIN SOLUTION
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):
        cuda.atomic.add(bins, values[i], 1)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_histogram", "grade": true, "points": 2}
"""histogram_kernel counts every value exactly once, with atomic additions."""
check.written(histogram_kernel)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)


def check_histogram(n, n_bins, blocks, threads):
    values = rng.integers(0, n_bins, n).astype(np.int32)
    bins = np.zeros(n_bins, dtype=np.int32)
    with sim.record_kernel_calls() as calls, sim.trace() as t:
        histogram_kernel[blocks, threads](values, bins)
    if calls.available:
        # Checked before the counts: in the simulator a race loses updates only when its threads happen to
        # interleave (a busy machine makes that likelier), while a plain write is always seen by the tracer.
        assert calls["atomic.add"] >= n, f"expected an atomic addition per value ({n}), counted {calls['atomic.add']}"
        plain = t.requests("global", "store")
        assert not plain, (f"{len(plain)} plain writes to global memory (line: {plain[0].source}): threads updating "
                           "the same bin at once lose updates on a GPU; update bins with cuda.atomic.add only")
    check.assert_equal(bins.tolist(), np.bincount(values, minlength=n_bins).tolist(),
                       name=f"histogram of {n} values in {n_bins} bins ({blocks} blocks × {threads} threads)")


check_histogram(500, 10, 2, 64)
### BEGIN HIDDEN TESTS
check_histogram(1, 1, 1, 32)
check_histogram(33, 4, 3, 32)
check_histogram(257, 7, 1, 1)
import random  # noqa: E402  (hidden: drawn when graded)

draw = random.SystemRandom()
check_histogram(draw.randint(1500, 3000), draw.randint(3, 40), draw.randint(6, 16), 64)  # many blocks sharing few bins
if not SIMULATED:
    check_histogram(1 << 20, 4, 1024, 256)  # a million updates on 4 bins: without atomics most are lost
### END HIDDEN TESTS

# %% [markdown]
# ## Question 5: a launch configuration that uses the GPU (2 points, measured on a GPU)
#
# Write `saxpy_launch(n)`, returning `(blocks, threads_per_block)` for launching `saxpy_kernel` on `n` elements.
# Make it sensible for a GPU: a whole number of warps per block (between 64 and 1024 threads) and enough threads in the grid to keep every SM busy, i.e. at least `min(n, 32768)` threads in all.
# With your grid-stride kernel you may cap the number of blocks; without a cap, cover all `n` elements.
#
# On a GPU the test times `saxpy_kernel[saxpy_launch(n)]` against the worst launch there is, one block of one thread, on a million elements already on the GPU, and needs 10×.
# That threshold is modelled, not yet measured: no GPU has run this item; `gpucourse.thresholds` models one thread waiting for each load against a grid streaming at the card's bandwidth, hundreds to thousands of times faster on every card in `gpu_specs` (V100, T4, A100, L4, H100, H200), and `scripts/gpu_check.sh` will calibrate it on the first GPU run.
# On a CPU only the shape of your answer is checked here, and the grader leaves the points for a GPU regrade.
#
# About 3 lines.

# %% nbgrader={"grade_id": "saxpy_launch", "solution": true}
def saxpy_launch(n):
    """(blocks, threads_per_block) for saxpy_kernel on n elements."""
    ### BEGIN SOLUTION
    threads = 256
    return min(math.ceil(n / threads), 65535), threads
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_launch_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""saxpy_launch gives a valid launch; on a GPU it runs saxpy at least 10x faster than one thread."""
# Modelled, not yet measured: one thread is latency-bound, a full grid memory-bound, hundreds of times apart on
# every card in gpu_specs (gpucourse.thresholds.launch_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 10.0}
print(thresholds.describe("test_launch_speed", SPEEDUP_NEEDED))
for n in (1, 1000, 33, 10**6):
    config = saxpy_launch(n)
    assert isinstance(config, tuple) and len(config) == 2, f"saxpy_launch({n}) should return (blocks, threads), got {config!r}"
    blocks, threads = config
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in config), f"saxpy_launch({n}): expected two ints, got {config!r}"
    assert threads % 32 == 0 and 64 <= threads <= 1024, f"saxpy_launch({n}): {threads} threads per block is not 64..1024 whole warps"
    assert blocks >= 1 and blocks * threads >= min(n, 32768), f"saxpy_launch({n}): {blocks} × {threads} threads is too few"

if kernels.gpu_or_explain("one thread runs saxpy hundreds of times slower than a grid of warps"):
    N = 1 << 20

    def fresh_vectors():
        # On the GPU already: numpy arrays would be copied over the host link and back at every launch,
        # 24 MiB that would take longer than the grid's kernel and hide what the launch configuration does.
        return (np.float32(2.0), torch.randn(N, device="cuda"), torch.randn(N, device="cuda"), torch.zeros(N, device="cuda"))

    def launched(config):
        def run(a, x, y, out):
            saxpy_kernel[config](a, x, y, out)
            return out
        return run

    def check_timed_output(args, output):
        a, x, y, _ = args
        check.assert_close(output, float(a) * x + y, rtol=1e-5, atol=1e-5, name="a timed saxpy")

    result = timing.compare_speed(launched((1, 1)), launched(saxpy_launch(N)), fresh_vectors, check=check_timed_output, rounds=5)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="saxpy_launch vs one thread")

# %% [markdown]
# ## Question 6: a register budget under `__launch_bounds__` (3 points)
#
# In CUDA C++, `__launch_bounds__(maxThreadsPerBlock, minBlocksPerMultiprocessor)` asks the compiler to use few enough registers per thread that `minBlocksPerMultiprocessor` blocks of `maxThreadsPerBlock` threads can be resident on one SM at once (in numba-cuda: `@cuda.jit(launch_bounds=(threads, blocks))`).
# How many registers per thread is that?
#
# Write `register_budget(gpu, threads_per_block, blocks_per_sm)`: the most registers per thread with which `blocks_per_sm` blocks of `threads_per_block` threads fit on one SM of `gpu`, by the register-allocation rules of the lecture:
# - a warp takes `32 × registers_per_thread` registers, rounded *up* to a multiple of `register_alloc_unit` (256);
# - the number of warps the SM's `registers_per_sm` can hold, `registers_per_sm // registers_per_warp`, is floored to a multiple of `warp_alloc_granularity` (4), because the register file is split among the SM's 4 sub-partitions and each holds whole warps (NVIDIA's occupancy calculator, `cuda_occupancy.h`, computes it this way);
# - no thread may use more than `max_registers_per_thread` (255).
#
# `gpu` is a card from `gpu_specs.GPUS` (`"T4"`, `"A100"`, `"H100"`, …) or a compute capability string (`"8.6"`); `gpu_specs.sm_limits(gpu)` gives that SM's limits.
# Return an int.
# Example: on compute capability 7.0, 12 blocks of 128 threads allow 40 registers per thread: with 40 an SM holds 12 such blocks, with 41 only 10 (so the lecture's 37-register kernel from the Best Practices Guide fits).
#
# Work it out in closed form: how many warps the register file must hold (rounded up to a multiple of 4, since the floor above leaves only multiples of 4), how many registers that leaves each warp (in whole allocation units), and so each thread.
# The lecture's `sim.occupancy(gpu, threads_per_block, registers_per_thread)` is the forward direction: its `blocks_by["registers"]` is how many blocks the registers alone allow.
# Use it to check your answer; a search over register counts with it is accepted too, but the closed form is what shows you understand the budget.
#
# Raise `ValueError`, with a message saying which, when `threads_per_block` is outside 1..`max_threads_per_block`, when `blocks_per_sm` is below 1, or when the blocks cannot be resident on one SM whatever their registers: more than `max_blocks_per_sm` blocks, or more warps in all than `max_warps_per_sm`.
# About 12 lines.

# %% nbgrader={"grade_id": "register_budget", "solution": true}
def register_budget(gpu, threads_per_block, blocks_per_sm):
    """Most registers per thread (int) that keep blocks_per_sm blocks of threads_per_block threads resident on one SM of `gpu`."""
    ### BEGIN SOLUTION
    limits = gpu_specs.sm_limits(gpu)
    if not 1 <= threads_per_block <= limits.max_threads_per_block:
        raise ValueError(f"threads_per_block must be 1..{limits.max_threads_per_block}, got {threads_per_block}")
    if blocks_per_sm < 1:
        raise ValueError(f"blocks_per_sm must be at least 1, got {blocks_per_sm}")
    if blocks_per_sm > limits.max_blocks_per_sm:
        raise ValueError(f"{blocks_per_sm} blocks per SM: more than max_blocks_per_sm ({limits.max_blocks_per_sm}) on {limits.compute_capability}")
    warps = blocks_per_sm * math.ceil(threads_per_block / limits.warp_size)
    if warps > limits.max_warps_per_sm:
        raise ValueError(f"{blocks_per_sm} blocks of {threads_per_block} threads are {warps} warps: "
                         f"more than max_warps_per_sm ({limits.max_warps_per_sm}) on {limits.compute_capability}")
    # The warps the register file holds are floored to a multiple of 4, so it must hold the warps rounded up to one.
    held = math.ceil(warps / limits.warp_alloc_granularity) * limits.warp_alloc_granularity
    # Each warp's share, cut down to whole allocation units: a warp cannot use part of a unit it was not given.
    per_warp = limits.registers_per_sm // held // limits.register_alloc_unit * limits.register_alloc_unit
    return min(per_warp // limits.warp_size, limits.max_registers_per_thread)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_register_budget", "grade": true, "points": 3}
"""register_budget gives the most registers per thread that keep the blocks resident, and rejects launches no SM can hold."""


def check_budget(args, expected):
    budget = register_budget(*args)
    assert isinstance(budget, int) and not isinstance(budget, bool), f"register_budget{args}: expected an int, got {budget!r}"
    check.assert_equal(budget, expected, name=f"register_budget{args}")


def check_rejected(args, why):
    try:
        register_budget(*args)
    except ValueError:
        return
    raise AssertionError(f"register_budget{args} should raise ValueError: {why}")


# 12 blocks of 128 threads = 48 warps; 65536 / 48 = 1365.3 -> 1280 per warp (5 × 256) -> 40 per thread.
check_budget(("7.0", 128, 12), 40)
# The Best Practices Guide's other launch: 4 blocks of 320 threads = 40 warps; 65536 / 40 = 1638.4 -> 1536 -> 48.
check_budget(("7.0", 320, 4), 48)
# Full occupancy on an A100: 8 blocks of 256 threads = 64 warps; 65536 / 64 = 1024 -> 32.
check_budget(("A100", 256, 8), 32)
check_rejected(("A100", 256, 9), "9 blocks of 8 warps are 72 warps, and an A100 SM holds 64")
### BEGIN HIDDEN TESTS


def check_budget(args, expected):  # the visible check, then the forward model must agree with the budget
    budget = register_budget(*args)
    assert isinstance(budget, int) and not isinstance(budget, bool), f"register_budget{args}: expected an int, got {budget!r}"
    check.assert_equal(budget, expected, name=f"register_budget{args}")
    gpu, threads, blocks = args
    allowed = sim.occupancy(gpu, threads, budget).blocks_by["registers"]
    assert allowed >= blocks, f"register_budget{args} = {budget}: with it the registers allow {allowed} blocks, not {blocks}"
    if budget < gpu_specs.sm_limits(gpu).max_registers_per_thread:
        allowed = sim.occupancy(gpu, threads, budget + 1).blocks_by["registers"]
        assert allowed < blocks, f"register_budget{args} = {budget}: {budget + 1} registers still allow {allowed} blocks"


for visible_args, visible_expected in ((("7.0", 128, 12), 40), (("7.0", 320, 4), 48), (("A100", 256, 8), 32)):
    check_budget(visible_args, visible_expected)
# 7.5 (T4): 4 blocks of 256 threads = 32 warps, the SM's maximum; 65536 / 32 = 2048 -> 64.
check_budget(("T4", 256, 4), 64)
# One block of 1024 threads fills a 7.5 SM: 32 warps -> 64.
check_budget(("7.5", 1024, 1), 64)
# 16 blocks (7.5's maximum) of 64 threads = 32 warps -> 64.
check_budget(("T4", 64, 16), 64)
# The cap binds: one warp, rounded up to 4; 65536 / 4 = 16384 -> 512 per thread, capped at 255.
check_budget(("A100", 32, 1), 255)
# Granularity: 3 blocks of 3 warps = 9 warps, rounded up to 12; 65536 / 12 = 5461.3 -> 5376 (21 × 256) -> 168 (9 warps would say 224).
check_budget(("8.0", 96, 3), 168)
# Threads round up to warps: 33 threads are 2 warps; 10 blocks = 20 warps; 65536 / 20 = 3276.8 -> 3072 -> 96.
check_budget(("8.0", 33, 10), 96)
# 8.6 (48 warps per SM): 6 blocks of 256 = 48 warps; 65536 / 48 = 1365.3 -> 1280 -> 40.
check_budget(("8.6", 256, 6), 40)
# 8.9 (24 blocks per SM): 24 one-warp blocks = 24 warps; 65536 / 24 = 2730.7 -> 2560 -> 80.
check_budget(("8.9", 32, 24), 80)
# L4 (8.9): 24 blocks of 2 warps = 48 warps -> 40.
check_budget(("L4", 64, 24), 40)
# 9.0: 5 blocks of 5 warps = 25 warps, rounded up to 28; 65536 / 28 = 2340.6 -> 2304 -> 72 (25 warps would say 80).
check_budget(("H100", 160, 5), 72)
# 544 threads = 17 warps, rounded up to 20; 65536 / 20 = 3276.8 -> 3072 -> 96 (17 warps would say 120).
check_budget(("9.0", 544, 1), 96)
# Full occupancy on an H100: 2 blocks of 32 warps = 64 -> 32; one such block on an H200: 32 warps -> 64.
check_budget(("H100", 1024, 2), 32)
check_budget(("H200", 1024, 1), 64)
check_rejected(("A100", 0, 1), "threads_per_block 0 is below 1")
check_rejected(("A100", 1025, 1), "threads_per_block 1025 is above 1024")
check_rejected(("A100", 128, 0), "blocks_per_sm 0 is below 1")
check_rejected(("H100", 128, -2), "blocks_per_sm -2 is below 1")
check_rejected(("H100", 32, 33), "33 blocks, and a 9.0 SM holds at most 32")
check_rejected(("T4", 64, 17), "17 blocks, and a 7.5 SM holds at most 16")
check_rejected(("8.6", 128, 13), "13 blocks of 4 warps are 52 warps, and an 8.6 SM holds 48")
check_rejected(("T4", 96, 11), "11 blocks of 3 warps are 33 warps, and a T4 SM holds 32")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 7: a launch and its register budget (2 points)
#
# A kernel uses 24 KiB (24576 bytes) of shared memory per block and runs on an L4 (compute capability 8.9: at most 48 warps and 100 KiB of shared memory per SM; 58 SMs).
# - `best_block_size`: among 64, 128, 256, 512 and 1024 threads per block, the one with the highest occupancy when registers do not limit (pass 0 registers to the lecture's `sim.occupancy`); on a tie, the smallest (smaller blocks leave the scheduler more freedom at the tail of a launch).
# - `register_cap`: the most registers per thread that keep that occupancy, the budget you would compile the kernel under (`__launch_bounds__`, or numba's `launch_bounds=`). Use your `register_budget` from Question 6.
# - `blocks_per_wave`: with that block size, how many blocks the whole L4 runs at once (one "wave" of blocks).
#
# Write `launch_choice()`, which returns the three as a tuple of ints: `(best_block_size, register_cap, blocks_per_wave)`.

# %% nbgrader={"grade_id": "launch_choice", "solution": true}
def launch_choice():
    """(best_block_size, register_cap, blocks_per_wave) for the kernel above on an L4: three ints."""
    ### BEGIN SOLUTION
    shared_bytes = 24 * 1024
    candidates = [64, 128, 256, 512, 1024]
    best_block_size = max(candidates, key=lambda size: (sim.occupancy("L4", size, 0, shared_bytes).occupancy, -size))
    blocks_per_sm = sim.occupancy("L4", best_block_size, 0, shared_bytes).blocks_per_sm
    register_cap = register_budget("L4", best_block_size, blocks_per_sm)
    blocks_per_wave = blocks_per_sm * gpu_specs.gpu("L4").sms
    return best_block_size, register_cap, blocks_per_wave
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_launch_choice", "grade": true, "points": 2}
"""launch_choice() gives best_block_size, register_cap and blocks_per_wave: whole numbers in range, and register_cap keeps the occupancy (the exact values are checked when grading)."""
choice = launch_choice()
assert isinstance(choice, tuple) and len(choice) == 3, f"launch_choice() should return a tuple of three ints, got {choice!r}"
best_block_size, register_cap, blocks_per_wave = choice
print(f"best block size {best_block_size}, at most {register_cap} registers per thread, {blocks_per_wave} blocks per wave (modelled for an L4)")
assert best_block_size in (64, 128, 256, 512, 1024), f"best_block_size should be one of the five sizes, got {best_block_size!r}"
for answer, value in (("register_cap", register_cap), ("blocks_per_wave", blocks_per_wave)):
    assert isinstance(value, int) and not isinstance(value, bool) and value > 0, f"{answer} should be a positive int, got {value!r}"
assert register_cap <= 255, f"register_cap: no thread may use more than 255 registers, got {register_cap}"
assert blocks_per_wave % 58 == 0, f"a wave fills all 58 SMs equally: {blocks_per_wave} is not a multiple of 58"
free, capped = (sim.occupancy("L4", best_block_size, registers, 24 * 1024) for registers in (0, register_cap))
assert capped.active_warps == free.active_warps, (
    f"with {register_cap} registers per thread, {best_block_size}-thread blocks keep {capped.active_warps} warps per SM, not {free.active_warps}")
### BEGIN HIDDEN TESTS
# Shared memory: 24 KiB + the 1 KiB reserved per block = 25600 B (a multiple of 128); 102400 / 25600 = 4 blocks per SM.
# 64 threads: 4 blocks × 2 warps = 8 of 48; 128: 16; 256: 32; 512: the 48 warps hold 3 blocks of 16 = 48 (100%); 1024: 1 × 32 = 32.
check.assert_equal(best_block_size, 512, name="best_block_size")
# register_budget("L4", 512, 3): 48 warps; 65536 / 48 = 1365.3 -> 1280 per warp (5 × 256) -> 40 per thread.
check.assert_equal(register_cap, 40, name="register_cap")
# 3 blocks per SM × 58 SMs.
check.assert_equal(blocks_per_wave, 174, name="blocks_per_wave")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 8: when occupancy does not matter (1 point, graded by hand)
#
# Question 7's `register_cap` buys full occupancy by limiting the registers each thread may use.
# In three or four sentences: give one reason why compiling a kernel under such a cap, raising its occupancy from, say, 67% to 100%, may not make it any faster (or may make it slower), and say what you would measure to find out.

# %% [markdown] nbgrader={"grade_id": "occupancy_answer", "solution": true, "grade": true, "points": 1}
# ### BEGIN SOLUTION
# Occupancy only helps while more warps hide more latency. A memory-bound kernel that already saturates DRAM bandwidth at 67% occupancy gains nothing from more warps, and a kernel with enough independent instructions per thread (instruction-level parallelism) hides latency with fewer warps (Volkov, GTC 2010). A register cap below what the kernel needs can make it slower: the compiler spills the extra values to local memory, which lives in DRAM behind the caches, or gives up the registers that held several loads in flight. To find out, compile with and without the cap and compare registers and spill bytes (`kernels.compile_report`), then time both versions on the GPU and look at achieved bandwidth or FLOP/s against the roofline, and at the profiler's achieved occupancy and stall reasons.
# ### END SOLUTION
