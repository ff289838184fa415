"""The grader's check that a kernel's source (from the student's process) is nothing but definitions
before NVIDIA's compiler is run on it: what the course's extraction emits passes, a forged text does not."""

import pytest

from autograder.kernel_gate import UncheckableSource, check_definitions_only


@pytest.fixture(scope="module")
def kernels(simulated_cuda):
    import compiler_kernels

    return compiler_kernels


@pytest.mark.parametrize("name", ["transpose", "scale", "scale_through_alias", "accidental_float64", "float32_only",
                                  "per_thread_array", "uses_limits", "bounces", "computed_shape", "appends_to_list"])
def test_what_the_extraction_emits_is_accepted(kernels, name):
    from gpucourse.kernel_source import kernel_source

    check_definitions_only(kernel_source(getattr(kernels, name)).text)


KERNEL = "@cuda.jit\ndef k(x):\n    x[0] = 1\n"
FORGED = {
    "a default argument runs code": "import numba.cuda as cuda\n@cuda.jit\ndef k(x, y=__import__('os').system('id')):\n    pass\n",
    "another decorator": "import numba.cuda as cuda\nimport numpy as np\n@np.vectorize\ndef k(x):\n    pass\n",
    "a decorator call with code": "import numba.cuda as cuda\n@cuda.jit(device=print('hi'))\ndef k(x):\n    pass\n",
    "cuda rebound to something else": "import numba.cuda as cuda\ncuda = 5\n" + KERNEL,
    "an import of os": "import os\nimport numba.cuda as cuda\n" + KERNEL,
    "a call of a numpy function": "import numba.cuda as cuda\nimport numpy as np\nX = np.load('/etc/passwd')\n" + KERNEL,
    "a call of a builtin": "import numba.cuda as cuda\nX = open('/etc/passwd')\n" + KERNEL,
    "an expression statement": "import numba.cuda as cuda\nprint('hi')\n" + KERNEL,
    "an annotation evaluated": "import numba.cuda as cuda\n@cuda.jit\ndef k(x: print('hi')):\n    pass\n",
    "a class": "import numba.cuda as cuda\nclass K:\n    pass\n" + KERNEL,
    "a relative import": "from . import secrets\nimport numba.cuda as cuda\n" + KERNEL,
    "an attribute of a function": "import numba.cuda as cuda\nfrom math import sqrt as s\nX = s.__globals__\n" + KERNEL,
    "not Python": "import numba.cuda as cuda\n@cuda.jit\ndef k(x:\n",
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_forged_source_is_refused(case):
    with pytest.raises(UncheckableSource):
        check_definitions_only(FORGED[case])


def test_constants_the_extraction_emits_are_accepted():
    check_definitions_only("import numpy as _gc_numpy\nimport numba.core.types as _gc_numba_types\nimport numba.cuda as cuda\n"
                           "A = (1, 2.5, float('inf'), complex(1.0, 2.0), None, 'x')\nB = _gc_numpy.float32(0.5)\nC = _gc_numpy.int64\n"
                           "D = _gc_numba_types.float32\n" + KERNEL)


# ---------------------------------------------------------------------------------------------
# Triton kernels (gpucourse.triton_source, then the gate's Triton rules)


@pytest.fixture(scope="module", params=["jit", "interpreted"])
def triton_kernels(request):
    """The test kernels as ``@triton.jit`` returns them on a GPU and in the interpreter (which wraps the same function)."""
    pytest.importorskip("triton")
    from triton.runtime.interpreter import InterpretedFunction

    import triton_kernels

    if request.param == "jit":
        return triton_kernels
    return type("Interpreted", (), {name: InterpretedFunction(value.fn) if hasattr(value, "fn") and hasattr(value, "params") else value
                                    for name, value in vars(triton_kernels).items()})


def test_a_triton_kernels_source_holds_what_it_reaches_and_passes_the_gate(triton_kernels):
    from gpucourse.kernel_source import kernel_source

    source = kernel_source(triton_kernels.scale)
    assert source.language == "triton" and source.name == "scale"
    assert source.text.splitlines()[:4] == ["from triton.language import sigmoid", "import triton", "import triton.language as tl",
                                            "SCALE = triton.language.constexpr(2.0)"]  # tl.sigmoid, a @triton.jit of Triton's, is imported
    assert source.text.index("def double(") < source.text.index("def scale(")
    line = source.text.splitlines().index("    mask = offsets < n") + 1
    assert source.origin(line).function == "scale" and source.origin(line).filename.endswith("triton_kernels.py")
    check_definitions_only(source.text, "triton")
    alias = kernel_source(triton_kernels.through_alias).text
    assert "twice = double" in alias and "PLAIN = 3" in alias  # a plain global: Triton's compiler says it wants a tl.constexpr
    check_definitions_only(alias, "triton")
    annotated = kernel_source(triton_kernels.does_nothing).text
    assert "import triton.language as tl" in annotated  # BLOCK: tl.constexpr reads tl when the def runs
    check_definitions_only(annotated, "triton")


@pytest.mark.parametrize("name, message", [
    ("falls_back_to_torch", "line 40: falls_back_to_torch uses the global `torch` (the module torch)"),
    ("reads_a_list", "line 45: reads_a_list uses the global `BUFFER` (a list)"),
    ("with_options", "with_options passes options to @triton.jit (noinline=True)"),
])
def test_a_triton_kernel_that_reaches_beyond_triton_is_refused_with_its_line(name, message):
    pytest.importorskip("triton")
    import triton_kernels
    from gpucourse.kernel_source import KernelSourceError, kernel_source

    with pytest.raises(KernelSourceError) as refused:
        kernel_source(getattr(triton_kernels, name))
    assert str(refused.value).startswith(message), refused.value


TRITON = "import triton\nimport triton.language as tl\n"
TRITON_KERNEL = "@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n    tl.store(x_ptr, 1.0)\n"
FORGED_TRITON = {
    "an import of torch": ("import torch\n" + TRITON + TRITON_KERNEL, "line 1 of the kernel's source imports torch"),
    "a statement that runs": (TRITON + "print('hi')\n" + TRITON_KERNEL, "line 3 of the kernel's source is not a definition (Expr)"),
    "another decorator": (TRITON + TRITON_KERNEL.replace("@triton.jit", "@triton.autotune([], [])"), "not decorated with @triton.jit alone"),
    "an annotation that runs": (TRITON + TRITON_KERNEL.replace("tl.constexpr", "print('hi')"), "annotations other than tl.constexpr"),
    "a default that runs": (TRITON + TRITON_KERNEL.replace("BLOCK: tl.constexpr", "BLOCK=print('hi')"), "has default arguments"),
    "a dunder in the body": (TRITON + TRITON_KERNEL.replace("tl.store(x_ptr, 1.0)", "tl.__builtins__['exec']('1')"),
                             "line 5 of the kernel's source: k reads the attribute __builtins__"),
    "getattr in the body": (TRITON + TRITON_KERNEL.replace("tl.store(x_ptr, 1.0)", "getattr(tl, 'core')"), "k uses the name getattr"),
    "an import in the body": (TRITON + TRITON_KERNEL.replace("tl.store(x_ptr, 1.0)", "import os"), "k holds a Import"),
    "a constant that calls": (TRITON + "C = tl.constexpr(print('hi'))\n" + TRITON_KERNEL, "line 3 of the kernel's source is not a plain constant"),
}


@pytest.mark.parametrize("case", sorted(FORGED_TRITON))
def test_a_forged_triton_source_is_refused(case):
    text, message = FORGED_TRITON[case]
    with pytest.raises(UncheckableSource, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        check_definitions_only(text, "triton")
    check_definitions_only(TRITON + TRITON_KERNEL, "triton")  # the same text without the forgery passes
