"""gpucourse.gates.torch_gate: which answer cells the grader will count the ops of (module 06's fused_tail)."""

import math

import pytest
import torch
import torch.nn.functional as F
import triton

from gpucourse.gates.torch_gate import UncountableSource, check_countable


def tail_eager(x, bias, residual):
    return F.gelu(x + bias) * 0.7 + residual


SETUP = {"torch": torch, "F": F, "math": math, "SCALE": 0.7, "tail_eager": tail_eager, "np_module_like": math.__loader__}

COUNTABLE = {
    "decorated": "@torch.compile\ndef fused_tail(x, bias, residual):\n    return F.gelu(x + bias) * SCALE + residual\n",
    "decorated_with_options": "@torch.compile(fullgraph=True, dynamic=False, mode='max-autotune-no-cudagraphs')\n"
                              "def fused_tail(x, bias, residual):\n    return F.gelu(x + bias) * SCALE + residual\n",
    "assigned": "def _tail(x, bias, residual):\n    return F.gelu(x + bias) * SCALE + residual\n\nfused_tail = torch.compile(_tail)\n",
    "a_setup_function": "fused_tail = torch.compile(tail_eager, dynamic=False)",
    "by_hand": ("import torch\n\nHALF = 0.5\n\ndef fused_tail(x: torch.Tensor, bias, residual) -> torch.Tensor:\n"
                "    out = torch.empty_like(x)\n    for i in range(x.shape[0]):\n        y = x[i] + bias\n"
                "        out[i] = HALF * y * (1 + torch.erf(y / math.sqrt(2.0))) * SCALE + residual[i]\n"
                "    return out.contiguous()\n"),
    "aten_ops_and_a_lambda": "fused_tail = torch.compile(lambda x, b, r: torch.ops.aten.gelu(x + b) * SCALE + r)",
    "comprehension": "def f(xs):\n    return torch.stack([torch.relu(x) for x in xs if x.numel()])\n",
}

REFUSED = {
    "an import of os": ("import os\ndef f(x):\n    return x", "may import only torch"),
    "a private profiler call": ("def f(x):\n    torch.autograd.profiler._disable_profiler()\n    return x", "private"),
    "an attribute assignment": ("def f(x):\n    torch.profiler.profile = None\n    return x", "may be assigned to"),
    "a module-level patch": ("torch.profiler.profile = None\ndef f(x):\n    return x", "outside a function"),
    "reading the profiler": ("def f(x):\n    p = torch.profiler.profile\n    return x", "read as a constant"),
    "a non-operator torch function": ("def f(x):\n    return torch.autograd.grad(x, x)", "not one of torch's"),
    "process state": ("def f(x):\n    torch.set_num_threads(4)\n    return x", "not one of torch's"),
    "a mutable global": ("CACHE = {}\ndef f(x):\n    return x", "not a literal constant"),
    "a mutable default": ("def f(x, cache={}):\n    return x", "default argument"),
    "global": ("def f(x):\n    global y\n    return x", "Global"),
    "getattr": ("def f(x):\n    return getattr(torch, 'add')(x, x)", "`getattr` is not defined"),
    "a hook": ("def f(x):\n    x.register_hook(print)\n    return x", "callback"),
    "a dunder": ("def f(x):\n    return x.__class__", "private and special"),
    "an import inside": ("def f(x):\n    import os\n    return x", "Import"),
    "compile options": ("f = torch.compile(lambda x: x, options={'cpp.cxx': 'sh'})", "only literal"),
    "a compile backend": ("f = torch.compile(lambda x: x, backend='eager')", "only literal"),
    "the module as a value": ("def f(x):\n    t = torch\n    return x", "is a module"),
    "with": ("def f(x):\n    with torch.no_grad():\n        return x", "With"),
    "eval": ("def f(x):\n    return eval('x')", "`eval` is not defined"),
    "a setup module": ("def f(x):\n    return np_module_like", "not defined in this cell"),
    "a class": ("class A:\n    pass", "ClassDef"),
    "a call at the top": ("x = print(1)", "not a literal constant"),
    "an annotation that runs code": ("def f(x: print('hi')):\n    return x", "annotation"),
    "a walrus": ("def f(x):\n    return (y := x)", ":="),
    "a syntax error": ("def f(x:\n", "does not parse"),
    "arithmetic in numpy": ("def f(x):\n    return torch.from_numpy(x.numpy() * 2.0)", "takes the values out of torch"),
    "arithmetic in Python": ("def f(x):\n    return torch.tensor([v * 2.0 for v in x.tolist()])", "takes the values out of torch"),
}

# A Triton launcher's cell (modules 06 and 07): it may launch the given kernels and use triton.cdiv, nothing of triton else.
LAUNCHER_SETUP = {**SETUP, "triton": triton}
LAUNCHER = ("def launch(x):\n    out = torch.empty_like(x)\n    block = triton.next_power_of_2(64)\n"
            "    kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block)\n    return out\n")
LAUNCHER_REFUSED = {
    "torch.compile": ("launch = torch.compile(lambda x: F.gelu(x))", "may not use torch.compile"),
    "a compiled def": ("@torch.compile\ndef launch(x):\n    return F.gelu(x)", "decorated"),
    "the kernel's attributes": ("def launch(x):\n    return kernel.fn(x)", "launch it as kernel[grid]"),
    "other triton": ("def launch(x):\n    triton.runtime.driver.active.get_current_device()\n    return x", "only triton.cdiv"),
}


def test_a_launcher_may_launch_its_kernels():
    check_countable(LAUNCHER, LAUNCHER_SETUP, answers={"kernel"}, kernels={"kernel"})
    with pytest.raises(UncountableSource, match="not defined"):  # an answer cell that is no launcher: triton is not there
        check_countable(LAUNCHER, SETUP, answers={"kernel"})


@pytest.mark.parametrize("name", sorted(LAUNCHER_REFUSED))
def test_a_launcher_is_refused_what_would_hide_work(name):
    text, reason = LAUNCHER_REFUSED[name]
    with pytest.raises(UncountableSource, match="line") as refused:
        check_countable(text, LAUNCHER_SETUP, answers={"kernel"}, kernels={"kernel"})
    assert reason in str(refused.value), str(refused.value)


@pytest.mark.parametrize("name", sorted(COUNTABLE))
def test_countable_cells_pass(name):
    check_countable(COUNTABLE[name], SETUP)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_cells_name_the_line_and_the_reason(name):
    text, reason = REFUSED[name]
    with pytest.raises(UncountableSource, match="line") as refused:
        check_countable(text, SETUP)
    assert reason in str(refused.value), str(refused.value)


def test_countable_cells_count_what_they_run():
    """A cell that passes is real code: compiled, it runs and agrees with the eager chain."""
    namespace = dict(SETUP)
    exec(COUNTABLE["by_hand"], namespace)  # noqa: S102
    x, bias, residual = torch.randn(3, 4), torch.randn(4), torch.randn(3, 4)
    torch.testing.assert_close(namespace["fused_tail"](x, bias, residual), tail_eager(x, bias, residual))


def test_a_compiled_call_of_the_library_lstm_is_counted_as_written():
    """The gate lets torch.compile through; module 09 counts its answers with it switched off (``eager=True``), where
    a compiled call of torch.lstm_cell shows as aten::lstm_cell (compiled, it would run as addmm and pointwise ops)."""
    from gpucourse import check

    compiled = torch.compile(lambda x, h, c, w_ih, w_hh: torch.lstm_cell(x, (h, c), w_ih, w_hh))
    args = (torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4), torch.randn(16, 3), torch.randn(16, 4))
    _, ops = check.counted_call(compiled, *args, counter=check.top_level_ops, top_level=True, eager=True)
    assert "aten::lstm_cell" in ops, ops
