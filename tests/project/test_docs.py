"""The docs under docs/: lines short enough to diff, an authoring guide a newcomer reads in 15 minutes, no stale paths.

Every file or folder of the repository that a doc names in backticks (inline, or on a line of a fenced block)
must exist, so a move or a rename that forgets the docs fails here. Placeholders stand for any module:
``NN_topic`` and ``NN`` for a module's stem and number, ``<name>`` and ``*`` for any part of a name.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINE = 160  # ruff's limit for code, so prose and code wrap alike
MAX_WORDS = 4000  # about 15 minutes of reading
TOP_FOLDERS = ("autograder", "gpucourse", "tests", "scripts", "docs", "course", "solutions", "assignments", ".ci")
# The worked example of docs/authoring.md's "How to add a gate": a gate that does not exist, on purpose.

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"(?<![\w./~<>-])((?:%s)/[\w./<>*-]*)" % "|".join(re.escape(folder) for folder in TOP_FOLDERS))


def repository_paths(text: str) -> set[str]:
    """The repository paths ``text`` names: backticked spans that are a path, and paths on the lines of fenced blocks."""
    fenced = FENCE.findall(text)
    paths = set()
    for span in INLINE.findall(FENCE.sub("", text)):
        span = span.split("::")[0].strip()
        if PATH.fullmatch(span):
            paths.add(span)
    for block in fenced:
        paths.update(match.group(1).rstrip(".") for match in PATH.finditer(block))
    return paths


def exists(path: str) -> bool:
    """Whether ``path`` (placeholders allowed) names at least one file or folder of the repository."""
    pattern = re.sub(r"<[^>]*>", "*", path.rstrip("/"))
    pattern = pattern.replace("NN_topic", "[0-9][0-9]_*").replace("NN", "[0-9][0-9]")
    if not any(character in pattern for character in "*[?"):
        return (ROOT / pattern).exists()
    return any(ROOT.glob(pattern))


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_line_is_at_most_160_characters(doc):
    """Every line of the doc, code blocks and tables included, fits in 160 characters."""
    long = [(number, len(line)) for number, line in enumerate(doc.read_text().splitlines(), 1) if len(line) > MAX_LINE]
    assert not long, f"{doc.name}: lines over {MAX_LINE} characters (line, length): {long}; wrap them (one sentence per line, wrapped)"


def test_the_authoring_guide_is_at_most_4000_words():
    """docs/authoring.md is a reference a newcomer reads in 15 minutes: at most 4,000 words (as `wc -w` counts them)."""
    words = len((ROOT / "docs" / "authoring.md").read_text().split())
    assert words <= MAX_WORDS, f"docs/authoring.md has {words} words, more than {MAX_WORDS}: state the rule, not the story"


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_repository_path_named_exists(doc):
    """Every repository path the doc names in backticks exists."""
    named = repository_paths(doc.read_text())
    missing = sorted(path for path in named if not exists(path))
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def test_the_path_finder_sees_what_a_doc_names():
    """The checks above see inline paths, paths in fenced blocks and placeholders, and nothing that is not a path."""
    text = ("Run `scripts/gpu_check.sh`, read `tests/test_x.py::TestY`, edit `course/NN_topic.py`; not `gpucourse.check` nor `/tmp/tests/x`.\n"
            "```bash\npython scripts/ci_profile/cpu_by_test.py report /tmp/prof\n```\n")
    assert repository_paths(text) == {"scripts/gpu_check.sh", "tests/test_x.py", "course/NN_topic.py", "scripts/ci_profile/cpu_by_test.py"}
    assert exists("course/NN_topic.py") and exists("solutions/NN_topic/") and exists("scripts/ci_profile/")
    assert not exists("course/NN_no_such_topic.py") and not exists("autograder/no_such_module.py")


def _autograded_points(notebook: Path) -> tuple[int, int]:
    """(points, points of the items tagged requires-gpu) of a notebook's autograded code cells."""
    import json

    total = gpu = 0
    for cell in json.loads(notebook.read_text())["cells"]:
        grading = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and grading.get("grade"):
            total += grading.get("points", 0)
            gpu += grading.get("points", 0) if "requires-gpu" in cell["metadata"].get("tags", []) else 0
    return total, gpu


def test_the_module_map_has_every_module_with_its_points():
    """docs/module-map.md has one entry per assignment, in order, each with the points its reference notebook grades."""
    entries = re.findall(r"^## (\d\d): (\d+) points, (\d+) of them on a GPU$", (ROOT / "docs" / "module-map.md").read_text(), re.M)
    notebooks = sorted(ROOT.glob("solutions/[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    assert [number for number, _, _ in entries] == [notebook.parent.name[:2] for notebook in notebooks], "one entry per module, in order"
    for (number, total, gpu), notebook in zip(entries, notebooks):
        assert (int(total), int(gpu)) == _autograded_points(notebook), f"module {number}: its entry's points are not its notebook's"
