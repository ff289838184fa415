"""A Triton kernel's source, made self-contained so that another process can compile and run it.

The Triton side of :mod:`gpucourse.kernel_source` (whose :func:`~gpucourse.kernel_source.kernel_source`
hands Triton kernels here): one module text holding ``import triton``, the triton.language
modules and functions the kernel names, its plain constants (``tl.constexpr(...)`` or not: Triton's
compiler says which it accepts), the ``@triton.jit`` helpers it calls and the kernel, each line with
its origin in the student's notebook. Anything else (torch, lists, objects, closures) is refused with
the line that uses it, so the "falls back to torch" kernel never leaves the notebook.

Works on the function ``@triton.jit`` returns with and without ``TRITON_INTERPRET=1`` (a
``JITFunction`` or an ``InterpretedFunction``; both keep the Python function as ``.fn``).
Only the standard library is imported here; triton is never imported by this module.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types

from .kernel_text import KernelSource, KernelSourceError, SourceLine, describe_value, function_text, global_uses, literal_source, refusal

RULE = "a Triton kernel can only use @triton.jit functions, triton and triton.language, and plain constants"
_DECORATOR = "@triton.jit"
_TRITON_CLASSES = ("JITFunction", "InterpretedFunction")


def is_triton_kernel(value) -> bool:
    """True for what ``@triton.jit`` returns, on a GPU or in the interpreter."""
    cls = type(value)
    return cls.__module__.startswith("triton.") and cls.__name__ in _TRITON_CLASSES and hasattr(value, "fn")


def triton_source(kernel) -> KernelSource:
    """The self-contained source of a ``@triton.jit`` kernel (see the module's docstring).

    Raises :class:`~gpucourse.kernel_text.KernelSourceError`, naming the line, when the kernel
    uses a global that is not a triton module or function, a ``@triton.jit`` function or a plain
    constant; when it is a closure, has default argument values or ``@triton.jit`` options, or its
    source cannot be read.
    """
    collector = _Collector()
    collector.add_function(kernel)
    return collector.build(kernel.fn.__name__)


class _Collector:
    """Walks a kernel and the ``@triton.jit`` helpers it calls, binding each global name once."""

    def __init__(self):
        self.bindings: dict[str, tuple[str, str]] = {"triton": ("import", "import triton")}  # the decorator needs it
        self.functions: dict[str, tuple[list[str], list[SourceLine | None]]] = {}
        self.seen: set[int] = set()

    def add_function(self, kernel) -> None:
        function = kernel.fn
        if id(function) in self.seen:
            return
        self.seen.add(id(function))
        _check_plain(kernel, function)
        self._bind(function.__name__, "function", f"def {function.__name__} #{id(function)}", function)
        text = function_text(function, _DECORATOR)
        self.functions[function.__name__] = (text.lines, text.origins)
        uses = {**_annotation_uses(function, text.lines), **global_uses(function.__code__)}
        for name, line in sorted(uses.items()):
            self._add_global(function, name, line)

    def _add_global(self, function, name: str, line: int) -> None:
        namespace = function.__globals__
        if name not in namespace:
            if hasattr(builtins, name):
                return  # range, min, print...: Triton's compiler says which it supports
            raise refusal(function, line, f"{function.__name__} uses the name `{name}`, which is not defined")
        value = namespace[name]
        if value is getattr(builtins, name, object()):
            return
        if is_triton_kernel(value) and not value.fn.__module__.startswith("triton.language"):  # tl.sigmoid is imported, not copied
            self.add_function(value)
            if name != value.fn.__name__:
                self._bind(name, "alias", f"{name} = {value.fn.__name__}", function)
            return
        section, text = _emit(name, value)
        if text is None:
            raise refusal(function, line, f"{function.__name__} uses the global `{name}` ({describe_value(value, '@triton.jit')}): {RULE}")
        self._bind(name, section, text, function)

    def _bind(self, name: str, section: str, text: str, user) -> None:
        bound = self.bindings.get(name)
        if bound is not None and bound[1] != text:
            raise KernelSourceError(f"{user.__name__} and the functions it calls use the name `{name}` for two different things; rename one")
        self.bindings[name] = (section, text)

    def build(self, name: str) -> KernelSource:
        lines: list[str] = []
        origins: list[SourceLine | None] = []

        def emit(text_lines, text_origins=None):
            lines.extend(text_lines)
            origins.extend(text_origins or [None] * len(text_lines))

        for section in ("import", "constant"):
            emit(sorted(text for kind, text in self.bindings.values() if kind == section))
        for function_name in sorted(self.functions, key=lambda n: (n == name, n)):  # helpers first, the kernel last
            emit([""])
            emit(*self.functions[function_name])
        emit([""] + sorted(text for kind, text in self.bindings.values() if kind == "alias"))
        return KernelSource(name, "\n".join(lines) + "\n", tuple(origins), language="triton")


def _annotation_uses(function, lines: list[str]) -> dict[str, int]:
    """The global names the parameters' annotations start from (``tl`` of ``BLOCK: tl.constexpr``), at the def's line:
    evaluated when the def runs, so absent from the body's code, and needed even where the body uses no ``tl``."""
    definition = ast.parse("\n".join(lines[1:])).body[0]  # lines[0] is the decorator
    roots = {}
    for argument in definition.args.args:
        node = argument.annotation
        while isinstance(node, ast.Attribute):
            node = node.value
        if isinstance(node, ast.Name):
            roots.setdefault(node.id, function.__code__.co_firstlineno)
    return roots


def _check_plain(kernel, function) -> None:
    name = function.__name__
    options = _options(kernel)
    if options:
        raise KernelSourceError(f"{name} passes options to @triton.jit ({', '.join(options)}): the grader compiles plain "
                                "@triton.jit functions; remove them")
    if function.__code__.co_freevars:
        names = ", ".join(f"`{n}`" for n in function.__code__.co_freevars)
        raise KernelSourceError(f"{name} is a closure: it uses {names} from the function it is defined in. "
                                "Define it at the top level of a cell and pass such values as arguments")
    if function.__defaults__ or function.__kwdefaults__:
        raise KernelSourceError(f"{name} has default argument values: pass every argument at the launch "
                                "(e.g. BLOCK=64 as a keyword)")


def _options(kernel) -> list[str]:
    """The non-default ``@triton.jit(...)`` options of a JITFunction or an InterpretedFunction."""
    if isinstance(getattr(kernel, "kwargs", None), dict):  # the interpreter keeps them as given
        return sorted(f"{key}={value!r}" for key, value in kernel.kwargs.items() if value)
    names = ("version", "do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline", "_repr", "launch_metadata")
    return sorted(f"{name.lstrip('_')}={getattr(kernel, name)!r}" for name in names if getattr(kernel, name, None))


def _emit(name: str, value) -> tuple[str, str | None]:
    """(section, the line binding ``name`` to ``value``) for an allowed value; text None if refused."""
    if isinstance(value, types.ModuleType):
        module = value.__name__
        if module == "triton" or module.startswith("triton.language"):
            return "import", (f"import {module}" if module == name else f"import {module} as {name}")
        return "import", None
    source = _triton_language_member(value)
    if source is not None:
        module, attribute = source
        if isinstance(value, types.FunctionType) or callable(value):
            return "import", f"from {module} import {attribute}" + ("" if attribute == name else f" as {name}")
        return "constant", f"{name} = {module}.{attribute}"  # a dtype such as tl.float32
    if type(value).__name__ == "constexpr" and type(value).__module__.startswith("triton.language"):
        literal = literal_source(value.value)
        return "constant", (f"{name} = triton.language.constexpr({literal})" if literal is not None else None)
    literal = literal_source(value)
    return "constant", (f"{name} = {literal}" if literal is not None else None)


def _triton_language_member(value) -> tuple[str, str] | None:
    """(module, name) when ``value`` is a function or dtype that a triton.language module defines by that name."""
    if type(value).__module__ == "builtins" and not callable(value):
        return None  # plain constants are never looked up by identity
    for module_name, module in sorted(sys.modules.items()):
        if module is None or not (module_name == "triton.language" or module_name.startswith("triton.language.")):
            continue
        for attribute, candidate in vars(module).items():
            if candidate is value and not attribute.startswith("_"):
                return module_name, attribute
    return None

