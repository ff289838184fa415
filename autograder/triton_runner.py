"""What the grader watches while Triton kernels run in one of its runners (modules 06 and 07).

Two things the test's own checks cannot see:

- **Which kernels a launcher launched, and what else it did.** A launcher (``triton_fused``,
  ``triton_matmul``) is graded in the profile runner (:meth:`autograder.harness.StudentWorker.profile_runner`):
  a fresh process holding only the setup cells, the launcher's cell (checked by :mod:`gpucourse.gates.torch_gate`
  as a launcher's) and the checked sources of the kernels it launches. There each launch is a profiler
  range ``triton::<kernel>`` (:func:`install_launch_hooks`), and the grader's count
  (:func:`autograder.profiling.counted_call`) holds the launches and the ATen ops run outside them.
  An answer that launches no kernel, or launches one on part of the data and computes the rest with
  torch, shows a computing op there (:func:`work_outside_kernels`).
- **Loads and stores outside the tensors a kernel was given.** Triton's interpreter reads and writes
  raw addresses: a load without a mask reads whatever lies past the tensor (a GPU may fault there, or
  read garbage into a lane the store then drops). :func:`install_bounds_checks` makes every unmasked
  lane of every load and store fail unless it lies inside one of the launch's tensor arguments.

The grader installs both in its runners before any of the student's code is there; in a notebook
:func:`launched_ops` installs the launch ranges (not the bounds checks) to count the same way.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

LAUNCH_PREFIX = "triton::"  # each launch is a profiler range "triton::<kernel>": the ops inside are the launch's own
GRID_LABEL = "gpucourse::grid"  # a grid function's range inside a launch: its ops are the launcher's
# Ops that allocate, fill with a constant or view memory: a launcher needs them and none computes a result.
ALLOCATION_OPS = frozenset({
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::zeros", "aten::zeros_like", "aten::zero_",
    "aten::full", "aten::full_like", "aten::fill_", "aten::ones", "aten::ones_like",
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::flatten", "aten::alias", "aten::slice",
    "aten::select", "aten::narrow", "aten::contiguous", "aten::detach", "aten::lift_fresh", "aten::resolve_conj",
    "aten::resolve_neg",
})

_state = threading.local()  # the running launch's tensors' memory, for the bounds checks


def _kernel_classes():
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return JITFunction, InterpretedFunction


def install_launch_hooks() -> None:
    """Wrap ``run`` of Triton's kernel classes once: each launch is labelled for the profiler, recorded,
    and its tensors' memory noted for the bounds checks."""
    for cls in _kernel_classes():
        if getattr(cls.run, "_gpucourse_hook", False):
            continue
        cls.run = _hooked(cls.run)


def _hooked(original):
    def run(self, *args, grid, warmup, **kwargs):
        if warmup:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        tensors = [value for value in [*args, *kwargs.values()] if isinstance(value, torch.Tensor)]
        outer = getattr(_state, "ranges", None)
        _state.ranges = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in tensors]
        if callable(grid):  # Triton calls it inside the launch: its ops are the launcher's, not the kernel's
            grid = _outside_the_launch(grid)
        try:
            with torch.profiler.record_function(LAUNCH_PREFIX + getattr(getattr(self, "fn", None), "__name__", "?")):
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            _state.ranges = outer

    run._gpucourse_hook = True
    return run


def _outside_the_launch(grid):
    def labelled(*args, **kwargs):
        with torch.profiler.record_function(GRID_LABEL):
            return grid(*args, **kwargs)

    return labelled


def inside_a_launch(event) -> bool:
    """Whether a profiler event ran inside a kernel's launch (the interpreter's copies), not in its grid function."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == GRID_LABEL:
            return False
        if parent.name.startswith(LAUNCH_PREFIX):
            return True
        parent = parent.cpu_parent
    return False


def install_bounds_checks() -> None:
    """In Triton's interpreter, refuse any unmasked lane of a load or store outside the launch's tensors."""
    from triton.runtime import interpreter

    install_launch_hooks()
    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_masked_load, "_gpucourse_hook", False):
        return
    load, store = builder.create_masked_load, builder.create_masked_store

    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        _check_lanes(ptrs, mask, "loaded from")
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_policy):
        _check_lanes(ptrs, mask, "stored to")
        return store(self, ptrs, value, mask, cache_policy)

    create_masked_load._gpucourse_hook = create_masked_store._gpucourse_hook = True
    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store


def _check_lanes(ptrs, mask, verb: str) -> None:
    ranges = getattr(_state, "ranges", None)
    if not ranges:
        return
    from triton.runtime.interpreter import _get_np_dtype

    itemsize = np.dtype(_get_np_dtype(ptrs.get_element_ty())).itemsize
    addresses = np.broadcast_to(ptrs.data, np.shape(mask.data))[np.asarray(mask.data, dtype=bool)].astype(np.uint64)
    inside = np.zeros(addresses.shape, dtype=bool)
    for start, nbytes in ranges:
        inside |= (addresses >= start) & (addresses + itemsize <= start + nbytes)
    if not inside.all():
        raise IndexError(f"the kernel {verb} {int((~inside).sum())} address(es) outside every tensor it was given: "
                         "mask the loads and the stores")


def launched_ops(fn, *args) -> dict[str, int]:
    """{op: calls} of one call ``fn(*args)``: each kernel launched as ``triton::<name>``, and the ATen ops run
    outside the launches (:func:`autograder.profiling.counted_call`, which the grader's runners use too)."""
    from .profiling import op_counts

    install_launch_hooks()
    return op_counts(fn, *args)


def work_outside_kernels(ops: dict[str, int]) -> dict[str, int]:
    """The ATen ops of :func:`launched_ops` that compute something (not an allocation, a fill or a view)."""
    return {name: calls for name, calls in ops.items() if name.startswith("aten::") and name not in ALLOCATION_OPS}
