"""What Triton's compiler makes of a ``@triton.jit`` kernel for a real GPU, without one.

The Triton side of :mod:`gpucourse.compiler`, through the same compiler child and cache
(:func:`gpucourse.compiler._compile`): the kernel's self-contained source
(:mod:`gpucourse.triton_source`) is compiled by ``triton.compile`` for sm_80 with the signature a
launch with these arguments would get (a tensor is a pointer to its dtype, an int ``i32`` or
``i64``, a float ``fp32``, a bool ``i1``; a ``tl.constexpr`` parameter takes its value; as a launch
does, an int equal to 1 becomes a constant and an int or address that is a multiple of 16 is marked
so, which is what lets Triton vectorize and pipeline the loads), with the ``num_warps`` and
``num_stages`` a launch or a ``triton.Config`` would pass, and the PTX goes through Triton's own
ptxas for registers and spills. The interpreter runs what no GPU
would compile (a kernel calling torch, a Python list); this says so, with the line and why.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field

from .compiler import (
    COMPILE_TIMEOUT_S,
    _compile,
    _opcode,
    _target,
    is_float64_arithmetic,
    parse_ptxas,
    ptx_instructions,
)
from .kernel_source import KERNEL_FILENAME, KernelCompileError, KernelSource

_POINTER_TYPES = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "float64": "*fp64", "int8": "*i8",
                  "int16": "*i16", "int32": "*i32", "int64": "*i64", "uint8": "*u8", "bool": "*i1"}


def argument_descriptor(value) -> dict:
    """One launch argument as the compiler child takes it: {"type"} for a tensor, {"type", "value"} for a number."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype not in _POINTER_TYPES:
            raise TypeError(f"a Triton kernel cannot take a {dtype} tensor here")
        return {"type": _POINTER_TYPES[dtype], "aligned": value.data_ptr() % 16 == 0}
    if isinstance(value, bool):
        return {"type": "i1", "value": value}
    if isinstance(value, int):
        return {"type": "i32" if -2**31 <= value < 2**31 else "i64", "value": value}
    if isinstance(value, float):
        return {"type": "fp32", "value": value}
    raise TypeError(f"cannot pass {type(value).__name__} {value!r} to a Triton kernel here: pass tensors and numbers")


def signature_descriptor(args, kwargs) -> dict:
    return {"args": [argument_descriptor(a) for a in args], "kwargs": {k: argument_descriptor(v) for k, v in sorted(kwargs.items())}}


def describe_signature(descriptor: dict) -> str:
    """``(*fp32, *fp32, i32, BLOCK=64)``: pointer and scalar types, keyword arguments with their values."""
    parts = [argument["type"] for argument in descriptor["args"]]
    parts += [f"{name}={argument.get('value', argument['type'])}" for name, argument in descriptor["kwargs"].items()]
    return "(" + ", ".join(parts) + ")"


@dataclass(frozen=True)
class TritonCompileReport:
    """What Triton's compiler and ptxas made of one kernel for one GPU (compiled, not run).

    registers, spills and local memory per thread come from ptxas; ``shared_bytes``, ``num_warps``
    and ``num_stages`` from Triton's metadata (shared memory per program, i.e. per block).
    """

    kernel: str
    gpu: str
    arch: str
    signature: str
    num_warps: int
    num_stages: int
    registers: int
    shared_bytes: int
    local_bytes: int
    spill_stores: int
    spill_loads: int
    float64_instructions: int
    ptx: str = field(repr=False)
    source: KernelSource = field(repr=False)

    def warnings(self) -> list[str]:
        found = []
        if self.spill_stores or self.spill_loads:
            found.append(f"registers spill: {self.spill_stores} B stored to and {self.spill_loads} B loaded from local memory per thread")
        if self.float64_instructions:
            found.append(f"{self.float64_instructions} float64 instructions: a float64 tensor or constant makes the kernel compute in float64")
        return found

    def summary(self) -> str:
        return (f"{self.kernel}{self.signature} compiled for {self.gpu} ({self.arch}) by Triton, no GPU involved: "
                f"{self.num_warps} warps, {self.num_stages} stages, {self.registers} registers/thread, "
                f"{self.shared_bytes} B shared memory/block")

    def __str__(self) -> str:
        return self.summary()


def triton_compile_report(source: KernelSource, args, kwargs, gpu: str = "A100", timeout: float = COMPILE_TIMEOUT_S, *,
                          num_warps: int | None = None, num_stages: int | None = None) -> TritonCompileReport:
    """Compile the checked Triton ``source`` for ``gpu`` with the types of these launch arguments.

    ``num_warps`` and ``num_stages`` are the launch options (Triton's defaults, 4 and 3, when None).

    Raises :class:`KernelCompileError` with the student's line and Triton's reason in plain words,
    :class:`gpucourse.compiler.CompilerMissing` without Triton, TimeoutError past ``timeout``.
    """
    card, cc = _target(gpu)
    descriptor = signature_descriptor(args, kwargs)
    request = {"language": "triton", "source": source.text, "filename": KERNEL_FILENAME, "kernel": source.name,
               "signature": descriptor, "cc": list(cc), "ptxas": "triton's own", "sys_path": list(sys.path)}
    options = {name: value for name, value in (("num_warps", num_warps), ("num_stages", num_stages)) if value is not None}
    if options:
        request["options"] = options
    answer = _compile(request, timeout)
    if answer["status"] != "ok":
        raise _failure(answer, source)
    ptx = answer["ptx"]
    float64 = Counter(is_float64_arithmetic(_opcode(text)) for _, text in ptx_instructions(ptx))[True]
    resources = parse_ptxas(answer["ptxas"])
    return TritonCompileReport(
        kernel=source.name, gpu=card, arch=f"sm_{cc[0]}{cc[1]}", signature=describe_signature(descriptor),
        num_warps=int(answer["num_warps"]), num_stages=int(answer["num_stages"]), registers=resources["registers"],
        shared_bytes=int(answer["shared"]),
        local_bytes=resources["local_bytes"], spill_stores=resources["spill_stores"], spill_loads=resources["spill_loads"],
        float64_instructions=float64, ptx=ptx, source=source,
    )


EXPLANATIONS: list[tuple[str, str]] = [  # (pattern in Triton's message, plain words; {1} is the first group)
    (r"Cannot access global variable (\w+)",
     "uses the global {1}, which is not a tl.constexpr: write {1} = tl.constexpr(...) or pass it as an argument"),
    (r"'(?:tuple|list)' object has no attribute '?(\w+)'?|unsupported AST node type: List",
     "uses a Python list, which a Triton kernel cannot hold: use tl.tensor values (tl.arange, tl.zeros...)"),
    (r"NameError\(.?(\w+).? is not defined|name '(\w+)' is not defined", "uses a name that is not defined in the kernel's source"),
    (r"arange's range must be a power of 2|must be a power of 2", "uses a block size that is not a power of 2: tl.arange needs one"),
]


def explain(message: str) -> str:
    """Plain words for a Triton compile error: a known case, else Triton's own last line."""
    for pattern, words in EXPLANATIONS:
        match = re.search(pattern, message)
        if match:
            return words.format(match.group(0), *match.groups())
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line.strip().startswith("^")]
    return lines[-1][:300] if lines else "Triton gave no reason"


def _failure(answer: dict, source: KernelSource) -> KernelCompileError:
    words = explain(answer.get("message", "")) if answer["status"] == "error" else answer.get("message", "")[:300]
    line = source.origin(answer["line"]) if answer.get("line") else None
    if line is None:
        return KernelCompileError(f"{source.name}: {words}", None, answer.get("message", ""))
    where = f"line {line.line}" + ("" if line.function == source.name else f" (in {line.function})")
    return KernelCompileError(f"{where}: {words}\n    {line.code.strip()}", line, answer.get("message", ""))
