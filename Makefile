# The course's commands. Each one creates .venv and installs what it needs first.
#   make lab    open the course in JupyterLab (students: without nbgrader's instructor UI)
#   make lab-instructor  the same with nbgrader's UI: Nbgrader menu (Formgrader), Create Assignment
#   make test   run every test (what CI runs)
#   make test-fast  the quick tier: no notebook runs, grading, kernels or browsers
#   make build  regenerate the notebooks and assignments/ from their .py sources
#   make bench-grading  time the grader per module (MODULES="01 06" COPIES=3): table in bench-grading.md
#   make classroom      JupyterHub for the course on this machine, as root (STUDENTS=2); make classroom-stop stops it
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: install lab lab-instructor test test-fast build bench-grading classroom classroom-stop lock clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10 or newer is needed (3.11 recommended); set PYTHON=/path/to/python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv where it can be had (parallel, about 40 s), else pip; byte-compiled either way (scripts/install_env.py).
	$(BIN)/python scripts/install_env.py --constraints constraints.txt ".[dev]"
	@touch $(INSTALLED)

# The commands live in autograder/lab.py: tests/course/test_browser.py starts the same ones, headless.
lab: $(INSTALLED)
	$(BIN)/python -m autograder.lab

lab-instructor: $(INSTALLED)
	$(BIN)/python -m autograder.lab --instructor

# Three workers on a 2-core machine: part of the suite waits (deadlines that stop hangs, kernels,
# a browser), and a third worker keeps the cores busy meanwhile. --dist loadscope keeps a module's
# (or class's) tests on one worker, so its module- and class-scoped fixtures (a graded assignment,
# an nbgrader round trip) run once.
test: $(INSTALLED)
	$(BIN)/python -m pytest -n 3 --dist loadscope --no-loadscope-reorder

# The quick tier: package, build, plan and protocol tests; no notebook, grading, kernel or browser.
test-fast: $(INSTALLED)
	$(BIN)/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder -m "not slow"

build: $(INSTALLED)
	$(BIN)/python -m autograder.build

# `autograder grade` on COPIES copies of each module's reference solution and of its release, with --jobs 1
# and 2 (scripts/bench_grading.py); MODULES empty: every module.
MODULES ?=
COPIES ?= 3
bench-grading: $(INSTALLED)
	$(BIN)/python scripts/bench_grading.py --copies $(COPIES) $(if $(strip $(MODULES)),--modules $(MODULES))

# JupyterHub, nbgrader's exchange and local users (autograder/classroom.py, docs/classroom.md); localhost only.
STUDENTS ?= 2
classroom: $(INSTALLED)
	$(BIN)/python -m autograder.classroom start --students $(STUDENTS)

classroom-stop: $(INSTALLED)
	$(BIN)/python -m autograder.classroom stop

# Re-pin constraints.txt to what is installed now (drop torch's local "+cpu" tag so the pin
# also matches CUDA builds).
lock: $(INSTALLED)
	{ head -n 2 constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | sed -E 's/^(torch==[0-9.]+)\+[a-z0-9]+$$/\1/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache
