"""The grader's check on a torch function whose ops are counted (module 06's ``fused_tail``).

An op count is evidence only if nothing in the process that counts can tamper with the
profiler (docs/authoring.md, section 6: the evidence rule). The grader counts a student's
function in a fresh process holding only the assignment's setup cells and the student's answer
cell (:meth:`autograder.harness.StudentFunction.call_profiled`); this module decides whether
that cell may go there at all. Python can patch anything it can reach, so the rule is an
allow-list, checked on the syntax tree before any of it runs:

- at the top of the cell: imports of ``torch``, ``torch.nn.functional`` and ``math``, immutable
  literal constants, and functions, optionally compiled with ``torch.compile`` (a decorator or
  ``name = torch.compile(function, ...)``, with literal ``fullgraph``, ``dynamic`` or ``mode`` only);
- inside functions: locals, arithmetic, comparisons, ``if``/``for``/``while``, comprehensions and
  lambdas; calls of torch's and ``math``'s operators (resolved here, by name, to the C++ ops of
  ``torch``, ``torch.nn.functional``, ``torch.special``, ``torch.ops.aten``, or a Python function of
  ``torch.nn.functional``), of the cell's own functions, of the setup cells' functions, of a few
  plain builtins, and methods of the values those return (tensors);
- nowhere: private or special names (``_x``, ``__x__``), attribute assignment, ``global``,
  ``import`` inside a function, ``with``/``try``, classes, the few tensor methods that take a
  callback (hooks, ``apply_``), and those that hand a tensor's values to code outside torch
  (``.numpy()``, ``.tolist()``, its storage): arithmetic there would run unseen by the profiler.

A Triton launcher's cell (``kernels``: modules 06 and 07) may also launch those ``@triton.jit``
kernels as ``kernel[grid](...)`` and call ``triton.cdiv`` and ``triton.next_power_of_2``, but not
``torch.compile``: a compiled function's loops are no ATen op the grader could see.

What is left cannot reach the profiler, the grader's code or a module's attributes, and cannot
keep state between calls (no mutable global, no default argument but a literal), so the count
is the function's own.
"""

from __future__ import annotations

import ast
import math
import types

import torch
import torch.nn.functional

MODULE_ALIASES = {"torch": torch, "math": math}  # names a cell may import, and what they are
_IMPORTS = {"torch": "torch", "math": "math", "torch.nn.functional": "torch.nn.functional"}
_SAFE_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "divmod", "enumerate", "float", "int", "isinstance", "len", "list", "max", "min", "pow",
    "print", "range", "reversed", "round", "slice", "sorted", "sum", "tuple", "zip",
    "ValueError", "TypeError", "RuntimeError", "AssertionError", "NotImplementedError",
})
# Tensor methods that take a Python callable: the callable would run later, outside these rules' reach.
_CALLBACK_METHODS = frozenset({"register_hook", "register_post_accumulate_grad_hook", "apply_", "map_", "map2_"})
# Tensor methods that hand the values to code outside torch (numpy, Python), where no profiler counts the arithmetic.
_LEAVING_TORCH = frozenset({"numpy", "tolist", "storage", "untyped_storage", "data_ptr"})
_TRITON_HOST_HELPERS = frozenset({"cdiv", "next_power_of_2"})  # what a launcher may call of triton itself
_COMPILE_OPTIONS = {"fullgraph": bool, "dynamic": (bool, type(None)), "mode": str}
_OP_MODULES = ("torch._C._nn", "torch._C._special", "torch._C._linalg", "torch._C._fft", "math")
_FUNCTIONAL_MODULES = ("torch.nn.functional", "torch.functional", "torch.special")
_CONSTANT_TYPES = (bool, int, float, complex, str, type(None), torch.dtype)
_ALLOWED_MODULE_OBJECTS = (torch, torch.nn.functional, math)


def _is_plain_constant(value) -> bool:
    if isinstance(value, tuple):
        return all(_is_plain_constant(item) for item in value)
    return isinstance(value, _CONSTANT_TYPES)


class UncountableSource(ValueError):
    """The cell holds something the grader's op count cannot trust; the message names the line."""


def check_countable(text: str, setup: dict | None = None, answers=(), kernels=()) -> None:
    """Raise :class:`UncountableSource` unless the answer cell ``text`` keeps to the rules above.

    ``setup`` is the namespace the assignment's own setup cells made (in the grader): the answer
    may use the names it binds to torch, ``torch.nn.functional`` or math, call its functions and
    read its plain constants. ``answers``: functions of the student's other answer cells that run
    beside this one (each checked by these rules too), which it may call. ``kernels``: the
    ``@triton.jit`` kernels (checked sources) the cell may launch, as a launcher's cell.
    """
    try:
        module = ast.parse(text)
    except SyntaxError as error:
        raise UncountableSource(f"the cell does not parse ({error.msg}, line {error.lineno})") from None
    setup = setup or {}
    functions = {name for name, value in setup.items() if isinstance(value, types.FunctionType) and not name.startswith("_")}
    constants = {name for name, value in setup.items() if _is_plain_constant(value) and not name.startswith("_")}
    scope = _Scope(functions | _defined_functions(module) | set(answers), constants)
    scope.modules = {name: value for name, value in setup.items() if any(value is m for m in _ALLOWED_MODULE_OBJECTS)}
    scope.kernels = set(kernels)
    if scope.kernels:
        scope.functions -= scope.kernels
        scope.modules |= {name: value for name, value in setup.items() if getattr(value, "__name__", None) == "triton"}
    for statement in module.body:
        _top_level(statement, scope)


class _Scope:
    """The names a line may use: module aliases, callables, constants, and each function's locals."""

    def __init__(self, functions: set[str], constants: set[str]):
        self.modules: dict[str, object] = {}
        self.functions, self.constants = functions, constants
        self.locals: list[set[str]] = []
        self.kernels: set[str] = set()  # Triton kernels the cell may launch (a launcher's cell)

    def is_local(self, name: str) -> bool:
        return any(name in frame for frame in self.locals)


def _defined_functions(module: ast.Module) -> set[str]:
    names = {node.name for node in module.body if isinstance(node, ast.FunctionDef)}
    for node in module.body:
        if isinstance(node, ast.Assign) and _is_compile_call(node.value):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def _refuse(node: ast.AST, why: str):
    raise UncountableSource(f"line {getattr(node, 'lineno', '?')}: {why}")


def _top_level(statement: ast.stmt, scope: _Scope) -> None:
    if isinstance(statement, ast.Import | ast.ImportFrom):
        _import(statement, scope)
    elif isinstance(statement, ast.FunctionDef):
        _function(statement, scope)
    elif isinstance(statement, ast.Assign):
        if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
            _refuse(statement, "only `name = constant` or `name = torch.compile(function)` may stand outside a function")
        name = _name_text(statement.targets[0].id, statement)
        if _is_compile_call(statement.value):
            _compile_call(statement.value, scope)
        elif is_immutable_literal(statement.value):
            scope.constants.add(name)
        else:
            _refuse(statement, f"`{name}` is not a literal constant (numbers, strings, tuples) or a torch.compile'd function")
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return  # a docstring
    else:
        _refuse(statement, f"a {type(statement).__name__} statement may not stand outside a function here")


def _import(statement: ast.Import | ast.ImportFrom, scope: _Scope) -> None:
    if isinstance(statement, ast.ImportFrom):
        pairs = [(f"{statement.module}.{alias.name}", alias.asname or alias.name) for alias in statement.names]
        if statement.level:
            _refuse(statement, "relative imports are not allowed")
    else:
        pairs = [(alias.name, alias.asname or alias.name.split(".")[0]) for alias in statement.names]
        if any(alias.asname is None and "." in alias.name for alias in statement.names):
            pairs = [(alias.name.split(".")[0], alias.name.split(".")[0]) for alias in statement.names]
    for module_name, bound in pairs:
        if module_name not in _IMPORTS:
            _refuse(statement, f"imports {module_name}; a counted cell may import only torch, torch.nn.functional and math")
        scope.modules[_name_text(bound, statement)] = _resolve_module(module_name)


def _resolve_module(dotted: str):
    value = MODULE_ALIASES[dotted.split(".")[0]]
    for part in dotted.split(".")[1:]:
        value = getattr(value, part)
    return value


def _function(definition: ast.FunctionDef | ast.Lambda, scope: _Scope) -> None:
    arguments = definition.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    names = {_name_text(a.arg, definition) for a in every if a is not None}
    for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
        if not is_immutable_literal(default):
            _refuse(default, "a default argument must be a literal (numbers, strings, tuples)")
    if isinstance(definition, ast.Lambda):
        scope.locals.append(names)
        _expression(definition.body, scope)
        scope.locals.pop()
        return
    _name_text(definition.name, definition)
    for decorator in definition.decorator_list:
        if scope.kernels:
            _refuse(decorator, f"{definition.name} is decorated: a launcher is a plain function (no torch.compile)")
        if not _is_compile_call(decorator) and not _is_compile_reference(decorator, scope):
            _refuse(decorator, f"{definition.name} has a decorator other than torch.compile")
        if isinstance(decorator, ast.Call):
            _compile_options(decorator)
    for argument in every:
        if argument is not None and argument.annotation is not None:
            _annotation(argument.annotation, scope)
    if definition.returns is not None:
        _annotation(definition.returns, scope)
    scope.locals.append(names | _assigned_names(definition.body))
    for statement in definition.body:
        _statement(statement, scope)
    scope.locals.pop()


def _assigned_names(body: list[ast.stmt]) -> set[str]:
    names = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
    return names


def _annotation(node: ast.expr, scope: _Scope) -> None:
    """``x: torch.Tensor``: a name or a dotted name, never a call (annotations run when the def does)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | type(None)):
        return
    if isinstance(node, ast.Name | ast.Attribute) and not any(isinstance(n, ast.Call) for n in ast.walk(node)):
        for inner in ast.walk(node):
            if isinstance(inner, ast.Attribute):
                _attribute_name(inner)
            elif isinstance(inner, ast.Name):
                _name_text(inner.id, inner)
        return
    _refuse(node, "an annotation must be a name such as torch.Tensor")


def _statement(statement: ast.stmt, scope: _Scope) -> None:
    if isinstance(statement, ast.FunctionDef):
        if statement.decorator_list:
            _refuse(statement, "a nested function may not have decorators")
        _function(statement, scope)
    elif isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        for target in targets:
            _target(target, scope)
        if statement.value is not None:
            _expression(statement.value, scope)
    elif isinstance(statement, ast.Return | ast.Expr):
        if statement.value is not None:
            _expression(statement.value, scope)
    elif isinstance(statement, ast.If | ast.While):
        _expression(statement.test, scope)
        for inner in [*statement.body, *statement.orelse]:
            _statement(inner, scope)
    elif isinstance(statement, ast.For):
        _target(statement.target, scope)
        _expression(statement.iter, scope)
        for inner in [*statement.body, *statement.orelse]:
            _statement(inner, scope)
    elif isinstance(statement, ast.Raise | ast.Assert):
        for child in ast.iter_child_nodes(statement):
            _expression(child, scope)
    elif isinstance(statement, ast.Pass | ast.Break | ast.Continue):
        return
    elif isinstance(statement, ast.Delete):
        for target in statement.targets:
            _target(target, scope)
    else:
        _refuse(statement, f"a {type(statement).__name__} statement is not allowed in a counted function")


def _target(target: ast.expr, scope: _Scope) -> None:
    """Assignments bind locals, or write into a local tensor (``out[i] = ...``): never an attribute or a global."""
    if isinstance(target, ast.Name):
        _name_text(target.id, target)
    elif isinstance(target, ast.Tuple | ast.List):
        for item in target.elts:
            _target(item, scope)
    elif isinstance(target, ast.Starred):
        _target(target.value, scope)
    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and scope.is_local(target.value.id):
        _expression(target.slice, scope)
    else:
        _refuse(target, "only local names (and items of local tensors) may be assigned to")


def _expression(node: ast.expr, scope: _Scope) -> None:
    if isinstance(node, ast.Call):
        _call(node, scope)
    elif isinstance(node, ast.Name):
        _load(node, scope)
    elif isinstance(node, ast.Attribute):
        _attribute_value(node, scope)
    elif isinstance(node, ast.Lambda):
        _function(node, scope)
    elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
        _comprehension(node, scope)
    elif isinstance(node, ast.NamedExpr):
        _refuse(node, "`:=` is not allowed in a counted function")
    elif isinstance(node, ast.Await | ast.Yield | ast.YieldFrom):
        _refuse(node, f"{type(node).__name__} is not allowed in a counted function")
    else:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                _expression(child, scope)
            elif isinstance(child, ast.keyword | ast.comprehension | ast.arguments):
                for inner in ast.iter_child_nodes(child):
                    if isinstance(inner, ast.expr):
                        _expression(inner, scope)


def _comprehension(node, scope: _Scope) -> None:
    bound = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    scope.locals.append(bound)
    for generator in node.generators:
        _target(generator.target, scope)
        _expression(generator.iter, scope)
        for condition in generator.ifs:
            _expression(condition, scope)
    for part in ([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]):
        _expression(part, scope)
    scope.locals.pop()


def _load(node: ast.Name, scope: _Scope) -> None:
    name = _name_text(node.id, node)
    if scope.is_local(name) or name in scope.functions or name in scope.constants:
        return
    if name in scope.kernels:
        _refuse(node, f"`{name}` is a Triton kernel: launch it as {name}[grid](...), nothing else")
    if name in scope.modules:
        _refuse(node, f"`{name}` is a module: use its functions (`{name}.something(...)`), not the module itself")
    if name in _SAFE_BUILTINS:
        return
    _refuse(node, f"`{name}` is not defined in this cell or the setup cells, or is not allowed here")


def _call(node: ast.Call, scope: _Scope) -> None:
    function = node.func
    if _is_compile_call(node):
        _compile_call(node, scope)
        return
    if _is_launch(function, scope):
        _expression(function.slice, scope)
    elif isinstance(function, ast.Attribute) and _root_module(function, scope) is not None:
        _check_operator(function, scope)
    elif isinstance(function, ast.Attribute):
        if _attribute_name(function) in _CALLBACK_METHODS:
            _refuse(function, f"`.{function.attr}` takes a callback; it is not allowed in a counted function")
        if function.attr in _LEAVING_TORCH:
            _refuse(function, f"`.{function.attr}()` takes the values out of torch, where the grader cannot count the work")
        _expression(function.value, scope)
    elif isinstance(function, ast.Name):
        _load(function, scope)
    else:
        _expression(function, scope)
    for argument in node.args:
        _expression(argument.value if isinstance(argument, ast.Starred) else argument, scope)
    for keyword in node.keywords:
        if keyword.arg is None:
            _refuse(keyword, "`**kwargs` in a call is not allowed in a counted function")
        _expression(keyword.value, scope)


def _is_launch(function: ast.expr, scope: _Scope) -> bool:
    """``kernel[grid]`` of a Triton kernel the cell may launch."""
    return (isinstance(function, ast.Subscript) and isinstance(function.value, ast.Name)
            and function.value.id in scope.kernels and not scope.is_local(function.value.id))


def _root_module(node: ast.Attribute, scope: _Scope):
    """The module a dotted name starts from (``torch`` in ``torch.nn.functional.gelu``), or None."""
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Name) and node.id in scope.modules and not scope.is_local(node.id):
        return scope.modules[node.id]
    return None


def _resolve(node: ast.expr, scope: _Scope):
    if isinstance(node, ast.Name):
        return scope.modules[node.id]
    value = _resolve(node.value, scope)
    attribute = _attribute_name(node)
    if not hasattr(value, attribute):
        _refuse(node, f"`{ast.unparse(node)}` does not exist")
    return getattr(value, attribute)


def _check_operator(node: ast.Attribute, scope: _Scope) -> None:
    if getattr(_root_module(node, scope), "__name__", None) == "triton":
        if not (isinstance(node.value, ast.Name) and node.attr in _TRITON_HOST_HELPERS):
            _refuse(node, f"`{ast.unparse(node)}`: a launcher may call only triton.cdiv and triton.next_power_of_2 of triton")
        return
    target = _resolve(node, scope)
    if not _is_operator(target):
        _refuse(node, f"`{ast.unparse(node)}` is not one of torch's or math's operators, so it cannot be counted here")


def _is_operator(target) -> bool:
    """One of torch's C++ operators (``torch.erf``, ``F.gelu``, ``torch.ops.aten.add``), a Python
    function of ``torch.nn.functional``, or a ``math`` function; not torch's other functions
    (``torch.set_num_threads``, ``torch.profiler...``), which reach the process's state."""
    if isinstance(target, torch._ops.OpOverloadPacket | torch._ops.OpOverload):
        return str(getattr(target, "namespace", "aten")) == "aten"
    if isinstance(target, types.BuiltinFunctionType):
        name = getattr(target, "__name__", "")
        owner = getattr(target, "__self__", None)
        return getattr(torch._C._VariableFunctions, name, None) is target or (
            isinstance(owner, types.ModuleType) and owner.__name__ in _OP_MODULES)
    if isinstance(target, types.FunctionType):
        return (target.__module__ or "") in _FUNCTIONAL_MODULES
    return False


def _attribute_value(node: ast.Attribute, scope: _Scope) -> None:
    """``x.shape``, ``torch.float32``, ``math.pi``: attributes of values, or constants of modules."""
    if _root_module(node, scope) is None:
        _attribute_name(node)
        _expression(node.value, scope)
        return
    target = _resolve(node, scope)
    if not isinstance(target, _CONSTANT_TYPES):
        _refuse(node, f"`{ast.unparse(node)}` may only be called (an operator) or read as a constant (a dtype, a number)")


def _is_compile_reference(node: ast.expr, scope: _Scope) -> bool:
    return isinstance(node, ast.Attribute) and _root_module(node, scope) is torch and node.attr == "compile" \
        and isinstance(node.value, ast.Name)


def _is_compile_call(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch")


def _compile_call(node: ast.Call, scope: _Scope) -> None:
    if scope.kernels:
        _refuse(node, "a launcher may not use torch.compile: its kernels must be yours, launched as kernel[grid](...)")
    if "torch" not in scope.modules or scope.modules["torch"] is not torch:
        _refuse(node, "torch.compile needs `import torch` first")
    if len(node.args) > 1:
        _refuse(node, "torch.compile takes the function and keyword options only")
    if node.args:
        function = node.args[0]
        if isinstance(function, ast.Lambda):
            _function(function, scope)
        elif not (isinstance(function, ast.Name) and function.id in scope.functions):
            _refuse(function, "torch.compile may compile a function of this cell or of the setup cells")
    _compile_options(node)


def _compile_options(node: ast.Call) -> None:
    for keyword in node.keywords:
        kind = _COMPILE_OPTIONS.get(keyword.arg or "")
        if kind is None or not isinstance(keyword.value, ast.Constant) or not isinstance(keyword.value.value, kind):
            allowed = ", ".join(_COMPILE_OPTIONS)
            _refuse(keyword, f"torch.compile may take only literal {allowed} here (got `{ast.unparse(keyword)}`)")


def is_immutable_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return is_immutable_literal(node.operand)
    if isinstance(node, ast.BinOp):  # 1 / math.sqrt(2) is not a literal; 2 ** 0.5 is
        return is_immutable_literal(node.left) and is_immutable_literal(node.right)
    if isinstance(node, ast.Tuple):
        return all(is_immutable_literal(item) for item in node.elts)
    return False


def _name_text(name: str, node: ast.AST) -> str:
    if name.startswith("__"):
        _refuse(node, f"the name `{name}` is not allowed in a counted cell")
    return name


def _attribute_name(node: ast.Attribute) -> str:
    if node.attr.startswith("_"):
        _refuse(node, f"`.{node.attr}`: private and special attributes are not allowed in a counted cell")
    return node.attr
