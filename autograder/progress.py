"""A grading run's progress on stderr: a bar with the students done and the estimated time left.

The per-student lines are :mod:`autograder.grading`'s; the bar is drawn between them, in place on a terminal and as an
occasional plain line in a log (CI).
"""

from __future__ import annotations

import statistics
import sys
import time

TICK = 1.0  # seconds between redraws of the bar on a terminal
PLAIN_EVERY = 60.0  # seconds between the bar's lines where stderr is no terminal (a CI log)


def format_duration(seconds: float) -> str:
    """``45 s``, ``3 min 05 s``, ``1 h 07 min``."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def time_left(durations: list[float], remaining: int, jobs: int, since_last: float = 0.0) -> float | None:
    """The run's estimated seconds left: the median seconds per student so far × the students remaining, shared
    by the jobs (at most one job per student left), less the ``since_last`` seconds since the last student was
    done (negative once the estimate is passed); None while no student is done to estimate from."""
    if remaining <= 0:
        return 0.0
    if not durations:
        return None
    return statistics.median(durations) * remaining / min(max(jobs, 1), remaining) - since_last


def progress_line(done: int, total: int, elapsed: float, left: float | None, width: int = 30) -> str:
    """``[#########.....] 3/10 students, 1 min 05 s elapsed, about 2 min 30 s left``."""
    filled = width * done // total if total else width
    if done >= total:
        rest = "done"
    else:
        rest = ("estimating the time left" if left is None else f"about {format_duration(left)} left" if left >= 0.5
                else "past the estimate")
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} students, {format_duration(elapsed)} elapsed, {rest}"


class ProgressBar:
    """The run's progress on ``stream`` (stderr): redrawn in place on a terminal; elsewhere (a CI log) a plain
    line at most every :data:`PLAIN_EVERY` seconds, and one when every student is done."""

    def __init__(self, total: int, jobs: int, stream=None, clock=time.monotonic):
        self.total, self.jobs, self.stream, self.clock = total, jobs, stream or sys.stderr, clock
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.started = self.last_line = self.last_done = clock()
        self.done, self.durations = 0, []
        self.shown = False  # on a terminal: the bar is on the current line
        self.ended = False  # elsewhere: the last line (every student done) is written

    def line(self) -> str:
        now = self.clock()
        left = time_left(self.durations, self.total - self.done, self.jobs, now - self.last_done)
        return progress_line(self.done, self.total, now - self.started, left)

    def student_done(self, seconds: float) -> None:
        """One more student graded, in ``seconds`` (0: not measured, left out of the estimate)."""
        self.done, self.last_done = self.done + 1, self.clock()
        if seconds > 0:
            self.durations.append(seconds)

    def draw(self) -> None:
        if self.tty:
            self._write(f"\r{self.line()}\x1b[K")
            self.shown = True
        elif not self.ended and (self.done >= self.total or self.clock() - self.last_line >= PLAIN_EVERY):
            self._write(self.line() + "\n")
            self.last_line, self.ended = self.clock(), self.done >= self.total

    def clear(self) -> None:
        """On a terminal, the bar off its line (for a student's line, after which it is drawn again)."""
        if self.shown:
            self._write("\r\x1b[K")
            self.shown = False

    def close(self) -> None:
        if self.shown:
            self._write("\n")
            self.shown = False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
