"""The simulator's block scheduler (gpucourse/simulator_blocks.py) keeps numba's semantics and waits without polling."""

import time

import numpy as np
import pytest

cuda = None  # numba.cuda in the simulator, set by the fixture: kernels must name it as a global (the simulator swaps it)


@pytest.fixture(scope="module", autouse=True)
def simulator(simulated_cuda):
    from numba.cuda.simulator import kernel as simulated

    from gpucourse import simulator_blocks

    global cuda
    cuda = simulated_cuda
    assert simulated.BlockManager.run is simulator_blocks._run_block, "choosing the simulator installs the scheduler"


def test_barriers_order_shared_memory():
    """A tree sum in shared memory is right only if every barrier holds every thread of the block."""

    @cuda.jit
    def block_sums(x, out):
        partial = cuda.shared.array(64, dtype=np.float32)
        t = cuda.threadIdx.x
        partial[t] = x[cuda.blockIdx.x * 64 + t]
        cuda.syncthreads()
        stride = 32
        while stride > 0:
            if t < stride:
                partial[t] += partial[t + stride]
            cuda.syncthreads()
            stride //= 2
        if t == 0:
            out[cuda.blockIdx.x] = partial[0]

    x = np.arange(3 * 64, dtype=np.float32)
    out = np.zeros(3, dtype=np.float32)
    block_sums[3, 64](x, out)
    np.testing.assert_array_equal(out, x.reshape(3, 64).sum(axis=1))


def test_threads_that_returned_do_not_hold_a_barrier():
    """As in numba's simulator: a barrier opens once every thread still running has reached it."""

    @cuda.jit
    def guarded(x, n):
        i = cuda.threadIdx.x
        if i >= n:
            return
        x[i] += 1.0
        cuda.syncthreads()
        x[i] += 1.0

    x = np.zeros(32, dtype=np.float32)
    guarded[1, 32](x, 20)
    np.testing.assert_array_equal(x, np.r_[np.full(20, 2.0), np.zeros(12)].astype(np.float32))


def test_barrier_counts_and_votes():
    @cuda.jit
    def votes(out):
        t = cuda.threadIdx.x
        out[0] = cuda.syncthreads_count(t % 3 == 0)
        out[1] = cuda.syncthreads_and(t < 100)
        out[2] = cuda.syncthreads_or(t == 7)

    out = np.zeros(3, dtype=np.int32)
    votes[1, 30](out)
    assert out.tolist() == [10, 1, 1]


def test_an_exception_in_one_thread_stops_the_block_and_names_the_thread():
    """Thread 5 raises while the others wait at a barrier: the launch raises its error, at once."""

    @cuda.jit
    def fails(x):
        if cuda.threadIdx.x == 5 and cuda.blockIdx.x == 1:
            raise ValueError("thread five fails")
        cuda.syncthreads()
        x[cuda.threadIdx.x] = 1.0

    started = time.monotonic()
    with pytest.raises(ValueError, match=r"tid=\[5, 0, 0\] ctaid=\[1, 0, 0\]: thread five fails"):
        fails[2, 16](np.zeros(16, dtype=np.float32))
    assert time.monotonic() - started < 10


def test_the_launching_thread_sleeps_while_the_block_runs():
    """numba's own scheduler polls every thread in a busy loop, burning a core for the whole launch."""

    @cuda.jit
    def slow(x):
        time.sleep(0.5)
        cuda.syncthreads()
        x[cuda.threadIdx.x] = 1.0

    x = np.zeros(16, dtype=np.float32)
    wall, cpu = time.monotonic(), time.process_time()
    slow[1, 16](x)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert x.sum() == 16 and wall >= 0.5
    assert cpu < 0.25, f"the launch used {cpu:.2f} s of CPU in {wall:.2f} s while its threads slept"
