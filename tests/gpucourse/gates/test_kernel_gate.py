"""The grader's check that a kernel's source (from the student's process) is nothing but definitions
before NVIDIA's compiler is run on it: what the course's extraction emits passes, a forged text does not."""

import pytest

from course_helpers import run_cells
from gpucourse.gates.kernel_gate import UncheckableSource, check_definitions_only


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
    "arithmetic that runs": "import numba.cuda as cuda\nX = 10 ** 10 ** 10\n" + KERNEL,  # the extraction writes values, never sums
    "a mutable constant": "import numba.cuda as cuda\nX = [1, 2]\n" + KERNEL,  # gpucourse.gates.syntax.is_literal: no lists
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


# ---------------------------------------------------------------------------------------------
# What a kernel's source must not depend on, and where it must come from (issue 47)


def worker_source(name, *cells):
    """``name``'s source as the student's worker emits it, after running ``cells``."""
    from gpucourse.kernel_source import kernel_source

    return kernel_source(run_cells(*cells)[name])


IMPORTS = "import math\nimport numba\nimport numpy as np\nfrom numba import cuda\n"
SIMULATED_FLAG = "SIMULATED = True\n"
ASKS = {  # a kernel body's first line -> what the refusal names
    "if numba.config.ENABLE_CUDASIM:": "reads numba's configuration (`numba.config.ENABLE_CUDASIM`)",
    "if numba.core.config.ENABLE_CUDASIM:": "reads numba's configuration (`numba.core.config.ENABLE_CUDASIM`)",
    "if numba.cuda.simulator_init is not None:": "reads `numba.cuda.simulator_init`, which only numba's simulator defines",
    "if numba.cuda.simulator is not None:": "reads `numba.cuda.simulator`, which only numba's simulator defines",
    "if cuda.__class__ is not None:": "reads `cuda.__class__`, a private attribute",
    "if SIMULATED:": "reads the device flag SIMULATED",
}


@pytest.mark.parametrize("asks", sorted(ASKS))
def test_a_kernel_that_asks_whether_it_is_simulated_is_refused_with_its_line(simulated_cuda, asks):
    from gpucourse.gates.kernel_gate import RefusedSource, check_runs_alike

    cell = IMPORTS + SIMULATED_FLAG + f"\n@cuda.jit\ndef k(x):\n    {asks}\n        x[0] = 1\n"
    source = worker_source("k", cell)
    check_definitions_only(source.text)  # what the extraction emits: only the new check refuses it
    with pytest.raises(RefusedSource) as refused:
        check_runs_alike(source)
    assert str(refused.value) == f"k {ASKS[asks]} (line 9: `{asks}`): a kernel may not depend on whether it runs in numba's simulator"


def test_a_simulator_only_function_imported_by_name_is_refused():
    from gpucourse.gates.kernel_gate import RefusedSource, check_runs_alike
    from gpucourse.kernel_source import KernelSource

    text = "import numba.cuda as cuda\nfrom numba.cuda import is_signature as check\n" + KERNEL
    with pytest.raises(RefusedSource, match="k uses `numba.cuda.is_signature`, which only numba's simulator defines"):
        check_runs_alike(KernelSource("k", text, ()))


def test_honest_kernels_do_not_ask_whether_they_are_simulated(kernels):
    from gpucourse.gates.kernel_gate import check_runs_alike
    from gpucourse.kernel_source import KernelSource, kernel_source

    for name in ("transpose", "scale", "scale_through_alias", "per_thread_array", "uses_limits", "bounces", "computed_shape"):
        check_runs_alike(kernel_source(getattr(kernels, name)))
    local_flag = "import numba.cuda as cuda\n@cuda.jit\ndef k(x, SIMULATED):\n    if SIMULATED:\n        x[0] = 1\n"
    check_runs_alike(KernelSource("k", local_flag, ()))  # a parameter of that name is the kernel's own


def test_the_simulator_only_names_are_those_of_the_installed_numba():
    """SIMULATOR_ONLY holds every public name that numba's simulator defines on numba.cuda, or on the stand-in a simulated
    kernel sees, and a compiled kernel's numba.cuda does not (a submodule it loads when asked, fp16, does not count)."""
    import json
    import os
    import subprocess
    import sys

    from gpucourse.gates.kernel_gate import SIMULATOR_ONLY

    def names(simulated: str, code: str) -> set[str]:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "NUMBA_ENABLE_CUDASIM": simulated})
        return set(json.loads(run.stdout.strip().splitlines()[-1]))

    simulated = names("1", "import json, numba.cuda as c\nfrom numba.cuda.simulator.kernelapi import FakeCUDAModule\n"
                           "print(json.dumps(sorted(set(dir(c)) | set(dir(FakeCUDAModule((1, 1, 1), (1, 1, 1), 0))))))")
    compiled = names("0", "import json, importlib.util, numba.cuda as c\n"
                          f"submodules = {{n for n in {sorted(simulated)!r} if not n.startswith('_') and importlib.util.find_spec('numba.cuda.' + n)}}\n"
                          "print(json.dumps(sorted(set(dir(c)) | submodules)))")
    only_simulated = {name for name in simulated - compiled if not name.startswith("_")}
    assert only_simulated and only_simulated <= SIMULATOR_ONLY, sorted(only_simulated - SIMULATOR_ONLY)


SETUP_CELL = IMPORTS + "TILE = 32\nSCALE = np.float32(0.5)\n"
SETUP = {"math": __import__("math"), "np": __import__("numpy"), "TILE": 32, "SCALE": __import__("numpy").float32(0.5)}
USES_SETUP = "\n@cuda.jit\ndef k(x):\n    x[0] = TILE * SCALE * math.pi\n"


def test_a_setup_name_the_notebook_rebinds_is_refused(simulated_cuda):
    from gpucourse.gates.kernel_gate import RefusedSource, check_setup_names

    check_setup_names(worker_source("k", SETUP_CELL, USES_SETUP), SETUP, [SETUP_CELL])
    check_setup_names(worker_source("k", SETUP_CELL, "TILE = 32\n" + USES_SETUP), SETUP, [SETUP_CELL])  # the same value again
    with pytest.raises(RefusedSource) as refused:
        check_setup_names(worker_source("k", SETUP_CELL, "TILE = 16\n" + USES_SETUP), SETUP, [SETUP_CELL])
    assert str(refused.value) == ("k uses TILE as your notebook rebinds it (`TILE = 16`), not as the assignment's setup defines it "
                                  "(`TILE = 32`): kernels are graded with the setup's names; give yours another name")
    with pytest.raises(RefusedSource, match=r"uses math as your notebook rebinds it \(`import numpy as math`\)"):
        check_setup_names(worker_source("k", SETUP_CELL, "math = np\n" + USES_SETUP.replace("math.pi", "math.float32(3)")), SETUP, [SETUP_CELL])
    with pytest.raises(RefusedSource, match=r"uses TILE as your notebook rebinds it \(`def TILE\(\.\.\.\)`\)"):
        check_setup_names(worker_source("k", SETUP_CELL, "@cuda.jit(device=True)\ndef TILE():\n    return 8\n"
                                        + USES_SETUP.replace("TILE *", "TILE() *")), SETUP, [SETUP_CELL])


HELPER_CELL = "from numba import cuda\n\n\n@cuda.jit(device=True)\ndef twice(v):\n    return 2 * v  # a comment\n"
KERNEL_CELLS = {
    "a kernel calling a device function of another cell": "@cuda.jit\ndef k(x):\n    x[0] = twice(x[0])\n",
    "an explicit signature": "@cuda.jit('void(float32[:])')\ndef k(x):\n\n    x[0] = twice(x[0])\n",
    "a decorator over several lines": "@cuda.jit(\n    'void(float32[:])',\n)\ndef k(x):\n    x[0] = twice(x[0])\n",
    "a kernel indented in an if": "if True:\n    @cuda.jit\n    def k(x):\n        x[0] = twice(x[0])\n",
    "a kernel decorated by a call": "def k(x):\n    x[0] = twice(x[0])\n\n\nk = cuda.jit(k)\n",
}


@pytest.mark.parametrize("case", sorted(KERNEL_CELLS))
def test_functions_defined_in_the_notebooks_cells_are_found_there(simulated_cuda, case):
    from gpucourse.gates.kernel_gate import check_in_cells

    check_in_cells(worker_source("k", HELPER_CELL, KERNEL_CELLS[case]), [HELPER_CELL, KERNEL_CELLS[case]])


def test_a_function_built_with_exec_is_refused_whatever_linecache_says(simulated_cuda):
    """The planted text is what inspect reads in the student's process; it is no `def` of any cell."""
    from gpucourse.gates.kernel_gate import RefusedSource, check_in_cells

    shown = "def k(x):\n    x[0] = twice(x[0])\n"
    cell = (f"import linecache\n_SHOWN = {shown!r}\nlinecache.cache['<k>'] = (len(_SHOWN), None, _SHOWN.splitlines(True), '<k>')\n"
            "exec(compile(_SHOWN.replace('twice(x[0])', '0.0'), '<k>', 'exec'))\nk = cuda.jit(k)\n")
    source = worker_source("k", HELPER_CELL, cell)
    assert "twice(x[0])" in source.text  # graded on the planted text, which never ran
    with pytest.raises(RefusedSource, match=r"^k: its source is not in any cell of the notebook"):
        check_in_cells(source, [HELPER_CELL, cell])
    edited = KERNEL_CELLS["a kernel calling a device function of another cell"]
    with pytest.raises(RefusedSource, match=r"^twice: its source is not in any cell"):  # a device function's text counts too
        check_in_cells(worker_source("k", HELPER_CELL, edited), [HELPER_CELL.replace("2 * v", "3 * v"), edited])
