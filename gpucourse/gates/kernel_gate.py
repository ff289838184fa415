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
import textwrap

import numpy as np

from gpucourse.kernel_source import ALLOWED_MODULES, FUNCTION_MODULES, KernelSource, binding_line

from .syntax import is_literal

# The architecture every graded kernel is compiled for (sm_80), on every grader.
GATE_GPU = "A100"
_NUMPY_SCALARS = frozenset(name for name in dir(np) if isinstance(getattr(np, name), type)
                           and issubclass(getattr(np, name), (np.number, np.bool_)))
_DECORATOR_OPTIONS = frozenset({"device", "fastmath"})
_FUNCTION = "<a @cuda.jit function defined above>"  # what a name is bound to, besides modules


class UncheckableSource(ValueError):
    """The text is not what the course's source extraction emits: it is not compiled."""


class RefusedSource(UncheckableSource):
    """The text is what the extraction emits, but it is not graded: the message says why, in the student's words."""


def check_definitions_only(text: str, language: str = "numba") -> None:
    """Raise :class:`UncheckableSource` unless ``text`` only imports allowed modules, binds plain
    constants and defines ``@cuda.jit`` functions without defaults, annotations or other decorators
    (``language="triton"``: see :func:`check_triton_definitions`)."""
    try:
        module = ast.parse(text)
    except SyntaxError as error:
        raise UncheckableSource(f"the kernel's source does not parse ({error.msg}, line {error.lineno})") from None
    if language == "triton":
        check_triton_definitions(module)
        return
    if language != "numba":
        raise UncheckableSource(f"kernels in {language!r} are not graded")
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
    if is_literal(node, arithmetic=False):
        return True
    if isinstance(node, ast.Tuple):
        return all(_is_constant(item, bound) for item in node.elts)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        module = bound.get(node.value.id)
        return (module == "numpy" and node.attr in _NUMPY_SCALARS) or module == "numba.core.types"
    if isinstance(node, ast.Call) and not node.keywords and all(is_literal(arg, arithmetic=False) for arg in node.args):
        function = node.func
        if isinstance(function, ast.Name):
            return function.id in ("float", "complex") and function.id not in bound
        return (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
                and bound.get(function.value.id) == "numpy" and function.attr in _NUMPY_SCALARS)
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


# ---------------------------------------------------------------------------------------------
# What a kernel's source must not depend on, and where it must come from (issue 47)
#
# A traced launch runs the text in numba's simulator, the compile step compiles it for a GPU: a kernel that
# asks which of the two it is in can take one path when traced and another when compiled. And the text comes
# from the student's process, so the grader checks it against what the grader knows: the setup's names
# (its own values) and the notebook's cells (the text of every function).

# Names that only numba's simulator defines, on numba.cuda or on the stand-in for it that a simulated kernel
# sees (the difference of their attributes; tests/gpucourse/gates/test_kernel_gate.py keeps this list in step with the
# installed numba), and ``simulator``, the simulator's own package, which numba.cuda holds on a GPU too.
SIMULATOR_ONLY = frozenset({"Event", "FakeCUDAKernel", "auto_device", "contextmanager", "is_signature", "kernel", "kernelapi",
                            "reset", "simulator", "simulator_init"})
DEVICE_FLAGS = frozenset({"SIMULATED"})  # the assignments' `SIMULATED = kernels.simulator_active()`
_SIMULATOR_RULE = "a kernel may not depend on whether it runs in numba's simulator"


def check_runs_alike(source: KernelSource) -> None:
    """Raise :class:`RefusedSource` when a function of ``source`` reads what tells numba's simulator from
    a GPU: numba's configuration (``numba.config.ENABLE_CUDASIM``: compiled, numba freezes the compiler's
    value, simulated it is the simulator's), a name only the simulator defines, a private attribute (the
    simulator's stand-ins are Python objects), or the assignments' device flag ``SIMULATED``."""
    for statement in ast.parse(source.text).body:
        if isinstance(statement, ast.ImportFrom):  # a function taken by name: `from numba.cuda import is_signature as f`
            for alias in statement.names:
                what = _attributes_tell([alias.name], f"{statement.module}.{alias.name}")
                if what:
                    raise RefusedSource(f"{source.name} uses {what}: {_SIMULATOR_RULE}")
        if isinstance(statement, ast.FunctionDef):
            own = _local_names(statement)
            for node in ast.walk(statement):
                what = _simulator_tell(node, own)
                if what:
                    raise RefusedSource(f"{statement.name} reads {what} ({_student_line(source, node.lineno)}): {_SIMULATOR_RULE}")


def _simulator_tell(node: ast.AST, own: set[str]) -> str | None:
    """How ``node`` tells the simulator from a GPU, in words, or None. Any attribute of these names, whatever
    it is read on: a kernel may hold a module in a local variable."""
    if isinstance(node, ast.Attribute):
        attributes, value = [], node
        while isinstance(value, ast.Attribute):
            attributes.append(value.attr)
            value = value.value
        return _attributes_tell(attributes, ast.unparse(node))
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in DEVICE_FLAGS and node.id not in own:
        return f"the device flag {node.id}"
    return None


def _attributes_tell(attributes: list[str], shown: str) -> str | None:
    if "config" in attributes:
        return f"numba's configuration (`{shown}`)"
    if any(attribute.startswith("_") for attribute in attributes):
        return f"`{shown}`, a private attribute"
    if any(attribute in SIMULATOR_ONLY for attribute in attributes):
        return f"`{shown}`, which only numba's simulator defines"
    return None


def _local_names(definition: ast.FunctionDef) -> set[str]:
    """The names a function binds itself (its parameters and assignments): not globals."""
    arguments = definition.args
    own = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg) if a}
    return own | {node.id for node in ast.walk(definition) if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}


def _student_line(source: KernelSource, text_line: int) -> str:
    origin = source.origin(text_line)
    return f"line {origin.line}: `{origin.code.strip()}`" if origin else f"line {text_line} of the kernel's source"


def check_setup_names(source: KernelSource, setup: dict, setup_cells: list[str]) -> None:
    """Raise :class:`RefusedSource` when ``source`` binds a name the assignment's setup defines to anything but
    the setup's value here, in the grader (``setup``: the namespace its setup cells made): the text was written
    in the student's process, with the student's value, and a cell there may have rebound the name. A function
    of that name must be the setup cells' own ``def``."""
    text_lines = source.text.splitlines()
    setup_functions = _functions_in(setup_cells)
    for statement in ast.parse(source.text).body:
        for name in _top_level_names(statement):
            if name not in setup:
                continue
            ours = binding_line(name, setup[name])
            if isinstance(statement, ast.FunctionDef):
                if _function_text(text_lines, statement) in setup_functions.get(name, ()):
                    continue
                theirs = f"def {name}(...)"
            else:
                theirs = text_lines[statement.lineno - 1].strip()
                if theirs == ours:
                    continue
            setup_has = f" (`{ours}`)" if ours else ""
            raise RefusedSource(f"{source.name} uses {name} as your notebook rebinds it (`{theirs}`), not as the assignment's "
                                f"setup defines it{setup_has}: kernels are graded with the setup's names; give yours another name")


def _top_level_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
        return []  # a compiler directive, not a name
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return [alias.asname or alias.name.split(".")[0] for alias in statement.names]
    if isinstance(statement, ast.Assign):
        return [target.id for target in statement.targets if isinstance(target, ast.Name)]
    return [statement.name] if isinstance(statement, ast.FunctionDef) else []


def check_in_cells(source: KernelSource, cells: list[str]) -> None:
    """Raise :class:`RefusedSource` unless every function ``source`` defines is a ``def`` of the same name in
    one of ``cells`` (the notebook's code, as the student's worker ran it), with the same text from ``def`` to
    the end of its body (its decorators, which the extraction rewrites, and its indentation aside). The text
    was read in the student's process, through ``linecache``, which that process can fill with any text: a
    function built with ``exec`` would be graded on text the notebook does not show."""
    in_cells = _functions_in(cells)
    text_lines = source.text.splitlines()
    for statement in ast.parse(source.text).body:
        if isinstance(statement, ast.FunctionDef) and _function_text(text_lines, statement) not in in_cells.get(statement.name, ()):
            raise RefusedSource(f"{statement.name}: its source is not in any cell of the notebook; define it with "
                                f"`def {statement.name}(...)` in a cell (a function built at run time, with exec, is not graded)")


def _functions_in(cells: list[str]) -> dict[str, set[str]]:
    """Every function the cells define (at any depth): name -> its texts (:func:`_function_text`)."""
    found: dict[str, set[str]] = {}
    for cell in cells:
        try:
            tree = ast.parse(cell)
        except SyntaxError:
            continue  # it never ran, so no function of it did
        lines = cell.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                found.setdefault(node.name, set()).add(_function_text(lines, node))
    return found


def _function_text(lines: list[str], definition: ast.FunctionDef) -> str:
    """A function's lines from ``def`` to the end of its body, without their common indentation (lines of
    blanks count as empty, as :func:`textwrap.dedent` makes them)."""
    return textwrap.dedent("\n".join(lines[definition.lineno - 1:definition.end_lineno]))


# ---------------------------------------------------------------------------------------------
# Triton kernels
#
# Unlike NVVM, Triton's compiler is Python: while it compiles a kernel it looks up the attributes
# the body names and calls the plain Python functions it reaches (``getattr`` among them). So the
# body is checked too: no attribute or name with a leading underscore (``__globals__``,
# ``__builtins__``), no ``getattr``/``hasattr``, no nested definitions or imports. The compiler
# child then checks what each name and attribute chain reaches (only triton.language, see
# gpucourse/_compile_worker.py) before Triton's compiler sees the kernel.

_TRITON_MODULES = ("triton", "triton.language")
_TRITON_REFUSED_NAMES = frozenset({"getattr", "hasattr", "setattr", "delattr", "globals", "locals", "vars", "eval", "exec",
                                   "compile", "open", "__import__", "type", "object", "super", "breakpoint", "input"})
_TRITON_REFUSED_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Import, ast.ImportFrom,
                         ast.Global, ast.Nonlocal, ast.Try, ast.With, ast.AsyncWith, ast.Await, ast.Yield, ast.YieldFrom,
                         ast.Delete)


def _is_triton_module(name: str) -> bool:
    return name == "triton" or name == "triton.language" or name.startswith("triton.language.")


def check_triton_definitions(module: ast.Module) -> None:
    """Raise :class:`UncheckableSource` unless the module only imports triton and triton.language
    (modules, or names from them), binds plain constants (literals, ``tl.constexpr(literal)``,
    triton.language attributes such as ``tl.float32``) and defines functions decorated with
    ``@triton.jit`` alone, whose parameters are annotated ``tl.constexpr`` or not at all, without
    defaults, and whose bodies keep to the rules above."""
    bound: dict[str, str] = {}  # name -> the triton module it is bound to, or _FUNCTION
    for statement in module.body:
        where = f"line {statement.lineno} of the kernel's source"
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if not _is_triton_module(alias.name):
                    raise UncheckableSource(f"{where} imports {alias.name}, which a Triton kernel may not use")
                bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(statement, ast.ImportFrom):
            if statement.level or not _is_triton_module(statement.module or "") or any(a.name == "*" or a.name.startswith("_") for a in statement.names):
                raise UncheckableSource(f"{where} imports from {statement.module}, which a Triton kernel may not use")
            for alias in statement.names:
                bound.pop(alias.asname or alias.name, None)
        elif isinstance(statement, ast.Assign):
            _check_triton_constant(statement, bound, where)
        elif isinstance(statement, ast.FunctionDef):
            _check_triton_function(statement, bound, where)
            bound[statement.name] = _FUNCTION
        elif not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
            raise UncheckableSource(f"{where} is not a definition ({type(statement).__name__})")


def _triton_attribute_chain(node: ast.expr, bound: dict[str, str]) -> bool:
    """``tl.float32`` or ``triton.language.core.float32``: attributes (no underscores) of a name bound to a triton module."""
    while isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            return False
        node = node.value
    return isinstance(node, ast.Name) and _is_triton_module(bound.get(node.id, ""))


def _check_triton_constant(statement: ast.Assign, bound: dict[str, str], where: str) -> None:
    if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
        raise UncheckableSource(f"{where} is not a plain constant")
    target, value = statement.targets[0].id, statement.value
    if isinstance(value, ast.Name) and bound.get(value.id) == _FUNCTION:  # a second name for a @triton.jit function
        bound[target] = _FUNCTION
        return
    constexpr = (isinstance(value, ast.Call) and not value.keywords and len(value.args) == 1 and is_literal(value.args[0], arithmetic=False)
                 and isinstance(value.func, ast.Attribute) and value.func.attr == "constexpr"
                 and _triton_attribute_chain(value.func, bound))
    if not (is_literal(value, arithmetic=False) or constexpr or (isinstance(value, ast.Attribute) and _triton_attribute_chain(value, bound))):
        raise UncheckableSource(f"{where} is not a plain constant")
    bound.pop(target, None)


def _check_triton_function(definition: ast.FunctionDef, bound: dict[str, str], where: str) -> None:
    arguments = definition.args
    if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs:
        raise UncheckableSource(f"{where}: {definition.name} has *args, **kwargs or keyword-only parameters")
    if arguments.defaults:
        raise UncheckableSource(f"{where}: {definition.name} has default arguments")
    if definition.returns is not None or any(a.annotation is not None and not _is_constexpr_annotation(a.annotation, bound)
                                             for a in arguments.args):
        raise UncheckableSource(f"{where}: {definition.name} has annotations other than tl.constexpr")
    decorators = definition.decorator_list
    if len(decorators) != 1 or not (isinstance(decorators[0], ast.Attribute) and decorators[0].attr == "jit"
                                    and isinstance(decorators[0].value, ast.Name) and bound.get(decorators[0].value.id) == "triton"):
        raise UncheckableSource(f"{where}: {definition.name} is not decorated with @triton.jit alone")
    for statement in definition.body:
        for node in ast.walk(statement):
            _check_triton_node(node, definition.name, where)


def _is_constexpr_annotation(annotation: ast.expr, bound: dict[str, str]) -> bool:
    return isinstance(annotation, ast.Attribute) and annotation.attr == "constexpr" and _triton_attribute_chain(annotation, bound)


def _check_triton_node(node: ast.AST, function: str, where: str) -> None:
    line = f"line {getattr(node, 'lineno', '?')} of the kernel's source"
    if isinstance(node, _TRITON_REFUSED_NODES):
        raise UncheckableSource(f"{line}: {function} holds a {type(node).__name__}, which a Triton kernel may not")
    if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
        raise UncheckableSource(f"{line}: {function} reads the attribute {node.attr}, which a Triton kernel may not")
    if isinstance(node, ast.Name) and (node.id.startswith("__") or node.id in _TRITON_REFUSED_NAMES):
        raise UncheckableSource(f"{line}: {function} uses the name {node.id}, which a Triton kernel may not")
