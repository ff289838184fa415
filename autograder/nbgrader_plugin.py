"""An nbgrader preprocessor that records the trusted harness's verdicts instead of executing.

``autograder grade`` runs nbgrader's ``autograde`` with this preprocessor in place of
``Execute``: nbgrader keeps doing what it does well (gradebook rows, timestamps, late
penalties, the autograded copy that feedback is made from), while the scores come from
:mod:`autograder.harness`. Each test cell gets the *released* text of its test (so feedback
never shows hidden tests) and one output: the verdict, as an error when the item failed.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from traitlets import Bool, Unicode

from .outcomes import Outcome


class ApplyTrustedResults(Preprocessor):
    enabled = Bool(True)  # nbconvert's preprocessors are off unless enabled
    results_dir = Unicode(help="folder of <student>.json verdicts written by autograder.grading").tag(config=True)
    release_notebook = Unicode(help="the released notebook, source of the visible test text").tag(config=True)

    def preprocess(self, nb, resources):
        student = resources["nbgrader"]["student"]
        verdicts = json.loads((Path(self.results_dir) / f"{student}.json").read_text())
        released = _released_tests(self.release_notebook)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            grade_id = meta["grade_id"]
            cell.source = released.get(grade_id, "# (test hidden)")
            cell.outputs = [_verdict_output(verdicts["items"].get(grade_id), verdicts)]
            cell.execution_count = None
        return nb, resources


def _released_tests(path: str) -> dict[str, str]:
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    return {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade")}


def _verdict_output(item: dict | None, verdicts: dict):
    if item is None:
        return new_output("error", ename="NotGraded", evalue="this item was not graded", traceback=[])
    where = f"graded on {verdicts['device']} ({verdicts['device_class']})"
    outcome = Outcome(item["outcome"])
    if outcome == Outcome.PASSED:
        text = f"passed ({where})\n" + (item.get("output") or "")
        return new_output("stream", name="stdout", text=text)
    name = outcome.error_name
    evalue = f"{item['message']} [{where}]"
    return new_output("error", ename=name, evalue=evalue, traceback=[f"{name}: {evalue}"])
