"""What a kernel's self-contained source is, and the reading of a Python function both languages share.

:mod:`gpucourse.kernel_source` (numba's kernels, and the entry point for both languages) and
:mod:`gpucourse.triton_source` (Triton's) each write one module text holding exactly what a kernel reaches;
both build a :class:`KernelSource` from the pieces here, and refuse with a :class:`KernelSourceError`.
Only the standard library is imported here.
"""

from __future__ import annotations

import ast
import dis
import hashlib
import inspect
import math
import sys
import textwrap
import types
from dataclasses import dataclass, field

LANGUAGES = ("numba", "triton")
NUMPY_NAME = "_gc_numpy"  # the private name an emitted text binds numpy to (for numpy scalars)
PLAIN_TYPES = (bool, int, float, complex, str, type(None))


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


@dataclass
class FunctionText:
    name: str
    lines: list[str]
    origins: list[SourceLine | None]


def refusal(function, line: int | None, message: str) -> KernelSourceError:
    source_line = student_line(function, line) if line else None
    prefix = f"line {line}: " if line else ""
    return KernelSourceError(prefix + message, source_line)


def student_line(function, line: int) -> SourceLine:
    import linecache

    filename = function.__code__.co_filename
    return SourceLine(filename, line, function.__name__, linecache.getline(filename, line).rstrip("\n"))


def global_uses(code: types.CodeType) -> dict[str, int]:
    """Each global name the code (and the code nested in it) reads, with the first line reading it."""
    uses: dict[str, int] = {}
    for instruction in dis.get_instructions(code):
        line = instruction_line(instruction) or code.co_firstlineno
        if instruction.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            raise KernelSourceError(f"line {line}: {code.co_name} assigns to the global `{instruction.argval}`, which a GPU cannot do")
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            uses.setdefault(instruction.argval, line)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            for name, line in global_uses(constant).items():
                uses.setdefault(name, line)
    return uses


def instruction_line(instruction) -> int | None:
    positions = getattr(instruction, "positions", None)  # Python 3.11+
    if positions is not None and positions.lineno:
        return positions.lineno
    return instruction.starts_line


def function_text(function, decorator: str) -> FunctionText:
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
    return FunctionText(name, [decorator, *text], [origins[0], *origins])


def literal_source(value) -> str | None:
    """Python source that rebuilds a plain constant exactly, or None for anything else."""
    kind = type(value)
    if kind is float:
        return repr(value) if math.isfinite(value) else f"float({repr(value)!r})"
    if kind is complex:
        return f"complex({literal_source(value.real)}, {literal_source(value.imag)})"
    if kind in PLAIN_TYPES:
        return repr(value)
    if kind is tuple:
        items = [literal_source(item) for item in value]
        if any(item is None for item in items):
            return None
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if kind.__module__ == "numpy" and numpy_scalar_class(kind):
        return f"{NUMPY_NAME}.{kind.__name__}({literal_source(value.item())})"
    return None


def numpy_scalar_class(kind) -> bool:
    numpy = sys.modules.get("numpy")
    return (numpy is not None and isinstance(kind, type) and issubclass(kind, (numpy.number, numpy.bool_))
            and getattr(numpy, kind.__name__, None) is kind)


def describe_value(value, decorator: str = "@cuda.jit(device=True)") -> str:
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
