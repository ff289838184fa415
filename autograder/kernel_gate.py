"""The grader's compile check: a student's kernel must compile for a real GPU before it is graded.

numba's CUDA simulator runs kernels as Python threads, so it accepts code that no GPU would
compile (Python lists, plain function calls, objects). Before a test launches a student's
kernel, the grader asks the student's worker for the kernel's self-contained source
(:func:`gpucourse.kernel_source.kernel_source`), checks here that the text is nothing but
definitions (:func:`check_definitions_only`), and compiles it with NVIDIA's NVVM and ptxas
(:func:`gpucourse.compiler.compile_report`) in a child process, for the same architecture on a
CPU and on a GPU grader, so both give the same verdict.

The text comes from the student's process, so it is untrusted: the child that compiles it
executes its top level (imports, constants, ``def`` statements). The check admits only what
:mod:`gpucourse.kernel_source` emits, none of which runs the student's code: a kernel's body
is compiled by NVVM, never executed by Python there.
"""

from __future__ import annotations

import ast

import numpy as np

from gpucourse.kernel_source import ALLOWED_MODULES, FUNCTION_MODULES

# The architecture every graded kernel is compiled for (sm_80), on every grader.
GATE_GPU = "A100"
_NUMPY_SCALARS = frozenset(name for name in dir(np) if isinstance(getattr(np, name), type)
                           and issubclass(getattr(np, name), (np.number, np.bool_)))
_DECORATOR_OPTIONS = frozenset({"device", "fastmath"})
_FUNCTION = "<a @cuda.jit function defined above>"  # what a name is bound to, besides modules


class UncheckableSource(ValueError):
    """The text is not what the course's source extraction emits: it is not compiled."""


def check_definitions_only(text: str) -> None:
    """Raise :class:`UncheckableSource` unless ``text`` only imports allowed modules, binds plain
    constants and defines ``@cuda.jit`` functions without defaults, annotations or other decorators."""
    try:
        module = ast.parse(text)
    except SyntaxError as error:
        raise UncheckableSource(f"the kernel's source does not parse ({error.msg}, line {error.lineno})") from None
    bound: dict[str, str] = {}  # name -> the module it is bound to, or _FUNCTION
    for statement in module.body:
        _check_statement(statement, bound)


def _check_statement(statement: ast.stmt, bound: dict[str, str]) -> None:
    where = f"line {statement.lineno} of the kernel's source"
    if isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
        return
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if alias.name not in ALLOWED_MODULES:
                raise UncheckableSource(f"{where} imports {alias.name}, which a kernel may not use")
            bound[alias.asname or alias.name] = alias.name
        return
    if isinstance(statement, ast.ImportFrom):
        if statement.level or statement.module not in FUNCTION_MODULES or any(alias.name == "*" for alias in statement.names):
            raise UncheckableSource(f"{where} imports from {statement.module}, which a kernel may not use")
        for alias in statement.names:
            bound.pop(alias.asname or alias.name, None)  # a function, not a module: no attribute of it is safe
        return
    if isinstance(statement, ast.Assign):
        if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
            raise UncheckableSource(f"{where} is not a plain constant")
        target, value = statement.targets[0].id, statement.value
        if isinstance(value, ast.Name) and bound.get(value.id) == _FUNCTION:  # a second name for a device function
            bound[target] = _FUNCTION
            return
        if not _is_constant(value, bound):
            raise UncheckableSource(f"{where} is not a plain constant")
        bound.pop(target, None)
        return
    if isinstance(statement, ast.FunctionDef):
        _check_function(statement, bound, where)
        bound[statement.name] = _FUNCTION
        return
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return
    raise UncheckableSource(f"{where} is not a definition ({type(statement).__name__})")


def _is_constant(node: ast.expr, bound: dict[str, str]) -> bool:
    """A literal, float('inf')-style, a numpy scalar (class or value) or a numba type."""
    if _is_literal(node):
        return True
    if isinstance(node, ast.Tuple):
        return all(_is_constant(item, bound) for item in node.elts)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        module = bound.get(node.value.id)
        return (module == "numpy" and node.attr in _NUMPY_SCALARS) or module == "numba.core.types"
    if isinstance(node, ast.Call) and not node.keywords and all(_is_literal(arg) for arg in node.args):
        function = node.func
        if isinstance(function, ast.Name):
            return function.id in ("float", "complex") and function.id not in bound
        return (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
                and bound.get(function.value.id) == "numpy" and function.attr in _NUMPY_SCALARS)
    return False


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _check_function(definition: ast.FunctionDef, bound: dict[str, str], where: str) -> None:
    arguments = definition.args
    every_argument = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    if arguments.defaults or any(default is not None for default in arguments.kw_defaults):
        raise UncheckableSource(f"{where}: {definition.name} has default arguments")
    if definition.returns is not None or any(a is not None and a.annotation is not None for a in every_argument):
        raise UncheckableSource(f"{where}: {definition.name} has annotations")
    if len(definition.decorator_list) != 1 or not _is_cuda_jit(definition.decorator_list[0], bound):
        raise UncheckableSource(f"{where}: {definition.name} is not decorated with @cuda.jit alone")


def _is_cuda_jit(decorator: ast.expr, bound: dict[str, str]) -> bool:
    if isinstance(decorator, ast.Call):
        if decorator.args or any(k.arg not in _DECORATOR_OPTIONS or not isinstance(k.value, ast.Constant)
                                 or not isinstance(k.value.value, bool) for k in decorator.keywords):
            return False
        decorator = decorator.func
    return (isinstance(decorator, ast.Attribute) and decorator.attr == "jit" and isinstance(decorator.value, ast.Name)
            and bound.get(decorator.value.id) == "numba.cuda")
