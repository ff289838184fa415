"""Published facts about real GPUs, for the models and plots of the course.

Two tables:

* ``SM_LIMITS``: per-SM resource limits of each compute capability, from the CUDA C++
  Programming Guide, "Technical Specifications per Compute Capability" table, and the
  allocation granularities of NVIDIA's CUDA Occupancy Calculator.
* ``GPUS``: whole cards (SM count, memory, bandwidths, peak FLOP/s) from NVIDIA's
  datasheets and architecture whitepapers, cited per card below.
  ``peak_flops(card, precision)`` gives a card's peak for one precision ("fp32" on the CUDA
  cores; "tf32", "bf16", "fp16", "fp8", "int8" on the tensor cores).

Every number here is a *reported* figure, never a measurement: label it so when you plot it.
Bandwidths are bytes per second, FLOP/s are dense (no 2:4 sparsity), sizes are bytes.
Datasheets since Ampere print tensor-core figures "with sparsity": 2:4 structured sparsity skips
half the multiplications, so those figures are twice what a dense matmul can reach. The table
stores the dense ones; ``_dense(sparse)`` marks each figure halved from a sparse one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
# Bandwidths are decimal (NVIDIA's "GB/s" is 10**9 bytes/s); DRAM and HBM capacities are binary:
# a "16 GB" T4 has 16 GiB of GDDR6, an "80GB" A100 80 GiB of HBM2e (nvidia-smi lists 81920 MiB).
GB = 10**9
TERA = 10**12


@dataclass(frozen=True)
class SMLimits:
    """Per-SM limits of one compute capability (what bounds occupancy)."""

    compute_capability: str
    max_warps_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    max_registers_per_thread: int
    shared_mem_per_sm: int
    max_shared_mem_per_block: int
    shared_mem_alloc_unit: int
    reserved_shared_mem_per_block: int
    register_alloc_unit: int = 256  # registers are handed to a warp in chunks of 256
    # The warps the register file holds are floored to a multiple of 4: it is split among the SM's 4
    # sub-partitions, each holding whole warps (cuda_occupancy.h, cudaOccMaxBlocksPerSMRegsLimit).
    warp_alloc_granularity: int = 4
    max_threads_per_block: int = 1024
    warp_size: int = 32

    @property
    def max_threads_per_sm(self) -> int:
        return self.max_warps_per_sm * self.warp_size


def _limits(cc, warps, blocks, smem_sm_kib, smem_block_kib):
    volta_or_turing = cc.startswith("7.")
    return SMLimits(
        compute_capability=cc,
        max_warps_per_sm=warps,
        max_blocks_per_sm=blocks,
        registers_per_sm=64 * KiB,
        max_registers_per_thread=255,
        shared_mem_per_sm=smem_sm_kib * KiB,
        max_shared_mem_per_block=smem_block_kib * KiB,
        # Occupancy Calculator: 256-byte shared-memory granules on 7.x, 128 from 8.0 on,
        # where the driver also reserves 1 KB of shared memory per resident block.
        shared_mem_alloc_unit=256 if volta_or_turing else 128,
        reserved_shared_mem_per_block=0 if volta_or_turing else 1 * KiB,
    )


# CUDA C++ Programming Guide, Table "Technical Specifications per Compute Capability":
# max resident warps per SM, max resident blocks per SM, max shared memory per SM (KiB),
# max shared memory per block (KiB, with the opt-in carve-out).
SM_LIMITS: dict[str, SMLimits] = {
    limits.compute_capability: limits
    for limits in (
        _limits("7.0", 64, 32, 96, 96),  # Volta (V100)
        _limits("7.5", 32, 16, 64, 64),  # Turing (T4)
        _limits("8.0", 64, 32, 164, 163),  # Ampere data-centre (A100)
        _limits("8.6", 48, 16, 100, 99),  # Ampere consumer (RTX 30xx, A10)
        _limits("8.7", 48, 16, 164, 163),  # Jetson Orin
        _limits("8.9", 48, 24, 100, 99),  # Ada (L4, RTX 40xx)
        _limits("9.0", 64, 32, 228, 227),  # Hopper (H100, H200)
    )
}


@dataclass(frozen=True)
class GPUSpec:
    """One card's reported figures."""

    name: str
    compute_capability: str
    sms: int
    memory_bytes: int  # device memory capacity, binary units (N * GiB)
    memory_bandwidth: float  # device memory, bytes/s
    l2_bytes: int
    host_link: str
    host_link_bandwidth: float  # host <-> device, bytes/s in one direction
    fp32_flops: float  # CUDA cores, FLOP/s
    fp16_tensor_flops: float  # tensor cores, dense FP16 with FP32 accumulate, FLOP/s
    # The other tensor-core precisions, dense, FLOP/s; None where the card has no such unit.
    tf32_tensor_flops: float | None  # float32 inputs rounded to TF32 (10-bit mantissa), FP32 accumulate
    bf16_tensor_flops: float | None  # BF16 with FP32 accumulate
    fp8_tensor_flops: float | None  # FP8 (E4M3 or E5M2) with FP32 accumulate
    int8_tensor_ops: float | None  # INT8 with INT32 accumulate: integer operations per second
    boost_clock_hz: float
    l1_shared_bytes_per_sm: int  # one SRAM array, split between L1 cache and shared memory
    source: str
    # Copy engines the stream model gives the card: 2, one per direction, so copies in and out overlap
    # each other and kernels. Every card here has at least that many (CUDA's asyncEngineCount: 2 or more
    # on data-centre cards since Fermi); some report more, which adds no link bandwidth. This table does
    # not cite each card's exact count: scripts/gpu_check.sh records the lent GPU's asyncEngineCount.
    copy_engines: int = 2

    @property
    def limits(self) -> SMLimits:
        return SM_LIMITS[self.compute_capability]

    @property
    def ridge_point_fp32(self) -> float:
        """FLOPs per byte above which an FP32 CUDA-core kernel is compute-bound."""
        return self.fp32_flops / self.memory_bandwidth


def _dense(with_sparsity: float) -> float:
    """The dense figure behind a datasheet's "with sparsity" one (2:4 sparsity doubles it)."""
    return with_sparsity / 2


_PCIE3 = ("PCIe 3.0 x16", 15.75 * GB)
_PCIE4 = ("PCIe 4.0 x16", 31.5 * GB)
_PCIE5 = ("PCIe 5.0 x16", 63.0 * GB)

GPUS: dict[str, GPUSpec] = {
    spec.name: spec
    for spec in (
        GPUSpec(
            "V100", "7.0", sms=80, memory_bytes=32 * GiB, memory_bandwidth=900 * GB, l2_bytes=6 * MiB,
            host_link=_PCIE3[0], host_link_bandwidth=_PCIE3[1],
            fp32_flops=15.7 * TERA, fp16_tensor_flops=125 * TERA,
            # V100 datasheet: "Tensor Performance 125 TFLOPS" (SXM2), no sparsity on Volta. The Volta
            # whitepaper's tensor cores multiply FP16 only: no TF32, BF16, FP8 or INT8 units.
            tf32_tensor_flops=None, bf16_tensor_flops=None, fp8_tensor_flops=None, int8_tensor_ops=None,
            boost_clock_hz=1530e6, l1_shared_bytes_per_sm=128 * KiB,
            source="NVIDIA V100 datasheet (SXM2); Volta architecture whitepaper",
        ),
        GPUSpec(
            "T4", "7.5", sms=40, memory_bytes=16 * GiB, memory_bandwidth=320 * GB, l2_bytes=4 * MiB,
            host_link=_PCIE3[0], host_link_bandwidth=_PCIE3[1],
            fp32_flops=8.1 * TERA, fp16_tensor_flops=65 * TERA,
            # T4 datasheet: "Mixed Precision (FP16/FP32) 65 TFLOPS, INT8 130 TOPS", no sparsity on
            # Turing. The Turing whitepaper adds INT8/INT4 to Volta's FP16: no TF32, BF16 or FP8.
            tf32_tensor_flops=None, bf16_tensor_flops=None, fp8_tensor_flops=None, int8_tensor_ops=130 * TERA,
            boost_clock_hz=1590e6, l1_shared_bytes_per_sm=96 * KiB,
            source="NVIDIA T4 datasheet; Turing architecture whitepaper",
        ),
        GPUSpec(
            "A100", "8.0", sms=108, memory_bytes=80 * GiB, memory_bandwidth=2039 * GB, l2_bytes=40 * MiB,
            host_link=_PCIE4[0], host_link_bandwidth=_PCIE4[1],
            fp32_flops=19.5 * TERA, fp16_tensor_flops=312 * TERA,
            # A100 datasheet prints dense | sparse: TF32 156 | 312, BF16 312 | 624, FP16 312 | 624 TFLOPS,
            # INT8 624 | 1248 TOPS. FP8 tensor cores came with Hopper and Ada: none on Ampere.
            tf32_tensor_flops=156 * TERA, bf16_tensor_flops=312 * TERA, fp8_tensor_flops=None,
            int8_tensor_ops=624 * TERA,
            boost_clock_hz=1410e6, l1_shared_bytes_per_sm=192 * KiB,
            source="NVIDIA A100 datasheet (SXM4 80GB); Ampere GA100 whitepaper",
        ),
        GPUSpec(
            "L4", "8.9", sms=58, memory_bytes=24 * GiB, memory_bandwidth=300 * GB, l2_bytes=48 * MiB,
            host_link=_PCIE4[0], host_link_bandwidth=_PCIE4[1],
            fp32_flops=30.3 * TERA, fp16_tensor_flops=_dense(242 * TERA),
            # L4 datasheet, every tensor figure "shown with sparsity": TF32 120, FP16 242, BF16 242,
            # FP8 485 TFLOPS, INT8 485 TOPS. Its FP16 figure names no accumulator; data-centre Ada runs
            # FP32 accumulate at the full FP16 rate (Ada whitepaper), unlike the GeForce cards.
            tf32_tensor_flops=_dense(120 * TERA), bf16_tensor_flops=_dense(242 * TERA),
            fp8_tensor_flops=_dense(485 * TERA), int8_tensor_ops=_dense(485 * TERA),
            boost_clock_hz=2040e6, l1_shared_bytes_per_sm=128 * KiB,
            source="NVIDIA L4 datasheet (tensor figures printed with sparsity; dense is half); Ada whitepaper",
        ),
        GPUSpec(
            "H100", "9.0", sms=132, memory_bytes=80 * GiB, memory_bandwidth=3350 * GB, l2_bytes=50 * MiB,
            host_link=_PCIE5[0], host_link_bandwidth=_PCIE5[1],
            fp32_flops=67 * TERA, fp16_tensor_flops=_dense(1979 * TERA),
            # H100 SXM datasheet, every tensor figure "with sparsity": TF32 989, BF16 1,979, FP16 1,979,
            # FP8 3,958 TFLOPS, INT8 3,958 TOPS. The Hopper whitepaper's dense column agrees to rounding
            # (TF32 494.7, FP16 989.4, FP8 1978.9).
            tf32_tensor_flops=_dense(989 * TERA), bf16_tensor_flops=_dense(1979 * TERA),
            fp8_tensor_flops=_dense(3958 * TERA), int8_tensor_ops=_dense(3958 * TERA),
            boost_clock_hz=1980e6, l1_shared_bytes_per_sm=256 * KiB,
            source="NVIDIA H100 datasheet (SXM5); Hopper architecture whitepaper",
        ),
        GPUSpec(
            "H200", "9.0", sms=132, memory_bytes=141 * GiB, memory_bandwidth=4800 * GB, l2_bytes=50 * MiB,
            host_link=_PCIE5[0], host_link_bandwidth=_PCIE5[1],
            fp32_flops=67 * TERA, fp16_tensor_flops=_dense(1979 * TERA),
            # H200 SXM datasheet, "with sparsity" like the H100's and the same figures: TF32 989,
            # BF16 1,979, FP16 1,979, FP8 3,958 TFLOPS, INT8 3,958 TOPS.
            tf32_tensor_flops=_dense(989 * TERA), bf16_tensor_flops=_dense(1979 * TERA),
            fp8_tensor_flops=_dense(3958 * TERA), int8_tensor_ops=_dense(3958 * TERA),
            boost_clock_hz=1980e6, l1_shared_bytes_per_sm=256 * KiB,
            source="NVIDIA H200 datasheet (SXM); same GH100 compute as the H100",
        ),
    )
}


# Fixed costs of offloading work to a GPU over the host link, paid whatever the size (orders of
# magnitude, not card figures: they vary with the driver, the OS and the link).
# A host<->device copy costs about 10 µs before its first byte counts: for copies under ~8 KB,
# cudaMemcpy's time stays flat at about 10 µs (University of Virginia CUDA notes, "Memory Transfer
# Overhead", measured over PCIe 2.0), which is why NVIDIA's CUDA C++ Best Practices Guide ("Data
# Transfer Between Host and Device") advises batching small transfers into one.
HOST_LINK_LATENCY_SECONDS = 10e-6
# A kernel launch plus the synchronisation that waits for its result costs a few µs more than the
# kernel itself (NVIDIA Technical Blog, "Getting Started with CUDA Graphs", 2019, measures it for
# short kernels launched and synchronised one by one): 5 µs is the round figure the course uses.
LAUNCH_OVERHEAD_SECONDS = 5e-6
# Offloading a matmul C = A @ B: copy A and B over, one launch, copy C back.
MATMUL_OFFLOAD_FIXED_SECONDS = 3 * HOST_LINK_LATENCY_SECONDS + LAUNCH_OVERHEAD_SECONDS


def gpu(name: str) -> GPUSpec:
    """A card by name, case-insensitively: ``gpu("a100")``."""
    for key, spec in GPUS.items():
        if key.lower() == name.strip().lower():
            return spec
    raise KeyError(f"unknown GPU {name!r}; the table has {', '.join(GPUS)}")


def card_for(device_name: str) -> GPUSpec | None:
    """The table's card that a driver's device name names, or None: ``card_for("NVIDIA A100-SXM4-80GB")`` is the A100.

    Whole words only, so an "NVIDIA L40S" is not taken for an L4. A PCIe variant maps to the
    table's SXM card, whose peaks are somewhat higher.
    """
    words = {word.lower() for word in re.findall(r"[A-Za-z0-9]+", device_name)}
    return next((spec for name, spec in GPUS.items() if name.lower() in words), None)


# Each precision a peak can be asked for, and the GPUSpec field that holds it.
PRECISION_FIELDS = {
    "fp32": "fp32_flops",  # CUDA cores
    "tf32": "tf32_tensor_flops",
    "bf16": "bf16_tensor_flops",
    "fp16": "fp16_tensor_flops",
    "fp8": "fp8_tensor_flops",
    "int8": "int8_tensor_ops",
}


def precisions(card: str | GPUSpec) -> list[str]:
    """The precisions ``card`` has a unit for, from ``PRECISION_FIELDS``: ``precisions("T4")``."""
    spec = card if isinstance(card, GPUSpec) else gpu(card)
    return [precision for precision, field in PRECISION_FIELDS.items() if getattr(spec, field) is not None]


def peak_flops(card: str | GPUSpec, precision: str) -> float:
    """Dense peak FLOP/s of ``card`` in ``precision`` (operations/s for "int8"): ``peak_flops("A100", "tf32")``.

    Raises ValueError for a precision not in ``PRECISION_FIELDS`` and for a card without that unit,
    so a missing unit never reads as a peak of zero.
    """
    spec = card if isinstance(card, GPUSpec) else gpu(card)
    key = precision.strip().lower()
    if key not in PRECISION_FIELDS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISION_FIELDS)}")
    peak = getattr(spec, PRECISION_FIELDS[key])
    if peak is None:
        raise ValueError(f"the {spec.name} has no {key.upper()} tensor cores; it has {', '.join(precisions(spec))}")
    return peak


def float32_matmul_precision(card: str | GPUSpec, tf32_allowed: bool) -> str:
    """The peak a float32 matmul on ``card`` should be compared with: "tf32" or "fp32".

    cuBLAS runs float32 matmuls on TF32 tensor cores when the card has them and the framework
    allows it (PyTorch: ``torch.backends.cuda.matmul.allow_tf32``, on by default in 1.7-1.11, off
    since 1.12); otherwise they run on the CUDA cores at the FP32 peak.
    """
    spec = card if isinstance(card, GPUSpec) else gpu(card)
    return "tf32" if tf32_allowed and spec.tf32_tensor_flops is not None else "fp32"


def sm_limits(gpu_or_cc: str) -> SMLimits:
    """Per-SM limits for a card name (``"T4"``) or a compute capability (``"8.6"``)."""
    key = gpu_or_cc.strip()
    if key in SM_LIMITS:
        return SM_LIMITS[key]
    try:
        return gpu(key).limits
    except KeyError:
        raise KeyError(
            f"{gpu_or_cc!r} is neither a GPU ({', '.join(GPUS)}) "
            f"nor a compute capability ({', '.join(SM_LIMITS)})"
        ) from None


# Order-of-magnitude access latencies in SM clock cycles, as published microbenchmark studies
# report them for Volta, Turing, Ampere and Hopper (Jia et al., "Dissecting the NVIDIA Volta
# GPU Architecture via Microbenchmarking", 2018, and the Turing follow-up, 2019; Luo et al.,
# "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture", 2024). Ranges, not exact
# figures: they vary by card, clock and access pattern.
LATENCY_CYCLES = {
    # A register operand is ready ~4 cycles after the instruction that wrote it: Jia et al. 2018
    # (arXiv 1804.06826) measure 4 cycles for dependent single-precision and integer instructions on
    # Volta (6 on Pascal and Maxwell), and the Turing follow-up (arXiv 1903.07486) the same on a T4.
    "registers": (4, 4),
    "shared memory": (20, 35),
    "L1 cache": (30, 40),
    "L2 cache": (150, 300),
    "global (DRAM/HBM)": (400, 800),
}
SHARED_BYTES_PER_CYCLE_PER_SM = 128  # 32 banks of 4 bytes each serve one warp request per cycle


@dataclass(frozen=True)
class MemoryLevel:
    """One level of a GPU's memory hierarchy, as reported (sizes, latencies, bandwidths)."""

    name: str
    size_bytes: int  # for the whole card
    scope: str  # who can see it
    lifetime: str
    latency_cycles: tuple[int, int]
    bandwidth: float | None  # bytes/s for the whole card, where a figure is published or derivable


def memory_hierarchy(name: str) -> list[MemoryLevel]:
    """Registers → shared/L1 → L2 → device memory for one card (reported figures)."""
    spec = gpu(name)
    limits = spec.limits
    shared_bandwidth = SHARED_BYTES_PER_CYCLE_PER_SM * spec.sms * spec.boost_clock_hz
    return [
        MemoryLevel("registers", limits.registers_per_sm * 4 * spec.sms, "one thread", "the thread",
                    LATENCY_CYCLES["registers"], None),
        MemoryLevel("shared memory", limits.shared_mem_per_sm * spec.sms, "one block", "the block",
                    LATENCY_CYCLES["shared memory"], shared_bandwidth),
        MemoryLevel("L1 cache", spec.l1_shared_bytes_per_sm * spec.sms, "one SM (cache)", "automatic",
                    LATENCY_CYCLES["L1 cache"], shared_bandwidth),
        MemoryLevel("L2 cache", spec.l2_bytes, "all SMs (cache)", "automatic",
                    LATENCY_CYCLES["L2 cache"], None),
        MemoryLevel("global (DRAM/HBM)", spec.memory_bytes, "all threads and the host", "until freed",
                    LATENCY_CYCLES["global (DRAM/HBM)"], spec.memory_bandwidth),
    ]
