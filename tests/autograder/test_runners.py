"""autograder/runners.py's capped runner: a call under a memory cap that the grader sets before any answer cell runs.

Each test grades one item, ``capped(4096)`` through :func:`gpucourse.check.memory_capped` with a budget of 16 MiB,
against an answer that allocates an n × n array (64 MiB, in NumPy or torch), one that stays O(n), and answers that
try to lift the cap from their own cell. The cap is the kernel's (RLIMIT_DATA), so only the O(n) answer passes.
"""

import pytest

from autograder import harness, runners, sandbox, skeleton
from autograder.outcomes import Outcome
from autograder.skeleton import Plan

pytestmark = pytest.mark.slow

LIMITS = sandbox.Limits(cell_seconds=30, item_seconds=60, notebook_seconds=300, memory_bytes=4 * 1024**3)
SETUP = "import numpy as np\nfrom gpucourse import check\nBUDGET = 16 * 2**20\n"
TEST = "capped = check.memory_capped(attend, BUDGET)\nassert capped(4096) > 0\nassert attend(4096) > 0, 'uncapped here'\n"

SQUARE_NUMPY = "import numpy as np\n\n\ndef attend(n):\n    return float(np.ones((n, n), dtype=np.float32).sum())\n"
SQUARE_TORCH = "import torch\n\n\ndef attend(n):\n    return float(torch.ones(n, n).sum())\n"
# O(n) memory, and a BLAS matmul (whose library allocates its buffers on a first call: the grader's cap cell made it).
LINEAR = "import numpy as np\n\n\ndef attend(n):\n    x = np.ones((n, 64), dtype=np.float32)\n    return float((x.T @ x).sum())\n"
# Tries to lift the cap when its cell runs (after the grader's): the kernel refuses to raise a hard limit.
LIFTS_THE_CAP = ("import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
                 "except (ValueError, OSError):\n    pass\n\n\n" + SQUARE_NUMPY)


def _graded(tmp_path, answer: str):
    plan = Plan(context=[SETUP], student_cells=[answer], items=[skeleton.TestItem("test_capped", 1.0, TEST)], api_names=["attend"])
    (tmp_path / "work").mkdir()
    [item] = harness.grade(plan, tmp_path / "work", LIMITS).items
    return item


def test_an_answer_that_stays_within_the_budget_passes(tmp_path):
    item = _graded(tmp_path, LINEAR)
    assert item.outcome == Outcome.PASSED, item


@pytest.mark.parametrize("answer, error", [(SQUARE_NUMPY, "MemoryError"), (SQUARE_TORCH, "can't allocate memory"),
                                           (LIFTS_THE_CAP, "MemoryError")], ids=["numpy", "torch", "lifts_the_cap"])
def test_an_n_by_n_array_fails_under_the_cap_whatever_allocates_it(tmp_path, answer, error):
    item = _graded(tmp_path, answer)
    assert item.outcome == Outcome.FAILED and error in item.message and "uncapped here" not in item.message, item


def test_the_cap_cell_comes_after_the_setup_and_before_every_answer_cell():
    class Worker:
        setup = (["import numpy as np\n"], {})
        cells = ["import numpy as np\n", "def helper():\n    return 1\n", "def attend(n):\n    return helper() + n\n"]
        answer_names = {"attend", "helper"}

    spec = runners.capped_runner(Worker(), "attend", 1024)
    assert spec.cells == ["import numpy as np\n", runners.memory_cap_cell(1024), Worker.cells[1], Worker.cells[2]]
    assert spec.key.startswith("capped-1024-") and not spec.grader_modules
    with pytest.raises(ValueError, match="must be positive"):
        runners.capped_runner(Worker(), "attend", 0)


def test_a_cap_that_could_not_be_set_is_the_graders_failure_never_a_pass(tmp_path, monkeypatch):
    """Where the cap cell raises (no /proc, say), the answer would run uncapped: the grader stops, and scores nothing."""
    from autograder import session

    monkeypatch.setattr(runners, "memory_cap_cell", lambda budget: f"raise OSError('no cap for {budget}')\n")
    with pytest.raises(session.GraderError, match="could not cap its runner's memory"):
        _graded(tmp_path, LINEAR)
