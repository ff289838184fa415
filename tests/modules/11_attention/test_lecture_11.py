"""Lecture 11 (attention): its functions compute what torch computes, and the facts its text states hold.

The lecture's own run (tests/course/test_browser.py) checks its printed comparisons on the sizes it uses; here the
functions run on other sizes and blocks, and each number the prose states without printing it is derived again.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_helpers import REPO_ROOT, lecture_cell, run_lecture_cell
from gpucourse import attention, gpu_specs, wording

LECTURE = REPO_ROOT / "course" / "11_attention.py"


def markdown(marker: str) -> str:
    return " ".join(lecture_cell(LECTURE, marker, "markdown").split())


@pytest.fixture(scope="module")
def tiled():
    names, _ = run_lecture_cell(LECTURE, "def attention_tiled", math=math, np=np, F=F, torch=torch,
                                rng=np.random.default_rng(1))
    return names


@pytest.mark.parametrize("n, d, block", [(1, 8, 64), (65, 16, 64), (200, 32, 48), (130, 64, 128)])
def test_the_tiled_forward_matches_torch_on_sizes_the_lecture_does_not_use(tiled, n, d, block):
    q, k, v = (np.random.default_rng(n + i).standard_normal((n, d), dtype=np.float32) for i in range(3))
    expected = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v))).numpy()
    np.testing.assert_allclose(tiled["attention_tiled"](q, k, v, block), expected, atol=2e-6)
    np.testing.assert_allclose(tiled["attention_three_steps_numpy"](q, k, v), expected, atol=2e-6)


@pytest.mark.parametrize("length, block", [(12, 4), (13, 5), (100, 100), (7, 1)])
def test_the_online_statistics_end_at_the_log_sum_exp(length, block):
    names, _ = run_lecture_cell(LECTURE, "def online_statistics", math=math, torch=torch)
    row = torch.randn(length, generator=torch.Generator().manual_seed(length)) * 10
    m, total = names["online_statistics"](row, block)[-1]
    assert m == float(row.max())
    assert m + math.log(total) == pytest.approx(float(torch.logsumexp(row.double(), dim=0)), rel=1e-6)


def test_the_overflow_points_are_the_formats_largest_numbers():
    text = markdown("## 3. The safe softmax")
    assert "up to about 3.4·10³⁸" in text and "above about 88.7" in text and "(largest number 65504) overflows above 11.1" in text
    assert f"{torch.finfo(torch.float32).max:.1e}" == "3.4e+38" and round(math.log(torch.finfo(torch.float32).max), 1) == 88.7
    assert torch.finfo(torch.float16).max == 65504 and round(math.log(65504), 1) == 11.1
    assert "bf16 has float32's range but only 8 bits of mantissa" in markdown("## 9. Mixed precision")
    bf16, fp32 = torch.finfo(torch.bfloat16), torch.finfo(torch.float32)
    assert bf16.smallest_normal == fp32.smallest_normal and bf16.max == pytest.approx(fp32.max, rel=0.01)  # 8 exponent bits, both
    assert bf16.eps == 2**-7  # 7 stored mantissa bits and the implicit one


def test_the_intensities_the_roofline_section_states():
    text = markdown("## 2. On a GPU's roofline")
    assert "64 for fp16 at d = 128" in text and "about 128 FLOPs per byte in fp16, whatever n" in text
    n, d = 1 << 20, 128
    assert attention.forward_flops(n, d) / attention.standard_bytes(n, d, 2) == pytest.approx(64, rel=1e-3)
    for n in (8192, 1 << 20):
        assert attention.forward_flops(n, d) / attention.tiled_bytes(n, d, 2) == pytest.approx(128, rel=0.02)


def test_one_heads_keys_and_values_fit_in_an_a100s_l2():
    text = markdown("Re-reading K and V once per block")
    assert "(4 MiB in fp16) fit in an A100's 40 MB of L2" in text
    assert 2 * 8192 * 128 * 2 == 4 * 2**20 < gpu_specs.gpu("A100").l2_bytes


def test_the_decode_model_reads_the_weights_once_and_each_sequences_cache():
    names, _ = run_lecture_cell(LECTURE, "def decode_step(card", attention=attention)
    decode_step, card = names["decode_step"], gpu_specs.gpu("H100")
    for model, cache_per_token in ((attention.LLAMA2_7B, 512 * 1024), (attention.LLAMA3_8B, 128 * 1024)):  # bf16 keys and values
        (one, bound_one, weights_one, cache_one), (eight, bound_eight, weights_eight, cache_eight) = (
            decode_step(card, model, batch, 4096) for batch in (1, 8))
        assert weights_one == weights_eight == model.params * 2
        assert cache_one == 4096 * cache_per_token and cache_eight == 8 * cache_one
        assert bound_one == bound_eight == "memory"
        assert one == pytest.approx((weights_one + cache_one) / card.memory_bandwidth)
        assert 1 < one / (eight / 8) < 8  # the weights are shared, each cache is its own


@pytest.mark.parametrize("n", [100, 333])
def test_the_three_steps_keep_p_for_backward_and_sdpa_one_number_a_row(n):
    """The lecture's claim about the backward pass: the three steps keep Q, K, V and the n × n P; SDPA's CPU kernel keeps
    Q, K, V, its output and the log-sum-exp of each row."""
    names, _ = run_lecture_cell(LECTURE, "def attention_three_steps(q", math=math, torch=torch, F=F)
    saved_for_backward = run_lecture_cell(LECTURE, "def saved_for_backward", torch=torch, F=F, wording=wording,
                                          attention_three_steps=names["attention_three_steps"], WHERE="here")[0]["saved_for_backward"]
    q, k, v = (torch.randn(1, 1, n, 16, requires_grad=True) for _ in range(3))
    three = saved_for_backward(names["attention_three_steps"], q, k, v)
    sdpa = saved_for_backward(F.scaled_dot_product_attention, q, k, v)
    assert sorted(size for _, size in three) == sorted([n * 16 * 4] * 3 + [n * n * 4])  # views' shapes vary: the bytes
    assert sorted(size for _, size in sdpa) == sorted([n * 16 * 4] * 4 + [n * 4]) and ((1, 1, n), n * 4) in sdpa
