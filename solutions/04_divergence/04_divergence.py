# %% [markdown]
# # Assignment 04: branch divergence — a SIMT model of loops, a warp-uniform rewrite, a reduction and branch-free code
#
# This assignment checks the ideas of lecture 04 (`course/04_divergence.ipynb`).
# You will extend the lecture's model of a divergent branch to loops whose trip count differs from lane to lane, rewrite a divergent kernel so that every warp takes one path, write a full reduction with sequential addressing, and make a branchy function branch-free on your CPU.
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
from gpucourse import check, sim, thresholds, timing

SIMULATED = kernels.simulator_active()
rng = np.random.default_rng(0)

# %% [markdown]
# ## Question 1: what a data-dependent loop costs a warp (2 points)
#
# The lecture's model (`sim.warp_cycles`, `sim.simt_efficiency`) prices one branch: the warp runs each distinct path once, with the other lanes masked.
# A loop whose trip count depends on the data (a Mandelbrot pixel iterating until it escapes, a ray bouncing until it leaves the scene, a `while` over per-element work) is that branch taken again at every iteration: lanes with work left run the body, lanes that are done are masked off, and the warp keeps issuing the body until its longest active lane has finished.
# The package models one branch; Questions 1-2 extend it to such loops.
# You may call `gpucourse.sim` as a reference or a building block, but it does not answer them.
#
# Write `loop_cycles(trip_counts, cycles_per_iteration, exit_cycles=0)`: `trip_counts` lists each lane's number of iterations (an int ≥ 0, or `None` for an inactive lane, e.g. past the end of the data), at most 32 lanes.
# Return the cycles the warp spends: as many iterations as its longest active lane, each costing `cycles_per_iteration`, plus `exit_cycles` once (the last test of the condition and the code after the loop) if any lane is active.
# A warp with no active lane spends 0 cycles.
# Raise `ValueError` for more than 32 lanes or a negative trip count.
#
# About 8 lines.

# %% nbgrader={"grade_id": "loop_cycles", "solution": true}
def loop_cycles(trip_counts, cycles_per_iteration, exit_cycles=0):
    """Cycles a warp spends on a loop whose trip count differs per lane.

    trip_counts: each lane's iterations (None for an inactive lane), at most 32 lanes.
    """
    ### BEGIN SOLUTION
    trip_counts = list(trip_counts)
    if len(trip_counts) > 32:
        raise ValueError(f"a warp has at most 32 lanes, got {len(trip_counts)}")
    active = [count for count in trip_counts if count is not None]
    if any(count < 0 for count in active):
        raise ValueError(f"a trip count cannot be negative, got {min(active)}")
    if not active:
        return 0
    # Finished lanes are masked off, but the warp issues the body until its longest lane is done.
    return max(active) * cycles_per_iteration + exit_cycles
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_loop_cycles", "grade": true, "points": 2}
"""loop_cycles charges the longest active lane's iterations, plus the exit once, whatever the other lanes need."""
check.assert_equal(loop_cycles([10] * 32, 4), 40, name="every lane runs 10 iterations")  # 10 × 4
check.assert_equal(loop_cycles([2] * 31 + [50], 4, exit_cycles=6), 206,
                   name="one lane runs 50 iterations, 31 lanes run 2")  # 50 × 4 + 6: the short lanes wait, masked
check.assert_equal(loop_cycles([None] * 32, 4, exit_cycles=6), 0, name="no active lane")
### BEGIN HIDDEN TESTS
check.assert_equal(loop_cycles([1, 9] * 8 + [None] * 16, 3, exit_cycles=2), 29, name="half the lanes inactive")  # 9 × 3 + 2
check.assert_equal(loop_cycles([0] * 32, 5, exit_cycles=2), 2, name="active lanes with no iteration")  # 0 × 5 + 2: the exit is paid
check.assert_equal(loop_cycles([0, 3, 0, 1], 2), 6, name="4 lanes listed, counts 0 to 3")  # 3 × 2
check.assert_equal(loop_cycles([3, 8] * 10 + [None] * 12, 2, exit_cycles=1), 17, name="a tail warp, lanes 20-31 inactive")  # 8 × 2 + 1
check.assert_equal(loop_cycles([None, 12, None, 4], 1), 12, name="inactive lanes first and between")  # 12 × 1
check.assert_equal(loop_cycles([4, 8], 0, exit_cycles=5), 5, name="iterations that cost nothing")  # 8 × 0 + 5
check.assert_equal(loop_cycles([10**9] + [1] * 31, 1000, exit_cycles=1), 10**12 + 1, name="one lane runs 10**9 iterations")  # 10**9 × 1000 + 1


check.assert_raises(ValueError, loop_cycles, [1] * 33, 1, name="33 lanes")
check.assert_raises(ValueError, loop_cycles, [3, -1, 2], 1, name="a negative trip count")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: SIMT efficiency of a loop (1 point)
#
# Write `loop_simt_efficiency(trip_counts)`: the useful lane-iterations (the sum of the active lanes' trip counts) over 32 × the iterations the warp runs (its longest active lane's count).
# Leave the exit cycles out: every active lane pays them once, whatever the counts.
# A full warp whose lanes all run the same count scores 1.0; inactive lanes and finished lanes do no useful work.
# Raise `ValueError` when the warp runs no iteration at all (no active lane, or only counts of 0).
#
# Lecture section 2.2 groups the work before launching it: sorting elements by their trip count puts lanes of similar counts into the same warp.
# The hidden tests also apply your function to the two warps of 64 lanes' work, before and after such a sort.
#
# About 4 lines (`loop_cycles` with one cycle per iteration gives the warp's iterations).

# %% nbgrader={"grade_id": "loop_simt_efficiency", "solution": true}
def loop_simt_efficiency(trip_counts):
    """Useful lane-iterations over 32 × the warp's iterations; trip_counts as for loop_cycles."""
    ### BEGIN SOLUTION
    iterations = loop_cycles(trip_counts, 1)  # one cycle per iteration: the warp's iterations
    if iterations == 0:
        raise ValueError("the warp runs no iteration")
    return sum(count for count in trip_counts if count is not None) / (32 * iterations)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_loop_simt_efficiency", "grade": true, "points": 1}
"""loop_simt_efficiency is 1 when every lane runs the same count, and drops when one lane runs long."""
check.assert_approx(loop_simt_efficiency([10] * 32), 1.0, name="every lane runs 10 iterations")  # 32 × 10 / (32 × 10)
check.assert_approx(loop_simt_efficiency([2] * 31 + [50]), 0.07,
                    name="one lane runs 50 iterations, 31 lanes run 2")  # (31 × 2 + 50) / (32 × 50) = 112 / 1600
### BEGIN HIDDEN TESTS
check.assert_approx(loop_simt_efficiency([1, 9] * 8 + [None] * 16), 80 / 288, name="half the lanes inactive")  # (8 × 1 + 8 × 9) / (32 × 9)
for no_work, name in (([None] * 32, "no active lane"), ([0] * 32, "32 lanes of 0 iterations"), ([None, 0], "one active lane, 0 iterations")):
    try:
        loop_simt_efficiency(no_work)
    except ValueError:
        pass
    else:
        raise AssertionError(f"{name}: expected ValueError (the warp runs no iteration), got no error")
# Grouping the work first: every fourth element needs 100 iterations, the others 4; 64 elements, two warps.
work = [100 if k % 4 == 3 else 4 for k in range(64)]
for first in (0, 32):  # unsorted, each warp holds 8 long lanes and 24 short: (8 × 100 + 24 × 4) / (32 × 100) = 896 / 3200
    check.assert_approx(loop_simt_efficiency(work[first:first + 32]), 0.28, name=f"unsorted work, lanes {first}-{first + 31}")
grouped = sorted(work)  # 48 short, then 16 long
check.assert_approx(loop_simt_efficiency(grouped[:32]), 1.0, name="sorted work, lanes 0-31")  # 32 × 4 / (32 × 4)
check.assert_approx(loop_simt_efficiency(grouped[32:]), 0.52, name="sorted work, lanes 32-63")  # (16 × 4 + 16 × 100) / (32 × 100) = 1664 / 3200
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
# Keep the arithmetic in float32 (use the given `DECAY` and `ONE`): the grader compiles your kernel with NVIDIA's compiler and fails it if it computes in float64.
#
# Graded: the results, in float32 (1 point) and, in the simulator, the traced warps on 640 elements: no warp may split its lanes between the two paths, as every warp of the divergent kernel does (2 points). Which warps diverge is a fact of the trace: extra uniform work or another layout of your source does not change it.
# On a GPU, a last item (2 points) times your kernel against the divergent one on 16M elements and needs 1.3×.
# Divergence costs time only where arithmetic, not memory, sets it: the expensive path runs `EXPENSIVE_STEPS` = 1024 steps on a GPU, so that even the card with the most FLOPs per byte of bandwidth in `gpu_specs` (the L4) is compute-bound, and 8 in the simulator, which runs every step in Python.
# That threshold is modelled, not yet measured: no GPU has run this item; `gpucourse.thresholds` models close to 2× on every card in `gpu_specs` (V100, T4, A100, L4, H100, H200), and `scripts/gpu_check.sh` will calibrate it on the first GPU run.
# About 6 lines.

# %% nbgrader={"grade_id": "divergent_kernel", "locked": true}
# With 8 steps both kernels would be memory-bound on every GPU and run at the same speed: 1024 make the
# arithmetic set the time on every card in gpu_specs (thresholds.uniform_speed). The simulator runs each step
# in Python, so it keeps 8. DECAY < 1 keeps v bounded without letting it settle: after 1024 steps of
# v * 0.5 + 1, every even element would be exactly 2.0, whichever x it came from.
EXPENSIVE_STEPS = 8 if kernels.simulator_active() else 1024
DECAY, ONE = np.float32(0.999), np.float32(1.0)  # float32 constants: a Python 0.999 would make the arithmetic float64


@cuda.jit
def activate_divergent(x, out):
    """out[i] = the expensive map of x[i] for even i, -x[i] for odd i; one thread per element."""
    i = cuda.grid(1)
    if i < x.size:
        if i % 2 == 0:
            v = x[i]
            for _ in range(EXPENSIVE_STEPS):
                v = v * DECAY + ONE
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
                v = v * DECAY + ONE
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
check.written(activate_uniform)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)


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
"""Traced in the simulator: no warp of activate_uniform splits its lanes between the two paths."""
check.written(activate_uniform)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)


def traced_warps(kernel, n):
    """The trace of one launch (None where the kernel ran compiled, untraced), its output checked."""
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    with sim.trace() as t:
        kernel[launch_1d(n)](x, out)
    expected = np.zeros(n, np.float32)
    activate_divergent[launch_1d(n)](x, expected)
    check.assert_close(out, expected, rtol=1e-6, atol=1e-6, name=f"the traced launch on {n} elements")
    return t if t.available else None


def check_no_divergence(n):
    """Every warp's lanes run the same lines: a divergent warp is a fact of the trace that no extra
    work and no way of laying out the source can change (SIMT efficiency, a mean, is printed for reference)."""
    t = traced_warps(activate_uniform, n)
    if t is None:
        return False
    divergent, warps = t.divergent_warps(), len(t.warp_efficiencies())
    print(f"{n} elements: {len(divergent)} of {warps} warps diverge; SIMT efficiency {t.simt_efficiency():.0%} (modelled from the trace)")
    assert not divergent, f"{len(divergent)} of {warps} warps split their lanes between the paths (first: block, warp {divergent[0]})"
    return True


if not check_no_divergence(640):
    # A kernel compiled for this GPU cannot be traced; the grader traces it in the simulator on every machine.
    print("traced counts need numba's simulator: the grader traces your kernel there; on this GPU the speed item measures the effect")
else:
    divergent = traced_warps(activate_divergent, 640)
    print(f"the divergent kernel: {len(divergent.divergent_warps())} of {len(divergent.warp_efficiencies())} warps diverge")
    ### BEGIN HIDDEN TESTS
    check_no_divergence(1280)
    ### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_uniform_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: the warp-uniform kernel beats the divergent one by 1.3x on 16 M elements."""
# Modelled, not yet measured: close to 2x on every card in gpu_specs with EXPENSIVE_STEPS = 1024, where the
# arithmetic sets the time (gpucourse.thresholds.uniform_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 1.3}
print(thresholds.describe("test_uniform_speed", SPEEDUP_NEEDED))
check.written(activate_uniform)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)
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
# Graded: the sum, with any number of blocks (1 point); and, traced in the simulator on 3000 elements in 4 blocks and on a launch drawn when graded (more blocks), (2 points):
# no data race (in shared memory, or in global memory between blocks); x read once; one atomic addition per block; and the whole launch's shared-memory requests and wavefronts (a request costs as many wavefronts as its bank-conflict degree) at most 1.25 × those of the cheapest tree, 29 per block (every value stored once, each halving step's threads packed into as few warps as possible, the total read once), with at least its requests: a sum without the tree gets no traced points.
# Interleaved addressing (`t % (2·step) == 0`) makes about 2.5 times as many requests; the "strided index" variant (`index = 2·step·t`) as many requests as the cheapest tree, but about 2.5 times the wavefronts (bank conflicts). Totals: extra work never lowers them.
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
check.written(sum_kernel)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)


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
import random  # noqa: E402  (hidden: drawn when graded, so no answer can know the sizes)

draw = random.SystemRandom()
many_blocks = draw.randint(6, 48)
check_sum(draw.randint(many_blocks * RED_BLOCK + 1, 3 * many_blocks * RED_BLOCK), many_blocks)  # every block has elements
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_sum_traced", "grade": true, "points": 2}
"""Traced in the simulator: sum_kernel has no data race, reads x once, adds each block's total with one atomic, and its
tree makes at least the cheapest tree's shared-memory requests and at most 1.25 times its requests and wavefronts."""
check.written(sum_kernel)  # unwritten: its stub's error here (a GPU ignores a kernel's raise)
MARGIN = 1.25  # allowed above the cheapest tree's figures


def cheapest_tree_requests(blocks):
    """Shared-memory requests of a tree over RED_BLOCK values at its cheapest: every value stored once,
    each halving step's active threads packed into as few warps as possible (two loads and one store
    each), the block's total read once. Totals, so extra work never helps, and less means no tree."""
    halvings = [RED_BLOCK >> k for k in range(1, RED_BLOCK.bit_length())]  # 64, 32, ..., 1 threads
    return blocks * (RED_BLOCK // 32 + sum(3 * -(-active // 32) for active in halvings) + 1)


def check_traced_sum(n, blocks):
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(1, np.float32)
    with sim.trace() as t:
        sum_kernel[blocks, RED_BLOCK](x, out)
    check.assert_race_free(t, name=f"the sum of {n} elements with {blocks} blocks")  # read from the trace, never from the sum
    check.assert_close(out, np.array([x.astype(np.float64).sum()], dtype=np.float32), rtol=1e-4, atol=1e-3, name="the traced sum")
    if not t.available:
        return False
    least, requests, wavefronts = cheapest_tree_requests(blocks), len(t.requests("shared")), t.wavefronts()
    print(f"{n} elements, {blocks} blocks: {requests} shared-memory requests, {wavefronts} wavefronts; the cheapest tree: "
          f"{least} of each (SIMT efficiency {t.simt_efficiency():.0%}; modelled from the trace)")
    assert requests >= least, (f"{requests} shared-memory requests, fewer than the {least} a tree over each block's "
                               f"{RED_BLOCK} values needs: add them up in a shared-memory tree (step 3)")
    assert requests <= MARGIN * least, f"{requests} shared-memory requests, need at most {MARGIN} × {least}: use sequential addressing"
    assert wavefronts <= MARGIN * least, f"{wavefronts} wavefronts for {requests} requests, need at most {MARGIN} × {least}: bank conflicts"
    atomics = sum(len(request.lanes) for request in t.requests("global", "atomic"))
    assert atomics == blocks, f"{atomics} atomic additions into out for {blocks} blocks: thread 0 of each block adds its block's total once (step 4)"
    loaded, least_loaded = t.sectors(kind="load"), -(-n * 4 // 32)  # every element of x read once, 8 floats per sector
    assert loaded <= MARGIN * least_loaded, f"{loaded} sectors of x loaded, need at most {MARGIN} × {least_loaded}: read each element once, coalesced"
    return True


if not check_traced_sum(3000, 4):
    # A kernel compiled for this GPU cannot be traced; the grader traces it in the simulator on every machine.
    print("traced counts need numba's simulator: the grader traces your kernel there")
### BEGIN HIDDEN TESTS
else:
    import random

    # Drawn when graded: more blocks than any visible launch, a length that leaves some threads one element and others two.
    draw = random.SystemRandom()
    traced_blocks = draw.randint(6, 12)
    check_traced_sum(draw.randint(traced_blocks * RED_BLOCK + 1, 2 * traced_blocks * RED_BLOCK - 1), traced_blocks)
### END HIDDEN TESTS

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
check_soft_clip(np.linspace(-7, 3, 101), "101 other points, on [-7, 3]")  # the same shape, other values: nothing kept from the last call
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
