"""The grader's check on an answer cell whose functions must be the student's own compiled loops
(module 07: ``matmul_reordered``, ``matmul_blocked``, ``matmul_tensorized``).

Those items grade how a loop nest runs, so the answer must be that loop nest and nothing else:
not NumPy's matmul (BLAS), not a call into other code. The grader runs such a function in a fresh
process holding only the assignment's setup cells and this cell
(:meth:`autograder.standins.StudentFunction.njit_only`), after this check, an allow-list on the
syntax tree (the walk of :class:`gpucourse.gates.syntax.Walker`, as :mod:`gpucourse.gates.torch_gate`):

- at the top of the cell: imports of ``numpy``, ``numba`` (or ``from numba import njit``) and
  ``math``; literal constants; functions compiled with ``@njit`` / ``@numba.njit``, with literal
  ``fastmath``, ``boundscheck``, ``nogil`` or ``error_model`` options only (no ``parallel``);
- inside functions: locals, arithmetic (no ``@``), comparisons, ``if``/``for``/``while``; calls of
  the cell's own functions, of the function's arguments (an intrinsic passed in), of a few
  builtins, of NumPy's allocators (``np.zeros``, ``np.empty``, ...) and of ``math``; the attributes
  and methods of arrays listed below;
- nowhere: private or special names, attribute assignment, ``global``, ``with`` (``objmode``),
  nested functions, lambdas, comprehensions, and the setup cells' functions.

What is left is a loop nest over arrays: every multiply-add it does, it does itself.
"""

from __future__ import annotations

import ast

from .syntax import Walker, is_literal, literal_defaults, literal_options, parameters, refuse, walk_cell

_IMPORTS = {"numpy": "numpy", "numba": "numba", "math": "math", "numba.njit": "njit"}
_NUMPY_FUNCTIONS = frozenset({"zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like", "full_like",
                              "ascontiguousarray", "float32", "float64", "int32", "int64", "intp", "minimum", "maximum"})
_ARRAY_ATTRIBUTES = frozenset({"shape", "dtype", "ndim", "size", "T", "copy", "fill", "reshape", "ravel", "astype", "transpose"})
_BUILTINS = frozenset({"range", "min", "max", "len", "abs", "int", "float", "bool", "divmod", "ValueError", "IndexError",
                       "NotImplementedError"})  # the last: a release's stub (autograder.build.name_stubs)
_NJIT_OPTIONS = {"fastmath": bool, "boundscheck": bool, "nogil": bool, "error_model": str}
_MODULES = {"np": "numpy", "numpy": "numpy", "numba": "numba", "math": "math", "njit": "njit"}  # names a cell may use unimported


class NotOwnLoops(ValueError):
    """The cell holds something other than compiled loops of its own; the message names the line."""


def check_own_loops(text: str) -> None:
    """Raise :class:`NotOwnLoops` unless the answer cell ``text`` keeps to the rules above."""
    walk_cell(text, _OwnLoops, NotOwnLoops, _MODULES)


class _OwnLoops(Walker):
    statements_rule = "a {} statement is not allowed in these functions"
    targets_rule = "only local names, and items of local arrays, may be assigned to"
    # What a function may call and read; :mod:`.numpy_gate` allows more of NumPy on the same walk.
    numpy_functions, array_attributes, builtins = _NUMPY_FUNCTIONS, _ARRAY_ATTRIBUTES, _BUILTINS
    numpy_rule = "every multiply-add must be your own loop"
    top_level_rule = "only imports, literal constants and @njit functions may stand outside a function here"

    def top_level_other(self, statement: ast.stmt) -> None:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name) \
                and is_literal(statement.value):
            self.scope.constants.add(self.name(statement.targets[0].id, statement))
        else:
            refuse(statement, self.top_level_rule)

    def imports(self, statement: ast.Import | ast.ImportFrom) -> None:
        if isinstance(statement, ast.ImportFrom):
            pairs = [(f"{statement.module}.{alias.name}", alias.asname or alias.name) for alias in statement.names]
        else:
            pairs = [(alias.name, alias.asname or alias.name) for alias in statement.names]
        for dotted, bound in pairs:
            if dotted not in _IMPORTS or getattr(statement, "level", 0):
                refuse(statement, f"imports {dotted}; this cell may import only numpy, numba's njit and math")
            self.scope.modules[self.name(bound, statement)] = _IMPORTS[dotted]

    def function(self, definition: ast.FunctionDef) -> None:
        self.decorators(definition)
        literal_defaults(definition, "a default argument must be a literal")
        annotated = [a.annotation for a in parameters(definition) if a.annotation is not None] + [definition.returns] * bool(definition.returns)
        if annotated:  # annotations run when the def does, and are not walked; numba needs none
            refuse(annotated[0], f"{definition.name} has annotations: they are not allowed here (they would run as Python)")
        names = {self.name(a.arg, definition) for a in parameters(definition)}
        names |= {n.id for n in ast.walk(definition) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        with self.scope.frame(names):
            for statement in definition.body:
                self.statement(statement)

    def decorators(self, definition: ast.FunctionDef) -> None:
        if len(definition.decorator_list) != 1 or not self._is_njit(definition.decorator_list[0]):
            refuse(definition, f"{definition.name} must be compiled with @njit (and nothing else): the grader times your loops, compiled")

    def _is_njit(self, node: ast.expr) -> bool:
        call = node if isinstance(node, ast.Call) else None
        target = call.func if call else node
        modules = self.scope.modules
        named = (isinstance(target, ast.Name) and modules.get(target.id) == "njit") or (
            isinstance(target, ast.Attribute) and target.attr == "njit" and isinstance(target.value, ast.Name)
            and modules.get(target.value.id) == "numba")
        if named and call is not None:
            if call.args:
                refuse(call, "@njit takes keyword options only here (no signatures)")
            literal_options(call, _NJIT_OPTIONS, "@njit")
        return named

    def expression_other(self, node: ast.expr) -> bool:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            refuse(node, "`@` is NumPy's matmul (BLAS): write the loops yourself")
        if isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp | ast.NamedExpr
                      | ast.Await | ast.Yield | ast.YieldFrom | ast.Starred):
            refuse(node, f"{type(node).__name__} is not allowed in these functions: write loops")
        return False

    def load(self, node: ast.Name) -> None:
        name, scope = self.name(node.id, node), self.scope
        if scope.is_local(name) or name in scope.functions or name in scope.constants or name in self.builtins:
            return
        if name in scope.modules:
            refuse(node, f"`{name}` is a module: use the functions of it that are allowed")
        refuse(node, f"`{name}` is not defined in this cell, or not allowed here (use your own functions, defined in this cell)")

    def call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute):
            self.attribute(node.func)
        elif isinstance(node.func, ast.Name):
            self.load(node.func)
        else:
            refuse(node, "call functions by name")
        self.call_arguments(node)

    def attribute(self, node: ast.Attribute) -> None:
        """``np.zeros``, ``math.ceil``, ``a.shape``, ``c.fill(0)``: allowed module functions and array attributes."""
        self.attribute_name(node)
        if isinstance(node.value, ast.Name) and node.value.id in self.scope.modules and not self.scope.is_local(node.value.id):
            module = self.scope.modules[node.value.id]
            if module == "numpy" and node.attr in self.numpy_functions or module == "math":
                return
            refuse(node, f"`{ast.unparse(node)}` is not allowed here (of NumPy, only {', '.join(sorted(self.numpy_functions))}): "
                         f"{self.numpy_rule}")
        if node.attr not in self.array_attributes:
            refuse(node, f"`.{node.attr}` is not allowed here (arrays: {', '.join(sorted(self.array_attributes))})")
        self.expression(node.value)
