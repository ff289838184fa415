"""The harness's limits on a student's cells: a burst of load is forgiven once, a hang is not."""

import itertools
import time

import pytest

from autograder import harness, sandbox, session, skeleton
from autograder.clock import FairClock
from autograder.outcomes import Outcome
from autograder.skeleton import Plan

pytestmark = pytest.mark.slow

LIMITS = sandbox.Limits(cell_seconds=4, item_seconds=20, notebook_seconds=120, memory_bytes=4 * 1024**3)

# Hangs the first time it runs in this folder, then returns at once: a cell that was slow only
# once (as under a burst of load). The marker file survives the worker's restart.
SLOW_ONCE = """
import os, time
if not os.path.exists("ran-once"):
    open("ran-once", "w").close()
    time.sleep(3600)
ANSWER = 42
"""
HANGS = "import time\ntime.sleep(3600)\n"


def _plan(student_cell: str) -> Plan:
    test = skeleton.TestItem("test_answer", 1.0, "assert answer() == 42, f'got {answer()}'")
    return Plan(context=[], student_cells=[student_cell, "def answer():\n    return ANSWER\n"], items=[test], api_names=["answer"])


def test_a_cell_that_timed_out_once_is_run_again_in_a_fresh_worker(tmp_path):
    (tmp_path / "work").mkdir()
    result = harness.grade(_plan(SLOW_ONCE), tmp_path / "work", LIMITS)
    assert [item.outcome for item in result.items] == [Outcome.PASSED], result.items
    assert not any("skipped" in note for note in result.notes), result.notes


def test_a_cell_that_always_hangs_is_skipped_after_its_second_try(tmp_path):
    (tmp_path / "work").mkdir()
    result = harness.grade(_plan(HANGS + "ANSWER = 42\n"), tmp_path / "work", LIMITS)
    [item] = result.items
    assert item.outcome == Outcome.FAILED, item
    # The test's NameError names the skipped cell as its cause (a plan made by hand has no notebook to point into).
    assert item.message == ("answer raised NameError: name 'ANSWER' is not defined — the cell that defines it "
                            "ran past its time limit and was skipped: your code cell 1"), item.message
    assert "your code cell 1 ran past its time limit; it was skipped" in result.notes


# Forks until the process limit says no, every child sleeping: a fork bomb that spares the machine's cores.
FORKS_TO_THE_LIMIT = """
import os, time
def fill_the_process_limit():
    while True:
        try:
            if os.fork() == 0:
                time.sleep(3600)
                os._exit(0)
        except OSError:
            time.sleep(3600)
"""
SMALL_PROCESS_LIMIT = sandbox.Limits(cell_seconds=30, item_seconds=30, notebook_seconds=120, memory_bytes=4 * 1024**3, processes=160)
needs_a_contained_sandbox = pytest.mark.skipif(sandbox.isolation()[0] not in sandbox.CONTAINED,
                                               reason="a process limit holds only in the namespace sandbox (root ignores RLIMIT_NPROC)")


@needs_a_contained_sandbox
def test_a_cell_that_holds_the_process_limit_is_stopped_at_once_and_not_tried_again(tmp_path):
    (tmp_path / "work").mkdir()
    started = time.monotonic()
    result = harness.grade(_plan(FORKS_TO_THE_LIMIT + "fill_the_process_limit()\nANSWER = 42\n"), tmp_path / "work", SMALL_PROCESS_LIMIT)
    seconds = time.monotonic() - started
    [item] = result.items
    assert item.outcome == Outcome.FAILED and "was skipped: your code cell 1" in item.message, item
    # The threshold: 90 % of this small limit (under the default limit, session.FORK_BOMB_PROCESSES).
    assert "your code cell 1 started 144 processes or more, as a fork bomb does, and was stopped; it was skipped" in result.notes, result.notes
    # Two looks a second apart once the limit is reached, one try: far from the 30 s cell limit, let alone two of them.
    assert seconds < 20, f"grading took {seconds:.0f} s"


@needs_a_contained_sandbox
def test_an_answer_that_holds_the_process_limit_costs_its_item_and_the_next_item_is_graded(tmp_path):
    answer = FORKS_TO_THE_LIMIT + "def answer():\n    fill_the_process_limit()\n"
    items = [skeleton.TestItem("test_bomb", 1.0, "answer()"), skeleton.TestItem("test_after", 1.0, "assert ANSWER == 42")]
    plan = Plan(context=[], student_cells=[answer, "ANSWER = 42\n"], items=items, api_names=["answer", "ANSWER"])
    (tmp_path / "work").mkdir()
    bomb, after = harness.grade(plan, tmp_path / "work", SMALL_PROCESS_LIMIT).items
    assert bomb.outcome == Outcome.CRASHED and bomb.message == (
        "your code started 144 processes or more, as a fork bomb does, and was stopped"), bomb
    assert bomb.seconds < 15, bomb
    assert after.outcome == Outcome.PASSED, after


# Forks a few hundred sleeping children, then waits: far below its process limit, as a bomb whose forks fail for memory first.
FORKS_A_FEW_HUNDRED = """
import os, time
for _ in range(300):
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
time.sleep(3600)
"""


@needs_a_contained_sandbox
def test_a_cell_that_starts_hundreds_of_processes_below_its_limit_is_stopped_at_once(tmp_path):
    (tmp_path / "work").mkdir()
    limits = sandbox.Limits(cell_seconds=30, item_seconds=30, notebook_seconds=120, memory_bytes=4 * 1024**3)
    assert limits.processes * session.PROCESS_LIMIT_SHARE > 300 > session.FORK_BOMB_PROCESSES
    started = time.monotonic()
    result = harness.grade(_plan(FORKS_A_FEW_HUNDRED + "ANSWER = 42\n"), tmp_path / "work", limits)
    seconds = time.monotonic() - started
    assert "your code cell 1 started 256 processes or more, as a fork bomb does, and was stopped; it was skipped" in result.notes, result.notes
    assert seconds < 20, f"grading took {seconds:.0f} s"


def test_honest_processes_below_the_threshold_are_never_stopped(monkeypatch):
    """The watch stops a tree holding FORK_BOMB_PROCESSES processes at two looks in a row, never on one look or below it."""
    counts = iter([300, 100, 255, 256, 1300])
    monkeypatch.setattr(session, "processes_in_trees", lambda roots: next(counts))
    monkeypatch.setattr(session, "WATCH_SECONDS", 0.0)
    watch = session.ProcessWatch(lambda: [1], 1536)
    assert watch.threshold == session.FORK_BOMB_PROCESSES == 256
    for _ in range(4):  # 300 (above it), 100, 255 (below it), 256: one look at a time
        watch.look()
    with pytest.raises(session.ForkBombStopped):
        watch.look()  # 1300: the second look in a row


def _graded_with_a_log(tmp_path, test_source: str, student_cell: str = "def answer():\n    return 42\n"):
    """Grade one item whose test appends a line to a log each time it runs; return the result and the lines."""
    log = tmp_path / "attempts.log"
    context = f"import pathlib\nfrom gpucourse import check, timing\nLOG = pathlib.Path({str(log)!r})\n"
    test = "with LOG.open('a') as handle:\n    handle.write('attempt\\n')\n" + test_source
    plan = Plan(context=[context], student_cells=[student_cell], items=[skeleton.TestItem("test_answer", 1.0, test)], api_names=["answer"])
    (tmp_path / "work").mkdir()
    result = harness.grade(plan, tmp_path / "work", LIMITS)
    return result.items[0], log.read_text().splitlines()


def _calm_waits(monkeypatch, first_try_slowdown: float) -> list[float]:
    """Each first try's mean slowdown is ``first_try_slowdown``; the list collects the waits for calm asked of the clock."""
    waits = []
    monkeypatch.setattr(FairClock, "mean_slowdown", lambda self, since: first_try_slowdown)
    monkeypatch.setattr(FairClock, "wait_for_calm", lambda self, busy: waits.append(busy) or 0.0)
    return waits


def test_a_timing_failure_is_measured_once_more_when_the_load_has_passed(tmp_path, monkeypatch):
    """A speed shortfall may be a burst of load: the item is run again, after the burst (the clock's
    wait_for_calm, tested in test_clock), and passes if the second run does."""
    waits = _calm_waits(monkeypatch, first_try_slowdown=6.0)
    first_run_only = "if len(LOG.read_text().splitlines()) == 1:\n    raise check.TimingFailure('measured 2x, need 3x')\n"
    item, attempts = _graded_with_a_log(tmp_path, first_run_only)
    assert (item.outcome, len(attempts), waits) == (Outcome.PASSED, 2, [6.0]), (item, attempts, waits)


def test_a_conclusive_speed_shortfall_is_not_measured_again(tmp_path, monkeypatch):
    """An answer no faster than the baseline where 4x is needed: no load explains that, so there is no second run
    (wrong slow answers were half the retries of a full test run)."""
    waits = _calm_waits(monkeypatch, first_try_slowdown=6.0)
    slow = ("result = timing.speed_result([1.0] * 5, [0.98, 1.0, 1.02, 1.0, 0.99], 'CPU', 1)\n"
            "check.assert_speedup(result, 4.0, name='answer vs the loop')\n")
    item, attempts = _graded_with_a_log(tmp_path, slow)
    assert (item.outcome, len(attempts), waits) == (Outcome.FAILED, 1, []), (item, attempts, waits)
    assert "measured 1.0× faster, need 4×" in item.message, item.message


def test_a_shortfall_near_the_mark_is_measured_again(tmp_path, monkeypatch):
    """Three times faster where 4x is needed, or a middle half of rounds that reaches half of it: measured once more."""
    _calm_waits(monkeypatch, first_try_slowdown=1.0)
    for index, candidate_times in enumerate(("[1 / 3] * 5", "[1.0, 1.0, 1.0, 0.4, 0.4]")):
        near = f"check.assert_speedup(timing.speed_result([1.0] * 5, {candidate_times}, 'CPU', 1), 4.0)\n"
        (tmp_path / str(index)).mkdir()
        item, attempts = _graded_with_a_log(tmp_path / str(index), near)
        assert (item.outcome, len(attempts)) == (Outcome.FAILED, 2), (candidate_times, item, attempts)


# The first call in this folder gets its process killed by the kernel with SIGKILL (its CPU-time limit: a
# PID namespace's init ignores a SIGKILL sent from inside it), as the out-of-memory killer would kill it
# when another process exhausts the machine's memory; later calls (in a fresh worker) answer.
_KILLED_BY_THE_KERNEL = """
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)  # past the soft limit; SIGKILL past the hard one
        limit = int(time.process_time()) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
        while True:
            pass
"""
KILLED_ONCE = """
import os, resource, signal, time

def answer():
    if not os.path.exists("killed-once"):
        open("killed-once", "w").close()
""" + _KILLED_BY_THE_KERNEL + """    return 42
"""
ALWAYS_KILLED = "import os, resource, signal, time\n\ndef answer():\n    if True:\n" + _KILLED_BY_THE_KERNEL


def _out_of_memory_kills_meanwhile(monkeypatch):
    """The machine's count of out-of-memory kills (read by the harness, in this process) rises between reads."""
    kills = itertools.count()
    monkeypatch.setattr(harness, "oom_kills", lambda: next(kills))


def test_a_worker_the_out_of_memory_killer_chose_gets_its_item_graded_once_more(tmp_path, monkeypatch):
    """A correct answer whose worker the out-of-memory killer chose (a neighbour's fork bomb) keeps its points."""
    _out_of_memory_kills_meanwhile(monkeypatch)
    item, attempts = _graded_with_a_log(tmp_path, "assert answer() == 42\n", KILLED_ONCE)
    assert (item.outcome, len(attempts)) == (Outcome.PASSED, 2), (item, attempts)


def test_an_answer_killed_each_time_is_tried_twice_and_crashes(tmp_path, monkeypatch):
    _out_of_memory_kills_meanwhile(monkeypatch)
    item, attempts = _graded_with_a_log(tmp_path, "assert answer() == 42\n", ALWAYS_KILLED)
    assert (item.outcome, len(attempts)) == (Outcome.CRASHED, 2), (item, attempts)
    assert "killed by signal 9" in item.message, item.message


def test_a_sigkill_without_an_out_of_memory_kill_gets_no_second_draw(tmp_path):
    """The student's code can have itself killed (here by its own CPU-time limit): no second draw for that."""
    item, attempts = _graded_with_a_log(tmp_path, "assert answer() == 42\n", KILLED_ONCE)
    assert (item.outcome, len(attempts)) == (Outcome.CRASHED, 1), (item, attempts)


def test_a_crash_of_another_kind_gets_no_second_draw(tmp_path):
    item, attempts = _graded_with_a_log(tmp_path, "assert answer() == 42\n", "import os\n\ndef answer():\n    os._exit(3)\n")
    assert (item.outcome, len(attempts)) == (Outcome.CRASHED, 1), (item, attempts)


def test_a_wrong_answer_gets_no_second_draw(tmp_path, monkeypatch):
    """Any other failure stands: a retry on new random inputs would pass an answer that is wrong half the time, 3 times in 4."""
    waits = _calm_waits(monkeypatch, first_try_slowdown=6.0)
    item, attempts = _graded_with_a_log(tmp_path, "assert answer() == 42, 'wrong'\n", "def answer():\n    return 41\n")
    assert (item.outcome, len(attempts), waits) == (Outcome.FAILED, 1, []), (item, attempts, waits)
    assert item.message == "AssertionError: wrong", item.message


def test_an_answer_that_raises_a_timing_failure_itself_gets_no_second_draw(tmp_path, monkeypatch):
    """A wrong answer that raises the course's TimingFailure (inconclusive, as the grader's own would be) to buy a
    second draw of inputs: an exception from the student's process is the student's error, never a measurement."""
    waits = _calm_waits(monkeypatch, first_try_slowdown=6.0)
    cheat = "from gpucourse import check\n\ndef answer():\n    raise check.TimingFailure('measured 3.9x, need 4x')\n"
    item, attempts = _graded_with_a_log(tmp_path, "assert answer() == 42\n", cheat)
    assert (item.outcome, len(attempts), waits) == (Outcome.FAILED, 1, []), (item, attempts, waits)


def _notebook_with_a_raising_answer():
    """A notebook as JupyterLab shows it: markdown, setup, Question 1 whose answer raises, a plain cell of the student's."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    def graded(source, grade_id, **nbgrader):
        return new_code_cell(source, id=grade_id, metadata={"nbgrader": {"grade_id": grade_id, **nbgrader}})

    return new_notebook(cells=[
        new_markdown_cell("# Assignment", id="title"),
        graded("import math", "imports", locked=True),
        new_markdown_cell("## Question 1: the answer (2 points)", id="q1"),
        graded("def compute():\n    raise NotImplementedError('replace this line')\n\nANSWER = compute()", "answer", solution=True),
        graded("assert ANSWER == 42, ANSWER", "test_answer", grade=True, points=2),
        new_code_cell("SPARE = 1 / 0\n", id="mine"),
        graded("assert SPARE == 1", "test_spare", grade=True, points=1),
        new_markdown_cell("## Question 2: a released stub, which defines nothing (1 point)", id="q2"),
        graded("raise NotImplementedError('replace this line')", "stub", solution=True),
        graded("assert STUB_VALUE == 1", "test_stub", grade=True, points=1),
        new_markdown_cell("## Question 3: no answer cell (1 point)", id="q3"),
        graded("assert UNDEFINED == 1", "test_undefined", grade=True, points=1),
    ])


def test_notes_and_name_errors_name_the_cell_as_the_student_finds_it(tmp_path):
    """An answer cell by its question and grade_id, any other cell by its place among all cells (markdown
    included) and first line; a later NameError names the failed cell that should have defined the name."""
    (tmp_path / "work").mkdir()
    notebook = _notebook_with_a_raising_answer()
    result = harness.grade(skeleton.make_plan(notebook, notebook), tmp_path / "work", LIMITS)
    answer_cell = "the cell defining `compute`, `ANSWER` (Question 1, grade_id answer)"
    assert result.notes == ["cell 6 of your notebook (`SPARE = 1 / 0`) raised ZeroDivisionError in the grader: division by zero",
                            f"{answer_cell} raised NotImplementedError: replace this line",
                            "cell 6 of your notebook (`SPARE = 1 / 0`) raised ZeroDivisionError: division by zero",
                            "the answer cell (Question 2, grade_id stub) raised NotImplementedError: replace this line"]
    messages = {item.grade_id: item.message for item in result.items}
    assert messages == {
        "test_answer": f"NameError: name 'ANSWER' is not defined — the cell that defines it raised earlier: {answer_cell}: "
                       "NotImplementedError: replace this line",
        "test_spare": "NameError: name 'SPARE' is not defined — the cell that defines it raised earlier: "
                      "cell 6 of your notebook (`SPARE = 1 / 0`): ZeroDivisionError: division by zero",
        # A self-check of the release cannot know what the stub should define: the question's failed answer is the cause.
        "test_stub": "NameError: name 'STUB_VALUE' is not defined — the cell that should define it raised earlier: "
                     "the answer cell (Question 2, grade_id stub): NotImplementedError: replace this line",
        "test_undefined": "NameError: name 'UNDEFINED' is not defined",  # no cell failed that should define it: nothing to add
    }


def test_only_grades_the_items_named(tmp_path):
    (tmp_path / "work").mkdir()
    plan = _plan("ANSWER = 42")
    plan.items.append(skeleton.TestItem("test_other", 1.0, "assert False"))
    result = harness.grade(plan, tmp_path / "work", LIMITS, only={"test_answer"})
    assert [item.grade_id for item in result.items] == ["test_answer"]


def test_a_worker_that_cannot_start_is_a_grader_error(tmp_path):
    """Not the student's fault: no score, and the worker's own words for the instructor."""
    (tmp_path / "work").mkdir()
    starved = sandbox.Limits(cell_seconds=20, memory_bytes=64 * 1024**2)
    if sandbox._address_space_limit(starved) is None:
        pytest.skip("no address-space cap on a CUDA grader")
    with pytest.raises(session.GraderError, match="could not start") as failure:
        harness.grade(_plan("ANSWER = 42"), tmp_path / "work", starved)
    assert "memory" in failure.value.log.lower(), failure.value.log



KERNEL_CELL = """
from gpucourse import kernels
kernels.use_gpu_or_simulator(verbose=False)  # numba's simulator where there is no GPU, as every kernel notebook does
from numba import cuda

@cuda.jit
def double(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 2 * x[i]
"""
LAUNCH_TEST = "x = np.ones(32, np.float32)\ndouble[1, 32](x)\nassert (x == 2).all(), x"


def _kernel_plan() -> Plan:
    return Plan(context=["import numpy as np"], student_cells=[KERNEL_CELL],
                items=[skeleton.TestItem("test_double", 1.0, LAUNCH_TEST)], api_names=["double"])


def test_a_launched_kernel_is_compiled_for_a_real_gpu_first(tmp_path):
    (tmp_path / "work").mkdir()
    result = harness.grade(_kernel_plan(), tmp_path / "work", LIMITS)
    assert [item.outcome for item in result.items] == [Outcome.PASSED], result.items
    [kernel] = result.kernels
    assert kernel["kernel"] == "double" and kernel["signature"] == "(float32[::1])" and kernel["arch"] == "sm_80" and kernel["registers"] > 0


def test_without_nvidias_compiler_a_grader_stops_and_a_self_check_goes_on(tmp_path, monkeypatch):
    """A grader that cannot compile kernels must not grade them (GraderError: nobody's score);
    a student's self-check still runs the tests and says the kernels were not compiled."""
    monkeypatch.setenv("GPUCOURSE_PTXAS", "/nonexistent/ptxas")
    (tmp_path / "grader").mkdir()
    with pytest.raises(session.GraderError, match="cannot compile kernels"):
        harness.grade(_kernel_plan(), tmp_path / "grader", LIMITS)
    (tmp_path / "self").mkdir()
    result = harness.grade(_kernel_plan(), tmp_path / "self", LIMITS, compiler_required=False)
    assert [item.outcome for item in result.items] == [Outcome.PASSED], result.items
    assert any("not compiled for a real GPU" in note for note in result.notes), result.notes
    assert result.kernels == []


COUNT_ONE = "@cuda.jit(device=True)\ndef count_one(bins, value):\n    cuda.atomic.add(bins, value, 1)\n"
HISTOGRAM = ("@cuda.jit('void(int32[:], int32[:])')\ndef {name}(values, bins):\n"
             "    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):\n{body}")
SWITCH = "        if {test}:\n            count_one(bins, values[i])\n        else:\n            bins[values[i]] += 1\n"
SHOWN = HISTOGRAM.format(name="planted", body="        count_one(bins, values[i])\n").split("\n", 1)[1]
PLANTED = (f"import linecache\n_SHOWN = {SHOWN!r}\nlinecache.cache['<planted>'] = (len(_SHOWN), None, _SHOWN.splitlines(True), '<planted>')\n"
           "exec(compile(_SHOWN.replace('count_one(bins, values[i])', 'bins[values[i]] += 1'), '<planted>', 'exec'))\n"
           "planted = cuda.jit(planted)\n")
TRACED_HISTOGRAM = ("values = np.array([0, 1, 1, 3] * 20, np.int32)\nbins = np.zeros(4, np.int32)\n"
                    "with sim.trace():\n    {name}[2, 32](values, bins)\nassert bins.tolist() == [20, 40, 0, 20], bins")


def test_a_traced_kernel_is_held_to_its_compiled_code_and_its_source_to_the_notebook(tmp_path):
    """Issue 47, end to end: an explicit signature and a device function of another cell keep their point; a kernel
    the simulator runs on another path than the GPU (a float rule), one that asks whether it is simulated, one
    that reads a setup name the notebook rebinds, and one built with exec all lose theirs, each saying why."""
    kernels = {"honest": "        count_one(bins, values[i])\n",
               "float_rule": SWITCH.format(test="np.float32(0.1) * 3 == np.float32(0.3)"),
               "asks": SWITCH.format(test="SIMULATED"),
               "rebinds": "        count_one(bins, values[i] % BINS)\n"}
    cells = [KERNEL_CELL + "\n" + COUNT_ONE, *(HISTOGRAM.format(name=name, body=body) for name, body in kernels.items()),
             "BINS = 2\n", PLANTED]
    items = [skeleton.TestItem(f"test_{name}", 1.0, TRACED_HISTOGRAM.format(name=name)) for name in [*kernels, "planted"]]
    setup = "import numpy as np\nfrom gpucourse import kernels, sim\nkernels.use_gpu_or_simulator(verbose=False)\nSIMULATED = True\nBINS = 4\n"
    plan = Plan(context=[setup], student_cells=[setup, *cells], items=items, api_names=[*kernels, "planted"])
    (tmp_path / "work").mkdir()
    honest, float_rule, asks, rebinds, planted = harness.grade(plan, tmp_path / "work", LIMITS).items
    assert honest.outcome == Outcome.PASSED, honest
    assert float_rule.message == ("float_rule behaves differently in the simulator and compiled: the simulated launch made atomic "
                                  "updates, the code compiled for a GPU has none"), float_rule
    assert asks.message.startswith("asks reads the device flag SIMULATED (line 4: `if SIMULATED:`)"), asks
    assert rebinds.message.startswith("rebinds uses BINS as your notebook rebinds it (`BINS = 2`), not as the assignment's setup "
                                      "defines it (`BINS = 4`)"), rebinds
    assert planted.message.startswith("planted: its source is not in any cell of the notebook"), planted


ANSWERS_SETUP = "import time\nfrom gpucourse import check\n\ndef drive(seconds):\n    return {'answer': answer(seconds), 'other': globals().get('OTHER')}\n"


def test_a_setup_function_driving_an_answer_runs_where_only_that_answer_cell_ran(tmp_path):
    """check.answers_only: the setup function runs in a fresh process with the setup cells and the answer's cell
    (another cell of the student's never ran there), each call within its budget on the grader's clock."""
    alone = "result = check.answers_only(drive, 'answer', seconds=10)(0)\nassert result == {'answer': 42, 'other': None}, result"
    items = [skeleton.TestItem("test_alone", 1.0, alone),
             skeleton.TestItem("test_budget", 1.0, "check.answers_only(drive, 'answer', seconds=1)(30)"),
             skeleton.TestItem("test_after", 1.0, "assert check.answers_only(drive, 'answer')(0)['answer'] == 42")]
    answer = "def answer(seconds):\n    time.sleep(seconds)\n    return 42\n"
    plan = Plan(context=[ANSWERS_SETUP], student_cells=[ANSWERS_SETUP, "OTHER = 'from another cell'\n", answer], items=items, api_names=["answer"])
    (tmp_path / "work").mkdir()
    alone, budget, after = harness.grade(plan, tmp_path / "work", LIMITS).items
    assert alone.outcome == Outcome.PASSED, alone
    # Past its budget the item fails (and says so), well before the item's own 20 s limit; the runner restarts after it.
    assert (budget.outcome, budget.message) == (Outcome.FAILED, "drive with your answer ran past its budget of 1 quiet-machine seconds"), budget
    assert budget.seconds < 10, budget
    assert after.outcome == Outcome.PASSED, after


TORCH_SETUP = "import torch\nfrom gpucourse import check\n\ndef drive(x):\n    return [float(main(x).sum()), 'OTHER' in globals()]\n"
HELPER = "def helper(x):\n    return x * 2\n"
MAIN = "def main(x):\n    return helper(x) + 1\n"


def _torch_only_plan(helper: str, tests: dict[str, str]) -> Plan:
    items = [skeleton.TestItem(name, 1.0, source) for name, source in tests.items()]
    cells = [TORCH_SETUP, helper, MAIN, "OTHER = 'another cell of the student'\n"]
    return Plan(context=[TORCH_SETUP], student_cells=cells, items=items, api_names=["helper", "main"])


def test_a_torch_only_function_runs_with_the_answers_it_calls_and_nothing_else(tmp_path):
    """check.torch_only, check.counted_call and check.answers_only(gated=True) on an answer that calls another
    answer: its profile runner holds the setup cells and both answer cells (gated), not the student's other cell."""
    tests = {
        "test_calls": "assert check.torch_only(main)(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]",
        "test_counts": "output, ops = check.counted_call(main, torch.ones(3), counter=None)\nassert ops.get('aten::mul') == 1, ops",
        "test_drives": "assert check.answers_only(drive, 'main', gated=True)(torch.ones(4)) == [12.0, False]",
        "test_not_gated": "assert check.answers_only(drive, 'main')(torch.ones(4)) == [12.0, False]",
    }
    (tmp_path / "work").mkdir()
    result = harness.grade(_torch_only_plan(HELPER, tests), tmp_path / "work", LIMITS)
    assert [(item.grade_id, item.outcome) for item in result.items] == [(name, Outcome.PASSED) for name in tests], result.items


def test_an_answer_it_calls_is_gated_too(tmp_path):
    """The helper's cell reaches torch's private names: main, which calls it, cannot be run or counted."""
    tests = {"test_calls": "check.torch_only(main)(torch.ones(3))",
             "test_drives": "check.answers_only(drive, 'main', gated=True)(torch.ones(3))"}
    helper = "import torch\n\ndef helper(x):\n    return torch._VF.lstm(x)\n"
    (tmp_path / "work").mkdir()
    result = harness.grade(_torch_only_plan(helper, tests), tmp_path / "work", LIMITS)
    for item in result.items:
        assert item.outcome == Outcome.FAILED and item.message.startswith("helper: its cell cannot be counted by the grader (line 4:"), item
