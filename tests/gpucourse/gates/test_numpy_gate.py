"""gpucourse.gates.numpy_gate: which answer cells count as NumPy code alone (module 11's tiled attention)."""

from __future__ import annotations

import pytest

from gpucourse.gates.numpy_gate import NotNumpyOnly, check_numpy_only

BODY = "def f(q, k, v, block=64):\n    n, d = q.shape\n    {line}\n    return q\n"
ACCEPTED = {
    "blocks_and_matmul": BODY.format(line="s = q[0:block] @ k[0:block].T / np.float32(math.sqrt(d))"),
    "running_statistics": BODY.format(line="m = np.maximum(np.full(n, -np.inf), (q @ k.T).max(axis=1))"),
    "imports_and_constants": "import math\nimport numpy as np\n\nBLOCK = 64\n\n\ndef f(q):\n    return np.exp(q - q.max(axis=1)[:, np.newaxis])\n",
    "own_helper": ("def g(x):\n    return x.sum(axis=1)\n\n\n"
                   "def f(q):\n    out = np.zeros_like(q)\n    for i in range(len(q)):\n        out[i] = g(q)[i]\n    return out\n"),
    "causal_mask": BODY.format(line="s = np.where(np.arange(n)[:, np.newaxis] >= np.arange(n), q @ k.T, -np.inf)"),
}
REFUSED = {
    "torch_import": ("import torch\n\n\ndef f(q):\n    return q\n", "may import only numpy and math"),
    "from_import": ("from numpy import exp\n\n\ndef f(q):\n    return exp(q)\n", "`from numpy import ...`"),
    "torch_from_setup": (BODY.format(line="q = torch.from_numpy(q)"), "`.from_numpy` is not allowed"),
    "sdpa_from_setup": (BODY.format(line="q = F.scaled_dot_product_attention(q, k, v)"), "`.scaled_dot_product_attention` is not allowed"),
    "setup_name": (BODY.format(line="t = torch"), "`torch` is not defined in this cell"),
    "numpy_outside_the_list": (BODY.format(line="q = np.einsum('ij,kj->ik', q, k)"), "`np.einsum` is not allowed"),
    "ctypes_attribute": (BODY.format(line="p = q.ctypes"), "`.ctypes` is not allowed"),
    "dunder": (BODY.format(line="p = q.__array_interface__"), "private and special attributes"),
    "decorated": ("@staticmethod\ndef f(q):\n    return q\n", "has a decorator"),
    "annotation_runs_code": ("def f(q: print('hi')):\n    return q\n", "has annotations"),
    "lambda": (BODY.format(line="g = lambda x: x"), "Lambda is not allowed"),
    "comprehension": (BODY.format(line="xs = [x for x in q]"), "ListComp is not allowed"),
    "top_level_call": ("import numpy as np\nCACHE = np.zeros(3)\n\n\ndef f(q):\n    return q\n", "only imports, literal constants and functions"),
    "with_statement": (BODY.format(line="with open('x') as handle:\n        pass"), "a With statement is not allowed"),
    "attribute_assignment": (BODY.format(line="q.shape = (1, 1)"), "only local names"),
}


@pytest.mark.parametrize("cell", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_numpy_code_passes(cell):
    check_numpy_only(cell)


@pytest.mark.parametrize("cell, message", REFUSED.values(), ids=REFUSED.keys())
def test_anything_else_is_refused_with_its_line_named(cell, message):
    with pytest.raises(NotNumpyOnly, match=r"line \d+: .*" + message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        check_numpy_only(cell)
