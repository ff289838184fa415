"""Words for numbers: the pieces every "sentences from numbers" module shares.

Lectures 05-10 print each measured or modelled outcome through a function that chooses its words from the run's
numbers (``stream_text`` for 05, ``profile_text`` 06, the plumbing cell of lecture 07, ``cnn_text`` 08, ``rnn`` 09,
``gan`` 10; docs/authoring.md, "Sentences from numbers"). What they all need lives here once: how a time or a
byte count is written, when two numbers count as the same, how a comparison and a list of names read, and what a
sentence says when the run cannot decide.

**The tie rule.** Two numbers are the same when the larger is at most ``within`` times the smaller (``within`` >= 1;
the boundary counts as a tie; two zeros are the same, numbers of opposite signs never are): ``same(1.0, 1.5, 1.5)``
is True, ``same(1.0, 1.51, 1.5)`` False. A ratio ``r`` is the same as 1 when ``1 / within <= r <= within``. Each
module chooses its ``within`` from how much its numbers wander (a shared 2-core CPU's repeated timings, a simulated
timeline's rounding), as a named constant that says why.
"""

from __future__ import annotations


def ms(seconds: float) -> str:
    """Seconds as milliseconds, three significant digits: "7.11 ms", "0.267 ms", "22.3 ms"."""
    return f"{seconds * 1e3:.3g} ms"


def megabytes(nbytes: float) -> str:
    """A byte count in decimal megabytes, three significant digits: "1.05 MB", "8 MB"."""
    return f"{nbytes / 1e6:.3g} MB"


def binary_bytes(value: float) -> str:
    """A byte count in binary units, the way a reader takes it in: "512 B", "64 KiB", "1.5 MiB", "256 MiB", "2 GiB"."""
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value:.4g} B"


def same(a: float, b: float, within: float) -> bool:
    """Whether ``a`` and ``b`` are the same by the tie rule: the larger at most ``within`` times the smaller."""
    # The gap against the smaller one: numbers of opposite signs are never the same, two zeros always are.
    return abs(a - b) <= (within - 1) * min(abs(a), abs(b))


def choose(a: float, b: float, within: float, *, more: str, tie: str, less: str) -> str:
    """``tie`` when ``a`` and ``b`` are the same by the tie rule, else ``more`` when ``a`` is the larger, ``less`` when
    it is the smaller. A ratio against 1 reads the same way: ``choose(speedup, 1, 1.1, more="faster", ...)``."""
    if same(a, b, within):
        return tie
    return more if a > b else less


def as_long_as(a: float, b: float, within: float) -> str:
    """Time ``a`` against time ``b`` (both positive): "2.00× as long as", "1.75× faster than" or "the same as"."""
    if same(a, b, within):
        return "the same as"
    return f"{a / b:.2f}× as long as" if a > b else f"{b / a:.2f}× faster than"


def listed(names: list[str], most: int | None = 4) -> str:
    """Names as a sentence lists them: "a", "a and b", "a, b and c"; past ``most`` names (None: no limit),
    the first ``most`` and a count: "a, b, c, d and 3 more"."""
    if not names:
        raise ValueError("listed() needs at least one name")
    if most is not None and len(names) > most:
        return ", ".join(names[:most]) + f" and {len(names) - most} more"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def cannot_tell(why: str) -> str:
    """The words for a verdict this run's numbers do not support: "<why>, so this run cannot tell; run the cell again"."""
    return f"{why}, so this run cannot tell; run the cell again"
