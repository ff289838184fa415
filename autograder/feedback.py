"""What the feedback pages add to nbgrader's: outputs that wrap instead of scrolling sideways.

nbgrader renders feedback with nbconvert's classic template, where an output is a ``<pre>``
(no wrapping) inside a box that scrolls horizontally: a long verdict line ("measured 1.4×
faster, need 3× ...") is cut off at the box's edge, and a student reading or printing the
page never sees its end. ``nbgrader_config.py`` adds :class:`WrapLongLines` to the feedback
preprocessors, so ``autograder feedback``, ``nbgrader generate_feedback`` and the formgrader
all produce pages that wrap.
"""

from __future__ import annotations

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

# Outputs (stdout, verdicts, tracebacks) keep their line breaks and indentation, and wrap at
# the page's edge between words (Bootstrap's `word-break: break-all` would split "torch" as
# "to|rch"); only a word longer than the line (a path, a long number) breaks inside.
WRAP_OUTPUT_CSS = """\
div.output_area pre, div.output_subarea pre {
    white-space: pre-wrap;
    word-break: normal;
    overflow-wrap: anywhere;
}"""


class WrapLongLines(Preprocessor):
    """Adds :data:`WRAP_OUTPUT_CSS` to the CSS nbgrader's feedback template inlines in the page's head.

    Runs after nbconvert's ``CSSHTMLHeaderPreprocessor``, which starts ``resources["inlining"]``.
    """

    enabled = Bool(True, help="on wherever it is listed (nbconvert's preprocessors are off by default)").tag(config=True)

    def preprocess(self, nb, resources):
        css = resources.setdefault("inlining", {}).setdefault("css", [])
        css.append(WRAP_OUTPUT_CSS)
        return nb, resources
