"""pytest plugin: log when each test starts and ends, and in which worker process (for ``cpu_by_test.py report``).

    PYTHONPATH=scripts/ci_profile PYTEST_ADDOPTS="-p testlog" CI_PROFILE_DIR=/tmp/prof bash .ci/run
"""

import os
import time

LOG = os.path.join(os.environ.get("CI_PROFILE_DIR", "/tmp/ci-profile"), "tests.log")


def _log(kind: str, nodeid: str) -> None:
    os.makedirs(os.path.dirname(LOG), exist_ok=True)
    with open(LOG, "a") as log:
        log.write(f"{time.time():.3f} {os.getpid()} {kind} {nodeid}\n")


def pytest_runtest_logstart(nodeid, location):
    _log("start", nodeid)


def pytest_runtest_logfinish(nodeid, location):
    _log("end", nodeid)
