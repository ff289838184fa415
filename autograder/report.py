"""Summarise executed notebooks: every speedup line they printed, per notebook.

``python -m autograder.report DIR`` reads the ``*.ipynb`` in DIR (as written by the
notebook tests when ``GPUCOURSE_EXECUTED_DIR`` is set) and prints the lines that report a
measured speedup, so a GPU run's numbers can be pasted into a note.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat


def speedup_lines(notebook: nbformat.NotebookNode) -> list[str]:
    lines = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                lines += [line for line in output.get("text", "").splitlines() if "× faster" in line]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m autograder.report DIR", file=sys.stderr)
        return 2
    paths = sorted(Path(args[0]).glob("*.ipynb"))
    if not paths:
        print(f"no executed notebooks in {args[0]}")
        return 1
    for path in paths:
        print(f"- {path.stem}:")
        for line in speedup_lines(nbformat.read(path, as_version=4)) or ["(no speedup printed)"]:
            print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
