"""The untrusted side of grading: a process that runs one student's code and answers calls.

Started by :mod:`autograder.sandbox` (``python -I -m autograder.worker IN_FD OUT_FD``) in
the submission's own scratch folder. It executes the student's cells one at a time, then
calls the student's functions on arguments the harness sends. It never sees a test cell,
and it never decides a grade: it only returns values, which the harness checks.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import itertools
import linecache
import os
import queue
import sys
import threading
import traceback
import zlib

import numpy as np
import torch

from gpucourse import sim

from . import protocol
from .protocol import Answer, Reply


class _NoIPython:
    """``get_ipython()`` while grading: magics and shell escapes do nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def transform_magics(source: str) -> str:
    """A cell as the worker runs it: IPython's magics and shell escapes made Python."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    return TransformerManager().transform_cell(source)


def output_digest(output, weights: torch.Tensor, on_gpu: bool | None = None) -> float | int | None:
    """A digest of every element of a timed output, keyed by random weights the harness chose.

    Sent when the clock stops and checked against the outputs fetched afterwards: code that
    reports "done" before computing its outputs cannot match it, and it cannot be worked out
    more cheaply than the outputs themselves. It is part of the timed run, so it must cost little
    beside the work: for an output on the CPU, the wrapping sum of its bytes as 64-bit words, salted
    with the key (an int: exact whatever the order of the additions, and one vectorised pass: 0.1 ms
    for 2 M floats, where a CRC-32 took 2 ms and a float64 dot product 36 ms for 4 M floats, as long
    as module 06's fused kernel); on a GPU, a float64 dot product with the weights computed there (a
    float: no copy to the host). ``on_gpu`` picks the kind when checking a fetched output (by the
    kind reported).
    """
    if type(output) is np.ndarray and output.dtype.kind in "biuf":
        output = torch.from_numpy(np.ascontiguousarray(output))
    if type(output) is not torch.Tensor or output.is_complex():
        return None
    if not (output.device.type != "cpu" if on_gpu is None else on_gpu):
        return _word_sum(output.detach().contiguous().reshape(-1).view(torch.uint8), zlib.crc32(weights.numpy().tobytes()))
    flat = output.detach().reshape(-1).to(torch.float64)
    if flat.numel() == 0:
        return 0.0
    repeats = -(-flat.numel() // weights.numel())
    return float(flat @ weights.to(flat.device).repeat(repeats)[: flat.numel()])


def _word_sum(raw: torch.Tensor, key: int) -> int:
    """The bytes ``raw`` (uint8, contiguous) summed as 64-bit words modulo 2**64, with their tail and
    length, salted with ``key``."""
    whole = raw.numel() // 8 * 8
    words = int(raw[:whole].view(torch.int64).sum()) if whole else 0
    tail = int.from_bytes(raw[whole:].numpy().tobytes(), "little")
    return (words + 0x9E3779B97F4A7C15 * tail + key * (raw.numel() + 1)) % 2**64


def _tensor_arguments(args, kwargs) -> dict:
    """A call's tensor arguments as they are now, for the harness to copy back into its own (None for the others)."""
    plain = lambda value: to_plain(value) if type(value) is torch.Tensor else None  # noqa: E731
    return {"args": [plain(arg) for arg in args], "kwargs": {key: plain(value) for key, value in kwargs.items()}}


def to_plain(value, depth: int = 0):
    """Convert a student's return value into data ``torch.load(weights_only=True)`` accepts."""
    if depth > 20:
        raise TypeError("the returned value is nested too deeply")
    if type(value) is torch.Tensor:  # exactly a tensor: subclasses could defer work past the timer
        return protocol.pack_tensor(value)
    if isinstance(value, torch.Tensor):
        raise TypeError(f"returned a {type(value).__name__} (a tensor subclass); return a plain torch.Tensor")
    for plain in (bool, int, float, str, bytes):  # subclasses (a float whose < always holds) are flattened
        if isinstance(value, plain):
            return plain(value)
    if value is None:
        return None
    if isinstance(value, complex):
        return {"__complex__": (value.real, value.imag)}
    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"__device__": str(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple: keep its field names
        return {"__object__": type(value).__name__, "attributes": to_plain(dict(zip(value._fields, value)), depth + 1)}
    if isinstance(value, (list, tuple)):  # torch.Size is a tuple
        converted = [to_plain(item, depth + 1) for item in value]
        return converted if isinstance(value, list) else tuple(converted)
    if isinstance(value, dict):
        return {str(key): to_plain(item, depth + 1) for key, item in value.items()}
    module = type(value).__module__
    if type(value) is np.ndarray and value.dtype.kind in "biuf":
        return {"__ndarray__": protocol.pack_tensor(torch.from_numpy(np.ascontiguousarray(value)))}
    if module == "numpy":
        return to_plain(value.tolist() if hasattr(value, "tolist") else float(value), depth + 1)
    if hasattr(value, "__dict__"):
        return {"__object__": type(value).__name__, "attributes": to_plain(_attributes(value), depth + 1)}
    raise TypeError(f"returned a {type(value).__name__}, which the grader cannot read back")


def _attributes(value) -> dict:
    """An object's attributes, its public properties included (a dataclass's ``occupancy``
    property is part of the answer as much as its fields are)."""
    attributes = dict(vars(value))
    for name in dir(type(value)):
        if not name.startswith("_") and isinstance(getattr(type(value), name, None), property):
            attributes[name] = getattr(value, name)
    return attributes


class Worker:
    def __init__(self, fd_in: int, fd_out: int):
        self.fd_in, self.fd_out = fd_in, fd_out
        self.namespace = {"__name__": "__main__", "__builtins__": builtins, "get_ipython": _NoIPython}
        self.block = None
        self.block_outputs = None
        # Captured before any student code runs: a student's patch of torch.cuda.synchronize
        # cannot make the harness's clock stop before the GPU has finished.
        self._synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        self._set_threads = torch.set_num_threads
        self._cells = itertools.count(1)
        self._threads = torch.get_num_threads()
        self.iterator = None
        # One thread reads the harness's pipe: a callback's reply goes to the thread that waits for it
        # (a student's loader thread, see do_iterate), every other message to the main loop.
        self._commands, self._replies = queue.Queue(), queue.Queue()
        self._send_lock, self._callback_lock = threading.Lock(), threading.Lock()

    def send(self, *message) -> None:
        data = protocol.encode_for_harness(message)
        with self._send_lock:
            protocol.write_frame(self.fd_out, data)

    def receive(self):
        message = self._commands.get()
        if message is None:
            raise protocol.ChannelClosed("the harness closed its pipe")
        return message

    def _read_forever(self) -> None:
        while True:
            try:
                message = protocol.decode_from_harness(protocol.read_frame(self.fd_in))
            except (protocol.ChannelClosed, OSError):
                self._commands.put(None)
                self._replies.put(None)
                return
            (self._replies if message[0] in (Answer.RETURN, Answer.RAISE) else self._commands).put(message)

    def serve(self) -> None:
        threading.Thread(target=self._read_forever, name="harness-reader", daemon=True).start()
        self.send(Reply.READY)  # before any student code: the harness tells its own failures from theirs
        while True:
            try:
                message = self.receive()
            except protocol.ChannelClosed:
                return
            try:
                kind = protocol.check_request(message)
            except ValueError as refused:  # the grader's own mistake: said so, and the worker serves on
                self.send(Reply.RAISE, "ValueError", f"ValueError: the worker refused a request: {refused}")
                continue
            try:
                getattr(self, f"do_{kind.value}")(*message[1:])
            except Exception as error:  # noqa: BLE001 - reported to the harness as the student's error
                self.send(Reply.RAISE, type(error).__name__, _describe(error))

    def do_exec(self, source: str) -> None:
        source = transform_magics(source)
        filename = f"<student cell {next(self._cells)}>"
        # Known to linecache, so tracebacks and the kernel tracer can show the student's lines.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        code = compile(source, filename, "exec")
        exec(code, self.namespace)  # noqa: S102 - running the student's code is the point
        self.send(Reply.OK)

    def do_names(self, names: list[str]) -> None:
        kinds = {}
        for name in names:
            if name not in self.namespace:
                kinds[name] = "missing"
            else:
                kinds[name] = "callable" if callable(self.namespace[name]) else "value"
        self.send(Reply.NAMES, kinds)

    def do_value(self, name: str) -> None:
        self.send(Reply.RETURN, to_plain(self.namespace[name]))

    def do_call(self, name: str, args, kwargs) -> None:
        self._set_threads(self._threads)
        result = self.namespace[name](*self._bind(args), **self._bind(kwargs))
        self.send(Reply.RETURN, to_plain(result))

    def do_call_in_place(self, name: str, args, kwargs) -> None:
        """A call whose tensor arguments go back with its output, as they are after it (what it wrote into them)."""
        self._set_threads(self._threads)
        args, kwargs = self._bind(args), self._bind(kwargs)
        result = self.namespace[name](*args, **kwargs)
        self.send(Reply.RETURN, {"output": to_plain(result), **_tensor_arguments(args, kwargs)})

    def do_call_streams(self, name: str, args, kwargs, dispatch) -> None:
        """A call whose ``gpucourse.streams`` calls the harness carries out and records (``dispatch``)."""
        from gpucourse import streams

        with streams.using(streams.RemoteBackend(self._bind(dispatch))):
            self.do_call(name, args, kwargs)

    def do_call_profiled(self, name: str, args, top_level: bool = False, eager: bool = False) -> None:
        """One call counted by the grader's profiler (a profile runner: only setup cells and one checked
        answer cell ran here), after a warm-up call on other values of the same shapes; ``top_level``:
        only the ops called from Python (:func:`autograder.profiling.counted_call`); ``eager``: with
        ``torch.compile`` switched off, so the ops are those the function's code calls (module 09)."""
        from .profiling import counted_call, fresh_like

        self._set_threads(self._threads)
        args = self._bind(args)
        function = self.namespace[name]
        with torch.compiler.set_stance("force_eager") if eager else contextlib.nullcontext():
            function(*fresh_like(args))
            output, ops = counted_call(function, *args, top_level=bool(top_level))
        self.send(Reply.RETURN, {"output": to_plain(output), "ops": ops})

    def do_call_logged_mma(self, name: str, a, b, key) -> None:
        """``name(a, b, mma)`` with an intrinsic that records its operands (a runner that holds only the
        setup cells and the checked answer cell: the ``njit`` row of :data:`autograder.runners.RUNNERS`)."""
        from gpucourse.intrinsics import logged_call

        output, calls = logged_call(self.namespace[name], a, b, key)
        self.send(Reply.RETURN, {"output": to_plain(output), "calls": to_plain(calls)})

    def do_start_tally(self, secret) -> None:
        """Tally the grader's counting intrinsic's calls from now on (``gpucourse.intrinsics.counting_mma``), under the
        grader's ``secret``; in an njit runner, where only the setup cells and the checked answer cell ran."""
        from gpucourse.intrinsics import start_tally

        start_tally(secret)
        self.send(Reply.OK)

    def do_read_tally(self) -> None:
        """The tally since ``start_tally``, as plain data, for the grader to check."""
        from gpucourse.intrinsics import read_tally

        self.send(Reply.RETURN, read_tally())

    def do_iterate(self, name: str, args, kwargs) -> None:
        """Call a function that returns an iterator (a generator), kept for ``next`` and ``close``."""
        self._set_threads(self._threads)
        self.iterator = iter(self.namespace[name](*self._bind(args), **self._bind(kwargs)))
        self.send(Reply.OK)

    def do_next(self) -> None:
        try:
            value = next(self.iterator)
        except StopIteration:
            self.send(Reply.STOP)
            return
        self.send(Reply.ITEM, to_plain(value))

    def do_close(self) -> None:
        iterator, self.iterator = self.iterator, None
        getattr(iterator, "close", lambda: None)()
        self.send(Reply.OK)

    def do_launch(self, name: str, config, args, observers=()) -> None:
        """Launch a ``@cuda.jit`` kernel; send back its array arguments as they are after it,
        and what the observers the test has open (counts, traces) saw of it (simulator only)."""
        self._set_threads(self._threads)
        args = self._bind(args)
        with sim.observing(observers) as watching:
            self.namespace[name][config](*args)
            self._synchronize()
        arrays = [to_plain(arg) if isinstance(arg, np.ndarray) else None for arg in args]
        self.send(Reply.RETURN, {"arrays": arrays, "observed": {kind: to_plain(o.export()) for kind, o in watching.items()}})

    def do_launch_triton(self, name: str, grid, args, kwargs) -> None:
        """Launch a ``@triton.jit`` kernel, ``kernel[grid](*args, **kwargs)``; send back its tensor arguments as they are after it."""
        self._set_threads(self._threads)
        args, kwargs = self._bind(args), self._bind(kwargs)
        self.namespace[name][tuple(grid)](*args, **kwargs)
        self._synchronize()
        self.send(Reply.RETURN, _tensor_arguments(args, kwargs))

    def do_kernel_source(self, name: str) -> None:
        """The kernel's self-contained source, for the grader to check and compile (plain data)."""
        from gpucourse.kernel_source import kernel_source

        self.send(Reply.RETURN, kernel_source(self.namespace[name]).to_plain())

    def do_load_block(self, name: str, calls) -> None:
        calls = [self._bind(args) for args in calls]
        self.block = (self.namespace[name], [_pinned(args) for args in calls] if torch.cuda.is_available() else calls)
        self.send(Reply.OK)

    def do_run_block(self, weights: torch.Tensor) -> None:
        fn, calls = self.block
        self.block = None
        self._set_threads(self._threads)
        outputs = [fn(*args) for args in calls]
        digests = [output_digest(output, weights) for output in outputs]
        self._synchronize()
        self.block_outputs = outputs
        self.send(Reply.DONE, digests)

    def do_fetch_block(self) -> None:
        outputs, self.block_outputs = self.block_outputs, None
        replies = [to_plain(output) for output in outputs]
        del outputs
        # Every object alive now goes to the collector's permanent generation, before the reply: a
        # full collection (100 ms and more with torch loaded) must not fall in the next block's
        # loading, whose CPU time the harness charges to the timed run. The young generations are
        # collected first (cheap), so the block's own cyclic garbage is not kept forever.
        gc.collect(1)
        gc.freeze()
        self.send(Reply.RETURN, replies)

    def _bind(self, value):
        """Replace Callback markers in arguments by functions that call back into the harness,
        and mapped tensors (a timed block's inputs) by the tensors they map."""
        if isinstance(value, protocol.Callback):
            return self._callback(value.callback_id)
        if isinstance(value, protocol.MappedTensor | protocol.LibraryFunction):
            return value.open()
        if isinstance(value, tuple):
            return tuple(self._bind(item) for item in value)
        if isinstance(value, list):
            return [self._bind(item) for item in value]
        if isinstance(value, dict):
            return {key: self._bind(item) for key, item in value.items()}
        return value

    def _callback(self, callback_id: int):
        def call_harness(*args, **kwargs):
            message = (Reply.CALLBACK, callback_id, to_plain(args), to_plain(kwargs))
            with self._callback_lock:  # one call at a time, from any thread: each reply is its own
                self.send(*message)
                reply = self._replies.get()
            if reply is None:
                raise RuntimeError("the grader is gone")
            if reply[0] == Answer.RETURN:
                return reply[1]
            raise RuntimeError(f"the test's function raised {reply[1]}: {reply[2]}")

        return call_harness


def _pinned(value):
    """On a GPU grader, the host tensors of a timed call arrive in pinned memory (untimed), as a
    ``DataLoader(pin_memory=True)`` hands them over: copies from them can overlap other work."""
    if type(value) is torch.Tensor and value.device.type == "cpu":
        return value.pin_memory()
    if isinstance(value, (list, tuple)):
        return type(value)(_pinned(item) for item in value)
    return value


def _describe(error: BaseException) -> str:
    """The error's message and the last student frames, short enough for feedback."""
    lines = traceback.format_exception_only(type(error), error)
    return "".join(lines).strip()[-2000:]


class _NoGraderPackage:
    """An import hook that refuses the grader's package (see :func:`seal`)."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == protocol.GRADER_PACKAGE:
            raise ModuleNotFoundError(f"No module named {name!r}: graded code runs without the grader's package", name=name)
        return None


def seal() -> None:
    """Make the grader's package unreachable by import before any student code runs here.

    The student's own code must not call the grader's counting or reference code (``autograder.profiling`` would
    answer module 06's ``count_ops``): every ``autograder`` module goes from ``sys.modules`` (this worker's own
    functions keep their globals) and imports of it are refused. The hook is a convenience, not the defence: the
    sandbox shows a sealed worker none of the package's files but the three it starts from
    (:func:`autograder.sandbox.grader_only_paths`), so code that removes the hook imports nothing that counts.
    """
    for name in [name for name in sys.modules if name.partition(".")[0] == protocol.GRADER_PACKAGE]:
        del sys.modules[name]
    sys.meta_path.insert(0, _NoGraderPackage())


def main(argv: list[str]) -> int:
    fd_in, fd_out = int(argv[1]), int(argv[2])
    if os.environ.get(protocol.SEALED_ENV) == "1":
        seal()
    # Small thread stacks: the CUDA simulator starts a thread per simulated thread of a block
    # (up to 1024), and 8 MB stacks each would exhaust the address-space limit.
    threading.stack_size(512 * 1024)
    Worker(fd_in, fd_out).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
