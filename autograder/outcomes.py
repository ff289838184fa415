"""The one vocabulary for what happened to a graded item, and how each outcome reads."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    """What happened to one graded item (a ``str``: it is stored and compared as its value)."""

    PASSED = "passed"
    FAILED = "failed"  # the test ran and did not pass (wrong answer, too slow, the student's code raised)
    TIMEOUT = "timeout"  # the student's code ran past the item's (or the notebook's) time limit
    CRASHED = "crashed"  # the student's process died (segfault, out of memory, killed)
    NEEDS_GPU = "needs_gpu"  # a GPU-only item on a grader without a GPU: no score, regrade on a GPU
    UNREADABLE = "unreadable"  # the submission could not be read at all (not a notebook): every item 0

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        """How tables and feedback show it."""
        return _LABELS[self]

    @property
    def error_name(self) -> str:
        """The exception name feedback shows for an item that did not pass."""
        return _ERROR_NAMES.get(self, "TestFailed")

    @property
    def broken(self) -> bool:
        """The student's code did not finish (counted in the instructor's summary)."""
        return self in (Outcome.TIMEOUT, Outcome.CRASHED)


_LABELS = {
    Outcome.PASSED: "passed",
    Outcome.FAILED: "FAILED",
    Outcome.TIMEOUT: "TIMED OUT",
    Outcome.CRASHED: "CRASHED",
    Outcome.NEEDS_GPU: "needs a GPU",
    Outcome.UNREADABLE: "UNREADABLE",
}
_ERROR_NAMES = {
    Outcome.TIMEOUT: "TimedOut",
    Outcome.CRASHED: "Crashed",
    Outcome.NEEDS_GPU: "NeedsGPURegrade",
    Outcome.UNREADABLE: "UnreadableNotebook",
}
