# %% [markdown]
# # Assignment 04: branch divergence — a SIMT model, a warp-uniform rewrite, a reduction and branch-free code
#
# This assignment checks the ideas of lecture 04 (`course/04_divergence.ipynb`).
# You will model what a divergent branch costs a warp, rewrite a divergent kernel so that every warp takes one path, write a full reduction with sequential addressing, and make a branchy function branch-free on your CPU.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other inputs and edge cases.
# - Without a GPU your kernels run in numba's CUDA simulator, and the course's kernel tracer counts active lanes and bank conflicts as a GPU would see them (modelled); the GPU speed item waits for a GPU regrade.
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

# %% [markdown]
# ## Question 1: what a branch costs a warp (2 points)
#
# At a branch, the 32 lanes of a warp may take different paths; the warp then runs every distinct path once, with the other lanes masked off.
# Write `warp_cycles(lane_paths, path_cost)`: `lane_paths` lists the path each lane takes (any hashable name, or `None` for a lane that is inactive, e.g. past the end of the data), `path_cost` maps each path to its cost in cycles.
# Return the cycles the warp spends: the sum of the costs of the distinct paths its active lanes take.
# Write Questions 1-2 yourself: the hidden tests switch off the course package's own model (`gpucourse.sim`) while they call yours.
#
# About 2 lines.

# %% nbgrader={"grade_id": "warp_cycles", "solution": true}
def warp_cycles(lane_paths, path_cost):
    """Cycles a warp spends on a branch: each distinct path of an active lane, once."""
    ### BEGIN SOLUTION
    return sum(path_cost[path] for path in set(lane_paths) if path is not None)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_warp_cycles", "grade": true, "points": 2}
"""warp_cycles charges each path taken once, whatever the number of lanes taking it."""
COSTS = {"if": 20, "else": 5}
check.assert_equal(warp_cycles(["if"] * 32, COSTS), 20, name="a uniform warp")
check.assert_equal(warp_cycles(["if", "else"] * 16, COSTS), 25, name="even lanes if, odd lanes else")
check.assert_equal(warp_cycles(["else"] * 31 + ["if"], COSTS), 25, name="one lane on the expensive path")
### BEGIN HIDDEN TESTS
check.assert_equal(warp_cycles(["if"] * 16 + [None] * 16, COSTS), 20, name="half the lanes inactive")
check.assert_equal(warp_cycles([None] * 32, COSTS), 0, name="no active lane")
check.assert_equal(warp_cycles(["a", "b", "c", "d"] * 8, {"a": 1, "b": 2, "c": 3, "d": 4}), 10, name="four paths")
check.assert_equal(warp_cycles([0, 1, 1, 0], {0: 7, 1: 0}), 7, name="integer path names, a free path")
check.assert_equal(warp_cycles(["x"], {"x": 3, "y": 100}), 3, name="a path nobody takes costs nothing")
with check.forbidden("gpucourse.sim"):
    check.assert_equal(warp_cycles(["if", "else"] * 16, COSTS), 25, name="without the course's own model")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: SIMT efficiency (1 point)
#
# Write `simt_efficiency(lane_paths, path_cost)`: useful lane-cycles, the sum over active lanes of the cost of that lane's own path, divided by `32 × warp_cycles(...)`.
# A uniform full warp scores 1.0; inactive lanes do no useful work.
# Raise `ValueError` when the warp does no work at all (its cycles are 0).

# %% nbgrader={"grade_id": "simt_efficiency", "solution": true}
def simt_efficiency(lane_paths, path_cost):
    """Useful lane-cycles over 32 × the warp's cycles."""
    ### BEGIN SOLUTION
    cycles = warp_cycles(lane_paths, path_cost)
    if cycles == 0:
        raise ValueError("the warp does no work")
    return sum(path_cost[path] for path in lane_paths if path is not None) / (32 * cycles)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_simt_efficiency", "grade": true, "points": 1}
"""simt_efficiency is 1 for a uniform warp and drops with divergence and inactive lanes."""
COSTS = {"if": 20, "else": 5}
check.assert_approx(simt_efficiency(["if"] * 32, COSTS), 1.0, name="a uniform warp")
check.assert_approx(simt_efficiency(["if", "else"] * 16, COSTS), (16 * 20 + 16 * 5) / (32 * 25), name="alternating lanes")
### BEGIN HIDDEN TESTS
check.assert_approx(simt_efficiency(["if"] * 8 + [None] * 24, COSTS), 0.25, name="8 active lanes")
check.assert_approx(simt_efficiency(["else"] * 31 + ["if"], COSTS), (31 * 5 + 20) / (32 * 25), name="one lane on the expensive path")
try:
    simt_efficiency([None] * 32, COSTS)
except ValueError:
    pass
else:
    raise AssertionError("a warp with no active lane should raise ValueError")
with check.forbidden("gpucourse.sim"):
    check.assert_approx(simt_efficiency(["if", "else"] * 16, {"if": 1, "else": 1}), 0.5, name="without the course's own model")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 3: a warp-uniform rewrite (3 points)
#
# `activate_divergent` applies an expensive function to even elements and a cheap one to odd elements, one thread per element.
# Every warp holds both even and odd threads, so every warp pays for both paths.
#
# Write `activate_uniform(x, out)`, launched exactly like it (one thread per element, `launch_1d(x.size)`), with the **same results**, but remap which element each thread handles so that all 32 lanes of a warp take the same path:
# pair up warps, let the first warp of each pair handle 32 even elements and the second the 32 odd elements in between (thread `t` of warp pair `p` handles element `64p + 2·lane + (0 or 1)`).
# Keep the bounds check: `x.size` need not be a multiple of 64.
# Keep the arithmetic in float32 (use the given `HALF` and `ONE`): the grader compiles your kernel with NVIDIA's compiler and fails it if it computes in float64.
#
# Graded: the results, in float32 (1 point) and, in the simulator, the traced SIMT efficiency on 640 elements: at least 0.9 (the divergent kernel reaches about 0.57) (2 points).
# About 6 lines.

# %% nbgrader={"grade_id": "divergent_kernel", "locked": true}
EXPENSIVE_STEPS = 8
HALF, ONE = np.float32(0.5), np.float32(1.0)  # float32 constants: a Python 0.5 would make the arithmetic float64


@cuda.jit
def activate_divergent(x, out):
    """out[i] = the expensive map of x[i] for even i, -x[i] for odd i; one thread per element."""
    i = cuda.grid(1)
    if i < x.size:
        if i % 2 == 0:
            v = x[i]
            for _ in range(EXPENSIVE_STEPS):
                v = v * HALF + ONE
            out[i] = v
        else:
            out[i] = -x[i]


def launch_1d(n, threads_per_block=128):
    """(blocks, threads) with one thread per element."""
    return math.ceil(n / threads_per_block), threads_per_block


def run_divergent(x, out):
    """Launch activate_divergent on device arrays or CUDA tensors; returns out."""
    activate_divergent[launch_1d(x.shape[0])](x, out)
    return out


# %% nbgrader={"grade_id": "activate_uniform", "solution": true}
@cuda.jit
def activate_uniform(x, out):
    """activate_divergent's results, with each warp's 32 lanes all on even or all on odd elements."""
    ### BEGIN SOLUTION
    t = cuda.grid(1)
    i = 64 * (t // 64) + 2 * (t % 32) + (t // 32) % 2
    if i < x.size:
        if i % 2 == 0:
            v = x[i]
            for _ in range(EXPENSIVE_STEPS):
                v = v * HALF + ONE
            out[i] = v
        else:
            out[i] = -x[i]
    ### END SOLUTION


def run_uniform(x, out):
    """Launch activate_uniform like the divergent kernel; returns out."""
    activate_uniform[launch_1d(x.shape[0])](x, out)
    return out


# %% nbgrader={"grade_id": "test_uniform_correct", "grade": true, "points": 1}
"""activate_uniform computes what activate_divergent computes, in float32 arithmetic."""


def check_uniform(n):
    x = rng.standard_normal(n).astype(np.float32)
    expected, out = np.zeros(n, np.float32), np.full(n, np.nan, np.float32)
    activate_divergent[launch_1d(n)](x, expected)
    activate_uniform[launch_1d(n)](x, out)
    check.assert_close(out, expected, rtol=1e-6, atol=1e-6, name=f"activate_uniform on {n} elements")


check_uniform(640)
check.assert_float32_only(activate_uniform, np.zeros(640, np.float32), np.zeros(640, np.float32))
### BEGIN HIDDEN TESTS
check_uniform(1)
check_uniform(63)
check_uniform(97)
check_uniform(300)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_uniform_traced", "grade": true, "points": 2}
"""Traced in the simulator: activate_uniform keeps its warps' lanes together (SIMT efficiency >= 0.9)."""
EFFICIENCY_NEEDED = 0.9


def traced_efficiency(kernel, n):
    """The SIMT efficiency of one traced launch (None where the kernel ran compiled, untraced), its output checked."""
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    with sim.trace() as t:
        kernel[launch_1d(n)](x, out)
    expected = np.zeros(n, np.float32)
    activate_divergent[launch_1d(n)](x, expected)
    check.assert_close(out, expected, rtol=1e-6, atol=1e-6, name=f"the traced launch on {n} elements")
    return t.simt_efficiency() if t.available else None


uniform = traced_efficiency(activate_uniform, 640)
if uniform is None:
    # A kernel compiled for this GPU cannot be traced; the grader traces it in the simulator on every machine.
    print("traced counts need numba's simulator: the grader traces your kernel there; on this GPU the speed item measures the effect")
else:
    divergent = traced_efficiency(activate_divergent, 640)
    print(f"SIMT efficiency: {uniform:.0%} (divergent kernel: {'not traced here' if divergent is None else f'{divergent:.0%}'}); modelled from the trace")
    assert uniform >= EFFICIENCY_NEEDED, f"SIMT efficiency {uniform:.2f}, need at least {EFFICIENCY_NEEDED}"
    ### BEGIN HIDDEN TESTS
    uniform = traced_efficiency(activate_uniform, 1280)
    assert uniform >= EFFICIENCY_NEEDED, f"SIMT efficiency {uniform:.2f} on 1280 elements, need {EFFICIENCY_NEEDED}"
    ### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_uniform_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: the warp-uniform kernel beats the divergent one by 1.3x on 16 M elements."""
SPEEDUP_NEEDED = {"cuda": 1.3}
small = rng.standard_normal(97).astype(np.float32)  # first, a small launch through run_uniform
check.assert_close(run_uniform(small, np.zeros(97, np.float32)), run_divergent(small, np.zeros(97, np.float32)), rtol=0, atol=0,
                   name="run_uniform on 97 elements")
if kernels.gpu_or_explain("the warp-uniform kernel runs close to 2x faster: each warp pays for one path, not two"):
    def fresh_vectors():
        return torch.randn(1 << 24, device="cuda"), torch.empty(1 << 24, device="cuda")

    def check_timed(args, output):
        expected = run_divergent(args[0], torch.empty_like(args[0]))
        check.assert_close(output, expected, rtol=0, atol=0, name="a timed activate_uniform")

    result = timing.compare_speed(run_divergent, run_uniform, fresh_vectors, check=check_timed, rounds=7)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="warp-uniform vs divergent")

# %% [markdown]
# ## Question 4: a full reduction with sequential addressing (3 points)
#
# Write `sum_kernel(x, out)`: add every element of the float32 array `x` into `out[0]` (which starts at 0), for **any length** and any number of blocks of `RED_BLOCK` threads:
# 1. each thread adds up its elements with a grid-stride loop into a float32 local variable (start it at `np.float32(0)`: a Python `0.0` makes the sum float64, which the grader rejects);
# 2. it stores that into a float32 shared array of `RED_BLOCK` entries, then `cuda.syncthreads()`;
# 3. a tree with **sequential addressing**: `step` from `RED_BLOCK // 2` down to 1, threads `t < step` add `s[t + step]` into `s[t]`, a barrier after each step;
# 4. thread 0 adds the block's total into `out[0]` with `cuda.atomic.add`.
#
# Sequential addressing keeps the working threads together (whole warps stay active until the last steps) and reads consecutive words (no bank conflicts).
# Graded: the sum (1 point) and, in the simulator on 3000 elements in 4 blocks, a traced SIMT efficiency of at least 0.95 and a mean bank-conflict degree of at most 1.25 (2 points).
# Interleaved addressing (`t % (2·step) == 0`) reaches about 0.91; the "strided index" variant (`index = 2·step·t`) about 2.5 conflicts per request.
# About 16 lines.

# %% nbgrader={"grade_id": "red_block", "locked": true}
RED_BLOCK = 128  # threads per block of sum_kernel: a power of two, a compile-time constant

# %% nbgrader={"grade_id": "sum_kernel", "solution": true}
@cuda.jit
def sum_kernel(x, out):
    """out[0] += sum(x); x: (n,) float32, any n, any number of blocks of RED_BLOCK threads."""
    ### BEGIN SOLUTION
    partial = cuda.shared.array(RED_BLOCK, np.float32)
    t = cuda.threadIdx.x
    total = np.float32(0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        total += x[i]
    partial[t] = total
    cuda.syncthreads()
    step = RED_BLOCK // 2
    while step > 0:
        if t < step:
            partial[t] += partial[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        cuda.atomic.add(out, 0, partial[0])
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_sum_correct", "grade": true, "points": 1}
"""sum_kernel adds up arrays of any length, with any number of blocks, in float32 arithmetic."""


def check_sum(n, blocks):
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(1, np.float32)
    sum_kernel[blocks, RED_BLOCK](x, out)
    check.assert_close(out, np.array([x.astype(np.float64).sum()], dtype=np.float32), rtol=1e-4, atol=1e-3,
                       name=f"the sum of {n} elements with {blocks} blocks")


check_sum(1000, 4)
check.assert_float32_only(sum_kernel, np.zeros(1000, np.float32), np.zeros(1, np.float32))
### BEGIN HIDDEN TESTS
check_sum(1, 1)
check_sum(1, 3)
check_sum(129, 1)
check_sum(2500, 2)
check_sum(97, 5)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_sum_traced", "grade": true, "points": 2}
"""Traced in the simulator: sum_kernel keeps warps active (>= 0.95) and shared memory conflict-free (<= 1.25)."""
EFFICIENCY_NEEDED, CONFLICTS_ALLOWED = 0.95, 1.25
x = rng.standard_normal(3000).astype(np.float32)
out = np.zeros(1, np.float32)
with sim.trace() as t:
    sum_kernel[4, RED_BLOCK](x, out)
check.assert_close(out, np.array([x.astype(np.float64).sum()], dtype=np.float32), rtol=1e-4, atol=1e-3, name="the traced sum")
if not t.available:
    # A kernel compiled for this GPU cannot be traced; the grader traces it in the simulator on every machine.
    print("traced counts need numba's simulator: the grader traces your kernel there")
else:
    efficiency, conflicts = t.simt_efficiency(), t.bank_conflict_degree()
    print(f"SIMT efficiency {efficiency:.1%}, mean bank-conflict degree {conflicts:.2f} (modelled from the trace)")
    assert efficiency >= EFFICIENCY_NEEDED, f"SIMT efficiency {efficiency:.3f}, need at least {EFFICIENCY_NEEDED}: use sequential addressing"
    assert conflicts <= CONFLICTS_ALLOWED, f"mean bank-conflict degree {conflicts:.2f}, need at most {CONFLICTS_ALLOWED}"

# %% [markdown]
# ## Question 5: branch-free code on the CPU (3 points)
#
# CPUs pay for branches too: a branch the predictor guesses wrong costs a pipeline refill, and a per-element `if` in Python costs an interpreter round trip per element.
# `soft_clip_loop` applies a piecewise function element by element with `if`/`elif`/`else`.
# Write `soft_clip(x)`, the same function on a whole float64 array at once, **without a Python loop or per-element branch**: compute each piece for every element and select with masks (`np.where`, `np.select`, `np.clip`).
# It returns a new array of `x`'s shape and dtype.
#
# 1 point for correctness, 2 for speed: at least 6× faster than the loop on 20,000 elements, on fresh inputs, on your CPU (the reference reaches 18-20× on the course's 2-core machine, one thread).
# About 4 lines.

# %% nbgrader={"grade_id": "soft_clip_loop", "locked": true}
def soft_clip_loop(x):
    """x: (n,) float64. -1 below -2, a smooth quadratic knee on [-2, 2], 1 + 0.01 (v - 2) above 2."""
    out = np.empty_like(x)
    for i, v in enumerate(x):
        if v < -2.0:
            out[i] = -1.0
        elif v <= 2.0:
            out[i] = v * (1.0 - abs(v) / 4.0)
        else:
            out[i] = 1.0 + 0.01 * (v - 2.0)
    return out


# %% nbgrader={"grade_id": "soft_clip", "solution": true}
def soft_clip(x):
    """soft_clip_loop on a whole array, branch-free: (n,) float64 -> (n,) float64."""
    ### BEGIN SOLUTION
    knee = x * (1.0 - np.abs(x) / 4.0)
    return np.where(x < -2.0, -1.0, np.where(x <= 2.0, knee, 1.0 + 0.01 * (x - 2.0)))
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_soft_clip_correct", "grade": true, "points": 1}
"""soft_clip matches the loop everywhere, the boundaries included."""


def check_soft_clip(x, name):
    check.assert_close(soft_clip(x), soft_clip_loop(x), rtol=1e-12, atol=1e-12, name=name)


check_soft_clip(np.linspace(-5, 5, 101), "101 points on [-5, 5]")
check_soft_clip(np.array([-2.0, 2.0, 0.0]), "the boundaries")
### BEGIN HIDDEN TESTS
check_soft_clip(rng.standard_normal(1000) * 4, "1000 random points")
check_soft_clip(np.array([-1e100, 1e100, -2.0000001, 2.0000001]), "extreme values")
check_soft_clip(np.array([3.5]), "one element")
check_soft_clip(np.zeros(0), "no elements")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_soft_clip_speed", "grade": true, "points": 2}
"""soft_clip beats the per-element loop by the required factor on fresh inputs, measured on this machine."""
SPEEDUP_NEEDED = {"cpu": 6.0, "cuda": 6.0}  # numpy runs on the CPU either way


def fresh_points():
    return (rng.standard_normal(20_000) * 3,)


def check_timed_clip(args, output):
    assert output.shape == args[0].shape, f"expected shape {args[0].shape}, got {output.shape}"
    # The function is elementwise, so a prefix is checked against the loop (all of it would cost a loop per call).
    check.assert_close(output[:200], soft_clip_loop(args[0][:200]), rtol=1e-12, atol=1e-12, name="a timed soft_clip")


### BEGIN HIDDEN TESTS
def check_timed_clip(args, output):
    """Graded: every value of every timed output, against a vectorised reference (kept out of the release)."""
    x = args[0]
    assert output.shape == x.shape, f"expected shape {x.shape}, got {output.shape}"
    expected = np.where(x < -2.0, -1.0, np.where(x <= 2.0, x * (1.0 - np.abs(x) / 4.0), 1.0 + 0.01 * (x - 2.0)))
    check.assert_close(output, expected, rtol=1e-12, atol=1e-12, name="a timed soft_clip")
### END HIDDEN TESTS


result = timing.compare_speed(soft_clip_loop, soft_clip, fresh_points, check=check_timed_clip, rounds=7)
check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="soft_clip vs the loop")
