"""Counting host reads: every place a block of code reads a tensor's value into Python (module 10).

On a GPU each such read is a synchronisation: the host stops until every kernel queued before it has
finished, so the GPU then idles while Python prepares the next launches. ``.item()``, ``float(t)``,
``bool(t)`` (a Python ``if`` on a tensor), ``t.tolist()``, ``t.numpy()``, ``print(t)`` and
f-strings all read values; so do ops whose output *shape* depends on the values (``t[mask]``,
``nonzero``, ``unique``), which must wait for the values before they can allocate.
On a CPU they cost almost nothing, so they go unnoticed until the code meets a GPU: this counter
finds them on any machine, by the calls, not by their cost.

    with syncs.count_host_reads() as reads:
        train_step(...)
    print(reads)  # 0 host reads, or each with the line that made it

On a GPU, ``torch.cuda.set_sync_debug_mode("warn")`` reports the synchronisations the driver sees;
this counter sees the reads Python makes, which is what a CPU can tell you.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode

# Reading a value: each returns Python data computed from the tensor's contents.
_VALUE_READS = {
    torch.Tensor.item: "item()", torch.Tensor.tolist: "tolist()", torch.Tensor.numpy: "numpy()",
    torch.Tensor.__bool__: "bool() (an `if` or `and` on a tensor)", torch.Tensor.__float__: "float()",
    torch.Tensor.__int__: "int()", torch.Tensor.__index__: "an index", torch.Tensor.__complex__: "complex()",
    torch.Tensor.__repr__: "repr() or print()", torch.Tensor.__str__: "str() or print()", torch.Tensor.__format__: "an f-string or format()",
    torch.Tensor.__array__: "numpy.asarray()",
    # A tensor's storage can be read from Python byte by byte: nothing else in a training step needs it.
    torch.Tensor.untyped_storage: "untyped_storage() (its bytes, readable from Python)", torch.Tensor.storage: "storage() (readable from Python)",
    torch.allclose: "torch.allclose", torch.Tensor.allclose: "allclose()", torch.equal: "torch.equal", torch.Tensor.equal: "equal()",
    torch.is_nonzero: "torch.is_nonzero", torch.Tensor.is_nonzero: "is_nonzero()",
}
# Ops whose output size depends on the values: the host must know it to allocate the result.
_SHAPE_FROM_VALUES = {
    torch.nonzero: "torch.nonzero", torch.Tensor.nonzero: "nonzero()", torch.argwhere: "torch.argwhere", torch.Tensor.argwhere: "argwhere()",
    torch.masked_select: "torch.masked_select", torch.Tensor.masked_select: "masked_select()",
    torch.unique: "torch.unique", torch.Tensor.unique: "unique()", torch.unique_consecutive: "torch.unique_consecutive",
    torch.Tensor.unique_consecutive: "unique_consecutive()",
}
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_THIS_FILE = os.path.abspath(__file__)


@dataclass
class HostRead:
    """One read: what it was (``item()``) and the line of code outside torch that made it."""

    what: str
    where: str

    def __str__(self) -> str:
        return f"{self.what} at {self.where}"


@dataclass
class HostReads:
    """The host reads seen inside a ``count_host_reads()`` block, in order."""

    reads: list[HostRead] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.reads)

    def __iter__(self):
        return iter(self.reads)

    def __str__(self) -> str:
        if not self.reads:
            return "0 host reads"
        lines = "\n".join(f"  {read}" for read in self.reads[:20])
        more = f"\n  ... and {len(self.reads) - 20} more" if len(self.reads) > 20 else ""
        return f"{len(self.reads)} host read{'s' if len(self.reads) != 1 else ''}:\n{lines}{more}"

    def summary(self) -> str:
        """One line: how many reads, and the first (for an assertion message)."""
        return "0 host reads" if not self.reads else f"{len(self.reads)} host read(s), the first {self.reads[0]}"


def _reads_values(func, args, kwargs) -> str | None:
    """What kind of host read calling ``func`` is, or None."""
    if func in _VALUE_READS:
        return _VALUE_READS[func]
    if func in _SHAPE_FROM_VALUES:
        return f"{_SHAPE_FROM_VALUES[func]} (its size depends on the values)"
    if func is torch.Tensor.__getitem__ and _has_bool_tensor(args[1:2]):
        return "indexing with a boolean mask (its size depends on the values)"
    if func in (torch.repeat_interleave, torch.Tensor.repeat_interleave) and len(args) > 1 and isinstance(args[1], torch.Tensor) \
            and (kwargs or {}).get("output_size") is None:
        return "repeat_interleave by a tensor without output_size (its size depends on the values)"
    if func in (torch.Tensor.cpu, torch.Tensor.to) and args and isinstance(args[0], torch.Tensor) and args[0].device.type != "cpu" \
            and _copies_to_host(func, args, kwargs or {}):
        return f"a copy to the host ({func.__name__}())"
    return None


def _has_bool_tensor(index) -> bool:
    for part in index:
        if isinstance(part, torch.Tensor) and part.dtype == torch.bool:
            return True
        if isinstance(part, tuple | list) and _has_bool_tensor(part):
            return True
    return False


def _copies_to_host(func, args, kwargs) -> bool:
    if func is torch.Tensor.cpu:
        return True
    targets = [*args[1:], kwargs.get("device")]
    return any(str(target).startswith("cpu") for target in targets if isinstance(target, str | torch.device))


def _caller() -> tuple[str, bool]:
    """(file:line of the nearest frame outside torch and this module, whether torch.optim's step count made the read).

    Optimizers keep their step count as a CPU tensor even when training on a GPU and read it every step
    (``torch.optim.optimizer._get_value``): a host read of host memory, no synchronisation, so not counted.
    """
    frame = sys._getframe(2)
    step_count = False
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if filename == _THIS_FILE:
            pass
        elif filename.startswith(_TORCH_DIR):
            step_count = step_count or (frame.f_code.co_name == "_get_value" and filename.endswith(os.path.join("optim", "optimizer.py")))
        else:
            return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})", step_count
        frame = frame.f_back
    return "torch's own code", step_count


class _Counter(TorchFunctionMode):
    def __init__(self, found: HostReads):
        super().__init__()
        self.found = found

    def __torch_function__(self, func, types, args=(), kwargs=None):
        what = _reads_values(func, args, kwargs)
        if what is not None:
            where, step_count = _caller()
            if not step_count:
                self.found.reads.append(HostRead(what, where))
        # Inside the call the mode is off: a read that torch's Python code makes on the way (repr reading
        # each element) belongs to the one read counted here.
        return func(*args, **(kwargs or {}))


class count_host_reads:  # noqa: N801 - used as a context manager, named as one reads
    """``with count_host_reads() as reads:`` records every host read of a tensor's value made inside the block."""

    def __init__(self):
        self.found = HostReads()
        self._mode = _Counter(self.found)

    def __enter__(self) -> HostReads:
        self._mode.__enter__()
        return self.found

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
