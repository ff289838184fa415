"""The grader's check on a torch function whose ops are counted (module 06's ``fused_tail``).

An op count is evidence only if nothing in the process that counts can tamper with the
profiler (docs/authoring.md, section 6: the evidence rule). The grader counts a student's
function in a fresh process holding only the assignment's setup cells and the student's answer
cell (:meth:`autograder.standins.StudentFunction.call_profiled`); this module decides whether
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

from .syntax import Scope, Walker, is_literal, literal_defaults, literal_options, parameters, refusals_as, refuse

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
    scope = Scope(functions | _defined_functions(module) | set(answers), constants)
    scope.modules = {name: value for name, value in setup.items() if any(value is m for m in _ALLOWED_MODULE_OBJECTS)}
    scope.kernels = set(kernels)
    if scope.kernels:
        scope.functions -= scope.kernels
        scope.modules |= {name: value for name, value in setup.items() if getattr(value, "__name__", None) == "triton"}
    with refusals_as(UncountableSource):
        _Countable(scope).walk(module)


def _defined_functions(module: ast.Module) -> set[str]:
    names = {node.name for node in module.body if isinstance(node, ast.FunctionDef)}
    for node in module.body:
        if isinstance(node, ast.Assign) and _is_compile_call(node.value):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


class _Countable(Walker):
    names_rule = "the name `{}` is not allowed in a counted cell"
    attributes_rule = "`.{}`: private and special attributes are not allowed in a counted cell"
    statements_rule = "a {} statement is not allowed in a counted function"
    targets_rule = "only local names (and items of local tensors) may be assigned to"
    kwargs_rule = "`**kwargs` in a call is not allowed in a counted function"
    starred = True

    def top_level_other(self, statement: ast.stmt) -> None:
        if not isinstance(statement, ast.Assign):
            refuse(statement, f"a {type(statement).__name__} statement may not stand outside a function here")
        if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
            refuse(statement, "only `name = constant` or `name = torch.compile(function)` may stand outside a function")
        name = self.name(statement.targets[0].id, statement)
        if _is_compile_call(statement.value):
            self._compile_call(statement.value)
        elif is_literal(statement.value):
            self.scope.constants.add(name)
        else:
            refuse(statement, f"`{name}` is not a literal constant (numbers, strings, tuples) or a torch.compile'd function")

    def imports(self, statement: ast.Import | ast.ImportFrom) -> None:
        if isinstance(statement, ast.ImportFrom):
            pairs = [(f"{statement.module}.{alias.name}", alias.asname or alias.name) for alias in statement.names]
            if statement.level:
                refuse(statement, "relative imports are not allowed")
        else:
            pairs = [(alias.name, alias.asname or alias.name.split(".")[0]) for alias in statement.names]
            if any(alias.asname is None and "." in alias.name for alias in statement.names):
                pairs = [(alias.name.split(".")[0], alias.name.split(".")[0]) for alias in statement.names]
        for module_name, bound in pairs:
            if module_name not in _IMPORTS:
                refuse(statement, f"imports {module_name}; a counted cell may import only torch, torch.nn.functional and math")
            self.scope.modules[self.name(bound, statement)] = _resolve_module(module_name)

    def function(self, definition: ast.FunctionDef | ast.Lambda) -> None:
        every = parameters(definition)
        names = {self.name(a.arg, definition) for a in every}
        literal_defaults(definition, "a default argument must be a literal (numbers, strings, tuples)")
        if isinstance(definition, ast.Lambda):
            with self.scope.frame(names):
                self.expression(definition.body)
            return
        self.name(definition.name, definition)
        for decorator in definition.decorator_list:
            if self.scope.kernels:
                refuse(decorator, f"{definition.name} is decorated: a launcher is a plain function (no torch.compile)")
            if not _is_compile_call(decorator) and not self._is_compile_reference(decorator):
                refuse(decorator, f"{definition.name} has a decorator other than torch.compile")
            if isinstance(decorator, ast.Call):
                literal_options(decorator, _COMPILE_OPTIONS, "torch.compile")
        for argument in every:
            if argument.annotation is not None:
                self._annotation(argument.annotation)
        if definition.returns is not None:
            self._annotation(definition.returns)
        with self.scope.frame(names | _assigned_names(definition.body)):
            for statement in definition.body:
                self.statement(statement)

    def _annotation(self, node: ast.expr) -> None:
        """``x: torch.Tensor``: a name or a dotted name, never a call (annotations run when the def does)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str | type(None)):
            return
        if isinstance(node, ast.Name | ast.Attribute) and not any(isinstance(n, ast.Call) for n in ast.walk(node)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Attribute):
                    self.attribute_name(inner)
                elif isinstance(inner, ast.Name):
                    self.name(inner.id, inner)
            return
        refuse(node, "an annotation must be a name such as torch.Tensor")

    def statement_other(self, statement: ast.stmt) -> bool:
        if isinstance(statement, ast.FunctionDef):
            if statement.decorator_list:
                refuse(statement, "a nested function may not have decorators")
            self.function(statement)
        elif isinstance(statement, ast.Delete):
            for target in statement.targets:
                self.target(target)
        else:
            return False
        return True

    def expression_other(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Lambda):
            self.function(node)
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            self._comprehension(node)
        elif isinstance(node, ast.NamedExpr):
            refuse(node, "`:=` is not allowed in a counted function")
        elif isinstance(node, ast.Await | ast.Yield | ast.YieldFrom):
            refuse(node, f"{type(node).__name__} is not allowed in a counted function")
        else:
            return False
        return True

    def _comprehension(self, node) -> None:
        bound = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        with self.scope.frame(bound):
            for generator in node.generators:
                self.target(generator.target)
                self.expression(generator.iter)
                for condition in generator.ifs:
                    self.expression(condition)
            for part in ([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]):
                self.expression(part)

    def load(self, node: ast.Name) -> None:
        name, scope = self.name(node.id, node), self.scope
        if scope.is_local(name) or name in scope.functions or name in scope.constants:
            return
        if name in scope.kernels:
            refuse(node, f"`{name}` is a Triton kernel: launch it as {name}[grid](...), nothing else")
        if name in scope.modules:
            refuse(node, f"`{name}` is a module: use its functions (`{name}.something(...)`), not the module itself")
        if name in _SAFE_BUILTINS:
            return
        refuse(node, f"`{name}` is not defined in this cell or the setup cells, or is not allowed here")

    def call(self, node: ast.Call) -> None:
        function = node.func
        if _is_compile_call(node):
            self._compile_call(node)
            return
        if self._is_launch(function):
            self.expression(function.slice)
        elif isinstance(function, ast.Attribute) and self._root_module(function) is not None:
            self._check_operator(function)
        elif isinstance(function, ast.Attribute):
            if self.attribute_name(function) in _CALLBACK_METHODS:
                refuse(function, f"`.{function.attr}` takes a callback; it is not allowed in a counted function")
            if function.attr in _LEAVING_TORCH:
                refuse(function, f"`.{function.attr}()` takes the values out of torch, where the grader cannot count the work")
            self.expression(function.value)
        elif isinstance(function, ast.Name):
            self.load(function)
        else:
            self.expression(function)
        self.call_arguments(node)

    def _is_launch(self, function: ast.expr) -> bool:
        """``kernel[grid]`` of a Triton kernel the cell may launch."""
        return (isinstance(function, ast.Subscript) and isinstance(function.value, ast.Name)
                and function.value.id in self.scope.kernels and not self.scope.is_local(function.value.id))

    def _root_module(self, node: ast.Attribute):
        """The module a dotted name starts from (``torch`` in ``torch.nn.functional.gelu``), or None."""
        while isinstance(node, ast.Attribute):
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.scope.modules and not self.scope.is_local(node.id):
            return self.scope.modules[node.id]
        return None

    def _resolve(self, node: ast.expr):
        if isinstance(node, ast.Name):
            return self.scope.modules[node.id]
        value = self._resolve(node.value)
        attribute = self.attribute_name(node)
        if not hasattr(value, attribute):
            refuse(node, f"`{ast.unparse(node)}` does not exist")
        return getattr(value, attribute)

    def _check_operator(self, node: ast.Attribute) -> None:
        if getattr(self._root_module(node), "__name__", None) == "triton":
            if not (isinstance(node.value, ast.Name) and node.attr in _TRITON_HOST_HELPERS):
                refuse(node, f"`{ast.unparse(node)}`: a launcher may call only triton.cdiv and triton.next_power_of_2 of triton")
            return
        if not _is_operator(self._resolve(node)):
            refuse(node, f"`{ast.unparse(node)}` is not one of torch's or math's operators, so it cannot be counted here")

    def attribute(self, node: ast.Attribute) -> None:
        """``x.shape``, ``torch.float32``, ``math.pi``: attributes of values, or constants of modules."""
        if self._root_module(node) is None:
            self.attribute_name(node)
            self.expression(node.value)
            return
        if not isinstance(self._resolve(node), _CONSTANT_TYPES):
            refuse(node, f"`{ast.unparse(node)}` may only be called (an operator) or read as a constant (a dtype, a number)")

    def _is_compile_reference(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Attribute) and self._root_module(node) is torch and node.attr == "compile" \
            and isinstance(node.value, ast.Name)

    def _compile_call(self, node: ast.Call) -> None:
        if self.scope.kernels:
            refuse(node, "a launcher may not use torch.compile: its kernels must be yours, launched as kernel[grid](...)")
        if "torch" not in self.scope.modules or self.scope.modules["torch"] is not torch:
            refuse(node, "torch.compile needs `import torch` first")
        if len(node.args) > 1:
            refuse(node, "torch.compile takes the function and keyword options only")
        if node.args:
            function = node.args[0]
            if isinstance(function, ast.Lambda):
                self.function(function)
            elif not (isinstance(function, ast.Name) and function.id in self.scope.functions):
                refuse(function, "torch.compile may compile a function of this cell or of the setup cells")
        literal_options(node, _COMPILE_OPTIONS, "torch.compile")


def _resolve_module(dotted: str):
    value = MODULE_ALIASES[dotted.split(".")[0]]
    for part in dotted.split(".")[1:]:
        value = getattr(value, part)
    return value


def _assigned_names(body: list[ast.stmt]) -> set[str]:
    names = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
    return names


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


def _is_compile_call(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch")
