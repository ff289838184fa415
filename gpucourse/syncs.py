"""Counting host reads: every place a block of code makes the host wait for a tensor's value (module 10).

On a GPU each such read is a synchronisation: the host stops until every kernel queued before it has
finished, so the GPU then idles while Python prepares the next launches. ``.item()``, ``float(t)``,
``bool(t)`` (a Python ``if`` on a tensor), ``t.tolist()``, ``t.numpy()``, ``print(t)``, f-strings
and copies to the host all read values; so do ops whose output *size* depends on the values
(``t[mask]``, ``nonzero``, ``unique``, ``bincount``), which must wait for the values before they can allocate.
On a CPU they cost almost nothing, so they go unnoticed until the code meets a GPU: this counter
finds them on any machine, by what the ops do, not by their cost.

    with syncs.count_host_reads() as reads:
        train_step(...)
    print(reads)  # 0 host reads, or each with the line that made it

How it counts. The ops are watched where torch dispatches them (a ``TorchDispatchMode``, see
``torch/utils/_python_dispatch.py``), below every Python wrapper, so a read made inside a library
function (``F.one_hot`` without ``num_classes`` reads the largest class) is seen as well as a direct one.
What synchronises there is what CUDA's sync debug mode reports (``torch.cuda.set_sync_debug_mode``:
``c10/cuda/CUDAFunctions.h``, ``memcpy_and_sync`` and ``stream_synchronize`` call ``warn_or_error_on_sync``):
a blocking copy between host and device (``_local_scalar_dense``, which every ``item()``/``float()``/``bool()``
is, ``_to_copy``, ``copy_``), and the ops whose kernels copy a size back to allocate their output
(``nonzero``, ``masked_select``, ``unique``, ``bincount``, ``histc`` without a range, ``repeat_interleave``
without ``output_size``, indexing and index assignment with a boolean mask). On a GPU the counter also
switches the sync debug mode on and counts what CUDA reports that the list above missed.
A thin Python layer (a ``TorchFunctionMode``) adds the reads that never reach the dispatcher on a CPU
(``tolist``, ``numpy``, printing, a tensor's storage) and names each read by the call that made it.

On a CPU the host and the "device" are one memory, so the counter keeps track of which tensors play the
host: those made by a factory without a ``device`` (``torch.zeros(3)``, ``torch.tensor(1.0)``: on a GPU
they live on the CPU), made with ``device="cpu"`` spelled out, or moved there by ``.cpu()``/``.to("cpu")``,
and their views. A copy from any other tensor into one of them is a copy to the host (``cpu_buf.copy_(t)``,
``t.to(cpu_tensor)``), and reading one of them is free (torch.optim's step counts live there).
A move named by a device *object* (``t.to(torch.device("cpu"))``) cannot be told apart from
``t.to(real.device)`` on a CPU; a GPU sees it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakTensorKeyDictionary

# Python calls that read a value, by the name a student knows them by. Those marked None reach the
# dispatcher (as _local_scalar_dense, allclose, equal), which counts them; the others never reach it on a CPU.
_NAMED_READS = {
    torch.Tensor.item: "item()", torch.Tensor.__float__: "float()", torch.Tensor.__int__: "int()",
    torch.Tensor.__index__: "an index", torch.Tensor.__complex__: "complex()",
    torch.Tensor.__bool__: "bool() (an `if` or `and` on a tensor)",
    torch.allclose: "torch.allclose", torch.Tensor.allclose: "allclose()", torch.equal: "torch.equal", torch.Tensor.equal: "equal()",
    torch.is_nonzero: "torch.is_nonzero", torch.Tensor.is_nonzero: "is_nonzero()",
}
_PYTHON_ONLY_READS = {
    torch.Tensor.tolist: "tolist()", torch.Tensor.numpy: "numpy()", torch.Tensor.__array__: "numpy.asarray()",
    torch.Tensor.__repr__: "repr() or print()", torch.Tensor.__str__: "str() or print()", torch.Tensor.__format__: "an f-string or format()",
    # A tensor's storage can be read from Python byte by byte: nothing else in a training step needs it.
    torch.Tensor.untyped_storage: "untyped_storage() (its bytes, readable from Python)", torch.Tensor.storage: "storage() (readable from Python)",
}
# Aten ops that hand a value to the host.
_VALUE_OPS = {"_local_scalar_dense": "a value read on the host", "equal": "equal()", "allclose": "allclose()", "is_nonzero": "is_nonzero()"}
# Aten ops whose output size is read from the values (the CUDA kernels copy a count or a maximum back).
_SIZE_OPS = {"nonzero", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive", "unique_dim_consecutive", "bincount"}
_MASK_INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}
# Factories: made on the default device (the host, on a GPU) unless given a device.
_FACTORIES = {torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.linspace,
              torch.logspace, torch.rand, torch.randn, torch.randint, torch.randperm, torch.eye, torch.scalar_tensor}
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


def _tensors(values):
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, tuple | list):
            yield from _tensors(value)


def _names_the_host(device) -> bool:
    """A device spelled as the host: the string "cpu" (a torch.device object is what ``real.device`` gives too)."""
    return isinstance(device, str) and device.split(":")[0] == "cpu"


class count_host_reads:  # noqa: N801 - used as a context manager, named as one reads
    """``with count_host_reads() as reads:`` records every host read of a tensor's value made inside the block.

    ``device``: where the work runs ("cuda" or "cpu"; by default CUDA where there is one). On "cpu" the CPU
    stands in for the device, and the tensors the code makes for the host are told apart as the module says.
    """

    def __init__(self, device: str | torch.device | None = None):
        self.found = HostReads()
        self.cuda = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu")).type == "cuda"
        self._host = WeakTensorKeyDictionary()  # on a CPU: the tensors that play the host
        self._call: list[dict] = []  # the Python call being run: its name for a read, and whether it was counted
        self._modes = (_PythonLayer(self), _DispatchLayer(self))
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> HostReads:
        for mode in self._modes:
            self._stack.enter_context(mode)
        if self.cuda:
            torch.cuda.set_sync_debug_mode("warn")
            self._stack.callback(torch.cuda.set_sync_debug_mode, "default")
        return self.found

    def __exit__(self, *exc) -> None:
        self._stack.close()

    # -- where a tensor lives ---------------------------------------------------------------------------------
    def on_host(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is host memory (reading it waits for nothing)."""
        if tensor.device.type != "cpu":
            return False
        return self.cuda or tensor in self._host

    def mark_host(self, result) -> None:
        for tensor in _tensors([result]):
            if tensor.device.type == "cpu":
                self._host[tensor] = True

    # -- recording ----------------------------------------------------------------------------------------------
    def record(self, what: str) -> None:
        """One read, unless the Python call it happens in was counted already (``print`` reads every element once)."""
        call = self._call[-1] if self._call else None
        if call is not None:
            if call["counted"]:
                return
            call["counted"] = True
            what = call["name"] or what
        where, step_count = _caller()
        if not step_count:
            self.found.reads.append(HostRead(what, where))


class _PythonLayer(TorchFunctionMode):
    """Names each read by its Python call, counts the reads that never reach the dispatcher, and tracks the host."""

    def __init__(self, counter: count_host_reads):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        counter = self.counter
        tensors = list(_tensors(args))
        name = _NAMED_READS.get(func) or _PYTHON_ONLY_READS.get(func)
        # one_hot's reads with num_classes given are the CPU's range check, which CUDA skips (ATen's Onehot.cpp).
        cpu_check = func is torch.nn.functional.one_hot and (args[1:2] or [kwargs.get("num_classes", -1)])[0] >= 0
        counter._call.append({"name": name, "counted": cpu_check})
        try:
            if func in _PYTHON_ONLY_READS and tensors and not counter.on_host(tensors[0]):
                counter.record(name)
            elif not counter.cuda:  # on a GPU the dispatcher sees every copy between host and device
                self._copy_to_or_from_host(func, args, kwargs, tensors)
            # Inside the call this mode is off: what torch's Python code does on the way belongs to this call.
            result = func(*args, **kwargs)
        finally:
            counter._call.pop()
        if not counter.cuda and self._makes_host_memory(func, args, kwargs, tensors):
            counter.mark_host(result)
        return result

    def _makes_host_memory(self, func, args, kwargs, tensors) -> bool:
        counter = self.counter
        if func in _FACTORIES and not any(isinstance(value, torch.Tensor) for value in args[:1]):
            return kwargs.get("device") is None or _names_the_host(kwargs["device"]) or kwargs.get("pin_memory", False)
        if func in (torch.Tensor.cpu, torch.Tensor.pin_memory):
            return True
        target = self._target(func, args, kwargs)
        if target is not None:
            return target
        return bool(tensors) and all(counter.on_host(tensor) for tensor in tensors)  # views and ops of host tensors

    def _target(self, func, args, kwargs) -> bool | None:
        """For a move (``to``, or ``as_tensor``/``tensor`` given a device): whether it goes to the host (the string "cpu",
        a host tensor) or to the device (a device object, a device tensor); None if it is not a move."""
        if func is torch.Tensor.to:
            for value in [*args[1:], kwargs.get("device"), kwargs.get("other")]:
                if isinstance(value, torch.Tensor):
                    return self.counter.on_host(value)
                if isinstance(value, str | torch.device):
                    return _names_the_host(value)
            return None
        if func in (torch.as_tensor, torch.tensor) and kwargs.get("device") is not None:
            return _names_the_host(kwargs["device"])
        return None

    def _copy_to_or_from_host(self, func, args, kwargs, tensors) -> None:
        """On a CPU: a copy between a tensor that plays the host and one that plays the device."""
        counter = self.counter
        if func in (torch.Tensor.cpu, torch.Tensor.to, torch.as_tensor, torch.tensor):
            to_host = True if func is torch.Tensor.cpu else self._target(func, args, kwargs)
            source_on_host = counter.on_host(tensors[0]) if tensors else True  # Python data lives on the host
            if to_host and not source_on_host:
                counter.record(f"a copy to the host ({getattr(func, '__name__', func)}())")
            elif to_host is False and source_on_host and not kwargs.get("non_blocking", False):
                counter.record(f"a blocking copy from the host ({getattr(func, '__name__', func)}())")
        elif func in (torch.Tensor.copy_, torch.Tensor.__setitem__) and len(tensors) >= 2:
            destination, source = tensors[0], tensors[-1]
            if counter.on_host(destination) and not counter.on_host(source):
                counter.record(f"a copy to the host ({getattr(func, '__name__', func)})")


class _DispatchLayer(TorchDispatchMode):
    """Counts every aten op that makes the host wait for the device's values."""

    def __init__(self, counter: count_host_reads):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        what = self._waits(func.__name__, args, kwargs)
        if what is not None:
            self.counter.record(what)
        if not self.counter.cuda:
            return func(*args, **kwargs)
        with warnings.catch_warnings(record=True) as reported:  # what CUDA's sync debug mode sees that the list missed
            warnings.simplefilter("always")
            result = func(*args, **kwargs)
        if what is None and any("synchroniz" in str(warning.message) for warning in reported):
            self.counter.record(f"{func.__name__} (CUDA reports a synchronising call)")
        return result

    def _waits(self, name: str, args, kwargs) -> str | None:
        counter, op = self.counter, name.split(".")[0]
        tensors = list(_tensors(args))
        on_device = [tensor for tensor in tensors if not counter.on_host(tensor)]
        if op in _VALUE_OPS:
            return _VALUE_OPS[op] if on_device else None
        if op in _SIZE_OPS or (op == "histc" and _histc_range_from_data(args, kwargs)) \
                or (name == "repeat_interleave.Tensor" and kwargs.get("output_size") is None) \
                or (op in _MASK_INDEXING and _has_mask(args[1:2])):
            return f"{op} (its size depends on the values)" if on_device else None
        if op == "_to_copy" and tensors:
            return _cross_copy(tensors[0].device, kwargs.get("device") or tensors[0].device, kwargs.get("non_blocking", False))
        if op == "copy_" and len(tensors) >= 2:
            non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            return _cross_copy(tensors[1].device, tensors[0].device, non_blocking)
        return None


def _cross_copy(source: torch.device, destination: torch.device, non_blocking: bool) -> str | None:
    """A copy between the host and a GPU that waits: every one to the host, a blocking one from it (memcpy_and_sync)."""
    source, destination = torch.device(source), torch.device(destination)
    if source.type != "cpu" and destination.type == "cpu":
        return "a copy to the host"
    if source.type == "cpu" and destination.type != "cpu" and not non_blocking:
        return "a blocking copy from the host"
    return None


def _histc_range_from_data(args, kwargs) -> bool:
    """histc with min == max (the default 0, 0) takes its range from the data: the GPU's min and max are read."""
    low = kwargs.get("min", args[2] if len(args) > 2 else 0)
    high = kwargs.get("max", args[3] if len(args) > 3 else 0)
    return low == high


def _has_mask(index) -> bool:
    return any(tensor.dtype in (torch.bool, torch.uint8) for tensor in _tensors(index))
