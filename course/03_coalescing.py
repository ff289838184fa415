# %% [markdown]
# # 03 · Memory coalescing: sectors, strides, tiles and layouts
#
# Lecture 02 showed that global memory is far away: hundreds of cycles per access, and the bottleneck of most kernels.
# This lecture is about the other half of the story: *how much* of what global memory delivers a kernel actually uses.
# A warp does not fetch 32 separate numbers; it fetches whole blocks of memory, and the addresses its 32 threads ask for together decide how many.
#
# What you will learn:
#
# 1. how one warp's load becomes 32-byte sectors and 128-byte lines, and what "coalesced" means in those terms;
# 2. what strides and misaligned offsets cost, traced kernel by kernel, and (on a GPU) measured in GB/s;
# 3. the same effect on your CPU, measured: 64-byte cache lines and strided reads in numpy;
# 4. matrix transpose, from a naive kernel to a shared-memory tiled one, and padding that removes shared-memory bank conflicts;
# 5. array-of-structures against structure-of-arrays layouts: traced on a GPU, then measured on your CPU, where numpy's loop overhead and the layout's own effect on memory are told apart;
# 6. an interactive explorer of warp requests.
#
# Every cell runs on a laptop CPU as well as on a GPU.
# Without a GPU the kernels run in numba's simulator, and the course's **tracer** records every address each simulated warp touched: sector counts and bank conflicts are then *modelled* from a real run of the kernel, while speed is *measured* only where there is hardware to measure it (your CPU in section 3, a GPU when you have one).

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import gpucourse
from gpucourse import gpu_specs, plots, sim, timing, widgets

# %% [markdown]
# ## 1. From a warp's load to sectors and lines
#
# When a warp executes a load, the 32 lanes' addresses travel to the memory system together, as one **request**.
# Global memory never delivers single bytes: it moves aligned 32-byte **sectors**, and the L1 and L2 caches keep them in 128-byte **lines** of four sectors.
# NVIDIA's CUDA C++ Best Practices Guide states the rule for compute capability 6.0 and later (reported): a warp's accesses coalesce into as many 32-byte transactions as it takes to cover all the addresses its threads ask for.
# So the cost of a request is the number of distinct sectors its addresses fall in, and its **efficiency** is the bytes the lanes asked for divided by the bytes moved.
#
# Three warps of 4-byte `float32` loads show the whole range:
#
# - **coalesced**: lane k reads element k; 32 × 4 = 128 consecutive bytes, aligned: 4 sectors, one line, every byte used;
# - **offset**: lane k reads element k + 3; the same 128 bytes shifted by 12, so they straddle a boundary: 5 sectors over 2 lines;
# - **strided**: lane k reads element 4k; each lane's 4 bytes sit alone in a 16-byte slot, so the warp touches 16 sectors and uses a quarter of their bytes.
#
# The figure draws each lane's bytes (dark) in the sectors they fall in (shaded); sectors nobody touches are left out.

# %%
warps = {"coalesced (stride 1)": sim.warp_addresses(stride=1),
         "offset by 3 elements": sim.warp_addresses(offset=3),
         "strided (stride 4)": sim.warp_addresses(stride=4)}
fig, axes = plt.subplots(len(warps), 1, figsize=(9.4, 5.6))
for ax, (name, addresses) in zip(axes, warps.items()):
    plots.warp_sectors(ax, addresses)
    ax.set_title(f"{name}: {ax.get_title()}", fontsize=9)
fig.tight_layout()
plt.show()
for name, addresses in warps.items():
    lines = sim.lines_per_request(addresses)
    print(f"{name:<22} {sim.sectors_per_request(addresses):2d} sectors of 32 B in {lines} line{'s' * (lines > 1)} of 128 B, "
          f"{sim.load_efficiency(addresses):4.0%} of moved bytes used (modelled with sim.memory)")

# %% [markdown]
# The rule is simple enough to state for any stride: with 4-byte elements, a stride of s elements spreads the warp over 4s sectors, until s = 8, where every lane has a sector to itself (32 sectors, 12.5% efficiency).
# Larger strides cannot get worse per request; they only spread the same 32 sectors further apart.
# An offset that is a multiple of 8 elements (32 bytes) keeps the request on sector boundaries; any other offset costs one extra sector.
#
# ## 2. Strides and offsets, traced in real kernels
#
# The figure above came from a formula.
# The same numbers can be read off real kernels: in numba's simulator, `sim.trace()` records every element each simulated thread reads or writes, groups the lanes of each warp at each instruction into one request, and counts its sectors.
# As in lecture 02, `gpucourse.kernels` chooses the GPU or the simulator before numba is imported.

# %%
from gpucourse import kernels

mode = kernels.use_gpu_or_simulator()

# %%
from numba import cuda, float32

SIM = kernels.simulator_active()  # in the simulator the timing cells below explain instead of measuring
where = "numba's CUDA simulator" if SIM else gpucourse.describe()
# On a GPU numba warns about tiny demo grids: speed is not the point of those launches.
warnings.filterwarnings("ignore", message=".*Grid size .* will likely result in GPU under-utilization")
# ... and about host (numpy) arguments, copied to the GPU and back at every launch (lecture 02, section 4.1): shown once,
# as the reason why the timed runs below pass device arrays (`cuda.to_device`) instead.
warnings.filterwarnings("once", message=".*Host array used in CUDA kernel will incur copy overhead")
print("kernels run in:", where)


def show(trace):
    """Print what a trace saw, or why there is nothing (only the simulator can be traced)."""
    if trace.available:
        print(trace.report())
    else:
        print("[no trace: these kernels ran on the GPU, and only numba's simulator can be traced from Python; "
              "numbers marked 'formula' below come from sim.memory for the same addresses]")

# %% [markdown]
# Two copy kernels, one thread per output element.
# `copy_strided` reads every `stride`-th element of `x`; `copy_offset` reads `x` shifted by `offset` elements.
# Both write `out[i]`, one consecutive element per lane, so their stores are always coalesced and only the loads change.
# We trace one launch of 256 threads (8 warps) with a stride of 4 and print the trace's report: one row per source line and kind of access.

# %%
@cuda.jit
def copy_strided(x, out, stride):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i * stride]


@cuda.jit
def copy_offset(x, out, offset):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i + offset]


n = 256  # 8 warps: the model counts per warp request, so a few warps show everything
blocks, threads = kernels.launch_grid(n, threads_per_block=128)
x = np.arange(n * 4, dtype=np.float32)
out = np.zeros(n, dtype=np.float32)
with sim.trace() as t:
    copy_strided[blocks, threads](x, out, 4)
np.testing.assert_array_equal(out, x[::4])
show(t)

# %% [markdown]
# The load row says 16 sectors per request at 25% efficiency, as the formula did for stride 4; the store row says 4 sectors, 100%.
# (Every array the tracer sees starts on a 256-byte boundary, as `cudaMalloc` returns it.)
#
# Now the sweep: strides 1 to 32 and offsets 0 to 32, each kernel launched, checked against numpy and traced.
# Each traced count is also checked against the formula of section 1.
# The last two columns turn the efficiency into a bound: a kernel that reads this way can get at most that share of the card's reported memory bandwidth as useful data (modelled for the T4 and the H100).

# %%
STRIDES = (1, 2, 4, 8, 16, 32)
OFFSETS = range(33)
source = "traced in the simulator" if SIM else "formula (sim.memory)"


def traced_copy(kernel, x, shift, expected):
    """Launch a copy kernel under the tracer, check its output; (sectors per load, load efficiency)."""
    out = np.zeros(n, dtype=np.float32)
    with sim.trace() as t:
        kernel[blocks, threads](x, out, shift)
    np.testing.assert_array_equal(out, expected)
    return (t.sectors_per_request(kind="load"), t.efficiency(kind="load")) if t.available else None


def formula(addresses):
    return sim.sectors_per_request(addresses), sim.load_efficiency(addresses)


stride_model, offset_model = [], []
for stride in STRIDES:
    x = np.arange(n * stride, dtype=np.float32)
    traced = traced_copy(copy_strided, x, stride, x[::stride])
    stride_model.append(traced or formula(sim.warp_addresses(stride=stride)))
    assert traced is None or np.allclose(traced, formula(sim.warp_addresses(stride=stride)))
x = np.arange(n + max(OFFSETS), dtype=np.float32)
for offset in OFFSETS:
    traced = traced_copy(copy_offset, x, offset, x[offset:offset + n])
    offset_model.append(traced or formula(sim.warp_addresses(offset=offset)))
    assert traced is None or np.allclose(traced, formula(sim.warp_addresses(offset=offset)))

t4, h100 = gpu_specs.gpu("T4"), gpu_specs.gpu("H100")
print(f"{'stride':>6} {'sectors/load':>12} {'efficiency':>10} {'T4 useful GB/s':>15} {'H100 useful GB/s':>17}")
for stride, (sectors, efficiency) in zip(STRIDES, stride_model):
    print(f"{stride:6d} {sectors:12.0f} {efficiency:10.1%} {efficiency * t4.memory_bandwidth / 1e9:15.0f} "
          f"{efficiency * h100.memory_bandwidth / 1e9:17.0f}")
misaligned = sorted({int(sectors) for offset, (sectors, _) in zip(OFFSETS, offset_model) if offset % 8})
print(f"offsets: 4 sectors per load at offsets 0, 8, 16, 24, 32; {', '.join(map(str, misaligned))} at every other offset")
print(f"sectors and efficiency: {source}; GB/s: modelled from the reported bandwidths "
      f"({t4.memory_bandwidth / 1e9:.0f} and {h100.memory_bandwidth / 1e9:.0f} GB/s)")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
plots.versus_size(left, STRIDES, [e * 100 for _, e in stride_model], label=source, kind="modelled",
                  xlabel="stride (elements of 4 B)", ylabel="load efficiency (%)")
left.set_xticks(STRIDES, [str(s) for s in STRIDES])  # integer labels: strides are counts
left.set_ylim(0, 105)
left.set_title("Strided copy: useful share of the moved bytes", fontsize=10)
left.legend(fontsize=8)
right.plot(list(OFFSETS), [e * 100 for _, e in offset_model], "--", marker=".", label=f"{source} (modelled)")
right.set(xlabel="offset (elements of 4 B)", ylabel="load efficiency (%)", ylim=(0, 105))
right.set_title("Offset copy: misalignment costs one sector in five", fontsize=10)
right.grid(True, alpha=0.3)
right.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Strides are expensive: stride 2 already halves the useful bandwidth, and from stride 8 on, seven eighths of every sector moved is wasted.
# Offsets look cheap in the model (80% at worst), and on real GPUs they are cheaper still, because the model counts each request on its own, as if there were no cache.
# The extra sector a misaligned warp fetches is the first sector of its neighbour's data, which the neighbouring warp needs anyway: an L2 (or L1) hit away.
# Over the whole kernel, a misaligned copy touches just one sector more than an aligned one:

# %%
for offset in (0, 1, 3, 8):
    every_lane = sim.warp_addresses(offset=offset, active_lanes=range(n))  # all n threads' addresses at once
    print(f"offset {offset}: the kernel's {n // 32} warps touch {len(sim.touched_units(every_lane))} distinct sectors "
          f"(modelled: {n * 4 // 32} hold the {n * 4} useful bytes)")
stride_total = len(sim.touched_units(sim.warp_addresses(stride=4, active_lanes=range(n))))
print(f"stride 4: {stride_total} distinct sectors for the same {n * 4} useful bytes: no cache can save those")

# %% [markdown]
# ### On a GPU: the same kernels, timed
#
# With a GPU, the cell below times both copies on 2²⁵ elements (128 MiB written per launch) with `gpucourse.timing.measure`: warm-up first, then many launches queued back to back and one `cuda.synchronize()` per batch, so that launch overhead hides behind the GPU's work.
# Inputs live on the GPU (`cuda.device_array`), so no copy over PCIe is timed.
# Useful bandwidth counts what the kernel needs, 4 bytes read and 4 written per element, whatever the hardware moved to get them.
# Mark Harris's NVIDIA blog post "How to Access Global Memory Efficiently in CUDA C/C++ Kernels" ran the same experiment (reported): bandwidth falls steeply with the stride, while offsets cost little on GPUs with caches.

# %%
def seconds_per_launch(kernel, grid, block, *args, launches=20):
    """Median seconds of one launch on the GPU (measured): batches of launches, one synchronisation each."""
    def batch():
        for _ in range(launches):
            kernel[grid, block](*args)
        cuda.synchronize()

    return timing.measure(batch, warmup=1, min_run_time=0.1).median / launches


@cuda.jit
def fill_pattern(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = i % 4096  # small integers: exact in float32, so copies can be checked exactly


if SIM:
    print("[skipped: the kernels run in numba's simulator, which says nothing about speed] On a GPU this cell times "
          "both copies and plots GB/s against stride and offset: useful bandwidth falls with the stride much as the "
          "traced efficiency predicts, while offsets cost little.")
else:
    n_timed = 2**25
    x_dev = cuda.device_array(n_timed * max(STRIDES) + max(OFFSETS), dtype=np.float32)  # one buffer serves every run
    fill_pattern[kernels.launch_grid(x_dev.size, 256)](x_dev)
    out_dev = cuda.device_array(n_timed, dtype=np.float32)
    grid, block = kernels.launch_grid(n_timed, 256)
    sample = np.random.default_rng(0).integers(0, n_timed, 100_000)  # output positions checked after each run

    def timed_gbps(kernel, shift, first, step):
        seconds = seconds_per_launch(kernel, grid, block, x_dev, out_dev, shift)
        expected = (first + sample * step) % 4096
        np.testing.assert_array_equal(out_dev.copy_to_host()[sample], expected.astype(np.float32))
        return 2 * 4 * n_timed / seconds / 1e9

    gbps_stride = [timed_gbps(copy_strided, stride, 0, stride) for stride in STRIDES]
    gbps_offset = [timed_gbps(copy_offset, offset, offset, 1) for offset in OFFSETS]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    plots.versus_size(left, STRIDES, gbps_stride, label=gpucourse.describe(), kind="measured",
                      xlabel="stride (elements of 4 B)", ylabel="useful GB/s")
    # Reads cost 1/efficiency of the useful bytes, writes stay coalesced: time ∝ 1/e + 1.
    predicted = [gbps_stride[0] * 2 / (1 / e + 1) for _, e in stride_model]
    plots.versus_size(left, STRIDES, predicted, label="stride 1 scaled by the traced efficiency", kind="modelled")
    left.set_xticks(STRIDES, [str(s) for s in STRIDES])
    left.legend(fontsize=7)
    right.plot(list(OFFSETS), gbps_offset, "-o", markersize=3, label=f"{gpucourse.describe()} (measured)")
    right.set(xlabel="offset (elements of 4 B)", ylabel="useful GB/s", ylim=(0, max(gbps_offset) * 1.1))
    right.grid(True, alpha=0.3)
    right.legend(fontsize=7)
    fig.suptitle(f"Strided and offset copies of {n_timed:,} float32, measured on {gpucourse.describe()}", fontsize=10)
    fig.tight_layout()
    plt.show()
    print(f"stride 1: {gbps_stride[0]:.0f} GB/s, stride 32: {gbps_stride[-1]:.0f} GB/s; offsets: "
          f"{min(gbps_offset):.0f} to {max(gbps_offset):.0f} GB/s (measured on {gpucourse.describe()})")

# %% [markdown]
# ## 3. The CPU analogue, measured: 64-byte cache lines
#
# A CPU core reads memory in **cache lines**, 64 bytes on x86 and most Arm cores (128 bytes on Apple's M-series chips, reported by Apple).
# A line is to a CPU what a sector is to a GPU: the smallest amount it moves.
# So reading every `stride`-th `float32` of an array costs one line per 16 elements at stride 1, but one line per element from stride 16 on: until `stride × itemsize` reaches the line size, the core fetches every line of the array whatever it does with them.
#
# We measure it: `x[::stride].sum()` over the same 256 MiB array (larger than the last-level cache of most machines) for strides 1 to 128.
# numpy's sum of a strided view runs on one core, and the answer is checked each time.
# The sweep runs three times and keeps, for each stride, the fastest of its three median times: the one least disturbed by other work on the machine.

# %%
line_bytes = gpucourse.devices.cache_line_bytes()
line_label = "reported by the operating system" if line_bytes else "assumed"
line_bytes = line_bytes or 64
CPU_STRIDES = (1, 2, 4, 8, 16, 32, 64, 128)
x = np.ones(2**26, dtype=np.float32)  # 256 MiB
rounds = {stride: [] for stride in CPU_STRIDES}
for _ in range(3):  # whole sweeps, repeated: a burst of other work on the machine spoils one round, not one stride
    for stride in CPU_STRIDES:
        view = x[::stride]
        assert view.sum() == view.size  # ones: the exact answer is the count
        rounds[stride].append(timing.measure(np.sum, view, warmup=1, min_run_time=0.05).median)
cpu_seconds = [min(rounds[stride]) for stride in CPU_STRIDES]  # the least disturbed round
cpu_where = f"{gpucourse.describe('cpu')}; numpy sums on one core"
useful_gbps = [x[::s].nbytes / sec / 1e9 for s, sec in zip(CPU_STRIDES, cpu_seconds)]
print(f"cache line: {line_bytes} B ({line_label})")
print(f"{'stride':>6} {'stride × 4 B':>12} {'ms per pass':>12} {'ns per element':>15} {'useful GB/s':>12}")
for stride, sec, gbps in zip(CPU_STRIDES, cpu_seconds, useful_gbps):
    print(f"{stride:6d} {stride * 4:10d} B {sec * 1e3:12.1f} {sec / x[::stride].size * 1e9:15.2f} {gbps:12.2f}")
print(f"(measured on {cpu_where})")

# %%
lines_model = [useful_gbps[0] * 4 / min(s * 4, line_bytes) for s in CPU_STRIDES]  # bytes used per byte of line moved
fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 4.2))
plots.versus_size(left, CPU_STRIDES, [s * 1e3 for s in cpu_seconds], label="x[::stride].sum() over 256 MiB", kind="measured",
                  xlabel="stride (elements of 4 B)", ylabel="ms per pass")
plots.versus_size(left, CPU_STRIDES, [cpu_seconds[0] * 1e3 / s for s in CPU_STRIDES],
                  label="if only the used bytes moved", kind="modelled")
left.set_ylim(0, max(cpu_seconds) * 1.2e3)
left.axvline(line_bytes / 4, color="0.5", linestyle=":")
left.set_title(f"Time to sweep the array (dotted: stride × 4 B = {line_bytes} B)", fontsize=10)
left.legend(fontsize=8)
plots.versus_size(right, CPU_STRIDES, useful_gbps, label="useful bytes per second", kind="measured",
                  xlabel="stride (elements of 4 B)", ylabel="useful GB/s", logy=True)
plots.versus_size(right, CPU_STRIDES, lines_model, label=f"whole {line_bytes}-B lines, scaled to stride 1", kind="modelled")
right.set_title("Bandwidth of the bytes actually used", fontsize=10)
right.legend(fontsize=8)
for ax in (left, right):
    ax.set_xticks(CPU_STRIDES, [str(s) for s in CPU_STRIDES])
fig.suptitle(f"CPU analogue, measured on {cpu_where}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# Read the left panel first: up to a stride of 16 (64 bytes), a pass over the array costs about the same time whether it sums every element or every sixteenth.
# The core fetched every line either way; the time went into moving lines, not into adding numbers.
# So the useful bandwidth (right) falls in proportion to the stride, exactly as the GPU's sector efficiency does, with 64-byte lines in place of 32-byte sectors.
#
# Past the line size the simple model says the cost per element should stop growing, and it usually does not quite: CPUs prefetch, and many Intel cores fetch lines in aligned pairs (128 bytes), so beyond one line per element the hardware still moves more than you use.
# How far the measured curve stays below the model depends on the CPU; the lesson does not.
# The rule for both processors: **neighbouring work should touch neighbouring bytes**, consecutive lanes on a GPU, consecutive iterations on a CPU.
#
# ## 4. Matrix transpose: naive, tiled, padded
#
# Transposing a matrix reads rows and writes columns, so one of the two is always strided: the classic test of everything above.
# We transpose an R × C `float32` matrix `a` into `out` (C × R) with one thread per element, in square blocks of TILE × TILE threads.
# As in lecture 02, x runs along columns, so the 32 lanes of a warp have consecutive `threadIdx.x`.
# In a 2-D block the threads are numbered x first: thread (tx, ty) of a block `block_x` threads wide has the linear id tx + ty · block_x, and each warp is 32 consecutive ids (0-31, 32-63, ...).
# A block whose size is not a multiple of 32 ends with a partial warp, whose missing lanes sit idle.
#
# We use TILE = 32 on every machine (why, at the end of this section), so a block has 1024 threads and one warp is one row of the block.
# To keep the kernels short, each thread copies one element and the matrix's sides are multiples of the tile.
# NVIDIA's own version of these kernels (Mark Harris, "An Efficient Matrix Transpose in CUDA C/C++", NVIDIA Technical Blog, 2013) keeps the 32 × 32 tile but launches blocks of 32 × 8 threads, each thread copying 4 rows of the tile, and so does the graded assignment, for a matrix of any shape.
# More work per thread and fewer threads per block: each thread computes its indices once for 4 elements, has 4 independent loads in flight (the instruction-level parallelism of lecture 02), and a block of 256 threads leaves room for several blocks per SM, so one block waiting at its barrier does not leave the SM idle (on a T4, one 1024-thread block is all 32 warps an SM can hold).
# Warps stay rows of 32 threads either way, so the sector counts and bank conflicts below are the same.
#
# **Naive.** Each thread reads `a[row, col]` and writes `out[col, row]`.
# The reads of a warp are consecutive, but its writes land in 32 different rows of `out`, R × 4 bytes apart.

# %%
TILE = 32
block_2d = (TILE, TILE)  # one thread per element


@cuda.jit
def transpose_naive(a, out):
    col, row = cuda.grid(2)
    out[col, row] = a[row, col]


a = np.random.default_rng(0).standard_normal((32, 64), dtype=np.float32)  # small: 2 blocks of 1024 simulated threads
small = ((a.shape[1] // TILE, a.shape[0] // TILE), block_2d)  # grid: (column tiles, row tiles)
out = np.zeros((64, 32), dtype=np.float32)
with sim.trace() as naive:
    transpose_naive[small](a, out)
np.testing.assert_array_equal(out, a.T)
show(naive)

# %% [markdown]
# Loads: 4 sectors per request, perfect.
# Stores: 32 sectors per request, each carrying 4 useful bytes of 32, so 12.5% efficiency, the stride-8-or-more case of section 2.
#
# **Tiled.** Stage each 32 × 32 tile in shared memory, whose access pattern costs nothing in sectors.
# Each thread copies one element of a *row* of `a` into the tile; after `syncthreads()`, each thread reads the tile *column-wise* and writes a row of `out`.
# Both global accesses are now row-wise, hence coalesced.

# %%
@cuda.jit
def transpose_tiled(a, out):
    tile = cuda.shared.array((TILE, TILE), dtype=float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col0, row0 = cuda.blockIdx.x * TILE, cuda.blockIdx.y * TILE
    tile[ty, tx] = a[row0 + ty, col0 + tx]
    cuda.syncthreads()
    out[col0 + ty, row0 + tx] = tile[tx, ty]


out = np.zeros((64, 32), dtype=np.float32)
with sim.trace() as tiled:
    transpose_tiled[small](a, out)
np.testing.assert_array_equal(out, a.T)
show(tiled)

# %% [markdown]
# Global loads and stores: 4 sectors each, 100%.
# But the report shows a new cost, in the `conflicts` column of the shared load.
#
# **Bank conflicts.** Shared memory is split into 32 **banks**, each 4 bytes wide: word w lives in bank w mod 32, and each bank serves one word per cycle.
# A warp whose 32 lanes hit 32 different banks is served at once; lanes that need *different words of the same bank* are served one after another, and the request is replayed that many times (its **conflict degree**; lanes reading the very same word share it, a broadcast).
# Reading `tile[tx, ty]`, lane tx reads word 32·tx + ty: all 32 lanes in the same bank, a 32-way conflict.
# The fix is one extra column: with rows of TILE + 1 = 33 words, lane tx reads word 33·tx + ty, in bank (tx + ty) mod 32, all different.
# The padding column is never used; it costs 32 × 4 = 128 bytes of shared memory per block.

# %%
TILE_PADDED = TILE + 1  # a module constant: a GPU compiler needs a shared array's shape as constants, and `TILE + 1` inside the kernel is an expression


@cuda.jit
def transpose_padded(a, out):
    tile = cuda.shared.array((TILE, TILE_PADDED), dtype=float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col0, row0 = cuda.blockIdx.x * TILE, cuda.blockIdx.y * TILE
    tile[ty, tx] = a[row0 + ty, col0 + tx]
    cuda.syncthreads()
    out[col0 + ty, row0 + tx] = tile[tx, ty]


out = np.zeros((64, 32), dtype=np.float32)
with sim.trace() as padded:
    transpose_padded[small](a, out)
np.testing.assert_array_equal(out, a.T)
show(padded)

# %% [markdown]
# Side by side, per warp request, and the shared-memory load of warp 0 drawn bank by bank: each column is a bank, each row one more pass the request needs.
# The banks come from the same index formulas as the text above; in the simulator they are checked against the trace.

# %%
if naive.available:
    print(f"{'transpose':<8} {'sectors/load':>12} {'sectors/store':>13} {'worst shared conflict':>22}   ({source})")
    for name, t in (("naive", naive), ("tiled", tiled), ("padded", padded)):
        shared = t.requests(space="shared")
        worst = f"{t.bank_conflict_degree(worst=True):.0f}-way" if shared else "no shared memory"
        print(f"{name:<8} {t.sectors_per_request(kind='load'):12.0f} {t.sectors_per_request(kind='store'):13.0f} {worst:>22}")
fig, axes = plt.subplots(2, 1, figsize=(9.4, 5.4))  # stacked: 32 banks wide enough to number each
for ax, (name, t, width) in zip(axes, (("tiled", tiled, TILE), ("padded", padded, TILE + 1))):
    words = [lane * width for lane in range(32)]  # tile[tx, ty] for lane tx of warp 0 (ty = 0)
    if t.available:
        first = next(r for r in t.requests(space="shared", kind="load") if r.warp == 0)
        assert [address // 4 for address in first.addresses] == words, "trace and formula disagree"
    plots.bank_map(ax, words, title=f"{name}: tile row of {width} words, shared load of warp 0: "
                                    f"{sim.bank_conflict_degree(words)}-way (modelled)")
fig.tight_layout()
plt.show()

# %% [markdown]
# **Why TILE = 32.** Padding by one word works because a warp is exactly one row of the block: its 32 lanes read 32 consecutive rows of the tile.
# With a 16 × 16 block, a warp covers two rows of 16 threads, and the arithmetic changes.
# The model below counts, for warp 0, the conflict degree of the tile's store (`tile[ty, tx]`) and load (`tile[tx, ty]`) for both tile sizes, with and without the padding.

# %%
print(f"{'tile':>7} {'padding':>7} {'store':>6} {'load':>5}   (bank-conflict degree of warp 0, modelled with sim.bank_conflict_degree)")
for tile_size in (32, 16):
    lanes = [(lane % tile_size, lane // tile_size) for lane in range(32)]  # (tx, ty) of each lane of warp 0
    for pad in (0, 1):
        width = tile_size + pad
        store = sim.bank_conflict_degree(ty * width + tx for tx, ty in lanes)
        load = sim.bank_conflict_degree(tx * width + ty for tx, ty in lanes)
        print(f"{tile_size:3d}×{tile_size:<3d} {pad:7d} {store:6d} {load:5d}")

# %% [markdown]
# With 16-wide tiles the load's conflict drops only from 8-way to 2-way, and the store, conflict-free before, becomes 2-way: no single padding fixes both.
# (Libraries such as CUTLASS and Triton use *swizzled* layouts instead, where the column index is XOR-ed with bits of the row, which removes conflicts for such shapes too.)
# With TILE = 32 and a warp per tile row, one column of padding is the whole fix.
#
# ### What the compiler makes of the transposes
#
# The tracer followed every simulated thread; NVIDIA's compiler shows what a GPU would be given to execute.
# As in lecture 02, `kernels.compile_report` compiles a kernel with NVVM and `ptxas` for one architecture, here the T4's `sm_75`, in a separate process and with no GPU.
# It counts the load, store and barrier instructions in the kernel's PTX, NVIDIA's portable assembly.
# These are **static** counts: each instruction of the code once, however many threads run it and however many sectors it moves; they are not a trace.

# %%
matrix = float32[:, ::1]  # a contiguous float32 matrix: what a launch with numpy arrays compiles
compiled = {}  # kernel name -> CompileReport; stays empty without the compiler
try:
    for kernel in (transpose_naive, transpose_tiled, transpose_padded):
        compiled[kernel.__name__] = kernels.compile_report(kernel, (matrix, matrix), gpu="T4")
except kernels.CompilerMissing as missing:
    print(f"[no compiler here] {missing}")
if compiled:
    print(f"{'static count':<22}" + "".join(f"{name:>18}" for name in compiled))
    for count in ("global_loads", "global_stores", "shared_loads", "shared_stores", "barrier_instructions", "shared_bytes", "registers"):
        print(f"{count.replace('_', ' '):<22}" + "".join(f"{getattr(report, count):>18}" for report in compiled.values()))
    print("compiled for T4 (sm_75) by NVVM and ptxas: no GPU involved, nothing run or traced")

# %% [markdown]
# Each line of a kernel compiles to several PTX instructions; `report.ptx_for_line(line)` lists those of one source line.
# Most of them compute addresses (the `shr`/`and` pairs make negative indices wrap around, as Python's do), so the cell keeps only the loads, stores and barriers.

# %%
def memory_ptx(report, code):
    """The source line of the kernel that contains ``code``, and the loads, stores and barriers compiled from it."""
    line = next(origin for origin in report.source.origins if origin and code in origin.code)
    ptx = report.ptx_for_line(line.line)
    kept = [" ".join(op.split()) for op in ptx if op.split(".")[0] in ("ld", "st", "bar")]
    others = f"   (+{len(ptx) - len(kept)} other instructions, mostly addresses)" if len(ptx) > len(kept) else ""
    return f"{line.code.strip():<42} {' | '.join(kept)}{others}"


for name, lines in (("transpose_naive", ["out[col, row] = a[row, col]"]),
                    ("transpose_tiled", ["tile[ty, tx] = a[", "cuda.syncthreads()", "= tile[tx, ty]"])):
    if name in compiled:
        print(name)
        for code in lines:
            print("   ", memory_ptx(compiled[name], code))

# %% [markdown]
# Both kernels read global memory once and write it once per thread (`ld.global.f32`, `st.global.f32`): the compiler cannot see strides, because they depend on the index each thread computes at run time, which is what the tracer measured.
# What the tiled kernel adds is a detour through shared memory: `st.shared` of the row it read, `bar.sync 0` (the barrier `cuda.syncthreads()` compiles to), then `ld.shared` of a column, so the strided access now happens in shared memory instead of in global memory.
# Its 4096 bytes of shared memory per block are the 32 × 32 float32 tile; the padded kernel's 4224 bytes are the 32 × 33 tile, the same instructions otherwise.
#
# ### On a GPU: the transposes, timed
#
# With a GPU, the cell below times the three kernels on an 8192 × 4096 matrix and compares their useful bandwidth (one read and one write of every element) with the plain copy of section 2, the best a kernel that moves this many bytes can hope for.
# Mark Harris's NVIDIA blog post "An Efficient Matrix Transpose in CUDA C/C++" ran the same three kernels in CUDA C++ (reported): the naive one well below the copy, the tiled one much closer, the padded one closest.

# %%
if SIM:
    print("[skipped: the kernels run in numba's simulator, which says nothing about speed] On a GPU this cell times "
          "the naive, tiled and padded transposes of an 8192 × 4096 matrix against the copy kernel's GB/s; the blog "
          "post above reports the naive kernel far below the copy and the padded one closest to it.")
else:
    R, C = 8192, 4096
    a_host = np.random.default_rng(1).standard_normal((R, C), dtype=np.float32)
    a_dev, out_dev_2d = cuda.to_device(a_host), cuda.device_array((C, R), dtype=np.float32)
    bars = [("copy, stride 1 (section 2)", gbps_stride[0], "measured")]
    for kernel in (transpose_naive, transpose_tiled, transpose_padded):
        seconds = seconds_per_launch(kernel, (C // TILE, R // TILE), block_2d, a_dev, out_dev_2d)
        np.testing.assert_array_equal(out_dev_2d.copy_to_host(), a_host.T)
        bars.append((kernel.__name__.replace("_", " "), 2 * a_host.nbytes / seconds / 1e9, "measured"))
    bars += [(f"{name} peak", spec.memory_bandwidth / 1e9, "reported")
             for name, spec in gpu_specs.GPUS.items() if name in gpucourse.describe()]
    fig, ax = plt.subplots(figsize=(8.6, 2.8))
    plots.provenance_bars(ax, bars, xlabel="useful GB/s (read + write)", fmt="{:.0f}")
    ax.set_title(f"{R} × {C} float32 transpose, measured on {gpucourse.describe()}", fontsize=10)
    fig.tight_layout()
    plt.show()
    for name, gbps, kind in bars:
        print(f"{name:<28} {gbps:7.0f} GB/s ({kind})")

# %% [markdown]
# ## 5. Array of structures, structure of arrays
#
# Data layout decides strides long before any kernel is written.
# Take particles with four `float32` fields, x, y, vx and vy:
#
# - **array of structures (AoS)**: one `(n, 4)` array, each particle's four fields side by side, as a list of objects or a C struct would store them;
# - **structure of arrays (SoA)**: four arrays of n values, one per field.
#
# A kernel that shifts every particle's x by `dx` touches one field.
# In the AoS layout lane k reads the 4 bytes at 16·k: a stride of 4 elements.
# In the SoA layout it reads consecutive x values.

# %%
@cuda.jit
def shift_x_aos(particles, dx):
    i = cuda.grid(1)
    if i < particles.shape[0]:
        particles[i, 0] += dx


@cuda.jit
def shift_x_soa(xs, dx):
    i = cuda.grid(1)
    if i < xs.size:
        xs[i] += dx


particles = np.random.default_rng(2).standard_normal((n, 4), dtype=np.float32)  # columns: x, y, vx, vy
expected = particles.copy()
expected[:, 0] += np.float32(0.5)
aos, soa = particles.copy(), [np.ascontiguousarray(column) for column in particles.T]
with sim.trace() as t_aos:
    shift_x_aos[blocks, threads](aos, np.float32(0.5))
with sim.trace() as t_soa:
    shift_x_soa[blocks, threads](soa[0], np.float32(0.5))
np.testing.assert_array_equal(aos, expected)
np.testing.assert_array_equal(np.stack(soa, axis=1), expected)
for name, t, stride in (("AoS", t_aos, 4), ("SoA", t_soa, 1)):
    sectors, efficiency = (t.sectors_per_request(kind="load"), t.efficiency(kind="load")) if t.available \
        else formula(sim.warp_addresses(stride=stride))
    print(f"{name}: {sectors:.0f} sectors per load request, {efficiency:.0%} efficiency ({source})")
show(t_aos)

# %% [markdown]
# The AoS kernel moves four times the bytes it needs, on both its load and its store.
# It is less bad when a kernel uses *every* field: four loads then hit the same 16 sectors, and after the first the L1 cache serves the rest (the tracer counts requests as they reach L1, so it would still report 16 sectors for each).
# CUDA C++ goes further with 16-byte vector loads (`float4`), one instruction per particle; numba does not expose them.
# But kernels usually touch a few fields of many, and then SoA wins: it is why deep-learning frameworks store a batch as one tensor per quantity, not one object per sample.
#
# ### On the CPU, in numpy: what the speedup is made of
#
# On a CPU the same layout change is usually tried in numpy first, and there the gain it measures is mostly not about memory.
# Take 50,000 of these particles (800 kB, which fits in the L2 or L3 cache of most CPUs) and one drift step, x += vx·dt and y += vy·dt, written three ways:
#
# - **AoS by rows**: `p[:, 0:2] += p[:, 2:4] * dt` on the `(n, 4)` array; numpy walks it particle by particle, running an inner loop of 2 elements for each;
# - **AoS column by column**: `p[:, 0] += p[:, 2] * dt`, then the same for y: the same layout and the same bytes, but each operation is one long inner loop, with a stride of 16 bytes;
# - **SoA**: `f[0:2] += f[2:4] * dt` on the `(4, n)` array: long inner loops over contiguous rows.
#
# Neighbours in this list differ in one thing each: rows → columns changes only how numpy loops, columns → SoA only the layout.

# %%
def drift_aos_rows(p, dt):
    p[:, 0:2] += p[:, 2:4] * dt


def drift_aos_columns(p, dt):
    p[:, 0] += p[:, 2] * dt
    p[:, 1] += p[:, 3] * dt


def drift_soa(f, dt):
    f[0:2] += f[2:4] * dt


n_numpy, dt = 50_000, np.float32(0.01)
swarm = np.random.default_rng(3).standard_normal((n_numpy, 4), dtype=np.float32)  # columns: x, y, vx, vy
ways = {"AoS by rows": (drift_aos_rows, swarm.copy()), "AoS column by column": (drift_aos_columns, swarm.copy()),
        "SoA": (drift_soa, np.ascontiguousarray(swarm.T))}
for name, (drift, state) in ways.items():  # one step each, checked against a reference before any timing
    drift(state, dt)
    rows = state.T if name == "SoA" else state
    np.testing.assert_allclose(rows[:, :2], swarm[:, :2] + swarm[:, 2:] * dt, rtol=1e-6, err_msg=name)
numpy_times = {name: timing.measure(drift, state, dt, num_threads=1, min_run_time=0.1) for name, (drift, state) in ways.items()}
for name, t in numpy_times.items():
    print(f"{name:<21} {t.median * 1e6:8.1f} µs per step (IQR {t.iqr * 1e6:.1f} µs)")
    timing.warn_if_noisy(t, name)
loops = numpy_times["AoS by rows"].median / numpy_times["AoS column by column"].median
layout = numpy_times["AoS column by column"].median / numpy_times["SoA"].median
print(f"numpy's loop overhead (rows → columns, same layout, same bytes): {loops:.1f}×")
print(f"the layout (columns → SoA, strided → contiguous inner loops): {layout:.1f}×")
print(f"in all {loops * layout:.1f}×, of which the larger part is "
      f"{'numpy looping 2 elements at a time' if loops > layout else 'the layout'} (measured on {gpucourse.describe('cpu')}; numpy on one core)")

# %% [markdown]
# numpy pays a fixed cost every time it starts an inner loop, tens of nanoseconds, and by rows it starts one per particle to do 2 additions.
# That is why `drift_aos_rows` is so slow, and it has nothing to do with memory; the last line above says whether it is the larger part of the gap on your machine (on the 2-core AMD EPYC this lecture was checked on, it was: 8× of 28×).
# The rest, columns → SoA, is the layout, but still not its memory traffic (everything sits in cache): numpy runs contiguous inner loops with SIMD instructions, 8 or 16 float32 per instruction, and strided ones one element at a time.
# The graded assignment's structure-of-arrays item measures this numpy speedup, and says so.
#
# ### Compiled loops: the layout effect itself
#
# To see what the layout does to memory, take numpy's overheads away: compile the loop with numba's `@njit` (the CPU compiler behind `@cuda.jit`), once per layout, for the kernel of the GPU section, x += dx.
# Then sweep the number of particles from a few thousand, which fit in the core's own L1 and L2 caches, to 8 times the last-level cache, where every pass streams from main memory.
# The cache sizes come from the operating system; each size is measured in two rounds, keeping the less disturbed.

# %%
from numba import njit


@njit
def shift_x_aos_cpu(particles, dx):
    for i in range(particles.shape[0]):
        particles[i, 0] += dx


@njit
def shift_x_soa_cpu(xs, dx):
    for i in range(xs.size):
        xs[i] += dx


RECORD_BYTES = 16  # one AoS particle: four float32
caches = gpucourse.devices.cpu_cache_bytes()
cache_label = "reported by the operating system" if caches else "assumed"
caches = caches or {2: 2**20, 3: 32 * 2**20}
core_cache, last_cache = caches.get(2, caches[min(caches)]), caches[max(caches)]
top = min(26, int(np.ceil(np.log2(8 * last_cache / RECORD_BYTES))))  # 8× the last level, at most 2^26 particles (1 GiB)
layout_sizes = sorted({2**k for k in range(10, top + 1, 2)} | {2**top})
layout_times = {"AoS": {}, "SoA": {}}
for _ in range(2):  # whole sweeps, repeated: a burst of other work spoils one round, not one size
    for n_particles in layout_sizes:
        aos_cpu, soa_cpu = np.zeros((n_particles, 4), np.float32), np.zeros((4, n_particles), np.float32)
        for name, kernel, args in (("AoS", shift_x_aos_cpu, (aos_cpu, np.float32(1))), ("SoA", shift_x_soa_cpu, (soa_cpu[0], np.float32(1)))):
            t = timing.measure(kernel, *args, warmup=1, min_run_time=0.02, num_threads=1)
            kept = layout_times[name].get(n_particles)
            layout_times[name][n_particles] = t if kept is None or t.median < kept.median else kept
        # Every call added 1 to every x and to nothing else, in both layouts (exact: small integers in float32).
        for name, xs, others in (("AoS", aos_cpu[:, 0], aos_cpu[:, 1:]), ("SoA", soa_cpu[0], soa_cpu[1:])):
            assert xs[0] >= 1 and np.all(xs == xs[0]) and not others.any(), f"{name}: not every x was shifted alike"
print(f"caches: L2 {core_cache / 2**20:g} MiB per core, last level {last_cache / 2**20:g} MiB ({cache_label})")
print(f"{'particles':>10} {'AoS array':>10} {'AoS ns/particle':>16} {'SoA ns/particle':>16} {'AoS / SoA':>10}")
for n_particles in layout_sizes:
    aos_t, soa_t = layout_times["AoS"][n_particles], layout_times["SoA"][n_particles]
    print(f"{n_particles:10d} {n_particles * RECORD_BYTES / 2**20:7.2f} MiB {aos_t.median / n_particles * 1e9:16.3f} "
          f"{soa_t.median / n_particles * 1e9:16.3f} {aos_t.median / soa_t.median:10.1f}")
    for name, t in (("AoS", aos_t), ("SoA", soa_t)):
        timing.warn_if_noisy(t, f"{name} with {n_particles} particles")
in_cache = [n for n in layout_sizes if n * RECORD_BYTES <= core_cache]
beyond_bytes = min(4 * last_cache, layout_sizes[-1] * RECORD_BYTES)  # a last level over 256 MiB: the largest size only
beyond = [n for n in layout_sizes if n * RECORD_BYTES >= beyond_bytes]
ratio = {n: layout_times["AoS"][n].median / layout_times["SoA"][n].median for n in layout_sizes}
largest = layout_sizes[-1]
moved = {"AoS": 2 * RECORD_BYTES, "SoA": 2 * 4}  # bytes per particle in and back out: whole records, or x alone
print(f"in the core's cache (AoS array ≤ {core_cache / 2**20:g} MiB): SoA {np.median([ratio[n] for n in in_cache]):.1f}× faster; "
      f"beyond the last level (≥ {beyond_bytes / 2**20:g} MiB): {np.median([ratio[n] for n in beyond]):.1f}× "
      f"(modelled from the bytes moved: {moved['AoS'] // moved['SoA']}×)")
print(f"with {largest:,} particles, memory delivered " + " and ".join(
      f"{moved[name] * largest / layout_times[name][largest].median / 1e9:.0f} GB/s to {name} ({moved[name]} B per particle)" for name in moved)
      + f" (measured on {gpucourse.describe('cpu')}; compiled loops on one core)")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 4.2))
for name, color in (("AoS", "C3"), ("SoA", "C0")):
    per_particle = [layout_times[name][n].median / n * 1e9 for n in layout_sizes]
    plots.versus_size(left, layout_sizes, per_particle, label=f"{name}, compiled loop", kind="measured", color=color,
                      xlabel="particles", ylabel="ns per particle", logy=True)
    noisy = [(n, v) for n, v in zip(layout_sizes, per_particle) if layout_times[name][n].too_noisy]
    if noisy:  # drawn hollow: seen, but not a point to read a trend from
        left.plot(*zip(*noisy), "o", ms=10, mfc="white", mec=color, linestyle="none", label=f"{name}: too noisy (spread > median)")
plots.versus_size(right, layout_sizes, [ratio[n] for n in layout_sizes], label="AoS time / SoA time", kind="measured",
                  xlabel="particles", ylabel="SoA speedup (×)")
right.plot([n for n in layout_sizes if n * RECORD_BYTES >= last_cache], [moved["AoS"] / moved["SoA"]] * sum(n * RECORD_BYTES >= last_cache for n in layout_sizes),
           "--", color="C2", label="bytes moved, AoS / SoA (modelled)")
right.set_ylim(0, max(ratio.values()) * 1.2)
for ax in (left, right):
    for size, what in ((core_cache, "L2"), (last_cache, "last level")):
        ax.axvline(size / RECORD_BYTES, color="0.5", linestyle=":")
        ax.annotate(f"AoS array = {what} ({size / 2**20:g} MiB)", (size / RECORD_BYTES, 0.03), xycoords=("data", "axes fraction"),
                    rotation=90, va="bottom", ha="right", fontsize=8, color="0.3")
    ax.legend(fontsize=7, loc="upper left")
left.set_title("x += dx over every particle, one core", fontsize=10)
right.set_title("What the layout buys, by size", fontsize=10)
fig.suptitle(f"AoS against SoA in compiled loops, measured on {gpucourse.describe('cpu')}; caches {cache_label}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# Two effects of the same layout, and the size decides which one you see.
#
# - **In cache** the extra bytes cost little: the data is there either way, and the AoS time per particle barely changes while its array fits.
#   What differs is instructions: the SoA loop reads consecutive x values, so the compiler uses SIMD instructions that load and add 8 or 16 of them at once; the AoS x values are 16 bytes apart, so it does one particle per instruction.
# - **Beyond the last-level cache** both loops wait for memory, which moves whole 64-byte lines (section 3).
#   AoS drags every particle's y, vx and vy through it with x, 32 bytes per particle in and out against SoA's 8, and its time per particle climbs.
#   Compare the two GB/s printed above: when memory delivers about the same to both layouts, the speedup at that size is the ratio of bytes moved, the dashed line.
# - **In between**, the SoA loop's x values, a quarter of the AoS array, still fit in the last-level cache when the AoS array no longer does: there the gap is widest.
#
# Both are the GPU's story.
# A warp's coalesced load is a SIMD load 32 lanes wide: consecutive lanes reading consecutive addresses is what lets one request serve them all, as contiguous x values let one SIMD instruction serve 16 particles.
# And the AoS kernel's 16 sectors per request against SoA's 4, traced above, are the 32 against 8 bytes per particle here: a GPU's working set is nearly always beyond its caches, so on a GPU the bytes are the whole story.
#
# ## 6. Explore
#
# The explorer draws one warp request for any stride, offset, element size and number of active lanes, with its sectors, lines and efficiency from `sim.memory`.
# Try: 8-byte elements (`float64`) at stride 1, still 100% but 8 sectors; 16-byte elements (`float4`) at stride 1; offset 1 against offset 8; only 16 active lanes (the second half of the warp masked off by a branch, lecture 04's subject); stride 0, where every lane reads the same word: one sector, a broadcast.
# (Without a live Jupyter kernel the sliders do nothing; the figure after it shows four of these cases statically.)

# %%
widgets.coalescing_explorer()

# %%
cases = [("8-byte elements (float64), stride 1", sim.warp_addresses(element_bytes=8), 8),
         ("16-byte elements (float4), stride 1", sim.warp_addresses(element_bytes=16), 16),
         ("4-byte elements, 16 of 32 lanes active", sim.warp_addresses(active_lanes=range(16)), 4),
         ("4-byte elements, stride 3", sim.warp_addresses(stride=3), 4)]
fig, axes = plt.subplots(len(cases), 1, figsize=(9.4, 7.6))
for ax, (name, addresses, size) in zip(axes, cases):
    plots.warp_sectors(ax, addresses, bytes_per_lane=size)
    ax.set_title(f"{name}: {ax.get_title()}", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What to remember
#
# - A warp's load or store is one request; it moves every 32-byte sector that holds a byte some lane asked for.
#   Coalesced means 32 lanes reading 128 consecutive, aligned bytes: 4 sectors, nothing wasted.
# - Strides waste bandwidth in proportion to the stride, until each lane has a sector of its own (stride 8 for 4-byte data: 12.5%).
#   Misaligned offsets cost an extra sector per request, which caches mostly recover.
# - A CPU has the same rule with 64-byte cache lines (measured above): neighbouring iterations should touch neighbouring bytes.
# - When an algorithm must read one way and write another (a transpose), stage tiles in shared memory so both global accesses are row-wise, and pad the tile by one column so that column reads do not conflict in shared memory's 32 banks.
# - Lay data out for how kernels read it: structure of arrays when kernels use some fields of many records.
#   Contiguous fields give SIMD (a coalesced warp) in cache and move only the bytes used beyond it; much of a numpy AoS → SoA speedup is numpy's per-loop overhead, and none of it is memory traffic while the data fits in cache.
# - Counting sectors and bank conflicts needs no GPU: the tracer counts them in the simulator, and a GPU confirms them in GB/s.
#
# Next: the graded assignment `assignments/03_coalescing/03_coalescing.ipynb`, where you apply the sector, efficiency and bank-conflict models to whole 2-D blocks (which warps they form and what each warp reads), write a tiled transpose for any shape and a structure-of-arrays particle update on the CPU.
# Then module 04, divergence: what happens when the 32 lanes of a warp do not agree on which way a branch goes.
