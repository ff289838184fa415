"""The trusted side of grading: runs the source's tests against a student's worker.

The harness never executes student code. It runs the source notebook's setup and locked
cells itself, binds each graded name (``pairwise_sq_dists``, …) to a proxy that calls into
the student's worker process, and executes each test cell in its own namespace. So the
tests use the harness's own ``torch``, clocks, references and comparisons, which no student
code has touched; what comes back from the worker is plain data (see :mod:`protocol`).
The pieces: the worker's session (:mod:`autograder.session`), the stand-ins a test's names are bound to
(:mod:`autograder.standins`), and the special runners they ask for (:mod:`autograder.runners`); here, the grade loop.

A crash, a kill or a time-out of the worker costs the item it happened in; the worker is
restarted (reloading the student's code) for the items after it. A student cell that hangs
or crashes while loading is skipped on the restart, so it costs only what depends on it.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpucourse import devices
from gpucourse.check import TimingFailure

from . import sandbox
from .clock import FairClock, oom_kills
from .outcomes import Outcome
from .protocol import Request
from .session import ForkBombStopped, GraderError, StudentWorker, WorkerCrashed, WorkerTimeout, failure_text, last_line, reply_value
from .skeleton import Plan, TestItem
from .standins import ReferenceFunction, StudentFunction, TracedPaths


@dataclass
class ItemResult:
    grade_id: str
    points: float
    outcome: Outcome
    score: float
    message: str = ""
    output: str = ""
    seconds: float = 0.0

    def __post_init__(self):
        self.outcome = Outcome(self.outcome)


@dataclass
class SubmissionResult:
    items: list[ItemResult]
    device: str
    device_class: str
    isolation: str
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    worst_slowdown: float = 1.0  # how much other load slowed this machine at worst (see autograder.clock)
    kernels: list[dict] = field(default_factory=list)  # what NVIDIA's compiler made of each kernel launched (kernel_summary)

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def score(self) -> float:
        return sum(item.score for item in self.items)



def grade(plan: Plan, workdir: Path, limits: sandbox.Limits = sandbox.Limits(), hidden_paths=(),
          only: set[str] | None = None, compiler_required: bool = True) -> SubmissionResult:
    """Grade one submission: every test item of ``plan`` (or those named in ``only``) against the student's code.

    Every limit is counted on a :class:`~autograder.clock.FairClock`, in quiet-machine
    seconds, so a busy grading machine gives the same verdicts as a quiet one.
    Raises :class:`GraderError` when the grader itself fails (no worker can start, or with
    ``compiler_required`` no NVIDIA compiler to check the student's kernels with).
    """
    started = time.monotonic()
    workers: list[StudentWorker] = []
    clock = FairClock(lambda: [pid for w in workers for pid in w.pids()])
    worker = StudentWorker(plan.student_cells, workdir, limits, list(hidden_paths), clock, compiler_required, plan.cell_origins)
    reference_dir = workdir.parent / f"{workdir.name}.reference"
    reference_dir.mkdir(exist_ok=True)
    reference = StudentWorker(plan.context, reference_dir, limits, list(hidden_paths), clock)
    workers += [worker, reference]
    items = [item for item in plan.items if only is None or item.grade_id in only]
    results, notes = [], list(plan.notes)
    with clock:
        notebook_deadline = clock.now() + limits.notebook_seconds
        try:
            namespace = _trusted_namespace(plan, notes)
            # The student's runners get the setup the student's worker ran: without the grader-side cells and what they define.
            student_namespace = {name: value for name, value in namespace.items() if name not in plan.grader_side_names}
            worker.setup = (plan.student_setup, student_namespace)
            worker.answer_names, worker.answer_helpers, worker.grader_side_names = set(plan.api_names), set(plan.answer_helpers), plan.grader_side_names
            for item in items:
                results.append(_grade_with_retry(item, plan, namespace, worker, reference, limits, notebook_deadline))
            notes += worker.load_notes
        finally:
            worker.stop()
            reference.stop()
    return SubmissionResult(
        items=results, device=devices.describe(), device_class=devices.device_class(),
        isolation=worker.isolation, notes=notes, seconds=time.monotonic() - started, worst_slowdown=round(clock.worst_slowdown, 2),
        kernels=[kernel_summary(report, signature) for (_, signature), report in worker.compiled.items() if report is not None],
    )


def kernel_summary(report, signature: str) -> dict:
    """Plain data for grading.json and the self-check's table: one compiled kernel."""
    return {"kernel": report.kernel, "signature": signature, "gpu": report.gpu, "arch": report.arch,
            "registers": report.registers, "shared_bytes": report.shared_bytes, "local_bytes": report.local_bytes,
            "spill_bytes": report.spill_stores + report.spill_loads, "float64_instructions": report.float64_instructions,
            "warnings": report.warnings(), **({"num_warps": report.num_warps} if hasattr(report, "num_warps") else {})}


def _grade_with_retry(item: TestItem, plan: Plan, namespace: dict, worker: StudentWorker, reference: StudentWorker,
                      limits: sandbox.Limits, notebook_deadline: float) -> ItemResult:
    if worker.clock.now() > notebook_deadline:
        return ItemResult(item.grade_id, item.points, Outcome.TIMEOUT, 0.0, "the whole notebook ran past its time limit")
    since = worker.clock.mark()
    result, second_chance = _grade_item(item, plan, namespace, worker, reference, limits, notebook_deadline)
    if second_chance:
        # Graded once more: a burst of load on a shared machine (a measured time short of its
        # threshold, a worker the out-of-memory killer chose) must not cost a correct answer its
        # points. Only then: a wrong answer gets no second draw of random inputs. If the first
        # try ran while other load was heavy, the second waits for it to pass (a burst often
        # outlasts one item: another run's fork-bomb test kept a load of 125 for tens of seconds).
        worker.clock.wait_for_calm(worker.clock.mean_slowdown(since))
        retry, _ = _grade_item(item, plan, namespace, worker, reference, limits, notebook_deadline)
        result = retry if retry.outcome == Outcome.PASSED else result
    return result


def _trusted_namespace(plan: Plan, notes: list[str]) -> dict:
    namespace = {"__name__": "__gradertest__", "__builtins__": builtins}
    for index, source in enumerate(plan.context):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, f"<setup cell {index + 1}>", "exec"), namespace)  # noqa: S102 - instructor's code
        except Exception as error:  # noqa: BLE001
            where = plan.context_origins[index].label if index < len(plan.context_origins) else f"setup cell {index + 1}"
            notes.append(f"{where} raised {type(error).__name__} in the grader: {error}")
    return namespace


def _grade_item(item: TestItem, plan: Plan, base: dict, worker: StudentWorker, reference: StudentWorker,
                limits: sandbox.Limits, notebook_deadline: float) -> tuple[ItemResult, bool]:
    """The item's result, and whether it deserves a second chance: it failed on a measured time (see
    :class:`~gpucourse.check.TimingFailure`; not when the shortfall is conclusive), or the out-of-memory
    killer killed its worker meanwhile."""
    if item.requires_gpu and devices.device_class() != "cuda":
        return ItemResult(item.grade_id, item.points, Outcome.NEEDS_GPU, 0.0,
                          "needs a GPU: not graded on this machine (no score, not a 0); regrade this item on a CUDA machine"), False
    # The student's code loads (or reloads after a crash) before the item's clock starts:
    # each cell has its own limit, and a slow or runaway cell must not cost the item its time.
    worker.ensure_started()
    started, clock = time.monotonic(), worker.clock
    deadline = min(clock.now() + limits.item_seconds, notebook_deadline)
    namespace = dict(base)
    remaining = lambda: max(deadline - clock.now(), 0.1)  # noqa: E731
    for name in plan.reference_functions:
        if callable(base.get(name)):
            namespace[name] = ReferenceFunction(base[name], reference, name, remaining, worker)
    output, second_chance, oom_kills_before = io.StringIO(), False, oom_kills()
    try:
        kinds = reply_value("names", worker.request((Request.NAMES, plan.api_names), remaining()))
        for name, kind in kinds.items():
            if kind == "callable":
                namespace[name] = StudentFunction(worker, name, remaining)
            elif kind == "value":
                namespace[name] = reply_value(name, worker.request((Request.VALUE, name), remaining()))
        worker.traced_paths = TracedPaths()
        with contextlib.redirect_stdout(output):
            exec(compile(item.source, f"<test {item.grade_id}>", "exec"), namespace)  # noqa: S102 - instructor's test
        worker.traced_paths.check_every_kind_ran()
        outcome, score, message = Outcome.PASSED, item.points, ""
    except WorkerTimeout:
        outcome, score, message = Outcome.TIMEOUT, 0.0, f"your code ran past the {limits.item_seconds:.0f} s limit for this item"
    except ForkBombStopped as stopped:
        outcome, score, message = Outcome.CRASHED, 0.0, f"your code {failure_text(stopped)}"
    except WorkerCrashed as crash:
        outcome, score, message = Outcome.CRASHED, 0.0, f"your code crashed the process: {crash}"
        # The out-of-memory killer picks its victim machine-wide: a neighbour's fork bomb can choose this worker.
        second_chance = crash.killed and oom_kills_before is not None and (oom_kills() or 0) > oom_kills_before
    except GraderError:
        raise
    except Exception as error:  # noqa: BLE001 - any failure of the test is the item's outcome
        text = last_line(str(error)) or "test failed"
        outcome, score, second_chance = Outcome.FAILED, 0.0, isinstance(error, TimingFailure) and not error.conclusive
        message = text if getattr(error, "from_student", False) else f"{type(error).__name__}: {text}"
        if isinstance(error, NameError):  # most often a name an earlier cell should have defined, had it run
            message += worker.name_error_cause(text, item.question)
    return ItemResult(item.grade_id, item.points, outcome, score, message, output.getvalue()[-2000:], time.monotonic() - started), second_chance
