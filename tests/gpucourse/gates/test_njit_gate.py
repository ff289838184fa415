"""gpucourse.gates.njit_gate: which answer cells count as the student's own compiled loops (module 07)."""

from __future__ import annotations

import re

import nbformat
import pytest

from course_helpers import source
from gpucourse.gates.njit_gate import NotOwnLoops, check_own_loops

ANSWERS = ("matmul_reordered", "matmul_blocked", "matmul_tensorized")


def reference_cell(grade_id: str) -> str:
    notebook = nbformat.read(source("07_ml_compilation"), as_version=4)
    [cell] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION\n", "", cell.source, flags=re.M)  # a block may sit in a body, indented


@pytest.mark.parametrize("grade_id", ANSWERS)
def test_the_reference_answers_pass(grade_id):
    check_own_loops(reference_cell(grade_id))


LOOP = "@njit\ndef f(a, b):\n    c = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)\n    {line}\n    return c\n"
ACCEPTED = {
    "options": "from numba import njit\nimport numpy as np\n\n@njit(fastmath=True, boundscheck=False)\ndef f(a):\n    return a.copy()\n",
    "numba_njit": "import numba\n\n@numba.njit\ndef f(a):\n    return a.shape[0]\n",
    "row_views": LOOP.format(line="c[0, :] += a[0, 0] * b[0, :]"),
    "helper_in_the_cell": "@njit\ndef g(x):\n    return x + 1\n\n@njit\ndef f(a, mma):\n    mma(a, a, a)\n    return g(a.shape[0])\n",
    "constants_and_math": "TILE = 16\n\n@njit\ndef f(n):\n    return math.ceil(n / TILE) * TILE\n",
}
REFUSED = {
    "matmul_operator": (LOOP.format(line="c = a @ b"), "`@` is NumPy's matmul"),
    "np_dot": (LOOP.format(line="c = np.dot(a, b)"), "`np.dot` is not allowed"),
    "np_linalg": (LOOP.format(line="c = np.linalg.multi_dot([a, b])"), "not allowed"),
    "dot_method": (LOOP.format(line="c = a.dot(b)"), "`.dot` is not allowed"),
    "einsum": (LOOP.format(line="c = np.einsum('ik,kj->ij', a, b)"), "`np.einsum` is not allowed"),
    "not_compiled": ("def f(a, b):\n    return a\n", "must be compiled with @njit"),
    "parallel": ("@njit(parallel=True)\ndef f(a):\n    return a\n", "may take only literal"),
    "objmode": ("from numba import objmode\n", "imports numba.objmode"),
    "with_block": ("@njit\ndef f(a):\n    with g():\n        pass\n    return a\n", "With statement"),
    "setup_function": ("@njit\ndef f(a, b):\n    return matmul_ikj(a, b)\n", "`matmul_ikj` is not defined in this cell"),
    "attribute_assignment": ("@njit\ndef f(a):\n    np.zeros = a\n    return a\n", "only local names"),
    "global_rebinding": ("matmul_blocked = lambda a, b, tile=64: a @ b\n", "may stand outside a function"),
    "other_import": ("import scipy.linalg\n", "imports scipy.linalg"),
    "comprehension": ("@njit\ndef f(a):\n    return [x for x in range(3)]\n", "ListComp"),
    "private_attribute": ("@njit\ndef f(a):\n    return a.__class__\n", "private and special"),
    "nested_function": ("@njit\ndef f(a):\n    def g():\n        return 1\n    return g()\n", "FunctionDef statement"),
    "two_decorators": ("@njit\n@njit\ndef f(a):\n    return a\n", "must be compiled with @njit"),
    # Annotations run as Python when the def runs, in the runner that times the loops.
    "annotation_call": ('@njit\ndef f(a: __import__("os").getpid()):\n    return a\n', "f has annotations"),
    "return_annotation": ("@njit\ndef f(a) -> print(1):\n    return a\n", "f has annotations"),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted(name):
    check_own_loops(ACCEPTED[name])


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_with_the_line(name):
    text, reason = REFUSED[name]
    with pytest.raises(NotOwnLoops, match=re.escape(reason)) as refused:
        check_own_loops(text)
    assert "line " in str(refused.value)
