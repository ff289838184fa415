"""Tests of gpucourse.sim: the occupancy model against NVIDIA's worked examples, and the call recorder."""

import numpy as np
import pytest

from gpucourse import gpu_specs, sim


def _summary(result):
    return result.blocks_per_sm, result.active_warps, result.limiter


@pytest.mark.parametrize(
    "launch, expected",
    [
        # CUDA C++ Best Practices Guide, "Calculating Occupancy": compute capability 7.0, 37
        # registers per thread: 128-thread blocks reach 75% (12 blocks), 320-thread blocks 62.5% (4).
        (("7.0", 128, 37, 0), (12, 48, "registers")),
        (("7.0", 320, 37, 0), (4, 40, "registers")),
        # CUDA C++ Programming Guide, "Maximize Utilization", multiprocessor level: 512-thread blocks
        # at 64 registers fit twice (32 warps), at 65 registers once (16 warps). Stated for 6.x;
        # 7.0 has the same 64 K registers and allocation rules.
        (("7.0", 512, 64, 0), (2, 32, "registers")),
        (("7.0", 512, 65, 0), (1, 16, "registers")),
    ],
)
def test_occupancy_reproduces_nvidia_worked_examples(launch, expected):
    """The model gives the blocks, warps and limiter of the guides' examples."""
    result = sim.occupancy(*launch)
    assert _summary(result) == expected
    assert result.occupancy == pytest.approx(expected[1] / 64)


@pytest.mark.parametrize(
    "launch, expected",
    [
        (("A100", 256, 0, 48 * 1024), (3, 24, "shared_memory")),  # (48 + 1 reserved) KiB blocks in 164 KiB
        (("7.5", 256, 0, 32 * 1024), (2, 16, "shared_memory")),  # no reservation before 8.0
        (("7.5", 256, 0, 32 * 1024 + 1), (1, 8, "shared_memory")),  # 256-byte granules on 7.x
        (("8.0", 128, 0, 167936 // 4 - 1024), (4, 16, "shared_memory")),  # 128-byte granules on 8.x: exactly 4 fit
        (("8.0", 128, 0, 167936 // 4 - 1024 + 1), (3, 12, "shared_memory")),
        (("H100", 32, 16, 0), (32, 32, "blocks")),
        (("T4", 1024, 32, 0), (1, 32, "warps")),
        (("8.0", 64, 0, 0), (32, 64, "warps")),  # warps and blocks tie: the hardware maximum binds
        (("8.9", 33, 0, 0), (24, 48, "warps")),  # 33 threads take 2 whole warps
        (("H200", 1024, 255, 0), (0, 0, "registers")),  # more registers than an SM has: nothing fits
        (("L4", 96, 40, 12 * 1024), (7, 21, "shared_memory")),
    ],
)
def test_occupancy_finds_each_limiter(launch, expected):
    """Hand-computed launches, one or more per kind of limit, at the allocation boundaries."""
    assert _summary(sim.occupancy(*launch)) == expected


def test_occupancy_reports_every_limit_and_describes_itself():
    result = sim.occupancy("T4", 256, 65, 0)  # 65 registers: 2304 per warp, 28 warps' worth
    assert result.blocks_by == {"warps": 4, "blocks": 16, "registers": 3, "shared_memory": 16}
    assert result.describe() == "T4: 3 blocks/SM, 24 of 32 warps (75% occupancy), limited by registers (modelled)"


@pytest.mark.parametrize(
    "launch, error",
    [
        (("T4", 0, 32, 0), ValueError), (("T4", 1025, 32, 0), ValueError), (("A100", 128, 256, 0), ValueError),
        (("T4", 128, -1, 0), ValueError), (("T4", 128, 32, 64 * 1024 + 1), ValueError), (("H100", 128, 32, -5), ValueError),
        (("T4", 128.0, 32, 0), TypeError), (("GTX 480", 128, 32, 0), KeyError),
    ],
)
def test_occupancy_rejects_impossible_launches(launch, error):
    with pytest.raises(error):
        sim.occupancy(*launch)


def _calculator_blocks_by_registers(limits, threads_per_block, registers_per_thread):
    """cudaOccMaxBlocksPerSMRegsLimit of the CUDA toolkit's cuda_occupancy.h, line by line (partitioned
    global caching off): registers go to warps in units of 256, and each of the SM's 4 sub-partitions
    holds as many whole warps as its quarter of the register file allows."""
    sub_partitions, regs_per_block = 4, 64 * 1024
    warps_per_block = -(-threads_per_block // 32)
    regs_per_warp = -(-registers_per_thread * 32 // 256) * 256
    regs_assumed_per_block = regs_per_warp * (-(-warps_per_block // sub_partitions) * sub_partitions)  # the hardware check
    if regs_per_block < regs_assumed_per_block or regs_per_block < regs_per_warp * warps_per_block:
        return 0
    warps_per_sub_partition = limits.registers_per_sm // sub_partitions // regs_per_warp
    return warps_per_sub_partition * sub_partitions // warps_per_block


def test_resident_warps_are_floored_to_a_multiple_of_4_for_a_5_warp_block():
    """160-thread blocks (5 warps) at 40 registers on 8.0: 1280 registers per warp would hold 51 warps,
    floored to 48 (12 per sub-partition), so 9 blocks and 45 warps, not the 10 blocks that 51 // 5 gives."""
    result = sim.occupancy("8.0", 160, 40)
    assert (result.blocks_by["registers"], result.blocks_per_sm, result.active_warps, result.limiter) == (9, 9, 45, "registers")


@pytest.mark.parametrize("cc", ["7.0", "7.5", "8.0", "8.6", "9.0"])
def test_register_limit_matches_the_occupancy_calculator_for_every_launch(cc):
    limits = gpu_specs.sm_limits(cc)
    for threads in range(32, 1025, 32):
        for registers in range(1, 256):
            expected = _calculator_blocks_by_registers(limits, threads, registers)
            got = sim.occupancy(cc, threads, registers).blocks_by["registers"]
            assert got == expected, f"cc {cc}, {threads} threads, {registers} registers: model {got}, calculator {expected}"


def test_occupancy_by_block_size_covers_every_warp_multiple():
    curve = sim.occupancy_by_block_size("A100", registers_per_thread=40, shared_mem_per_block=6144)
    assert list(curve) == list(range(32, 1025, 32))
    assert curve[128].occupancy == pytest.approx(0.75) and curve[1024].occupancy == pytest.approx(0.5)
    assert max(curve.values(), key=lambda r: r.occupancy).active_warps == 48


def test_every_compute_capability_has_a_full_sm_at_some_block_size():
    """Without registers or shared memory, some block size fills the SM: the limits are consistent."""
    for cc in gpu_specs.SM_LIMITS:
        assert max(r.occupancy for r in sim.occupancy_by_block_size(cc).values()) == 1.0


def test_record_kernel_calls_counts_what_simulated_threads_call(simulated_cuda):
    from sim_kernels import count_then_share

    values = np.arange(64, dtype=np.int32) % 3
    bins, out = np.zeros(3, np.int32), np.zeros(2)
    with sim.record_kernel_calls() as outer:
        with sim.record_kernel_calls() as inner:
            count_then_share[2, 32](values, bins, out)
        count_then_share[1, 32](values, bins, out)
    assert inner.available and dict(inner) == {"atomic.add": 64, "shared.array": 64, "syncthreads": 64}
    assert dict(outer) == {"atomic.add": 96, "shared.array": 96, "syncthreads": 96}
    assert bins.tolist() == [22 + 11, 21 + 11, 21 + 10]
    assert not sim.recording()
    with sim.record_kernel_calls() as after:
        count_then_share[1, 32](values, bins, out)
    assert after["atomic.add"] == 32  # the wrappers were removed and put back, not stacked


def test_recorded_calls_from_elsewhere_reach_every_open_recorder():
    with sim.record_kernel_calls() as outer, sim.record_kernel_calls() as inner:
        assert sim.recording()
        sim.absorb({"calls": {"syncthreads": 5}})
    assert outer["syncthreads"] == inner["syncthreads"] == 5 and outer["atomic.add"] == 0
