"""The instructor's command line: ``python -m autograder COMMAND`` (or ``autograder COMMAND``).

    autograder release [ASSIGNMENT]            build assignments/ from solutions/, register in the gradebook
    autograder grade ASSIGNMENT SUBMISSIONS    grade a folder or an LMS .zip, in parallel (--jobs N);
                                               --student NAME and --only ITEM narrow it (repeatable);
                                               --plan-only writes one task per student for a job array
    autograder grade-task MANIFEST [--index I] grade one planned task (a Slurm or Kubernetes array task)
    autograder collect MANIFEST                record every planned task's result in the gradebook
    autograder feedback ASSIGNMENT             HTML feedback per student (visible tests only)
    autograder export [--to grades.csv]        grades for your LMS (empty where nothing was handed in;
                                               `pending` lists items awaiting hand grading or a GPU regrade)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import build, tasks
from .grading import GradingStopped
from .nbgrader_cli import NbgraderError, run_nbgrader
from .outcomes import Outcome
from .sandbox import Limits


def make_parser() -> argparse.ArgumentParser:
    """The CLI's arguments (the README's instructor commands are checked against this parser)."""
    parser = argparse.ArgumentParser(prog="autograder", description=__doc__.splitlines()[0])
    parser.add_argument("--course", type=Path, default=build.REPO_ROOT, help="course root (default: this repository)")
    commands = parser.add_subparsers(dest="command", required=True)

    release = commands.add_parser("release", help="build assignments/ from solutions/ and record them in the gradebook")
    release.add_argument("assignment", nargs="?", help="one assignment (default: all)")

    grade = commands.add_parser("grade", help="grade every submission of an assignment")
    grade.add_argument("assignment")
    grade.add_argument("submissions", type=Path, help="folder (one sub-folder or notebook per student) or .zip")
    grade.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    grade.add_argument("--item-seconds", type=float, default=Limits.item_seconds, help="time limit per graded item")
    grade.add_argument("--cell-seconds", type=float, default=Limits.cell_seconds, help="time limit per student cell")
    grade.add_argument("--memory-gb", type=float, default=Limits.memory_bytes / 1024**3, help="address-space limit per student, in GiB (2**30 bytes)")
    grade.add_argument("--no-gradebook", action="store_true", help="only print the results; leave gradebook.db alone")
    grade.add_argument("--student", action="append", metavar="NAME", help="grade only this student (repeatable)")
    grade.add_argument("--only", action="append", metavar="ITEM",
                       help="grade only this item (a test's grade_id; repeatable); the other items keep the student's earlier grading")
    grade.add_argument("--plan-only", action="store_true",
                       help="grade nothing here: write a run folder with one task per student (for a job array), print how to run and collect them")

    task = commands.add_parser("grade-task", help="grade one task of a --plan-only run (one job-array task)")
    task.add_argument("manifest", type=Path)
    task.add_argument("--index", type=int, help="the task (default: SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX)")

    collect = commands.add_parser("collect", help="record every task's result of a --plan-only run in the gradebook")
    collect.add_argument("manifest", type=Path)
    collect.add_argument("--no-gradebook", action="store_true", help="only print the results; leave gradebook.db alone")

    feedback = commands.add_parser("feedback", help="write feedback/<student>/<assignment>/*.html")
    feedback.add_argument("assignment")

    export = commands.add_parser("export", help="export the gradebook as CSV")
    export.add_argument("--to", default="grades.csv", help="output file (default grades.csv)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    course = args.course.resolve()
    try:
        if args.command == "release":
            return _release(course, args.assignment)
        if args.command == "grade":
            return _plan(course, args) if args.plan_only else _grade(course, args)
        if args.command == "grade-task":
            return _run_task(args.manifest, tasks.task_index(args.index))
        if args.command == "collect":
            return _report(tasks.collect(args.manifest, gradebook=not args.no_gradebook))
        if args.command == "feedback":
            run_nbgrader("generate_feedback", args.assignment, "--force", root=course, database=course / "gradebook.db")
            print(f"feedback written to {course / 'feedback'}/<student>/{args.assignment}/")
            return 0
        return _export(course, Path(args.to))
    except (NbgraderError, build.BuildError, FileNotFoundError, ValueError) as error:
        print(f"autograder {args.command}: {error}", file=sys.stderr)
        return 1
    except GradingStopped as error:
        print(f"autograder {args.command}: stopped, nothing was graded or recorded: {error}", file=sys.stderr)
        return 3


def _export(course: Path, to: Path) -> int:
    from .export import export_grades

    to = to if to.is_absolute() else course / to
    rows = export_grades(course, to)
    print(f"grades exported to {to}: {rows} row(s), one per student and assignment; "
          "an empty score means nothing was handed in, `pending` lists items still to grade")
    return 0


def _release(course: Path, assignment: str | None) -> int:
    changed = build.build_notebooks(course)
    changed += build.release_assignment(course, assignment) if assignment else build.release_assignments(course)
    for path in changed:
        print(f"updated {path.relative_to(course)}")
    print(f"release: {len(changed)} file(s) updated; assignments recorded in {course / 'gradebook.db'}")
    return 0


def _check_grade_arguments(course: Path, args) -> Limits:
    if not (course / "solutions" / args.assignment).is_dir():
        raise FileNotFoundError(f"no assignment {args.assignment!r} in {course / 'solutions'}")
    if not args.submissions.exists():
        raise FileNotFoundError(f"no submissions at {args.submissions}")
    return Limits(item_seconds=args.item_seconds, cell_seconds=args.cell_seconds, memory_bytes=int(args.memory_gb * 1024**3))


def _grade(course: Path, args) -> int:
    from .grading import grade_assignment

    limits = _check_grade_arguments(course, args)
    return _report(grade_assignment(args.assignment, args.submissions, course_root=course, jobs=args.jobs, limits=limits,
                                    gradebook=not args.no_gradebook, students=set(args.student) if args.student else None,
                                    only=set(args.only) if args.only else None))


def _plan(course: Path, args) -> int:
    limits = _check_grade_arguments(course, args)
    manifest = tasks.plan(args.assignment, args.submissions, course, limits=limits, students=set(args.student) if args.student else None,
                          only=set(args.only) if args.only else None)
    count = len(tasks.load(manifest)["tasks"])
    print(f"{count} task(s) planned in {manifest.parent}\n"
          f"run each, anywhere that sees this folder (a job array's task reads its index from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX):\n"
          f"  autograder --course {course} grade-task {manifest} --index I    (I = 0 .. {count - 1})\n"
          f"then record them all, once:\n  autograder --course {course} collect {manifest}")
    return 0


def _run_task(manifest: Path, index: int) -> int:
    report = tasks.run_task(manifest, index)
    print(f"task {index}, {report.student}: {report.error or 'graded'}; result in {tasks.result_path(manifest, index)}")
    return 2 if report.grader_error else 0


def _report(reports) -> int:
    """The summary table; exit status 2 (and each worker's log) where the grader failed a student."""
    print()
    print(summary_table(reports))
    failed = sorted(student for student, report in reports.items() if report.grader_error)
    if failed:
        print(f"\ngrader errors (nothing recorded for them; fix the cause, then regrade each with --student NAME): {', '.join(failed)}",
              file=sys.stderr)
        for student in failed:
            if reports[student].log:
                print(f"--- {student}: the worker's log ---\n{reports[student].log}", file=sys.stderr)
        return 2
    return 0


def summary_table(reports) -> str:
    """One line per student: score, items that crashed or timed out, device, notes."""
    rows = [("student", "score", "crashed / timed out", "needs GPU", "graded on", "notes")]
    for student, report in reports.items():
        if report.result is None:
            rows.append((student, "not recorded" if report.grader_error else "0", "-", "-", "-", report.error))
            continue
        total = sum(item.points for item in report.result.items)
        broken = [f"{i.grade_id} ({i.outcome})" for i in report.result.items if i.outcome.broken]
        gpu = [i.grade_id for i in report.result.items if i.outcome == Outcome.NEEDS_GPU]
        rows.append((student, f"{report.score:g}/{total:g}", ", ".join(broken) or "-", ", ".join(gpu) or "-",
                     report.result.device_class, "; ".join(report.notes)[:120] or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
