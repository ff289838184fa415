"""``gpucourse check NOTEBOOK``: the self-check for students.

The command lives here, where students look for it; the grading machinery it runs lives in
the course's ``autograder`` package (the student-facing ``gpucourse`` never imports it at
import time, and works without it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpucourse", description="Course tools for students.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="run a notebook's visible tests and print a per-question table")
    check.add_argument("notebook", type=Path)
    args = parser.parse_args(argv)
    try:
        from autograder.selfcheck import run_check
    except ImportError as error:
        print(f"gpucourse check needs the course's autograder package, installed with the course "
              f"(pip install -e . in the course folder): {error}", file=sys.stderr)
        return 2
    return run_check(args.notebook)


if __name__ == "__main__":
    sys.exit(main())
