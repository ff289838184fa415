"""What a student sees running an untouched release, read from an executed copy of it (nbgrader's, in
tests/autograder/test_grading.py), and what is wrong with it: each test cell fails with its stub's one-line message,
which names what to write and its question, and no traceback shows a frame of the course's own packages.
"""

from __future__ import annotations

import re

from autograder.skeleton import _question, is_test
from gpucourse.check import in_course

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The message of a release's stub (autograder.build.stub_message); numba's simulator puts the thread before it.
STUB_MESSAGE = re.compile(r"^(?:tid=\[[\d, ]+\] ctaid=\[[\d, ]+\]: )?(\w+) is not written yet \((Question \w+)\): replace this line with your solution$")
FRAME_FILE = re.compile(r"^File (.+?):\d+", re.MULTILINE)  # a frame in a file, as IPython shows it (a cell's is "Cell In[n], line m")
# The test cell's own frame, first in a traceback: the line IPython points at ("----> 12 check(...)").
RAISING_LINE = re.compile(r"^Cell In\[\d+\], line \d+\n(?:.*\n)*?-*> *\d+ (.*)$", re.MULTILINE)


def untouched_release_problems(executed, release) -> list[str]:
    """What is wrong in ``executed``, a run of the untouched release ``release`` (whose test cells may carry hidden
    tests after the visible ones, as nbgrader runs them): an error outside a test cell, a test cell that passed, or
    an error that is not a stub's ``NotImplementedError`` naming a question up to the cell's own, in one line, raised
    by a line of the cell as released (not a hidden test's), with no traceback frame in the course's packages. A cell that prints
    ``thresholds.describe`` must say what the check needs on this machine. Empty when all is well."""
    visible = {cell.metadata["nbgrader"]["grade_id"]: {line.strip() for line in cell.source.splitlines()} for cell in release.cells if is_test(cell)}
    order, question, problems = [], None, []
    for cell in executed.cells:
        if cell.cell_type == "markdown":
            question = _question(cell.source, question)
            if question and question[0] not in order:
                order.append(question[0])
            continue
        if cell.cell_type != "code":
            continue
        name = cell.metadata.get("nbgrader", {}).get("grade_id") or cell.get("id")
        errors = [output for output in cell.get("outputs", []) if output.output_type == "error"]
        if not is_test(cell):
            problems += [f"{name}: raised {error.ename}: {error.evalue}, in a cell that is no test" for error in errors]
            continue
        if not errors:
            problems.append(f"{name}: passed, untouched")
        for error in errors:
            problems += [f"{name}: {problem}" for problem in _error_problems(error, order, visible.get(name, set()))]
        printed = "".join(output.get("text", "") for output in cell.get("outputs", []) if output.output_type == "stream")
        if "thresholds.describe(" in cell.source and "On this machine (" not in printed:
            problems.append(f"{name}: printed no threshold for this machine")
    return problems


def _error_problems(error, questions: list[str], visible_lines: set[str]) -> list[str]:
    """What is wrong with one test cell's error, whose cell belongs to the last of ``questions``."""
    found = STUB_MESSAGE.match(error.evalue)
    problems = []
    if error.ename != "NotImplementedError" or not found:
        problems.append(f"raised {error.ename}: {error.evalue} (not a stub's message)")
    elif found[2] not in questions:
        problems.append(f"names {found[2]}, a question after the cell's own ({questions[-1] if questions else 'none'})")
    traceback = ANSI.sub("", "\n".join(error.traceback))
    inside = sorted({path for path in FRAME_FILE.findall(traceback) if in_course(path)})
    if inside:
        problems.append(f"shows frames of the course's packages: {', '.join(inside)}")
    raising = RAISING_LINE.search(traceback)
    if raising is None or raising[1].strip() not in visible_lines:
        problems.append(f"raised at {raising[1].strip() if raising else 'no line of the cell'!r}, not a line of the cell as released (a hidden test's)")
    return problems
