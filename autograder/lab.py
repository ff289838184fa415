"""The one command that opens the course in JupyterLab.

``make lab`` runs ``python -m autograder.lab``; ``tests/test_browser.py`` starts the same
command headless (it only adds ``--no-browser``, a port and a token). Extra arguments are
passed on to ``jupyter lab``: ``python -m autograder.lab --no-browser --ServerApp.port=8899``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .build import REPO_ROOT

FIRST_NOTEBOOK = "course/01_gpu_basics.ipynb"  # what `make lab` opens in the browser


def lab_command(*extra: str, root_dir: Path = REPO_ROOT) -> list[str]:
    """``jupyter lab`` of this environment over ``root_dir``, with ``extra`` flags, opening lecture 01."""
    jupyter = Path(sys.executable).with_name("jupyter")  # the venv's, beside its python (not resolved)
    launcher = [str(jupyter), "lab"] if jupyter.exists() else [sys.executable, "-m", "jupyterlab"]
    # Jupyter refuses to run as root unless told; in a container root is the usual user.
    as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    return [*launcher, f"--ServerApp.root_dir={root_dir}", *as_root, *extra, str(Path(root_dir) / FIRST_NOTEBOOK)]


def main(argv: list[str] | None = None) -> None:
    command = lab_command(*(sys.argv[1:] if argv is None else argv))
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
