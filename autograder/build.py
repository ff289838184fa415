"""Build every generated file of the course from its single source.

* ``course/NN_topic.py`` and ``solutions/NN_topic/NN_topic.py`` (jupytext percent format)
  become the ``.ipynb`` beside them: no outputs, deterministic cell ids, complete nbgrader
  metadata (sources may give only the keys that matter; the rest is filled in here).
* ``solutions/NN_topic/`` becomes ``assignments/NN_topic/`` through nbgrader's
  ``generate_assignment`` (solutions and hidden tests stripped); each stub it leaves then names
  what is missing and its question (:func:`name_stubs`).

Running it twice changes nothing. Usage: ``python -m autograder.build [--root DIR]``.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import jupytext
import nbformat

from .nbgrader_cli import NbgraderError, run_nbgrader
from .skeleton import GRADER_SIDE, REQUIRES_GPU, _question, defined_names, free_names, is_solution, is_test

REPO_ROOT = Path(__file__).resolve().parent.parent
NBFORMAT_MINOR = 5
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
NOTEBOOK_METADATA = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
MODULE_NAME = re.compile(r"^\d\d_[a-z0-9_]+$")
# Keys jupytext adds to remember the .py's blank lines; they mean nothing in a notebook.
JUPYTEXT_LAYOUT_KEYS = {"lines_to_next_cell", "lines_to_end_of_cell_marker", "cell_marker"}
# The cell tags a source may use (``# %% ... tags=["..."]``), and what each means. Any other tag
# is a typo or an idea nobody implemented, so the build rejects it.
KNOWN_TAGS = {
    # Only on graded test cells: the item needs a CUDA GPU to measure anything, so a grader
    # without one marks it "needs a GPU regrade" instead of running it (autograder.skeleton).
    REQUIRES_GPU: "graded test cell that needs a CUDA GPU: a CPU grader marks it for a GPU regrade",
    # Only on locked setup cells that the tests alone use (references, checks): graded, they run only in the grader's
    # process, never where the student's code runs (autograder.skeleton.make_plan), so no answer can call a reference.
    GRADER_SIDE: "locked setup cell for the tests alone: when graded it runs in the grader, never beside the student's code",
}
# Notebook-level metadata key that names the source a generated notebook is built from.
GENERATED_KEY = "gpucourse"
# The line nbgrader puts where each solution block was (nbgrader_config.py: ClearSolutions.code_stub, after its comment).
STUB_RAISE = 'raise NotImplementedError("replace this line with your solution")'
SOLUTION_BLOCK = re.compile(r"^([ \t]*)### BEGIN SOLUTION.*?^[ \t]*### END SOLUTION[^\n]*$", re.M | re.S)


class BuildError(RuntimeError):
    """A source file breaks a convention of the course; the message says which and where."""


def lecture_sources(root: Path) -> list[Path]:
    return sorted(path for path in (root / "course").glob("*.py") if MODULE_NAME.match(path.stem))


def assignment_sources(root: Path) -> list[Path]:
    """``solutions/NN_topic/NN_topic.py`` for every assignment folder."""
    sources = []
    for folder in sorted((root / "solutions").glob("*/")):
        if not MODULE_NAME.match(folder.name):
            continue
        source = folder / f"{folder.name}.py"
        if not source.exists():
            raise BuildError(f"{folder}: expected the assignment's source {source.name} in it")
        sources.append(source)
    return sources


def nbgrader_metadata(given: dict, where: str) -> dict:
    """Complete a cell's nbgrader metadata from the keys its source sets.

    Sources write only what matters (``grade_id``, ``solution``, ``grade``, ``points``,
    ``locked``); nbgrader needs every key of schema 3. Autograded test cells are locked.
    """
    unknown = set(given) - {"grade_id", "solution", "grade", "points", "locked", "task"}
    if unknown:
        raise BuildError(f"{where}: unknown nbgrader keys {sorted(unknown)}")
    if "grade_id" not in given:
        raise BuildError(f"{where}: nbgrader cells need a grade_id")
    meta = {"grade": False, "solution": False, "task": False, "schema_version": 3, **given}
    meta.setdefault("locked", meta["grade"] and not meta["solution"])
    if meta["grade"] and "points" not in meta:
        raise BuildError(f"{where}: graded cell {meta['grade_id']!r} needs points")
    return dict(sorted(meta.items()))


def notebook_from_source(source: Path, root: Path | None = None) -> nbformat.NotebookNode:
    """Read a py:percent source into a clean notebook with deterministic cell ids.

    ``root`` is the course root the notebook's metadata names ``source`` against (default: this
    repository when ``source`` lies in it, else just the file's name).
    """
    source = Path(source)
    notebook = jupytext.read(source, fmt="py:percent")
    grade_ids: set[str] = set()
    counters = {"code": 0, "markdown": 0, "raw": 0}
    for index, cell in enumerate(notebook.cells):
        where = f"{source}, cell {index + 1}"
        for key in JUPYTEXT_LAYOUT_KEYS & set(cell.metadata):
            del cell.metadata[key]
        extra = set(cell.metadata) - {"nbgrader", "tags"}
        if extra:
            raise BuildError(f"{where}: unexpected cell metadata {sorted(extra)}")
        if "nbgrader" in cell.metadata:
            meta = nbgrader_metadata(dict(cell.metadata["nbgrader"]), where)
            if meta["grade_id"] in grade_ids:
                raise BuildError(f"{where}: grade_id {meta['grade_id']!r} is used twice")
            grade_ids.add(meta["grade_id"])
            cell.metadata["nbgrader"] = meta
            cell.id = meta["grade_id"]
        else:
            counters[cell.cell_type] += 1
            cell.id = f"{cell.cell_type}-{counters[cell.cell_type]:02d}"
        check_tags(cell, where)
        check_speed_items(cell, where)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    check_grader_side(notebook, source)
    check_answer_stubs(notebook, source)
    origin = {"source": course_path(source, root), "generated": "do not edit: run make build"}
    notebook.metadata = nbformat.from_dict({**NOTEBOOK_METADATA, GENERATED_KEY: origin})
    notebook.nbformat, notebook.nbformat_minor = 4, NBFORMAT_MINOR
    nbformat.validate(notebook)
    return notebook


def course_path(path: Path, root: Path | None = None) -> str:
    """``path`` relative to the course root, with POSIX slashes (what generated notebooks name).

    Without ``root``: relative to this repository, or just the file's name outside it.
    """
    path = Path(path).resolve()
    base = (REPO_ROOT if root is None else Path(root)).resolve()
    if path.is_relative_to(base):
        return path.relative_to(base).as_posix()
    if root is None:
        return path.name
    raise BuildError(f"{path} is not inside the course root {base}")


def check_tags(cell, where: str) -> None:
    """Tags come from :data:`KNOWN_TAGS`, and ``requires-gpu`` is where it means something.

    A graded test cell that uses a GPU must carry ``requires-gpu``: without it a CPU grader
    would run it, its GPU part would skip itself (``gpu_or_explain``) and the item would pass
    at full marks with nothing measured.
    """
    tags = cell.metadata.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise BuildError(f"{where}: tags must be a list of strings, got {tags!r}")
    for tag in tags:
        if tag not in KNOWN_TAGS:
            raise BuildError(f"{where}: unknown tag {tag!r}; the known tags are {sorted(KNOWN_TAGS)}")
    graded_test = is_test(cell)
    if REQUIRES_GPU in tags and not graded_test:
        raise BuildError(
            f"{where}: tag {REQUIRES_GPU!r} is only for graded test cells (nbgrader grade: true, not a solution), "
            "where it tells a CPU grader to leave the item for a GPU regrade; it means nothing on this cell: remove it"
        )
    if graded_test and REQUIRES_GPU not in tags:
        uses = gpu_uses(cell.source, where)
        if uses:
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            raise BuildError(
                f"{where}: graded test cell {grade_id!r} uses a GPU ({'; '.join(uses)}) but has no {REQUIRES_GPU!r} tag, "
                f"so a CPU grader would skip its GPU part and give full marks: add tags=[\"{REQUIRES_GPU}\"] to its # %% header "
                "(if the cell also grades work a CPU can check, move the GPU part into a graded cell of its own and tag that one)"
            )


def check_grader_side(notebook, source: Path) -> None:
    """Grader-side cells are locked setup code, and no answer of the source uses what they define (graded, an answer
    runs where those names do not exist)."""
    grader_side = {}
    for index, cell in enumerate(notebook.cells):
        if GRADER_SIDE not in cell.metadata.get("tags", []):
            continue
        if cell.cell_type != "code" or is_test(cell) or is_solution(cell) or not cell.metadata.get("nbgrader", {}).get("locked"):
            raise BuildError(f"{source}, cell {index + 1}: tag {GRADER_SIDE!r} is only for locked setup cells (not tests, not answers)")
        grader_side.update(dict.fromkeys(defined_names(cell.source), index + 1))
    for index, cell in enumerate(notebook.cells):
        used = [name for name in free_names(cell.source) if name in grader_side] if is_solution(cell) and cell.cell_type == "code" else []
        if used:
            raise BuildError(f"{source}, cell {index + 1}: the answer uses {', '.join(used)}, which a {GRADER_SIDE!r} cell defines "
                             f"(cell {grader_side[used[0]]}): graded, it would not exist where the answer runs")


def released_code(code: str) -> str:
    """An answer cell's code as nbgrader releases it: each solution block replaced by :data:`STUB_RAISE`, indented as the block."""
    return SOLUTION_BLOCK.sub(lambda block: block.group(1) + STUB_RAISE, code)


def check_answer_stubs(notebook, source: Path) -> None:
    """Released, every answer cell still defines what the other cells use, as functions (or classes) whose stub raises
    when called, naming the question (:func:`name_stubs`): the def (or class) line lies outside the solution blocks,
    and each block either lies in a function's body or is a whole top-level part of the cell (helpers, constants, a
    decorator the student chooses), which is released as nothing.

    Released as a bare top-level ``raise``, a block would stop the cell before it defined anything, and every test
    that uses it would fail with a ``NameError`` instead of the stub's message.
    """
    read = {name for cell in notebook.cells if cell.cell_type == "code" and not is_solution(cell) for name in free_names(cell.source)}
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or not is_solution(cell) or "### BEGIN SOLUTION" not in cell.source:
            continue
        where = f"{source}, cell {index + 1} (answer {cell.metadata['nbgrader']['grade_id']!r})"
        released = released_code(cell.source)
        try:
            stubs = stub_owners(released)
        except SyntaxError as error:
            raise BuildError(f"{where}: released, the cell is not valid Python (line {error.lineno}: {error.msg})") from None
        stray = [line for line, owner in stubs.items() if owner is STRAY]
        if stray:
            raise BuildError(f"{where}: the solution block released as line {stray[0]} lies in a class body or a top-level "
                             "if/for/with, where its stub would raise when the cell runs: put it in a function's body, or make it "
                             "a whole top-level part of the cell")
        missing = [name for name in defined_names(cell.source) if name in read and name not in defined_names(released)]
        if missing:
            raise BuildError(f"{where}: released, the cell would not define {', '.join(missing)}, which the other cells use: "
                             "keep each such def (or class) line outside the solution blocks, with a block in its body, so that "
                             "the release defines it and raises NotImplementedError, naming the question, when it is called")


STRAY = "stray"  # a stub neither in a function's body nor a whole top-level statement (stub_owners)


def stub_owners(code: str) -> dict[int, str | None]:
    """{line of each :data:`STUB_RAISE` in ``code``: the top-level function or class whose code it lies in; None for
    a stub that is a whole top-level statement; :data:`STRAY` for one elsewhere (a class body, a top-level if)}."""
    tree = ast.parse(code)
    owners: dict[int, str | None] = {}
    for node in tree.body:
        functions = [inner for inner in ast.walk(node) if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for inner in ast.walk(node):
            if isinstance(inner, ast.Raise) and ast.get_source_segment(code, inner) == STUB_RAISE:
                inside = any(function.body[0].lineno <= inner.lineno <= function.end_lineno for function in functions)
                owners[inner.lineno] = node.name if inside else (None if inner is node else STRAY)
    return owners


def stub_message(name: str, question: str | None) -> str:
    """What an untouched answer raises: what to write, its question, and what to do."""
    return f"{name} is not written yet{f' ({question})' if question else ''}: replace this line with your solution"


def name_stubs(notebook: nbformat.NotebookNode) -> None:
    """Finish the stubs nbgrader left in a release's answer cells: each in a function's body names what it stands for
    and its question, ``raise NotImplementedError("DigitsCNN is not written yet (Question 3): replace this line with
    your solution")``; each top-level one (a block of helpers, constants or a decorator) goes, with its
    ``# YOUR CODE HERE``. The cell's nbgrader checksum is then that of the cell as released."""
    from nbgrader.utils import compute_checksum

    question = None
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            question = _question(cell.source, question)
        if cell.cell_type != "code" or not is_solution(cell):
            continue
        lines = cell.source.split("\n")
        for line, name in stub_owners(cell.source).items():
            if name is None:
                lines[line - 1] = None
                if line >= 2 and lines[line - 2] == "# YOUR CODE HERE":
                    lines[line - 2] = None
            else:
                lines[line - 1] = lines[line - 1].replace(STUB_RAISE, f'raise NotImplementedError("{stub_message(name, question and question[0])}")')
        released = re.sub(r"\n{4,}", "\n\n\n", "\n".join(line for line in lines if line is not None)).strip("\n")
        if released != cell.source:
            cell.source = released
            cell.metadata["nbgrader"]["checksum"] = compute_checksum(cell)


def check_speed_items(cell, where: str) -> None:
    """A graded test cell that times with ``compare_speed`` must pass ``check=``: without it the
    timed outputs are never checked, and code that skips the work at the timed size would pass.
    (Whether the check covers the *whole* output is the author's duty: docs/authoring.md, section 4.)"""
    if not is_test(cell):
        return
    try:
        tree = ast.parse(cell.source)
    except SyntaxError:
        return  # reported where the cell runs
    for node in ast.walk(tree):
        function = node.func if isinstance(node, ast.Call) else None
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
        if name == "compare_speed" and not any(keyword.arg == "check" for keyword in node.keywords):
            raise BuildError(f"{where}: compare_speed on line {node.lineno} has no check=: every timed output must be checked "
                             "(a function of (inputs, output) that raises when the output is wrong)")


def gpu_uses(code: str, where: str = "cell") -> list[str]:
    """What in ``code`` needs a CUDA GPU, e.g. ``["calls gpu_or_explain on line 7 of the cell"]``.

    Read from the syntax tree, so comments and docstrings do not count: calls of
    ``gpu_or_explain`` (as a function or a method), ``torch.cuda`` (``torch.cuda.Event``, imports of
    it), ``.cuda(...)`` method calls, and the strings ``"cuda"`` or ``"cuda:N"`` as a call's argument
    or keyword value or as a dict's key or value. A dict with both a ``"cpu"`` and a ``"cuda"`` key
    (per-device thresholds such as ``{"cpu": 4, "cuda": 10}``) serves both devices: its ``"cuda"``
    key does not count.
    """
    try:
        tree = ast.parse(_python_of(code))
    except SyntaxError as error:
        raise BuildError(f"{where}: graded test cell is not valid Python (line {error.lineno}: {error.msg})") from None
    found: list[tuple[int, str]] = []

    def cuda_string(node) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and (node.value == "cuda" or node.value.startswith("cuda:"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else None
            if name == "gpu_or_explain":
                found.append((node.lineno, "calls gpu_or_explain"))
            elif name == "cuda" and isinstance(node.func, ast.Attribute) and not _is_torch_cuda(node.func):
                found.append((node.lineno, "calls .cuda()"))
            for value in [*node.args, *(keyword.value for keyword in node.keywords)]:
                if cuda_string(value):
                    found.append((value.lineno, f"passes {value.value!r} to a call"))
        elif isinstance(node, ast.Attribute) and _is_torch_cuda(node):
            found.append((node.lineno, "uses torch.cuda"))
        elif isinstance(node, ast.ImportFrom) and (node.module == "torch.cuda" or (node.module == "torch" and any(a.name == "cuda" for a in node.names))):
            found.append((node.lineno, "imports torch.cuda"))
        elif isinstance(node, ast.Import) and any(a.name == "torch.cuda" or a.name.startswith("torch.cuda.") for a in node.names):
            found.append((node.lineno, "imports torch.cuda"))
        elif isinstance(node, ast.Dict):
            keys = {key.value for key in node.keys if isinstance(key, ast.Constant)}
            per_device = {"cpu", "cuda"} <= keys
            for key in node.keys:
                if key is not None and cuda_string(key) and not (per_device and key.value == "cuda"):
                    found.append((key.lineno, f"has a dict key {key.value!r} without a 'cpu' one"))
            for value in node.values:
                if cuda_string(value):
                    found.append((value.lineno, f"has a dict value {value.value!r}"))
    return [f"{what} on line {line} of the cell" for line, what in sorted(set(found))]


def _is_torch_cuda(node: ast.Attribute) -> bool:
    return node.attr == "cuda" and isinstance(node.value, ast.Name) and node.value.id == "torch"


def _python_of(code: str) -> str:
    """The cell's code with IPython syntax (``%magic``, ``!shell``) turned into Python, lines kept."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(code)


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` unless the file already holds it; True when it changed."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


def notebook_text(notebook: nbformat.NotebookNode) -> str:
    return nbformat.writes(notebook) + "\n"


def build_notebooks(root: Path) -> list[Path]:
    """Write the .ipynb of every lecture and solution source; return those that changed."""
    changed = []
    for source in lecture_sources(root) + assignment_sources(root):
        target = source.with_suffix(".ipynb")
        if write_if_changed(target, notebook_text(notebook_from_source(source, root))):
            changed.append(target)
    return changed


def release_assignments(root: Path) -> list[Path]:
    """Regenerate ``assignments/`` from ``solutions/`` with nbgrader; return changed files."""
    names = [source.parent.name for source in assignment_sources(root)]
    # One nbgrader run for all of them (each run costs 2-3 s of start-up), its assignment id a glob,
    # where that glob finds exactly the assignments; one run each otherwise (a folder 08_draft-old, say).
    every = "[0-9][0-9]_*"
    if names and sorted(folder.name for folder in (root / "solutions").glob(f"{every}/")) == names:
        return _release(root, names, every)
    return [path for name in names for path in release_assignment(root, name)]


def release_assignment(root: Path, assignment: str) -> list[Path]:
    """Regenerate ``assignments/ASSIGNMENT`` with nbgrader; return the files that changed.

    nbgrader also records the assignment's graded cells in the course's ``gradebook.db``,
    which grading needs later.
    """
    return _release(root, [assignment], assignment)


def _release(root: Path, assignments: list[str], nbgrader_id: str) -> list[Path]:
    releases = [root / "assignments" / assignment for assignment in assignments]
    before = {path: text for release in releases for path, text in _snapshot(release).items()}
    _generate_assignment(root, nbgrader_id, root / "gradebook.db")
    for assignment, release in zip(assignments, releases):
        _mark_generated(root, assignment, release)
    after = {path: text for release in releases for path, text in _snapshot(release).items()}
    return sorted(path for path, text in after.items() if before.get(path) != text)


def _mark_generated(root: Path, assignment: str, release: Path) -> None:
    for notebook_path in release.glob("*.ipynb"):
        # nbgrader writes with its own formatting; keep the repository's one format.
        notebook = nbformat.read(notebook_path, as_version=4)
        name_stubs(notebook)
        # Students get this file: the note is metadata (invisible in Jupyter) and addresses staff.
        source = course_path(root / "solutions" / assignment / f"{notebook_path.stem}.py", root)
        notebook.metadata[GENERATED_KEY] = {
            "source": source,
            "generated": f"generated from {source} by make build (nbgrader generate_assignment); course staff: edit that source, not this file",
        }
        write_if_changed(notebook_path, notebook_text(notebook))


def _generate_assignment(root: Path, assignment: str, database: Path) -> None:
    try:
        run_nbgrader("generate_assignment", assignment, "--force", "--create", "--log-level=WARN", root=root, database=database)
    except NbgraderError as error:
        raise BuildError(str(error)) from error


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} if folder.exists() else {}


def build(root: Path = REPO_ROOT) -> list[Path]:
    """Regenerate every generated file under ``root``; return the paths that changed."""
    root = Path(root).resolve()
    return build_notebooks(root) + release_assignments(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="course root (default: this repository)")
    args = parser.parse_args(argv)
    try:
        changed = build(args.root)
    except BuildError as error:
        print(f"build failed: {error}", file=sys.stderr)
        return 1
    for path in changed:
        print(f"updated {path.relative_to(args.root.resolve())}")
    print(f"build: {len(changed)} file(s) updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
