# %% [markdown]
# # Assignment 02: GPU architecture — your first kernels and an occupancy calculator
#
# This assignment checks the ideas of lecture 02 (`course/02_architecture.ipynb`).
# You will write four CUDA kernels in Python with numba-cuda, choose a launch configuration, and build the occupancy calculator the lecture used.
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
from numba import cuda

import gpucourse
from gpucourse import check, gpu_specs, sim, timing

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
# 1. each thread loads one element into a shared array of `SUM_BLOCK` entries (`cuda.shared.array(SUM_BLOCK, numba.float64)`, or `np.float64`);
# 2. `cuda.syncthreads()`, so that every load is done before anyone reads;
# 3. a tree: in each step the first half of the active threads add the second half's values to theirs, then synchronise again;
# 4. thread 0 writes the block's total.
#
# In the simulator, the tests also count your kernel's shared arrays and barriers.
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
"""block_sum_kernel gives each block's sum, and (in the simulator) uses shared memory and barriers."""


def check_block_sum(n, extra_blocks=0):
    x = rng.standard_normal(n)
    blocks = math.ceil(n / SUM_BLOCK) + extra_blocks
    partial = np.full(blocks, np.nan)
    with sim.record_kernel_calls() as calls:
        block_sum_kernel[blocks, SUM_BLOCK](x, partial)
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
### END HIDDEN TESTS

# %% [markdown]
# ## Question 4: a histogram with atomics (2 points)
#
# Write `histogram_kernel(values, bins)`: for every element `v` of `values` (integers in `0 .. len(bins) - 1`), add 1 to `bins[v]`.
# `bins` arrives filled with zeros; any launch configuration must work (grid-stride again).
# Many threads update the same bin at once: `bins[v] += 1` is a read, an add and a write, and on a GPU concurrent ones lose updates.
# Use `cuda.atomic.add`.
#
# The simulator runs threads one at a time, so a missing atomic rarely shows there; the tests count your atomic additions instead, and on a GPU they count the lost updates.
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


def check_histogram(n, n_bins, blocks, threads):
    values = rng.integers(0, n_bins, n).astype(np.int32)
    bins = np.zeros(n_bins, dtype=np.int32)
    with sim.record_kernel_calls() as calls:
        histogram_kernel[blocks, threads](values, bins)
    check.assert_equal(bins.tolist(), np.bincount(values, minlength=n_bins).tolist(),
                       name=f"histogram of {n} values in {n_bins} bins ({blocks} blocks × {threads} threads)")
    if calls.available:
        assert calls["atomic.add"] >= n, f"expected an atomic addition per value ({n}), counted {calls['atomic.add']}"


check_histogram(500, 10, 2, 64)
### BEGIN HIDDEN TESTS
check_histogram(1, 1, 1, 32)
check_histogram(33, 4, 3, 32)
check_histogram(257, 7, 1, 1)
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
# On a GPU the test times `saxpy_kernel[saxpy_launch(n)]` against the worst launch there is, one block of one thread, on a million elements, and needs 10× (a sensible launch reaches hundreds).
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
SPEEDUP_NEEDED = {"cuda": 10.0}
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
        return (np.float32(2.0), rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32),
                np.zeros(N, dtype=np.float32))

    def launched(config):
        def run(a, x, y, out):
            saxpy_kernel[config](a, x, y, out)
            return out
        return run

    def check_timed_output(args, output):
        a, x, y, _ = args
        check.assert_close(output, a * x + y, rtol=1e-5, atol=1e-5, name="a timed saxpy")

    result = timing.compare_speed(launched((1, 1)), launched(saxpy_launch(N)), fresh_vectors, check=check_timed_output, rounds=5)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="saxpy_launch vs one thread")

# %% [markdown]
# ## Question 6: an occupancy calculator (3 points)
#
# Write `occupancy(gpu, threads_per_block, registers_per_thread, shared_mem_per_block)` following NVIDIA's CUDA Occupancy Calculator, as the lecture explained.
# `gpu` is a card from `gpu_specs.GPUS` (`"T4"`, `"A100"`, `"H100"`, …) or a compute capability string (`"8.6"`); `gpu_specs.sm_limits(gpu)` gives that SM's limits.
# Return an object with four attributes (a `types.SimpleNamespace`, a dataclass or a namedtuple will do):
# - `blocks_per_sm`: how many blocks of this kernel one SM holds at once, the smallest of four limits:
#   - **warps**: `max_warps_per_sm // warps_per_block`, with `warps_per_block = ceil(threads_per_block / 32)`;
#   - **blocks**: `max_blocks_per_sm`;
#   - **registers**: each warp needs `32 × registers_per_thread` registers rounded *up* to a multiple of `register_alloc_unit` (256); the SM's `registers_per_sm` hold that many warps, rounded *down* to a multiple of `warp_alloc_granularity` (4); divide by `warps_per_block`. A kernel with 0 registers is not limited by them;
#   - **shared memory**: each block takes `shared_mem_per_block + reserved_shared_mem_per_block` bytes rounded *up* to a multiple of `shared_mem_alloc_unit`; the SM has `shared_mem_per_sm`. A block that takes 0 bytes is not limited by it.
# - `active_warps`: `blocks_per_sm × warps_per_block`;
# - `occupancy`: `active_warps / max_warps_per_sm`, a float between 0 and 1;
# - `limiter`: which limit gave `blocks_per_sm`, one of `"warps"`, `"blocks"`, `"registers"`, `"shared_memory"`; when several tie, the first in that order.
#
# Raise `ValueError` for `threads_per_block` outside 1..1024, registers outside 0..`max_registers_per_thread`, or shared memory outside 0..`max_shared_mem_per_block`.
# Write it yourself: the hidden tests switch off the course package's own calculator (`gpucourse.sim`) while they call yours.
# About 20 lines.

# %% nbgrader={"grade_id": "occupancy", "solution": true}
def occupancy(gpu, threads_per_block, registers_per_thread, shared_mem_per_block):
    """Modelled blocks/SM, active warps, occupancy and limiter of a launch on `gpu` (name or compute capability)."""
    ### BEGIN SOLUTION
    from types import SimpleNamespace

    limits = gpu_specs.sm_limits(gpu)
    if not 1 <= threads_per_block <= limits.max_threads_per_block:
        raise ValueError(f"threads_per_block {threads_per_block} is outside 1..{limits.max_threads_per_block}")
    if not 0 <= registers_per_thread <= limits.max_registers_per_thread:
        raise ValueError(f"registers_per_thread {registers_per_thread} is outside 0..{limits.max_registers_per_thread}")
    if not 0 <= shared_mem_per_block <= limits.max_shared_mem_per_block:
        raise ValueError(f"shared_mem_per_block {shared_mem_per_block} is outside 0..{limits.max_shared_mem_per_block}")
    warps = math.ceil(threads_per_block / limits.warp_size)
    by_registers = limits.max_blocks_per_sm
    if registers_per_thread:
        per_warp = math.ceil(registers_per_thread * limits.warp_size / limits.register_alloc_unit) * limits.register_alloc_unit
        warps_fit = limits.registers_per_sm // per_warp // limits.warp_alloc_granularity * limits.warp_alloc_granularity
        by_registers = warps_fit // warps
    shared = shared_mem_per_block + limits.reserved_shared_mem_per_block
    shared = math.ceil(shared / limits.shared_mem_alloc_unit) * limits.shared_mem_alloc_unit
    by_shared = limits.shared_mem_per_sm // shared if shared else limits.max_blocks_per_sm
    candidates = [("warps", limits.max_warps_per_sm // warps), ("blocks", limits.max_blocks_per_sm),
                  ("registers", by_registers), ("shared_memory", by_shared)]
    blocks = min(count for _, count in candidates)
    limiter = next(name for name, count in candidates if count == blocks)
    return SimpleNamespace(blocks_per_sm=blocks, active_warps=blocks * warps,
                           occupancy=blocks * warps / limits.max_warps_per_sm, limiter=limiter)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_occupancy", "grade": true, "points": 3}
"""occupancy reproduces NVIDIA's worked examples and finds each kind of limiter."""


def check_occupancy(args, blocks, warps, limiter):
    result = occupancy(*args)
    got = (result.blocks_per_sm, result.active_warps, result.limiter)
    assert got == (blocks, warps, limiter), f"occupancy{args}: expected (blocks_per_sm, active_warps, limiter) = {(blocks, warps, limiter)}, got {got}"
    max_warps = gpu_specs.sm_limits(args[0]).max_warps_per_sm
    check.assert_approx(result.occupancy, warps / max_warps, name=f"occupancy{args}.occupancy")


# CUDA C++ Best Practices Guide, "Calculating Occupancy": on compute capability 7.0, 37 registers
# per thread give 75% occupancy with 128-thread blocks (12 blocks) but 62.5% with 320-thread blocks (4).
check_occupancy(("7.0", 128, 37, 0), 12, 48, "registers")
check_occupancy(("7.0", 320, 37, 0), 4, 40, "registers")
# Shared memory: 48 KiB + the 1 KiB reserved per block on an A100 -> 3 blocks of 164 KiB.
check_occupancy(("A100", 256, 0, 48 * 1024), 3, 24, "shared_memory")
# Tiny blocks: an H100 SM holds at most 32 blocks, whatever their size.
check_occupancy(("H100", 32, 16, 0), 32, 32, "blocks")
# Big blocks: a T4's SM holds 32 warps, one block of 1024 threads.
check_occupancy(("T4", 1024, 32, 0), 1, 32, "warps")
### BEGIN HIDDEN TESTS
# CUDA C++ Programming Guide, "Maximize Utilization / Multiprocessor Level": 512-thread blocks with
# 64 registers per thread fit twice (32 warps); with 65 registers only once (16 warps). The guide
# states it for 6.x; 7.0 has the same register file and allocation rules.
check_occupancy(("7.0", 512, 64, 0), 2, 32, "registers")
check_occupancy(("7.0", 512, 65, 0), 1, 16, "registers")
# 7.x rounds shared memory to 256 bytes and reserves nothing: 32 KiB fits twice in 64 KiB, one byte more once.
check_occupancy(("7.5", 256, 0, 32 * 1024), 2, 16, "shared_memory")
check_occupancy(("7.5", 256, 0, 32 * 1024 + 1), 1, 8, "shared_memory")
# 8.x rounds to 128 bytes after adding 1 KiB: 100 KiB on an 8.6 SM holds 3 blocks of 32 KiB (33 KiB each).
check_occupancy(("8.6", 128, 0, 32 * 1024), 3, 12, "shared_memory")
# Ties go to the first of warps, blocks, registers, shared_memory.
check_occupancy(("8.0", 64, 0, 0), 32, 64, "warps")
check_occupancy(("A100", 256, 32, 0), 8, 64, "warps")
# Threads that are not a whole number of warps still take whole warps: 33 threads are 2 warps.
check_occupancy(("8.9", 33, 0, 0), 24, 48, "warps")
# A block of 1024 threads with 255 registers needs more registers than an SM has: no block fits.
check_occupancy(("H200", 1024, 255, 0), 0, 0, "registers")
check_occupancy(("L4", 96, 40, 12 * 1024), 7, 21, "shared_memory")
for bad in [("T4", 0, 32, 0), ("T4", 1025, 32, 0), ("A100", 128, 256, 0), ("T4", 128, -1, 0),
            ("T4", 128, 32, 64 * 1024 + 1), ("H100", 128, 32, -5)]:
    try:
        occupancy(*bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"occupancy{bad} should raise ValueError")
# The answer must stand on its own: with the course's calculator switched off, it still works.
with check.forbidden("gpucourse.sim"):
    result = occupancy("7.0", 320, 37, 0)
assert (result.blocks_per_sm, result.limiter) == (4, "registers"), "occupancy must not depend on gpucourse.sim"
### END HIDDEN TESTS

# %% [markdown]
# ## Question 7: choosing a launch configuration (2 points)
#
# A kernel uses 40 registers per thread and 6 KiB (6144 bytes) of shared memory per block; it runs on an A100 (108 SMs).
# - `best_block_size`: among 64, 128, 256, 512 and 1024 threads per block, the one with the highest occupancy; on a tie, the smallest (smaller blocks leave the scheduler more freedom at the tail of a launch).
# - `blocks_per_wave`: with that block size, how many blocks the whole A100 runs at once (one "wave" of blocks).
#
# Use your `occupancy` function; assign two ints.

# %% nbgrader={"grade_id": "launch_choice", "solution": true}
### BEGIN SOLUTION
candidates = [64, 128, 256, 512, 1024]
best_block_size = max(candidates, key=lambda size: (occupancy("A100", size, 40, 6144).occupancy, -size))
blocks_per_wave = occupancy("A100", best_block_size, 40, 6144).blocks_per_sm * gpu_specs.gpu("A100").sms
### END SOLUTION
print(f"best block size {best_block_size}, {blocks_per_wave} blocks per wave (modelled for an A100)")

# %% nbgrader={"grade_id": "test_launch_choice", "grade": true, "points": 2}
"""best_block_size and blocks_per_wave are whole numbers in range (the exact values are checked when grading)."""
assert best_block_size in (64, 128, 256, 512, 1024), f"best_block_size should be one of the five sizes, got {best_block_size!r}"
assert isinstance(blocks_per_wave, int) and blocks_per_wave > 0, f"blocks_per_wave should be a positive int, got {blocks_per_wave!r}"
assert blocks_per_wave % 108 == 0, f"a wave fills all 108 SMs equally: {blocks_per_wave} is not a multiple of 108"
### BEGIN HIDDEN TESTS
# 40 registers: 1280 per warp, 48 warps per SM; 6 KiB + 1 KiB shared: 23 blocks per SM.
# 64 threads: 23 blocks (46 warps, 72%); 128, 256 and 512: 48 warps (75%); 1024: 32 warps (50%).
assert best_block_size == 128, f"best_block_size: expected 128, got {best_block_size}"
assert blocks_per_wave == 12 * 108, f"blocks_per_wave: expected {12 * 108}, got {blocks_per_wave}"
### END HIDDEN TESTS

# %% [markdown]
# ## Question 8: when occupancy does not matter (1 point, graded by hand)
#
# In three or four sentences: give one reason why raising a kernel's occupancy from 50% to 100% may not make it any faster, and say what you would measure to find out.

# %% [markdown] nbgrader={"grade_id": "occupancy_answer", "solution": true, "grade": true, "points": 1}
# ### BEGIN SOLUTION
# Occupancy only helps while more warps hide more latency. A memory-bound kernel that already saturates DRAM bandwidth at 50% occupancy gains nothing from more warps, and a kernel with enough independent instructions per thread (instruction-level parallelism) hides latency with fewer warps (Volkov, GTC 2010). Raising occupancy can even cost speed when it forces fewer registers per thread (spills to local memory) or smaller shared-memory tiles. To find out, time both versions on the GPU and compare achieved bandwidth or FLOP/s with the roofline, and look at the profiler's achieved occupancy and stall reasons.
# ### END SOLUTION
