"""A numba kernel's source, made self-contained so that another process can compile it.

A kernel as a student holds it (a simulator ``FakeCUDAKernel`` or a GPU ``CUDADispatcher``)
refers to globals of its notebook: modules, module constants, device functions. To compile
it elsewhere (a clean grading process, a compiler child without the simulator) those globals
have to travel with it. :func:`kernel_source` writes one module text holding exactly what the
kernel reaches, and refuses anything a GPU could not use anyway (lists, dicts, arrays,
arbitrary objects, closures), naming the global and the line that uses it.

Only the standard library is imported here (numba and numpy lazily, when a value needs them):
importing :mod:`gpucourse.kernels` stays cheap.
"""

from __future__ import annotations

import ast
import builtins
import dis
import hashlib
import inspect
import math
import sys
import textwrap
import types
from dataclasses import dataclass, field

KERNEL_FILENAME = "gpucourse_kernel.py"  # the module text's name in the compiler child
ALLOWED_MODULES = ("cmath", "math", "numba", "numba.core.types", "numba.cuda", "numpy")
# Modules whose functions a kernel may take by name, e.g. ``from math import sqrt``.
FUNCTION_MODULES = ("math", "cmath", "numpy", "numba.cuda")
LANGUAGES = ("numba", "triton")
RULE = "a kernel can only use device functions, modules math/numpy/numba and plain constants"

_NUMPY = "_gc_numpy"  # private names for what the emitted text itself needs
_NUMBA_TYPES = "_gc_numba_types"
_PLAIN_TYPES = (bool, int, float, complex, str, type(None))


class KernelCompileError(Exception):
    """The kernel would not compile for a GPU; the message says which line and why, in plain words.

    ``line`` is the student's :class:`SourceLine` when known.
    """

    def __init__(self, message: str, line: SourceLine | None = None, compiler_message: str = ""):
        super().__init__(message)
        self.line = line
        self.compiler_message = compiler_message  # numba's own words, for whoever wants them


class KernelSourceError(KernelCompileError):
    """The kernel reaches something that cannot leave its notebook (a list, an object, a closure...)."""


@dataclass(frozen=True)
class SourceLine:
    """One line of the student's source: where it is and what it says."""

    filename: str
    line: int
    function: str
    code: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.code.strip()}"


@dataclass(frozen=True)
class KernelSource:
    """A kernel's self-contained module text, with each text line's origin in the student's source.

    ``text`` imports modules, defines constants, device functions and the kernel (decorated
    ``@cuda.jit``), in a deterministic order, so ``digest`` can key a cache.
    ``origins[i]`` is the student's line for line ``i + 1`` of ``text`` (None for emitted lines).
    """

    name: str
    text: str
    origins: tuple[SourceLine | None, ...] = field(repr=False)
    device: bool = False  # the function itself is a device function, not a kernel
    language: str = "numba"  # or "triton": a @triton.jit kernel (see gpucourse.triton_source)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def origin(self, text_line: int) -> SourceLine | None:
        """The student's line behind line ``text_line`` (1-based) of ``text``."""
        if 1 <= text_line <= len(self.origins):
            return self.origins[text_line - 1]
        return None

    def to_plain(self) -> dict:
        """Plain data (str, int, bool, list, dict, None) for the grader's protocol."""
        origins = [None if o is None else [o.filename, o.line, o.function, o.code] for o in self.origins]
        return {"name": self.name, "text": self.text, "origins": origins, "device": self.device, "language": self.language}

    @classmethod
    def from_plain(cls, data) -> KernelSource:
        """The inverse of :meth:`to_plain`; raises ValueError on anything else."""
        try:
            origins = tuple(None if o is None else SourceLine(str(o[0]), int(o[1]), str(o[2]), str(o[3])) for o in data["origins"])
            source = cls(str(data["name"]), str(data["text"]), origins, bool(data["device"]), str(data.get("language", "numba")))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
            raise ValueError(f"not a kernel source ({error})") from None
        if source.language not in LANGUAGES:
            raise ValueError(f"not a kernel language: {source.language!r}")
        if not source.name.isidentifier():
            raise ValueError(f"not a kernel name: {source.name!r}")
        return source


def kernel_source(kernel) -> KernelSource:
    """The self-contained source of a numba kernel or device function (simulator or GPU), or of a
    ``@triton.jit`` kernel (GPU or interpreter; :func:`gpucourse.triton_source.triton_source`).

    Raises :class:`KernelSourceError` when the kernel uses a global that is not a module
    (math, cmath, numpy, numba, numba.cuda), a device function, a plain constant (int, float,
    bool, complex, None, str, numpy scalar, tuples of these), a numba or numpy scalar type, a
    function of math/cmath/numpy/numba.cuda, or a builtin; or when it is a closure, has default
    arguments, or its source cannot be read.
    """
    provided = getattr(type(kernel), "__kernel_source__", None)
    if provided is not None:  # a stand-in for a kernel held elsewhere (the grader's proxy for a student's kernel)
        return provided(kernel)
    from .triton_source import is_triton_kernel, triton_source

    if is_triton_kernel(kernel):
        return triton_source(kernel)
    function, device, fastmath = _unwrap(kernel)
    if function is None:
        raise KernelSourceError(f"{kernel!r} is not a numba kernel: decorate the function with @cuda.jit")
    collector = _Collector()
    collector.add_function(function, device, fastmath)
    return collector.build(function.__name__, device)


def _unwrap(kernel) -> tuple[types.FunctionType | None, bool, bool]:
    """(python function, is a device function, fastmath) of a simulator or GPU kernel."""
    cls = type(kernel)
    if not cls.__module__.startswith("numba.cuda"):
        return None, False, False
    if cls.__name__ == "FakeCUDAKernel":
        return kernel.fn, bool(kernel._device), bool(getattr(kernel, "_fastmath", False))
    if cls.__name__ == "CUDADispatcher":
        options = kernel.targetoptions
        if options.get("link"):
            raise KernelSourceError(f"{kernel.py_func.__name__} links external code (link=...), which cannot be extracted")
        return kernel.py_func, bool(options.get("device")), bool(options.get("fastmath"))
    return None, False, False


@dataclass
class _Function:
    name: str
    lines: list[str]
    origins: list[SourceLine | None]


class _Collector:
    """Walks a kernel and everything it reaches, binding each global name once."""

    def __init__(self):
        self.bindings: dict[str, tuple[str, str]] = {}  # name -> (section, emitted line)
        self.functions: dict[str, _Function] = {}
        self.seen: set[int] = set()  # ids of the python functions already added, so cycles stop

    def add_function(self, function, device: bool, fastmath: bool) -> None:
        if id(function) in self.seen:
            return
        name = function.__name__
        self.seen.add(id(function))
        _check_plain_function(function)
        self._bind(name, "function", f"def {name} #{id(function)}", function)
        self.functions[name] = _function_text(function, _decorator(device, fastmath))
        self._bind("cuda", "import", "import numba.cuda as cuda", function)  # the decorator needs it
        for global_name, line in sorted(_global_uses(function.__code__).items()):
            self._add_global(function, global_name, line)

    def _add_global(self, function, name: str, line: int) -> None:
        namespace = function.__globals__
        if name not in namespace:
            if hasattr(builtins, name):
                return  # a builtin used as such; numba says whether a kernel may call it
            raise _refusal(function, line, f"{function.__name__} uses the name `{name}`, which is not defined")
        value = namespace[name]
        if value is getattr(builtins, name, _MISSING):
            return
        if _is_numba_kernel(value):
            self._add_device_function(function, name, value, line)
            return
        section, text = _emit(name, value)
        if text is None:
            raise _refusal(function, line, f"{function.__name__} uses the global `{name}` ({_describe(value)}): {RULE}")
        for helper in _helpers_for(text):
            self._bind(helper[0], "import", helper[1], function)
        self._bind(name, section, text, function)

    def _add_device_function(self, caller, name: str, kernel, line: int) -> None:
        function, device, fastmath = _unwrap(kernel)
        if not device:
            raise _refusal(caller, line, f"{caller.__name__} calls `{name}`, a kernel: a kernel cannot launch another; "
                                         "make it a device function with @cuda.jit(device=True)")
        self.add_function(function, device, fastmath)
        if name != function.__name__:
            self._bind(name, "alias", f"{name} = {function.__name__}", caller)

    def _bind(self, name: str, section: str, text: str, user) -> None:
        bound = self.bindings.get(name)
        if bound is not None and bound[1] != text:
            raise KernelSourceError(f"{user.__name__} and the functions it calls use the name `{name}` for two different things; rename one")
        self.bindings[name] = (section, text)

    def build(self, name: str, device: bool) -> KernelSource:
        lines: list[str] = []
        origins: list[SourceLine | None] = []

        def emit(text_lines, text_origins=None):
            lines.extend(text_lines)
            origins.extend(text_origins or [None] * len(text_lines))

        emit(["from __future__ import annotations  # annotations stay unevaluated"])
        for section in ("import", "constant"):
            emit(sorted(text for section_of, text in self.bindings.values() if section_of == section))
        # device functions first, sorted; the kernel last; aliases after the functions they name
        for function_name in sorted(self.functions, key=lambda n: (n == name, n)):
            emit([""])
            emit(self.functions[function_name].lines, self.functions[function_name].origins)
        emit([""] + sorted(text for section_of, text in self.bindings.values() if section_of == "alias"))
        return KernelSource(name, "\n".join(lines) + "\n", tuple(origins), device)


_MISSING = object()


def _refusal(function, line: int | None, message: str) -> KernelSourceError:
    source_line = _student_line(function, line) if line else None
    prefix = f"line {line}: " if line else ""
    return KernelSourceError(prefix + message, source_line)


def _student_line(function, line: int) -> SourceLine:
    import linecache

    filename = function.__code__.co_filename
    return SourceLine(filename, line, function.__name__, linecache.getline(filename, line).rstrip("\n"))


def _check_plain_function(function) -> None:
    code = function.__code__
    if code.co_freevars:
        names = ", ".join(f"`{name}`" for name in code.co_freevars)
        raise KernelSourceError(
            f"{function.__name__} is a closure: it uses {names} from the function it is defined in. "
            "Define it at the top level of a cell and pass such values as arguments or module constants"
        )
    if function.__defaults__ or function.__kwdefaults__:
        raise KernelSourceError(f"{function.__name__} has default argument values, which CUDA kernels do not support")
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise KernelSourceError(f"{function.__name__} is a generator or coroutine, which a GPU cannot run")


def _global_uses(code: types.CodeType) -> dict[str, int]:
    """Each global name the code (and the code nested in it) reads, with the first line reading it."""
    uses: dict[str, int] = {}
    for instruction in dis.get_instructions(code):
        line = _instruction_line(instruction) or code.co_firstlineno
        if instruction.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            raise KernelSourceError(f"line {line}: {code.co_name} assigns to the global `{instruction.argval}`, which a GPU cannot do")
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            uses.setdefault(instruction.argval, line)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            for name, line in _global_uses(constant).items():
                uses.setdefault(name, line)
    return uses


def _instruction_line(instruction) -> int | None:
    positions = getattr(instruction, "positions", None)  # Python 3.11+
    if positions is not None and positions.lineno:
        return positions.lineno
    return instruction.starts_line


def _decorator(device: bool, fastmath: bool) -> str:
    options = [option for option, wanted in (("device=True", device), ("fastmath=True", fastmath)) if wanted]
    return f"@cuda.jit({', '.join(options)})" if options else "@cuda.jit"


def _function_text(function, decorator: str) -> _Function:
    """The function's own lines (decorators dropped), dedented, under ``decorator``."""
    name = function.__name__
    try:
        source_lines, first_line = inspect.getsourcelines(function)
    except (OSError, TypeError) as error:
        raise KernelSourceError(f"cannot read the source of `{name}` ({error}): define it in a notebook cell or a .py file") from None
    source = textwrap.dedent("".join(source_lines))
    try:
        definition = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        definition = None
    if not isinstance(definition, ast.FunctionDef) or definition.name != name:
        raise KernelSourceError(f"cannot read the source of `{name}`: define it with a plain `def {name}(...)`")
    text = source.splitlines()[definition.lineno - 1:definition.end_lineno]
    filename = function.__code__.co_filename
    offset = first_line + definition.lineno - 1  # the student's line of the `def`
    origins = [SourceLine(filename, offset + index, name, line) for index, line in enumerate(text)]
    return _Function(name, [decorator, *text], [origins[0], *origins])


def _is_numba_kernel(value) -> bool:
    cls = type(value)
    return cls.__module__.startswith("numba.cuda") and cls.__name__ in ("FakeCUDAKernel", "CUDADispatcher")


def _emit(name: str, value) -> tuple[str, str | None]:
    """(section, the line binding ``name`` to ``value``) for an allowed value; text None if refused."""
    if isinstance(value, types.ModuleType):
        module = _module_name(value)
        return "import", (f"import {module} as {name}" if module in ALLOWED_MODULES else None)
    source = _function_from_module(value)
    if source is not None:
        return "import", f"from {source[0]} import {source[1]} as {name}"
    literal = _literal(value)
    if literal is None:
        literal = _scalar_type(value)
    return "constant", (f"{name} = {literal}" if literal is not None else None)


def binding_line(name: str, value) -> str | None:
    """The line a kernel's source binds the global ``name`` with when it holds ``value`` (an import or a
    constant), or None where :func:`kernel_source` would refuse the value; the grader compares it with the
    line a student's source binds a name of the assignment's setup with (``gpucourse.gates.kernel_gate``)."""
    return _emit(name, value)[1]


def _module_name(module: types.ModuleType) -> str:
    name = module.__name__
    return "numba.core.types" if name == "numba.types" else name


def _function_from_module(value) -> tuple[str, str] | None:
    """(module, name) when ``value`` is that module's own function, e.g. math.sqrt."""
    attribute = getattr(value, "__name__", None)
    if not callable(value) or not isinstance(attribute, str) or isinstance(value, type):
        return None
    for module_name in FUNCTION_MODULES:
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, attribute, None) is value:
            return module_name, attribute
    return None


def _literal(value) -> str | None:
    """Python source that rebuilds a plain constant exactly, or None for anything else."""
    kind = type(value)
    if kind is float:
        return repr(value) if math.isfinite(value) else f"float({repr(value)!r})"
    if kind is complex:
        return f"complex({_literal(value.real)}, {_literal(value.imag)})"
    if kind in _PLAIN_TYPES:
        return repr(value)
    if kind is tuple:
        items = [_literal(item) for item in value]
        if any(item is None for item in items):
            return None
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if kind.__module__ == "numpy" and _numpy_scalar_class(kind):
        return f"{_NUMPY}.{kind.__name__}({_literal(value.item())})"
    return None


def _numpy_scalar_class(kind) -> bool:
    numpy = sys.modules.get("numpy")
    return (numpy is not None and isinstance(kind, type) and issubclass(kind, (numpy.number, numpy.bool_))
            and getattr(numpy, kind.__name__, None) is kind)


def _scalar_type(value) -> str | None:
    """``np.float32`` (the class) or ``numba.float32`` (a numba type) as source, else None."""
    if _numpy_scalar_class(value):
        return f"{_NUMPY}.{value.__name__}"
    if not type(value).__module__.startswith("numba"):
        return None
    from numba.core import types as numba_types

    if not isinstance(value, (numba_types.Number, numba_types.Boolean)):
        return None
    names = sorted(name for name, candidate in vars(numba_types).items() if candidate is value)
    if not names:
        return None
    return f"{_NUMBA_TYPES}.{str(value) if str(value) in names else names[0]}"


def _helpers_for(text: str) -> list[tuple[str, str]]:
    helpers = [(_NUMPY, f"import numpy as {_NUMPY}"), (_NUMBA_TYPES, f"import numba.core.types as {_NUMBA_TYPES}")]
    return [helper for helper in helpers if f"{helper[0]}." in text]


def _describe(value, decorator: str = "@cuda.jit(device=True)") -> str:
    """A few words for a value a kernel may not use (``decorator`` makes a plain function callable from one)."""
    if isinstance(value, types.ModuleType):
        return f"the module {value.__name__}"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return f"a plain Python function; decorate it with {decorator} to call it from a kernel"
    if isinstance(value, type):
        return f"the class {value.__name__}"
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ == "ndarray":
        return "a numpy array: pass it to the kernel as an argument"
    if kind.__module__ == "builtins":
        article = "an" if kind.__name__[0] in "aeiou" else "a"
        return f"{article} {kind.__name__}"
    return f"an object of type {kind.__module__}.{kind.__qualname__}"
