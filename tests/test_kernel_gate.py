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
