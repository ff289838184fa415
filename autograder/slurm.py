"""Run a planned grading (:mod:`autograder.tasks`) as a Slurm job array, then collect it.

``autograder grade ASSIGNMENT SUBMISSIONS --backend slurm`` plans the run in the course folder (which every
node must see, as the course's Python environment), writes ``grade.sbatch`` there and submits it
(``sbatch --array=0-K%N``). While the array runs it prints a line per student as results appear; tasks that
end without a result (a node died, the task was preempted or cancelled) are submitted once more; a task
that fails twice is a grader error for that student only. Then it collects, as ``autograder collect`` does.
``--dry-run`` writes the run folder and prints the batch script, for instructors who submit it themselves.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import tasks

POLL_SECONDS = 3.0


class SlurmError(RuntimeError):
    """A Slurm command is missing or failed."""


@dataclass(frozen=True)
class ArrayOptions:
    partition: str | None = None
    max_running: int | None = None  # tasks running at once (the array's %N)
    time_limit: str | None = None  # Slurm's --time, e.g. "00:30:00"
    memory_gb: float = 8.0  # per task: the worker's address-space limit
    cpus: int = 1
    gpus: int = 0  # --gres=gpu:N: a GPU regrade times each item alone on its GPU


def batch_script(manifest: Path, options: ArrayOptions, indices: list[int] | None = None) -> str:
    """The job array's script: one ``autograder grade-task`` per index (all tasks unless ``indices``)."""
    manifest = Path(manifest).resolve()
    planned = tasks.load(manifest)
    course = planned["course_root"]
    array = ",".join(map(str, indices)) if indices else f"0-{tasks.task_count(planned) - 1}"
    if options.max_running:
        array += f"%{options.max_running}"
    logs = manifest.parent / "logs"
    lines = ["#!/bin/bash", f"#SBATCH --job-name=grade-{planned['assignment']}", f"#SBATCH --array={array}",
             f"#SBATCH --output={logs}/%a.out", f"#SBATCH --cpus-per-task={options.cpus}",
             f"#SBATCH --mem={max(1, round(options.memory_gb * 1024))}M", "#SBATCH --requeue"]
    lines += [f"#SBATCH --partition={options.partition}"] * bool(options.partition)
    lines += [f"#SBATCH --time={options.time_limit}"] * bool(options.time_limit)
    lines += [f"#SBATCH --gres=gpu:{options.gpus}"] * bool(options.gpus)
    lines += ["# One student per task: its index is SLURM_ARRAY_TASK_ID.",
              f"cd {shlex.quote(course)}",
              f"exec {shlex.quote(sys.executable)} -m autograder.cli --course {shlex.quote(course)} grade-task {shlex.quote(str(manifest))}"]
    return "\n".join(lines) + "\n"


def submit(manifest: Path, options: ArrayOptions, indices: list[int] | None = None, name: str = "grade.sbatch") -> str:
    """Write the batch script beside the manifest and submit it; return the job id."""
    script = Path(manifest).parent / name
    script.write_text(batch_script(manifest, options, indices))
    (Path(manifest).parent / "logs").mkdir(exist_ok=True)
    done = _slurm(["sbatch", "--parsable", str(script)])
    return done.split(";")[0].strip()


def run(manifest: Path, options: ArrayOptions, progress: Callable[[str], None] | None = print, *, gradebook: bool = True):
    """Submit the array, follow it, resubmit lost tasks once, collect; return the reports."""
    job = submit(manifest, options)
    if progress:
        progress(f"submitted job array {job} ({tasks.task_count(tasks.load(manifest))} tasks)")
    reported: set[int] = set()
    _follow(manifest, job, reported, progress)
    lost = tasks.unfinished_tasks(manifest)
    if lost:
        if progress:
            progress(f"tasks {', '.join(map(str, lost))} ended without every result: submitted once more")
        _follow(manifest, submit(manifest, options, lost, name="retry.sbatch"), reported, progress)
    return tasks.collect(manifest, gradebook=gradebook)


def _follow(manifest: Path, job: str, reported: set[int], progress) -> None:
    """Wait until no task of ``job`` is queued or running, printing each new result."""
    students = [task["submission"]["student"] for task in tasks.load(manifest)["tasks"]]
    started = time.monotonic()
    while True:
        active = _slurm(["squeue", "-h", "-r", "-j", job, "-o", "%i"]).split()
        for index in sorted(set(range(len(students))) - reported - set(tasks.missing_results(manifest))):
            reported.add(index)
            if progress:
                progress(f"[{len(reported)}/{len(students)}] {students[index]} ({time.monotonic() - started:.0f} s)")
        if not active:
            return
        time.sleep(POLL_SECONDS)


def _slurm(command: list[str]) -> str:
    """A Slurm command's output; a job that has left Slurm's memory has no task left: empty."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except FileNotFoundError as error:
        raise SlurmError(f"{command[0]} not found: --backend slurm needs Slurm's commands on this machine's PATH") from error
    if done.returncode != 0 and command[0] == "squeue" and "Invalid job id" in done.stderr:
        return ""
    if done.returncode != 0:
        raise SlurmError(f"{shlex.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout
