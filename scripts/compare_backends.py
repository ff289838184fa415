"""Students graded per minute by the local pool and by a Slurm job array, on the same submissions and machine.

    .venv/bin/python scripts/compare_backends.py [--students 12] [--jobs 2] [--per-task 3]

Needs a running Slurm (scripts/slurm_local.sh start). Each backend grades, in a course of its own, the same
module-01 submissions (the adversarial suite's, from the reference to a segfault), the local pool with
``--jobs N`` and the Slurm array with ``--max-running N``: the same number of students graded at once.
Prints one line per backend: wall time, students per minute, and whether the two gradebooks agree.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))

import adversarial as adv  # noqa: E402
import course_helpers  # noqa: E402
from autograder import cli  # noqa: E402
from autograder.nbgrader_cli import open_gradebook  # noqa: E402

# Cheap and costly submissions alike, none that hangs (a hang costs its time limit on either backend).
STUDENTS = ("correct", "untouched", "wrong_sqrt", "slow_loop", "segfault", "exit_in_offload", "patched_clock", "patched_timing",
            "patched_checks", "input_transformer", "broadcasting_1", "noisy")


def recorded_scores(course: Path, students) -> dict[str, float]:
    with open_gradebook(course) as gradebook:
        return {student: sum(grade.score or 0 for grade in gradebook.find_submission_notebook(adv.ASSIGNMENT, adv.ASSIGNMENT, student).grades)
                for student in students}


def grade(backend: list[str], root: Path, count: int) -> tuple[float, dict[str, float]]:
    course = course_helpers.make_course(root / "course", adv.ASSIGNMENT)
    students = {name: files for name, files in adv.variants(course, root / "submissions").items() if name in STUDENTS[:count]}
    submissions = adv.write_submissions(root / "submissions", students)
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["--course", str(course), "grade", adv.ASSIGNMENT, str(submissions), *backend])
    seconds = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"grading with {' '.join(backend)} failed (exit status {code})")
    return seconds, recorded_scores(course, students)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=len(STUDENTS), help=f"how many (at most {len(STUDENTS)})")
    parser.add_argument("--jobs", type=int, default=2, help="students graded at once on either backend")
    parser.add_argument("--per-task", type=int, default=3, help="students per Slurm array task")
    args = parser.parse_args()
    backends = {"local pool": ["--jobs", str(args.jobs)],
                "slurm array": ["--backend", "slurm", "--max-running", str(args.jobs), "--per-task", str(args.per_task)]}
    scores = {}
    for name, options in backends.items():
        with tempfile.TemporaryDirectory(prefix="compare-backends-") as root:
            seconds, scores[name] = grade(options, Path(root), args.students)
        print(f"{name:12s} {' '.join(options):45s} {args.students} students in {seconds:6.1f} s: {60 * args.students / seconds:5.1f} per minute")
    same = len({tuple(sorted(s.items())) for s in scores.values()}) == 1
    print("the gradebooks agree" if same else f"the gradebooks differ: {scores}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
