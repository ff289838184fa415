"""How long the grader takes per student, module by module, graded as an instructor grades: ``autograder grade``.

    make bench-grading [MODULES="01 06"] [COPIES=3]
    .venv/bin/python scripts/bench_grading.py [--modules 01 06] [--copies 3] [--jobs 1 2] [--out bench-grading.md]

For each module (default: all), a scratch course holds the module's solutions/ and assignments/ folders,
released in a gradebook of its own (untimed, as a course is before grading), and 2 x COPIES students: COPIES
copies of the reference solution (ref1, ...) and COPIES of the untouched release (rel1, ...). For each --jobs
setting a fresh copy of that course is graded by ``python -m autograder grade`` in a subprocess.

What is measured, and where it comes from:

* per student, the seconds its grading process spent on it, and how they split into phases (worker start,
  compile, the student's code, timing, checks, other; :mod:`autograder.phases` says what each holds): the
  grader writes them where $GPUCOURSE_GRADING_TIMINGS names a file (:func:`autograder.grading._keep_timings`);
* per run, the command's wall time, and the part of it before the first student's grading began (the CLI's and
  the pool's start) and after the last one's ended (recording in the gradebook, the table);
* the scores, from each student's ``grading.json``: the reference copies must earn what the grader can grade on
  this machine (every item but those needing a GPU, on a CPU), the release copies 0; the grader's worst slowdown
  (:class:`autograder.clock.FairClock`) and the load average say how busy the machine was.

The table is printed and written to --out (markdown) and beside it as JSON, with the machine and the date.
Exits 1 if a run failed or a verdict was not the expected one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import nbformat  # noqa: E402

from autograder import build, phases, skeleton  # noqa: E402
from autograder.grading import TIMINGS_ENV  # noqa: E402

KINDS = {"ref": "solutions", "rel": "assignments"}  # student name prefix -> where their notebook comes from


def log(text: str) -> None:
    print(text, flush=True)


# --- The machine and the modules -------------------------------------------------------------------


def machine() -> dict:
    """What the numbers were measured on, and when."""
    model = platform.processor() or platform.machine()
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    return {"cpu": model, "cores": os.cpu_count(), "usable_cores": usable, "system": platform.platform(), "python": platform.python_version(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "commit": commit or "unknown"}


def module_names(requested: list[str] | None) -> list[str]:
    """Assignment folders by their number or whole name (``01`` or ``01_gpu_basics``); all when none is named."""
    known = [source.parent.name for source in build.assignment_sources(REPO_ROOT)]
    if not requested:
        return known
    chosen = []
    for name in requested:
        matches = [module for module in known if module == name or module.split("_")[0] == name]
        if not matches:
            raise SystemExit(f"bench_grading: no module {name!r} (modules: {', '.join(known)})")
        chosen += matches
    return list(dict.fromkeys(chosen))


def marks(module: str) -> dict:
    """The autograded points of ``module``: in all, and those of items a CPU grader leaves for a GPU."""
    notebook = nbformat.read(REPO_ROOT / "solutions" / module / f"{module}.ipynb", as_version=4)
    items = skeleton.make_plan(notebook, notebook).items
    return {"total": sum(item.points for item in items), "gpu_only": sum(item.points for item in items if item.requires_gpu)}


# --- One module: a scratch course, graded once per --jobs setting ------------------------------------


def released_course(module: str, folder: Path) -> Path:
    course = folder / "course"
    course.mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    for part in ("solutions", "assignments"):
        shutil.copytree(REPO_ROOT / part / module, course / part / module)
    build.release_assignment(course, module)
    return course


def submissions(course: Path, module: str, copies: int, folder: Path) -> list[str]:
    students = [f"{kind}{index}" for kind in KINDS for index in range(1, copies + 1)]
    for student in students:
        (folder / student).mkdir(parents=True)
        shutil.copy2(course / KINDS[student[:3]] / module / f"{module}.ipynb", folder / student / f"{module}.ipynb")
    return students


def grade(course: Path, module: str, submitted: Path, jobs: int, timings: Path) -> dict:
    """One ``autograder grade`` run, its lines shown as they come (the progress bar on this stderr)."""
    command = [sys.executable, "-m", "autograder", "--course", str(course), "grade", module, str(submitted), "--jobs", str(jobs)]
    load_before, started = os.getloadavg()[0], time.time()
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, TIMINGS_ENV: str(timings)}) as child:
        output = []
        for line in child.stdout:
            output.append(line)
            if line.startswith("["):
                log(f"    {line.rstrip()}")
    ended = time.time()
    return {"jobs": jobs, "returncode": child.returncode, "started": started, "wall": ended - started, "ended": ended,
            "load_before": load_before, "load_after": os.getloadavg()[0], "output": "".join(output)}


def students_of(run: dict, course: Path, module: str, timings: Path, expected: dict) -> list[dict]:
    """Each student's seconds and phases (the grader's timings file) and score (their grading.json)."""
    timed = {record["student"]: record for record in map(json.loads, timings.read_text().splitlines()) if record["jobs"] == run["jobs"]}
    students = []
    for student, record in sorted(timed.items()):
        verdicts = json.loads((course / "autograded" / student / module / "grading.json").read_text())
        gradable = expected["total"] - (expected["gpu_only"] if verdicts["device_class"] != "cuda" else 0)
        score = sum(item["score"] for item in verdicts["items"].values())
        students.append({"student": student, "kind": "reference" if student.startswith("ref") else "release", "score": score,
                         "expected": gradable if student.startswith("ref") else 0.0, "out_of": expected["total"],
                         "device": verdicts["device"], "worst_slowdown": verdicts.get("worst_slowdown", 1.0),
                         "item_seconds": {grade_id: item.get("seconds", 0.0) for grade_id, item in verdicts["items"].items()}, **record})
    return students


def bench_module(module: str, copies: int, jobs_settings: list[int], scratch: Path, step: str) -> dict:
    log(f"{step} {module}: releasing it in a scratch course")
    base = released_course(module, scratch / module / "base")
    expected = marks(module)
    runs = []
    for jobs in jobs_settings:
        course = shutil.copytree(base, scratch / module / f"jobs{jobs}")
        names = submissions(course, module, copies, scratch / module / f"submissions{jobs}")
        log(f"{step} {module}: grading {len(names)} students ({copies} reference, {copies} release) with --jobs {jobs}")
        timings = scratch / module / f"timings{jobs}.jsonl"
        run = grade(course, module, scratch / module / f"submissions{jobs}", jobs, timings)
        run["students"] = students_of(run, course, module, timings, expected) if timings.exists() else []
        run["problems"] = problems(run, names)
        log(f"{step} {module}: --jobs {jobs} took {run['wall']:.1f} s" + (f"; PROBLEMS: {'; '.join(run['problems'])}" if run["problems"] else ""))
        if run["problems"]:
            run["output_tail"] = run["output"][-3000:]
        del run["output"]
        runs.append(run)
    return {"module": module, "copies": copies, "marks": expected, "runs": runs, "summary": summarize(runs)}


def problems(run: dict, names: list[str]) -> list[str]:
    """Why this run's numbers do not measure a correct grading (empty: they do)."""
    found = [] if run["returncode"] == 0 else [f"autograder exited with {run['returncode']}"]
    graded = {student["student"]: student for student in run["students"]}
    found += [f"{name}: no timings or grading.json" for name in names if name not in graded]
    found += [f"{s['student']}: {s['score']:g} points, expected {s['expected']:g}" for s in graded.values() if s["score"] != s["expected"]]
    found += [f"{s['student']}: phases not told apart: {', '.join(s['unmeasured'])}" for s in graded.values() if s["unmeasured"]]
    return found


# --- Summary: the numbers of the table ---------------------------------------------------------------


def spread(values: list[float]) -> dict | None:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


def summarize(runs: list[dict]) -> dict:
    """Per run: seconds per student (all, reference, release), the run's overhead and throughput; the phases' shares
    from the run with the fewest jobs (students graded one at a time: no contention between them)."""
    summary = {"runs": {}}
    for run in runs:
        students = run["students"]
        if not students:
            summary["runs"][str(run["jobs"])] = None
            continue
        first, last = min(s["started"] for s in students), max(s["started"] + s["seconds"] for s in students)
        summary["runs"][str(run["jobs"])] = {
            "per_student": spread([s["seconds"] for s in students]),
            "reference": spread([s["seconds"] for s in students if s["kind"] == "reference"]),
            "release": spread([s["seconds"] for s in students if s["kind"] == "release"]),
            "reference_wall": reference_wall(students, run["jobs"]),
            "wall": run["wall"], "before_first": first - run["started"], "after_last": run["ended"] - last,
            "students_per_minute": len(students) / run["wall"] * 60,
            "worst_slowdown": max(s["worst_slowdown"] for s in students),
            "load": [run["load_before"], run["load_after"]],
        }
    summary["slowest_items"] = slowest_items(runs)
    calm = calmest_run(runs)
    if calm:
        unmeasured = set().union(*(s["unmeasured"] for s in calm["students"]))
        total = sum(s["seconds"] for s in calm["students"])
        summary["shares_at_jobs"] = calm["jobs"]
        summary["shares"] = {phase: None if phase in unmeasured or total <= 0 else sum(s["phases"][phase] for s in calm["students"]) / total
                             for phase in phases.PHASES}
    return summary


def calmest_run(runs: list[dict]) -> dict | None:
    """The run with the fewest jobs that graded anyone (students graded one at a time: no contention between them)."""
    measured = [run for run in runs if run["students"]]
    return min(measured, key=lambda run: run["jobs"]) if measured else None


def slowest_items(runs: list[dict], count: int = 3) -> list[tuple[str, float]]:
    """The ``count`` items that took a reference student longest (median seconds over the reference copies of the run
    with the fewest jobs): where to look first to grade the module faster."""
    calm = calmest_run(runs)
    if calm is None:
        return []
    per_item: dict[str, list[float]] = {}
    for student in calm["students"]:
        if student["kind"] == "reference":
            for grade_id, seconds in student.get("item_seconds", {}).items():
                per_item.setdefault(grade_id, []).append(seconds)
    medians = {grade_id: statistics.median(values) for grade_id, values in per_item.items()}
    return sorted(medians.items(), key=lambda pair: -pair[1])[:count]


def reference_wall(students: list[dict], jobs: int) -> float | None:
    """Wall seconds per reference student, for a class of reference solutions: the pool grades ``jobs`` students at once,
    so each reference student's seconds (measured beside the others, contention included) occupy 1/jobs of the machine's
    wall time. What an instructor pays per student who answered everything: --jobs 2 and 300 such students take 300 x this."""
    seconds = [s["seconds"] for s in students if s["kind"] == "reference"]
    return sum(seconds) / len(seconds) / jobs if seconds else None


# --- The table ---------------------------------------------------------------------------------------


def _seconds(value: dict | None) -> str:
    return "n/a" if value is None else f"{value['median']:.1f} ({value['min']:.1f}–{value['max']:.1f})"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f} %"


def _jobs(count: int) -> str:
    return f"{count} job{'s' * (count != 1)}"


def markdown(about: dict, results: list[dict], jobs_settings: list[int]) -> str:
    shown = max(jobs_settings)
    lines = [
        "# Grading benchmark",
        "",
        f"Measured on {about['cpu']}, {about['cores']} cores ({about['usable_cores']} usable), {about['system']}, Python {about['python']}, "
        f"on {about['date']} (commit {about['commit']}), by `scripts/bench_grading.py`.",
        "Each module: the reference solution and the untouched release, graded by `autograder grade` as separate students.",
        "Seconds per student: what its grading process spent on it, median (min–max) over every student of the run.",
        f"Students per minute: students / the run's wall time (its start, grading and recording), at {_jobs(shown)}.",
        f"Wall s per reference student, at {_jobs(shown)}: a reference student's seconds / {shown} (the pool grades {shown} at once), "
        "averaged over the reference copies: what a class of complete answers costs per student.",
        "Shares: of the students' seconds in the run with the fewest jobs, by phase (autograder/phases.py says what each holds; "
        "`torch.compile`, `@njit` and Triton compiles inside a student's worker count as the student's code).",
        "",
        "| module | students | " + " | ".join(f"s/student, {_jobs(j)}" for j in jobs_settings)
        + f" | students/min at {_jobs(shown)} | wall s per reference student, {_jobs(shown)} | " + " | ".join(phases.PHASES) + " | verdicts |",
        "|---|---:|" + "---:|" * len(jobs_settings) + "---:|---:|" + "---:|" * len(phases.PHASES) + "---|",
    ]
    for result in results:
        runs, summary = {run["jobs"]: run for run in result["runs"]}, result["summary"]
        at = summary["runs"]
        cells = [_seconds(at.get(str(j)) and at[str(j)]["per_student"]) for j in jobs_settings]
        throughput = at.get(str(shown)) and f"{at[str(shown)]['students_per_minute']:.1f}"
        per_reference = at.get(str(shown)) and at[str(shown)]["reference_wall"]
        shares = [_share(summary.get("shares", {}).get(phase)) for phase in phases.PHASES]
        verdicts = "; ".join(p for run in runs.values() for p in run["problems"]) or "as expected"
        lines.append(f"| {result['module']} | {2 * result['copies']} | " + " | ".join(cells) + f" | {throughput or 'n/a'} | "
                     + (f"{per_reference:.1f}" if per_reference is not None else "n/a") + " | " + " | ".join(shares) + f" | {verdicts} |")
    lines += ["", "Per run: the reference and release copies apart, the run's own overhead, and how busy the machine was.", "",
              "| module | jobs | reference s/student | release s/student | wall (s) | before the first student (s) | after the last (s) "
              "| grader's worst slowdown | load average before / after |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for result in results:
        for jobs in jobs_settings:
            run = result["summary"]["runs"].get(str(jobs))
            if run:
                lines.append(f"| {result['module']} | {jobs} | {_seconds(run['reference'])} | {_seconds(run['release'])} | {run['wall']:.1f} "
                             f"| {run['before_first']:.1f} | {run['after_last']:.1f} | {run['worst_slowdown']:.2f} "
                             f"| {run['load'][0]:.2f} / {run['load'][1]:.2f} |")
    lines += ["", "The slowest items of a reference student (median seconds over the copies, the run with the fewest jobs; "
              "each item's time includes starting the runners it needs):", "",
              "| module | slowest items |", "|---|---|"]
    for result in results:
        slow = result["summary"].get("slowest_items", [])
        lines.append(f"| {result['module']} | " + (", ".join(f"{grade_id} {seconds:.1f} s" for grade_id, seconds in slow) or "n/a") + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", nargs="*", help="numbers or names of the modules (default: all)")
    parser.add_argument("--copies", type=int, default=3, help="copies of the reference and of the release each (default 3)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="the --jobs settings to grade with (default 1 2)")
    parser.add_argument("--out", type=Path, default=Path("bench-grading.md"), help="the markdown table (and, beside it, .json)")
    args = parser.parse_args(argv)
    modules, about, results = module_names(args.modules), machine(), []
    log(f"bench_grading: {len(modules)} module(s), {args.copies} copies each of the reference and the release, --jobs {args.jobs}")
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as scratch:
        for index, module in enumerate(modules, 1):
            results.append(bench_module(module, args.copies, args.jobs, Path(scratch), f"[{index}/{len(modules)}]"))
    table = markdown(about, results, args.jobs)
    args.out.write_text(table)
    args.out.with_suffix(".json").write_text(json.dumps({"machine": about, "jobs": args.jobs, "modules": results}, indent=1))
    log(f"\n{table}\nwritten to {args.out} and {args.out.with_suffix('.json')}")
    return 1 if any(run["problems"] for result in results for run in result["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
