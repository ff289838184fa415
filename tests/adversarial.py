"""Adversarial submissions for module 01: what a careless, unlucky or hostile student might hand in.

Each builder takes the reference solution notebook (an ``nbformat`` node, never modified)
and returns a modified copy, or raw bytes for a file that is not a notebook at all. The
expected verdicts live in ``tests/adversarial/test_adversarial.py``; this module only builds files.

Nothing here runs student code: the sources below are strings, executed only inside the
grader's sandboxed worker.
"""

from __future__ import annotations

import copy
import textwrap
import uuid
from pathlib import Path

import nbformat

from course_helpers import REPO_ROOT

ASSIGNMENT = "01_gpu_basics"
SOLUTION_PATH = REPO_ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
RELEASE_PATH = REPO_ROOT / "assignments" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"



def _items() -> tuple[dict[str, float], set[str]]:
    """The autograded items of module 01 with their points, and those only a GPU can grade,
    read from the source notebook (written answers are graded by hand and not listed)."""
    from autograder import skeleton

    source = nbformat.read(SOLUTION_PATH, as_version=4)
    items = skeleton.make_plan(source, source).items
    return {item.grade_id: item.points for item in items}, {item.grade_id for item in items if item.requires_gpu}


ITEMS, GPU_ITEMS = _items()
PAIRWISE_ITEMS = ("test_pairwise_correct", "test_pairwise_speed")


def reference() -> nbformat.NotebookNode:
    """The reference solution notebook (a fresh copy each call)."""
    return nbformat.read(SOLUTION_PATH, as_version=4)


def release() -> nbformat.NotebookNode:
    """The untouched released notebook."""
    return nbformat.read(RELEASE_PATH, as_version=4)


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _index(nb, grade_id: str) -> int:
    found = [index for index, cell in enumerate(nb.cells) if _grade_id(cell) == grade_id]
    if len(found) != 1:
        raise KeyError(f"expected one cell with grade_id {grade_id!r}, found {len(found)}")
    return found[0]


def _code(source: str) -> str:
    return textwrap.dedent(source).strip() + "\n"


# -- generic edits -----------------------------------------------------------------------


def with_cell(nb, grade_id: str, new_source: str) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose cell ``grade_id`` (an answer cell, usually) holds ``new_source``."""
    nb = copy.deepcopy(nb)
    nb.cells[_index(nb, grade_id)].source = _code(new_source)
    return nb


def with_extra_cells(nb, after_grade_id: str, *sources: str) -> nbformat.NotebookNode:
    """``with_extra_cell`` for several cells, in the order given."""
    for source in reversed(sources):
        nb = with_extra_cell(nb, after_grade_id, source)
    return nb


def with_extra_cell(nb, after_grade_id: str, source: str) -> nbformat.NotebookNode:
    """A copy of ``nb`` with a new plain code cell (no nbgrader metadata) right after cell ``after_grade_id``."""
    nb = copy.deepcopy(nb)
    cell = nbformat.v4.new_code_cell(_code(source))
    cell.id = f"extra-{uuid.uuid4().hex[:12]}"
    nb.cells.insert(_index(nb, after_grade_id) + 1, cell)
    return nb


def without_cell(nb, grade_id: str) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    del nb.cells[_index(nb, grade_id)]
    return nb


def retyped_to_markdown(nb, grade_id: str) -> nbformat.NotebookNode:
    """Cell ``grade_id`` turned into a markdown cell, keeping its id, source and metadata."""
    nb = copy.deepcopy(nb)
    index = _index(nb, grade_id)
    old = nb.cells[index]
    new = nbformat.v4.new_markdown_cell(old.source, metadata=copy.deepcopy(old.metadata))
    new.id = old.id
    nb.cells[index] = new
    return nb


def split_cell(nb, grade_id: str) -> nbformat.NotebookNode:
    """Cell ``grade_id`` split in two at a blank line; both halves keep its nbgrader metadata."""
    nb = copy.deepcopy(nb)
    index = _index(nb, grade_id)
    old = nb.cells[index]
    lines = old.source.splitlines(keepends=True)
    blanks = [i for i, line in enumerate(lines) if not line.strip()]
    cut = blanks[len(blanks) // 2] if blanks else len(lines) // 2
    first = nbformat.v4.new_code_cell("".join(lines[:cut]), metadata=copy.deepcopy(old.metadata))
    second = nbformat.v4.new_code_cell("".join(lines[cut:]), metadata=copy.deepcopy(old.metadata))
    first.id, second.id = old.id, f"{old.id}-part2"
    nb.cells[index : index + 1] = [first, second]
    return nb


def notebook_bytes(nb) -> bytes:
    return nbformat.writes(nb).encode()


def truncated(nb) -> bytes:
    """The notebook's JSON cut in the middle: not a notebook any more."""
    data = notebook_bytes(nb)
    return data[: len(data) // 2]


# -- answers -----------------------------------------------------------------------------

SQRT = """
def pairwise_sq_dists(x, y):
    # Wrong: distances, not squared distances.
    cross = x @ y.T
    squares = (x * x).sum(dim=1, keepdim=True) + (y * y).sum(dim=1)
    return (squares - 2 * cross).clamp_min(0).sqrt()
"""

LOOP = """
def pairwise_sq_dists(x, y):
    return pairwise_sq_dists_loop(x, y)
"""

# The tests' own reference called by name: it lives in a grader-side setup cell, which never runs beside the answer.
CALLS_THE_REFERENCE = """
def pairwise_sq_dists(x, y):
    return reference_sq_dists(x, y)
"""

BROADCASTING = """
def pairwise_sq_dists(x, y):
    return ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
"""

# A hang in the last item's answer: it costs one item limit (not one per item), and nothing after it needs a new worker.
INFINITE = """
def offload_seconds(n, gpu_flops, link_bandwidth, itemsize=4, fixed_seconds=0.0):
    while True:
        pass


def crossover_n(cpu_flops, gpu_flops, link_bandwidth, itemsize=4, fixed_seconds=0.0):
    return 1
"""

SEGFAULT = """
def pairwise_sq_dists(x, y):
    import ctypes
    ctypes.string_at(0)
"""

MEMORY_HOG = """
def pairwise_sq_dists(x, y):
    hoard = []
    while True:
        hoard.append(torch.ones(256 * 1024 * 1024))  # 1 GB of float32, touched
"""

OFFLOAD_EXIT = """
def offload_seconds(n, gpu_flops, link_bandwidth, itemsize=4, fixed_seconds=0.0):
    import os
    os._exit(3)


def crossover_n(cpu_flops, gpu_flops, link_bandwidth, itemsize=4, fixed_seconds=0.0):
    if gpu_flops <= cpu_flops:
        raise ValueError("offloading never pays")
    n = 1
    while not fixed_seconds + 3 * n * n * itemsize / link_bandwidth + 2 * n**3 / gpu_flops < 2 * n**3 / cpu_flops:
        n += 1
    return n
"""

IGNORE_SIGINT = """
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
"""

FORK_BOMB = """
import os
while True:  # every child runs this same loop: a fork bomb
    try:
        os.fork()
    except OSError:
        pass
"""

PATCH_CLOCK = """
import time
time.perf_counter = lambda: 0.0
time.monotonic = lambda: 0.0
"""

PATCH_TIMING = """
import gpucourse
import gpucourse.check
import gpucourse.timing
from gpucourse.timing import SpeedResult


def _fake_compare_speed(*args, **kwargs):
    return SpeedResult(speedup=1000.0, low=1000.0, high=1000.0, baseline_seconds=1.0,
                       candidate_seconds=0.001, rounds=15, device="fake", num_threads=1)


gpucourse.timing.compare_speed = _fake_compare_speed
timing.compare_speed = _fake_compare_speed
gpucourse.check.assert_speedup = lambda *args, **kwargs: None
check.assert_speedup = lambda *args, **kwargs: None
check.required_speedup = lambda *args, **kwargs: 0.0
"""

PATCH_COMPARISONS = """
import torch.testing
import gpucourse.check

torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
gpucourse.check.assert_close = lambda *args, **kwargs: None
check.assert_close = lambda *args, **kwargs: None
"""

INPUT_TRANSFORMER = """
get_ipython().input_transformers_post.append(lambda lines: ["pass\\n"])
"""

# Placed after the baseline cell: tries to make the baseline (and torch's sum) slow, so
# that a slow answer looks fast next to it. The answer keeps the original sum for itself.
PATCH_BASELINE = """
import time
import torch

_original_sum = torch.Tensor.sum


def _slow_sum(self, *args, **kwargs):
    time.sleep(0.01)
    return _original_sum(self, *args, **kwargs)


def pairwise_sq_dists_loop(x, y):
    time.sleep(1.0)
    return reference_sq_dists(x, y)


torch.Tensor.sum = _slow_sum
"""

LOOP_WITH_ORIGINAL_SUM = """
def pairwise_sq_dists(x, y):
    out = torch.empty(x.shape[0], y.shape[0], dtype=x.dtype, device=x.device)
    for i in range(x.shape[0]):
        out[i] = _original_sum((x[i] - y) ** 2, dim=1)
    return out
"""

CACHE_BY_ADDRESS = """
_cache = {}


def pairwise_sq_dists(x, y):
    key = (x.data_ptr(), y.data_ptr(), tuple(x.shape), tuple(y.shape), x.dtype)
    if key not in _cache:
        _cache[key] = pairwise_sq_dists_loop(x, y)
    return _cache[key]
"""

CACHE_BY_VALUE = """
_cache = {}


def pairwise_sq_dists(x, y):
    key = (hash(x.cpu().numpy().tobytes()), hash(y.cpu().numpy().tobytes()), tuple(x.shape), tuple(y.shape), x.dtype)
    if key not in _cache:
        _cache[key] = pairwise_sq_dists_loop(x, y)
    return _cache[key]
"""

# Reaches into the worker process (it runs in it) and answers the timed request at once,
# with made-up digests, doing the work later, when the outputs are fetched outside the timed
# region. Written against the message names only, so it survives changes of their arguments.
FORGED_DONE = """
import gc

_worker = next(o for o in gc.get_objects() if type(o).__name__ == "Worker")
# The grader's package cannot be imported here (a sealed worker, issue 46): its serializer is taken from the worker's globals.
to_plain = type(_worker).do_call.__globals__["to_plain"]
_pending = None


def _run_block(*args):
    global _pending
    _pending = _worker.block
    _worker.send("done", [0.0] * len(_pending[1]))


def _fetch_block(*args):
    fn, calls = _pending
    outputs = [fn(*call) for call in calls]
    _worker.block = None
    _worker.send("return", [to_plain(output) for output in outputs])


_worker.do_run_block = _run_block
_worker.do_fetch_block = _fetch_block
"""

# Reaches into the worker and computes the whole block when its inputs arrive, before "go", so the
# timed run only hands back outputs that already exist (digests and all). The CPU the worker used
# between the inputs and "go" is charged to the timed run, so this is as slow as the loop it runs.
PRECOMPUTED = """
import gc

_worker = next(o for o in gc.get_objects() if type(o).__name__ == "Worker")


def _load_and_compute(name, calls):
    calls = [_worker._bind(args) for args in calls]
    function = _worker.namespace[name]
    outputs = iter([function(*args) for args in calls])
    _worker.block = (lambda *args: next(outputs), calls)
    _worker.send("ok")


_worker.do_load_block = _load_and_compute
"""

# Writes the header of a reply frame to the grader's pipe, then nothing more.
PARTIAL_FRAME = """
import os
import struct
import sys
import time

os.write(int(sys.argv[2]), struct.pack("!Q", 100))
while True:
    time.sleep(1)
"""

NOISE_CELL = """
import sys
import warnings

warnings.warn("x")
print("noise", file=sys.stderr)
print("more noise on stdout")
"""

NOISY_PAIRWISE = """
def pairwise_sq_dists(x, y):
    import sys
    import warnings

    warnings.warn("x")
    print("noise", file=sys.stderr)
    cross = x @ y.T
    squares = (x * x).sum(dim=1, keepdim=True) + (y * y).sum(dim=1)
    return (squares - 2 * cross).clamp_min_(0)
"""

PLANTED_TORCH = 'raise ImportError("planted torch.py: the grader imported a file from the submission folder")\n'
PLANTED_GPUCOURSE = """
def device():
    raise RuntimeError("planted gpucourse.py: the grader imported a file from the submission folder")


describe = device_class = device
"""

LEAK_MARKER = "LEAKED"
# What a probing cell raises when it reached nothing: the note proves the cell ran to its end.
PROBED_MARKER = "PROBED, nothing reachable:"


class Symlink(str):
    """In a submission's files: a symbolic link to this target instead of a regular file."""


def reads_file_cell(filename: str) -> str:
    """A cell that raises ``LEAKED`` if ``filename`` (beside the notebook) has any content."""
    return f"""
try:
    with open({filename!r}, "rb") as _file:
        _data = _file.read(64)
except OSError:
    _data = b""
if _data:
    raise RuntimeError("{LEAK_MARKER}: read the private file behind {filename}: " + repr(_data[:40]))
raise RuntimeError("{PROBED_MARKER} {filename}")
"""


WRITE_MARKER = b"ADVERSARY-WAS-HERE"


def snooping_cell(paths_to_read=(), dirs_to_list=(), paths_to_write=(), list_siblings=False) -> str:
    """A cell that tries to read, list and write paths it should not reach, and raises if any of it worked.

    Its error message (``LEAKED: read …; listed …; wrote …``) lands in the grader's load
    notes, so a test sees from the report alone what the sandbox let through. A write
    counts only if the written ``WRITE_MARKER`` can be read back. ``list_siblings`` also
    lists the folder holding the worker's own working folder (other students' folders).
    """
    read, listed, written = ([str(p) for p in paths] for paths in (paths_to_read, dirs_to_list, paths_to_write))
    return f"""
import os

_leaks = []
for _path in {read!r}:
    try:
        with open(_path, "rb") as _file:
            if _file.read(64):
                _leaks.append("read " + _path)
    except OSError:
        pass
for _path in {listed!r}:
    try:
        if os.listdir(_path):
            _leaks.append("listed " + _path)
    except OSError:
        pass
if {list_siblings!r}:
    _here = os.getcwd()
    try:
        _others = set(os.listdir(os.path.dirname(_here))) - {{os.path.basename(_here)}}
        if _others:
            _leaks.append("listed other students' folders " + ", ".join(sorted(_others)))
    except OSError:
        pass
for _path in {written!r}:
    try:
        with open(_path, "ab") as _file:
            _file.write({WRITE_MARKER!r})
        with open(_path, "rb") as _file:
            if {WRITE_MARKER!r} in _file.read():
                _leaks.append("wrote " + _path)
    except OSError:
        pass
if _leaks:
    raise RuntimeError("{LEAK_MARKER}: " + "; ".join(_leaks))
raise RuntimeError("{PROBED_MARKER} {{}} paths".format({len(read) + len(listed) + len(written)}))
"""


def process_probing_cell(port: int | None = None) -> str:
    """A cell that looks for what its process inherited from whoever started it: open files other than
    its standard streams and the grader's two pipes (a fork server's socket, a waiter's status pipe,
    a file outside its folder), other processes it can see or signal, and the network: any interface
    but loopback, and the grader machine's loopback (``port``: where the test listens on 127.0.0.1); and the ways
    out of a sandbox built in a user namespace: a user namespace of its own (whose capabilities would undo the
    mounts), making a read-only folder writable, leaving its root. Raises ``LEAKED`` naming each, else ``PROBED``."""
    return f"""
import ctypes
import os
import socket

_leaks, _pipes = [], 0
for _fd in sorted(int(_name) for _name in os.listdir("/proc/self/fd")):
    try:
        _target = os.readlink(f"/proc/self/fd/{{_fd}}")
    except OSError:
        continue  # the descriptor listdir itself had open
    if _target.startswith("pipe:") and _fd > 2:
        _pipes += 1
    elif _target.startswith(("socket:", "anon_inode:")) or (_fd > 2 and not _target.startswith(os.getcwd())):
        _leaks.append(f"fd {{_fd}} -> {{_target}}")
if _pipes > 2:
    _leaks.append(f"{{_pipes}} pipes open (the grader's are 2)")
for _pid in (int(_name) for _name in os.listdir("/proc") if _name.isdigit()):
    if _pid != os.getpid():
        _leaks.append(f"saw process {{_pid}}")
_libc = ctypes.CDLL(None, use_errno=True)
if _libc.unshare(0x10000000 | 0x00020000) == 0:  # CLONE_NEWUSER | CLONE_NEWNS
    _leaks.append("made a user namespace")
if _libc.mount(b"none", os.path.dirname(os.__file__).encode(), None, 0x20 | 0x1000, None) == 0:  # MS_REMOUNT | MS_BIND, not MS_RDONLY
    _leaks.append("made the interpreter's folder writable")
try:
    os.chroot("/")
    _leaks.append("could chroot")
except OSError:
    pass
_interfaces = [_name for _, _name in socket.if_nameindex() if _name != "lo"]
if _interfaces:
    _leaks.append("network interfaces " + ", ".join(_interfaces))
if {port!r} is not None:
    try:
        socket.create_connection(("127.0.0.1", {port!r}), timeout=2).close()
        _leaks.append("connected to the grader's port {port}")
    except OSError:
        pass
if _leaks:
    raise RuntimeError("{LEAK_MARKER}: " + "; ".join(_leaks))
raise RuntimeError("{PROBED_MARKER} open files and processes")
"""


# -- the variants ------------------------------------------------------------------------


# World-writable folders of a usual Linux box: a sandboxed student writing there would leave
# files behind for the next student (a channel between students) or fill the disk.
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def planted_copies(token: str) -> list[Path]:
    """Where the test plants a copy of the hidden tests before grading: a second copy of the course
    elsewhere on the machine, and one in the grader's home (an instructor's other checkout)."""
    relative = Path("solutions") / ASSIGNMENT / f"{ASSIGNMENT}.py"
    return [Path("/opt") / f"adversarial-course-{token}" / relative, Path.home() / f"adversarial-course-{token}" / relative]


def probe_paths(course_root: Path, submissions_dir: Path, token: str) -> dict[str, dict]:
    """What the snooping student tries: private course paths, and paths outside the course."""
    solutions = course_root / "solutions" / ASSIGNMENT
    return {
        "private": dict(
            paths_to_read=[course_root / "gradebook.db", solutions / f"{ASSIGNMENT}.py", solutions / f"{ASSIGNMENT}.ipynb",
                           submissions_dir / "correct" / f"{ASSIGNMENT}.ipynb"],
            dirs_to_list=[course_root / "solutions", submissions_dir, course_root / "submitted", course_root / "autograded"],
            paths_to_write=[course_root / "gradebook.db", solutions / f"{ASSIGNMENT}.py"],
            list_siblings=True,
        ),
        "outside": dict(
            # The installed autograder's own repository (here: this checkout), copies of the course
            # elsewhere (planted by the test), and shared scratch space.
            paths_to_read=[REPO_ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.py", REPO_ROOT / "gradebook.db", *planted_copies(token)],
            paths_to_write=[Path(folder) / f"adversarial-probe-{token}" for folder in SHARED_WRITABLE],
        ),
    }


def variants(course_root: Path, submissions_dir: Path, token: str = "probe", port: int | None = None) -> dict[str, dict[str, bytes]]:
    """Student name -> files of their submission folder (file name -> bytes).

    ``course_root`` and ``submissions_dir`` are where grading will happen (the snooping
    students need their paths); ``token`` makes the snoopers' scratch file names unique;
    ``port``: where the test listens on 127.0.0.1, which the snooper tries to reach.
    """
    ref = reference()
    nb = notebook_bytes
    name = f"{ASSIGNMENT}.ipynb"
    probes = probe_paths(course_root, submissions_dir, token)

    def answer(source):
        return with_cell(ref, "pairwise_sq_dists", source)

    students = {
        "correct": {name: nb(ref)},
        "untouched": {name: RELEASE_PATH.read_bytes()},
        "wrong_sqrt": {name: nb(answer(SQRT))},
        "slow_loop": {name: nb(answer(LOOP))},
        "calls_the_reference": {name: nb(answer(CALLS_THE_REFERENCE))},
        "segfault": {name: nb(answer(SEGFAULT))},
        "exit_in_offload": {name: nb(with_cell(ref, "offload", OFFLOAD_EXIT))},
        "memory_hog": {name: nb(answer(MEMORY_HOG))},
        "malformed": {name: truncated(ref)},
        "patched_clock": {name: nb(with_extra_cell(answer(LOOP), "imports", PATCH_CLOCK))},
        "patched_timing": {name: nb(with_extra_cell(answer(LOOP), "imports", PATCH_TIMING))},
        "patched_checks": {name: nb(with_extra_cell(answer(SQRT), "imports", PATCH_COMPARISONS))},
        "input_transformer": {name: nb(with_extra_cell(answer(SQRT), "imports", INPUT_TRANSFORMER))},
        "patched_baseline": {name: nb(with_extra_cell(answer(LOOP_WITH_ORIGINAL_SUM), "baseline", PATCH_BASELINE))},
        "cache_by_address": {name: nb(answer(CACHE_BY_ADDRESS))},
        "cache_by_value": {name: nb(answer(CACHE_BY_VALUE))},
        "planted_modules": {name: nb(ref), "torch.py": PLANTED_TORCH.encode(), "gpucourse.py": _code(PLANTED_GPUCOURSE).encode()},
        # Four probing cells in one submission (each raises a note of what it reached): the course's private
        # paths, paths outside the course, a link in the submission folder to the course's solutions (the
        # grader must not copy its target in), and what the worker's process inherited (open files, processes, a network).
        "snooping": {name: nb(with_extra_cells(ref, "imports", snooping_cell(**probes["private"]),
                                               snooping_cell(**probes["outside"]), reads_file_cell("notes.txt"),
                                               process_probing_cell(port))),
                     "notes.txt": Symlink(course_root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.py")},
        "noisy": {name: nb(with_extra_cell(answer(NOISY_PAIRWISE), "imports", NOISE_CELL))},
        "forged_done": {name: nb(with_extra_cell(answer(LOOP), "imports", FORGED_DONE))},
        "precomputed": {name: nb(with_extra_cell(answer(LOOP), "imports", PRECOMPUTED))},
    }
    for index in (1, 2):
        students[f"broadcasting_{index}"] = {name: nb(answer(BROADCASTING))}
    return students


def structural_variants() -> dict[str, tuple[nbformat.NotebookNode, nbformat.NotebookNode]]:
    """Submissions that change the notebook's *test* cells, each with the notebook it must grade
    exactly like: the grader takes every test from the source, so only the answers count.
    (Checked on the plan the grader builds: no grading needed to prove it.)"""
    ref = reference()
    loop = with_cell(ref, "pairwise_sq_dists", LOOP)
    return {
        "deleted_test": (without_cell(ref, "test_roofline"), ref),
        "edited_test": (with_cell(ref, "test_pairwise_speed", "pass"), ref),
        "edited_test_slow": (with_cell(loop, "test_pairwise_speed", "pass"), loop),
        "split_test": (split_cell(ref, "test_offload"), ref),
        "markdown_test": (retyped_to_markdown(ref, "test_pairwise_correct"), ref),
    }


def hanging_variants() -> dict[str, dict[str, bytes]]:
    """Answers that never return (one also ignores SIGINT and SIGTERM).

    Their pairwise answer is the slow loop: right, and failing its speed item at the first measurement,
    where a fast one would be timed at length (on a busy machine, the longest part of their grading).
    """
    name = f"{ASSIGNMENT}.ipynb"
    infinite = with_cell(with_cell(reference(), "pairwise_sq_dists", LOOP), "offload", INFINITE)
    return {
        "infinite_loop": {name: notebook_bytes(infinite)},
        "ignores_sigint": {name: notebook_bytes(with_extra_cell(infinite, "imports", IGNORE_SIGINT))},
    }


def stalling_variants() -> dict[str, dict[str, bytes]]:
    """A release notebook that stalls the protocol mid-frame while loading, and an untouched neighbour."""
    name = f"{ASSIGNMENT}.ipynb"
    return {
        "partial_frame": {name: notebook_bytes(with_extra_cell(release(), "imports", PARTIAL_FRAME))},
        "stall_witness": {name: RELEASE_PATH.read_bytes()},
    }


def fork_bomb_variants() -> dict[str, dict[str, bytes]]:
    """A fork bomb at load time, graded alongside two witnesses: the reference and (cheaper to
    grade, started while the bomb runs) the untouched release."""
    ref = reference()
    name = f"{ASSIGNMENT}.ipynb"
    return {
        "fork_bomb": {name: notebook_bytes(with_extra_cell(ref, "imports", FORK_BOMB))},
        "witness_1": {name: notebook_bytes(ref)},
        "witness_2": {name: RELEASE_PATH.read_bytes()},
    }


def write_submissions(directory: Path, students: dict[str, dict[str, bytes]]) -> Path:
    """Lay ``students`` out as ``directory/<student>/<file>``; returns ``directory``."""
    for student, files in students.items():
        folder = directory / student
        folder.mkdir(parents=True, exist_ok=True)
        for filename, data in files.items():
            if isinstance(data, Symlink):
                (folder / filename).symlink_to(data)
            else:
                (folder / filename).write_bytes(data)
    return directory
