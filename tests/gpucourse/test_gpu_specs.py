"""gpucourse.gpu_specs: the GPU table's figures against NVIDIA's programming guide and datasheets, and its lookups."""

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


# Dense peaks in TFLOP/s (TOPS for int8) as the datasheets give them, None where the card has no such unit.
# V100 and T4 print dense figures (no sparsity before Ampere); A100 prints dense | sparse; L4, H100 and H200
# print only figures with sparsity, halved here (see SPARSE_TFLOPS below).
DENSE_TFLOPS = {
    "V100": {"fp32": 15.7, "tf32": None, "bf16": None, "fp16": 125, "fp8": None, "int8": None},
    "T4": {"fp32": 8.1, "tf32": None, "bf16": None, "fp16": 65, "fp8": None, "int8": 130},
    "A100": {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312, "fp8": None, "int8": 624},
    "L4": {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5, "int8": 242.5},
    "H100": {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979, "int8": 1979},
    "H200": {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979, "int8": 1979},
}
# The "with sparsity" figures the datasheets print, in TFLOP/s (TOPS for int8).
SPARSE_TFLOPS = {
    "A100": {"tf32": 312, "bf16": 624, "fp16": 624, "int8": 1248},
    "L4": {"tf32": 120, "bf16": 242, "fp16": 242, "fp8": 485, "int8": 485},
    "H100": {"tf32": 989, "bf16": 1979, "fp16": 1979, "fp8": 3958, "int8": 3958},
    "H200": {"tf32": 989, "bf16": 1979, "fp16": 1979, "fp8": 3958, "int8": 3958},
}


def test_the_peak_table_covers_every_card_and_precision():
    assert set(DENSE_TFLOPS) == set(gpu_specs.GPUS)
    assert all(set(row) == set(gpu_specs.PRECISION_FIELDS) for row in DENSE_TFLOPS.values())


@pytest.mark.parametrize("name", list(DENSE_TFLOPS))
def test_dense_peaks_are_the_cited_figures(name):
    spec = gpu_specs.gpu(name)
    for precision, expected in DENSE_TFLOPS[name].items():
        stored = getattr(spec, gpu_specs.PRECISION_FIELDS[precision])
        if expected is None:
            assert stored is None, f"{name} {precision}: expected no unit (None), got {stored}"
        else:
            assert stored == pytest.approx(expected * 1e12, rel=1e-12), f"{name} {precision}: expected {expected} TFLOP/s, got {stored / 1e12}"
            assert gpu_specs.peak_flops(name, precision) == stored


@pytest.mark.parametrize("name", list(SPARSE_TFLOPS))
def test_dense_peaks_are_half_the_datasheets_sparse_figures(name):
    for precision, sparse in SPARSE_TFLOPS[name].items():
        dense = gpu_specs.peak_flops(name, precision)
        assert 2 * dense == pytest.approx(sparse * 1e12, rel=1e-12), f"{name} {precision}: {dense / 1e12} TFLOP/s is not half of {sparse}"


@pytest.mark.parametrize("name", list(gpu_specs.GPUS))
def test_peaks_are_ordered_by_precision_where_the_card_has_them(name):
    peaks = {precision: gpu_specs.peak_flops(name, precision) for precision in gpu_specs.precisions(name)}
    if "bf16" in peaks:
        assert peaks["bf16"] == peaks["fp16"], f"{name}: BF16 and FP16 share one tensor-core rate, got {peaks}"
    ladder = [peaks[precision] for precision in ("fp8", "fp16", "tf32", "fp32") if precision in peaks]
    assert ladder == sorted(ladder, reverse=True) and len(set(ladder)) == len(ladder), f"{name}: {peaks}"


def test_which_precisions_each_card_has():
    assert gpu_specs.precisions("V100") == ["fp32", "fp16"]
    assert gpu_specs.precisions("t4") == ["fp32", "fp16", "int8"]
    assert gpu_specs.precisions("A100") == ["fp32", "tf32", "bf16", "fp16", "int8"]
    assert gpu_specs.precisions(gpu_specs.gpu("H200")) == list(gpu_specs.PRECISION_FIELDS)


def test_peak_flops_takes_a_card_or_its_name_and_any_case():
    assert gpu_specs.peak_flops("a100", " TF32 ") == gpu_specs.peak_flops(gpu_specs.gpu("A100"), "tf32") == 156e12
    assert gpu_specs.peak_flops("T4", "fp16") == gpu_specs.gpu("T4").fp16_tensor_flops  # the old field still works


@pytest.mark.parametrize("name, precision", [("V100", "tf32"), ("V100", "bf16"), ("V100", "fp8"), ("T4", "tf32"), ("T4", "bf16"), ("A100", "fp8")])
def test_a_missing_unit_is_an_error_naming_what_the_card_has(name, precision):
    with pytest.raises(ValueError, match=rf"the {name} has no {precision.upper()} tensor cores; it has fp32, "):
        gpu_specs.peak_flops(name, precision)


@pytest.mark.parametrize("precision", ["fp64", "fp4", "float32", ""])
def test_an_unknown_precision_is_an_error_listing_the_known_ones(precision):
    with pytest.raises(ValueError, match="unknown precision .*expected one of fp32, tf32, bf16, fp16, fp8, int8"):
        gpu_specs.peak_flops("H100", precision)


def test_an_unknown_card_is_a_key_error():
    with pytest.raises(KeyError, match="unknown GPU 'B200'"):
        gpu_specs.peak_flops("B200", "fp16")


@pytest.mark.parametrize(
    "name, tf32_allowed, expected",
    [("A100", True, "tf32"), ("A100", False, "fp32"), ("H100", True, "tf32"), ("L4", True, "tf32"), ("V100", True, "fp32"), ("T4", True, "fp32")],
)
def test_a_float32_matmul_is_compared_with_tf32_only_where_it_can_run_on_tf32(name, tf32_allowed, expected):
    assert gpu_specs.float32_matmul_precision(name, tf32_allowed) == expected


@pytest.mark.parametrize(
    "device_name, expected",
    [
        ("Tesla T4", "T4"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", None),  # a different card, not an L4
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_card_for_finds_the_table_card_a_driver_name_names_and_nothing_else(device_name, expected):
    card = gpu_specs.card_for(device_name)
    assert (card.name if card else None) == expected, f"card_for({device_name!r}) gave {card and card.name}, expected {expected}"
