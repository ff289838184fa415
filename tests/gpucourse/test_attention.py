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


def test_the_decoders_have_their_configs_sizes():
    """Llama 2 7B: a key-value head per query head, hidden size 4096; Llama 3 8B: the same, with 8 key-value heads."""
    for model, kv_heads in ((attention.LLAMA2_7B, 32), (attention.LLAMA3_8B, 8)):
        assert (model.layers, model.heads, model.kv_heads, model.heads * model.head_dim) == (32, 32, kv_heads, 4096)
        assert f"{model.kv_heads} key-value heads" in model.source
