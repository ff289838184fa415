# %% [markdown]
# # 04 · Branch divergence: SIMT, masks and reductions
#
# Lecture 02 said that a warp's 32 threads execute each instruction together.
# This lecture asks what happens when they disagree: when an `if` sends some lanes of a warp one way and the rest the other.
#
# What you will learn:
#
# 1. SIMT execution and active masks: why a divergent branch costs the warp the sum of its paths, and why short branches are often not branches at all (predication);
# 2. branches that diverge per thread against branches that are uniform per warp, traced lane by lane and, on a GPU, timed;
# 3. what to do when the *data* decides the branch: group the work first;
# 4. reductions in shared memory, from a divergent tree to a sequential one, with bank conflicts and warp shuffles on the way;
# 5. the same principle on your CPU, measured for real: branch mispredictions on sorted and random data, and branch-free code;
# 6. an interactive divergence explorer.
#
# Every cell runs on a laptop CPU as well as on a GPU.
# Without a GPU the kernels run in numba's simulator, where a tracer records what every lane of every warp did: the efficiencies it reports are *modelled* (traced in the simulator), never measured.
# On a GPU the same kernels are timed for real, and those numbers say *measured* and on which GPU.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import re
import warnings

import matplotlib.pyplot as plt
import numpy as np

import gpucourse
from gpucourse import plots, sim, timing, widgets

# %% [markdown]
# ## 1. SIMT execution and active masks
#
# An SM issues one instruction for a whole warp at a time (SIMT: single instruction, multiple threads).
# When the 32 lanes of a warp reach an `if` and disagree, the warp cannot go both ways at once.
# It runs one path with only the lanes that take it switched on, then the other path with the remaining lanes, then continues with all of them.
# Which lanes are on is the warp's **active mask**, one bit per lane; a switched-off lane is *masked*: it spends the cycles waiting and writes nothing.
#
# So a divergent branch costs the warp the **sum** of its paths, not the longest one.
# **SIMT efficiency** measures the waste: useful lane-cycles (each lane doing its own path) divided by 32 × the cycles the warp spent.
#
# Since Volta (2017) each thread has its own program counter, and the scheduler may interleave the two paths instead of running one after the other; the cost does not change, because at any moment the warp still issues one instruction for one path's lanes.
#
# `sim.warp_cycles(lane_paths, path_cost)` and `sim.simt_efficiency(lane_paths, path_cost)` model this for one warp: `lane_paths` says which path each lane takes (`None` for a lane with nothing to do), `path_cost` how many cycles each path takes.
# `widgets.branch_paths(condition)` turns a condition on `lane`, `warp` and `tid` (the thread's index in its block) into such a list.

# %%
# Each case: a name, the path each of the 32 lanes takes, the cycles each path costs.
cases = [
    ("all lanes agree", widgets.branch_paths("lane >= 0"), {"if": 10, "else": 10}),
    ("if lane % 2 == 0", widgets.branch_paths("lane % 2 == 0"), {"if": 10, "else": 10}),
    ("if lane < 16", widgets.branch_paths("lane < 16"), {"if": 10, "else": 10}),
    ("lane 0 takes a slow path", ["slow" if lane == 0 else "fast" for lane in range(32)], {"slow": 40, "fast": 2}),
    ("switch on lane % 4", [f"case {lane % 4}" for lane in range(32)], {f"case {c}": 10 for c in range(4)}),
    ("last warp, 20 elements left", ["if" if lane < 20 else None for lane in range(32)], {"if": 10}),
]
print(f"{'branch':<28} {'paths':>5} {'warp cycles':>11} {'SIMT efficiency':>15}")
for name, lane_paths, cost in cases:
    paths = {path for path in lane_paths if path is not None}
    print(f"{name:<28} {len(paths):>5} {sim.warp_cycles(lane_paths, cost):>11} {sim.simt_efficiency(lane_paths, cost):>15.0%}")
print("All modelled, for any NVIDIA GPU (32-lane warps); cycles are illustrative costs, not measured latencies.")
assert sim.warp_cycles(cases[1][1], cases[1][2]) == 20 and sim.simt_efficiency(cases[1][1], cases[1][2]) == 0.5

# %% [markdown]
# Four things to read from the table:
#
# - Divergence is a property of the *warp*, not of the branch: `lane % 2` and `lane < 16` both split the warp in two and both cost 20 cycles.
# - One lane on a slow path holds up the 31 others: the warp pays 40 + 2 cycles for a case most lanes never take (an efficiency of 8%).
# - A `switch` with four cases taken inside one warp costs four times one case.
# - Lanes that simply have no element (the bounds check of the last warp) waste their slots too, but they add no second path: that is a partial warp, not divergence, and it matters only for tiny grids.
#
# The figures draw three of these warps: time runs to the right, each row is a lane, and a lane is coloured while it is active on a path, grey while it is masked.

# %%
fig, axes = plt.subplots(1, 3, figsize=(9.6, 4.4))
for ax, (name, lane_paths, cost) in zip(axes, [cases[1], cases[3], cases[4]]):
    plots.active_masks(ax, lane_paths, cost)
    ax.set_title(f"{name}\n{sim.warp_cycles(lane_paths, cost)} cycles, "
                 f"SIMT efficiency {sim.simt_efficiency(lane_paths, cost):.0%} (modelled)", fontsize=9)
fig.suptitle("One warp through a branch: active lanes coloured, masked lanes grey (modelled, any 32-lane GPU)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Predication: short branches are not branches.**
# A real branch has a price of its own even when the warp agrees: a jump, and for a divergent warp the bookkeeping to run the second path and reconverge afterwards.
# For a branch of a few instructions, the compiler usually does not branch at all.
# It computes both sides for every lane and keeps the right result with a select instruction (`selp` in PTX), or it guards each instruction with a per-lane **predicate** (`@p add.f32 ...`): lanes whose predicate is false execute the instruction as a no-op.
# There is no jump and nothing to reconverge; the cost is the sum of both sides, which for short sides is cheaper than a branch.
# So a small `if` such as `y = x if x > 0 else 0.0` is not worth rewriting: divergence matters when the paths are long (loops, expensive math, memory accesses).
# Section 4 shows a CPU compiler doing exactly this to one of our loops.
#
# ## 2. Divergent and warp-uniform branches in real kernels
#
# We write kernels with numba-cuda, as in lecture 02: on a GPU when one works here, else in numba's CUDA simulator.
# The choice must be made before the first `from numba import cuda`, so the next cell makes it first.
#
# **The tracer.**
# Inside `with sim.trace() as t:`, every simulated launch is recorded lane by lane: each source line a thread executes, and each element it reads or writes.
# Lanes of one warp at the same line, the same number of times, count as one instruction issued for the warp, and `t.simt_efficiency()` is the mean share of the 32 lanes active per issued instruction.
# Two simplifications to keep in mind: one Python source line counts as one instruction, whatever it computes, and the loop's bookkeeping lines (`for`, `while`) count like the others.
# A compiled kernel has several instructions per line and may predicate short branches, so treat the numbers as a model of the *pattern*, not a cycle count.
# The tracer only works in the simulator; on a GPU the cells below say so and time the kernels instead.

# %%
from gpucourse import kernels

mode = kernels.use_gpu_or_simulator()  # before numba.cuda is imported: the choice is fixed at that import

from numba import cuda, float32, int64  # noqa: E402

SIM = kernels.simulator_active()  # small problems in the simulator, large ones on a GPU
where = "numba's CUDA simulator" if SIM else gpucourse.describe()
# On a GPU numba warns about the small traced grids: speed is not the point of those launches.
warnings.filterwarnings("ignore", message=".*Grid size .* will likely result in GPU under-utilization")
# ... and about host (numpy) arguments, copied to the GPU and back at every launch (lecture 02, section 4.1): shown once,
# as the reason why the timed runs below pass device arrays instead.
warnings.filterwarnings("once", message=".*Host array used in CUDA kernel will incur copy overhead")
rng = np.random.default_rng(0)
print("kernels run in:", where)


def traced(kernel, blocks, threads, *args):
    """Launch ``kernel[blocks, threads](*args)`` once under the tracer; the Trace, or None on a GPU."""
    with sim.trace() as t:
        kernel[blocks, threads](*args)
    return t if t.available else None


NOT_TRACED = "not traced: on a GPU the kernel ran compiled, which the tracer cannot follow (run without a GPU to see the model)"

# %% [markdown]
# ### 2.1 Per-thread against per-warp branches
#
# Two kernels do the same work: every element goes through one of two loops of `work` iterations (`a`: `v·0.999 + 0.001`; `b`: `v²/2 + 1/4`), and half of the elements take each.
# They differ only in *which* elements take which path:
#
# - `branch_per_thread` branches on `i % 2`: neighbouring threads disagree, so every warp runs both loops;
# - `branch_per_warp` branches on `(i // 32) % 2`: the 32 threads of a warp always agree, so each warp runs one loop.
#
# The outputs differ (different elements take each path), so each kernel is checked against its own numpy reference.

# %%
A, B = np.float32(0.999), np.float32(0.001)  # float32 constants: a Python float would make numba compute in float64
C, D = np.float32(0.5), np.float32(0.25)


@cuda.jit
def branch_per_thread(x, out, work):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        if i % 2 == 0:  # neighbours disagree: every warp holds lanes on both paths
            for _ in range(work):
                v = v * A + B
        else:
            for _ in range(work):
                v = v * v * C + D
        out[i] = v


@cuda.jit
def branch_per_warp(x, out, work):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        if (i // 32) % 2 == 0:  # whole warps agree: each warp runs one loop only
            for _ in range(work):
                v = v * A + B
        else:
            for _ in range(work):
                v = v * v * C + D
        out[i] = v


def two_loops_reference(x, take_a, work):
    """numpy: path a where take_a is True, path b elsewhere. x, take_a: (n,)."""
    a, b = x.copy(), x.copy()
    for _ in range(work):
        a = a * A + B
        b = b * b * C + D
    return np.where(take_a, a, b)

# %%
n, threads, work = 1024, 256, 8  # small: the tracer follows every lane of 1024 threads in Python
x = rng.random(n, dtype=np.float32)
index = np.arange(n)
rule = {branch_per_thread: index % 2 == 0, branch_per_warp: (index // 32) % 2 == 0}
efficiency = {}
for kernel, take_a in rule.items():
    out = np.zeros_like(x)
    t = traced(kernel, n // threads, threads, x, out, work)
    np.testing.assert_allclose(out, two_loops_reference(x, take_a, work), rtol=1e-5)
    if t is None:
        print(f"{kernel.__name__:<18}: matches numpy (computed on {where}); {NOT_TRACED}")
        continue
    efficiency[kernel.__name__] = t.simt_efficiency()
    warps = t.warp_efficiencies().values()
    print(f"{kernel.__name__:<18}: SIMT efficiency {efficiency[kernel.__name__]:.0%} "
          f"(warps from {min(warps):.0%} to {max(warps):.0%}); matches numpy (modelled: traced in the simulator)")

# %% [markdown]
# With 8 iterations, each loop is 17 lines (the `for` line 9 times, the body 8), and 5 lines lie outside the branch.
# A warp of `branch_per_warp` issues 5 + 17 lines with all 32 lanes active: 100%.
# A warp of `branch_per_thread` issues 5 + 17 + 17 lines, the last 34 with 16 lanes each: (5 + 17) / 39 = 56%.
# It issues 39 instructions where 22 would do, so if the loops dominate the time, a GPU should take close to twice as long for the same work.
# The more work inside the branch, the closer the ratio gets to the number of paths.
#
# On a GPU, the next cell times both kernels on 16 million elements with 256 iterations, enough arithmetic that the loops, not memory, set the time.
# Arrays are copied to the GPU once (`cuda.to_device`), and each timed call ends with `cuda.synchronize()`, because a launch returns before the kernel has finished.

# %%
def gpu_time(kernel, blocks, threads, *args):
    """Median seconds per launch of kernel[blocks, threads](*args), measured with timing.measure (warm-up untimed)."""
    def launch():
        kernel[blocks, threads](*args)
        cuda.synchronize()  # wait for the kernel: a launch only queues it
    return timing.measure(launch, min_run_time=0.2).median


if SIM:
    print("[simulator: no speed to measure] On a GPU this cell times both kernels on 16M elements × 256 iterations "
          f"(measured): the per-thread branch should take close to twice as long, as the traced "
          f"{efficiency['branch_per_thread']:.0%} against {efficiency['branch_per_warp']:.0%} predicts.")
else:
    n, threads, work = 1 << 24, 256, 256
    x = rng.random(n, dtype=np.float32)
    d_x, d_out = cuda.to_device(x), cuda.device_array(n, dtype=np.float32)
    sample = rng.choice(n, 100_000, replace=False)  # numpy checks a sample: 256 passes over 16M elements would take seconds
    seconds = {}
    for kernel in (branch_per_thread, branch_per_warp):
        seconds[kernel.__name__] = gpu_time(kernel, n // threads, threads, d_x, d_out, work)
        take_a = sample % 2 == 0 if kernel is branch_per_thread else (sample // 32) % 2 == 0
        np.testing.assert_allclose(d_out.copy_to_host()[sample], two_loops_reference(x[sample], take_a, work), rtol=1e-4)
        print(f"{kernel.__name__:<18}: {seconds[kernel.__name__] * 1e3:.3f} ms per launch (measured on {where})")
    print(f"per-thread / per-warp: {seconds['branch_per_thread'] / seconds['branch_per_warp']:.2f}× the time "
          f"for the same work (measured on {where})")

# %% [markdown]
# **What the compiler sees.**
# The tracer follows lanes; the compiler sees only the code.
# As in lecture 02, `kernels.compile_report` compiles both kernels for a T4 (`sm_75`) with NVIDIA's NVVM and `ptxas`, without a GPU.
# We count three kinds of instruction in their PTX, NVIDIA's portable assembly:
#
# - branches, `bra`: a jump;
# - predicated instructions, written with a prefix such as `@%p3`: each lane executes the instruction only if its predicate register `%p3` is true (`@%p3 bra` is a conditional jump, and in these kernels every predicated instruction is one);
# - selects, `selp`: each lane picks one of two values by a predicate, with no jump.
#
# These are static counts, each instruction of the code once, not a trace of what ran.

# %%
compiled = {}  # kernel name -> CompileReport; stays empty without the compiler
try:
    for kernel in (branch_per_thread, branch_per_warp):
        # x, out: contiguous float32 arrays; work: a Python int, which numba compiles as int64
        compiled[kernel.__name__] = kernels.compile_report(kernel, (float32[::1], float32[::1], int64), gpu="T4")
except kernels.CompilerMissing as missing:
    print(f"[no compiler here] {missing}")
for name, report in compiled.items():
    ptx = [line.strip() for line in report.ptx.splitlines()]
    predicated, selects = sum(line.startswith("@%p") for line in ptx), sum(line.startswith("selp") for line in ptx)
    print(f"{name}: {report.branches} bra, {predicated} predicated instructions, {selects} selp, {report.registers} registers")
    split = next(origin for origin in report.source.origins if origin and "== 0:" in origin.code)  # the if choosing a loop
    print(f"  PTX of `{split.code.split('#')[0].strip()}`:")
    print("    " + "\n    ".join(" ".join(op.split()) for op in report.ptx_for_line(split.line)))
if compiled:
    print("static counts in the PTX, compiled for T4 (sm_75) by NVVM and ptxas: no GPU involved, nothing run or traced")

# %% [markdown]
# The two kernels compile to the same control flow, branch for branch; only the arithmetic of the condition differs.
# Each `if` becomes a comparison that sets a predicate (`setp`) and a conditional jump (`@%p bra`).
# Nothing in the code says whether the 32 lanes of a warp will agree: that is decided at run time by the values of `i` in each warp, which is why the tracer and the timings, not the PTX, tell the two kernels apart.
#
# Predication is there too, where the work is short.
# Python's `%` must give a non-negative result for a negative `i`, and the compiler makes that correction with `setp` and `selp`: it computes both candidates and selects one per lane, with no jump.
# The loops are too long for that and stay real branches.
# Either way, when the lanes of a warp disagree, the warp issues both sides: with predication every lane steps through both and keeps one result; with a branch the warp runs one path, then the other, with the other lanes masked.
# (PTX is not yet machine code: `ptxas` may still turn a short branch into predicated machine instructions, which these counts do not show.)

# %% [markdown]
# ### 2.2 When the data decides: group the work first
#
# In real code the condition is rarely `i % 2`; it is usually in the data.
# Here positive values take a long loop and the others a one-line path.
# With random signs, every warp holds both kinds, and every warp pays for the loop.
#
# If we **partition** the elements, positives first, and let thread `i` handle the `i`-th element of that order, nearly every warp is uniform: only the one warp straddling the boundary diverges.
# Two ways to do it:
#
# - keep the data where it is and give the kernel the order: thread `i` handles element `order[i]` (a *gather*);
# - move the data itself into that order once, and run the plain kernel on it.
#
# **Loops decide per lane too.**
# A loop whose trip count comes from the data (the iterations of a Mandelbrot pixel, the bounces of a ray, a `while` over per-element work) is a branch taken again at every iteration: lanes with work left run the body once more, lanes that have finished are masked off, and the warp keeps issuing the body until its longest lane finishes.
# So a warp pays for its longest lane's iterations, however few the others need, and the cure is the same: sort or bin the work by trip count, so that lanes of similar counts share a warp.
#
# The same idea appears at a larger scale in deep learning: bucketing sequences by length so that a batch does similar work, or sorting tokens by expert in a mixture-of-experts layer.

# %%
@cuda.jit
def by_sign(x, out, work):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        if v > 0:  # the data decides: wherever signs are mixed, the warp diverges
            for _ in range(work):
                v = v * A + B
        else:
            v = -v
        out[i] = v


@cuda.jit
def by_sign_ordered(x, order, out, work):
    i = cuda.grid(1)
    if i < x.size:
        j = order[i]  # thread i handles the i-th element in partitioned order
        v = x[j]
        if v > 0:
            for _ in range(work):
                v = v * A + B
        else:
            v = -v
        out[j] = v


def by_sign_reference(x, work):
    long = x.copy()
    for _ in range(work):
        long = long * A + B
    return np.where(x > 0, long, -x)


def partition_order(x):
    """Indices of the positive elements, then of the others: a partition in O(n), no full sort needed."""
    return np.concatenate([np.flatnonzero(x > 0), np.flatnonzero(x <= 0)]).astype(np.int32)

# %%
n, threads, work = 1024, 256, 8
x = rng.standard_normal(n, dtype=np.float32)
order = partition_order(x)
x_moved = x[order]  # the data itself, in partitioned order
runs = [("random signs", by_sign, (x,), x),
        ("gathered through order[i]", by_sign_ordered, (x, order), x),
        ("data moved into order", by_sign, (x_moved,), x_moved)]
for name, kernel, inputs, data in runs:
    out = np.zeros(n, dtype=np.float32)
    t = traced(kernel, n // threads, threads, *inputs, out, work)
    np.testing.assert_allclose(out, by_sign_reference(data, work), rtol=1e-5)
    if t is None:
        print(f"{name:<26}: matches numpy (computed on {where}); {NOT_TRACED}")
        continue
    load = t.sectors_per_request(kind="load", source="v = x[")
    print(f"{name:<26}: SIMT efficiency {t.simt_efficiency():.0%}, loads of x {load:.1f} sectors per warp request "
          f"(4 is ideal); matches numpy (modelled: traced in the simulator)")

# %% [markdown]
# Partitioning restores SIMT efficiency, but the gather pays for it elsewhere.
# The 32 lanes of a warp now read and write every other element or so of a wider stretch of the array, so each warp request touches about twice as many 32-byte sectors (module 03's coalescing); with a less regular order (a sort by key instead of a partition) it can reach one sector per lane.
# Moving the data once gets both: uniform warps and contiguous accesses.
# Which is worth it depends on the cost of the paths against the cost of memory, and on how often the data is reused in its new order; on a GPU, the next cell measures all three.

# %%
if SIM:
    print("[simulator: no speed to measure] On a GPU this cell times the three versions on 16M elements × 256 iterations "
          "(measured): whether removing the divergence is worth the gather's scattered accesses, and what moving the data once gains.")
else:
    n, threads, work = 1 << 24, 256, 256
    x = rng.standard_normal(n, dtype=np.float32)
    order = partition_order(x)
    d_x, d_order, d_moved = cuda.to_device(x), cuda.to_device(order), cuda.to_device(x[order])
    d_out = cuda.device_array(n, dtype=np.float32)
    sample = rng.choice(n, 100_000, replace=False)
    for name, kernel, inputs, data in [("random signs", by_sign, (d_x,), x),
                                       ("gathered through order[i]", by_sign_ordered, (d_x, d_order), x),
                                       ("data moved into order", by_sign, (d_moved,), x[order])]:
        seconds = gpu_time(kernel, n // threads, threads, *inputs, d_out, work)
        np.testing.assert_allclose(d_out.copy_to_host()[sample], by_sign_reference(data[sample], work), rtol=1e-4)
        print(f"{name:<26}: {seconds * 1e3:.3f} ms per launch (measured on {where})")

# %% [markdown]
# ## 3. Reductions in shared memory
#
# A **reduction** combines many values into one: a sum, a maximum, a norm.
# Inside a block the classic way is a tree in shared memory: each thread loads one element, then in each step half of the remaining values are added to the other half, with a barrier between steps, until `sdata[0]` holds the block's sum.
# A block of 256 threads needs log₂ 256 = 8 steps.
# The *order* of the additions decides how the active threads fall into warps, and so how much divergence and how many bank conflicts the tree has.
# Three versions, after Mark Harris's "Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007):
#
# 1. **interleaved, divergent**: in step `s = 1, 2, 4, …`, thread `t` adds `sdata[t + s]` into `sdata[t]` if `t % (2s) == 0`. The active threads are spread out: every warp stays busy with ever fewer active lanes.
# 2. **interleaved, strided index**: the same additions, but thread `t` works on `index = 2·s·t`, so the active threads are the first ones, packed into few warps. Divergence is gone, but the lanes of a warp now hit addresses `2s` words apart: **bank conflicts**.
# 3. **sequential addressing**: in step `s = 128, 64, …, 1`, thread `t < s` adds `sdata[t + s]` into `sdata[t]`. Active threads are packed *and* a warp reads consecutive words: no divergence until fewer than 32 are left, and no conflicts.
#
# Shared memory is 32 banks of 4-byte words (word `w` in bank `w % 32`); when lanes of a warp read different words of one bank, the request is replayed once per word (lecture 03).
#
# Each kernel here sums each block's 256 elements into `partial[blockIdx.x]`, on an array whose length is a multiple of the block size.
# A complete sum of an array of any length also needs each thread to accumulate several elements first and the blocks' partial sums to be combined: that is the graded assignment.

# %%
BLOCK = 256  # threads per block = elements per block; a compile-time constant, as shared arrays need


@cuda.jit
def reduce_interleaved(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    sdata[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    s = 1
    while s < BLOCK:
        if t % (2 * s) == 0:  # active threads spread over every warp
            sdata[t] += sdata[t + s]
        cuda.syncthreads()
        s *= 2
    if t == 0:
        partial[cuda.blockIdx.x] = sdata[0]


@cuda.jit
def reduce_strided(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    sdata[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    s = 1
    while s < BLOCK:
        index = 2 * s * t  # the first threads do the work, but lanes are 2s words apart
        if index < BLOCK:
            sdata[index] += sdata[index + s]
        cuda.syncthreads()
        s *= 2
    if t == 0:
        partial[cuda.blockIdx.x] = sdata[0]


@cuda.jit
def reduce_sequential(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    sdata[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if t < s:  # the first s threads, reading s consecutive words
            sdata[t] += sdata[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = sdata[0]


REDUCTIONS = (reduce_interleaved, reduce_strided, reduce_sequential)

# %% [markdown]
# We trace each on two blocks of small integers stored as float32, whose sums are exact in any order, so the check against numpy can demand equality.
# Besides the overall SIMT efficiency, the table counts the add instruction itself (the `+=` line): how many times a warp issued it, and how many of its 32 lanes were active on average.
# The loop's bookkeeping lines (`while`, `if`, the barrier) run with every lane in all three versions and dilute the overall figure; the add is where they differ.

# %%
blocks = 2  # the simulator runs 256 Python threads per block; two blocks are enough to see the pattern
x = rng.integers(0, 10, blocks * BLOCK).astype(np.float32)
print(f"{'kernel':<19} {'SIMT eff.':>9} {'add issues/block':>16} {'lanes/add':>9} {'conflicts mean':>14} {'worst':>5}")
traces = {}
for kernel in REDUCTIONS:
    partial = np.zeros(blocks, dtype=np.float32)
    t = traced(kernel, blocks, BLOCK, x, partial)
    np.testing.assert_array_equal(partial, x.reshape(blocks, BLOCK).sum(axis=1))
    if t is None:
        print(f"{kernel.__name__:<19} matches numpy (computed on {where}); {NOT_TRACED}")
        continue
    traces[kernel.__name__] = t
    adds = t.requests("shared", "store", source="+=")  # one store per issued add
    lanes = sum(len(r.lanes) for r in adds) / len(adds)
    print(f"{kernel.__name__:<19} {t.simt_efficiency():>9.0%} {len(adds) / blocks:>16.0f} {lanes:>6.1f}/32 "
          f"{t.bank_conflict_degree():>14.2f} {t.bank_conflict_degree(worst=True):>5}")
if traces:
    print("Modelled: traced in the simulator; conflicts over every shared-memory request (1 = conflict-free), for 32 banks of 4 bytes.")

# %% [markdown]
# How to read it:
#
# - **Interleaved, divergent** issues the add about four times as often as the others for the same 255 additions, with only a few lanes active each time: in step `s`, only one lane in `2s` of every warp works, and every warp still issues the add.
#   It has no bank conflicts: a warp only touches its own 32 consecutive words.
# - **Strided index** packs the work into few warps (as few issues as sequential), but each issue is replayed: lanes `2s` words apart fall into the same banks, up to 8 ways.
# - **Sequential addressing** has neither problem until the last five steps, where fewer than 32 threads remain and warp 0 runs part-empty.
#
# The figure draws one traced shared-memory read of each of the last two: the worst request of the strided version and the first step of the sequential one.

# %%
if traces:
    fig, (left, right) = plt.subplots(2, 1, figsize=(9.4, 5.8))  # stacked: 32 banks wide enough to number each
    worst = max(traces["reduce_strided"].requests("shared", "load", source="+="), key=lambda r: r.conflict_degree)
    first = traces["reduce_sequential"].requests("shared", "load", source="+=")[0]
    for ax, request, name in ((left, worst, "strided index"), (right, first, "sequential addressing")):
        words = [address // 4 for address in request.addresses]  # 4-byte words
        plots.bank_map(ax, words)
        ax.set_ylim(0, worst.conflict_degree)  # the same scale on both sides: one row per replay
        ax.set_title(f"{name}: warp {request.warp} reads words {words[0]}, {words[1]}, …, {words[-1]}\n"
                     f"bank-conflict degree {request.conflict_degree} (modelled: traced in the simulator)", fontsize=9)
    fig.tight_layout()
    plt.show()
else:
    print(f"bank maps: {NOT_TRACED}")

# %% [markdown]
# ### 3.1 Finishing with warp shuffles
#
# In the last five steps of the sequential tree only warp 0 works, and it still goes through shared memory and a block-wide barrier for every step.
# Within a warp there is a faster way: a **shuffle** lets a lane read another lane's register directly.
# `cuda.shfl_down_sync(mask, v, offset)` returns the `v` of the lane `offset` places higher; five shuffles with offsets 16, 8, 4, 2, 1 sum 32 values into lane 0, with no shared memory and no barrier.
# The `mask` names the lanes taking part; it must be all 32 (`0xFFFFFFFF`) here, so the shuffles sit in a branch that the whole warp 0 takes, and no lane of it may skip them.
#
# **Not in the simulator.** numba's simulator does not implement the shuffle intrinsics (nor `activemask` or the warp votes), so the kernel below runs only on a GPU; without one, the cell shows the simulator's own error instead of a result.

# %%
@cuda.jit
def reduce_shuffle(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    sdata[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 32:  # the tree in shared memory, down to 64 values
        if t < s:
            sdata[t] += sdata[t + s]
        cuda.syncthreads()
        s //= 2
    if t < 32:  # exactly warp 0, all of it: the full mask below is valid
        v = sdata[t] + sdata[t + 32]
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)  # lane k adds lane k + offset's value, register to register
            offset //= 2
        if t == 0:
            partial[cuda.blockIdx.x] = v


x = rng.integers(0, 10, 2 * BLOCK).astype(np.float32)
partial = np.zeros(2, dtype=np.float32)
try:
    reduce_shuffle[2, BLOCK](x, partial)
except AttributeError as error:
    print(f"in numba's CUDA simulator: AttributeError: {str(error).splitlines()[0]}")
    print("So the shuffle version is GPU-only here: its result and its time appear when this notebook runs on a GPU.")
else:
    np.testing.assert_array_equal(partial, x.reshape(2, BLOCK).sum(axis=1))
    print(f"reduce_shuffle: matches numpy (computed on {where})")

# %% [markdown]
# **Timing the four versions.**
# On a GPU, the next cell times each kernel on 16M elements (65,536 blocks) and reports the effective bandwidth, bytes read per second.
# The model predicts the order of the table above; expect smaller gaps than Harris measured on a 2006 GPU, because on a recent GPU reading the data from memory takes a large share of the time, whatever the tree does.
# The measurement, not the model, has the last word.

# %%
if SIM:
    print("[simulator: no speed to measure] On a GPU this cell times the four reductions on 16M elements (measured), "
          "in µs per launch and GB/s, and draws them as bars.")
else:
    n = BLOCK * (1 << 16)
    x = rng.integers(0, 10, n).astype(np.float32)
    expected = x.reshape(-1, BLOCK).sum(axis=1)
    d_x, d_partial = cuda.to_device(x), cuda.device_array(n // BLOCK, dtype=np.float32)
    bars = []
    for kernel in REDUCTIONS + (reduce_shuffle,):
        seconds = gpu_time(kernel, n // BLOCK, BLOCK, d_x, d_partial)
        np.testing.assert_array_equal(d_partial.copy_to_host(), expected)
        bars.append((kernel.__name__, x.nbytes / seconds / 1e9, "measured"))
        print(f"{kernel.__name__:<19}: {seconds * 1e6:8.1f} µs per launch, {bars[-1][1]:6.0f} GB/s read (measured on {where})")
    fig, ax = plt.subplots(figsize=(8.6, 2.8))
    plots.provenance_bars(ax, bars, xlabel="effective bandwidth, GB/s (higher is better)", fmt="{:.0f}")
    ax.set_title(f"Per-block sums of 16M float32, measured on {where}", fontsize=10)
    plt.show()

# %% [markdown]
# ## 4. The CPU analogue: branch prediction
#
# A CPU core runs each of its threads on its own, not 32 in lockstep, so it has no masks to pay for; it has a different problem with branches.
# To keep its long pipeline full it **predicts** which way each branch will go and runs ahead speculatively; a wrong guess throws that work away, about 15–20 cycles on recent cores (reported in Agner Fog's microarchitecture manual).
# A branch that follows the data is well predicted when the data is sorted (long runs of the same outcome) and mispredicted half of the time when it is random.
#
# We measure it with three loops compiled by numba for the CPU (`@njit`), on a million random numbers in [0, 1) and the same numbers sorted, with a threshold of 0.5:
#
# - `sum_above` adds up the values above the threshold;
# - `keep_above` copies the values above the threshold to the front of `out` (a *filter*, or stream compaction);
# - `keep_above_branchless` does the same filter without a branch: it always writes the value and advances the output position by `v > threshold`, which is 0 or 1.
#
# We use a million elements so that the branch predictor cannot learn the whole sequence by heart across the repeated timing runs: modern predictors can memorise a few thousand random outcomes replayed again and again (Daniel Lemire showed it in 2019).

# %%
from numba import njit


@njit
def sum_above(x, threshold):
    total = 0.0
    for v in x:
        if v > threshold:
            total += v
    return total


@njit
def keep_above(x, threshold, out):
    k = 0
    for v in x:
        if v > threshold:
            out[k] = v
            k += 1
    return k


@njit
def keep_above_branchless(x, threshold, out):
    k = 0
    for v in x:
        out[k] = v  # always write: a value that is not kept is overwritten by the next one
        k += v > threshold  # a comparison as a number, 0 or 1: no jump
    return k

# %%
CPU = gpucourse.describe("cpu").split(",")[0] + ", one thread"  # numba loops and numpy run single-threaded here
n = 1_000_000
data = {"random": rng.random(n), "sorted": np.sort(rng.random(n))}
out = np.empty(n)
for values in data.values():  # correct first: compilation happens here too, outside the timed region
    assert np.isclose(sum_above(values, 0.5), values[values > 0.5].sum())
    for keep in (keep_above, keep_above_branchless):
        k = keep(values, 0.5, out)
        np.testing.assert_array_equal(out[:k], values[values > 0.5])
seconds, ratios = {}, {}
for f, extra in ((sum_above, ()), (keep_above, (out,)), (keep_above_branchless, (out,))):
    for round_ in range(5):  # random and sorted side by side, first one then the other: a busy machine affects both alike
        orders = ("random", "sorted") if round_ % 2 == 0 else ("sorted", "random")
        pair = {order: timing.measure(f, data[order], 0.5, *extra, min_run_time=0.05).median for order in orders}
        ratios.setdefault(f.__name__, []).append(pair["random"] / pair["sorted"])
        for order, time_s in pair.items():
            seconds.setdefault((f.__name__, order), []).append(time_s)
milliseconds = {key: float(np.median(times)) * 1e3 for key, times in seconds.items()}
for name, ratio in ratios.items():
    print(f"{name:<22}: random {milliseconds[(name, 'random')]:5.2f} ms, sorted {milliseconds[(name, 'sorted')]:5.2f} ms; "
          f"random / sorted {np.median(ratio):4.1f}× (5 rounds: {min(ratio):.1f}–{max(ratio):.1f}×; measured on {CPU}: the CPU analogue)")
fig, ax = plt.subplots(figsize=(8.6, 3.2))
plots.provenance_bars(ax, [(f"{name}, {order}", ms, "measured") for (name, order), ms in milliseconds.items()],
                      xlabel="ms per million elements (lower is better)", fmt="{:.2f}")
ax.set_title(f"Branch prediction, the CPU analogue: measured on {CPU}", fontsize=10)
plt.show()

# %%
# Why do some loops not care about the order of the data? Each loop's first comparison in its machine code, and the two instructions after it.
COMPARE = re.compile(r"^(v?u?comis[sd]|v?cmp\w*[sp]d|fcmp)\b")  # a floating-point comparison, x86 or ARM
for f in (sum_above, keep_above, keep_above_branchless):
    code = [line.strip() for line in f.inspect_asm(f.signatures[0]).splitlines()]
    code = [line for line in code if line and not line.startswith((".", "#", "//"))]  # instructions only
    first = next((k for k, line in enumerate(code) if COMPARE.match(line)), None)
    shown = " | ".join(" ".join(line.split()) for line in code[first:first + 3]) if first is not None else "no comparison found"
    print(f"{f.__name__:<22}: {shown}")

# %% [markdown]
# Two of the three loops do not care about the order of the data; the machine code says why (on an x86 CPU; ARM spells the same ideas `b.gt`, `fcsel` and `cset`):
#
# - In `sum_above`, LLVM removed the branch: the comparison sets a mask (`%k1`), and a *masked move* keeps the new total only where the mask is set, with `cmov`, `blend` or `fcsel` playing that role on other CPUs.
#   Both sides are computed and one is selected: this is **predication**, what the GPU compiler does with a short `if` (section 1). Sorted or random, the time is about the same.
# - In `keep_above`, the comparison is followed by a conditional jump (`ja`, `jbe`): a real branch, because a store to memory cannot be executed "just in case". Random data mispredicts it about half of the time, and the loop runs several times slower than on sorted data.
# - `keep_above_branchless` turns the comparison into a number (`seta`) and adds it: no jump, nothing to mispredict.
#   Random and sorted data now take the same time within the noise of the measurement (the ratio stays near 1, against a factor of several for `keep_above`), both about as fast as the branchy loop at its best.
#
# The GPU and the CPU pay for data-dependent branches in different currencies (idle lanes against flushed pipelines), and the cures are related: make the branch predictable or uniform by ordering the data, or remove it by computing both sides and selecting.
#
# **Branch-free, vectorised.** The same principle, one level up: numpy evaluates a condition for a whole array at once into a boolean mask, and `np.where(mask, a, b)` selects element by element, with no Python `if` at all.
# We split a signal into the sum of its values above a threshold and the sum of the rest, with a Python loop using `if`/`else`, and with masks; `timing.compare_speed` times the two interleaved, on fresh random inputs for every call, and checks every result of the vectorised version.

# %%
def split_sums_loop(x, threshold):
    above = below = 0.0
    for v in x:
        if v > threshold:
            above += v
        else:
            below += v
    return above, below


def split_sums_masked(x, threshold):
    above = np.where(x > threshold, x, 0.0).sum()  # every comparison at once into a mask, then select: no branch
    return above, x.sum() - above


def check_split(inputs, output):
    x, threshold = inputs
    expected = (x[x > threshold].sum(), x[x <= threshold].sum())
    assert np.allclose(output, expected, rtol=1e-9), f"got {output}, expected {expected}"


n = 100_000
speed = timing.compare_speed(split_sums_loop, split_sums_masked, lambda: (rng.random(n), 0.5), check=check_split, rounds=7)
print(f"{n:,} elements: Python loop with if/else {speed.baseline_seconds * 1e3:.1f} ms, numpy masks "
      f"{speed.candidate_seconds * 1e3:.2f} ms per call: {speed.speedup:.0f}× faster "
      f"(middle half of rounds {speed.low:.0f}–{speed.high:.0f}×; measured on {CPU}: the CPU analogue)")

# %% [markdown]
# Most of that factor is the Python interpreter, not the branch: every iteration of the loop runs dozens of bytecode instructions.
# The numpy version does more arithmetic (a comparison, a select and two sums over every element) and is still far faster, because it runs compiled, branch-free loops that the CPU's vector units run several elements at a time.
#
# ## 5. Try it: the divergence explorer
#
# Type a branch condition over `lane` (0–31), `warp` and `tid` (`warp * 32 + lane`), pick the warp and the cost of each path, and see each path's active mask, the cycles the warp pays and its SIMT efficiency (modelled).
# Try `tid % 64 < 32` on warps 0 and 1, `lane < 31` with a cheap `if` and an expensive `else`, `(tid // 8) % 2 == 0`, and `warp == 3`.
# (Without a live Jupyter kernel the controls do nothing; the figure after it shows four cases statically.)

# %%
widgets.divergence_explorer()

# %%
conditions = ["lane % 2 == 0", "tid % 64 < 32", "(tid // 8) % 2 == 0", "lane < 31"]
costs = [(10, 10), (10, 10), (10, 10), (2, 30)]
fig, axes = plt.subplots(2, 2, figsize=(9.6, 8.4))
for ax, condition, (if_cost, else_cost) in zip(axes.flat, conditions, costs):
    paths = widgets.branch_paths(condition, warp=1)
    plots.active_masks(ax, paths, {"if": if_cost, "else": else_cost})
    ax.set_title(f"warp 1, if {condition}\nif {if_cost} / else {else_cost} cycles: "
                 f"{sim.warp_cycles(paths, {'if': if_cost, 'else': else_cost})} cycles, "
                 f"{sim.simt_efficiency(paths, {'if': if_cost, 'else': else_cost}):.0%} (modelled)", fontsize=9)
fig.suptitle("Four branches seen by warp 1 (modelled, any 32-lane GPU)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What to remember
#
# - A warp issues one instruction for all its lanes; at a divergent branch it runs every path some lane takes, with the others masked, so it pays the **sum** of the paths. SIMT efficiency measures the share of lanes doing useful work.
# - Divergence is per warp: a condition that is the same for 32 consecutive threads (`(i // 32) % 2`) costs nothing extra, one that alternates (`i % 2`) costs every path in every warp.
# - Short branches are predicated, not taken: both sides run and a select keeps one, on GPUs and CPUs alike. Rewrite only long, divergent paths.
# - When the data decides (a branch, or a loop's trip count: a warp runs until its longest lane is done), group the work so that warps agree: partition or sort first, and prefer moving the data once over gathering it through an index, which breaks coalescing.
# - In a shared-memory reduction, the addressing decides everything: interleaved with `t % (2s)` diverges, the strided index causes bank conflicts, sequential addressing has neither; warp shuffles finish the last 32 values without shared memory or barriers.
# - On a CPU a data-dependent branch costs mispredictions on unordered data; branch-free code (selects, masks, `np.where`) runs at the same speed whatever the data.
#
# Next: the graded assignment `assignments/04_divergence/04_divergence.ipynb`, where you extend the SIMT model to loops whose trip count differs from lane to lane, rewrite a divergent kernel into a warp-uniform one, and write a complete reduction of an array of any length.
# Then module 05, streams: overlapping copies to and from the GPU with computation, so that the GPU never waits for data.
