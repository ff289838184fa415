"""Modelled speedups of the course's GPU speed items, on every card of ``gpu_specs.GPUS``.

A GPU speed threshold must be reachable on every card a student or a grader may have.
Until a GPU run calibrates it (``scripts/gpu_check.sh``), this module is the reasoning behind it:
for each graded speed item, the time of the baseline and of the reference answer at the item's
timed sizes, from the card's reported bandwidth, FP32 FLOP/s, clock and latencies, and the fixed
cost of a launch (``gpu_specs.LAUNCH_OVERHEAD_SECONDS``).

The model is a roofline with a fixed cost: a kernel takes ``launches × overhead + max(bytes /
bandwidth, FLOPs / peak)``. It ignores caches (every byte comes from device memory), occupancy and
tail effects, so its numbers are *modelled*, never measured: label them so. It models the
reference answers, whose launch counts and arithmetic are stated here; it holds no kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import attention, gpu_specs
from .sim import sectors_per_request, warp_addresses
from .sim.memory import SECTOR_BYTES
from .sim.streams import Schedule, pipeline

# A modelled speedup must clear the item's threshold by this factor on every card, so that a
# model a little too kind (a cache it ignores, a launch it undercounts) still leaves the threshold reachable.
SAFETY_MARGIN = 1.5
FLOAT32_BYTES = 4


@dataclass(frozen=True)
class SpeedModel:
    """One item on one card: modelled seconds of the baseline and of the reference answer."""

    item: str
    card: str
    baseline_seconds: float
    candidate_seconds: float
    candidate_bound: str  # what sets the reference answer's time: "launches", "memory" or "compute"

    @property
    def speedup(self) -> float:
        return self.baseline_seconds / self.candidate_seconds


def kernel_seconds(card: gpu_specs.GPUSpec, nbytes: float = 0.0, flops: float = 0.0, launches: int = 1) -> tuple[float, str]:
    """Roofline time of ``launches`` kernels moving ``nbytes`` and doing ``flops`` (FP32) on ``card``, and what bounds it."""
    fixed = launches * gpu_specs.LAUNCH_OVERHEAD_SECONDS
    memory, compute = nbytes / card.memory_bandwidth, flops / card.fp32_flops
    work = max(memory, compute)
    bound = "launches" if fixed > work else ("compute" if compute > memory else "memory")
    return fixed + work, bound


def pairwise_speed(card: gpu_specs.GPUSpec, n: int = 200, m: int = 150, d: int = 4) -> SpeedModel:
    """01 test_pairwise_speed: the row loop against the matmul identity, both in float32 torch.

    The loop launches 4 kernels per row of x (``x[i] - y``, ``** 2``, ``.sum(dim=1)``, the copy into
    ``out[i]``); the reference launches 9 (the matmul, two squares, two sums, the add, the doubling,
    the subtraction, the clamp). At these sizes the data is a few KB, so launches set both times.
    """
    row_bytes = FLOAT32_BYTES * (2 * m * d + 2 * m * d + m * d + m + 2 * m)  # sub, pow, sum, copy: read + write
    loop, _ = kernel_seconds(card, nbytes=n * row_bytes, flops=n * 3 * m * d, launches=4 * n)
    identity_bytes = FLOAT32_BYTES * (3 * (n * d + m * d) + 6 * n * m)  # inputs read ~3 times, (n, m) passes
    identity, bound = kernel_seconds(card, nbytes=identity_bytes, flops=2 * n * m * d + 5 * n * m, launches=9)
    return SpeedModel("test_pairwise_speed", card.name, loop, identity, bound)


def serial_cycles_per_element(itemsize: int = FLOAT32_BYTES) -> float:
    """Cycles one thread spends per element of a streaming loop: an L1 hit's latency, plus a device-memory
    miss once per 32-byte sector (the low ends of ``LATENCY_CYCLES``, so the baseline is modelled fast)."""
    l1 = gpu_specs.LATENCY_CYCLES["L1 cache"][0]
    dram = gpu_specs.LATENCY_CYCLES["global (DRAM/HBM)"][0]
    return l1 + dram * itemsize / SECTOR_BYTES


def launch_speed(card: gpu_specs.GPUSpec, n: int = 1 << 20) -> SpeedModel:
    """02 test_launch_speed: saxpy on n float32 elements already on the GPU, one thread against a full grid.

    One thread cannot overlap its loads with anything: each element waits for its load
    (latency-bound, ``serial_cycles_per_element``). A full grid streams x and y in and out out at the
    card's bandwidth.
    """
    serial = n * serial_cycles_per_element() / card.boost_clock_hz + gpu_specs.LAUNCH_OVERHEAD_SECONDS
    grid, bound = kernel_seconds(card, nbytes=3 * n * FLOAT32_BYTES, flops=2 * n)
    return SpeedModel("test_launch_speed", card.name, serial, grid, bound)


def transpose_sectors(side: int, coalesced_stores: bool) -> int:
    """32-byte sectors a side × side float32 transpose moves, one warp request per 32 elements read and written."""
    requests = side * side // 32
    loads = sectors_per_request(warp_addresses(stride=1))
    stores = sectors_per_request(warp_addresses(stride=1 if coalesced_stores else side))
    return requests * (loads + stores)


def transpose_speed(card: gpu_specs.GPUSpec, side: int = 4096) -> SpeedModel:
    """03 test_transpose_speed: the naive transpose (stores one float per sector) against the tiled one.

    Every sector is taken to cross the memory bus; the L2 cache merges part of the naive kernel's
    partial-sector stores, so a GPU shows less than this ratio.
    """
    naive, _ = kernel_seconds(card, nbytes=transpose_sectors(side, coalesced_stores=False) * SECTOR_BYTES)
    tiled, bound = kernel_seconds(card, nbytes=transpose_sectors(side, coalesced_stores=True) * SECTOR_BYTES)
    return SpeedModel("test_transpose_speed", card.name, naive, tiled, bound)


def uniform_speed(card: gpu_specs.GPUSpec, n: int = 1 << 24, steps: int = 1024) -> SpeedModel:
    """04 test_uniform_speed: the divergent kernel against the warp-uniform one, n float32 elements.

    Both read and write 8 bytes per element. Even elements run ``steps`` fused multiply-adds (2 FLOPs
    each), odd ones a negation. A divergent warp issues both paths with all 32 lanes, so every
    element costs 2·steps + 1 FLOP slots; a uniform warp issues one path, so half as many on average.
    The ratio reaches 2 only where the uniform kernel is compute-bound: its 2·steps / 2 FLOPs per
    8 bytes must exceed the card's ridge point (``GPUSpec.ridge_point_fp32``).
    """
    nbytes = 2 * n * FLOAT32_BYTES
    divergent, _ = kernel_seconds(card, nbytes=nbytes, flops=n * (2 * steps + 1))
    uniform, bound = kernel_seconds(card, nbytes=nbytes, flops=n * (steps + 0.5))
    return SpeedModel("test_uniform_speed", card.name, divergent, uniform, bound)


def overlap_speed(card: gpu_specs.GPUSpec, chunks: int = 8, elements: int = 1 << 22) -> SpeedModel:
    """05 test_overlap_speed: serial_map against overlapped_map of ``torch.sin`` on ``chunks`` float32 chunks.

    Timed inputs arrive in pinned memory on a GPU grader, so copies run at the link's bandwidth.
    serial_map waits for each chunk (copy in, kernel, copy out, synchronize). The reference is triple
    buffering: 3 slots of device buffers reused with ``out=``, one stream each for copies in, kernels and
    copies out, events guarding each reuse (Question 2's hint). Its time is modelled by
    :func:`pipelined_map_seconds`, the same chunks on a stream each issued breadth-first (8 streams fit
    the 8 hardware queues, so no false dependency): the copies set the pace on every card, copies in back to
    back on one engine and copies out on the other, so both layouts give the same makespan, which is what
    the reference's own modelled timeline (through :mod:`gpucourse.streams`) gives too. Both schedules run on
    the stream model (:mod:`gpucourse.sim.streams`); the kernel is one memory-bound pass plus a launch.
    The copies in overlap the copies out: close to 2x.
    """
    copy, kernel = map_chunk_seconds(card, elements)
    serial = Schedule.for_gpu(card.name)
    for i in range(chunks):
        serial.h2d(f"in{i}", seconds=copy)
        serial.kernel(f"k{i}", seconds=kernel)
        serial.d2h(f"out{i}", seconds=copy)
        serial.synchronize()
    bound = "copies" if copy > kernel else "compute"
    return SpeedModel("test_overlap_speed", card.name, serial.simulate().makespan, pipelined_map_seconds(card, chunks, elements), bound)


def map_chunk_seconds(card: gpu_specs.GPUSpec, elements: int) -> tuple[float, float]:
    """(each copy, the kernel) of one chunk of ``elements`` float32 mapped elementwise on ``card``, pinned."""
    nbytes = elements * FLOAT32_BYTES
    return Schedule.for_gpu(card.name).copy_seconds(nbytes), kernel_seconds(card, nbytes=2 * nbytes)[0]


def pipelined_map_seconds(card: gpu_specs.GPUSpec, chunks: int, elements: int) -> float:
    """The makespan of ``chunks`` such chunks, one stream each, issued breadth-first (the stream model)."""
    copy, kernel = map_chunk_seconds(card, elements)
    return pipeline(chunks, copy, kernel, copy, copy_engines=card.copy_engines).simulate().makespan


def fused_tail_speed(card: gpu_specs.GPUSpec, m: int = 4096, n: int = 1024) -> SpeedModel:
    """06 test_fused_tail_speed: ``gelu(x + bias) * SCALE + residual`` eagerly against one fused kernel.

    Eager torch launches 4 kernels (add, gelu, mul, add), each reading its inputs and writing a
    whole (m, n) float32 tensor: 3 + 2 + 2 + 3 tensor passes. Fused (what ``torch.compile``
    generates): one kernel that reads x and residual and writes the output, 3 passes. The GELU's erf
    is a few dozen FLOPs per element, below every card's ridge point: memory-bound either way.
    """
    tensor = m * n * FLOAT32_BYTES
    eager, _ = kernel_seconds(card, nbytes=10 * tensor, flops=30 * m * n, launches=4)
    fused, bound = kernel_seconds(card, nbytes=3 * tensor, flops=30 * m * n)
    return SpeedModel("test_fused_tail_speed", card.name, eager, fused, bound)


def bias_gelu_speed(card: gpu_specs.GPUSpec, m: int = 4096, n: int = 4096) -> SpeedModel:
    """06 test_triton_speed: ``F.gelu(x + bias)`` eagerly (2 kernels, 2 + 2 tensor passes) against one
    Triton kernel reading x and writing the output (2 passes); memory-bound on every card."""
    tensor = m * n * FLOAT32_BYTES
    eager, _ = kernel_seconds(card, nbytes=4 * tensor, flops=30 * m * n, launches=2)
    fused, bound = kernel_seconds(card, nbytes=2 * tensor, flops=30 * m * n)
    return SpeedModel("test_triton_speed", card.name, eager, fused, bound)


def batched_matmuls_speed(card: gpu_specs.GPUSpec, batch: int = 512, side: int = 16) -> SpeedModel:
    """06 test_batched_matmuls_speed: a loop of ``batch`` (side × side) matmuls plus the stack (batch + 1
    launches) against one ``bmm``. A few hundred KB in all: the launches set the loop's time."""
    nbytes = 3 * batch * side * side * FLOAT32_BYTES
    flops = 2 * batch * side ** 3
    loop, _ = kernel_seconds(card, nbytes=nbytes + batch * side * side * FLOAT32_BYTES * 2, flops=flops, launches=batch + 1)
    batched, bound = kernel_seconds(card, nbytes=nbytes, flops=flops)
    return SpeedModel("test_batched_matmuls_speed", card.name, loop, batched, bound)


def triton_matmul_speed(card: gpu_specs.GPUSpec, n: int = 4096) -> SpeedModel:
    """07 test_triton_matmul_speed: ``torch.matmul`` (cuBLAS) against a tiled Triton kernel, (n, n) @ (n, n) in float16.

    Both are one kernel on the tensor cores, compute-bound at this size on every card (2 n**3 FLOPs
    against 3 n**2 half-precision values moved): the roofline cannot tell them apart and models them
    equal, so the item's threshold is the fraction of cuBLAS a tiled kernel must reach, not a speedup.
    """
    flops, nbytes = 2 * n ** 3, 3 * n * n * 2
    seconds = gpu_specs.LAUNCH_OVERHEAD_SECONDS + max(nbytes / card.memory_bandwidth, flops / card.fp16_tensor_flops)
    bound = "compute" if flops / card.fp16_tensor_flops > nbytes / card.memory_bandwidth else "memory"
    return SpeedModel("test_triton_matmul_speed", card.name, seconds, seconds, bound)


# Kernels of one StepCNN training step (module 08): the layers forward and backward, the loss and SGD's update.
# Autocast adds casts: each layer's weight and bias and the input to half precision, and the weights' gradients
# back to float32. A GradScaler (float16 only) adds the loss's scaling, the gradients' unscale-and-check, the
# overflow flag's sum and reset and the scale's update, all on the device with a fused SGD (no sync).
STEP_KERNELS = 40
AUTOCAST_KERNELS = 13
SCALER_KERNELS = 5


def train_step_speed(card: gpu_specs.GPUSpec, batch: int = 8192, steps: int = 10) -> SpeedModel:
    """08 test_fast_train_step_speed: ``steps`` training steps of the assignment's StepCNN on (batch, 1, 16, 16).

    The convolutions and the linear layer do 2.5 MFLOP a sample forward (conv 1→32 at 16 × 16, conv 32→64
    at 8 × 8, a 1024 → 10 layer), three times that with the backward pass. The plain step runs them in
    float32, which cuDNN puts on TF32 tensor cores where the card has them (PyTorch's default for
    convolutions), on the CUDA cores otherwise; the reference in bfloat16 where the card has bfloat16 units,
    else in float16 with a GradScaler and the test's fused SGD, on the tensor cores either way. Activations
    (12 MB a thousand images in float32) are read and written about 12 times a step, in 4 or 2 bytes: at this
    batch both steps are memory-bound on every card, so the ratio is about 2, the bytes' ratio.
    Neither step syncs but for the plain one's ``loss.item()``; within a step the launches overlap the GPU's
    work either way, and at the plain step's sync the GPU idles while the next step's first kernel is
    launched. A step costs the larger of its launches and its work (the plain one plus that idle launch).
    """
    flops = steps * 3 * batch * 2 * (1 * 32 * 9 * 16 * 16 + 32 * 64 * 9 * 8 * 8 + 1024 * 10)
    activations = batch * (32 * 16 * 16 + 64 * 8 * 8) * 12 * steps
    overhead = gpu_specs.LAUNCH_OVERHEAD_SECONDS
    plain_peak = card.tf32_tensor_flops or card.fp32_flops
    plain_work = max(flops / plain_peak, activations * FLOAT32_BYTES / card.memory_bandwidth)
    plain = max(STEP_KERNELS * steps * overhead, plain_work) + steps * overhead
    half_peak, kernels = (card.bf16_tensor_flops, STEP_KERNELS + AUTOCAST_KERNELS) if card.bf16_tensor_flops else \
        (card.fp16_tensor_flops, STEP_KERNELS + AUTOCAST_KERNELS + SCALER_KERNELS)
    launching, fast_compute, fast_memory = kernels * steps * overhead, flops / half_peak, activations * 2 / card.memory_bandwidth
    fast = max(launching, fast_compute, fast_memory)
    bound = "launches" if fast == launching else ("compute" if fast_compute > fast_memory else "memory")
    return SpeedModel("test_fast_train_step_speed", card.name, plain, fast, bound)


# Kernels one time step launches (module 09): the naive LSTM per gate, 2 matmuls and 3 adds (two biases and
# the sum), then 3 sigmoids, 2 tanh, 3 products and the sum of the state update; the fast one, an addmm of the
# precomputed input part and the 9 pointwise ops (chunk is a view). Transposes and slices are views: no kernel.
NAIVE_LSTM_STEP_KERNELS = 4 * (2 + 3) + 9
FAST_LSTM_STEP_KERNELS = 1 + 9


def lstm_speed(card: gpu_specs.GPUSpec, steps: int = 64, batch: int = 64, inputs: int = 256, hidden: int = 256) -> SpeedModel:
    """09 test_lstm_fast_gpu_speed: the per-gate LSTM against one GEMM for four gates and the input projection
    hoisted (one (T·N, I) @ (I, 4H) GEMM and a bias add before the loop), float32.

    Both do the same 2·T·N·(I + H)·4H FLOPs and read the weights once a step (the fast one W_ih once in all);
    a step's tensors are tens of KB. So both are launch-bound on every card, and the ratio is about their
    kernels per step (``NAIVE_LSTM_STEP_KERNELS`` against ``FAST_LSTM_STEP_KERNELS``), plus the stack of the outputs.
    """
    flops = 2 * steps * batch * (inputs + hidden) * 4 * hidden
    weights = (inputs + hidden) * 4 * hidden * FLOAT32_BYTES
    states = steps * batch * 4 * hidden * FLOAT32_BYTES * 6  # the gates and states, read and written by the pointwise ops
    naive, _ = kernel_seconds(card, nbytes=steps * weights + states, flops=flops, launches=steps * NAIVE_LSTM_STEP_KERNELS + 1)
    fast, bound = kernel_seconds(card, nbytes=weights + steps * hidden * 4 * hidden * FLOAT32_BYTES + states, flops=flops,
                                 launches=steps * FAST_LSTM_STEP_KERNELS + 3)
    return SpeedModel("test_lstm_fast_gpu_speed", card.name, naive, fast, bound)


def gan_loop_speed(card: gpu_specs.GPUSpec, batch: int = 8192, steps: int = 10) -> SpeedModel:
    """10 test_fast_train_loop_gpu_speed: the seed's GAN (G 100 → 256 → 784, D 784 → 256 → 1) for ``steps``
    steps, its float32 loop with two ``.item()`` a step against a sync-free float16 (or bfloat16) one.

    A step runs G forward once (for the fake batch), D forward three times (real and fake for D's
    loss, fake again for G's) and the backward passes, twice the forward FLOPs each: 3 G forwards and
    7 D forwards of work. About 60 kernels a step (layers, activations, losses, two Adam updates);
    autocast adds about 20 casts. The seed's loop syncs twice a step, so its launches cannot run
    ahead of the GPU: it pays launches plus work (float32 matmuls, TF32 off by PyTorch's default);
    the fast loop pays the larger of its launches and its work on the tensor cores. Activations
    (the 784-wide layers) are read and written about 10 times a step, in 4 or 2 bytes.
    """
    g_forward, d_forward = 2 * batch * (100 * 256 + 256 * 784), 2 * batch * (784 * 256 + 256)
    flops = steps * (3 * g_forward + 7 * d_forward)
    activations = steps * batch * (256 + 784 + 3 * (256 + 1)) * 10
    plain = 60 * steps * gpu_specs.LAUNCH_OVERHEAD_SECONDS + max(flops / card.fp32_flops, activations * FLOAT32_BYTES / card.memory_bandwidth)
    launching = 80 * steps * gpu_specs.LAUNCH_OVERHEAD_SECONDS
    fast_compute, fast_memory = flops / card.fp16_tensor_flops, activations * 2 / card.memory_bandwidth
    fast = max(launching, fast_compute, fast_memory)
    bound = "launches" if fast == launching else ("compute" if fast_compute > fast_memory else "memory")
    return SpeedModel("test_fast_train_loop_gpu_speed", card.name, plain, fast, bound)


def flash_kernel_speed(card: gpu_specs.GPUSpec, n: int = 16384, d: int = 64, block: int = 64) -> SpeedModel:
    """11 test_flash_kernel_speed: causal attention on one float16 head, SDPA's math backend against the student's
    Triton kernel (:mod:`gpucourse.attention`'s traffic models, fp16 tensor cores). The math backend computes every
    score and writes and reads back the n × n scores and weights (a lower bound: its mask and scale add passes); the
    kernel computes the scores on and below the diagonal, reads Q and writes O once, and reads K and V once per block of
    queries up to the diagonal, none of it from L2 (an upper bound on its time). About 6 launches against 1."""
    baseline, _ = attention.roofline_seconds(card, attention.forward_flops(n, d), attention.standard_bytes(n, d, 2), "fp16")
    kv_reads = 2 * n * d * math.ceil(n / block) / 2  # numbers: each of the n / block programs reads half the keys on average
    candidate, bound = attention.roofline_seconds(card, attention.forward_flops(n, d, causal=True), 2 * (2 * n * d + kv_reads), "fp16")
    launch = gpu_specs.LAUNCH_OVERHEAD_SECONDS
    return SpeedModel("test_flash_kernel_speed", card.name, baseline + 6 * launch, candidate + launch, bound)


# Each GPU speed item (by grade id) and its model.
ITEMS = {
    "test_pairwise_speed": pairwise_speed,
    "test_launch_speed": launch_speed,
    "test_transpose_speed": transpose_speed,
    "test_uniform_speed": uniform_speed,
    "test_overlap_speed": overlap_speed,
    "test_fused_tail_speed": fused_tail_speed,
    "test_triton_speed": bias_gelu_speed,
    "test_batched_matmuls_speed": batched_matmuls_speed,
    "test_triton_matmul_speed": triton_matmul_speed,
    "test_fast_train_step_speed": train_step_speed,
    "test_lstm_fast_gpu_speed": lstm_speed,
    "test_fast_train_loop_gpu_speed": gan_loop_speed,
    "test_flash_kernel_speed": flash_kernel_speed,
}


def models(item: str) -> list[SpeedModel]:
    """The item's model on every card of ``gpu_specs.GPUS``: ``models("test_uniform_speed")``."""
    if item not in ITEMS:
        raise KeyError(f"no speed model for {item!r}; modelled items: {', '.join(ITEMS)}")
    return [ITEMS[item](card) for card in gpu_specs.GPUS.values()]


def describe(item: str, needed: float | dict[str, float]) -> str:
    """One line per notebook, for this machine: the threshold the item's check uses here, then the GPU threshold's
    model on each card. ``needed``: the item's thresholds by device class (its ``SPEEDUP_NEEDED``), or the GPU's alone."""
    import torch

    from .devices import device_class

    here = device_class()
    name = torch.cuda.get_device_name() if here == "cuda" else None
    return target_text(item, needed, here, name)


def target_text(item: str, needed: float | dict[str, float], here: str, device_name: str | None = None) -> str:
    """:func:`describe`'s line for a machine of device class ``here`` (``"cpu"`` or ``"cuda"``), whose GPU the driver
    calls ``device_name``: which threshold applies there, and the GPU threshold modelled (not measured) per card."""
    needed = {"cuda": needed} if isinstance(needed, int | float) else dict(needed)
    modelled = models(item)
    per_card = ", ".join(f"{m.card} {m.speedup:.3g}× ({m.candidate_bound}-bound)" for m in modelled)
    model = (f"modelled (not yet measured) for {', '.join(gpu_specs.GPUS)}: {per_card}. "
             "scripts/gpu_check.sh calibrates it on the first GPU run.")
    if here == "cuda":
        card = gpu_specs.card_for(device_name or "")
        mine = next((m for m in modelled if card is not None and m.card == card.name), None)
        which = (f"{device_name}, the table's {card.name}: modelled {mine.speedup:.3g}× there" if mine
                 else f"{device_name}, not one of the modelled cards")
        return f"On this machine ({which}) the check needs {needed['cuda']:g}×; {model}"
    if here in needed:
        return f"On this machine (no GPU: device class {here!r}) the check needs {needed[here]:g}×. On a GPU it needs {needed['cuda']:g}×, {model}"
    return (f"On this machine (no GPU: device class {here!r}) the speed is not timed: a grader with a GPU times it. "
            f"On a GPU the check needs {needed['cuda']:g}×, {model}")
