"""autograder.triton_runner: what the grader sees of Triton launches (modules 06 and 07), in Triton's interpreter."""

import pytest
import torch
import torch.nn.functional as F

triton = pytest.importorskip("triton")  # Linux x86-64 wheels only
import triton.language as tl  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

from autograder import triton_runner  # noqa: E402
from autograder.profiling import op_counts  # noqa: E402


def _affine(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2.0 + 1.0, mask=offsets < n)


def _affine_unmasked_load(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) * 2.0 + 1.0, mask=offsets < n)


# Interpreted here whether or not the machine has a GPU, as on a CPU grader.
affine_kernel, unmasked_kernel = InterpretedFunction(_affine), InterpretedFunction(_affine_unmasked_load)


def launcher(x):
    out = torch.empty_like(x)
    affine_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out


def half_in_torch(x):
    out = torch.sigmoid(x)
    affine_kernel[(1,)](x, out, x.numel() // 2, BLOCK=64)
    return out


def work_in_the_grid(x):
    out = torch.empty_like(x)
    affine_kernel[lambda meta: (out.copy_(x * 2.0 + 1.0).numel() // 1000 + 1,)](x, out, 0, BLOCK=64)
    return out


def test_a_launch_counts_as_itself_and_the_interpreters_ops_do_not():
    x = torch.randn(100)
    ops = triton_runner.launched_ops(launcher, x)
    assert ops.get("triton::_affine") == 1, ops
    assert triton_runner.work_outside_kernels(ops) == {}, ops  # the interpreter's copies sit inside the launch
    torch.testing.assert_close(launcher(x), x * 2.0 + 1.0)


def test_work_beside_the_kernel_is_seen():
    ops = triton_runner.launched_ops(half_in_torch, torch.randn(100))
    assert ops.get("triton::_affine") == 1 and triton_runner.work_outside_kernels(ops) == {"aten::sigmoid": 1}, ops
    assert "triton::_affine" not in op_counts(lambda x: F.gelu(x), torch.randn(3))  # nothing launched, nothing counted


def test_an_unmasked_load_past_the_tensor_is_refused_and_a_masked_one_is_not():
    triton_runner.install_bounds_checks()
    x, out = torch.randn(100), torch.full((128,), float("nan"))
    affine_kernel[(2,)](x, out, 100, BLOCK=64)
    torch.testing.assert_close(out[:100], x * 2.0 + 1.0)
    with pytest.raises(Exception, match="outside every tensor"):
        unmasked_kernel[(2,)](x, out, 100, BLOCK=64)  # lanes 100-127 read past x's 100 values


def test_work_in_a_grid_function_is_the_launchers():
    """Triton calls a grid function inside the launch: what it computes is counted as the launcher's."""
    ops = triton_runner.launched_ops(work_in_the_grid, torch.randn(100))
    assert ops.get("triton::_affine") == 1 and {"aten::mul", "aten::copy_"} <= set(triton_runner.work_outside_kernels(ops)), ops
