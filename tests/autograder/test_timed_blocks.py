"""What a timed block costs the student's worker: inputs mapped, not copied; CPU spent before "go" charged."""

import os
import pickle
import signal
import subprocess
import sys
import time

import pytest
import torch

from autograder import harness, protocol, session, standins
from autograder.clock import tree_cpu_seconds
from autograder.worker import Worker, output_digest


def test_mapped_tensors_come_back_equal_with_their_strides(tmp_path):
    base = torch.randn(1000, 100)
    calls = [(torch.randn(300, 200), base[:, ::3], torch.arange(10), 2.5), (base.t(),)]
    mapped = pickle.loads(pickle.dumps(protocol.map_tensors(calls, tmp_path / "block.bin")))  # as the worker receives them
    assert [type(v).__name__ for v in mapped[0]] == ["MappedTensor", "MappedTensor", "MappedTensor", "float"]  # small ones too: cheaper than pickling
    opened = [[value.open() if isinstance(value, protocol.MappedTensor) else value for value in call] for call in mapped]
    for mine, theirs in zip([v for call in calls for v in call], [v for call in opened for v in call]):
        if isinstance(mine, torch.Tensor):
            assert torch.equal(mine, theirs) and mine.stride() == theirs.stride() and mine.dtype == theirs.dtype
    opened[0][0].zero_()  # copy-on-write: the student's in-place change stays in their process
    assert torch.equal(opened[0][1], base[:, ::3]), "a tensor beside the one changed is unchanged"
    protocol._mapping.clear()  # what the file holds, mapped afresh
    assert not torch.equal(protocol.MappedTensor.open(mapped[0][0]), opened[0][0])


def test_the_worker_binds_mapped_tensors(tmp_path):
    [[mapped]] = protocol.map_tensors([[torch.ones(100, 1000)]], tmp_path / "block.bin")
    bound = Worker._bind(object.__new__(Worker), [mapped])
    assert torch.equal(bound[0], torch.ones(100, 1000))


def test_numpy_arrays_are_mapped_and_come_back_as_arrays(tmp_path):
    """Module 07 times numba functions of numpy arrays: their inputs are mapped like tensors, and open as arrays."""
    import numpy as np

    wide, kept = np.random.rand(300, 200).astype(np.float32), np.array(["not", "numeric"])
    [[mapped, kept]] = pickle.loads(pickle.dumps(protocol.map_tensors([[wide, kept]], tmp_path / "block.bin")))
    assert isinstance(mapped, protocol.MappedTensor) and mapped.numpy and type(kept) is np.ndarray
    opened = Worker._bind(object.__new__(Worker), mapped)
    assert type(opened) is np.ndarray and opened.dtype == np.float32 and np.array_equal(opened, wide)


def test_course_functions_travel_by_name():
    """The intrinsic passed to a student's function reaches the worker by name; nothing outside the course's package does."""
    from gpucourse.intrinsics import mma_16x16

    worker = session.StudentWorker([], None, None, [])  # marshal needs no process
    marker = worker.marshal(mma_16x16)
    assert marker == protocol.LibraryFunction("gpucourse.intrinsics", "mma_16x16") and marker.open() is mma_16x16
    with pytest.raises(ValueError, match="not a course function"):
        protocol.LibraryFunction("os", "system").open()


def test_tree_cpu_counts_threads_that_ended_and_children_alive_or_reaped():
    burn = ("import threading, time\n"
            "def burn():\n    t = time.process_time()\n    while time.process_time() - t < 0.3:\n        pass\n"
            "thread = threading.Thread(target=burn)\nthread.start()\nthread.join()\n")
    # One child burns 0.3 s in a thread that ends and then sleeps on; the other burns 0.3 s, ends and is waited for.
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {burn + 'time.sleep(30)'!r}])\n"
                               f"subprocess.run([sys.executable, '-c', {burn!r}])\nprint('reaped', flush=True)\ntime.sleep(30)"],
                              start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "reaped\n"
        deadline = time.monotonic() + 20
        while tree_cpu_seconds([parent.pid]) < 0.6 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert 0.6 <= tree_cpu_seconds([parent.pid]) < 5  # both children's ended threads are in, with the start-ups
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


@pytest.mark.parametrize("wall, running, loading, calls, expected", [
    (0.020, 0.019, 0.001, 10, 0.020),  # an honest block: its wall time
    (0.020, 0.040, 0.001, 10, 0.040),  # two threads busy: charged their CPU time
    (0.005, 0.004, 0.105, 10, 0.005 + 0.105 - standins.LOAD_CPU_ALLOWANCE - 10 * standins.LOAD_CPU_ALLOWANCE_PER_CALL),  # work before "go"
])
def test_a_block_is_charged_what_its_worker_used(wall, running, loading, calls, expected):
    assert standins._charged_seconds(wall, running, loading, [()] * calls) == pytest.approx(expected)


@pytest.mark.parametrize("wall, running, loading, calls, expected", [
    (0.080, 0.019, 0.001, 10, 0.019),  # an honest block on a busy machine: its CPU time, not the time it waited for a core
    (0.020, 0.040, 0.001, 10, 0.040),  # two threads busy: their CPU time
    (0.005, 0.004, 0.105, 10, 0.004 + 0.105 - standins.LOAD_CPU_ALLOWANCE - 10 * standins.LOAD_CPU_ALLOWANCE_PER_CALL),  # work before "go"
])
def test_a_sandboxed_cpu_block_is_charged_its_cpu_time(wall, running, loading, calls, expected):
    assert standins._charged_seconds(wall, running, loading, [()] * calls, cpu_only=True) == pytest.approx(expected)


def test_cpu_digests_are_exact_and_keyed():
    weights = torch.rand(4099, dtype=torch.float64) + 0.5
    output = torch.randn(300, 7)
    digest = output_digest(output, weights)
    assert isinstance(digest, int) and digest == output_digest(output.clone(), weights)
    nudged = output.clone()
    nudged[123, 4] = torch.nextafter(nudged[123, 4], torch.tensor(10.0))
    assert output_digest(nudged, weights) != digest  # one ulp of one element
    assert output_digest(output, torch.rand(4099, dtype=torch.float64) + 0.5) != digest  # a new key, a new digest
    standins._check_digests("f", [output], [digest], weights)
    with pytest.raises(AssertionError, match="not those the timed run produced"):
        standins._check_digests("f", [nudged], [digest], weights)


@pytest.mark.slow
def test_compile_caches_live_in_each_workers_own_folder(tmp_path):
    """torch.compile's cache (Inductor's) is in the worker's own folder, so no other student, and no
    runner that counts this student's ops, ever loads what this worker compiled."""
    from autograder import skeleton
    from autograder.skeleton import Plan

    cell = "from torch._inductor.runtime.cache_dir_utils import cache_dir\n\ndef where():\n    return cache_dir()\n"
    test = skeleton.TestItem("test_where", 1.0, f"assert where().startswith({str(tmp_path / 'work')!r} + '/'), where()")
    plan = Plan(context=[], student_cells=[cell], items=[test], api_names=["where"])
    (tmp_path / "work").mkdir()
    [item] = harness.grade(plan, tmp_path / "work").items
    assert item.outcome == "passed", item.message


def _timed_against_the_matmul_in_place(tmp_path, student: str, name: str, size: int, rounds: int = 15) -> str:
    """Grade a test that times ``name`` (defined by ``student``) against ``a @ b`` on size × size inputs and
    asserts it is not measured faster; the failure message, or "" if it passed."""
    from autograder import skeleton
    from autograder.skeleton import Plan

    setup = "import torch\nfrom gpucourse import check, timing\n\ndef in_place(a, b):\n    return a @ b\n"
    test = (f"result = timing.compare_speed(in_place, {name}, lambda: (torch.randn({size}, {size}), torch.randn({size}, {size})), rounds={rounds},\n"
            "                              check=lambda args, out: check.assert_close(out, args[0] @ args[1], rtol=1e-3, atol=1e-3))\n"
            f"assert result.speedup < 1.3, f'{name} was not charged all its work: {{result}}'\n")
    plan = Plan(context=[setup], student_cells=[setup, student], items=[skeleton.TestItem("test_charged", 1.0, test)], api_names=[name])
    (tmp_path / "work").mkdir()
    [item] = harness.grade(plan, tmp_path / "work").items
    return "" if item.outcome == "passed" else item.message


@pytest.mark.slow
def test_a_second_thread_is_charged_its_cpu_time(tmp_path):
    """A timed function that runs its matmul on two threads, against the same matmul on the one thread the
    grader allows: charged the CPU time both threads used, it is no faster (on two free cores its wall time halves)."""
    student = ("import torch\n\ndef two_threads(a, b):\n    torch.set_num_threads(2)\n    try:\n        return a @ b\n"
               "    finally:\n        torch.set_num_threads(1)\n")
    assert _timed_against_the_matmul_in_place(tmp_path, student, "two_threads", 768) == ""


@pytest.mark.slow
def test_work_done_in_a_child_process_is_charged(tmp_path):
    """A timed function whose forked child does the matmul and is waited for before the function returns: the
    child's CPU time is charged (its parent's ``cutime``), so it is no faster than the matmul done in place."""
    student = ("import os\nimport torch\n\ndef in_a_child(a, b):\n    path = f'product-{os.getpid()}.pt'\n    child = os.fork()\n"
               "    if child == 0:\n        torch.save(a @ b, path)\n        os._exit(0)\n    os.waitpid(child, 0)\n"
               "    product = torch.load(path)\n    os.remove(path)\n    return product\n")
    assert _timed_against_the_matmul_in_place(tmp_path, student, "in_a_child", 1536, rounds=5) == ""
