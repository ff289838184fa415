"""gpucourse.attention: the FLOP, byte and decoding models lecture 11 prints (modelled figures, checked by hand here)."""

import pytest

from gpucourse import attention, gpu_specs


def test_forward_flops_are_two_matmuls_and_causal_keeps_the_lower_triangle():
    assert attention.forward_flops(1024, 64) == 4 * 1024 * 1024 * 64
    assert attention.forward_flops(4, 8, causal=True) == 4 * (4 + 3 + 2 + 1) * 8


def test_the_standard_forward_moves_the_scores_and_the_weights_twice():
    # Q, K, V, O: 4 * 10 * 2 numbers; S and P written and read back: 4 * 10 * 10; 2 bytes each
    assert attention.standard_bytes(10, 2, 2) == 2 * (80 + 400)


def test_the_tiled_forward_rereads_k_and_v_once_per_block_of_queries():
    # 300 queries in blocks of 128: 3 blocks, so K and V are read 3 times; Q read and O written once
    assert attention.tiled_bytes(300, 64, 2, block_q=128) == 2 * (2 * 300 * 64 + 3 * 2 * 300 * 64)
    assert attention.tiled_bytes(300, 64, 2, block_q=300) == 2 * 4 * 300 * 64  # one block: every tensor once
    with pytest.raises(ValueError, match="block_q must be positive"):
        attention.tiled_bytes(300, 64, 2, block_q=0)


def test_the_tiled_forward_has_no_n_squared_term_and_saves_traffic_at_long_sequences():
    small, large = (attention.tiled_bytes(n, 128, 2, block_q=n) for n in (1024, 2048))
    assert large == 2 * small
    assert attention.tiled_bytes(8192, 128, 2) < attention.standard_bytes(8192, 128, 2) / 1.9


def test_roofline_seconds_takes_the_slower_of_compute_and_memory():
    h100 = gpu_specs.gpu("H100")
    seconds, bound = attention.roofline_seconds("H100", 0.0, h100.memory_bandwidth, "fp16")
    assert (seconds, bound) == (1.0, "memory")
    peak = gpu_specs.peak_flops(h100, "bf16")
    assert attention.roofline_seconds(h100, 2 * peak, 1.0, "bf16") == (2.0, "compute")
    with pytest.raises(ValueError, match="no BF16 tensor cores"):
        attention.roofline_seconds("T4", 1.0, 1.0, "bf16")


def test_a_decode_step_reads_the_weights_once_and_each_sequences_cache():
    model, card = attention.LLAMA2_7B, gpu_specs.gpu("H100")
    assert model.kv_bytes_per_token() == 2 * 32 * 4096 * 2 == 512 * 1024
    one, many = attention.decode_step(card, model, 1, 4096), attention.decode_step(card, model, 8, 4096)
    assert one.weight_bytes == many.weight_bytes == model.params * 2
    assert many.cache_bytes == 8 * one.cache_bytes == 8 * 4096 * 512 * 1024
    assert one.bound == many.bound == "memory"
    assert one.seconds == pytest.approx((one.weight_bytes + one.cache_bytes) / card.memory_bandwidth)
    assert 1 < one.seconds_per_token / many.seconds_per_token < 8  # shared weights, but each cache is its own
    with pytest.raises(ValueError, match="batch must be positive"):
        attention.decode_step(card, model, 0, 10)
