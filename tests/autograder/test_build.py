"""The single-source rule: generated notebooks and the release match what the build makes."""

import re
import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autograder import build
from gpucourse.check import COURSE_FOLDERS
from untouched_release import STUB_MESSAGE, untouched_release_problems

GENERATED_INPUTS = ["course", "solutions", "assignments", "nbgrader_config.py"]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory, request):
    """A copy of the repository's sources, generated files included, with the build run on it once.

    The committed generated files came out of a build; so "the build changes nothing here"
    proves both that they are in sync with their sources and that the build is idempotent
    (a build run on its own output changes nothing). A second build would prove nothing more.
    """
    repo = request.config.rootpath
    copy = tmp_path_factory.mktemp("course")
    for name in GENERATED_INPUTS:
        source = repo / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, copy / name)
    return repo, copy, build.build(copy)


def _generated_files(root):
    notebooks = [p for p in list((root / "course").glob("*.ipynb")) + list((root / "solutions").glob("*/*.ipynb"))]
    return sorted(p.relative_to(root) for p in notebooks + [p for p in (root / "assignments").rglob("*") if p.is_file()])


def test_committed_generated_files_match_the_build_which_changes_nothing_on_its_own_output(rebuilt):
    repo, copy, changed = rebuilt
    assert changed == [], f"`make build` would change {[str(p.relative_to(copy)) for p in changed]}: run it and commit"
    assert _generated_files(repo) == _generated_files(copy)


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
            if cell.cell_type != "code":
                continue
            for body in re.findall(r"### BEGIN SOLUTION(.*?)### END SOLUTION", cell.source, flags=re.S):  # every block of the cell
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
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    code = re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION", "", code, flags=re.S)
    return re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", code, flags=re.S)


# --- Cell tags, and graded cells that use a GPU ----------------------------------------------------

GRADED = '# %% nbgrader={"grade_id": "test_it", "grade": true, "points": 1}'
GRADED_GPU = GRADED + ' tags=["requires-gpu"]'
SETUP = '# %% nbgrader={"grade_id": "setup", "locked": true}\nimport torch\nfrom gpucourse import kernels\n'


def _build_cells(tmp_path, *cells):
    """Build a py:percent source made of ``cells``; return it and the path it was read from."""
    source = tmp_path / "01_x.py"
    source.write_text("\n\n".join(cells) + "\n")
    return build.notebook_from_source(source), source


def _build_error(tmp_path, *cells) -> str:
    with pytest.raises(build.BuildError) as error:
        _build_cells(tmp_path, *cells)
    return str(error.value)


@pytest.mark.parametrize(
    "code, found",
    [
        ('x = 1\nassert x\nif kernels.gpu_or_explain("it is faster"):\n    pass', "calls gpu_or_explain on line 3 of the cell"),
        ('if gpu_or_explain("it is faster"):\n    pass', "calls gpu_or_explain on line 1 of the cell"),
        ("if torch.cuda.is_available():\n    pass", "uses torch.cuda on line 1 of the cell"),
        ("start = torch.cuda.Event(enable_timing=True)", "uses torch.cuda on line 1 of the cell"),
        ("from torch import cuda", "imports torch.cuda on line 1 of the cell"),
        ("x = torch.ones(3).cuda()", "calls .cuda() on line 1 of the cell"),
        ('x = torch.ones(3, device="cuda")', "passes 'cuda' to a call on line 1 of the cell"),
        ('dev = torch.device("cuda:1")', "passes 'cuda:1' to a call on line 1 of the cell"),
        ('x = torch.ones(3).to("cuda")', "passes 'cuda' to a call on line 1 of the cell"),
        ('SPEEDUP_NEEDED = {"cuda": 10.0}', "has a dict key 'cuda' without a 'cpu' one on line 1 of the cell"),
        ('settings = {"device": "cuda"}', "has a dict value 'cuda' on line 1 of the cell"),
    ],
)
def test_graded_cell_using_a_gpu_needs_the_requires_gpu_tag(tmp_path, code, found):
    message = _build_error(tmp_path, SETUP, f"{GRADED}\n{code}")
    for fragment in (
        f"{tmp_path / '01_x.py'}, cell 2: graded test cell 'test_it' uses a GPU",
        found,
        "but has no 'requires-gpu' tag",
        'add tags=["requires-gpu"] to its # %% header',
    ):
        assert fragment in message


def test_every_gpu_use_of_a_cell_is_listed(tmp_path):
    message = _build_error(tmp_path, f'{GRADED}\nx = torch.ones(2).cuda()\nif kernels.gpu_or_explain("faster"):\n    y = x.to("cuda:0")')
    assert "(calls .cuda() on line 1 of the cell; calls gpu_or_explain on line 2 of the cell; passes 'cuda:0' to a call on line 3 of the cell)" in message


def test_graded_cell_tagged_requires_gpu_builds(tmp_path):
    notebook, _ = _build_cells(
        tmp_path, SETUP, f'{GRADED_GPU}\nSPEEDUP_NEEDED = {{"cuda": 1.5}}\nif kernels.gpu_or_explain("faster"):\n    x = torch.ones(3, device="cuda")')
    assert notebook.cells[1].metadata["tags"] == ["requires-gpu"]


def test_per_device_dict_is_not_gpu_use(tmp_path):
    notebook, _ = _build_cells(tmp_path, f'{GRADED}\nSPEEDUP_NEEDED = {{"cpu": 4.0, "cuda": 10.0}}\nassert check.required_speedup(SPEEDUP_NEEDED) > 1')
    assert "tags" not in notebook.cells[0].metadata
    assert build.gpu_uses('SIZES = {"cuda": 8192, "cpu": 512}') == []
    assert build.gpu_uses('ONLY_GPU = {"cuda": 8192, "gpu": 512}') == ["has a dict key 'cuda' without a 'cpu' one on line 1 of the cell"]


def test_comments_docstrings_and_names_do_not_count_as_gpu_use(tmp_path):
    code = '''"""On a GPU (torch.cuda, device="cuda") this would call gpu_or_explain; here it does not."""
# if torch.cuda.is_available(): x.cuda(); torch.device("cuda")
per_device(cpu=512, cuda=8192)  # keyword names are not strings
message = "cuda"  # a string, but not a call's argument
assert cuda_count == 0
'''
    _build_cells(tmp_path, f"{GRADED}\n{code}")
    assert build.gpu_uses(code) == []


def test_gpu_use_outside_graded_test_cells_needs_no_tag(tmp_path):
    _build_cells(
        tmp_path,
        '# %% nbgrader={"grade_id": "setup", "locked": true}\nDEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
        '# %% nbgrader={"grade_id": "answer", "solution": true}\ndef f(x):\n    return x.cuda()',
        '# %%\nif kernels.gpu_or_explain("faster"):\n    pass',
    )


def test_ipython_syntax_in_a_graded_cell_is_read(tmp_path):
    assert build.gpu_uses('%time y = 1\n!nvidia-smi\nx = torch.ones(1, device="cuda")') == ["passes 'cuda' to a call on line 3 of the cell"]


def test_unknown_tag_is_rejected(tmp_path):
    message = _build_error(tmp_path, "# %% [markdown]\n# Intro", '# %% tags=["requires_gpu"]\nx = 1')
    assert f"{tmp_path / '01_x.py'}, cell 2: unknown tag 'requires_gpu'; the known tags are ['grader-side', 'requires-gpu']" in message


@pytest.mark.parametrize("header", ['# %% tags=["grader-side"]', '# %% nbgrader={"grade_id": "answer", "solution": true} tags=["grader-side"]',
                                    '# %% nbgrader={"grade_id": "test_x", "grade": true, "points": 1} tags=["grader-side"]'])
def test_grader_side_is_only_for_locked_setup_cells(tmp_path, header):
    # an untagged plain cell counts as setup too, but it runs in the student's worker: the tag is for nbgrader's locked cells
    message = _build_error(tmp_path, "# %% [markdown]\n# Intro", f"{header}\nx = 1")
    assert "tag 'grader-side' is only for locked setup cells" in message, message


def test_an_answer_may_not_use_what_a_grader_side_cell_defines(tmp_path):
    message = _build_error(tmp_path, '# %% nbgrader={"grade_id": "refs", "locked": true} tags=["grader-side"]\ndef reference(x):\n    return x',
                           '# %% nbgrader={"grade_id": "answer", "solution": true}\ndef f(x):\n    return reference(x)')
    assert "the answer uses reference, which a 'grader-side' cell defines (cell 1)" in message, message


@pytest.mark.parametrize(
    "header",
    [
        '# %% tags=["requires-gpu"]',
        '# %% [markdown] tags=["requires-gpu"]',
        '# %% nbgrader={"grade_id": "answer", "solution": true} tags=["requires-gpu"]',
        '# %% nbgrader={"grade_id": "essay", "solution": true, "grade": true, "points": 1} tags=["requires-gpu"]',
        '# %% nbgrader={"grade_id": "helpers", "locked": true} tags=["requires-gpu"]',
    ],
)
def test_requires_gpu_outside_a_graded_test_cell_is_rejected(tmp_path, header):
    message = _build_error(tmp_path, SETUP, f"{header}\nx = 1")
    assert f"{tmp_path / '01_x.py'}, cell 2: tag 'requires-gpu' is only for graded test cells (nbgrader grade: true, not a solution)" in message
    assert "it means nothing on this cell: remove it" in message


# --- Every generated notebook names its source -----------------------------------------------------


def test_generated_notebook_names_its_source_relative_to_the_root(tmp_path):
    source = tmp_path / "solutions" / "01_x" / "01_x.py"
    source.parent.mkdir(parents=True)
    source.write_text("# %%\nx = 1\n")
    notebook = build.notebook_from_source(source, tmp_path)
    assert notebook.metadata["gpucourse"] == {"source": "solutions/01_x/01_x.py", "generated": "do not edit: run make build"}
    assert build.notebook_from_source(source).metadata["gpucourse"]["source"] == "01_x.py"  # outside the repository, no root
    with pytest.raises(build.BuildError, match="is not inside the course root"):
        build.notebook_from_source(source, tmp_path / "elsewhere")


def test_every_committed_notebook_names_its_existing_source(repo_root):
    notebooks = sorted(repo_root.glob("course/*.ipynb")) + sorted(repo_root.glob("solutions/*/*.ipynb")) + sorted(repo_root.glob("assignments/*/*.ipynb"))
    assert len(notebooks) >= 3 * len(build.assignment_sources(repo_root))
    for path in notebooks:
        relative = path.relative_to(repo_root)
        named = nbformat.read(path, as_version=4).metadata.get("gpucourse", {})
        expected = relative.with_suffix(".py") if relative.parts[0] != "assignments" else ("solutions" / relative.relative_to("assignments")).with_suffix(".py")
        assert named.get("source") == expected.as_posix(), f"{relative} should name its source {expected.as_posix()}, names {named.get('source')!r}"
        assert (repo_root / named["source"]).is_file(), f"{relative} names {named['source']}, which does not exist"
        if relative.parts[0] == "assignments":  # students get these: the note addresses the staff
            assert named["generated"].startswith(f"generated from {named['source']} by make build"), named
        else:
            assert named["generated"] == "do not edit: run make build", named


def test_a_speed_item_must_check_its_timed_outputs(tmp_path):
    """compare_speed without check= in a graded cell: the outputs would never be checked, so code that skips
    the work at the timed size would pass. The build refuses it; with check= it builds."""
    unchecked = f"{GRADED}\nresult = timing.compare_speed(slow, fast, make_inputs)"
    message = _build_error(tmp_path, SETUP, unchecked)
    assert "cell 2: compare_speed on line 1 has no check=" in message and "every timed output must be checked" in message
    (tmp_path / "ok").mkdir()
    notebook, _ = _build_cells(tmp_path / "ok", SETUP, f"{GRADED}\nresult = timing.compare_speed(slow, fast, make_inputs, check=verify)")
    assert "check=verify" in notebook.cells[1].source


# --- Stubs: what an untouched release defines, and what it says ------------------------------------

ANSWER = '# %% nbgrader={"grade_id": "answer", "solution": true}'
USES_F = '# %% nbgrader={"grade_id": "test_f", "grade": true, "points": 1}\nassert f(2) == 4'


def test_every_answer_a_test_uses_is_released_as_a_stub_that_names_its_question(repo_root):
    """Each test's answers are defined in the release (no NameError), by functions whose stub names them and their question."""
    for source in build.assignment_sources(repo_root):
        released = nbformat.read(repo_root / "assignments" / source.parent.name / source.with_suffix(".ipynb").name, as_version=4)
        stubs = [line.strip() for cell in released.cells if build.is_solution(cell) and cell.cell_type == "code"
                 for line in cell.source.splitlines() if "raise NotImplementedError" in line]
        assert stubs, f"{source.parent.name}: no stub in the release"
        for stub in stubs:
            message = re.fullmatch(r'raise NotImplementedError\("(.*)"\)', stub)
            assert message and STUB_MESSAGE.match(message[1]), f"{source.parent.name}: {stub}"


@pytest.mark.parametrize("answer", [
    "def f(x):\n    ### BEGIN SOLUTION\n    return x * x\n    ### END SOLUTION",  # the usual: the block in the body
    "### BEGIN SOLUTION\n@decorate\n### END SOLUTION\ndef f(x):\n    ### BEGIN SOLUTION\n    return x * x\n    ### END SOLUTION",
    "### BEGIN SOLUTION\ndef square(x):\n    return x * x\n### END SOLUTION\n\n\ndef f(x):\n    ### BEGIN SOLUTION\n    return square(x)\n"
    "    ### END SOLUTION",  # a helper: a whole top-level block
    "class F:\n    def __call__(self, x):\n        ### BEGIN SOLUTION\n        return x * x\n        ### END SOLUTION\n\n\nf = F()",
])
def test_an_answer_whose_release_defines_what_the_tests_use_builds(tmp_path, answer):
    notebook, _ = _build_cells(tmp_path, f"{ANSWER}\n{answer}", USES_F)
    assert "f" in build.defined_names(build.released_code(notebook.cells[0].source))


@pytest.mark.parametrize("answer, found", [
    ("### BEGIN SOLUTION\ndef f(x):\n    return x * x\n### END SOLUTION", "would not define f, which the other cells use"),
    ("### BEGIN SOLUTION\n@decorate\ndef f(x):\n    return x * x\n### END SOLUTION", "would not define f"),
    ("class F:\n    ### BEGIN SOLUTION\n    scale = 2\n    ### END SOLUTION", "lies in a class body or a top-level if/for/with"),
    ("if True:\n    ### BEGIN SOLUTION\n    f = abs\n    ### END SOLUTION", "lies in a class body or a top-level if/for/with"),
])
def test_an_answer_released_as_a_bare_raise_is_refused(tmp_path, answer, found):
    """Released, such a cell would stop at its stub before defining f: every test using f would fail with a NameError."""
    message = _build_error(tmp_path, f"{ANSWER}\n{answer}", USES_F)
    assert "cell 1 (answer 'answer')" in message and found in message, message


def _released(*cells):
    """A release as nbgrader leaves it: markdown and (grade_id, code) cells, each solution block replaced by its stub."""
    notebook = new_notebook()
    for cell in cells:
        if isinstance(cell, str):
            notebook.cells.append(new_markdown_cell(cell))
        else:
            meta = {"grade_id": cell[0], "solution": True, "grade": False, "locked": False, "checksum": "nbgrader's"}
            code = re.sub(r"^([ \t]*)" + re.escape(build.STUB_RAISE), lambda stub: f"{stub[1]}# YOUR CODE HERE\n{stub[0]}",
                          build.released_code(cell[1]), flags=re.M)
            notebook.cells.append(new_code_cell(code, metadata={"nbgrader": meta}))
    return notebook


def test_name_stubs_names_the_function_and_its_question_and_drops_top_level_stubs():
    notebook = _released("## Question 2: squares", ("answer", "### BEGIN SOLUTION\nHELPER = 1\n### END SOLUTION\n\n\nclass Squares:\n"
                                                                "    def __init__(self):\n        ### BEGIN SOLUTION\n        pass\n        ### END SOLUTION"),
                         "## Part B", ("other", "def g():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"))
    build.name_stubs(notebook)
    first, second = notebook.cells[1], notebook.cells[3]
    assert first.source == ('class Squares:\n    def __init__(self):\n        # YOUR CODE HERE\n        raise NotImplementedError('
                            '"Squares is not written yet (Question 2): replace this line with your solution")')
    assert STUB_MESSAGE.match(build.stub_message("Squares", "Question 2"))
    assert second.source.endswith('raise NotImplementedError("g is not written yet: replace this line with your solution")')  # no question
    from nbgrader.utils import compute_checksum

    assert first.metadata.nbgrader["checksum"] == compute_checksum(first)


def _executed(*cells):
    """An executed release: markdown, and (grade_id or None, is_test, source, outputs) code cells."""
    notebook = new_notebook()
    for cell in cells:
        if isinstance(cell, str):
            notebook.cells.append(new_markdown_cell(cell))
            continue
        grade_id, test, code, outputs = cell
        meta = {"nbgrader": {"grade_id": grade_id, "grade": test, "solution": not test, "points": 1}} if grade_id else {}
        notebook.cells.append(new_code_cell(code, metadata=meta, outputs=outputs))
    return notebook


def _error(ename, evalue, *frames):
    return new_output("error", ename=ename, evalue=evalue, traceback=["-" * 20, "Cell In[3], line 1\n----> 1 f(2)", *frames])


STUB_ERROR = _error("NotImplementedError", "f is not written yet (Question 1): replace this line with your solution",
                    "Cell In[2], line 3, in f(x)\n----> 3     raise NotImplementedError(...)")


@pytest.mark.parametrize("test_outputs, answer_outputs, found", [
    ([STUB_ERROR], [], None),
    ([_error("NameError", "name 'f' is not defined")], [], "raised NameError: name 'f' is not defined (not a stub's message)"),
    ([], [], "test_f: passed, untouched"),
    ([STUB_ERROR], [_error("NotImplementedError", "replace this line with your solution")], "in a cell that is no test"),
    ([_error("NotImplementedError", "f is not written yet (Question 1): replace this line with your solution",
             f"File {COURSE_FOLDERS[0]}check.py:12, in answers_only()", "File /work/lib/torch/nn.py:3, in f()")], [], "gpucourse/check.py"),
    ([_error("NotImplementedError", "f is not written yet (Question 2): replace this line with your solution")], [], "a question after"),
    ([new_output("error", ename="NotImplementedError", evalue=STUB_ERROR.evalue, traceback=["Cell In[3], line 2\n      1 f(2)\n----> 2 hidden()"])], [],
     "raised at 'hidden()', not a line of the cell as released"),
])
def test_untouched_release_problems_finds_each_kind(test_outputs, answer_outputs, found):
    executed = _executed("## Question 1: f", ("answer", False, "def f(x):\n    raise NotImplementedError(...)", answer_outputs),
                         ("test_f", True, "f(2)\nhidden()", test_outputs))
    release = _executed("## Question 1: f", ("test_f", True, "f(2)", []))
    problems = untouched_release_problems(executed, release)
    if found is None:
        assert problems == []
    else:
        assert any(found in problem for problem in problems), problems
