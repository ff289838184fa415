"""Sentences about stream timelines and copy timings, with their words chosen from the numbers.

Lecture 05 and the stream-timeline widget state outcomes: which issue order finishes first, what the first
kernel waits for, how far a measurement lands from the model. The stream model (:mod:`gpucourse.sim.streams`)
is revised from time to time and measurements differ from machine to machine, so none of those sentences is
written by hand: each function here takes the numbers of one run and returns the sentence they support
(faster, slower or the same; which operation a kernel waited for; inside or outside a measured range).

A timeline is read through its public fields only: ``intervals`` (each with ``label``, ``kind``, ``stream``,
``engine``, ``start`` and ``end`` in seconds; ``engine`` None for events), ``races`` (each with ``operation``,
``other``, ``buffer`` and ``kind``), ``makespan``, ``ideal_seconds`` and ``engine_busy`` ({engine: seconds}),
so any object with those fields will do (the tests use stand-ins that give each outcome).

How a time reads, the tie rule and lists of names come from :mod:`gpucourse.wording`; ``ms`` is also reachable
here, as lecture 05 writes ``stream_text.ms``.
"""

from __future__ import annotations

from .wording import as_long_as, listed, ms, same

TIE = 1.01  # two times within 1% of each other are "the same" (the tie rule of gpucourse.wording)
NEAR_PEAK = 0.9  # a rate within 10% of its peak has "levelled off"
ENGINE_NAMES = {"h2d": "the copy-in engine", "d2h": "the copy-out engine", "copy": "the copy engine", "compute": "the compute engine"}


def _at(a: float, b: float) -> bool:
    """The same instant of a simulated timeline (equal but for rounding)."""
    return abs(a - b) <= 1e-12 + 1e-9 * max(abs(a), abs(b))


def engine_name(engine: str) -> str:
    """The engine's name in words ("the copy-in engine"); an engine the model adds later keeps its own name."""
    return ENGINE_NAMES.get(engine, f"engine {engine!r}")


def compare(name_a: str, a: float, name_b: str, b: float) -> str:
    """``a`` against ``b`` (seconds): "A: 22.3 ms, 1.70× as long as B (13.1 ms)", "… 1.75× faster than …" or
    "… the same as …" (within ``TIE``)."""
    return f"{name_a}: {ms(a)}, {as_long_as(a, b, TIE)} {name_b} ({ms(b)})"


def copy_model(sizes, pinned_seconds, pageable_seconds, *, card: str, pageable_holds_host: bool,
               real_fixed_seconds: float | None = None) -> str:
    """How the model prices a host-device copy, read back from its times: sizes (bytes, ascending) and the
    modelled seconds of a pinned and of a pageable copy of each. The rate and the fixed cost per copy come from
    the two largest sizes (the time a copy would take at zero bytes); ``pageable_holds_host`` says whether a
    pageable copy kept the model's host waiting until it was done. ``real_fixed_seconds``, a reported fixed cost
    of a real copy, is set beside the model's when given."""
    def fit(seconds):
        slope = (seconds[-1] - seconds[-2]) / (sizes[-1] - sizes[-2])
        return 1 / slope, max(seconds[-1] - slope * sizes[-1], 0.0)

    (pinned_rate, pinned_fixed), (pageable_rate, _) = fit(list(pinned_seconds)), fit(list(pageable_seconds))
    text = (f"Modelled for {card}: pinned copies move {pinned_rate / 1e9:.4g} GB/s, pageable ones {pageable_rate / 1e9:.4g} GB/s "
            f"(a pageable copy takes {as_long_as(pageable_seconds[-1], pinned_seconds[-1], TIE)} a pinned one); "
            f"a pageable copy {'holds' if pageable_holds_host else 'does not hold'} the host until it is done.")
    if pinned_fixed <= 1e-6 * pinned_seconds[0]:
        text += " A copy costs only its bytes, with no fixed cost per copy, so the model's rate is the same for every size"
    else:
        share = (sizes[0] / pinned_seconds[0]) / pinned_rate
        text += (f" Each copy also costs {pinned_fixed * 1e6:.3g} µs whatever its size, so the smallest copy here reaches "
                 f"{share:.0%} of the largest one's rate")
    if real_fixed_seconds is not None:
        text += f" (a real copy's fixed cost is about {real_fixed_seconds * 1e6:.3g} µs: gpu_specs.HOST_LINK_LATENCY_SECONDS, sources cited there)"
    return text + "."


def measured_bandwidth(sizes, rates: dict, *, link_bandwidth: float, device: str, size_text=str) -> str:
    """What the measured bandwidth curves show: rates = {"pinned": [bytes/s per size], "pageable": [...]}.
    Each memory's peak, from which size on it stays within ``NEAR_PEAK`` of it, the peak against the link's
    datasheet rate, and pinned against pageable at the largest size. ``size_text`` writes a size."""
    parts = []
    for memory, values in rates.items():
        peak = max(values)
        level = next(size for size, value in zip(sizes, values) if value >= NEAR_PEAK * peak)
        parts.append(f"{memory} copies peak at {peak / 1e9:.3g} GB/s ({peak / link_bandwidth:.0%} of the link's datasheet rate), "
                     f"within {1 - NEAR_PEAK:.0%} of it from {size_text(level)} on")
    text = f"Measured on {device}: " + "; ".join(parts)
    if {"pinned", "pageable"} <= set(rates):
        largest = size_text(sizes[-1])
        pinned_s, pageable_s = sizes[-1] / rates["pinned"][-1], sizes[-1] / rates["pageable"][-1]
        text += ". At " + largest + ", " + compare("a pinned copy", pinned_s, "a pageable one", pageable_s)
    return text + "."


def pin_cost(size: str, first_seconds: float, again_seconds: float) -> str:
    """The first ``pin_memory()`` of a size against a second one made after the first buffer was freed."""
    text = f"pin_memory() of {size}: the first call took {ms(first_seconds)}, a second one, once the first buffer was freed, {ms(again_seconds)}"
    if again_seconds < first_seconds and not same(again_seconds, first_seconds, TIE):
        return (text + f" ({first_seconds / again_seconds:.1f}× faster): PyTorch's caching host allocator had kept the page-locked block, "
                "so the second call paid only the copy into it.")
    return text + ": no faster, so the first call paid nothing for page-locking that showed here (or it too found a block cached by an earlier run)."


def ranking(times: dict, *, device: str) -> str:
    """Named times (seconds) from the fastest to the slowest, with how many times the fastest each one takes."""
    order = sorted(times, key=times.get)
    fastest = times[order[0]]
    steps = [f"{name} {ms(times[name])}" + ("" if name == order[0] else f" ({times[name] / fastest:.2f}×)") for name in order]
    return f"From the fastest to the slowest, measured on {device}: " + ", ".join(steps) + "."


def host_wait(blocking_seconds: float, non_blocking_seconds: float, queued_seconds: float) -> str:
    """What a pageable ``.to("cuda")`` cost the host when ``queued_seconds`` of GPU work was queued on its stream just before,
    blocking and with ``non_blocking=True``: which of them waited for that work (half of it or more counts as waiting)."""
    def verdict(seconds):
        return "waited for the work queued before it" if seconds >= 0.5 * queued_seconds else "did not wait for the work queued before it"

    return (f"With {ms(queued_seconds)} of work queued on the stream, the blocking .to('cuda') held the host {ms(blocking_seconds)}: "
            f"it {verdict(blocking_seconds)}; with non_blocking=True, {ms(non_blocking_seconds)}: it {verdict(non_blocking_seconds)}.")


def host_clock(call_seconds: float, done_seconds: float) -> str:
    """The host clock around an asynchronous call (``call_seconds``) against the time until its work was done."""
    share = call_seconds / done_seconds
    text = f"The host clock saw {ms(call_seconds)} around the non_blocking call, {share:.0%} of the {ms(done_seconds)} until the copy was done"
    if share < 0.5:
        return text + ": timed with the host clock alone, it would pass for almost free."
    return text + ": this call held the host for most of the copy."


def _union(spans) -> float:
    """Total length covered by (start, end) spans, counting overlaps once."""
    covered, reach = 0.0, None
    for start, end in sorted(spans):
        if reach is None or start >= reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered


def idle_gap(timeline) -> str:
    """Where the busiest engine idles: before its first operation (filling the pipeline), between operations, and
    after its last (draining), which together are the gap between the makespan and the ideal bound."""
    busy = timeline.engine_busy
    engine = max(busy, key=busy.get)
    spans = [(i.start, i.end) for i in timeline.intervals if i.engine == engine]
    first, last = min(start for start, _ in spans), max(end for _, end in spans)
    covered = _union(spans)
    text = (f"The busiest engine, {engine_name(engine)}, has {ms(busy[engine])} of work in the {ms(timeline.makespan)} makespan; "
            f"it idles {ms(first)} before its first operation (filling the pipeline), {ms(last - first - covered)} between operations "
            f"and {ms(timeline.makespan - last)} after its last (draining)")
    if not same(covered, busy[engine], TIE):
        return text + f"; its operations overlap one another, so that work takes {ms(covered)} of time."
    if same(busy[engine], timeline.ideal_seconds, TIE):
        return text + f": together, the {ms(timeline.makespan - timeline.ideal_seconds)} between the makespan and the ideal bound."
    return text + "."


def stream_count_gain(makespans: dict) -> str:
    """Makespans {streams: seconds}: how far the second-smallest count goes towards the best one."""
    counts = sorted(makespans)
    base, best = makespans[counts[0]], min(makespans.values())
    best_count = min(count for count in counts if same(makespans[count], best, TIE))
    if same(base, best, TIE):
        return f"More streams change nothing here: every count from {counts[0]} to {counts[-1]} takes about {ms(base)}."
    second = counts[1]
    share = (base - makespans[second]) / (base - best)
    text = (f"With {second} streams the makespan falls from {ms(base)} ({counts[0]} stream{'s' if counts[0] > 1 else ''}) to {ms(makespans[second])}: "
            f"{share:.0%} of the way to the best here, {ms(best)} with {best_count} streams")
    beyond = [count for count in counts if count > best_count]
    if beyond:
        text += f"; {listed([str(count) for count in beyond])} streams take no less"
    return text + "."


def first_kernel_wait(timeline, *, connections: int | None = None) -> str:
    """Why the first kernel to run starts when it does, from the intervals that end at its start: work issued
    before it on its own stream, another operation holding its engine, an operation of another stream issued before
    it into the hardware queue they share (with ``connections``, the queues of a Hyper-Q model, assigned as
    :func:`_queue_of` does), or an event it waits on; or nothing, when it starts as soon as it is issued."""
    kernels = [i for i in timeline.intervals if i.kind == "kernel"]
    if not kernels:
        return "This timeline has no kernel."
    kernel = min(kernels, key=lambda i: i.start)
    opening = f"The first kernel, {kernel.label} (stream {kernel.stream}), starts at {ms(kernel.start)}"
    work = [i for i in timeline.intervals if i.engine is not None and i is not kernel]
    ending = [i for i in work if _at(i.end, kernel.start) and i.end > 0]
    before = sorted((i for i in work if i.stream == kernel.stream and (i.end < kernel.start or _at(i.end, kernel.start))), key=lambda i: i.end)
    same_stream = [i for i in ending if i.stream == kernel.stream]
    if same_stream:
        return (f"{opening}, when {same_stream[-1].label} ends: on stream {kernel.stream}, {listed([i.label for i in before])} "
                f"{'was' if len(before) == 1 else 'were'} issued before it, and a stream runs its work one operation after another, in issue order.")
    same_engine = [i for i in ending if i.engine == kernel.engine]
    if same_engine:
        return f"{opening}, when {same_engine[-1].label} (stream {same_engine[-1].stream}) ends: {engine_name(kernel.engine)} was busy with it."
    if connections is not None:
        queues = _queue_of(timeline, connections)
        issued_before = timeline.intervals[:timeline.intervals.index(kernel)]
        ahead = [i for i in issued_before if i.stream != kernel.stream and queues[i.stream] == queues[kernel.stream] and _at(i.start, kernel.start)]
        if ahead and kernel.start > 0:
            return (f"{opening}, when {ahead[-1].label} of stream {ahead[-1].stream} starts: it was issued before the kernel into the hardware "
                    f"queue streams {ahead[-1].stream} and {kernel.stream} share, and a queue starts its work in issue order (a false dependency).")
    waits = [i for i in timeline.intervals if i.kind == "wait" and i.stream == kernel.stream and _at(i.end, kernel.start)]
    if ending and waits:
        return f"{opening}, when {ending[-1].label} on stream {ending[-1].stream} ends: an event orders it after that operation."
    if ending:
        return (f"{opening}, when {ending[-1].label} on stream {ending[-1].stream} ends, though neither its stream, its engine nor an event "
                "holds it there: look for a hardware queue it shares with another stream (section 3 of lecture 05).")
    return f"{opening}: it starts as soon as it is issued, waiting for nothing."


_ACCESS = {"read after write": "reads what {other} writes", "write after write": "writes what {other} writes too",
           "write after read": "overwrites what {other} reads"}


def races(timeline) -> str:
    """Each race of the timeline with the times that show it: the operation's start against the end of the one
    it should follow."""
    if not timeline.races:
        return "No race: every access to a buffer another stream touched is ordered after it."
    lines = []
    for race in timeline.races:
        op, other = timeline.of(race.operation), timeline.of(race.other)
        access = _ACCESS.get(race.kind, "touches what {other} touches").format(other=other.label)
        line = f"{op.label} {access} ({race.buffer!r}) and nothing orders them: it starts at {ms(op.start)}, "
        if op.start < other.end:
            line += f"before {other.label} ends at {ms(other.end)}, so on a GPU it would use a buffer still being written."
        else:
            line += (f"after {other.label} ends at {ms(other.end)} only because of this timing; "
                     "on a GPU another timing could put it first.")
        lines.append(line)
    return "\n".join(lines)


def race_versus_order(unordered, ordered) -> str:
    """The same work without and with the event that orders it: which finishes first, and which has races."""
    def count(timeline):
        n = len(timeline.races)
        return "no race" if n == 0 else f"{n} race{'s' if n > 1 else ''}"

    text = (f"Without the event the timeline takes {ms(unordered.makespan)} and has {count(unordered)}; "
            f"with it, {ms(ordered.makespan)} and {count(ordered)}")
    if unordered.races and not ordered.races and unordered.makespan < ordered.makespan and not same(unordered.makespan, ordered.makespan, TIE):
        text += ": the faster timeline is the wrong one"
    return text + "."


def overlap_measured(speedup: float, low: float, high: float, *, modelled: float, steady: float, items: int) -> str:
    """A measured overlap speedup (median, and the middle half of its rounds) against the stream model's figure
    for ``items`` items (filling and draining included) and its steady state."""
    text = (f"Measured {speedup:.2f}× (middle half of the rounds {low:.2f}–{high:.2f}×), "
            f"the model {modelled:.2f}× for {items} items ({steady:.2f}× in the steady state)")
    if low <= modelled <= high:
        return text + ": the model's figure lies inside the measured range."
    if high < modelled:
        return (text + f": the measurement falls {1 - speedup / modelled:.0%} short of the model, so something the model leaves out costs time here "
                "(the two threads share this machine's cores and Python's interpreter lock, and a busy machine adds to it); "
                "run the cell again to see how much it varies.")
    return text + f": the measurement beats the model by {speedup / modelled - 1:.0%}, so the measured T_load or T_compute overstated a step's time."


def items_taken(taken: int, total: int, *, received: int) -> str:
    """How many of ``total`` items a loader took from its iterable by the time the consumer had ``received`` results."""
    how = "all" if taken == total else f"{taken} of"
    text = f"By the time the consumer had received {received} result{'s' if received != 1 else ''}, the loader had taken {how} {total} items from the iterable"
    if taken == total and total > received + 1:
        return text + ": it submits every load at once, however many there are."
    return text + f": it ran {taken - received} item{'s' if taken - received != 1 else ''} ahead."


def model_against_measurement(measured: dict, modelled: dict, *, device: str, card: str) -> str:
    """Makespans {streams: seconds} measured and modelled: which count is fastest and slowest in each, and the
    range of the model's relative error."""
    def extreme(values, pick):
        target = pick(values.values())
        return listed([str(count) for count in sorted(values) if same(values[count], target, TIE)])

    errors = [(modelled[count] - measured[count]) / measured[count] for count in measured]
    return (f"Fastest with {extreme(measured, min)} stream(s) measured on {device}, with {extreme(modelled, min)} in the model for {card}; "
            f"slowest with {extreme(measured, max)} measured, {extreme(modelled, max)} modelled; "
            f"the model is off by {min(errors):+.0%} to {max(errors):+.0%}.")


def _starts_with(timeline, interval):
    """What ends at ``interval``'s start, best explanation first: its stream's previous operation, an operation holding
    its engine, or another one (an event it waits on, or a queue ahead of it); None when nothing ends there."""
    ending = [i for i in timeline.intervals if i is not interval and i.engine is not None and _at(i.end, interval.start) and i.end > 0]
    for reason, pick in (("its stream's previous operation", lambda i: i.stream == interval.stream),
                         (f"{engine_name(interval.engine)} was busy with it" if interval.engine else "", lambda i: i.engine == interval.engine),
                         ("on another stream: an event or a shared queue holds it until then", lambda i: True)):
        found = [i for i in ending if pick(i)]
        if found and reason:
            return found[-1], reason
    return None


def wait_chain(timeline, label: str, links: int = 2) -> str:
    """Why operation ``label`` starts when it does, followed back up to ``links`` steps: at each, the operation that
    ends as it starts and why that holds it (its stream, its engine, or another stream), until one starts as soon
    as it is issued."""
    interval, parts = timeline.of(label), []
    for _ in range(links):
        head = f"{interval.label} (stream {interval.stream}) starts at {ms(interval.start)}"
        cause = _starts_with(timeline, interval)
        if cause is None:
            parts.append(head + ", as soon as it is issued")
            break
        before, reason = cause
        parts.append(head + f", when {before.label} ends ({reason})")
        interval = before
    return "; ".join(parts) + "."


def _queue_of(timeline, connections: int) -> dict:
    """Each stream's hardware queue as the model assigns them: round-robin over ``connections``, in the order the
    streams first appear in the timeline (its intervals are in issue order)."""
    order = list(dict.fromkeys(i.stream for i in timeline.intervals))
    return {stream: position % connections for position, stream in enumerate(order)}


def false_dependencies(few, many, *, few_connections: int, many_connections: int) -> str:
    """The same work with ``few_connections`` hardware queues (``few``) and ``many_connections`` (``many``): which is
    faster, which streams share a queue, and the operation delayed most by sharing, with what it waited behind."""
    streams = list(dict.fromkeys(i.stream for i in few.intervals))
    text = compare(f"{len(streams)} streams on {few_connections} hardware queues", few.makespan, f"on {many_connections}", many.makespan)
    queues = _queue_of(few, few_connections)
    sharing = [[s for s in streams if queues[s] == q] for q in dict.fromkeys(queues.values())]
    shared = [group for group in sharing if len(group) > 1]
    if not shared:
        return text + f": every stream has a queue of its own with {few_connections}."
    text += (f"; with {few_connections} queues, {listed([' and '.join(group) for group in shared], 2)} share one "
             f"(the model assigns queues round-robin, in the order streams first get work)")
    # The first operation sharing delays (the earliest to start with many queues): the later delays follow from it.
    delayed = [i for i in many.intervals if i.engine is not None and few.of(i.label).start - i.start > (TIE - 1) * many.makespan]
    if not delayed:
        return text + ", and no operation starts later for it."
    first = min(delayed, key=lambda i: i.start)
    moved = few.of(first.label)
    ahead = [i for i in few.intervals[:few.intervals.index(moved)] if queues[i.stream] == queues[moved.stream] and i.stream != moved.stream
             and _at(i.start, moved.start)]
    text += f"; the first operation it delays is {moved.label} (stream {moved.stream}), at {ms(moved.start)} instead of {ms(first.start)}"
    if ahead:
        return text + f", when {ahead[-1].label} of stream {ahead[-1].stream}, issued before it into the queue they share, starts: a false dependency."
    return text + "."


def concurrency(small, full, *, small_blocks: int, full_blocks: int) -> str:
    """Kernels of small and of full grids on separate streams: how many ran at once in each, and the two makespans."""
    def most_at_once(timeline):
        kernels = [i for i in timeline.intervals if i.kind == "kernel"]
        return max(sum(1 for other in kernels if other.start <= k.start < other.end or _at(other.start, k.start)) for k in kernels)

    def how(timeline):
        n = most_at_once(timeline)
        return "one at a time" if n == 1 else f"up to {n} at once"

    return (f"Grids of {small_blocks} blocks: {how(small)}, {ms(small.makespan)}; grids of {full_blocks} blocks: {how(full)}, "
            f"{ms(full.makespan)} ({as_long_as(full.makespan, small.makespan, TIE)} the small grids).")


def priority_jump(with_priority, without, label: str) -> str:
    """Kernel ``label`` on a high-priority stream against the same work without priorities: when it starts in each, and
    what it waited for (a kernel running when it became ready is never preempted)."""
    first, second = with_priority.of(label), without.of(label)
    text = f"With the higher priority, {label} starts at {ms(first.start)}"
    cause = _starts_with(with_priority, first)
    if cause is not None and cause[0].kind == "kernel":
        text += f", when {cause[0].label} ends: the kernel already running runs to its end (no preemption)"
    passed = [i.label for i in without.intervals if i.kind == "kernel" and i.label != label and first.start <= i.start < second.start]
    text += f"; without priorities it starts at {ms(second.start)}"
    if passed:
        text += f", after {listed(passed)}, issued before it"
    if same(first.end, second.end, TIE):
        return text + "."
    return text + f": it is done at {ms(first.end)} instead of {ms(second.end)}."


def _race_phrase(race) -> str:
    """One race in words: what touched what, and, for reused memory, whose block it was."""
    if getattr(race, "reused", None):
        return (f"{race.operation} writes into the memory block {race.reused!r} had, with nothing ordering it after {race.other}, "
                f"which reads {race.reused!r}")
    return f"{race.operation} {_ACCESS.get(race.kind, 'touches what {other} touches').format(other=race.other)}, with nothing ordering them"


def memory_and_races(timelines: dict, *, reference: str, size_text=str) -> str:
    """Timelines of the same work, {name: timeline}: each one's makespan and peak device footprint against
    ``reference``'s, and its races (the first one in words). ``size_text`` writes a byte count."""
    ref = timelines[reference]

    def races(timeline):
        found = timeline.races
        if not found:
            return "no race"
        return f"{len(found)} race{'s' if len(found) > 1 else ''} (the first: {_race_phrase(found[0])})"

    parts = [f"{reference}: {ms(ref.makespan)}, {size_text(ref.peak_device_bytes)} held on the device at peak, {races(ref)}"]
    for name, timeline in timelines.items():
        if name != reference:
            share = timeline.peak_device_bytes / ref.peak_device_bytes if ref.peak_device_bytes else float("inf")
            memory = "the same memory" if same(timeline.peak_device_bytes, ref.peak_device_bytes, TIE) else f"{share:.2f}× the memory"
            parts.append(f"{name}: {ms(timeline.makespan)} ({as_long_as(timeline.makespan, ref.makespan, TIE)} {reference}), "
                         f"{size_text(timeline.peak_device_bytes)} ({memory}), {races(timeline)}")
    return "; ".join(parts) + "."


def reuse_observed(counts: dict, steps: int, *, device: str, errors: dict | None = None) -> str:
    """How often a prefetched batch got the memory of a batch the main stream was still reading, {variant: count} out
    of ``steps`` prefetches, measured (the block's address against an event recorded after the last kernel reading it);
    with ``errors``, {variant: largest difference of its losses from those of a loop without a side stream}."""
    parts = [f"{name}, {count} of {steps} prefetched batches" for name, count in counts.items()]
    text = f"Measured on {device}: {'; '.join(parts)} landed in the memory of a batch whose kernels had not finished"
    if all(count == 0 for count in counts.values()):
        text += " (none here: the GPU kept up with the host this time, which does not make the version without record_stream safe)"
    if errors:
        text += "; " + "; ".join(f"{name}, " + ("the same losses as" if error == 0 else f"losses up to {error:.3g} away from those of")
                                 + " the loop without a side stream" for name, error in errors.items())
    return text + "."


def sync_flags(flagged: dict, *, device: str) -> str:
    """Which calls ``torch.cuda.set_sync_debug_mode("warn")`` flagged, {call: warned?}, measured."""
    warned = [name for name, hit in flagged.items() if hit]
    quiet = [name for name, hit in flagged.items() if not hit]
    text = f"Measured on {device}: "
    text += f"torch warned at {listed(warned, 6)}" if warned else "torch warned at none of the calls"
    return text + (f"; not at {listed(quiet, 6)}." if quiet else ".")


def profiled_rows(trace: dict) -> list[tuple[str, str, float, float, object]]:
    """The GPU work of a ``torch.profiler`` Chrome trace (``prof.export_chrome_trace``, read with ``json.load``):
    ``(name, engine, start_s, end_s, stream)`` per kernel and copy, in start order, times from the first of them.
    Engines as the stream model names them: "compute" for kernels (and memsets), "h2d" and "d2h" for copies between
    host and device, "copy" for other copies. The stream is Kineto's ``args["stream"]``."""
    rows = []
    for event in trace.get("traceEvents", []):
        category = event.get("cat", "")
        if event.get("ph") != "X" or category not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        name = event.get("name", "")
        engine = ("h2d" if "HtoD" in name else "d2h" if "DtoH" in name else "copy") if category == "gpu_memcpy" else "compute"
        start = float(event["ts"]) * 1e-6
        rows.append((name, engine, start, start + float(event.get("dur", 0.0)) * 1e-6, event.get("args", {}).get("stream")))
    if not rows:
        return []
    origin = min(row[2] for row in rows)
    return sorted(((name, engine, start - origin, end - origin, stream) for name, engine, start, end, stream in rows), key=lambda row: row[2])


def _overlap(spans, others) -> float:
    """Time covered by both ``spans`` and ``others`` ((start, end) lists), each counted once."""
    return _union(spans) + _union(others) - _union(list(spans) + list(others))


def copy_overlap(rows) -> float:
    """The share of the kernels' time during which a copy ran too, from ``(name, engine, start, end, …)`` rows."""
    kernels = [(start, end) for _, engine, start, end, *_ in rows if engine == "compute"]
    copies = [(start, end) for _, engine, start, end, *_ in rows if engine != "compute"]
    busy = _union(kernels)
    return _overlap(kernels, copies) / busy if busy else 0.0


def profiled_streams(rows, *, device: str, modelled=None, card: str | None = None) -> str:
    """What a profiler trace shows (rows from :func:`profiled_rows`): the work on each stream and how much of the
    kernels' time copies overlapped; beside the same share in a ``modelled`` timeline when given."""
    if not rows:
        return f"Measured on {device}: the trace holds no kernel or copy (was the work inside the profiler, and synchronised?)."
    names = {"h2d": ("copy in", "copies in"), "d2h": ("copy out", "copies out"), "copy": ("other copy", "other copies"),
             "compute": ("kernel", "kernels")}
    per_stream = {}
    for _, engine, *_, stream in rows:
        per_stream.setdefault(stream, {}).setdefault(engine, 0)
        per_stream[stream][engine] += 1
    listed = [f"stream {stream}: " + ", ".join(f"{n} {names[engine][n > 1]}" for engine, n in counts.items()) for stream, counts in per_stream.items()]
    text = (f"Measured on {device}: {len(per_stream)} stream{'s' if len(per_stream) > 1 else ''} carried GPU work ({'; '.join(listed)}); "
            f"a copy ran during {copy_overlap(rows):.0%} of the kernels' time")
    if modelled is not None:
        model_rows = [(i.label, i.engine, i.start, i.end) for i in modelled.intervals if i.engine is not None]
        text += f", against {copy_overlap(model_rows):.0%} in the model for {card}"
    return text + "."
