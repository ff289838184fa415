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

from . import build, slurm, tasks
from .grading import GradingStopped
from .nbgrader_cli import NbgraderError, run_nbgrader
from .outcomes import Outcome
from .sandbox import Limits


def _add_grading_options(parser: argparse.ArgumentParser) -> None:
    """What grade and regrade-gpu share: the submissions, limits, narrowing and where the tasks run."""
    parser.add_argument("assignment")
    parser.add_argument("submissions", type=Path, help="folder (one sub-folder or notebook per student) or .zip")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    parser.add_argument("--item-seconds", type=float, default=Limits.item_seconds, help="time limit per graded item")
    parser.add_argument("--cell-seconds", type=float, default=Limits.cell_seconds, help="time limit per student cell")
    parser.add_argument("--memory-gb", type=float, default=Limits.memory_bytes / 1024**3, help="address-space limit per student, in GiB (2**30 bytes)")
    parser.add_argument("--no-gradebook", action="store_true", help="only print the results; leave gradebook.db alone")
    parser.add_argument("--allow-reduced-isolation", action="store_true",
                        help="grade even where the students' code cannot be sandboxed (not root, no user namespaces): "
                             "it can then read the course; recorded per submission as isolation: reduced")
    parser.add_argument("--student", action="append", metavar="NAME", help="grade only this student (repeatable)")
    parser.add_argument("--only", action="append", metavar="ITEM",
                       help="grade only this item (a test's grade_id; repeatable); the other items keep the student's earlier grading")
    parser.add_argument("--plan-only", action="store_true",
                       help="grade nothing here: write a run folder with one task per student (for a job array), print how to run and collect them")
    parser.add_argument("--backend", choices=("local", "slurm"), default="local",
                       help="local: a pool of --jobs processes here (default); slurm: a Slurm job array, one task per student")
    slurm = parser.add_argument_group("--backend slurm")
    slurm.add_argument("--partition", help="the partition to submit to (default: the cluster's default)")
    slurm.add_argument("--max-running", type=int, help="tasks running at once (the array's %%N)")
    slurm.add_argument("--time", dest="time_limit", help="each task's time limit, as sbatch takes it (e.g. 00:30:00)")
    slurm.add_argument("--gpus", type=int, default=0, help="GPUs per task (--gres=gpu:N): 1 for a GPU regrade with --only")
    parser.add_argument("--per-task", type=int, default=1, help="with --plan-only or --backend slurm: students per task (default 1)")
    slurm.add_argument("--dry-run", action="store_true", help="write the run folder and print the batch script; submit nothing")


def make_parser() -> argparse.ArgumentParser:
    """The CLI's arguments (the README's instructor commands are checked against this parser)."""
    parser = argparse.ArgumentParser(prog="autograder", description=__doc__.splitlines()[0])
    parser.add_argument("--course", type=Path, default=build.REPO_ROOT, help="course root (default: this repository)")
    commands = parser.add_subparsers(dest="command", required=True)

    release = commands.add_parser("release", help="build assignments/ from solutions/ and record them in the gradebook")
    release.add_argument("assignment", nargs="?", help="one assignment (default: all)")

    grade = commands.add_parser("grade", help="grade every submission of an assignment")
    _add_grading_options(grade)
    regrade = commands.add_parser("regrade-gpu", help="regrade, on a GPU, the items a CPU grader left 'needs a GPU regrade'")
    _add_grading_options(regrade)

    task = commands.add_parser("grade-task", help="grade one task of a --plan-only run (one job-array task)")
    task.add_argument("manifest", type=Path)
    task.add_argument("--index", type=int, help="the task (default: SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX)")

    collect = commands.add_parser("collect", help="record every task's result of a --plan-only run in the gradebook")
    collect.add_argument("manifest", type=Path)
    collect.add_argument("--no-gradebook", action="store_true", help="only print the results; leave gradebook.db alone")

    feedback = commands.add_parser("feedback", help="write feedback/<student>/<assignment>/*.html")
    feedback.add_argument("assignment")

    report = commands.add_parser("report", help="write one HTML page about a class's grading: scores, pass rates, speedups, "
                                                 "grading times, items waiting for a GPU, answers unusually alike")
    report.add_argument("assignment")
    report.add_argument("--out", type=Path, help="the page (default: reports/<assignment>.html in the course)")

    export = commands.add_parser("export", help="export the gradebook as CSV")
    export.add_argument("--to", default="grades.csv", help="output file (default grades.csv)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    course = args.course.resolve()
    try:
        if args.command == "release":
            return _release(course, args.assignment)
        if args.command == "regrade-gpu":
            args = _pending_gpu_regrades(course, args)
            if args is None:
                return 0
        if args.command in ("grade", "regrade-gpu"):
            if args.plan_only or args.backend == "slurm":
                return _plan(course, args)
            return _grade(course, args)
        if args.command == "grade-task":
            return _run_task(args.manifest, tasks.task_index(args.index))
        if args.command == "collect":
            return _report(tasks.collect(args.manifest, gradebook=not args.no_gradebook))
        if args.command == "feedback":
            run_nbgrader("generate_feedback", args.assignment, "--force", root=course, database=course / "gradebook.db")
            print(f"feedback written to {course / 'feedback'}/<student>/{args.assignment}/")
            return 0
        if args.command == "report":
            return _class_report(course, args.assignment, args.out)
        return _export(course, Path(args.to))
    except (NbgraderError, build.BuildError, FileNotFoundError, ValueError, slurm.SlurmError) as error:
        print(f"autograder {args.command}: {error}", file=sys.stderr)
        return 1
    except GradingStopped as error:
        print(f"autograder {args.command}: stopped, nothing was graded or recorded: {error}", file=sys.stderr)
        return 3


def _class_report(course: Path, assignment: str, out: Path | None) -> int:
    from .overview import write_report

    page = write_report(course, assignment, out)
    print(f"class report of {assignment} written to {page}")
    return 0


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
                                    only=set(args.only) if args.only else None, allow_reduced_isolation=args.allow_reduced_isolation))


def _plan(course: Path, args) -> int:
    """--plan-only: the run folder and how to run it; --backend slurm: that run as a job array, collected."""
    limits = _check_grade_arguments(course, args)
    manifest = tasks.plan(args.assignment, args.submissions, course, limits=limits, students=set(args.student) if args.student else None,
                          only=set(args.only) if args.only else None, per_task=args.per_task,
                          allow_reduced_isolation=args.allow_reduced_isolation)
    count = tasks.task_count(tasks.load(manifest))
    collect = f"autograder --course {course} collect {manifest}"
    if args.backend == "slurm" and not args.plan_only:
        options = slurm.ArrayOptions(partition=args.partition, max_running=args.max_running, time_limit=args.time_limit,
                                     memory_gb=args.memory_gb, cpus=limits.threads, gpus=args.gpus)
        if not args.dry_run:
            return _report(slurm.run(manifest, options, gradebook=not args.no_gradebook))
        print(slurm.batch_script(manifest, options))
        print(f"# {count} task(s) planned in {manifest.parent}: submit this script with sbatch, then, when the array has finished:\n#   {collect}")
        return 0
    print(f"{count} task(s) planned in {manifest.parent}\n"
          f"run each, anywhere that sees this folder (a job array's task reads its index from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX):\n"
          f"  autograder --course {course} grade-task {manifest} --index I    (I = 0 .. {count - 1})\n"
          f"then record them all, once:\n  {collect}")
    return 0


def _pending_gpu_regrades(course: Path, args):
    """``args`` narrowed to the students and items that wait for a GPU regrade (one GPU per task); None if none wait."""
    pending = tasks.pending_gpu_items(course, args.assignment)
    if args.student:
        pending = {student: items for student, items in pending.items() if student in args.student}
    if not pending:
        print(f"no item of {args.assignment} waits for a GPU regrade")
        return None
    args.student, args.only = sorted(pending), sorted(set().union(*pending.values()))
    args.gpus = max(args.gpus, 1)
    print(f"regrading {', '.join(args.only)} for {len(pending)} student(s) on a GPU")
    return args


def _run_task(manifest: Path, index: int) -> int:
    reports = tasks.run_task(manifest, index)
    for report in reports:
        print(f"task {index}, {report.student}: {report.error or 'graded'}")
    return 2 if any(report.grader_error for report in reports) else 0


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
