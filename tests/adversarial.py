"""Adversarial submissions for module 01: what a careless, unlucky or hostile student might hand in.

Each builder takes the reference solution notebook (an ``nbformat`` node, never modified)
and returns a modified copy, or raw bytes for a file that is not a notebook at all. The
expected verdicts live in ``tests/test_adversarial.py``; this module only builds files.

Nothing here runs student code: the sources below are strings, executed only inside the
grader's sandboxed worker.
"""

from __future__ import annotations

import copy
import textwrap
import uuid
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "01_gpu_basics"
SOLUTION_PATH = REPO_ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
RELEASE_PATH = REPO_ROOT / "assignments" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"

# The autograded items of module 01 and their points (first_call_answer is graded by hand).
ITEMS = {
    "test_time_call": 2.0,
    "test_pairwise_correct": 2.0,
    "test_pairwise_speed": 2.0,
    "test_roofline": 2.0,
    "test_offload": 2.0,
}
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

BROADCASTING = """
def pairwise_sq_dists(x, y):
    return ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
"""

INFINITE = """
def pairwise_sq_dists(x, y):
    while True:
        pass
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
def offload_seconds(n, gpu_flops, link_bandwidth, itemsize=4):
    import os
    os._exit(3)


def crossover_n(cpu_flops, gpu_flops, link_bandwidth, itemsize=4):
    if gpu_flops <= cpu_flops:
        raise ValueError("offloading never pays")
    n = 1
    while not 3 * n * n * itemsize / link_bandwidth + 2 * n**3 / gpu_flops < 2 * n**3 / cpu_flops:
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
WRITE_MARKER = b"ADVERSARY-WAS-HERE"


def snooping_cell(paths_to_read: list[Path], dirs_to_list: list[Path], paths_to_write: list[Path]) -> str:
    """A cell that tries to read, list and write private paths, and raises if any of it worked.

    Its error message (``LEAKED: ...``) appears in the grader's load notes, so a test can
    see from the report alone whether the sandbox let anything through. Writes append
    ``WRITE_MARKER``, which a test can look for afterwards.
    """
    return f"""
import os

_read, _listed, _written = {[str(p) for p in paths_to_read]!r}, {[str(p) for p in dirs_to_list]!r}, {[str(p) for p in paths_to_write]!r}
_leaks = []
for _path in _read:
    try:
        with open(_path, "rb") as _file:
            if _file.read(64):
                _leaks.append("read " + _path)
    except OSError:
        pass
for _path in _listed:
    try:
        if os.listdir(_path):
            _leaks.append("listed " + _path)
    except OSError:
        pass
for _path in _written:
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
"""


# -- the variants ------------------------------------------------------------------------


def variants(course_root: Path, submissions_dir: Path) -> dict[str, dict[str, bytes]]:
    """Student name -> files of their submission folder (name -> bytes).

    ``course_root`` and ``submissions_dir`` are where grading will happen: the snooping
    student needs their paths.
    """
    ref = reference()
    nb = notebook_bytes
    name = f"{ASSIGNMENT}.ipynb"
    snoop = snooping_cell(
        paths_to_read=[
            course_root / "gradebook.db",
            course_root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.py",
            course_root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
            submissions_dir / "correct" / name,
            REPO_ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.py",
            REPO_ROOT / "gradebook.db",
        ],
        dirs_to_list=[course_root / "solutions", submissions_dir, course_root / "submitted", course_root / "autograded"],
        paths_to_write=[course_root / "gradebook.db", course_root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.py"],
    )
    students = {
        "correct": {name: nb(ref)},
        "untouched": {name: RELEASE_PATH.read_bytes()},
        "wrong_sqrt": {name: nb(with_cell(ref, "pairwise_sq_dists", SQRT))},
        "slow_loop": {name: nb(with_cell(ref, "pairwise_sq_dists", LOOP))},
        "infinite_loop": {name: nb(with_cell(ref, "pairwise_sq_dists", INFINITE))},
        "ignores_sigint": {name: nb(with_extra_cell(with_cell(ref, "pairwise_sq_dists", INFINITE), "imports", IGNORE_SIGINT))},
        "segfault": {name: nb(with_cell(ref, "pairwise_sq_dists", SEGFAULT))},
        "exit_in_offload": {name: nb(with_cell(ref, "offload", OFFLOAD_EXIT))},
        "memory_hog": {name: nb(with_cell(ref, "pairwise_sq_dists", MEMORY_HOG))},
        "deleted_test": {name: nb(without_cell(ref, "test_roofline"))},
        "edited_test": {name: nb(with_cell(ref, "test_pairwise_speed", "pass"))},
        "edited_test_slow": {name: nb(with_cell(with_cell(ref, "pairwise_sq_dists", LOOP), "test_pairwise_speed", "pass"))},
        "split_test": {name: nb(split_cell(ref, "test_offload"))},
        "markdown_test": {name: nb(retyped_to_markdown(ref, "test_pairwise_correct"))},
        "malformed": {name: truncated(ref)},
        "renamed": {"my_work.ipynb": nb(ref)},
        "patched_clock": {name: nb(with_extra_cell(with_cell(ref, "pairwise_sq_dists", LOOP), "imports", PATCH_CLOCK))},
        "patched_timing": {name: nb(with_extra_cell(with_cell(ref, "pairwise_sq_dists", LOOP), "imports", PATCH_TIMING))},
        "patched_checks": {name: nb(with_extra_cell(with_cell(ref, "pairwise_sq_dists", SQRT), "imports", PATCH_COMPARISONS))},
        "input_transformer": {name: nb(with_extra_cell(with_cell(ref, "pairwise_sq_dists", SQRT), "imports", INPUT_TRANSFORMER))},
        "patched_baseline": {name: nb(with_extra_cell(with_cell(ref, "pairwise_sq_dists", LOOP_WITH_ORIGINAL_SUM), "baseline", PATCH_BASELINE))},
        "cache_by_address": {name: nb(with_cell(ref, "pairwise_sq_dists", CACHE_BY_ADDRESS))},
        "cache_by_value": {name: nb(with_cell(ref, "pairwise_sq_dists", CACHE_BY_VALUE))},
        "planted_modules": {name: nb(ref), "torch.py": PLANTED_TORCH.encode(), "gpucourse.py": _code(PLANTED_GPUCOURSE).encode()},
        "snooping": {name: nb(with_extra_cell(ref, "imports", snoop))},
        "noisy": {name: nb(with_extra_cell(with_cell(ref, "pairwise_sq_dists", NOISY_PAIRWISE), "imports", NOISE_CELL))},
    }
    for index in (1, 2, 3):
        students[f"broadcasting_{index}"] = {name: nb(with_cell(ref, "pairwise_sq_dists", BROADCASTING))}
    return students


def fork_bomb_variants() -> dict[str, dict[str, bytes]]:
    """A fork bomb at load time, graded alongside two correct witnesses."""
    ref = reference()
    name = f"{ASSIGNMENT}.ipynb"
    return {
        "fork_bomb": {name: notebook_bytes(with_extra_cell(ref, "imports", FORK_BOMB))},
        "witness_1": {name: notebook_bytes(ref)},
        "witness_2": {name: notebook_bytes(ref)},
    }


def write_submissions(directory: Path, students: dict[str, dict[str, bytes]]) -> Path:
    """Lay ``students`` out as ``directory/<student>/<file>``; returns ``directory``."""
    for student, files in students.items():
        folder = directory / student
        folder.mkdir(parents=True, exist_ok=True)
        for filename, data in files.items():
            (folder / filename).write_bytes(data)
    return directory
