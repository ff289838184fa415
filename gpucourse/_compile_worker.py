"""The compiler child of :mod:`gpucourse.compiler`: one kernel to PTX (NVVM) and through ptxas.

Run as ``python -I _compile_worker.py`` with ``NUMBA_ENABLE_CUDASIM=0``: it reads one JSON
request on stdin and writes one JSON answer on stdout. It imports only the standard library
and numba (not the gpucourse package, whose plotting imports take seconds), and needs no GPU
or driver: numba-cuda asks the driver for the current device's compute capability only to
compile device functions, so this process answers that question itself.

Request: ``{"source", "filename", "kernel", "signature", "cc": [major, minor], "ptxas", "sys_path"}``,
``signature`` either ``{"text": "void(float32[:])"}`` or
``{"args": [{"scalar": "int32"} | {"array": "float32", "ndim": 2, "layout": "A"}, ...]}``.
Answer: ``{"status": "ok", "ptx", "ptxas"}``, ``{"status": "error", "kind", "message", "line"}``
(``line`` in the module text), ``{"status": "ptxas_error", "message"}``,
``{"status": "unsupported_gpu", "message"}`` or ``{"status": "missing", "message"}``.
"""

import json
import linecache
import os
import subprocess
import sys
import tempfile


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(json.loads(sys.argv[2]))
        return
    request = json.loads(sys.stdin.read())
    answer_stream = sys.stdout
    sys.stdout = sys.stderr  # whatever numba prints must not corrupt the answer
    answer = answer_request(request)
    answer_stream.write(json.dumps(answer))
    answer_stream.flush()


def serve(sys_path: list[str]) -> None:
    """Answer one JSON request per line of stdin, one JSON answer per line of stdout, until stdin closes.

    numba is imported once, here, from ``sys_path`` (the caller's: its requests bring the same). Each
    request is compiled in a child forked from this process, so what one kernel's compilation changes
    in numba (the patched device, the loaded module) is gone with its child, exactly as with a
    process of its own, and a crash costs one answer.
    """
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    sys.path[:] = sys_path or sys.path
    try:
        import numba.cuda  # noqa: F401 - the import the children share
    except ImportError:
        pass  # each request answers "missing" on its own
    answers = sys.stdout
    sys.stdout = sys.stderr
    for line in sys.stdin:
        answers.write(json.dumps(_answer_in_child(json.loads(line))) + "\n")
        answers.flush()


def _answer_in_child(request: dict) -> dict:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, write, and leave without running the parent's clean-up
        os.close(read_end)
        try:
            data = json.dumps(answer_request(request)).encode()
        except BaseException as error:  # noqa: BLE001 - reported as the crash it is
            data = json.dumps({"status": "crash", "message": f"{type(error).__name__}: {error}"}).encode()
        with os.fdopen(write_end, "wb") as out:
            out.write(data)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        data = answer.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"status": "crash", "message": f"the compiler child died (wait status {status})"}
    return json.loads(data)


def answer_request(request: dict) -> dict:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    sys.path[:] = request.get("sys_path") or sys.path  # the caller's, user site and PYTHONPATH included
    if request.get("language") == "triton":
        return answer_triton(request)
    try:
        from numba import cuda
    except ImportError as error:
        return {"status": "missing", "message": f"numba-cuda cannot be imported ({error})"}
    _answer_compute_capability(tuple(request["cc"]))
    kernel = _load(request["source"], request["filename"])[request["kernel"]]
    try:
        ptx, _ = cuda.compile_ptx(kernel.py_func, _signature(request["signature"]), cc=tuple(request["cc"]),
                                  lineinfo=True, fastmath=bool(kernel.targetoptions.get("fastmath")))
    except Exception as error:  # noqa: BLE001 - any compile failure is an answer, not a crash
        if missing_library(error):
            return {"status": "missing", "message": f"a CUDA compiler library cannot be loaded ({str(error).splitlines()[0]})"}
        if type(error).__name__ == "CCSupportError":
            return {"status": "unsupported_gpu", "message": str(error)}
        return {"status": "error", "kind": type(error).__name__, "message": str(error),
                "line": _error_line(error, request["filename"])}
    return _assemble(ptx, request["ptxas"], request["cc"])


# How numba-cuda and cuda-pathfinder say that NVVM or NVRTC is not installed: the grader's (or the
# machine's) problem, never a fault of the kernel being compiled.
MISSING_LIBRARY_ERRORS = ("DynamicLibNotFoundError", "NvvmSupportError", "NvrtcSupportError", "CudaSupportError")


def missing_library(error: BaseException) -> bool:
    return isinstance(error, ImportError) or any(cls.__name__ in MISSING_LIBRARY_ERRORS for cls in type(error).__mro__)


def _answer_compute_capability(cc: tuple) -> None:
    """numba-cuda compiles device functions for ``get_current_device()``'s compute capability."""
    from numba.cuda import dispatcher

    class TargetDevice:
        compute_capability = cc

    dispatcher.get_current_device = TargetDevice


def _load(source: str, filename: str) -> dict:
    """Run the module text (definitions only) and turn on line info for its device functions."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # numba reads lines from here
    namespace = {"__name__": "student_kernel"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - text built by gpucourse.kernel_source
    for value in namespace.values():
        options = getattr(value, "targetoptions", None)
        if isinstance(options, dict) and options.get("device"):
            options["lineinfo"] = True  # so .loc directives name the device function's own lines
    return namespace


def _signature(descriptor: dict):
    if "text" in descriptor:
        return descriptor["text"]
    import numpy as np
    from numba.core import types
    from numba.np.numpy_support import from_dtype

    def rebuild(argument: dict):
        if "scalar" in argument:
            return from_dtype(np.dtype(argument["scalar"]))
        return types.Array(from_dtype(np.dtype(argument["array"])), argument["ndim"], argument["layout"])

    return types.void(*[rebuild(argument) for argument in descriptor["args"]])


def _error_line(error: Exception, filename: str) -> int | None:
    """The line of the module text a compile error is about.

    numba names it in the message when its error context works; otherwise (numba-cuda raising
    numba's own TypingError class, which its context handler does not catch; lowering errors)
    the innermost traceback frame holding a location in our file still knows it.
    """
    import re

    match = re.search(r'File "[^"]*' + re.escape(filename) + r'", line (\d+)', str(error))
    if match:
        return int(match.group(1))
    frames = []
    trace = error.__traceback__
    while trace is not None:
        frames.append(trace.tb_frame)
        trace = trace.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            for candidate in (value, getattr(value, "loc", None)):
                if str(getattr(candidate, "filename", "")).endswith(filename) and isinstance(getattr(candidate, "line", None), int):
                    return candidate.line
    return None


def _assemble(ptx: str, ptxas: str, cc) -> dict:
    with tempfile.TemporaryDirectory(prefix="gpucourse-ptxas-") as folder:
        ptx_path = os.path.join(folder, "kernel.ptx")
        with open(ptx_path, "w") as file:
            file.write(ptx)
        command = [ptxas, f"-arch=sm_{cc[0]}{cc[1]}", "-v", ptx_path, "-o", os.path.join(folder, "kernel.cubin")]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except OSError as error:
            return {"status": "missing", "message": f"ptxas cannot run ({error})"}
    output = (run.stdout + run.stderr).strip()
    if run.returncode != 0:
        return {"status": "ptxas_error", "message": output, "ptx": ptx}
    return {"status": "ok", "ptx": ptx, "ptxas": output}


# ---------------------------------------------------------------------------------------------
# Triton kernels: ``{"language": "triton", "source", "filename", "kernel", "cc", "signature":
# {"args": [argument, ...], "kwargs": {name: argument}}}``, an argument being {"type": "*fp32"} (a
# tensor, "aligned": its address a multiple of 16) or {"type": "i32", "value": 3} (a number), and
# optional "options" ({"num_warps", "num_stages"}) for triton.compile. Answer as above, with "num_warps",
# "num_stages" and "shared".

TRITON_INSTALL = "pip install triton  (Linux x86-64 wheels only)"


def answer_triton(request: dict) -> dict:
    os.environ["TRITON_INTERPRET"] = "0"  # compiled for a GPU, never interpreted, whatever the caller runs
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, without its warning
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as error:
        return {"status": "missing", "message": f"Triton cannot be imported ({error})", "install": TRITON_INSTALL}
    namespace = _load(request["source"], request["filename"])
    refused = _triton_reach(request["source"], namespace)
    if refused:
        return {"status": "error", "kind": "refused", "message": refused[1], "line": refused[0]}
    kernel = namespace[request["kernel"]]
    try:
        signature, constexprs, attrs = _triton_signature(kernel, request["signature"])
    except TypeError as error:
        return {"status": "error", "kind": "launch", "message": str(error), "line": None}
    major, minor = request["cc"]
    with tempfile.TemporaryDirectory(prefix="gpucourse-triton-") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache  # nothing kept between kernels, nor shared with anyone
        try:
            compiled = triton.compile(ASTSource(kernel, signature, constexprs=constexprs, attrs=attrs),
                                      target=GPUTarget("cuda", 10 * major + minor, 32), options=request.get("options"))
        except Exception as error:  # noqa: BLE001 - any compile failure is an answer, not a crash
            return {"status": "error", "kind": type(error).__name__, "message": str(error),
                    "line": _triton_error_line(error, request["source"])}
    ptx = compiled.asm["ptx"]
    answer = _assemble(ptx, triton.knobs.nvidia.ptxas.path, request["cc"])
    return {**answer, "num_warps": int(compiled.metadata.num_warps), "num_stages": int(compiled.metadata.num_stages),
            "shared": int(compiled.metadata.shared)}


def _triton_signature(kernel, descriptor: dict) -> tuple[dict, dict, dict]:
    """Triton's signature ({parameter: "*fp32" | "i32" | "constexpr"}), constexprs and attrs for these launch arguments.

    Specialized as a launch specializes them (triton/runtime/jit.py, ``specialize_impl``): an integer
    equal to 1 becomes a constant, and an integer or a tensor's address that is a multiple of 16 is
    marked so (``tt.divisibility``), which is what lets Triton vectorize loads and pipeline them.
    """
    params = kernel.params
    if len(descriptor["args"]) > len(params):
        raise TypeError(f"{kernel.__name__} takes {len(params)} arguments but the launch passed {len(descriptor['args'])}")
    given = {param.name: argument for param, argument in zip(params, descriptor["args"])}
    for name, argument in descriptor["kwargs"].items():
        if name in given or name not in kernel.arg_names:
            raise TypeError(f"{kernel.__name__} got {'twice' if name in given else 'an unknown'} argument {name}")
        given[name] = argument
    missing = [param.name for param in params if param.name not in given]
    if missing:
        raise TypeError(f"{kernel.__name__} is missing the argument(s) {', '.join(missing)} at the launch")
    signature, constexprs, attrs = {}, {}, {}
    for index, param in enumerate(params):
        argument = given[param.name]
        integer = argument["type"] in ("i32", "i64")
        if param.is_constexpr:
            if "value" not in argument:
                raise TypeError(f"{param.name} is a tl.constexpr: pass a number, not a tensor")
            signature[param.name], constexprs[param.name] = "constexpr", argument["value"]
        elif integer and argument["value"] == 1 and not param.do_not_specialize:
            signature[param.name], constexprs[param.name] = "constexpr", 1
        else:
            signature[param.name] = argument["type"]
            divisible = argument.get("aligned") or (integer and argument["value"] % 16 == 0)
            if divisible and not param.do_not_specialize and not param.do_not_specialize_on_alignment:
                attrs[(index,)] = [["tt.divisibility", 16]]
    return signature, constexprs, attrs


def _triton_reach(source: str, namespace: dict) -> tuple[int, str] | None:
    """(line, why) for the first global or attribute chain of a kernel that reaches beyond triton.language.

    Triton's compiler calls the Python functions a kernel names while it compiles it, so what
    the names reach is checked here first: a module must be triton or triton.language's, any other
    value a @triton.jit function, a plain constant or something triton.language defines.
    """
    import ast
    import types as pytypes

    def allowed(value) -> bool:
        if isinstance(value, pytypes.ModuleType):
            return value.__name__ == "triton" or value.__name__.startswith("triton.language")
        if value is None or type(value) in (bool, int, float, str, tuple):
            return True
        origin = getattr(value, "__module__", None) if callable(value) else type(value).__module__
        return isinstance(origin, str) and (origin.startswith("triton.language") or origin == "student_kernel"
                                            or type(value).__name__ == "JITFunction")

    for name, value in namespace.items():
        if name not in ("__name__", "__builtins__") and not allowed(value):
            return None, f"the global {name} is {type(value).__name__}, which a Triton kernel may not use"
    bodies = [statement for definition in ast.parse(source).body if isinstance(definition, ast.FunctionDef)
              for statement in definition.body]  # what Triton's compiler reads (not the decorators, run already)
    for node in (node for statement in bodies for node in ast.walk(statement)):
        if not isinstance(node, ast.Attribute):
            continue
        chain, root = [], node
        while isinstance(root, ast.Attribute):
            chain.append(root.attr)
            root = root.value
        if isinstance(root, ast.Name) and type(namespace.get(root.id)).__name__ == "JITFunction":
            return node.lineno, f"{ast.unparse(node)} reads an attribute of a @triton.jit function: call it instead"
        if not isinstance(root, ast.Name) or not isinstance(namespace.get(root.id), pytypes.ModuleType):
            continue
        value = namespace[root.id]
        for attribute in reversed(chain):
            value = getattr(value, attribute, None)
            if not allowed(value):
                return node.lineno, f"{ast.unparse(node)} reaches beyond triton.language"
    return None


def _triton_error_line(error: Exception, source: str) -> int | None:
    """The module text's line of a Triton CompilationError ("at 6:27:" counts from the function's def)."""
    import re

    where = re.match(r"at (\d+):(\d+):", str(error))
    function = re.search(r"^def (\w+)\(", getattr(error, "src", None) or "", re.MULTILINE)
    if not where or not function:
        return None
    lines = source.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(f"def {function.group(1)}("):
            return index + int(where.group(1))
    return None


if __name__ == "__main__":
    main()
