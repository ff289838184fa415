"""Where a test run's CPU time goes, per test: sample every process, charge each to the test its pytest worker ran.

    python scripts/ci_profile/cpu_by_test.py sample /tmp/prof &          # until /tmp/prof/stop exists
    PYTHONPATH=scripts/ci_profile PYTEST_ADDOPTS="-p testlog" CI_PROFILE_DIR=/tmp/prof bash .ci/run
    touch /tmp/prof/stop; python scripts/ci_profile/cpu_by_test.py report /tmp/prof

``sample`` reads /proc four times a second and writes, for every process that used CPU since the last
sample, that CPU time and the pytest-xdist worker it descends from (sandboxed workers, kernels and
compilers included). ``report`` charges each sample to the test that worker was running then
(``testlog.py``), and prints CPU seconds per test class or module and per test. (This folder goes on
PYTHONPATH, so nothing in it may share a name with a module of the standard library: a ``profile.py``
here broke torch.profiler in every notebook kernel.) A process that lives
less than a sample's interval is missed; so is what runs before pytest starts, except as a total.
"""

from __future__ import annotations

import bisect
import collections
import os
import re
import sys
import time

INTERVAL = 0.25
WORKER = b"exec(eval(sys.stdin.readline()))"  # how pytest-xdist starts its workers


def sample(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    tick = os.sysconf("SC_CLK_TCK")
    used, parent, workers = {}, {}, set()
    with open(os.path.join(folder, "samples.txt"), "w") as out:
        while not os.path.exists(os.path.join(folder, "stop")):
            now = time.time()
            for name in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{name}/stat") as stat:
                        fields = stat.read().rpartition(")")[2].split()
                except OSError:
                    continue
                pid, cpu, key = int(name), (int(fields[11]) + int(fields[12])) / tick, (name, fields[19])
                parent[pid] = int(fields[1])
                if key not in used:
                    used[key] = 0.0
                    try:
                        with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                            if WORKER in cmdline.read():
                                workers.add(pid)
                    except OSError:
                        pass
                delta, used[key] = cpu - used[key], cpu
                if delta > 0:
                    out.write(f"{now:.3f} {_worker_of(pid, parent, workers)} {delta:.2f}\n")
            out.flush()
            time.sleep(INTERVAL)


def _worker_of(pid: int, parent: dict, workers: set) -> int:
    for _ in range(64):
        if pid in workers:
            return pid
        pid = parent.get(pid, 0)
        if pid <= 1:
            return 0
    return 0


def report(folder: str, top: int = 40) -> None:
    runs, started = collections.defaultdict(list), {}
    for line in open(os.path.join(folder, "tests.log")):
        stamp, pid, kind, nodeid = line.rstrip("\n").split(" ", 3)
        if kind == "start":
            started[pid] = (float(stamp), nodeid)
        elif pid in started:
            begin, nodeid = started.pop(pid)
            runs[int(pid)].append((begin, float(stamp), nodeid))
    starts = {pid: [run[0] for run in rs] for pid, rs in runs.items()}
    first = min(run[0] for rs in runs.values() for run in rs)
    per_test, total = collections.Counter(), 0.0
    for line in open(os.path.join(folder, "samples.txt")):
        stamp, worker, delta = line.split()
        stamp, worker, delta = float(stamp), int(worker), float(delta)
        total += delta
        if stamp < first:
            per_test["(before pytest: the install)"] += delta
            continue
        index = bisect.bisect_right(starts.get(worker, []), stamp) - 1
        if worker and index >= 0 and stamp <= runs[worker][index][1] + INTERVAL:
            per_test[runs[worker][index][2]] += delta
        else:
            per_test["(outside any test)"] += delta
    groups = collections.Counter()
    for nodeid, seconds in per_test.items():
        groups[re.sub(r"::test_[^:]*$", "", re.sub(r"\[.*\]$", "", nodeid))] += seconds
    print(f"CPU seconds in all: {total:.0f}")
    for title, counts in (("per test class or module", groups), ("per test", per_test)):
        print(f"\n{title}:")
        for name, seconds in counts.most_common(top):
            print(f"{seconds:8.1f}  {name}")


if __name__ == "__main__":
    command, folder = sys.argv[1], sys.argv[2]
    sample(folder) if command == "sample" else report(folder)
