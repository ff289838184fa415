"""The single-source rule: generated notebooks and the release match what the build makes."""

import shutil

import nbformat
import pytest

from autograder import build

GENERATED_INPUTS = ["course", "solutions", "assignments", "nbgrader_config.py"]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory, request):
    """A copy of the repository's sources with the build run on it twice."""
    repo = request.config.rootpath
    copy = tmp_path_factory.mktemp("course")
    for name in GENERATED_INPUTS:
        source = repo / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, copy / name)
    first = build.build(copy)
    second = build.build(copy)
    return repo, copy, first, second


def _generated_files(root):
    notebooks = [p for p in list((root / "course").glob("*.ipynb")) + list((root / "solutions").glob("*/*.ipynb"))]
    return sorted(p.relative_to(root) for p in notebooks + [p for p in (root / "assignments").rglob("*") if p.is_file()])


def test_committed_generated_files_match_the_build(rebuilt):
    repo, copy, changed, _ = rebuilt
    assert changed == [], f"`make build` would change {[str(p.relative_to(copy)) for p in changed]}: run it and commit"
    assert _generated_files(repo) == _generated_files(copy)


def test_build_is_idempotent(rebuilt):
    _, _, _, second = rebuilt
    assert second == []


def test_every_source_has_its_notebook(repo_root):
    for source in build.lecture_sources(repo_root) + build.assignment_sources(repo_root):
        assert source.with_suffix(".ipynb").exists(), f"{source} has no generated notebook"


def test_generated_notebooks_have_no_outputs_and_stable_ids(repo_root):
    for path in repo_root.glob("course/*.ipynb"):
        notebook = nbformat.read(path, as_version=4)
        ids = [cell.id for cell in notebook.cells]
        assert len(ids) == len(set(ids))
        assert all(cell.get("outputs", []) == [] and cell.get("execution_count") is None for cell in notebook.cells if cell.cell_type == "code")


def test_release_holds_no_solution_code_hidden_tests_or_sources(repo_root):
    for folder in build.assignment_sources(repo_root):
        release = repo_root / "assignments" / folder.parent.name
        assert not list(release.glob("*.py")), "the release must not contain the jupytext source"
        text = (release / f"{folder.stem}.ipynb").read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "clamp_min_"):
            assert marker not in text, f"{marker!r} leaked into the release"
        assert "raise NotImplementedError" in text


def test_every_code_solution_line_is_gone_from_the_release(repo_root):
    for source in build.assignment_sources(repo_root):
        solution = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
        released = nbformat.read(repo_root / "assignments" / source.parent.name / source.with_suffix(".ipynb").name, as_version=4)
        released_sources = "\n".join(cell.source for cell in released.cells if cell.cell_type == "code")
        given = {line.strip() for line in _outside_solutions(solution).splitlines()}  # code the students are given
        for cell in solution.cells:
            if cell.cell_type != "code" or "### BEGIN SOLUTION" not in cell.source:
                continue
            body = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            for line in filter(None, (line.strip() for line in body.splitlines())):
                if len(line) > 12 and line not in given:  # short lines such as "return n" can legitimately recur
                    assert line not in released_sources, f"solution line {line!r} is in the release"


@pytest.mark.parametrize(
    "given, expected",
    [
        ({"grade_id": "answer", "solution": True}, {"grade": False, "locked": False, "solution": True}),
        ({"grade_id": "test_answer", "grade": True, "points": 2}, {"grade": True, "locked": True, "points": 2}),
        ({"grade_id": "essay", "solution": True, "grade": True, "points": 1}, {"grade": True, "locked": False, "solution": True}),
        ({"grade_id": "setup", "locked": True}, {"grade": False, "locked": True, "solution": False}),
    ],
)
def test_nbgrader_metadata_is_completed(given, expected):
    meta = build.nbgrader_metadata(given, "here")
    assert meta["schema_version"] == 3 and meta["task"] is False and meta["grade_id"] == given["grade_id"]
    assert {key: meta[key] for key in expected} == expected


@pytest.mark.parametrize(
    "given, message",
    [({"solution": True}, "need a grade_id"), ({"grade_id": "t", "grade": True}, "needs points"), ({"grade_id": "t", "pts": 1}, "unknown nbgrader keys")],
)
def test_nbgrader_metadata_mistakes_are_reported(given, message):
    with pytest.raises(build.BuildError, match=message):
        build.nbgrader_metadata(given, "here")


def test_duplicate_grade_ids_are_rejected(tmp_path):
    source = tmp_path / "01_x.py"
    source.write_text('# %% nbgrader={"grade_id": "a", "solution": true}\nx = 1\n\n# %% nbgrader={"grade_id": "a", "solution": true}\ny = 2\n')
    with pytest.raises(build.BuildError, match="grade_id 'a' is used twice"):
        build.notebook_from_source(source)


def _outside_solutions(notebook) -> str:
    """The source notebook's code with every solution block and hidden-test block cut out."""
    import re

    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    code = re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION", "", code, flags=re.S)
    return re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", code, flags=re.S)
