"""The trusted side of :func:`gpucourse.loading.run_loader`: a student's prefetching generator, driven from here.

The generator runs in the student's worker (``iterate``, then ``next`` per item, ``close``); its loader
is a callback into this process. Everything that takes time is the grader's: a load's reply is held
back ``load_seconds`` (a timer here, not a sleep in the student's process), and after each item
arrives this process "computes" for ``compute_seconds`` before asking for the next, while it goes
on answering loads. So the worker's background threads overlap the loads with the compute only by
asking early, and nothing in the student's process can make a load or the compute shorter. What the
consumer received, the loads' count and how far ahead they ran are counted here; the threads left
after ``close`` are read from /proc, not asked of the worker.
"""

from __future__ import annotations

import heapq
import itertools
import time

from gpucourse.loading import LoadPlan, LoadRun

from .clock import threads_in_trees
from .protocol import Answer, Reply, Request
from .session import WorkerTimeout, last_line, rebuild


class _Driver:
    def __init__(self, worker, plan: LoadPlan, deadline: float):
        self.worker, self.plan, self.deadline = worker, plan, deadline
        self.loader_id = None
        self.held = []  # (when, order, reply) of loads answered later
        self.order = itertools.count()
        self.loads, self.received, self.most_ahead = 0, [], 0

    def send(self, *message) -> None:
        """A request, or an answer to a load, sent without waiting: the replies come in :meth:`pump`."""
        self.worker.send(message)

    def _release_due(self) -> None:
        while self.held and self.held[0][0] <= time.monotonic():
            _, _, reply = heapq.heappop(self.held)
            self.send(*reply)

    def _on_callback(self, message) -> None:
        _, callback_id, args, _ = message
        if callback_id != self.loader_id or not isinstance(args, (list, tuple)) or len(args) != 1:
            self.send(Answer.RAISE, "TypeError", "loader_fn takes one item")
            return
        self.loads += 1
        self.most_ahead = max(self.most_ahead, self.loads - len(self.received))
        try:
            reply = (Answer.RETURN, self.plan.loaded(args[0]))
        except (ValueError, KeyError) as error:
            reply = (Answer.RAISE, type(error).__name__, str(error))
        heapq.heappush(self.held, (time.monotonic() + self.plan.load_seconds, next(self.order), reply))

    def pump(self, until: float | None = None):
        """Answer loads until ``until`` (monotonic time) when given, else until the worker's reply to a request."""
        while True:
            self._release_due()
            now = time.monotonic()
            if until is not None and now >= until:
                return None
            if self.worker.clock.now() > self.deadline:
                raise WorkerTimeout()
            wake = min([now + 0.05] + ([until] if until is not None else []) + [when for when, _, _ in self.held[:1]])
            message = self.worker.poll(max(0.0, wake - now))
            if message is None:
                continue
            if message[0] == Reply.CALLBACK:
                self._on_callback(message)
            elif until is None:
                return message[0], rebuild(message[1]) if len(message) > 1 else None, message
            else:
                raise ValueError(f"the worker sent {message[0]!r} unasked")

    def run(self, name: str) -> LoadRun:
        def loader_fn(item):  # stands for the loader in the worker; _on_callback answers it
            raise AssertionError("answered by the driver")

        callback = self.worker.marshal(loader_fn)
        self.loader_id = callback.callback_id
        roots = self.worker.pids()
        threads_before = threads_in_trees(roots)
        self.send(Request.ITERATE, name, [callback, self.plan.items, self.plan.depth], {})
        kind, _, message = self.pump()
        if kind == Reply.RAISE:
            return LoadRun([], 0.0, self.loads, self.most_ahead, last_line(message[2]))
        start, error = time.monotonic(), None
        while self.plan.stop_after is None or len(self.received) < self.plan.stop_after:
            self.send(Request.NEXT)
            kind, value, message = self.pump()
            if kind == Reply.STOP:
                break
            if kind == Reply.RAISE:
                error = last_line(message[2])  # "Type: message", as the worker describes a student's error
                break
            self.received.append(value)
            self.pump(until=time.monotonic() + self.plan.compute_seconds)
        seconds = time.monotonic() - start
        self.send(Request.CLOSE)
        self.pump()
        return LoadRun(self.received, seconds, self.loads, self.most_ahead, error, self._threads_left(roots, threads_before))

    def _threads_left(self, roots, before: int, wait_seconds: float = 1.0) -> int:
        end = time.monotonic() + wait_seconds
        while threads_in_trees(roots) > before and time.monotonic() < end:
            self.pump(until=time.monotonic() + 0.02)  # a thread that still loads gets its answer and can end
        return max(0, threads_in_trees(roots) - before)


def drive(worker, name: str, plan: LoadPlan, deadline: float) -> LoadRun:
    """Drive the student's ``name(loader_fn, items, depth)`` in ``worker`` through ``plan`` (see the module's doc)."""
    worker.ensure_started()
    return _Driver(worker, plan, deadline).run(name)
