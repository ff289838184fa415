"""The grader's check on an answer cell whose functions must be the student's own compiled loops
(module 07: ``matmul_reordered``, ``matmul_blocked``, ``matmul_tensorized``).

Those items grade how a loop nest runs, so the answer must be that loop nest and nothing else:
not NumPy's matmul (BLAS), not a call into other code. The grader runs such a function in a fresh
process holding only the assignment's setup cells and this cell
(:meth:`autograder.harness.StudentFunction.njit_only`), after this check, an allow-list on the
syntax tree (the pattern of :mod:`gpucourse.gates.torch_gate`):

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

from .torch_gate import is_immutable_literal

_IMPORTS = {"numpy": "numpy", "numba": "numba", "math": "math", "numba.njit": "njit"}
_NUMPY_FUNCTIONS = frozenset({"zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like", "full_like",
                              "ascontiguousarray", "float32", "float64", "int32", "int64", "intp", "minimum", "maximum"})
_ARRAY_ATTRIBUTES = frozenset({"shape", "dtype", "ndim", "size", "T", "copy", "fill", "reshape", "ravel", "astype", "transpose"})
_BUILTINS = frozenset({"range", "min", "max", "len", "abs", "int", "float", "bool", "divmod", "ValueError", "IndexError",
                       "NotImplementedError"})  # the last: a release's stub (autograder.build.name_stubs)
_NJIT_OPTIONS = {"fastmath": bool, "boundscheck": bool, "nogil": bool, "error_model": str}


class NotOwnLoops(ValueError):
    """The cell holds something other than compiled loops of its own; the message names the line."""


def check_own_loops(text: str) -> None:
    """Raise :class:`NotOwnLoops` unless the answer cell ``text`` keeps to the rules above."""
    try:
        module = ast.parse(text)
    except SyntaxError as error:
        raise NotOwnLoops(f"the cell does not parse ({error.msg}, line {error.lineno})") from None
    scope = _Scope({node.name for node in module.body if isinstance(node, ast.FunctionDef)})
    for statement in module.body:
        _top_level(statement, scope)


class _Scope:
    def __init__(self, functions: set[str]):
        self.functions = functions
        self.constants: set[str] = set()
        self.modules: dict[str, str] = {"np": "numpy", "numpy": "numpy", "numba": "numba", "math": "math", "njit": "njit"}
        self.locals: set[str] = set()


def _refuse(node: ast.AST, why: str):
    raise NotOwnLoops(f"line {getattr(node, 'lineno', '?')}: {why}")


def _top_level(statement: ast.stmt, scope: _Scope) -> None:
    if isinstance(statement, ast.Import | ast.ImportFrom):
        _import(statement, scope)
    elif isinstance(statement, ast.FunctionDef):
        _function(statement, scope)
    elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name) \
            and is_immutable_literal(statement.value):
        scope.constants.add(_name(statement.targets[0].id, statement))
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return  # a docstring
    else:
        _refuse(statement, "only imports, literal constants and @njit functions may stand outside a function here")


def _import(statement: ast.Import | ast.ImportFrom, scope: _Scope) -> None:
    if isinstance(statement, ast.ImportFrom):
        pairs = [(f"{statement.module}.{alias.name}", alias.asname or alias.name) for alias in statement.names]
    else:
        pairs = [(alias.name, alias.asname or alias.name) for alias in statement.names]
    for dotted, bound in pairs:
        if dotted not in _IMPORTS or getattr(statement, "level", 0):
            _refuse(statement, f"imports {dotted}; this cell may import only numpy, numba's njit and math")
        scope.modules[_name(bound, statement)] = _IMPORTS[dotted]


def _function(definition: ast.FunctionDef, scope: _Scope) -> None:
    if len(definition.decorator_list) != 1 or not _is_njit(definition.decorator_list[0], scope):
        _refuse(definition, f"{definition.name} must be compiled with @njit (and nothing else): the grader times your loops, compiled")
    arguments = definition.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
        if not is_immutable_literal(default):
            _refuse(default, "a default argument must be a literal")
    scope.locals = {_name(a.arg, definition) for a in every if a is not None}
    scope.locals |= {n.id for n in ast.walk(definition) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for statement in definition.body:
        _statement(statement, scope)


def _is_njit(node: ast.expr, scope: _Scope) -> bool:
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call else node
    named = (isinstance(target, ast.Name) and scope.modules.get(target.id) == "njit") or (
        isinstance(target, ast.Attribute) and target.attr == "njit" and isinstance(target.value, ast.Name)
        and scope.modules.get(target.value.id) == "numba")
    if named and call is not None:
        if call.args:
            _refuse(call, "@njit takes keyword options only here (no signatures)")
        for keyword in call.keywords:
            kind = _NJIT_OPTIONS.get(keyword.arg or "")
            if kind is None or not isinstance(keyword.value, ast.Constant) or not isinstance(keyword.value.value, kind):
                _refuse(keyword, f"@njit may take only literal {', '.join(_NJIT_OPTIONS)} here (got `{ast.unparse(keyword)}`)")
    return named


def _statement(statement: ast.stmt, scope: _Scope) -> None:
    if isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign):
        for target in statement.targets if isinstance(statement, ast.Assign) else [statement.target]:
            _target(target, scope)
        if statement.value is not None:
            _expression(statement.value, scope)
    elif isinstance(statement, ast.Return | ast.Expr):
        if statement.value is not None:
            _expression(statement.value, scope)
    elif isinstance(statement, ast.If | ast.While | ast.For):
        if isinstance(statement, ast.For):
            _target(statement.target, scope)
            _expression(statement.iter, scope)
        else:
            _expression(statement.test, scope)
        for inner in [*statement.body, *statement.orelse]:
            _statement(inner, scope)
    elif isinstance(statement, ast.Raise | ast.Assert):
        for child in ast.iter_child_nodes(statement):
            _expression(child, scope)
    elif not isinstance(statement, ast.Pass | ast.Break | ast.Continue):
        _refuse(statement, f"a {type(statement).__name__} statement is not allowed in these functions")


def _target(target: ast.expr, scope: _Scope) -> None:
    if isinstance(target, ast.Name):
        _name(target.id, target)
    elif isinstance(target, ast.Tuple | ast.List):
        for item in target.elts:
            _target(item, scope)
    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in scope.locals:
        _expression(target.slice, scope)
    else:
        _refuse(target, "only local names, and items of local arrays, may be assigned to")


def _expression(node: ast.expr, scope: _Scope) -> None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        _refuse(node, "`@` is NumPy's matmul (BLAS): write the loops yourself")
    if isinstance(node, ast.Call):
        _call(node, scope)
    elif isinstance(node, ast.Name):
        _load(node, scope)
    elif isinstance(node, ast.Attribute):
        _attribute(node, scope, called=False)
    elif isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp | ast.NamedExpr
                    | ast.Await | ast.Yield | ast.YieldFrom | ast.Starred):
        _refuse(node, f"{type(node).__name__} is not allowed in these functions: write loops")
    else:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                _expression(child, scope)


def _load(node: ast.Name, scope: _Scope) -> None:
    name = _name(node.id, node)
    if name in scope.locals or name in scope.functions or name in scope.constants or name in _BUILTINS:
        return
    if name in scope.modules:
        _refuse(node, f"`{name}` is a module: use the functions of it that are allowed")
    _refuse(node, f"`{name}` is not defined in this cell, or not allowed here (use your own functions, defined in this cell)")


def _call(node: ast.Call, scope: _Scope) -> None:
    if isinstance(node.func, ast.Attribute):
        _attribute(node.func, scope, called=True)
    elif isinstance(node.func, ast.Name):
        _load(node.func, scope)
    else:
        _refuse(node, "call functions by name")
    for argument in node.args:
        _expression(argument, scope)
    for keyword in node.keywords:
        if keyword.arg is None:
            _refuse(keyword, "`**kwargs` is not allowed here")
        _expression(keyword.value, scope)


def _attribute(node: ast.Attribute, scope: _Scope, called: bool) -> None:
    """``np.zeros``, ``math.ceil``, ``a.shape``, ``c.fill(0)``: allowed module functions and array attributes."""
    if node.attr.startswith("_"):
        _refuse(node, f"`.{node.attr}`: private and special attributes are not allowed")
    if isinstance(node.value, ast.Name) and node.value.id in scope.modules and node.value.id not in scope.locals:
        module = scope.modules[node.value.id]
        if module == "numpy" and node.attr in _NUMPY_FUNCTIONS or module == "math":
            return
        _refuse(node, f"`{ast.unparse(node)}` is not allowed here (of NumPy, only {', '.join(sorted(_NUMPY_FUNCTIONS))}): "
                      "every multiply-add must be your own loop")
    if node.attr not in _ARRAY_ATTRIBUTES:
        _refuse(node, f"`.{node.attr}` is not allowed here (arrays: {', '.join(sorted(_ARRAY_ATTRIBUTES))})")
    _expression(node.value, scope)


def _name(name: str, node: ast.AST) -> str:
    if name.startswith("__"):
        _refuse(node, f"the name `{name}` is not allowed here")
    return name
