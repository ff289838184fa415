# %% [markdown]
# # 02 · GPU architecture: SMs, warps, blocks, grids, memory, first kernels, occupancy
#
# Lecture 01 treated the GPU as a black box that runs torch operations fast.
# This lecture opens the box: how a GPU runs thousands of threads, where their data lives, and how to write kernels of your own.
#
# What you will learn:
#
# 1. the execution hierarchy: a grid of blocks, blocks of warps, warps of 32 threads, and how blocks are spread over the streaming multiprocessors (SMs);
# 2. the memory hierarchy: registers, shared memory, L1, L2, global, constant and read-only memory, with their sizes and speeds;
# 3. how the course runs CUDA kernels written in Python (numba-cuda) on a GPU, or in numba's simulator when there is none;
# 4. your first kernels: thread indexing, bounds checks, launch configuration, grid-stride loops, 2D grids, shared memory with barriers, and a race condition with its fix;
# 5. occupancy: what limits how many warps an SM holds, why that matters, when more does not help, and what NVIDIA's compiler allocates for our own kernels.
#
# Every cell runs on a laptop CPU as well as on a GPU.
# Without a GPU the kernels run in a simulator, which checks that they are correct but says nothing about speed; numbers about speed are then *modelled* or *reported*, and say so.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np

import gpucourse
from gpucourse import gpu_specs, plots, sim, widgets

# %% [markdown]
# ## 1. The execution hierarchy
#
# A CUDA **kernel** is a function that many threads run at once, each on its own part of the data.
# One launch of a kernel is organised in four levels:
#
# - a **thread** runs the kernel function once, with its own registers and its own indices;
# - a **warp** is 32 consecutive threads of a block; the SM issues one instruction for all 32 at once (SIMT: single instruction, multiple threads), so the warp, not the thread, is what the hardware schedules;
# - a **block** is up to 1024 threads that run on one SM, from start to finish; its threads can share fast on-chip memory and wait for each other;
# - the **grid** is all the blocks of one launch; blocks are independent, may run in any order, and cannot wait for each other.
#
# Each thread finds its data from two numbers the hardware gives it: `blockIdx.x` (which block) and `threadIdx.x` (which thread within the block).
# Its global index is `blockIdx.x * blockDim.x + threadIdx.x`, where `blockDim.x` is the number of threads per block.
#
# The figure shows a small launch, 2 blocks of 16 threads, over 40 elements.
# Each cell is an element, coloured by the block whose thread handles it and labelled with that thread's `threadIdx.x`.
# With one element per thread (top), the 32 threads cover elements 0-31 and nobody handles 32-39.
# With a **grid-stride loop** (bottom), each thread also takes the element one grid-width (32) further on, in a second pass.

# %%
fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 4.4))
plots.launch_figure(top, n_elements=40, blocks=2, threads_per_block=16, grid_stride=False)
plots.launch_figure(bottom, n_elements=40, blocks=2, threads_per_block=16, grid_stride=True)
fig.suptitle("Which thread handles which element: the indexing rule, computed (no hardware involved)", fontsize=10)
fig.tight_layout()
plt.show()
owner = plots.thread_map(40, blocks=2, threads_per_block=16, grid_stride=False)
print("one element per thread, elements nobody handles:", np.flatnonzero(owner < 0).tolist())

# %% [markdown]
# A block of 16 threads still occupies a whole warp: half of its 32 lanes sit idle.
# That is why block sizes are multiples of 32 in practice (128 or 256 is a common start).
#
# **From blocks to SMs.**
# A GPU is a set of streaming multiprocessors; the T4 on Colab has 40, an A100 108, an H100 132 (reported).
# The hardware's block scheduler places each block on an SM with room for it, and an SM can hold several blocks at once, up to limits we compute in section 5.
# When a launch has more blocks than all SMs can hold together, the rest wait and start as earlier blocks finish: the launch runs in **waves**.
# The last wave may fill only part of the GPU (the *tail effect*): 200 blocks on 160 slots take two waves, the second one a quarter full.
# The figure models this for a T4 and a kernel of 256-thread blocks, assuming every block takes equally long and blocks are dealt round robin (NVIDIA does not document the real order).

# %%
# Modelled for a T4: a wave is one block in every resident slot of every SM.
t4 = gpu_specs.gpu("T4")
per_sm = sim.occupancy("T4", threads_per_block=256, registers_per_thread=32).blocks_per_sm
n_blocks, wave = 200, per_sm * t4.sms
slot_of = np.full((-(-n_blocks // wave) * per_sm, t4.sms), np.nan)  # rows: (wave, slot on the SM); columns: SMs
for block in range(n_blocks):
    w, rest = divmod(block, wave)
    slot, sm = divmod(rest, t4.sms)  # round robin over the SMs
    slot_of[w * per_sm + slot, sm] = block
fig, ax = plt.subplots(figsize=(9.6, 3.6))
ax.imshow(slot_of // wave, cmap="Pastel1", vmin=0, vmax=8, aspect="auto")  # empty slots (NaN) stay white
for (row, sm), block in np.ndenumerate(slot_of):
    if not np.isnan(block):
        ax.text(sm, row, int(block), ha="center", va="center", fontsize=8, rotation=90)  # on end: three digits fit a column
ax.set_yticks(range(len(slot_of)), [f"wave {r // per_sm}, slot {r % per_sm}" for r in range(len(slot_of))], fontsize=8)
ax.set(xlabel=f"SM index ({t4.sms} SMs on a T4, reported)",
       title=f"{n_blocks} blocks of 256 threads, {per_sm} resident per SM: {wave} per wave (modelled for T4)")
plt.show()

# %% [markdown]
# ## 2. The memory hierarchy
#
# Threads read and write several kinds of memory, from tiny and fast to huge and slow:
#
# - **registers**: each thread's private variables; the fastest storage, sized per SM and split among the resident threads; gone when the thread ends;
# - **shared memory**: on-chip memory each block allocates for itself; all threads of the block see it, other blocks do not; gone when the block ends; *you* decide what goes in it;
# - **L1 cache**: the same on-chip SRAM as shared memory (the split is configurable), but managed by the hardware, per SM;
# - **L2 cache**: one cache in front of device memory, shared by all SMs;
# - **global memory**: the card's DRAM or HBM, gigabytes, seen by every thread of every kernel and by the host (through copies); it lasts until freed.
#   This is where `torch` tensors and the arrays we pass to kernels live.
#
# Three more names appear in CUDA code and profiles:
# **constant memory** is 64 KiB of device memory that kernels can only read, cached per SM; it is fast when all threads of a warp read the *same* address (one read is broadcast to all) and slow when they read different ones (in numba: `cuda.const.array_like`).
# **Texture and read-only memory** is global memory read through the SM's read-only (texture) data path, which on recent GPUs shares the L1 array; CUDA C++ uses it for data marked `const __restrict__` or loaded with `__ldg()`, and textures add hardware interpolation for images (numba does not expose textures).
# **Local memory** is private to a thread but lives in device memory: the compiler puts register spills and large per-thread arrays there, so it is as slow as global memory.
#
# The table gives each level's size, scope, lifetime, latency and bandwidth for three cards, from `gpu_specs.memory_hierarchy`.
# All are **reported** figures, not measured here.
# Sizes and bandwidths come from NVIDIA's datasheets and whitepapers (shared-memory and L1 bandwidth derived from 128 bytes per cycle per SM at the boost clock).
# Latencies are order-of-magnitude ranges in SM clock cycles from microbenchmark papers (Jia et al. on Volta, 2018, and Turing, 2019; Luo et al. on Hopper, 2024): they vary with the card, the clock and the access pattern.
# A register's latency is how long an instruction waits for a value the previous instruction wrote: about 4 cycles on Volta and Turing (Jia et al. 2018, arXiv 1804.06826, measure 4 for dependent single-precision and integer instructions, 6 on Pascal).
# Capacities are in binary units (1 GiB = 2³⁰ bytes: a "16 GB" T4 has 16 GiB of memory), bandwidths in decimal ones (1 TB/s = 10¹² bytes/s), as NVIDIA quotes them.

# %%
cards = ("T4", "A100", "H100")
levels = {card: gpu_specs.memory_hierarchy(card) for card in cards}


def size_text(n_bytes):
    # Capacities in binary units, as memory chips are sized (bandwidths below stay decimal, as NVIDIA quotes them).
    return f"{n_bytes / 2**30:.0f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.1f} MiB"


print("All figures reported (datasheets, whitepapers; latencies: microbenchmark papers, order of magnitude).\n")
print(f"{'level':<18} {'scope':<26} {'lifetime':<12} {'latency (cycles)':>16}")
for level in levels["T4"]:
    low, high = level.latency_cycles
    print(f"{level.name:<18} {level.scope:<26} {level.lifetime:<12} {f'{low}-{high}' if high > low else str(low):>16}")
print(f"\n{'size / bandwidth':<18}" + "".join(f"{card:>24}" for card in cards))
for row in zip(*levels.values()):
    cells = [f"{size_text(lv.size_bytes)} / {f'{lv.bandwidth / 1e12:.1f} TB/s' if lv.bandwidth else '—'}" for lv in row]
    print(f"{row[0].name:<18}" + "".join(f"{cell:>24}" for cell in cells))

# Shared memory's bandwidth over the whole card (SMs × 32 banks × 4 bytes × boost clock) against global memory's.
shared_to_global = {}
print("\nshared memory against global memory, bandwidth of the whole card:")
for card in gpu_specs.GPUS:
    level = {lv.name: lv for lv in gpu_specs.memory_hierarchy(card)}
    shared, dram = level["shared memory"].bandwidth, level["global (DRAM/HBM)"].bandwidth
    shared_to_global[card] = shared / dram
    print(f"{card:<5} shared {shared / 1e12:5.1f} TB/s / global {dram / 1e12:4.2f} TB/s = {shared_to_global[card]:4.1f}× (reported figures)")

# %% [markdown]
# Four things to read from the tables:
#
# - The register file is large: on a T4 all SMs together hold more bytes in registers than in the L2 cache.
#   Registers are the fastest memory, but every thread's share is small, and in section 5 we will see that using many registers per thread limits how many threads an SM can hold.
# - Even a register is not free: an instruction that needs the result of the one before it waits about 4 cycles, so a warp with a chain of dependent instructions issues one every 4 cycles at best, and the SM fills the gaps from other warps or independent instructions (section 5).
# - A read from global memory takes hundreds of cycles, shared memory tens: a kernel that reuses data from shared memory avoids most of that wait (tiling, in modules 03 and 07).
# - Shared memory is often said to deliver ten times the bandwidth of global memory or more.
#   The last lines check it per card: it holds on the T4, V100 and L4, the H100 sits at about ten, and on the A100 and H200 it is under ten: HBM grew faster than the SMs' shared memory.
#   What shared memory saves on every card is the trip to DRAM: data reused from it is fetched from global memory once, and waits tens of cycles instead of hundreds.
#   Global memory is the bottleneck of any kernel with low arithmetic intensity (lecture 01's roofline).
#
# ## 3. Writing kernels in Python: a GPU or the simulator
#
# We write kernels with **numba-cuda**: a Python function marked `@cuda.jit` is compiled to GPU code, and launched as `kernel[blocks, threads_per_block](arguments)`.
# numba decides once per process, when `numba.cuda` is first imported, whether it compiles for a real GPU or runs kernels in its **CUDA simulator**.
# So we let `gpucourse.kernels` choose first, and import numba only after.

# %%
from gpucourse import kernels

mode = kernels.use_gpu_or_simulator()

# %% [markdown]
# **The simulator** (`NUMBA_ENABLE_CUDASIM=1`) runs every CUDA thread as a Python thread, one block after another.
# It computes the same results as a GPU, checks every array index (a GPU does not), and lets you step through a kernel with a Python debugger; but each thread costs Python-interpreter time, so it is many orders of magnitude slower than a GPU and tells you nothing about speed.
# Below, simulated problems stay at a few thousand elements and at most 128 threads per block; on a GPU the same cells use millions.
#
# **On a GPU**, `use_gpu_or_simulator` first launches a tiny test kernel in a separate process.
# The classic failure on Colab is `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`: numba's compiler is newer than the machine's CUDA driver, and the driver refuses its code.
# Instead of crashing the notebook at the first launch, the function then says what went wrong and how to fix it (install the numba-cuda build matching the driver's CUDA version, or let numba link for older drivers), and uses the simulator meanwhile.
# Restart the kernel after changing anything: the choice is fixed at the first `from numba import cuda`.

# %%
from numba import cuda, float32

SIM = kernels.simulator_active()  # decides problem sizes below: small in the simulator, large on a GPU
where = "numba's CUDA simulator" if SIM else gpucourse.describe()
# On a GPU numba warns about tiny demo grids: speed is not the point here, module 03 times kernels.
warnings.filterwarnings("ignore", message=".*Grid size .* will likely result in GPU under-utilization")
# Its warning about host (numpy) arguments teaches something (section 4.1): shown once, not at every launch.
warnings.filterwarnings("once", message=".*Host array used in CUDA kernel will incur copy overhead")
print("kernels run in:", where)

# %% [markdown]
# ## 4. First kernels
#
# ### 4.1 Which thread am I?
#
# A kernel cannot return a value: it writes its results into arrays it is given.
# This one writes, for each thread, its block, its thread index within the block, and its global index, computed once by hand and once with `cuda.grid(1)`, numba's shorthand for the same formula.
#
# We pass it numpy arrays, which live in the host's memory, not the GPU's.
# numba then copies each one to the GPU before the launch and back after it, at every launch, and on a GPU it says so once, with a `NumbaPerformanceWarning`: "Host array used in CUDA kernel will incur copy overhead to/from device".
# For these small demos the copies do not matter; for anything timed, or for several kernels working on the same data, copy once with `cuda.to_device(array)` and pass the device array (module 03 times kernels that way).
# The simulator has no separate device memory, so it never warns.

# %%
@cuda.jit
def where_am_i(block_of, thread_of, index_of, grid_of):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x  # the formula, written out once
    block_of[i] = cuda.blockIdx.x
    thread_of[i] = cuda.threadIdx.x
    index_of[i] = i
    grid_of[i] = cuda.grid(1)


block_of, thread_of, index_of, grid_of = (np.full(16, -1, dtype=np.int32) for _ in range(4))
where_am_i[2, 8](block_of, thread_of, index_of, grid_of)  # 2 blocks of 8 threads: 16 threads, one per element
print(f"computed by the kernel in {where}:")
print("blockIdx.x  ", block_of)
print("threadIdx.x ", thread_of)
print("global index", index_of)
np.testing.assert_array_equal(index_of, np.arange(16))
np.testing.assert_array_equal(grid_of, index_of)

# %% [markdown]
# ### 4.2 Launch configuration and the bounds check
#
# A 1D launch needs two numbers: threads per block, and enough blocks to cover the data, `ceil(n / threads_per_block)`.
# `kernels.launch_grid(n, threads_per_block)` does that division; numba also accepts tuples, `kernel[(bx, by), (tx, ty)]`, for 2D launches (section 4.4).
# Threads per block should be a multiple of 32 (whole warps); 128 to 256 is a good default on a GPU, and section 5 shows how the choice interacts with the SM's limits.
#
# Blocks come in whole numbers, so a launch usually has more threads than elements: up to one block's worth of **spare threads**, a negligible cost for large arrays.
# A spare thread that indexes the array anyway reads or writes past its end.
# The simulator checks every index and raises `IndexError`; a GPU does not check: the write lands in whatever memory follows the array, silently corrupting other data or, at best, crashing the kernel with an illegal-address error.
# So the unguarded kernel below is launched only in the simulator.
# The fix is one line: `if i < x.size`.

# %%
for n in (40, 1000, 3000, 1_000_000):
    blocks, threads = kernels.launch_grid(n, threads_per_block=128)
    spare = blocks * threads - n
    print(f"n = {n:>9,}: {blocks:>5} blocks × {threads} threads = {blocks * threads:>9,} threads, {spare:>3} spare (arithmetic)")

# %%
@cuda.jit
def add_one_unguarded(x):
    i = cuda.grid(1)
    x[i] += 1.0


@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:  # the spare threads of the last block do nothing
        x[i] += 1.0


blocks, threads = kernels.launch_grid(40, threads_per_block=32)
if kernels.simulator_active():
    try:
        add_one_unguarded[blocks, threads](np.zeros(40))
    except IndexError as err:
        print("unguarded, in the simulator: IndexError:", str(err).splitlines()[0])
else:
    print("unguarded: not launched on a GPU, where its spare threads would write past the end of the array unchecked")
x = np.zeros(40)
add_one[blocks, threads](x)
np.testing.assert_array_equal(x, np.ones(40))
print(f"guarded, {blocks} blocks × {threads} threads over 40 elements: all 40 incremented once (computed in {where})")

# %% [markdown]
# ### 4.3 Grid-stride loops
#
# One thread per element ties the grid's size to the data's size.
# A **grid-stride loop** untangles them: each thread starts at its global index and steps by the total number of threads in the grid, `cuda.gridsize(1)` (= `blockDim.x * gridDim.x`), as in the bottom panel of the first figure.
# The kernel is then correct for any grid size, even one far smaller than the data, and one launch configuration (say, a few blocks per SM) serves every size.
# Neighbouring threads still touch neighbouring elements in each pass, which module 03 shows is what global memory wants.
# Here, a vector addition with a grid deliberately smaller than the data.

# %%
@cuda.jit
def add_vectors(a, b, out):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)  # threads in the whole grid
    for i in range(start, out.size, stride):
        out[i] = a[i] + b[i]


n = 3_000 if SIM else 10_000_000
rng = np.random.default_rng(0)
a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
out = np.zeros(n, dtype=np.float32)
blocks, threads = kernels.launch_grid(n, threads_per_block=128 if SIM else 256, max_blocks=4 if SIM else 1024)
add_vectors[blocks, threads](a, b, out)
np.testing.assert_allclose(out, a + b)
print(f"{n:,} elements, {blocks} blocks × {threads} threads = {blocks * threads:,} threads, "
      f"up to {-(-n // (blocks * threads))} elements per thread: matches numpy (computed in {where})")

# %% [markdown]
# ### 4.4 2D grids
#
# For a matrix, a 2D launch is more natural: blocks of, say, 16 × 8 threads, and a 2D grid of blocks over the matrix.
# `cuda.grid(2)` returns the thread's (x, y) position in the whole grid.
# We let x run along the columns: threads with consecutive `threadIdx.x` are in the same warp, so they then touch consecutive addresses of a row (module 03 explains why that matters).
# Many examples, numba's documentation among them, write `i, j = cuda.grid(2)` with x along the *rows* instead: that is just as correct, but usually slower for row-major (C-order) arrays, as module 03 shows.
# The matrix's sides need not be multiples of the block's: the bounds check now tests both coordinates.
# The example adds each element's row index to it.

# %%
@cuda.jit
def add_row_index(x, out):
    col, row = cuda.grid(2)  # x varies fastest: neighbouring threads take neighbouring columns
    if row < x.shape[0] and col < x.shape[1]:
        out[row, col] = x[row, col] + row


rows, cols = (45, 70) if SIM else (3000, 5000)
x = rng.standard_normal((rows, cols), dtype=np.float32)
out = np.zeros_like(x)
block = (16, 8)  # (threads along x = columns, along y = rows): 128 threads
grid = (kernels.launch_grid(cols, block[0])[0], kernels.launch_grid(rows, block[1])[0])
add_row_index[grid, block](x, out)
np.testing.assert_allclose(out, x + np.arange(rows, dtype=np.float32)[:, None])
print(f"{rows}×{cols} matrix, grid {grid} of blocks {block}: {grid[0] * block[0]}×{grid[1] * block[1]} threads "
      f"over columns × rows, {grid[0] * block[0] * grid[1] * block[1] - rows * cols:,} spare; matches numpy (computed in {where})")

# %% [markdown]
# ### 4.5 Shared memory and barriers
#
# Threads of one block can cooperate through **shared memory**: `cuda.shared.array(size, dtype)` gives the block one array, whose size must be a constant known when the kernel is compiled.
# The pattern is always the same: every thread loads a piece of data into shared memory, the block waits at a **barrier**, `cuda.syncthreads()`, until all threads have arrived, and only then do threads read what *other* threads loaded.
#
# Our example reverses each block's chunk of the array: thread t writes element t of the chunk, and after the barrier reads element `CHUNK - 1 - t`, which another thread (often in another warp) loaded.
# (Reversing could read global memory directly; the point is the load, barrier, read-others pattern, which tiled transposes and matrix multiplications in modules 03 and 07 rely on.)
# A barrier must be reached by every thread of the block: never put `syncthreads()` inside a branch that only some threads take.

# %%
CHUNK = 64  # threads per block = elements per chunk


@cuda.jit
def reverse_chunks(x, out):
    chunk = cuda.shared.array(CHUNK, dtype=float32)  # one copy per block
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    chunk[t] = x[i]
    cuda.syncthreads()  # the whole chunk is loaded before anyone reads it
    out[i] = chunk[CHUNK - 1 - t]


n = CHUNK * (8 if SIM else 100_000)  # whole chunks only, to keep the example short
x = np.arange(n, dtype=np.float32)
out = np.zeros_like(x)
reverse_chunks[n // CHUNK, CHUNK](x, out)
np.testing.assert_array_equal(out, x.reshape(-1, CHUNK)[:, ::-1].ravel())
print(f"{n // CHUNK} chunks of {CHUNK} reversed in shared memory: matches numpy (computed in {where})")
print("first chunk:", out[:8], "...")

# %%
# Without the barrier, a thread may read a slot its partner has not written yet.
@cuda.jit
def reverse_chunks_no_barrier(x, out):
    chunk = cuda.shared.array(CHUNK, dtype=float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    chunk[t] = x[i]
    out[i] = chunk[CHUNK - 1 - t]  # no syncthreads(): a race between the write above and this read


out_racy = np.zeros_like(x)
reverse_chunks_no_barrier[n // CHUNK, CHUNK](x, out_racy)
wrong = int((out_racy != out).sum())
print(f"without the barrier: {wrong:,} of {n:,} elements wrong (measured in {where})")

# %% [markdown]
# In the simulator the threads of a block run roughly one after another, so the first half of each block reads slots that the second half has not written yet: typically half the elements are wrong, holding whatever an earlier block left in those slots.
# On a GPU the result depends on which warp of the block happens to run first: it may be right on one run and wrong on the next, which makes a missing barrier much harder to find there.
#
# ### 4.6 Race conditions and atomics
#
# `counter[0] += 1` looks like one step, but it is three: read the value, add one, write it back.
# When many threads do it to the same address, two can read the same old value, and one of the two increments is lost.
# On a GPU the 32 threads of a warp execute each step together, so a warp's 32 increments usually become one.
# We launch 1024 threads that each count once, in three versions:
#
# 1. the plain `+=`;
# 2. the same read and write with a barrier between them, which forces the worst interleaving for certain: every thread of a block reads before any writes;
# 3. `cuda.atomic.add`, which the hardware performs as one indivisible read-modify-write.

# %%
@cuda.jit
def count_plain(counter):
    counter[0] += 1


@cuda.jit
def count_read_then_write(counter):
    seen = counter[0]
    cuda.syncthreads()  # every thread of the block has read before any writes: all but one increment per block are lost
    counter[0] = seen + 1


@cuda.jit
def count_atomic(counter):
    cuda.atomic.add(counter, 0, 1)


blocks, threads = 8, 128
for kernel in (count_plain, count_read_then_write, count_atomic):
    counter = np.zeros(1, dtype=np.int32)
    kernel[blocks, threads](counter)
    print(f"{kernel.__name__:<22}: counted {counter[0]:>4} of {blocks * threads} (measured in {where})")
    if kernel is count_atomic:
        assert counter[0] == blocks * threads, "atomic increments are never lost"

# %% [markdown]
# Be careful what the simulator tells you here.
# In the simulator the plain `+=` usually comes out *exact*: it runs one block at a time, and its Python threads rarely switch in the middle of so short a statement.
# That is the simulator hiding the bug, not the code being correct; the simulator does not reproduce this race reliably.
# The second version shows the lost updates deterministically, because the barrier makes every thread of a block read the same old value: 8 blocks count 8 in the simulator.
# On a GPU the plain `+=` loses most increments too (run this notebook on a GPU to see it measured), and the atomic version is exact everywhere.
#
# The course's tracer does not wait for an unlucky interleaving.
# `sim.trace()` records every access with its thread and the barriers the thread has passed, and calls two accesses to one word a *data race* when at least one of them writes, they are not both atomics, and nothing orders them (within a block a barrier between them would; between blocks nothing does).
# Blocks are never ordered with each other inside a launch (the CUDA C++ Programming Guide, "Thread Hierarchy": thread blocks "are required to execute independently"), so a plain write to a word that another block also touches is a race whatever the simulator happened to compute.
# The graded kernels are checked this way.

# %%
for kernel in (count_plain, count_atomic):
    counter = np.zeros(1, dtype=np.int32)
    with sim.trace() as t:
        kernel[blocks, threads](counter)
    if not t.available:
        print(f"{kernel.__name__}: ran compiled on the GPU, which cannot be traced from Python")
        continue
    races = t.races()
    example = f"; e.g. {races[0].describe()}" if races else ""
    print(f"{kernel.__name__:<12}: {t.race_count()} data races found (traced in the simulator){example}")
    assert (kernel is count_plain) == bool(races), "the plain += races, the atomic never does"

# %% [markdown]
# Atomics are correct but serialise the threads that hit the same address, so heavy contention on one counter is slow on a GPU.
# A common use is counting: each thread that finds something adds one.
# Here we count the elements above a threshold and check against numpy; the graded assignment extends the idea to a histogram.

# %%
@cuda.jit
def count_above(x, threshold, counter):
    i = cuda.grid(1)
    if i < x.size and x[i] > threshold:
        cuda.atomic.add(counter, 0, 1)


n = 3_000 if SIM else 10_000_000
x = rng.standard_normal(n, dtype=np.float32)
counter = np.zeros(1, dtype=np.int32)
blocks, threads = kernels.launch_grid(n, threads_per_block=128 if SIM else 256)
count_above[blocks, threads](x, np.float32(1.0), counter)
assert counter[0] == (x > 1.0).sum(), f"kernel counted {counter[0]}, numpy {(x > 1.0).sum()}"
print(f"{counter[0]:,} of {n:,} standard-normal values above 1.0 (about 16% expected); matches numpy (computed in {where})")

# %% [markdown]
# ## 5. Occupancy
#
# An SM holds many warps at once and, every cycle, each of its schedulers issues an instruction from any warp that is ready.
# When one warp waits hundreds of cycles for global memory, the SM runs others meanwhile: **latency is hidden by having other work in flight**, not by making the wait shorter.
# **Occupancy** is the number of warps resident on an SM divided by the most it can hold (64 on an A100 or H100, 32 on a T4).
#
# How many blocks of a kernel fit on one SM at once is the smallest of four limits:
#
# - **warps**: the SM's maximum resident warps, divided by the block's warps;
# - **blocks**: a maximum number of resident blocks, however small they are;
# - **registers**: the SM's 64K 32-bit registers, divided among the threads: registers are allocated per warp, 32 × (registers per thread) rounded up to a multiple of 256; the number of warps they can hold is then floored to a multiple of 4 (the *warp allocation granularity*: the register file is split among the SM's 4 sub-partitions, each holding whole warps), and divided into whole blocks;
# - **shared memory**: the SM's shared memory, divided by what each block takes: its request rounded up to the allocation unit (256 bytes on compute capability 7.x, 128 from 8.0 on), plus 1 KiB per block that the driver reserves from 8.0 on.
#
# **Why it matters: Little's law.** To keep memory busy, the bytes in flight must equal latency × bandwidth.
# Per SM, the bandwidth is a few bytes per cycle and the latency hundreds of cycles, so each SM must have kilobytes of loads outstanding at all times.
# If each thread has one 4-byte load in flight, that takes hundreds of threads, that is tens of warps per SM.
#
# **When more occupancy does not help.** Warps are not the only source of work in flight: a thread can issue several independent loads before it needs the first (instruction-level parallelism, ILP), or load 16 bytes at once.
# Vasily Volkov's GTC 2010 talk "Better Performance at Lower Occupancy" showed kernels reaching peak throughput at a fraction of the maximum occupancy in this way, using registers for more work per thread.
# And once a kernel saturates memory bandwidth, more resident warps only wait in a longer queue.
# Occupancy is a means of hiding latency; treat it as a diagnostic, not a goal.

# %%
# Little's law per SM, modelled from reported figures: warps needed = latency × bytes per cycle / bytes per warp in flight.
low, high = gpu_specs.LATENCY_CYCLES["global (DRAM/HBM)"]
for name in ("T4", "A100", "H100"):
    spec = gpu_specs.gpu(name)
    per_cycle = spec.memory_bandwidth / (spec.sms * spec.boost_clock_hz)  # bytes per SM per cycle
    one_load = [latency * per_cycle / (32 * 4) for latency in (low, high)]  # each thread: one 4-byte load in flight
    print(f"{name:5s}: {per_cycle:4.1f} B/cycle/SM × {low}-{high} cycles → {one_load[0]:.0f}-{one_load[1]:.0f} warps "
          f"with 1 load each, {one_load[0] / 4:.0f}-{one_load[1] / 4:.0f} with 4 independent loads each; "
          f"the SM holds {spec.limits.max_warps_per_sm} (modelled for {name})")

# %% [markdown]
# On an A100 or an H100, one 4-byte load per thread would need more warps than an SM can hold at the long end of the latency range: even 100% occupancy would not keep memory busy, and only more independent loads per thread can.
# With four, a quarter of the warps suffice.
#
# ### Worked examples
#
# `sim.occupancy(gpu, threads_per_block, registers_per_thread, shared_mem_per_block)` follows the rules of NVIDIA's CUDA Occupancy Calculator; `gpu` is a card from `gpu_specs` or a compute capability.
# The CUDA C++ Best Practices Guide's example: on compute capability 7.0 (V100), a kernel using 37 registers per thread reaches 75% occupancy with 128-thread blocks (12 blocks per SM) but 62.5% with 320-thread blocks (4 blocks; the guide rounds it to 63%).
# Registers are the limit: 37 registers × 32 threads, rounded up to 1280 per warp, would hold 51 warps (65536 / 1280 = 51.2), floored to a multiple of 4: 48 of 64 warps fit, and 48 warps are 12 blocks of 4 warps but only 4 blocks of 10 (40 warps); without the floor, 51 warps would make 5 blocks of 10, not the guide's 4.

# %%
# (GPU or compute capability, threads/block, registers/thread, shared bytes/block): the guide's two launches, then one per limit.
launches = [("7.0", 128, 37, 0), ("7.0", 320, 37, 0),
            ("T4", 256, 32, 0), ("T4", 32, 32, 0), ("H100", 256, 128, 0), ("A100", 256, 32, 48 * 1024)]
print(f"{'GPU':>6} {'threads':>7} {'regs':>4} {'shared':>7} | {'blocks/SM':>9} {'warps':>5} {'occupancy':>9} | {'limited by':<13} | blocks each limit alone allows")
for gpu, threads, registers, shared in launches:
    result = sim.occupancy(gpu, threads, registers, shared)
    alone = ", ".join(f"{limit.replace('_', ' ')} {count}" for limit, count in result.blocks_by.items())
    print(f"{gpu if gpu in gpu_specs.GPUS else 'cc ' + gpu:>6} {threads:7d} {registers:4d} {shared // 1024:4d} KiB | "
          f"{result.blocks_per_sm:9d} {result.active_warps:2d}/{result.max_warps} {result.occupancy:9.1%} | "
          f"{result.limiter.replace('_', ' '):<13} | {alone}")
print("All modelled, for the GPU or compute capability (cc) in the first column.")
assert (sim.occupancy("7.0", 128, 37).blocks_per_sm, sim.occupancy("7.0", 128, 37).occupancy) == (12, 0.75)
assert (sim.occupancy("7.0", 320, 37).blocks_per_sm, sim.occupancy("7.0", 320, 37).occupancy) == (4, 0.625)

# %% [markdown]
# ### An occupancy calculator
#
# Pick a GPU and a launch, and see the blocks per SM, the occupancy, the limiting resource and how many blocks each limit alone would allow, with the occupancy for every block size below.
# Try: raise the registers per thread on an H100 until registers become the limit; ask for 48 KiB of shared memory on a T4; shrink the blocks to 32 threads.
# (Without a live Jupyter kernel the sliders do nothing; the plot after it shows the same curves statically.)

# %%
widgets.occupancy_calculator(gpu="T4", threads_per_block=256, registers_per_thread=32)

# %%
fig, (left, right) = plt.subplots(2, 1, figsize=(9.4, 6.4))
plots.occupancy_by_block_size(left, sim.occupancy_by_block_size("7.0", registers_per_thread=37), current=128)
left.set_title("37 registers/thread on compute capability 7.0 (modelled)", fontsize=10)
plots.occupancy_by_block_size(right, sim.occupancy_by_block_size("A100", registers_per_thread=32, shared_mem_per_block=48 * 1024),
                              current=256)
right.set_title("32 registers/thread, 48 KiB shared/block on an A100 (modelled)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# The sawtooth on the left is registers at work: the 48 warps that fit are divided into whole blocks, and whatever is left over is wasted.
# On the right, shared memory caps the SM at three blocks, so only large blocks get anywhere near full occupancy.
#
# ### Our own kernels, compiled without a GPU
#
# The compiler, not the programmer, decides how many registers a kernel uses, and the simulator compiles nothing.
# But NVIDIA's compiler does not need a GPU.
# `kernels.compile_report(kernel, signature, gpu)` compiles a kernel in a separate process as numba would before a launch: NVVM turns it into PTX, NVIDIA's portable assembly, and `ptxas` turns the PTX into machine code for one GPU architecture and reports what it allocated.
# The signature gives the argument types; `float32[::1]` is a contiguous float32 array, which is what a launch with a numpy array compiles.
# We compile three kernels of section 4 for the T4 of the wave figure (compute capability 7.5, `sm_75`).
# If the compiler is not installed, the cell says how to install it and the lecture goes on without it.

# %%
vector, matrix = float32[::1], float32[:, ::1]
compiled = {}  # kernel name -> CompileReport; stays empty without the compiler
try:
    for kernel, signature in ((add_vectors, (vector, vector, vector)), (reverse_chunks, (vector, vector)),
                              (add_row_index, (matrix, matrix))):
        compiled[kernel.__name__] = kernels.compile_report(kernel, signature, gpu="T4")
        print(compiled[kernel.__name__].summary(), end="\n\n")
except kernels.CompilerMissing as missing:
    print(f"[no compiler here] {missing}")

# %% [markdown]
# These figures come from NVIDIA's compiler for `sm_75`; nothing ran, and no GPU was involved.
# `add_vectors` needs the most registers: the compiler unrolled its grid-stride loop (hence more global loads in the PTX than the two the loop body has), and the unrolled iterations keep more values live at once.
# `reverse_chunks` declares `CHUNK` float32 of shared memory, 256 bytes per block, and its `cuda.syncthreads()` uses one hardware barrier.
# `add_row_index` draws a warning the simulator could never give: `x[row, col] + row` adds an int64 index to a float32, numba's typing rules make that sum a float64, and a T4 runs float64 arithmetic at a small fraction of its float32 rate.
# Writing `float32(row)` would keep it in float32; the simulator computes the same values either way and says nothing.
#
# Now the real register counts and shared memory go into the occupancy model, at the block sizes these kernels use on a GPU in section 4.

# %%
# The compiler's figures for sm_75 (compiled), turned into occupancy on a T4 (modelled): no GPU involved in either.
gpu_block_size = {"add_vectors": 256, "reverse_chunks": CHUNK, "add_row_index": 16 * 8}
for name, report in compiled.items():
    result = sim.occupancy(report.gpu, gpu_block_size[name], report.registers, report.shared_bytes)
    print(f"{name:<15} {report.registers:3d} registers/thread, {report.shared_bytes:4d} B shared/block (compiled for "
          f"{report.arch}), {gpu_block_size[name]:3d} threads/block → {result.describe()}")

# %% [markdown]
# All three reach full occupancy on a T4: small kernels like these are far from every limit.
# The occupancy calculator of section 5 takes a compiled kernel too: `widgets.occupancy_calculator(report=compiled["add_vectors"])` starts it at that kernel's registers and shared memory.
# Try it: how many registers per thread could the kernel use before a T4 holds fewer warps?
# The registers are those compiled for `sm_75`; `compile_report(..., gpu="H100")` gives that card's, which can differ, since each architecture gets its own machine code.
# The programmer can also set that number from the other side: in CUDA C++, `__launch_bounds__(maxThreadsPerBlock, minBlocksPerMultiprocessor)` asks the compiler to keep each thread's registers low enough for that many blocks of that size to fit on an SM (numba-cuda: `@cuda.jit(launch_bounds=(256, 4))`).
# What does not fit in that budget is spilled to local memory, which lives in DRAM behind the caches, so a tight budget can cost more than the occupancy it buys.

# %% [markdown]
# On a GPU, numba compiles each kernel at its first launch for the GPU present, and `kernels.kernel_resources(kernel)` reads the figures it got.
# The next cell lists them for every kernel of section 4, with the occupancy of each launch on that GPU's compute capability.

# %%
if kernels.simulator_active():
    print("[simulator: no compiled code of its own] On a GPU this cell lists each kernel above with the registers "
          "per thread and shared memory per block numba's compiler gave it for that GPU (reported by numba), and "
          "the occupancy each of its launches above reaches on that GPU's compute capability (modelled with "
          "sim.occupancy). The figures compiled for a T4 above need no GPU.")
else:
    import torch

    major, minor = torch.cuda.get_device_capability()
    capability = f"{major}.{minor}"
    launched = [(where_am_i, 8), (add_one, 32), (add_vectors, 256), (add_row_index, 128), (reverse_chunks, CHUNK),
                (count_atomic, 128), (count_above, 256)]  # (kernel, threads per block of its launch above)
    if capability not in gpu_specs.SM_LIMITS:
        print(f"compute capability {capability} is not in gpu_specs.SM_LIMITS ({', '.join(gpu_specs.SM_LIMITS)}): "
              "no occupancy model for it, only the compiler's figures")
    for kernel, threads in launched:
        resources = kernels.kernel_resources(kernel)
        line = f"{kernel.__name__:<17} {resources.describe()} (reported by numba for {gpucourse.describe()})"
        if capability in gpu_specs.SM_LIMITS:
            result = sim.occupancy(capability, threads, resources.registers_per_thread, resources.shared_mem_per_block)
            line += (f"\n{'':<17} at {threads} threads/block: {result.blocks_per_sm} blocks/SM, {result.occupancy:.1%} occupancy, "
                     f"limited by {result.limiter.replace('_', ' ')} (modelled for compute capability {capability})")
        print(line)

# %% [markdown]
# ## What to remember
#
# - A launch is a grid of blocks; a block runs on one SM and is split into warps of 32 threads, which execute together.
#   Blocks fill the SMs in waves.
# - Each thread finds its data from `blockIdx`, `blockDim` and `threadIdx` (`cuda.grid`), and must check that its index is inside the data: a GPU does not.
# - A grid-stride loop makes a kernel correct for any grid size; 2D grids map naturally to matrices whose sides need not be multiples of the block.
# - Memory runs from registers (per thread) and shared memory (per block, tens of cycles) to global memory (everyone, hundreds of cycles); shared memory needs `syncthreads()` between writing and reading others' data.
# - Threads updating the same address race; `cuda.atomic.add` makes the update indivisible.
#   The simulator does not reproduce every race: it checks correctness, a GPU checks concurrency.
# - Occupancy, the fraction of warp slots in use, is limited by warps, blocks, registers and shared memory; it hides latency, but more of it does not help once there is enough work in flight.
# - NVIDIA's compiler runs without a GPU: `kernels.compile_report` gives a kernel's real registers and shared memory for any architecture, and flags what the simulator cannot see, such as float64 arithmetic.
#
# Next: the graded assignment `assignments/02_architecture/02_architecture.ipynb`, where you write your own kernels (grid-stride, 2D, a block reduction, a histogram) and work out a register budget under `__launch_bounds__`.
# Then module 03, coalescing: how the addresses a warp touches together decide how fast global memory serves it.
