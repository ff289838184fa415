"""A block scheduler for numba's CUDA simulator that waits instead of polling.

The simulator runs each CUDA thread of a block as a Python thread. Its ``BlockManager.run``
finds out when every thread has reached ``cuda.syncthreads()`` (or finished) by polling all of
them in a busy loop, which holds the GIL about half the time: on a small machine the threads
doing the kernel's work get the other half. Here the threads count themselves in and out of
each barrier under a condition variable, and the manager sleeps until the block is done.

The semantics are the simulator's own: a barrier opens once every thread of the block that is
still running has reached it (a thread that returned no longer holds it up); the first thread
that raises aborts the others (each raises at its next barrier) and its exception, with the
thread and block in its message, is raised from the launch.

:func:`install` patches ``numba.cuda.simulator.kernel`` in place, once per process; it is
called wherever this package chooses or instruments the simulator. numba-cuda is pinned in
``constraints.txt``; ``tests/gpucourse/test_simulator_blocks.py`` holds the semantics above.
"""

from __future__ import annotations

import threading

import numpy as np

_installed = False


def install() -> None:
    """Make numba's simulator use this scheduler (idempotent)."""
    global _installed
    if _installed:
        return
    from numba.cuda.simulator import kernel as simulated

    original_thread_run = simulated.BlockThread.run

    def thread_run(thread):
        try:
            original_thread_run(thread)  # records the thread's exception, if any
        finally:
            _thread_finished(thread._manager, thread)

    simulated.BlockThread.run = thread_run
    simulated.BlockThread.syncthreads = _syncthreads
    simulated.BlockManager.run = _run_block
    _installed = True


def _run_block(manager, grid_point, *args) -> None:
    """Run one block's threads to the end (``BlockManager.run``)."""
    from numba.cuda.simulator.kernel import BlockThread

    def target():
        manager._f(*args)

    threads = [BlockThread(target, manager, grid_point, block_point, manager._debug)
               for block_point in np.ndindex(*manager._block_dim)]
    manager._barrier = threading.Condition()
    manager._running, manager._arrived, manager._opened, manager._failed = len(threads), 0, 0, None
    for thread in threads:
        thread.start()
    with manager._barrier:
        while manager._running and manager._failed is None:
            manager._barrier.wait()
        failed = manager._failed
    if failed is None:
        failed = next((thread for thread in threads if thread.exception), None)
    else:  # stop the others at their next barrier, as the simulator does
        with manager._barrier:
            for thread in threads:
                thread.abort = True
            manager._barrier.notify_all()
    if failed is not None:
        raise failed.exception[0].with_traceback(failed.exception[1])


def _syncthreads(thread) -> None:
    """``cuda.syncthreads()`` for one simulated thread (``BlockThread.syncthreads``)."""
    if thread.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    manager = thread._manager
    with manager._barrier:
        manager._arrived += 1
        if manager._arrived == manager._running:
            _open_barrier(manager)
        else:
            opened = manager._opened
            while manager._opened == opened and not thread.abort:
                manager._barrier.wait()
    if thread.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


def _thread_finished(manager, thread) -> None:
    with manager._barrier:
        manager._running -= 1
        if thread.exception is not None and manager._failed is None:
            manager._failed = thread
        if manager._running and manager._arrived == manager._running:
            _open_barrier(manager)  # the threads still running all wait at the barrier
        manager._barrier.notify_all()


def _open_barrier(manager) -> None:
    manager._opened += 1
    manager._arrived = 0
    manager._barrier.notify_all()
