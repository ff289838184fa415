"""Project wiring: CI runs the README's command, pins agree, JupyterLab serves the course."""

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from course_helpers import REPO_ROOT


def test_ci_runs_the_readme_test_command():
    readme = (REPO_ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme
    assert re.search(r"^make test$", (REPO_ROOT / ".ci" / "run").read_text(), re.MULTILINE)


def test_torch_is_pinned_exactly_and_ranged_in_pyproject():
    pins = dict(line.split("==") for line in (REPO_ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    assert pins["torch"] == "2.13.0"
    for name in ("nbgrader", "jupytext", "jupyterlab", "numpy", "matplotlib", "ipywidgets", "pytest"):
        assert name in pins, f"{name} is not pinned in constraints.txt"
    assert '"torch>=2.4"' in (REPO_ROOT / "pyproject.toml").read_text()


def test_conda_environment_uses_the_same_pins():
    env = (REPO_ROOT / "environment.yml").read_text()
    assert "python=3.11" in env and "-c constraints.txt" in env and "-e .[dev]" in env


def test_readme_links_point_at_existing_notebooks():
    readme = (REPO_ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?:course|assignments)/[^)]+\.ipynb)\)", readme)
    colab = re.findall(r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/main/([^)]+\.ipynb)", readme)
    assert links and colab
    for link in links + colab:
        assert (REPO_ROOT / link).exists(), f"README links to missing {link}"


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_jupyterlab_serves_the_course(tmp_path):
    port, token = _free_port(), "course-test-token"
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
        f"--ServerApp.token={token}", f"--ServerApp.root_dir={REPO_ROOT}", "--allow-root",
    ]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=(tmp_path / "lab.log").open("w"))
    try:
        listing = None
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/course?token={token}", timeout=2) as reply:
                    listing = json.load(reply)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"jupyter lab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        assert listing is not None, "jupyter lab did not answer within 60 s"
        assert "01_gpu_basics.ipynb" in {entry["name"] for entry in listing["content"]}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=10) as page:
            assert page.status == 200 and b"JupyterLab" in page.read()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_python_code_is_lint_clean():
    """ruff, configured in pyproject.toml, finds nothing in the packages, tests and scripts."""
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment (make install brings it)")
    done = subprocess.run([str(ruff), "check", "--no-cache", str(REPO_ROOT)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
