"""The grader's check on an answer cell that must be NumPy code alone (module 11: ``flash_attention_forward``).

The item grades an algorithm written with NumPy arrays: how it loops over blocks and what it allocates. So the answer
must be that code and nothing else: not torch (``F.scaled_dot_product_attention`` would do the work in a library
kernel), not a call into other code. The grader runs such a function in a fresh process holding only the assignment's
setup cells and this cell (:meth:`autograder.standins.StudentFunction.numpy_only`), after this check: the walk of
:mod:`.njit_gate` (the same scope, loads, calls and attributes), with these differences:

- at the top of the cell: imports of ``numpy`` and ``math`` (``import``, not ``from``); literal constants; plain
  functions, without decorators;
- inside functions: ``@`` is allowed (a block's matmul is NumPy's), and more of NumPy: the functions and array
  attributes listed below;
- nowhere: private or special names, attribute assignment, ``global``, ``with``, ``try``, nested functions,
  lambdas, comprehensions, other modules, and the setup cells' functions.
"""

from __future__ import annotations

import ast

from .njit_gate import _OwnLoops
from .syntax import refuse, walk_cell

_IMPORTS = {"numpy": "numpy", "math": "math"}
_MODULES = {"np": "numpy", "numpy": "numpy", "math": "math"}  # names a cell may use unimported (the setup imports them)


class NotNumpyOnly(ValueError):
    """The cell holds something other than NumPy code of its own; the message names the line."""


def check_numpy_only(text: str) -> None:
    """Raise :class:`NotNumpyOnly` unless the answer cell ``text`` keeps to the rules above."""
    walk_cell(text, _NumpyOnly, NotNumpyOnly, _MODULES)


class _NumpyOnly(_OwnLoops):
    numpy_functions = frozenset({
        "zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like", "full_like", "arange", "ascontiguousarray",
        "exp", "log", "sqrt", "maximum", "minimum", "max", "min", "sum", "where", "isinf", "isfinite", "abs",
        "float32", "float64", "inf", "newaxis", "triu", "tril", "matmul",
    })
    array_attributes = frozenset({"shape", "dtype", "ndim", "size", "T", "copy", "fill", "reshape", "astype", "transpose",
                                  "max", "min", "sum"})
    numpy_rule = "keep to NumPy's array functions"
    top_level_rule = "only imports, literal constants and functions may stand outside a function here"

    def imports(self, statement: ast.Import | ast.ImportFrom) -> None:
        if isinstance(statement, ast.ImportFrom):
            refuse(statement, f"`from {statement.module} import ...`: import numpy (as np) or math, and use their names")
        for alias in statement.names:
            if alias.name not in _IMPORTS:
                refuse(statement, f"imports {alias.name}; this cell may import only numpy and math")
            self.scope.modules[self.name(alias.asname or alias.name, statement)] = _IMPORTS[alias.name]

    def decorators(self, definition: ast.FunctionDef) -> None:
        if definition.decorator_list:
            refuse(definition, f"{definition.name} has a decorator: plain NumPy functions only")

    def expression_other(self, node: ast.expr) -> bool:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return False  # a block's matmul: its parts are walked
        return super().expression_other(node)
