import pytest

from gpucourse import gpu_specs


def test_required_gpus_are_in_the_table():
    assert {"T4", "A100", "H100", "H200"} <= set(gpu_specs.GPUS)


@pytest.mark.parametrize("spec", list(gpu_specs.GPUS.values()), ids=lambda spec: spec.name)
def test_every_gpu_has_consistent_figures(spec):
    assert spec.compute_capability in gpu_specs.SM_LIMITS
    assert spec.sms > 0 and spec.memory_bandwidth > 0 and spec.host_link_bandwidth > 0
    assert spec.fp16_tensor_flops > spec.fp32_flops > 0
    assert spec.memory_bandwidth > 5 * spec.host_link_bandwidth  # device memory dwarfs PCIe
    assert spec.source


@pytest.mark.parametrize(
    "cc, warps, blocks, smem_kib",
    [("7.0", 64, 32, 96), ("7.5", 32, 16, 64), ("8.0", 64, 32, 164), ("8.6", 48, 16, 100), ("8.9", 48, 24, 100), ("9.0", 64, 32, 228)],
)
def test_sm_limits_match_the_programming_guide(cc, warps, blocks, smem_kib):
    limits = gpu_specs.sm_limits(cc)
    assert (limits.max_warps_per_sm, limits.max_blocks_per_sm) == (warps, blocks)
    assert limits.shared_mem_per_sm == smem_kib * 1024
    assert limits.registers_per_sm == 65536 and limits.max_registers_per_thread == 255


def test_allocation_granularity_changes_at_ampere():
    assert gpu_specs.sm_limits("7.5").shared_mem_alloc_unit == 256
    assert gpu_specs.sm_limits("7.5").reserved_shared_mem_per_block == 0
    assert gpu_specs.sm_limits("8.0").shared_mem_alloc_unit == 128
    assert gpu_specs.sm_limits("8.0").reserved_shared_mem_per_block == 1024


def test_lookup_by_name_is_case_insensitive_and_gives_limits():
    assert gpu_specs.gpu("h100") is gpu_specs.GPUS["H100"]
    assert gpu_specs.sm_limits("T4").max_threads_per_sm == 1024
    assert gpu_specs.sm_limits("A100").max_threads_per_sm == 2048


def test_h100_fp32_ridge_point():
    assert gpu_specs.gpu("H100").ridge_point_fp32 == pytest.approx(67e12 / 3.35e12)


@pytest.mark.parametrize("bad", ["GTX 480", "5.0"])
def test_unknown_names_raise_with_the_choices(bad):
    with pytest.raises(KeyError, match="T4"):
        gpu_specs.sm_limits(bad)


def test_memory_hierarchy_is_ordered_from_fast_and_small_to_slow_and_large():
    levels = gpu_specs.memory_hierarchy("A100")
    assert [level.name for level in levels] == ["registers", "shared memory", "L1 cache", "L2 cache", "global (DRAM/HBM)"]
    assert levels[0].size_bytes == 108 * 256 * 1024  # 64 K 4-byte registers per SM
    assert levels[3].size_bytes == 40 * 1024**2 and levels[4].bandwidth == 2039e9
    latencies = [level.latency_cycles for level in levels]
    assert all(low <= high for low, high in latencies)
    assert [low for low, _ in latencies] == sorted(low for low, _ in latencies)
    # 128 bytes per cycle per SM, 108 SMs at 1.41 GHz: about 19.5 TB/s of shared-memory bandwidth.
    assert abs(levels[1].bandwidth - 128 * 108 * 1.41e9) < 1
