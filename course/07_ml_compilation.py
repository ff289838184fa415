# %% [markdown]
# # 07 · Compiling a matmul: loops, loop order, blocks, a tensor intrinsic, and Triton
#
# A deep-learning compiler (TVM, XLA, PyTorch's Inductor, Triton) takes an operator written as plain loops and rewrites it until it fits the hardware: its caches, its vector units, its tensor instructions.
# The seed article of this module (seed 002, after the Machine Learning Compilation course) follows one matrix multiplication down that road, from low-level NumPy loops to blocks, reordered loops and a tensor intrinsic.
# We walk the same road, and measure every step.
#
# What you will learn:
#
# 1. the seed's `mm_relu` as explicit loops, in Python and compiled with numba; its FLOPs, bytes and place on the roofline;
# 2. why the order of the three loops can change the speed many times over: cache lines, strides and vector instructions;
# 3. blocking (tiling): a cache model of the bytes a tiled matmul moves, and why blocking must happen at two levels, the cache and the registers;
# 4. tensorization: rewriting the loop nest so that its innermost block is one call of a fixed-size 16 × 16 matrix instruction, and why the operands must be packed in tiles;
# 5. these steps as program rewrites (split, reorder, tile, tensorize) and a small schedule search;
# 6. the same tiled schedule as a Triton kernel, with the seed's relu fused into it, read in the PTX it compiles to for an A100, with `num_warps`, `num_stages` and `@triton.autotune`, grouped program ordering, and the tile and wave quantization that decide how much of a GPU a matmul fills.
#
# The CPU side is measured on the CPU that runs this notebook, with one thread: the loops are compiled by numba, and the "tensor core" is a compiled 16 × 16 routine, so the tensorized loop nest runs for real.
# The GPU side needs no GPU: Triton kernels run in Triton's interpreter (correct results, no speed), Triton compiles the same kernel for an A100 (sm_80) so we can read its PTX, and the rest is modelled from the course's table of GPUs, `gpucourse.gpu_specs`; the cell that times a kernel against cuBLAS says what a GPU run shows.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import os

# numpy's BLAS reads its thread count once, when numpy is first imported: one thread, like every loop timed here.
for variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[variable] = "1"

import re
import time
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import torch
from numba import njit

import gpucourse
from gpucourse import gpu_specs, kernels, plots, sim, timing, wording
from gpucourse.intrinsics import TILE, check_log, logged_call, mma_16x16, new_key

GPU = torch.cuda.is_available()
try:
    kernels.use_triton_gpu_or_interpreter()  # before `import triton`: without a GPU, kernels run in its interpreter
    import triton
    import triton.language as tl
except ImportError as err:
    triton = None
    print(f"{err}; the Triton cells below will say what they would show.")

CPU = gpucourse.describe("cpu").split(",")[0]
MEASURED = f"measured on {CPU}, one thread"
caches = gpucourse.devices.cpu_cache_bytes()
print(MEASURED)
print("data caches of one core:", ", ".join(f"L{level} {size // 1024:,} KiB" for level, size in caches.items()) or "unknown")
rng = np.random.default_rng(0)


# %% [markdown]
# **How the cells below time, and how they report.**
# `timing.measure` (lecture 01) runs a function at least eight times; some loops here take seconds per call, so we use a lighter rule.
# `gflops` calls the function once untimed (numba compiles on the first call of each argument type: compilation stays out of the timings), then times three runs and keeps the fastest, the one least disturbed by other work on the machine.
# A run repeats a short call until it lasts 20 ms, so that the clock's resolution does not matter.
# numba's `@njit` code runs on one thread (we never ask for `parallel=True`), and torch is held to one thread while timing.
#
# Which version wins, and by how much, depends on the CPU, its caches and its compiler, so this text never says it in advance.
# The sentences that compare this run's numbers are printed by the small functions below (`versus`, `near_best`, `roofline_place`, `count_check`), whose words are chosen by the numbers; the words they share with every lecture (when two numbers count as the same, how a list of names reads) come from `gpucourse.wording`.

# %%
def gflops(fn, *args, flops, repeats=3, warmup=True):
    """GFLOP/s of fn(*args) doing `flops` floating-point operations: the fastest of `repeats` timed runs."""
    with timing.fixed_threads(1):
        calls = 1
        if warmup:
            start = time.perf_counter()
            fn(*args)
            calls = max(1, int(0.02 / max(time.perf_counter() - start, 1e-6)))
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            best = min(best, (time.perf_counter() - start) / calls)
    return flops / best / 1e9


def random_matrices(m, k, n):
    """Fresh float32 inputs a: (m, k), b: (k, n), values in [0, 1)."""
    return rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)


def assert_matmul(c, a, b, what):
    """c == a @ b within float32 rounding of a k-long sum."""
    expected = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(c, expected, rtol=1e-4, atol=1e-4 * a.shape[1]), f"{what} differs from a @ b"


def versus(name, rate, other, other_rate, level=0.10):
    """One sentence comparing two rates of this run: "ran 2.3× as fast as", "ran 1.5× slower than", or level within `level`."""
    def times(ratio):  # "1.6×", or "34×" from 10 on
        return f"{ratio:.{0 if ratio >= 10 else 1}f}×"

    return wording.choose(rate, other_rate, 1 + level, more=f"{name} ran {times(rate / other_rate)} as fast as {other}",
                          tie=f"{name} ran level with {other} (within {level:.0%})", less=f"{name} ran {times(other_rate / rate)} slower than {other}")


def near_best(rates, level=0.10):
    """{setting: rate} -> which settings came within `level` of the best, and whether that is a flat top or a sharp peak."""
    best = max(rates.values())
    close = [str(setting) for setting, rate in rates.items() if wording.same(rate, best, 1 + level)]
    if len(close) == 1:
        return f"only {close[0]} came within {level:.0%} of the best: a sharp peak, which the search had to find"
    return f"{wording.listed(close, most=None)} came within {level:.0%} of the best: a flat top, where the search mostly avoids the cliffs beside it"


def roofline_place(name, intensity, rate, peak, bandwidth):
    """Where a point sits under a roofline (FLOP/byte, FLOP/s, FLOP/s, bytes/s), in words chosen by the numbers."""
    ridge, roof = peak / bandwidth, min(peak, intensity * bandwidth)
    side = "right of the ridge, under the flat roof" if intensity >= ridge else "left of the ridge, under the sloped roof"
    place = f"{name}: {intensity:.1f} FLOP/byte, {side} (ridge at {ridge:.1f}); {rate / roof:.0%} of the roof there"
    if rate < roof / 2:
        return place + ": far below it, so neither the arithmetic units nor the memory bandwidth are the limit, the loop nest is"
    return place + ": close to it, so the roof is the limit"


def count_check(counted, modelled, what):
    """A sentence saying whether a count read from compiled code is the modelled one."""
    if counted == modelled:
        return f"{what}: {counted} counted, {modelled} modelled: the same"
    return f"{what}: {counted} counted, {modelled} modelled: {counted / modelled:.2g}× the model, so the compiler repeated or split that code"


# %% [markdown]
# ## 1. The seed's `mm_relu`, as loops
#
# The seed starts from a *primitive tensor function* written in low-level NumPy: `C = relu(A @ B)`, with every loop spelled out and every element indexed by hand.
# It is what a compiler sees once the operator is lowered to loops: no library call, only loop nests over arrays, a multiply-add and a max.
# First in plain Python, on a matrix small enough to wait for: every `a[i, p]` is a Python call that boxes a float32 into an object, and every `+` and `*` dispatches on the objects' types.
# Then the *same source* compiled by numba's `@njit` to machine code through LLVM: types are inferred once, the indexing becomes address arithmetic and the loops become machine loops.
# The loop nest does not change; only the interpreter goes away.

# %%
def mm_relu(a, b, c):
    """c = relu(a @ b), every loop explicit, as the seed writes it. a: (m, k), b: (k, n), c: (m, n), written in place."""
    m, k = a.shape
    n = b.shape[1]
    y = np.empty((m, n), dtype=a.dtype)
    for i in range(m):
        for j in range(n):
            for p in range(k):
                if p == 0:
                    y[i, j] = 0
                y[i, j] = y[i, j] + a[i, p] * b[p, j]
    for i in range(m):
        for j in range(n):
            c[i, j] = max(y[i, j], 0)


n_small = 48
a_small, b_small = random_matrices(n_small, n_small, n_small)
a_small -= 0.5  # some negative products, so that the relu has something to do
c_small = np.empty((n_small, n_small), dtype=np.float32)
mm_relu(a_small, b_small, c_small)
assert np.allclose(c_small, np.maximum(a_small @ b_small, 0), rtol=1e-4, atol=1e-4)
python_rate = gflops(mm_relu, a_small, b_small, c_small, flops=2 * n_small**3, repeats=1, warmup=False)
print(f"mm_relu in Python, n = {n_small}: correct, {python_rate * 1e3:.1f} MFLOP/s ({MEASURED})")

mm_relu_compiled = njit(mm_relu)  # the same Python function, compiled
mm_relu_compiled(a_small, b_small, c_small)  # compiles here, for float32 2-D arrays
assert np.allclose(c_small, np.maximum(a_small @ b_small, 0), rtol=1e-4, atol=1e-4)
n_relu = 512
a_relu, b_relu = random_matrices(n_relu, n_relu, n_relu)
c_relu = np.empty((n_relu, n_relu), dtype=np.float32)
compiled_small_rate = gflops(mm_relu_compiled, a_small, b_small, c_small, flops=2 * n_small**3)
relu_rate = gflops(mm_relu_compiled, a_relu, b_relu, c_relu, flops=2 * n_relu**3)
print(versus(f"mm_relu compiled, n = {n_small}", compiled_small_rate, "the same Python loops", python_rate))
print(f"mm_relu compiled: {compiled_small_rate:.2f} GFLOP/s at n = {n_small}, {relu_rate:.2f} GFLOP/s at n = {n_relu} ({MEASURED})")

# %% [markdown]
# **FLOPs, bytes and the roofline.**
# A matmul of `(m, k) @ (k, n)` does one multiply and one add per term: **2·m·k·n FLOPs** (the relu's m·n comparisons are too few to count).
# The least it can move is each matrix once: for square float32 matrices, A and B read and C written, 3 · 4n² bytes; `mm_relu` also writes and reads its intermediate `y`, 5 · 4n² bytes.
# So its arithmetic intensity can reach 2n³ / 20n² = n/10 FLOP per byte: 51 for n = 512.
# A matmul *can* be compute-bound; whether it is depends on how the loops reuse what they load.
#
# Below, on module 01's roofline: the flat roof is this CPU's best measured matmul rate, NumPy's `np.dot` (a BLAS library, one thread), and the slope is the bandwidth of a large `np.add` (read two arrays, write one).

# %%
n_blas = 1024
a_blas, b_blas = random_matrices(n_blas, n_blas, n_blas)
blas_rate = gflops(np.dot, a_blas, b_blas, flops=2 * n_blas**3)
# Is numpy's BLAS really on one thread? CPU seconds per wall-clock second while it runs says so.
cpu_start, wall_start = time.process_time(), time.perf_counter()
for _ in range(5):
    np.dot(a_blas, b_blas)
blas_threads = (time.process_time() - cpu_start) / (time.perf_counter() - wall_start)
BLAS_LABEL = "np.dot (BLAS), one thread" if blas_threads < 1.3 else f"np.dot (BLAS), about {blas_threads:.1f} threads"
print(f"{BLAS_LABEL}: {blas_threads:.2f} CPU-seconds per second; {n_blas}² in float32 at {blas_rate:.1f} GFLOP/s (measured on {CPU})")

N_ADD = 2**22  # 16 MB per float32 array: larger than the caches
x_add, y_add, z_add = (rng.random(N_ADD, dtype=np.float32) for _ in range(3))
bandwidth = 12 * N_ADD / (N_ADD / gflops(np.add, x_add, y_add, z_add, flops=N_ADD) / 1e9)
print(f"np.add on {N_ADD:,} floats: {bandwidth / 1e9:.1f} GB/s, the slope of the roof ({MEASURED})")

fig, ax = plt.subplots(figsize=(9.4, 4.6))
plots.roofline(ax, blas_rate * 1e9, bandwidth, label=f"{CPU}, one thread: BLAS rate and np.add bandwidth, measured", color="C0",
               points=[(f"mm_relu, Python, n={n_small}", n_small / 10, python_rate * 1e9),
                       (f"mm_relu, numba, n={n_relu}", n_relu / 10, relu_rate * 1e9),
                       (f"np.dot, n={n_blas}", n_blas / 6, blas_rate * 1e9)])
ax.set_title(f"The seed's mm_relu on the roofline: rates measured on {CPU}, intensities modelled (each matrix moved once)", fontsize=9)
ax.legend(fontsize=plots.MIN_LABEL_POINTS, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)  # below: inside, it hid a point
fig.tight_layout()
plt.show()
print(roofline_place(f"mm_relu compiled, n = {n_relu}", n_relu / 10, relu_rate * 1e9, blas_rate * 1e9, bandwidth))

# %% [markdown]
# The intensity on the x axis is what the loops *could* reach if every matrix were loaded once; the line under the figure says where the compiled loops sit against the roof at that intensity.
# A point far below its roof is limited by neither the arithmetic units nor the memory bandwidth, but by the loop nest itself: the traffic it causes beyond "each matrix once", and the vector lanes it leaves idle.
# The rest of the lecture closes that gap step by step, with the same three rewrites a compiler uses.
#
# ## 2. Loop order
#
# The three loops of a matmul can run in any order, and the result is the same (up to float rounding); the memory accesses are not.
# NumPy arrays are **row-major**: `b[p, j]` and `b[p, j + 1]` are neighbours, `b[p, j]` and `b[p + 1, j]` are n floats apart.
# The CPU moves memory in whole **cache lines** (lecture 03's sectors, on a CPU): 64 bytes, 16 floats, on current x86 CPUs (Intel® 64 and IA-32 Architectures Optimization Reference Manual, and AMD's software optimization guides), 128 bytes, 32 floats, on Apple's M-series (`sysctl hw.cachelinesize` reports 128 on an M1 or M2).
# This CPU's line size is printed below.
# What matters is the *innermost* loop, the one that runs millions of times; with L floats per cache line:
#
# | order | innermost loop walks | stride per step | floats used per cache line fetched |
# |---|---|---|---|
# | `ijk`: `C[i, j] += A[i, p] * B[p, j]`, p inner | a row of A, a **column** of B | B: n floats | 1 of B's L (the rest only if the line survives until the next `j`) |
# | `ikj`: p in the middle, j inner | a **row** of B and a row of C | 1 float | all L |
# | `jki`: j outer, i inner | a **column** of A and a column of C | n floats | 1 of L, for A and for C |
#
# `ikj` also gives the compiler a loop it can turn into **vector instructions** (SIMD: 8 floats per instruction with AVX2, 16 with AVX-512): `c[i, j:j+8] += a_ip * b[p, j:j+8]` is one load, one multiply, one add and one store of contiguous floats.
# `ijk`'s inner loop is a running sum, one addition after the other; reordering those additions into vector lanes would change the float rounding, which numba does not do unless asked (`fastmath=True`).

# %%
@njit
def matmul_ijk(a, b):
    """(m, k) @ (k, n) -> (m, n): one dot product per output element, down a column of b."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for j in range(n):
            total = c[i, j]
            for p in range(k):
                total += a[i, p] * b[p, j]
            c[i, j] = total
    return c


@njit
def matmul_ikj(a, b):
    """(m, k) @ (k, n) -> (m, n): the inner loop walks a row of b and a row of c."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for p in range(k):
            a_ip = a[i, p]
            for j in range(n):
                c[i, j] += a_ip * b[p, j]
    return c


@njit
def matmul_jki(a, b):
    """(m, k) @ (k, n) -> (m, n): the inner loop walks a column of a and a column of c."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for j in range(n):
        for p in range(k):
            b_pj = b[p, j]
            for i in range(m):
                c[i, j] += a[i, p] * b_pj
    return c


ORDERS = {"ijk": matmul_ijk, "ikj": matmul_ikj, "jki": matmul_jki}
a_check, b_check = random_matrices(33, 17, 45)
for name, matmul in ORDERS.items():  # compiles each one, and checks it, on a shape that is not square
    assert_matmul(matmul(a_check, b_check), a_check, b_check, f"matmul_{name}")
print("three loop orders compiled and checked against a @ b")
line = gpucourse.devices.cache_line_bytes()
print(f"this CPU's cache line: {line} bytes, {line // 4} float32s" if line else "this CPU does not report its cache-line size")

# The machine code says which loop became vector instructions: arithmetic on packed floats in 256- or 512-bit registers (x86),
# or on 4-float vectors (ARM). Counted in each function's assembly, as compiled for this CPU.
PACKED_ARITHMETIC = re.compile(r"^\s*(v(add|mul|sub|fmadd\w*|fnmadd\w*)ps\s.*[yz]mm|f(mla|mul|add)\s+v\d+\.4s)")
for name, matmul in ORDERS.items():
    asm = matmul.inspect_asm(matmul.signatures[0])
    packed = sum(bool(PACKED_ARITHMETIC.match(line)) for line in asm.splitlines())
    print(f"matmul_{name}: {packed:2d} packed-float arithmetic instructions" + ("" if packed else ": one float at a time"))

# %%
SIZES = [64, 128, 256, 384, 512]
SLOW_SIZES = {"jki": 384}  # jki's strides cost about a second per call at 512: cap it
order_rates = {name: [] for name in ORDERS}
for n in SIZES:
    a_sq, b_sq = random_matrices(n, n, n)
    for name, matmul in ORDERS.items():
        if n <= SLOW_SIZES.get(name, n):
            order_rates[name].append(gflops(matmul, a_sq, b_sq, flops=2 * n**3))
    order_rates.setdefault("np.dot", []).append(gflops(np.dot, a_sq, b_sq, flops=2 * n**3))
for name, rates in order_rates.items():
    print(f"{name:>6}: " + ", ".join(f"n={n} {rate:5.1f}" for n, rate in zip(SIZES, rates)) + f" GFLOP/s ({MEASURED})")

fig, ax = plt.subplots(figsize=(9.4, 4.2))
for name, rates in order_rates.items():
    plots.versus_size(ax, SIZES[:len(rates)], rates, label=BLAS_LABEL if name == "np.dot" else f"matmul_{name}", logy=True,
                      xlabel="matrix side n (float32)", ylabel="GFLOP/s")
ax.set_title(f"Loop order, {MEASURED}", fontsize=10)
ax.legend(fontsize=plots.MIN_LABEL_POINTS, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
fig.tight_layout()
plt.show()
n_all = SIZES[len(order_rates["jki"]) - 1]  # the largest size every order ran
rates_at = {name: rates[SIZES.index(n_all)] for name, rates in order_rates.items()}
fastest_order = max(ORDERS, key=rates_at.get)
print(f"at n = {n_all}: " + "; ".join(versus(fastest_order, rates_at[fastest_order], other, rates_at[other])
                                      for other in ORDERS if other != fastest_order))
best_loop = [max(order_rates[name][index] for name in ORDERS if index < len(order_rates[name])) for index in range(len(SIZES))]
print(f"at n = {SIZES[-1]}: " + versus("np.dot", order_rates["np.dot"][-1], "the fastest loop order", best_loop[-1]))

# %% [markdown]
# What to look for: how far apart the three orders are at the same n, and whether the strided orders fall further behind as n grows, when a column's cache lines no longer all stay in cache until they are used again.
# `ikj` streams rows: every cache line it loads is used in full, the hardware prefetcher sees the pattern and fetches ahead, and each step is a vector instruction.
# `ijk` fetches a whole cache line of B for each float it uses; the neighbours it brought along are used by the next `j`, *if* they are still in cache by then.
# `jki` does that for two matrices.
#
# Where BLAS leads the best loop order (the last line above), the reason is reuse: `ikj` reads all of B once per row of A, from wherever B lives; when B no longer fits in a cache, every row of A pays for it from memory.
#
# ## 3. Blocking
#
# **Blocking** (tiling) splits each loop into an outer loop over blocks and an inner loop inside a block, and reorders them so that a block's data is used many times while it is in cache.
#
# **The cache model.**
# Take the tiled loop nest over output tiles: each output tile `C[i0:i0+T, j0:j0+T]` stays in cache while its sum is built; for each `p0` the A tile `A[i0:i0+T, p0:p0+T]` and the B tile `B[p0:p0+T, j0:j0+T]` are read from memory once; C is written once.
# Bytes = itemsize · (reads of A + reads of B + writes of C).
# For square n × n float32 matrices with T dividing n: there are (n/T)² output tiles, each reads n/T tiles of A and n/T tiles of B of T² floats, so
#
# **bytes = 4 · (2n³/T + n²)**, **FLOPs = 2n³**, intensity ≈ T/4 FLOP per byte for T ≪ n.
#
# The intensity grows with T: a bigger tile serves more multiply-adds per byte loaded.
# It grows only while the model's assumption holds, three T × T tiles (12·T² bytes) in cache at once; beyond that the tiles are re-read from memory, and the model no longer describes the machine.
# (Assignment question 1 asks for the same count on any shape, with tiles clipped at the edges.)

# %%
n_model = 1024
model_tiles = [4, 8, 16, 32, 64, 128, 256, 512, 1024]
model_bytes = [4 * (2 * n_model**3 / T + n_model**2) for T in model_tiles]
for T, moved in zip(model_tiles, model_bytes):
    fits = [f"L{level}" for level, size in caches.items() if 12 * T**2 <= size]
    print(f"T = {T:4d}: {moved / 1e6:8.1f} MB moved, {2 * n_model**3 / moved:6.1f} FLOP/byte; three tiles "
          f"({12 * T**2 / 1024:,.0f} KiB) fit in: {', '.join(fits) or 'no cache level of one core'} (modelled, n = {n_model})")

# %% [markdown]
# **Which loops to tile.**
# The loop nest that pays on a CPU keeps a **panel of B** in cache, the tile `B[p0:p0+T, j0:j0+T]`, and streams every row of A past it: tiles over `j` and `p` outside, all rows `i` inside, and the unit-stride `j` loop innermost, as in `ikj`.
# Each B value loaded into cache then serves all m rows of A; A's row pieces and C's row pieces stream through, one cache line at a time.
# (The panel order keeps B in cache rather than C; it moves A n/T times and C 2k/T times instead: the same 1/T law, with other constants.)
# Tiling `i` in the outer loops would not help: a row of A is used once per panel anyway, and the rows of C are already written one line at a time.
#
# The row views `c[i, j0:j1]` and `b[p, j0:j1]` matter too: a 1-D view with unit stride is the shape of loop LLVM vectorizes most easily.
#
# We time it on a *wide* product, (128, 1024) @ (1024, 4096), whose B is 16 MiB: the cell prints how that compares with this CPU's caches; `ikj`, which re-reads all of B for every row of A, reads it 128 times from wherever it fits.

# %%
@njit
def matmul_panel(a, b, tile=128):
    """(m, k) @ (k, n) -> (m, n), any shape: a tile x tile panel of b stays in cache while every row of a streams past it."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for j0 in range(0, n, tile):
        j1 = min(j0 + tile, n)
        for p0 in range(0, k, tile):
            p1 = min(p0 + tile, k)
            for i in range(m):
                c_row = c[i, j0:j1]
                for p in range(p0, p1):
                    a_ip = a[i, p]
                    b_row = b[p, j0:j1]
                    for j in range(j1 - j0):
                        c_row[j] += a_ip * b_row[j]
    return c


WIDE = (128, 1024, 4096)  # (m, k, n): B is 16 MiB in float32
WIDE_FLOPS = 2 * WIDE[0] * WIDE[1] * WIDE[2]
a_wide, b_wide = random_matrices(*WIDE)
larger = [f"L{level} ({size // 1024:,} KiB)" for level, size in caches.items() if size < b_wide.nbytes]
print(f"the wide product's B: {b_wide.nbytes // 2**20} MiB, larger than this core's " + (", ".join(larger) or "no cache level: it fits"))
assert_matmul(matmul_panel(a_check, b_check, 16), a_check, b_check, "matmul_panel with partial tiles")
assert_matmul(matmul_panel(a_wide, b_wide), a_wide, b_wide, "matmul_panel on the wide product")
wide_rates = {"ikj": gflops(matmul_ikj, a_wide, b_wide, flops=WIDE_FLOPS)}
SWEEP = [32, 64, 128, 256, 512]
panel_rates = [gflops(matmul_panel, a_wide, b_wide, T, flops=WIDE_FLOPS) for T in SWEEP]
print(f"wide product {WIDE}: matmul_ikj {wide_rates['ikj']:.1f} GFLOP/s; matmul_panel " +
      ", ".join(f"T={T} {rate:.1f}" for T, rate in zip(SWEEP, panel_rates)) + f" GFLOP/s ({MEASURED})")
best_panel = SWEEP[int(np.argmax(panel_rates))]
print(versus(f"matmul_panel at its best tile, T = {best_panel},", max(panel_rates), "matmul_ikj", wide_rates["ikj"]))

fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 4.4))
plots.versus_size(left, model_tiles, [moved / 1e6 for moved in model_bytes], label=f"bytes moved, square n={n_model}", kind="modelled",
                  xlabel="tile T", ylabel="MB moved from memory", logy=True)
left.axhline(12 * n_model**2 / 1e6, color="0.5", linestyle=":", label="each matrix moved once")
for level, size in caches.items():
    if level < 3 and (size / 12) ** 0.5 <= model_tiles[-1]:
        left.axvline((size / 12) ** 0.5, color="C3", alpha=0.5, linestyle="-.", label=f"three tiles fill L{level} ({size // 1024} KiB)")
left.set_title("the cache model: traffic falls as 1/T", fontsize=10)
left.legend(fontsize=plots.MIN_LABEL_POINTS, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
plots.versus_size(right, SWEEP, panel_rates, label="matmul_panel", xlabel="tile T", ylabel="GFLOP/s")
right.axhline(wide_rates["ikj"], color="C1", linestyle="--", label=f"matmul_ikj, {wide_rates['ikj']:.1f} (measured)")
right.set_ylim(0, max(panel_rates + [wide_rates["ikj"]]) * 1.15)
right.set_title(f"wide product {WIDE}, float32", fontsize=10)
right.legend(fontsize=plots.MIN_LABEL_POINTS, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
fig.suptitle(f"Blocking: bytes modelled; rates {MEASURED}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# Reading the right panel: small tiles restart the loops often and keep the vector loop short (a 32-wide panel row is 128 bytes: two 64-byte cache lines, one 128-byte line).
# Bigger tiles can help until the panel stops fitting where it should: at T = 128 it is 64 KiB, at T = 512 1 MiB; compare with this core's caches, printed at the top, to see where your curve should flatten or drop.
# Cache blocking alone does not change what the *inner* loop does: for each multiply-add it still loads one value of B and loads *and stores* one value of C.
# That loop is limited by loads and stores, not by arithmetic, wherever its data comes from, which bounds what the panel alone can gain.
# The next cell also times the square 1024² product, whose B (4 MiB) may already sit in this CPU's L2 or L3, so that `ikj` has less to lose there: compare the two gains it prints.
#
# **Blocking at the second level: registers.**
# The fix is the one BLAS's micro-kernels use: update **several rows of C in one pass over a row of B**.
# With four rows, each value of B loaded into a register serves four multiply-adds: per step of the inner loop, one load of B, four loads and four stores of C for four multiply-adds, 9 memory operations where `ikj` needs 12 (a load of B, a load and a store of C, for each one).
# The cell below shows the loop nest for shapes whose m is a multiple of 4 and whose k and n are multiples of the tile (Assignment question 3 asks you for one that takes any shape: leftover rows, partial tiles).

# %%
@njit
def matmul_panel_rb4(a, b, tile=128):
    """(m, k) @ (k, n) -> (m, n): a panel of b in cache and four rows of c per pass over it. m % 4 == 0, k and n multiples of tile."""
    m, k = a.shape
    n = b.shape[1]
    if m % 4 or k % tile or n % tile:
        raise ValueError("this version needs m a multiple of 4, and k and n multiples of the tile")
    c = np.zeros((m, n), dtype=a.dtype)
    for j0 in range(0, n, tile):
        for p0 in range(0, k, tile):
            for i in range(0, m, 4):
                c0, c1, c2, c3 = c[i, j0:j0 + tile], c[i + 1, j0:j0 + tile], c[i + 2, j0:j0 + tile], c[i + 3, j0:j0 + tile]
                for p in range(p0, p0 + tile):
                    a0, a1, a2, a3 = a[i, p], a[i + 1, p], a[i + 2, p], a[i + 3, p]
                    b_row = b[p, j0:j0 + tile]
                    for j in range(tile):
                        b_pj = b_row[j]  # loaded once, used four times
                        c0[j] += a0 * b_pj
                        c1[j] += a1 * b_pj
                        c2[j] += a2 * b_pj
                        c3[j] += a3 * b_pj
    return c


assert_matmul(matmul_panel_rb4(a_wide, b_wide), a_wide, b_wide, "matmul_panel_rb4 on the wide product")
rb4_wide_rate = gflops(matmul_panel_rb4, a_wide, b_wide, flops=WIDE_FLOPS)
print(f"wide product {WIDE}: ikj {wide_rates['ikj']:.1f}, panel (T=128) {panel_rates[SWEEP.index(128)]:.1f}, "
      f"panel + 4 rows per pass (T=128) {rb4_wide_rate:.1f} GFLOP/s ({MEASURED})")
print("  " + versus("panel + 4 rows", rb4_wide_rate, "ikj", wide_rates["ikj"]) + "; "
      + versus("panel alone", panel_rates[SWEEP.index(128)], "ikj", wide_rates["ikj"]))
n_square = 1024
a_sq, b_sq = random_matrices(n_square, n_square, n_square)
square_rates = {name: gflops(fn, a_sq, b_sq, flops=2 * n_square**3)
                for name, fn in (("ikj", matmul_ikj), ("panel", matmul_panel), ("panel + 4 rows", matmul_panel_rb4))}
print(f"square {n_square}²: " + ", ".join(f"{name} {rate:.1f}" for name, rate in square_rates.items()) + f" GFLOP/s ({MEASURED})")
print("  " + versus("panel + 4 rows", square_rates["panel + 4 rows"], "ikj", square_rates["ikj"]) + "; "
      + versus("panel alone", square_rates["panel"], "ikj", square_rates["ikj"]))

# %% [markdown]
# The lines above compare the two levels of blocking with `ikj`, on the wide product and on the square one; how much each gains depends on where B lives in this CPU's caches.
# Blocking the `p` loop too, four rows of the panel per pass (`c0[j] += a00 * b0[j] + a01 * b1[j] + a02 * b2[j] + a03 * b3[j]`, and the same for `c1` to `c3`), takes 12 memory operations for 16 multiply-adds.
# Assignment question 3 asks for that loop nest; the course's tensor intrinsic below uses the same 4 × 4 block inside its tile.
# Blocking must happen at both levels: the cache panel brings the data close, and the register block makes each value brought close do more work.
# BLAS adds more of the same (a 6 × 16 or 8 × 12 block of C held in registers, B and A *packed* into the exact order the micro-kernel reads).
#
# ## 4. A tensor intrinsic
#
# A GPU's **tensor core** multiplies small fixed tiles in one instruction: on an A100, `mma.sync.aligned.m16n8k16` multiplies a 16 × 16 tile of A by a 16 × 8 tile of B in half precision and adds a 16 × 8 tile of C, D = A·B + C in one warp-wide step (PTX ISA, "Warp-level matrix instructions: mma", the shapes for `.f16`); Triton's `tl.dot` compiles to these, as section 6 reads in its PTX.
# Google's TPU (a 128 × 128 systolic array) and the matrix units of CPUs (Intel's AMX, Apple's AMX/SME) work the same way: the instruction's unit of work is a tile, not a number.
# What a tensor core buys, card by card, is printed below from the course's table (`gpucourse.gpu_specs`, each card citing its datasheet).
# TF32 (float32 inputs rounded to a 10-bit mantissa) arrived with Ampere (NVIDIA A100 Tensor Core GPU Architecture whitepaper): a T4 (Turing, sm_75) or a V100 has none, and multiplies float32 on its CUDA cores.
#
# A compiler can only use such an instruction if it rewrites the loop nest so that its innermost block is exactly one tile product: **tensorization**.
#
# Here, `gpucourse.intrinsics.mma_16x16(a_tile, b_tile, c_tile)` plays the tensor core: `c_tile += a_tile @ b_tile` for 16 × 16 tiles only, compiled with numba; any other shape raises `ValueError`, as the hardware would refuse it.
# The tensorized loop nest is the blocked one with T = 16 and its three inner loops replaced by one call.
# Shapes that are not multiples of 16 are **padded** with zeros to `(ceil(m/16)·16, ceil(k/16)·16)` and `(ceil(k/16)·16, ceil(n/16)·16)` (zeros add nothing to the sums), and C is cropped back to (m, n).
# The number of intrinsic calls is then **ceil(m/16) · ceil(n/16) · ceil(k/16)**: one per output tile and per step along k.

# %%
print("dense tensor-core peak / FP32 CUDA-core peak of the same card (reported, gpucourse.gpu_specs):")
for spec in gpu_specs.GPUS.values():
    tf32 = f"TF32 {spec.tf32_tensor_flops / spec.fp32_flops:4.1f}×" if spec.tf32_tensor_flops else "no TF32 units"
    print(f"  {spec.name:5s} (compute capability {spec.compute_capability}): FP16 {spec.fp16_tensor_flops / spec.fp32_flops:4.1f}×, {tf32}")
fp16_ratios = [spec.fp16_tensor_flops / spec.fp32_flops for spec in gpu_specs.GPUS.values()]
print(f"FP16 on tensor cores: {min(fp16_ratios):.0f}× to {max(fp16_ratios):.0f}× the FP32 rate, depending on the card")


# %%
@njit
def matmul_tensorized_strided(a, b, mma):
    """(m, k) @ (k, n) -> (m, n), every multiply-add in mma(a_tile, b_tile, c_tile) on 16 x 16 views. m, k, n multiples of 16."""
    m, k = a.shape
    n = b.shape[1]
    if m % 16 or k % 16 or n % 16:
        raise ValueError("this version takes multiples of 16 only: pad the matrices first")
    c = np.zeros((m, n), dtype=a.dtype)
    for i0 in range(0, m, 16):
        for j0 in range(0, n, 16):
            for p0 in range(0, k, 16):
                mma(a[i0:i0 + 16, p0:p0 + 16], b[p0:p0 + 16, j0:j0 + 16], c[i0:i0 + 16, j0:j0 + 16])
    return c


def padded(x):
    """x: (rows, cols) -> zero-padded to multiples of 16 in both dimensions."""
    rows, cols = (-(-size // TILE) * TILE for size in x.shape)
    out = np.zeros((rows, cols), dtype=x.dtype)
    out[:x.shape[0], :x.shape[1]] = x
    return out


a_odd, b_odd = random_matrices(40, 50, 70)
c_odd = matmul_tensorized_strided(padded(a_odd), padded(b_odd), mma_16x16)[:40, :70]
assert_matmul(c_odd, a_odd, b_odd, "the padded, tensorized matmul")
# The course's logging intrinsic records every call's operand tiles; check_log checks that they are exactly the pairs of input tiles.
key = new_key(0)
logged_output, calls = logged_call(lambda a, b, mma: matmul_tensorized_strided(padded(a), padded(b), mma)[:40, :70], a_odd, b_odd, key)
counted = check_log(a_odd, b_odd, logged_output, calls, key)
print(f"(40, 50) @ (50, 70): correct after padding to (48, 64) @ (64, 80); "
      + count_check(counted, -(-40 // 16) * -(-70 // 16) * -(-50 // 16), "mma calls, against ceil(40/16)·ceil(70/16)·ceil(50/16)"))

# %%
assert_matmul(matmul_tensorized_strided(a_wide, b_wide, mma_16x16), a_wide, b_wide, "matmul_tensorized_strided on the wide product")
wide_rates["tensorized, strided views"] = gflops(matmul_tensorized_strided, a_wide, b_wide, mma_16x16, flops=WIDE_FLOPS)
print(f"tensorized with strided views, wide product: {wide_rates['tensorized, strided views']:.1f} GFLOP/s ({MEASURED})")
print(versus("tensorized with strided views", wide_rates["tensorized, strided views"], "ikj", wide_rates["ikj"]))

# %% [markdown]
# What the strided views cost: `a[i0:i0+16, p0:p0+16]` is not contiguous, a tile's rows being k floats apart in A, n floats apart in B and C.
# numba types such views as arrays of layout `'A'` (any strides), so `mma_16x16` is compiled for general strides: every access computes its address from the strides, and its 16-wide inner loop is not vectorized as well.
# Each of the 16 rows of a B tile also sits on its own cache lines, 16 KB apart in the wide B.
#
# **Packing** removes those costs, as every real tensorized kernel does: copy the tiles once into a *tile-major* 4-D array, `a_tiles[it, pt]` being the contiguous 16 × 16 tile (it, pt), so each intrinsic call gets `'C'`-contiguous operands, 1 KB each, in consecutive memory.
# It is the CPU analogue of a GPU kernel staging its tiles in shared memory (and the tensor core's operand registers) before the `mma` instructions run.
# The copy costs one pass over A and B; each packed tile is then used ceil(n/16) or ceil(m/16) times.
# The packed version below takes multiples of 16; Assignment question 4 asks for one that pads and crops inside the compiled function, for any shape.

# %%
@njit
def pack_tiles(x):
    """x: (rows, cols), multiples of 16 -> (rows/16, cols/16, 16, 16) where [it, jt] is the contiguous tile (it, jt)."""
    rows, cols = x.shape
    tiles = np.empty((rows // 16, cols // 16, 16, 16), dtype=x.dtype)
    for i in range(rows):
        for j in range(cols):
            tiles[i // 16, j // 16, i % 16, j % 16] = x[i, j]
    return tiles


@njit
def matmul_tensorized_packed(a, b, mma):
    """(m, k) @ (k, n) -> (m, n) with mma on packed, contiguous 16 x 16 tiles. m, k, n multiples of 16."""
    m, k = a.shape
    n = b.shape[1]
    if m % 16 or k % 16 or n % 16:
        raise ValueError("this version takes multiples of 16 only: pad the matrices first")
    a_tiles, b_tiles = pack_tiles(a), pack_tiles(b)
    c_tiles = np.zeros((m // 16, n // 16, 16, 16), dtype=a.dtype)
    for it in range(m // 16):
        for jt in range(n // 16):
            for pt in range(k // 16):
                mma(a_tiles[it, pt], b_tiles[pt, jt], c_tiles[it, jt])
    c = np.empty((m, n), dtype=a.dtype)
    for i in range(m):  # unpack C from its tiles
        for j in range(n):
            c[i, j] = c_tiles[i // 16, j // 16, i % 16, j % 16]
    return c


assert_matmul(matmul_tensorized_packed(a_wide, b_wide, mma_16x16), a_wide, b_wide, "matmul_tensorized_packed on the wide product")
wide_rates["tensorized, packed tiles"] = gflops(matmul_tensorized_packed, a_wide, b_wide, mma_16x16, flops=WIDE_FLOPS)
print(f"tensorized with packed tiles, wide product: {wide_rates['tensorized, packed tiles']:.1f} GFLOP/s ({MEASURED})")
print(versus("packed tiles", wide_rates["tensorized, packed tiles"], "strided views", wide_rates["tensorized, strided views"]) + "; "
      + versus("packed tiles", wide_rates["tensorized, packed tiles"], "ikj", wide_rates["ikj"]))

# %% [markdown]
# The same calls, the same arithmetic, on the same numbers: only the layout of the operands changed, and the lines above say what that did to the speed here.
# An intrinsic is only as fast as the data fed to it, which is why a tensorizing compiler always pairs the tensorize step with a layout step (TVM's `cache_read` into a staging buffer, Triton's loads into shared memory).
#
# ## 5. Transformations as program rewrites
#
# Every version so far is the same computation, `C[i, j] += A[i, p] · B[p, j]` over all (i, j, p), with another *schedule*: the order and grouping of its loops and where its data lives.
# TVM makes the rewrites explicit: a schedule applies primitives to the loop nest, each one a transformation that keeps the result.
#
# | rewrite (TVM primitive) | what it does to the loop nest | where here |
# |---|---|---|
# | split (`sch.split`) | `for j in range(n)` → `for j0 in range(0, n, T): for j in range(j0, j0 + T)` | §3, every tile loop |
# | reorder (`sch.reorder`) | swaps loops: `i, j, p` → `i, p, j` | §2, ijk → ikj |
# | tile = split + reorder | `j0, p0` outside, `i, p, j` inside: a panel of B per pass | §3, `matmul_panel` |
# | unroll (`sch.unroll`) a split of `i` by 4 | four rows of C per pass over B, in registers | §3, `matmul_panel_rb4` |
# | vectorize (`sch.vectorize`) | the unit-stride innermost loop → SIMD instructions | §2, the packed instructions counted in `ikj` |
# | cache_read / layout (`sch.cache_read`, `sch.transform_layout`) | copy the tiles into a staging buffer in the order they are used | §4, `pack_tiles` |
# | tensorize (`sch.blockize` + `sch.tensorize`) | the innermost 16 × 16 × 16 block → one intrinsic call | §4, `mma_16x16` |
#
# PyTorch's Inductor does not rewrite a GPU matmul's loops at all by default: `tuned_mm` (`torch/_inductor/kernel/mm.py`) lowers `aten.mm` to an extern call of ATen's `mm`, which is cuBLAS.
# Only with `torch.compile(mode="max-autotune")`, which sets `torch._inductor.config.max_autotune` (`list_mode_options` in `torch/_inductor/__init__.py`), does it add its Triton matmul templates, already written in the tiled, tensorized form of section 6, to the candidates (`use_triton_template` in `torch/_inductor/utils.py`), time them against cuBLAS and keep the fastest; `max_autotune_gemm_backends` (`torch/_inductor/config.py`) lists which backends compete.
#
# **Schedule search.**
# The rewrites are safe; choosing them is the hard part: the best tile sizes, orders and unroll factors depend on the cache sizes, the vector width and the shape, and the space is large (every split factor of every loop, every order).
# Compilers search it: TVM's AutoTVM, Ansor and MetaSchedule sample schedules, measure the fast-looking ones on the real device and learn a cost model to pick the next; Triton's `@triton.autotune` (section 6) times each configuration the kernel author lists and keeps the winner per shape.
# The smallest version of that search, below: five tile sizes for the register-blocked kernel on the wide product, each timed, the fastest kept.

# %%
import torch._inductor.config as inductor_config  # the installed torch's own defaults, which the text above cites

print(f"this torch {torch.__version__}: max_autotune = {inductor_config.max_autotune}, "
      f"max_autotune_gemm_backends = {inductor_config.max_autotune_gemm_backends!r} (torch/_inductor/config.py)")
tune_results = {T: gflops(matmul_panel_rb4, a_wide, b_wide, T, flops=WIDE_FLOPS) for T in SWEEP}
best_tile = max(tune_results, key=tune_results.get)
print(f"autotuning matmul_panel_rb4 on the wide product {WIDE} ({MEASURED}):")
print("  tile   GFLOP/s")
for T, rate in tune_results.items():
    print(f"  {T:4d}   {rate:7.1f}" + ("   <- kept" if T == best_tile else ""))
print(near_best({f"T = {T}": rate for T, rate in tune_results.items()}))
wide_rates["cache panel (best tile)"] = max(panel_rates)
wide_rates["panel + 4 rows (tuned)"] = tune_results[best_tile]

# %% [markdown]
# A flat top leaves the search little to win but cliffs on either side to avoid; a sharp peak rewards it; the line above says which this CPU gave.
# Either way the search must be redone for another shape or another machine.
# Compilation and tuning both stay out of the timed region, as every timing rule of this course says; a tuned kernel is compiled and measured before it is used.
#
# ## 6. The same schedule in Triton
#
# On a GPU the schedule of section 3 becomes a Triton kernel: each **program** computes one BLOCK_M × BLOCK_N tile of C (the output tile of the cache model), and loops over K in steps of BLOCK_K.
# Each step loads a BLOCK_M × BLOCK_K tile of A and a BLOCK_K × BLOCK_N tile of B (Triton stages them in shared memory) and multiplies them with `tl.dot`, which the compiler tensorizes into `mma` instructions on the tensor cores; the accumulator stays in registers, in float32.
# Triton does the packing and the register blocking of sections 3-4 itself; the schedule the author writes is the tiling.
#
# **The seed's relu, fused.**
# `mm_relu` wrote its product `y` to memory and read it back for the relu; here the relu is the kernel's *epilogue*: `tl.maximum(acc, 0)` on the accumulator tile, still in registers, before its one store.
# C is written once and `y` never exists, which is what a fusing compiler does with an elementwise op after a matmul (lecture 06's fusion).
#
# **Grouped ordering.**
# Programs run many at a time, and in the order of their ids; in row-major order the first wave of programs shares one row of A tiles but needs every column of B tiles, so B is pulled from memory into the L2 cache in full before any of it is reused.
# Grouping GROUP_M rows of tiles, and walking down a group's columns first, makes a wave cover a squarer patch of C, which needs fewer tiles of A and B at once: more of them are still in L2 when the next program needs them.
#
# The kernel below has **no masks**: it assumes M, N and K are multiples of the blocks, and its launcher refuses other shapes.
# Any other shape needs masks on the loads (fill with zeros past the edges) and on the store; the assignment asks you for that kernel.

# %%
if triton:
    @triton.jit
    def matmul_tiles_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                            RELU: tl.constexpr):
        # Grouped ordering: program ids walk down GROUP_M rows of tiles before moving one column right.
        pid = tl.program_id(0)
        tiles_m, tiles_n = M // BLOCK_M, N // BLOCK_N
        first_m = (pid // (GROUP_M * tiles_n)) * GROUP_M
        group_rows = min(tiles_m - first_m, GROUP_M)  # the last group may have fewer rows
        tile_m = first_m + (pid % group_rows)
        tile_n = (pid % (GROUP_M * tiles_n)) // group_rows
        rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        depth = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + rows[:, None] * stride_am + depth[None, :] * stride_ak  # a BLOCK_M x BLOCK_K tile of pointers
        b_ptrs = b_ptr + depth[:, None] * stride_bk + cols[None, :] * stride_bn  # a BLOCK_K x BLOCK_N tile
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, K, BLOCK_K):
            acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))  # no masks: whole blocks only
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        if RELU:  # the epilogue: the relu on the tile in registers, before its one store
            acc = tl.maximum(acc, 0.0)
        tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty))

    def matmul_tiles(a, b, block_m=16, block_n=16, block_k=16, group_m=2, relu=False):
        """a: (M, K), b: (K, N), every size a multiple of its block -> (M, N) in a's dtype, relu(a @ b) if relu; one program per tile of C."""
        (M, K), N = a.shape, b.shape[1]
        if M % block_m or N % block_n or K % block_k:
            raise ValueError(f"({M}, {K}) @ ({K}, {N}) is not made of whole {block_m} x {block_n} x {block_k} blocks: "
                             "this kernel has no masks")
        c = torch.empty((M, N), dtype=a.dtype, device=a.device)
        grid = ((M // block_m) * (N // block_n),)
        matmul_tiles_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                  BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, RELU=relu)
        return c

    # On an Ampere or newer GPU, tl.dot rounds float32 inputs to TF32 (10-bit mantissa); the interpreter, and a T4, do not.
    tolerance = 1e-2 if GPU else 1e-3
    where = "on " + gpucourse.describe() if GPU else "in the Triton interpreter"
    for m, k, n in [(48, 64, 80), (64, 32, 96), (16, 16, 16)]:
        a_t, b_t = torch.randn(m, k, device=gpucourse.device()), torch.randn(k, n, device=gpucourse.device())
        torch.testing.assert_close(matmul_tiles(a_t, b_t), torch.matmul(a_t, b_t), rtol=tolerance, atol=tolerance * k**0.5)
        print(f"({m}, {k}) @ ({k}, {n}) in 16 x 16 x 16 blocks, grouped by 2: matches torch.matmul ({where})")
    torch.testing.assert_close(matmul_tiles(a_t, b_t, relu=True), torch.relu(torch.matmul(a_t, b_t)), rtol=tolerance, atol=tolerance * k**0.5)
    assert (matmul_tiles(a_t, b_t, relu=True) == 0).any(), "the relu has nothing to clip: use inputs with negative products"
    print(f"mm_relu with the relu fused in the epilogue, ({m}, {k}) @ ({k}, {n}): matches torch.relu(torch.matmul(...)) ({where})")
else:
    print("Without Triton: the kernel would be checked against torch.matmul here, on shapes made of whole blocks.")

# %% [markdown]
# **Reading the PTX.**
# Triton compiles the same kernel for an A100 (sm_80) here, without a GPU, as the course's grader does (`gpucourse.triton_compiler`), with the argument types and the specializations a launch on two row-major 4096 × 4096 float16 matrices would give it: a stride equal to 1 becomes a constant, and sizes and addresses that are multiples of 16 are marked so, which lets Triton vectorize the loads.
# PTX is NVIDIA's portable assembly (lecture 02); what to look for in it (PTX ISA, the sections on each instruction):
#
# - `mma.sync.aligned.m16n8k16...`: the tensor-core instruction of section 4, one 16 × 8 × 16 tile product per warp.
#   One step of the K loop of a 128 × 128 × 32 tile is (128·128·32) / (16·8·16) = 256 of them, shared by the program's warps;
# - `ldmatrix`: loads a warp's operand fragments from shared memory into registers, the GPU's counterpart of `pack_tiles`;
# - `cp.async`: copies from global to shared memory that do not pass through registers and do not stall the thread, so the next tiles arrive while the tensor cores work on these; `cp.async.wait_group` waits for the oldest copies, `bar.sync` for every warp of the program;
# - `max.f32`: the fused relu, one per element of C a thread holds.
#
# **`num_warps` and `num_stages`.**
# Two launch options decide how a program runs, besides the block sizes (Triton's documentation of `triton.Config`, also its docstring in `triton/runtime/autotuner.py`):
# `num_warps` is how many warps execute one program ("if `num_warps=8`, then each kernel instance will be automatically parallelized to cooperatively execute using 8 * 32 = 256 threads"), so the tile's `mma` instructions and accumulators are split among more threads;
# `num_stages` is "the number of stages that the compiler should use when software-pipelining loops", mostly for matmuls on sm_80 and newer: how many K steps of A and B tiles are in flight in shared memory at once.
# Both cost resources of the SM (registers, shared memory), and so the number of programs one SM holds at once.
# The cell compiles the kernel three ways (Triton's defaults, 4 warps and 3 stages, first) and models, from the compiled registers and shared memory, how many programs an A100's SM holds (`sim.occupancy`, lecture 02).

# %%
if triton:
    from gpucourse.triton_compiler import triton_compile_report
    from gpucourse.triton_source import triton_source

    SM80_TILE = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, RELU=True)
    half = torch.empty(16, 16, dtype=torch.float16)  # what the compiler sees of a tensor: its dtype and whether its address is 16-aligned
    LAUNCH_4096 = (half, half, half, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1)  # M, N, K and the strides of row-major 4096² matrices
    try:
        sm80 = {(warps, stages): triton_compile_report(triton_source(matmul_tiles_kernel), LAUNCH_4096, SM80_TILE, gpu="A100",
                                                        num_warps=warps, num_stages=stages)
                for warps, stages in ((4, 3), (8, 3), (4, 4))}
    except kernels.CompilerMissing as missing:
        sm80 = {}
        print(f"{missing}: the PTX of the kernel would be read here")
if triton and sm80:
    report = sm80[4, 3]
    ptx = [line.strip() for line in report.ptx.splitlines()]
    mma_lines = [index for index, line in enumerate(ptx) if line.startswith(("mma.", "wgmma."))]
    shape_m, shape_n, shape_k = map(int, re.search(r"\.m(\d+)n(\d+)k(\d+)\.", ptx[mma_lines[0]]).groups())
    print(report.summary())
    print(f"tensor-core instructions: {dict(Counter(ptx[index].split()[0] for index in mma_lines))}")
    per_warp = SM80_TILE["BLOCK_M"] * SM80_TILE["BLOCK_N"] * SM80_TILE["BLOCK_K"] // (shape_m * shape_n * shape_k) // report.num_warps
    print(count_check(len(mma_lines), per_warp, f"mma instructions per warp, one K step of {SM80_TILE['BLOCK_M']} x {SM80_TILE['BLOCK_N']} "
                      f"x {SM80_TILE['BLOCK_K']} in m{shape_m}n{shape_n}k{shape_k} products over {report.num_warps} warps"))
    print(count_check(sum(line.startswith("max.f32") for line in ptx), SM80_TILE["BLOCK_M"] * SM80_TILE["BLOCK_N"] // (32 * report.num_warps),
                      "max.f32 (the relu), one per element of C a thread holds"))
    print(f"cp.async copies, global to shared memory: {sum(line.startswith('cp.async.') and 'shared.global' in line for line in ptx)}")
    loop = max(index for index in range(mma_lines[0]) if re.match(r"\$L\w+:", ptx[index]))  # the label of the K loop
    shown = [line for line in ptx[loop:mma_lines[1] + 1] if line.startswith(("$L", "cp.async", "bar.", "ldmatrix", "mma."))]
    print(f"\nthe K loop up to its second mma (PTX lines {loop}-{mma_lines[1]} of {len(ptx)}, compiled for {report.arch}; "
          "only its labels, cp.async, bar, ldmatrix and mma lines):")
    print("\n".join("    " + " ".join(line.split()) for line in shown))

    tile_bytes = (SM80_TILE["BLOCK_M"] * SM80_TILE["BLOCK_K"] + SM80_TILE["BLOCK_K"] * SM80_TILE["BLOCK_N"]) * half.element_size()
    print(f"\nthe same kernel compiled three ways for an A100 (sm_80); programs per SM modelled for an A100:")
    print("  warps  stages  mma/warp  registers/thread  shared memory/program  programs per SM (limited by)")
    fits = {}
    for (warps, stages), compiled in sm80.items():
        fits[warps, stages] = sim.occupancy("A100", 32 * warps, compiled.registers, compiled.shared_bytes)
        mma_count = sum(line.strip().startswith("mma.") for line in compiled.ptx.splitlines())
        print(f"  {warps:5d}  {stages:6d}  {mma_count:8d}  {compiled.registers:16d}  {compiled.shared_bytes / 1024:17.0f} KiB"
              f"  {fits[warps, stages].blocks_per_sm:15d} ({fits[warps, stages].limiter.replace('_', ' ')})")
        for warning in compiled.warnings():
            print(f"    {warning}")
    print(count_check(sm80[4, 4].shared_bytes - sm80[4, 3].shared_bytes, tile_bytes,
                      "bytes of shared memory a fourth stage added, against one A tile and one B tile, (BLOCK_M·BLOCK_K + BLOCK_K·BLOCK_N)·2"))

# %% [markdown]
# **`@triton.autotune`.**
# Which block sizes, warps and stages are fastest depends on the shape and the GPU, so Triton searches them at run time: `@triton.autotune(configs=[triton.Config({...}, num_warps=..., num_stages=...), ...], key=["M", "N", "K"])` on a kernel runs every config the first time it meets a new value of the `key` arguments, keeps the fastest, and launches that one for every later call with the same key, without timing again (Triton's documentation of `triton.autotune`, and its docstring in `triton/runtime/autotuner.py`; Triton's matmul tutorial tunes its kernel this way).
# Its timer is `triton.testing.do_bench` on a GPU; here, in the interpreter, it is given a CPU timer instead (`do_bench=`), so the search runs for real but its times say which config the *interpreter* ran fastest, nothing about a GPU; `num_warps` and `num_stages` do nothing in the interpreter.
# What to look for: which calls time the configs, and which reuse the cached choice.

# %%
if triton:
    def interpreter_bench(kernel_call, quantiles):
        """Triton's do_bench contract (ms at each quantile), timing one call on the CPU: the interpreter's time (it compiles nothing)."""
        start = time.perf_counter()
        kernel_call()
        return [(time.perf_counter() - start) * 1e3] * len(quantiles)

    CONFIGS = [triton.Config(dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2), num_warps=4, num_stages=3),
               triton.Config(dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=2), num_warps=4, num_stages=4),
               triton.Config(dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1), num_warps=8, num_stages=3)]
    matmul_autotuned = triton.autotune(CONFIGS, key=["M", "N", "K"], do_bench=None if GPU else interpreter_bench)(matmul_tiles_kernel)

    def tuned_mm_relu(a, b):
        """relu(a @ b) by the autotuned kernel; M, N, K multiples of 32 (every config's blocks)."""
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype, device=a.device)
        grid = lambda meta: ((M // meta["BLOCK_M"]) * (N // meta["BLOCK_N"]),)  # noqa: E731 - the grid depends on the config
        matmul_autotuned[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), RELU=True)
        return c

    for m, k, n in [(64, 32, 64), (64, 32, 64), (32, 64, 96)]:
        a_t, b_t = torch.randn(m, k, device=gpucourse.device()), torch.randn(k, n, device=gpucourse.device())
        timed_before = len(matmul_autotuned.cache)
        torch.testing.assert_close(tuned_mm_relu(a_t, b_t), torch.relu(a_t @ b_t), rtol=tolerance, atol=tolerance * k**0.5)
        chosen = matmul_autotuned.best_config
        if len(matmul_autotuned.cache) > timed_before:
            timings = ", ".join(f"{config.kwargs['BLOCK_M']}x{config.kwargs['BLOCK_N']}x{config.kwargs['BLOCK_K']} "
                                f"{times[0]:.1f} ms" for config, times in matmul_autotuned.configs_timings.items())
            print(f"({m}, {k}) @ ({k}, {n}): a new key, every config timed ({timings}; {where}); kept {chosen.kwargs}, "
                  f"{chosen.num_warps} warps, {chosen.num_stages} stages")
        else:
            print(f"({m}, {k}) @ ({k}, {n}): a key seen before, no timing: launched the cached {chosen.kwargs}")
    print(f"the autotuner's cache, {len(matmul_autotuned.cache)} keys (M, N, K, then the dtypes), each with its config: "
          + "; ".join(f"{key[:3]} -> {config.kwargs['BLOCK_M']}x{config.kwargs['BLOCK_N']}x{config.kwargs['BLOCK_K']}"
                      for key, config in matmul_autotuned.cache.items()))


# %%
def program_tile(pid, tiles_m, tiles_n, group_m):
    """The (row, column) of C's tile that program `pid` computes: the kernel's index arithmetic, in Python."""
    first_m = (pid // (group_m * tiles_n)) * group_m
    group_rows = min(tiles_m - first_m, group_m)
    return first_m + pid % group_rows, (pid % (group_m * tiles_n)) // group_rows


def order_grid(tiles_m, tiles_n, group_m):
    """(tiles_m, tiles_n) array of the program id that computes each tile."""
    grid = np.empty((tiles_m, tiles_n), dtype=int)
    for pid in range(tiles_m * tiles_n):
        grid[program_tile(pid, tiles_m, tiles_n, group_m)] = pid
    return grid


def tiles_loaded(wave, tiles_m, tiles_n, group_m):
    """How many distinct tile rows of A and tile columns of B the first `wave` programs need."""
    tiles = [program_tile(pid, tiles_m, tiles_n, group_m) for pid in range(wave)]
    return len({row for row, _ in tiles}) + len({col for _, col in tiles})


print("program id of each tile of C, 6 x 8 tiles; row-major (GROUP_M = 1) and grouped (GROUP_M = 3):")
for plain_row, grouped_row in zip(order_grid(6, 8, 1), order_grid(6, 8, 3)):
    print(" ".join(f"{pid:2d}" for pid in plain_row), "   |   ", " ".join(f"{pid:2d}" for pid in grouped_row))
H100 = gpu_specs.gpu("H100")
TILES = 4096 // 128  # a 4096² product in 128 x 128 tiles, one program per SM in the first wave
for group_m in (1, 8):
    print(f"GROUP_M = {group_m}: the first {H100.sms} programs of a 4096² matmul in 128² tiles need "
          f"{tiles_loaded(H100.sms, TILES, TILES, group_m)} tile rows of A and columns of B at once (modelled for an H100's {H100.sms} SMs)")

# %% [markdown]
# **Tile and wave quantization.**
# A GPU runs a matmul as whole tiles, and the tiles run in *waves* (NVIDIA, "Matrix Multiplication Background User's Guide", Deep Learning Performance documentation, chapter "Dimension Quantization Effects"):
#
# - **tile quantization**: when M or N is not a multiple of the tile, the last row or column of tiles is partly empty but costs a whole tile, so the useful fraction is M·N / (ceil(M/BM)·BM · ceil(N/BN)·BN);
# - **wave quantization**: the tiles are spread over the SMs, each holding a few programs at once; ceil(M/BM)·ceil(N/BN) tiles over SMs × (programs per SM) slots make that many waves, and a last wave that is partly empty costs as long as a full one, so the useful fraction is tiles / (ceil(tiles / slots) · slots).
#
# The cell models both for an A100 (its SM count from `gpu_specs`) and the 128 × 128 kernel compiled above, with the programs per SM modelled from its compiled registers and shared memory.

# %%
A100 = gpu_specs.gpu("A100")
per_sm = fits[4, 3].blocks_per_sm if triton and sm80 else 1  # without a compiled kernel: one program per SM, the guide's own example
SLOTS = A100.sms * per_sm


def quantization(m, n, block_m=128, block_n=128, slots=SLOTS):
    """(tiles, waves, useful fraction of the tiles, useful fraction of the waves) of an m x n output in block_m x block_n tiles."""
    tiles = -(-m // block_m) * -(-n // block_n)
    return tiles, tiles / slots, m * n / (tiles * block_m * block_n), tiles / (-(-tiles // slots) * slots)


print(f"modelled for an A100: {A100.sms} SMs x {per_sm} programs of 128 x 128 per SM = {SLOTS} program slots")
print("      n   tiles   waves  tiles used  waves used  both")
for n in (512, 1024, 2048, 4096, 4100):
    tiles, waves, tile_use, wave_use = quantization(n, n)
    print(f"  {n:5d}  {tiles:6d}  {waves:6.2f}  {tile_use:10.0%}  {wave_use:10.0%}  {tile_use * wave_use:4.0%}")
waves_4096, waves_4100 = (-(-quantization(n, n)[0] // SLOTS) for n in (4096, 4100))
print(f"n = 4100 does {(4100 / 4096) ** 3:.3f}× the FLOPs of n = 4096 in {waves_4100} waves instead of {waves_4096}: "
      f"{waves_4100 / waves_4096:.2f}× its time, if each wave takes as long (modelled for an A100)")

sides = np.arange(256, 8192 + 1, 32)
fig, ax = plt.subplots(figsize=(9.4, 3.6))
ax.plot(sides, [quantization(n, n)[3] for n in sides], "--", color="C2", label="waves used (modelled)")
ax.plot(sides, [quantization(n, n)[2] * quantization(n, n)[3] for n in sides], "--", color="C3", label="tiles and waves used (modelled)")
ax.set_xlabel("square matrix side n")
ax.set_ylabel("useful fraction of the GPU's time")
ax.set_ylim(0, 1.05)
ax.grid(True, alpha=0.3)
ax.set_title(f"Tile and wave quantization of an n x n matmul in 128 x 128 tiles, modelled for an A100 ({SLOTS} program slots)", fontsize=9)
ax.legend(fontsize=plots.MIN_LABEL_POINTS, loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown]
# What to look for: small products fill a fraction of the GPU whatever the kernel (a 512² product has too few tiles for one wave), and each time n crosses a multiple of the tile, or the tile count crosses a multiple of the slots, the useful fraction drops.
# cuBLAS chooses among several tile shapes per problem size, which softens this (the same guide, "Typical Tile Dimensions in cuBLAS and Performance"); a Triton kernel can do the same with `@triton.autotune` over block sizes.
#
# On a GPU, the cell below times the tiled kernel against cuBLAS.

# %%
# On a GPU: the tiled kernel against torch.matmul (cuBLAS) in float16, at growing sizes.
if gpucourse.gpu_or_explain("the tiled Triton kernel (128 x 128 x 32 blocks, grouped by 8) and cuBLAS timed in float16 at n = 512 to 4096, "
                            "in TFLOP/s side by side: compare the gap at small n with the wave model above") and triton:
    gpu_sizes, triton_tflops, cublas_tflops = [512, 1024, 2048, 4096], [], []
    for n in gpu_sizes:
        a_h, b_h = torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda", dtype=torch.float16)

        def tiled(a, b):
            return matmul_tiles(a, b, block_m=128, block_n=128, block_k=32, group_m=8)

        torch.testing.assert_close(tiled(a_h, b_h).float(), torch.matmul(a_h, b_h).float(), rtol=1e-2, atol=0.25)
        triton_tflops.append(2 * n**3 / timing.measure(tiled, a_h, b_h).median / 1e12)
        cublas_tflops.append(2 * n**3 / timing.measure(torch.matmul, a_h, b_h).median / 1e12)
        print(f"n = {n}: Triton {triton_tflops[-1]:.1f}, cuBLAS {cublas_tflops[-1]:.1f} TFLOP/s (measured on {gpucourse.describe()}); "
              + versus("the tiled kernel", triton_tflops[-1], "cuBLAS", cublas_tflops[-1]))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    plots.versus_size(ax, gpu_sizes, triton_tflops, label="Triton, tiled and grouped", ylabel="TFLOP/s", xlabel="matrix side n (float16)")
    plots.versus_size(ax, gpu_sizes, cublas_tflops, label="torch.matmul (cuBLAS)")
    ax.set_title(f"float16 matmul, measured on {gpucourse.describe()}", fontsize=10)
    ax.legend(fontsize=plots.MIN_LABEL_POINTS)
    plt.show()

# %% [markdown]
# ## 7. Every version, side by side
#
# All on the wide product (128, 1024) @ (1024, 4096) in float32.
# The numbers measured in earlier cells are reused; the libraries, NumPy's BLAS and `torch.matmul`, are timed here on one thread, and `ijk` once, on the first 32 of A's 128 rows: one call of the whole product takes seconds, and every row of C costs `ijk` the same walk down all of B's columns (`jki`, slower still in section 2, is left out).

# %%
wide_rates["ijk, first 32 rows"] = gflops(matmul_ijk, a_wide[:32], b_wide, flops=WIDE_FLOPS * 32 // WIDE[0], repeats=1, warmup=False)
wide_rates[BLAS_LABEL] = gflops(np.dot, a_wide, b_wide, flops=WIDE_FLOPS)
wide_rates["torch.matmul, one thread"] = gflops(torch.matmul, torch.from_numpy(a_wide), torch.from_numpy(b_wide), flops=WIDE_FLOPS)
ORDER = ["ijk, first 32 rows", "ikj", "cache panel (best tile)", "panel + 4 rows (tuned)", "tensorized, strided views", "tensorized, packed tiles",
         BLAS_LABEL, "torch.matmul, one thread"]
for name in ORDER:
    print(f"{name:>28}: {wide_rates[name]:6.2f} GFLOP/s, {wide_rates[name] / wide_rates['ikj']:5.2f}× ikj")
own = max(ORDER[:6], key=wide_rates.get)
print(versus(BLAS_LABEL, wide_rates[BLAS_LABEL], f"this lecture's fastest loop nest ('{own}')", wide_rates[own]))
fig, ax = plt.subplots(figsize=(9.4, 4.4))
plots.provenance_bars(ax, [(name, wide_rates[name], "measured") for name in ORDER], xlabel="GFLOP/s (log scale)", fmt="{:.1f}", log=True)
ax.set_title(f"(128, 1024) @ (1024, 4096), float32, {MEASURED}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What to remember
#
# What a CPU teaches, measured in this notebook (the printed lines say by how much, on this machine):
#
# - The loop nest is the program a compiler optimises, and the same arithmetic in another order can run at very different speeds: the innermost loop should walk memory with unit stride, so that every cache line (64 bytes on x86, 128 on Apple's M-series) is used in full and the loop becomes vector instructions (`ikj` against `ijk` and `jki`).
# - Blocking keeps a tile of data in cache while it is reused; the cache model says the traffic falls as 1/T until three tiles no longer fit.
#   What it gains depends on where the data lived before (the wide product against the square one), and it pays in full only together with **register blocking**: several rows of C per pass, so that each value loaded does several multiply-adds.
# - A tensor intrinsic takes fixed tiles: the loop nest must be tiled to its shape, the inputs padded to whole tiles (ceil(m/16) · ceil(n/16) · ceil(k/16) calls), and the operands **packed** in tile-major order, or the intrinsic waits on strided loads.
# - Split, reorder, tile, unroll, vectorize, pack and tensorize are rewrites that keep the result; which ones, with which sizes, is a search, done by measuring.
#
# What a GPU adds, compiled and modelled here:
#
# - Tensor cores are the intrinsic in hardware, several times the FP32 rate of the same card (the ratios printed in section 4, from `gpu_specs`); `tl.dot` compiles to their `mma` instructions, whose shape and count per warp section 6 reads in the PTX compiled for an A100.
#   The tiled, tensorized loop nest is the only form they accept, so every fast GPU matmul (cuBLAS, Triton's `tl.dot`, Inductor's templates under `max-autotune`) is written in it.
# - Shared memory is a cache the kernel manages itself: Triton stages the tiles of A and B there with `cp.async`, the explicit version of the packed tiles above, in a software pipeline `num_stages` deep; `num_warps` splits each tile among more threads; both cost registers or shared memory, and so programs per SM.
# - An elementwise epilogue (the seed's relu) fuses into the kernel: applied to the tile in registers before its one store, an instruction per element and no memory traffic of its own.
# - Thousands of programs run at once, so their order matters too (grouped ordering keeps the tiles a wave shares in L2), and so does their count: tile and wave quantization can waste whole tiles and whole waves at the edges.
# - `@triton.autotune` times the configurations you list once per new shape and caches the winner; Inductor uses cuBLAS unless asked for `max-autotune`.
#
# Next: the graded assignment `assignments/07_ml_compilation/07_ml_compilation.ipynb`, where you count a tiled matmul's traffic, and write a reordered, a blocked and a tensorized matmul of your own, and a masked Triton kernel.
