"""Where one student's grading time goes, split by what the grading process was doing.

The harness records each item's seconds (``grading.json``); this splits a student's whole grading,
in the process that grades them (:func:`autograder.grading.grade_submission`), into :data:`PHASES`:

* ``worker start``: starting a sandboxed worker or runner until it says it is ready (the sandbox, a
  fork, a fork server's start and warm-up, the copy of the compile seed);
* ``compile``: the grader's compiles of the student's kernels for a real GPU (NVVM and ptxas for
  numba, Triton for sm_80). ``torch.compile``, ``@njit`` and Triton's own compiles run inside the
  student's worker, whose reply does not say what part of a call was compiling: they count as the
  student's code;
* ``student's code``: waiting for a worker to run cells or answer calls (the student's code and the
  setup cells it runs with);
* ``timing``: timed blocks, the student's and the baselines', from sending their inputs to checking
  their outputs;
* ``checks``: the rest of each item (the test's own code in the grader);
* ``other``: the rest (reading the notebook, the grader's setup cells, stopping the workers).

Each moment counts once, for the innermost phase running then; a worker's replies while a block is
timed or a kernel compiled count for ``timing`` or ``compile``. The phases are measured by wrapping
the harness methods named in :data:`TARGETS`, in the grading process only.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
import time

PHASES = ("worker start", "compile", "student's code", "timing", "checks", "other")
WEAK = "student's code"  # a worker's replies: inside a timed block or a compile they count for that phase

# (module, class or None for a module function, name, phase). Where the harness keeps them: a class is
# looked up in the harness first, then in the modules split from it.
HARNESS_MODULES = ("autograder.harness", "autograder.session", "autograder.standins", "autograder.runners")
TARGETS = (
    ("StudentWorker", "_start", "worker start"),
    ("StudentWorker", "ensure_started", "student's code"),
    ("StudentWorker", "request", WEAK),
    ("StudentFunction", "_compile_once", "compile"),
    ("StudentFunction", "timed_block", "timing"),
    (None, "_grade_item", "checks"),
)


class Ledger:
    """Seconds per phase, charged to the innermost phase open at each moment (``clock``: seconds)."""

    def __init__(self, clock=time.perf_counter):
        self.clock, self.seconds = clock, dict.fromkeys(PHASES, 0.0)
        self.stack, self.mark = ["other"], clock()
        self.unmeasured: list[str] = []  # phases whose harness methods were not found: not told apart here

    def _charge(self) -> None:
        now = self.clock()
        self.seconds[self.stack[-1]] += now - self.mark
        self.mark = now

    @contextlib.contextmanager
    def phase(self, name: str):
        self._charge()
        keep = name == WEAK and self.stack[-1] in ("timing", "compile")
        self.stack.append(self.stack[-1] if keep else name)
        try:
            yield
        finally:
            self._charge()
            self.stack.pop()

    def totals(self) -> dict[str, float]:
        self._charge()
        return dict(self.seconds)


_current: Ledger | None = None
_owner: int | None = None  # the thread grading: another thread's calls are not this student's time
_missing: list[str] | None = None


def _wrapped(function, phase: str):
    @functools.wraps(function)
    def measured(*args, **kwargs):
        ledger = _current
        if ledger is None or threading.get_ident() != _owner:
            return function(*args, **kwargs)
        with ledger.phase(phase):
            return function(*args, **kwargs)

    measured.__phase__ = phase
    return measured


def _home(target: str | None, name: str):
    """The class (or module) holding ``name``: the first of :data:`HARNESS_MODULES` that has it; None if none does."""
    for module_name in HARNESS_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        home = module if target is None else getattr(module, target, None)
        found = getattr(home, name, None)
        # A module function is wrapped where it is defined, where its callers look it up (not an import of it elsewhere).
        if callable(found) and (target is not None or getattr(found, "__module__", None) == module_name):
            return home
    return None


def install() -> list[str]:
    """Wrap every target once per process; return the phases of those not found (their time counts in the enclosing phase)."""
    global _missing
    if _missing is None:
        _missing = []
        for target, name, phase in TARGETS:
            home = _home(target, name)
            if home is None:
                _missing.append(phase)
            elif not hasattr(getattr(home, name), "__phase__"):
                setattr(home, name, _wrapped(getattr(home, name), phase))
    return sorted(set(_missing))


@contextlib.contextmanager
def recording():
    """``with recording() as ledger:``: this thread's grading time, split into :data:`PHASES` (``ledger.totals()``)."""
    global _current, _owner
    ledger = Ledger()
    ledger.unmeasured = install()
    _current, _owner = ledger, threading.get_ident()
    try:
        yield ledger
    finally:
        _current, _owner = None, None
