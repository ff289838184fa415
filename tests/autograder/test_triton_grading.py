"""A student's ``@triton.jit`` kernel, launched by a test as in Triton's tutorials, graded like a numba kernel:
its source checked to be nothing but definitions, compiled by Triton for sm_80 (no GPU needed), and run in a
kernel runner holding only that source (Triton's interpreter on a CPU grader); the tensors come back in place."""

import pytest

from autograder import harness, sandbox, skeleton, standins
from autograder.outcomes import Outcome
from autograder.skeleton import Plan

pytest.importorskip("triton")  # Linux x86-64 wheels only
pytestmark = pytest.mark.slow

LIMITS = sandbox.Limits(cell_seconds=30, item_seconds=60, notebook_seconds=300, memory_bytes=6 * 1024**3)

SETUP = """
import torch
from gpucourse import kernels
kernels.use_triton_gpu_or_interpreter(verbose=False)  # the interpreter where there is no GPU, as module 06 does
import triton
import triton.language as tl
"""
BIAS_GELU = """
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # a global must be a tl.constexpr for Triton's compiler

@triton.jit
def tanh(x):
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0

@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    y = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % n_cols, mask=mask)
    out = 0.5 * y * (1 + tanh((y + 0.044715 * y * y * y) * SQRT_2_OVER_PI))  # tensor first: the 3.9 interpreter
    # cannot multiply a constexpr by a tensor
    tl.store(out_ptr + offsets, out, mask=mask)
"""
# Falls back to torch inside the kernel: the interpreter would run it, no GPU would compile it.
CALLS_TORCH = """
@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    y = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % n_cols, mask=mask)
    tl.store(out_ptr + offsets, torch.nn.functional.gelu(y, approximate="tanh"), mask=mask)
"""
# Compiles, runs, and forgets the bias: a failed item, not a crash.
NO_BIAS = BIAS_GELU.replace(" + tl.load(bias_ptr + offsets % n_cols, mask=mask)", "")
# The student's process forges the kernel's source: a text that runs code where it is compiled.
FORGED_SOURCE = BIAS_GELU + """
import gpucourse.kernel_source as _source
_source.kernel_source = lambda kernel: _source.KernelSource(
    "bias_gelu_kernel", "import os\\nos.system('touch /tmp/forged')\\n", (None, None), language="triton")
"""
LAUNCH = """
torch.manual_seed(0)
x, bias = torch.randn(7, 37), torch.randn(37)
out = torch.zeros_like(x)
n = x.numel()
bias_gelu_kernel[(triton.cdiv(n, BLOCK),)](x, bias, out, n, 37, BLOCK=BLOCK)
torch.testing.assert_close(out, torch.nn.functional.gelu(x + bias, approximate="tanh"), rtol=1e-4, atol=1e-5)
"""


def _plan(kernel_cell: str, *blocks: int) -> Plan:
    items = [skeleton.TestItem(f"test_bias_gelu_{block}", 1.0, f"BLOCK = {block}\n" + LAUNCH) for block in blocks]
    return Plan(context=["import torch\nimport triton"], student_cells=[SETUP, kernel_cell], items=items, api_names=["bias_gelu_kernel"])


def _graded(tmp_path, kernel_cell: str, *blocks: int):
    (tmp_path / "work").mkdir()
    return harness.grade(_plan(kernel_cell, *blocks), tmp_path / "work", LIMITS)


def test_a_correct_kernel_fills_the_tests_tensor_and_is_compiled_once_per_signature(tmp_path, monkeypatch):
    compiled = []
    compile_report = standins.triton_compile_report
    monkeypatch.setattr(standins, "triton_compile_report", lambda *a, **k: compiled.append(a[2]) or compile_report(*a, **k))
    result = _graded(tmp_path, BIAS_GELU, 64, 64, 128)  # 37 * 7 = 259 elements: the masks cut the last block
    assert [item.outcome for item in result.items] == [Outcome.PASSED] * 3, result.items
    assert compiled == [{"BLOCK": 64}, {"BLOCK": 128}]
    by_signature = {kernel["signature"]: kernel for kernel in result.kernels}
    assert sorted(by_signature) == ["(*fp32, *fp32, *fp32, i32, i32, BLOCK=128)", "(*fp32, *fp32, *fp32, i32, i32, BLOCK=64)"]
    kernel = by_signature["(*fp32, *fp32, *fp32, i32, i32, BLOCK=64)"]
    assert kernel["kernel"] == "bias_gelu_kernel" and kernel["arch"] == "sm_80" and kernel["registers"] > 0 and kernel["num_warps"] == 4


def test_a_kernel_that_falls_back_to_torch_is_refused_with_its_line(tmp_path):
    [item] = _graded(tmp_path, CALLS_TORCH, 64).items
    assert item.outcome == Outcome.FAILED
    # line 6 of the cell as the worker runs it (the leading blank line of CALLS_TORCH dropped, as IPython does)
    assert "line 6: bias_gelu_kernel uses the global `torch` (the module torch)" in item.message, item.message


def test_a_kernel_that_compiles_but_is_wrong_fails_its_item(tmp_path):
    [item] = _graded(tmp_path, NO_BIAS, 64).items
    assert item.outcome == Outcome.FAILED and "Greatest relative difference" in item.message, item.message


def test_a_forged_source_is_refused_by_the_gate(tmp_path):
    [item] = _graded(tmp_path, FORGED_SOURCE, 64).items
    assert item.outcome == Outcome.FAILED
    assert "its source could not be checked (line 1 of the kernel's source imports os, which a Triton kernel may not use)" in item.message, item.message


# Runs in the interpreter, but Triton's compiler only takes globals that are tl.constexpr.
PLAIN_GLOBAL = BIAS_GELU.replace("SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)", "SQRT_2_OVER_PI = 0.7978845608028654")


def test_a_kernel_no_gpu_would_compile_fails_with_the_line_and_tritons_reason(tmp_path):
    [item] = _graded(tmp_path, PLAIN_GLOBAL, 64).items
    assert item.outcome == Outcome.FAILED
    assert item.message.startswith("bias_gelu_kernel would not compile for a GPU: line 12: uses the global SQRT_2_OVER_PI, "
                                   "which is not a tl.constexpr"), item.message
