"""The students' self-check (``gpucourse check NOTEBOOK``, the console script :func:`main`), run by the grader's own machinery.

The notebook's visible tests run the way the autograder runs them: the student's code in a
separate process, the tests and their clocks outside it. It prints, question by question,
what passed and what did not, with measured against required speed for speed items.
On a machine without a GPU, GPU-only items are not run: they are not counted in the score
(which is out of what this machine can grade) nor in the exit status.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbformat

from . import harness, skeleton
from .outcomes import Outcome


def main(argv: list[str] | None = None) -> int:
    """``gpucourse check NOTEBOOK``: the command students run. It lives with the grading machinery it runs, so the
    student-facing :mod:`gpucourse` package never imports the grader."""
    parser = argparse.ArgumentParser(prog="gpucourse", description="Course tools for students.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="run a notebook's visible tests and print a per-question table")
    check.add_argument("notebook", type=Path)
    args = parser.parse_args(argv)
    return run_check(args.notebook)


def run_check(notebook_path: Path) -> int:
    """Check one notebook; 0 when every visible test this machine can run passed, 1 when one did not, 2 when it could not run."""
    try:
        notebook = nbformat.read(notebook_path, as_version=4)
    except (OSError, ValueError) as error:
        print(f"cannot read {notebook_path}: {error}", file=sys.stderr)
        return 2
    plan = skeleton.make_plan(notebook, notebook)
    if not plan.items:
        print(f"{notebook_path} has no graded test cells")
        return 2
    print(f"checking {Path(notebook_path).name}: {len(plan.items)} graded items, your code in a separate process ...")
    with tempfile.TemporaryDirectory(prefix="gpucourse-check-") as scratch:
        workdir = Path(scratch) / "work"
        workdir.mkdir()
        try:
            result = harness.grade(plan, workdir, compiler_required=False)
        except harness.GraderError as error:
            print(f"the check itself failed (not your code): {error}\n{error.log}", file=sys.stderr)
            return 2
    print(report(result))
    return 0 if all(item.outcome in (Outcome.PASSED, Outcome.NEEDS_GPU) for item in result.items) else 1


def report(result: harness.SubmissionResult) -> str:
    width = max([24] + [len(item.grade_id) for item in result.items])  # the columns line up whatever the ids
    lines = [f"{'question':<{width}} {'points':>6}  result"]
    lines += [_row(item, width) for item in result.items]
    waiting = sum(item.points for item in result.items if item.outcome == Outcome.NEEDS_GPU)
    gradable = sum(item.points for item in result.items if item.outcome != Outcome.NEEDS_GPU)
    total = f"{'total (visible tests)':<{width}} {result.score:g}/{gradable:g}"
    if waiting:
        lines.append(f"{total}  on this machine ({result.device}); {waiting:g} more {_points(waiting)} "
                     "will be graded on a GPU (not counted here)")
    else:
        lines.append(f"{total}  measured on {result.device}")
    lines += [f"note: {note}" for note in result.notes]
    lines += kernel_table(result.kernels)
    lines.append("Grading also runs hidden tests (other shapes, dtypes, edge cases): passing here is necessary, not sufficient.")
    return "\n".join(lines)


def kernel_table(kernels: list[dict]) -> list[str]:
    """Per kernel the tests launched: what NVIDIA's compiler made of it, and what a GPU engineer would say."""
    if not kernels:
        return []
    lines = ["", f"your kernels, compiled by NVIDIA's compiler for {kernels[0]['gpu']} ({kernels[0]['arch']}; compiled, not run):",
             f"{'kernel':<20} {'registers':>9} {'shared B':>8} {'local B':>7} {'spilled B':>9} {'float64 ops':>11}"]
    for kernel in kernels:
        lines.append(f"{kernel['kernel']:<20} {kernel['registers']:>9} {kernel['shared_bytes']:>8} {kernel['local_bytes']:>7} "
                     f"{kernel['spill_bytes']:>9} {kernel['float64_instructions']:>11}")
        lines += [f"  warning ({kernel['kernel']}): {warning}" for warning in kernel["warnings"]]
    return lines


def _row(item: harness.ItemResult, width: int) -> str:
    if item.outcome == Outcome.NEEDS_GPU:
        # Not a lost point: this machine cannot run the item, so it is left out of the score here.
        return (f"{item.grade_id:<{width}} {'-':>6}  not counted on this machine: it needs a GPU "
                f"and will be graded on one ({item.points:g} {_points(item.points)})")
    label = item.outcome.label
    detail = (item.message or _speed_line(item.output) or "").removeprefix(f"{label}: ")
    return f"{item.grade_id:<{width}} {f'{item.score:g}/{item.points:g}':>6}  {label}{': ' + detail if detail else ''}"


def _points(points: float) -> str:
    return "point" if points == 1 else "points"


def _speed_line(output: str) -> str:
    lines = [line for line in output.splitlines() if "× faster" in line]
    return lines[-1] if lines else ""


if __name__ == "__main__":
    sys.exit(main())
