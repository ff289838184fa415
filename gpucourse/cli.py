"""``gpucourse check NOTEBOOK``: the self-check for students.

Runs the notebook's visible tests the way the autograder does (your code in a separate
process, the tests and their clocks outside it) and prints, question by question, what
passed and what did not, with measured against required speed for speed items.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpucourse", description="Course tools for students.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="run a notebook's visible tests and print a per-question table")
    check.add_argument("notebook", type=Path)
    args = parser.parse_args(argv)
    return run_check(args.notebook)


def run_check(notebook_path: Path) -> int:
    import nbformat

    from autograder import harness, skeleton

    try:
        notebook = nbformat.read(notebook_path, as_version=4)
    except (OSError, ValueError) as error:
        print(f"cannot read {notebook_path}: {error}", file=sys.stderr)
        return 2
    plan = skeleton.make_plan(notebook, notebook)
    if not plan.items:
        print(f"{notebook_path} has no graded test cells")
        return 2
    print(f"checking {notebook_path.name}: {len(plan.items)} graded items, your code in a separate process ...")
    with tempfile.TemporaryDirectory(prefix="gpucourse-check-") as scratch:
        workdir = Path(scratch) / "work"
        workdir.mkdir()
        result = harness.grade(plan, workdir)
    print(report(result))
    return 0 if all(item.outcome == "passed" for item in result.items) else 1


def report(result) -> str:
    lines = [f"{'question':<24} {'points':>6}  result"]
    for item in result.items:
        points = f"{item.score:g}/{item.points:g}"
        label = _LABELS.get(item.outcome, item.outcome)
        detail = (item.message or _speed_line(item.output) or "").removeprefix(f"{label}: ")
        lines.append(f"{item.grade_id:<24} {points:>6}  {label}{': ' + detail if detail else ''}")
    total = sum(item.points for item in result.items)
    lines.append(f"{'total (visible tests)':<24} {result.score:g}/{total:g}  measured on {result.device}")
    lines += [f"note: {note}" for note in result.notes]
    lines.append("Grading also runs hidden tests (other shapes, dtypes, edge cases): passing here is necessary, not sufficient.")
    return "\n".join(lines)


_LABELS = {"passed": "passed", "failed": "FAILED", "timeout": "TIMED OUT", "crashed": "CRASHED", "needs_gpu": "needs a GPU"}


def _speed_line(output: str) -> str:
    lines = [line for line in output.splitlines() if "× faster" in line]
    return lines[-1] if lines else ""


if __name__ == "__main__":
    sys.exit(main())
