"""What the grader watches while Triton kernels run in one of its runners (modules 06 and 07).

Two things the test's own checks cannot see:

- **Which kernels a launcher launched, and what else it did.** A launcher (``triton_fused``,
  ``triton_matmul``) is graded in the profile runner (the ``profile`` row of :data:`autograder.runners.RUNNERS`):
  a fresh process holding only the setup cells, the launcher's cell (checked by :mod:`gpucourse.gates.torch_gate`
  as a launcher's) and the checked sources of the kernels it launches. There each launch is a profiler
  range ``triton::<kernel>`` (:func:`gpucourse.gates.ops.install_launch_hooks`), and the grader's count
  (:func:`autograder.profiling.counted_call`) holds the launches and the ATen ops run outside them.
  An answer that launches no kernel, or launches one on part of the data and computes the rest with
  torch, shows a computing op there (:func:`gpucourse.gates.ops.work_outside_kernels`).
- **Loads and stores outside the tensors a kernel was given.** Triton's interpreter reads and writes
  raw addresses: a load without a mask reads whatever lies past the tensor (a GPU may fault there, or
  read garbage into a lane the store then drops). :func:`install_bounds_checks` makes every unmasked
  lane of every load and store fail unless it lies inside one of the launch's tensor arguments.

The grader installs both in its runners before any of the student's code is there; in a notebook
:func:`gpucourse.gates.ops.launched_ops` installs the launch ranges (not the bounds checks).
The launch ranges live in :mod:`gpucourse.gates.ops`, where both sides reach them; the bounds checks
only in the grader's runners.
"""

from __future__ import annotations

import numpy as np

from gpucourse.gates.ops import install_launch_hooks, launch_ranges

__all__ = ["install_bounds_checks", "install_launch_hooks"]  # the runners' preambles install both from here


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
    ranges = launch_ranges()
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
