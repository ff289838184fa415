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

import builtins
import inspect
import sys
import types

from .hooks import stand_in_hook
from .kernel_text import (
    NUMPY_NAME,
    FunctionText,
    KernelCompileError,
    KernelSource,
    KernelSourceError,
    SourceLine,
    describe_value,
    function_text,
    global_uses,
    literal_source,
    numpy_scalar_class,
    refusal,
)

# KernelSource and its errors are defined in kernel_text (triton_source shares them) and are this module's too:
# its callers build and catch them.
__all__ = ["ALLOWED_MODULES", "FUNCTION_MODULES", "KERNEL_FILENAME", "RULE", "KernelCompileError", "KernelSource", "KernelSourceError",
           "SourceLine", "binding_line", "kernel_source"]

KERNEL_FILENAME = "gpucourse_kernel.py"  # the module text's name in the compiler child
ALLOWED_MODULES = ("cmath", "math", "numba", "numba.core.types", "numba.cuda", "numpy")
# Modules whose functions a kernel may take by name, e.g. ``from math import sqrt``.
FUNCTION_MODULES = ("math", "cmath", "numpy", "numba.cuda")
RULE = "a kernel can only use device functions, modules math/numpy/numba and plain constants"

_NUMBA_TYPES = "_gc_numba_types"


def kernel_source(kernel) -> KernelSource:
    """The self-contained source of a numba kernel or device function (simulator or GPU), or of a
    ``@triton.jit`` kernel (GPU or interpreter; :func:`gpucourse.triton_source.triton_source`).

    Raises :class:`KernelSourceError` when the kernel uses a global that is not a module
    (math, cmath, numpy, numba, numba.cuda), a device function, a plain constant (int, float,
    bool, complex, None, str, numpy scalar, tuples of these), a numba or numpy scalar type, a
    function of math/cmath/numpy/numba.cuda, or a builtin; or when it is a closure, has default
    arguments, or its source cannot be read.
    """
    provided = stand_in_hook(kernel, "__kernel_source__")
    if provided is not None:  # a stand-in for a kernel held elsewhere (the grader's proxy for a student's kernel)
        return provided()
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


class _Collector:
    """Walks a kernel and everything it reaches, binding each global name once."""

    def __init__(self):
        self.bindings: dict[str, tuple[str, str]] = {}  # name -> (section, emitted line)
        self.functions: dict[str, FunctionText] = {}
        self.seen: set[int] = set()  # ids of the python functions already added, so cycles stop

    def add_function(self, function, device: bool, fastmath: bool) -> None:
        if id(function) in self.seen:
            return
        name = function.__name__
        self.seen.add(id(function))
        _check_plain_function(function)
        self._bind(name, "function", f"def {name} #{id(function)}", function)
        self.functions[name] = function_text(function, _decorator(device, fastmath))
        self._bind("cuda", "import", "import numba.cuda as cuda", function)  # the decorator needs it
        for global_name, line in sorted(global_uses(function.__code__).items()):
            self._add_global(function, global_name, line)

    def _add_global(self, function, name: str, line: int) -> None:
        namespace = function.__globals__
        if name not in namespace:
            if hasattr(builtins, name):
                return  # a builtin used as such; numba says whether a kernel may call it
            raise refusal(function, line, f"{function.__name__} uses the name `{name}`, which is not defined")
        value = namespace[name]
        if value is getattr(builtins, name, _MISSING):
            return
        if _is_numba_kernel(value):
            self._add_device_function(function, name, value, line)
            return
        section, text = _emit(name, value)
        if text is None:
            raise refusal(function, line, f"{function.__name__} uses the global `{name}` ({describe_value(value)}): {RULE}")
        for helper in _helpers_for(text):
            self._bind(helper[0], "import", helper[1], function)
        self._bind(name, section, text, function)

    def _add_device_function(self, caller, name: str, kernel, line: int) -> None:
        function, device, fastmath = _unwrap(kernel)
        if not device:
            raise refusal(caller, line, f"{caller.__name__} calls `{name}`, a kernel: a kernel cannot launch another; "
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


def _decorator(device: bool, fastmath: bool) -> str:
    options = [option for option, wanted in (("device=True", device), ("fastmath=True", fastmath)) if wanted]
    return f"@cuda.jit({', '.join(options)})" if options else "@cuda.jit"


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
    literal = literal_source(value)
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


def _scalar_type(value) -> str | None:
    """``np.float32`` (the class) or ``numba.float32`` (a numba type) as source, else None."""
    if numpy_scalar_class(value):
        return f"{NUMPY_NAME}.{value.__name__}"
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
    helpers = [(NUMPY_NAME, f"import numpy as {NUMPY_NAME}"), (_NUMBA_TYPES, f"import numba.core.types as {_NUMBA_TYPES}")]
    return [helper for helper in helpers if f"{helper[0]}." in text]


