"""Occupancy, by the rules of NVIDIA's CUDA Occupancy Calculator. How many blocks of
a kernel fit on one streaming multiprocessor (SM) at once is the smallest of four limits:

* **warps**: an SM holds at most ``max_warps_per_sm`` warps (a block of T threads is
  ``ceil(T / 32)`` warps);
* **blocks**: and at most ``max_blocks_per_sm`` blocks, however small;
* **registers**: registers are allocated per warp, in units of 256 (``32 × registers per
  thread``, rounded up); the number of warps the register file holds is then floored to a
  multiple of 4 (the warp allocation granularity: the file is split among the SM's 4
  sub-partitions, each holding whole warps, as ``cudaOccMaxBlocksPerSMRegsLimit`` in the CUDA
  toolkit's ``cuda_occupancy.h`` computes it), and divided into whole blocks;
* **shared memory**: a block's shared memory is allocated in units of 128 bytes (256 on
  compute capability 7.x), plus 1 KiB the driver reserves per block from 8.0 on.

The SM's shared memory is taken at its largest carve-out (``shared_mem_per_sm`` of
:mod:`gpucourse.gpu_specs`), as the runtime picks it for kernels that need it.

Every number these functions return is *modelled* for the GPU named, never measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..gpu_specs import SMLimits, sm_limits

LIMITERS = ("warps", "blocks", "registers", "shared_memory")  # ties go to the earlier one


@dataclass(frozen=True)
class Occupancy:
    """How a kernel's launch fills one SM (modelled).

    ``blocks_by`` holds each limit's own block count, so a plot or a widget can show how far
    each one is from binding.
    """

    gpu: str
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    limiter: str
    blocks_by: dict[str, int]

    @property
    def occupancy(self) -> float:
        """Active warps as a fraction of the SM's maximum resident warps."""
        return self.active_warps / self.max_warps

    def describe(self) -> str:
        return (
            f"{self.gpu}: {self.blocks_per_sm} blocks/SM, {self.active_warps} of {self.max_warps} warps "
            f"({round(self.occupancy * 100, 1):g}% occupancy), limited by {self.limiter.replace('_', ' ')} (modelled)"
        )


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def _round_down(value: int, unit: int) -> int:
    return value // unit * unit


def _check_launch(limits: SMLimits, threads_per_block: int, registers_per_thread: int, shared_mem_per_block: int) -> None:
    for name, value in (("threads_per_block", threads_per_block), ("registers_per_thread", registers_per_thread),
                        ("shared_mem_per_block", shared_mem_per_block)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    cc = limits.compute_capability
    if not 1 <= threads_per_block <= limits.max_threads_per_block:
        raise ValueError(f"threads_per_block must be 1..{limits.max_threads_per_block}, got {threads_per_block}")
    if not 0 <= registers_per_thread <= limits.max_registers_per_thread:
        raise ValueError(f"registers_per_thread must be 0..{limits.max_registers_per_thread} on {cc}, got {registers_per_thread}")
    if not 0 <= shared_mem_per_block <= limits.max_shared_mem_per_block:
        raise ValueError(
            f"shared_mem_per_block must be 0..{limits.max_shared_mem_per_block} bytes on {cc}, got {shared_mem_per_block}"
        )


def warps_per_block(threads_per_block: int, limits: SMLimits) -> int:
    return -(-threads_per_block // limits.warp_size)


def blocks_limited_by_warps(limits: SMLimits, warps: int) -> int:
    return limits.max_warps_per_sm // warps


def blocks_limited_by_registers(limits: SMLimits, warps: int, registers_per_thread: int) -> int:
    if registers_per_thread == 0:
        return limits.max_blocks_per_sm  # a kernel with no registers is not bound by them
    registers_per_warp = _round_up(registers_per_thread * limits.warp_size, limits.register_alloc_unit)
    # cuda_occupancy.h: (registers_per_sm / 4 sub-partitions) // registers_per_warp warps in each
    # sub-partition, times 4; the same as flooring the SM's whole count to a multiple of 4.
    warps_that_fit = _round_down(limits.registers_per_sm // registers_per_warp, limits.warp_alloc_granularity)
    return warps_that_fit // warps


def blocks_limited_by_shared_memory(limits: SMLimits, shared_mem_per_block: int) -> int:
    allocated = _round_up(shared_mem_per_block + limits.reserved_shared_mem_per_block, limits.shared_mem_alloc_unit)
    if allocated == 0:
        return limits.max_blocks_per_sm
    return limits.shared_mem_per_sm // allocated


def occupancy(gpu: str, threads_per_block: int, registers_per_thread: int = 0, shared_mem_per_block: int = 0) -> Occupancy:
    """Blocks per SM, active warps, occupancy and the limiting resource of one kernel launch.

    gpu: a card from :mod:`gpucourse.gpu_specs` (``"T4"``, ``"A100"``, …) or a compute
    capability (``"8.6"``). shared_mem_per_block is in bytes (static plus dynamic).
    When several limits allow the same number of blocks, the limiter reported is the first
    of warps, blocks, registers, shared_memory: the hardware maximum is what binds.
    """
    limits = sm_limits(gpu)
    _check_launch(limits, threads_per_block, registers_per_thread, shared_mem_per_block)
    warps = warps_per_block(threads_per_block, limits)
    blocks_by = {
        "warps": blocks_limited_by_warps(limits, warps),
        "blocks": limits.max_blocks_per_sm,
        "registers": blocks_limited_by_registers(limits, warps, registers_per_thread),
        "shared_memory": blocks_limited_by_shared_memory(limits, shared_mem_per_block),
    }
    blocks = min(blocks_by.values())
    limiter = next(name for name in LIMITERS if blocks_by[name] == blocks)
    return Occupancy(gpu, blocks, blocks * warps, limits.max_warps_per_sm, limiter, blocks_by)


def occupancy_by_block_size(gpu: str, registers_per_thread: int = 0, shared_mem_per_block: int = 0,
                            block_sizes=None) -> dict[int, Occupancy]:
    """Occupancy for each block size (every multiple of 32 up to the maximum by default)."""
    limits = sm_limits(gpu)
    sizes = block_sizes or range(limits.warp_size, limits.max_threads_per_block + 1, limits.warp_size)
    return {size: occupancy(gpu, size, registers_per_thread, shared_mem_per_block) for size in sizes}
