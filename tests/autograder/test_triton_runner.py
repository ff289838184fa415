"""What the grader sees of Triton launches (modules 06 and 07), in Triton's interpreter: the launch ranges and a launcher's
count (gpucourse.gates.ops, both sides), the bounds checks (autograder.triton_runner, the grader's runners)."""

import pytest
import torch
import torch.nn.functional as F

triton = pytest.importorskip("triton")  # Linux x86-64 wheels only
import triton.language as tl  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

from autograder import triton_runner  # noqa: E402
from autograder.profiling import op_counts  # noqa: E402
from gpucourse.gates.ops import launched_ops, work_outside_kernels  # noqa: E402


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
    ops = launched_ops(launcher, x)
    assert ops.get("triton::_affine") == 1, ops
    assert work_outside_kernels(ops) == {}, ops  # the interpreter's copies sit inside the launch
    torch.testing.assert_close(launcher(x), x * 2.0 + 1.0)


def test_work_beside_the_kernel_is_seen():
    ops = launched_ops(half_in_torch, torch.randn(100))
    assert ops.get("triton::_affine") == 1 and work_outside_kernels(ops) == {"aten::sigmoid": 1}, ops
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
    ops = launched_ops(work_in_the_grid, torch.randn(100))
    assert ops.get("triton::_affine") == 1 and {"aten::mul", "aten::copy_"} <= set(work_outside_kernels(ops)), ops


def copies_beside_the_kernel(x):
    """A view op that copies inside (aten::contiguous of a transposed tensor runs aten::clone) before the launch."""
    out = torch.empty_like(x)
    affine_kernel[(2,)](x.view(10, 10).t().contiguous().view(-1), out, x.numel(), BLOCK=64)
    return out


@pytest.mark.parametrize("fn", [launcher, half_in_torch, work_in_the_grid, copies_beside_the_kernel])
def test_a_launchers_count_finds_work_where_the_graders_count_does(fn):
    """The notebook's count (gpucourse.gates.ops.launched_ops) leaves out what computing ops run inside; the grader's counts
    every op (autograder.profiling.op_counts): the same launches, and work outside the kernels in the same calls."""
    x = torch.randn(100)
    mine, graders = launched_ops(fn, x), op_counts(fn, x)
    assert {op: n for op, n in mine.items() if op.startswith("triton::")} == {op: n for op, n in graders.items() if op.startswith("triton::")}
    assert bool(work_outside_kernels(mine)) == bool(work_outside_kernels(graders)) == (fn is not launcher), (mine, graders)


def test_the_packages_counts_are_no_count_ops_answer():
    """Module 06 asks for every op of a call, nested ones included (count_ops): the grader's op_counts, not the package's counts."""
    from gpucourse.gates.ops import counted_top_level

    mlp = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU())
    for fn, args in [(torch.relu, (torch.randn(3, 4),)), (mlp, (torch.randn(5, 16),))]:
        every = op_counts(fn, *args)
        assert launched_ops(fn, *args) != every and counted_top_level(fn, *args)[1] != every, every
