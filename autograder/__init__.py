"""Instructor-side tooling: building the notebooks and the release, and grading with nbgrader."""
