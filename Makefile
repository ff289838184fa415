# The course's commands. Each one creates .venv and installs what it needs first.
#   make lab    open the course in JupyterLab
#   make test   run every test (what CI runs)
#   make build  regenerate the notebooks and assignments/ from their .py sources
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: install lab test build lock clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10 or newer is needed (3.11 recommended); set PYTHON=/path/to/python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	@touch $(INSTALLED)

lab: $(INSTALLED)
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" course/01_gpu_basics.ipynb

test: $(INSTALLED)
	$(BIN)/python -m pytest

build: $(INSTALLED)
	$(BIN)/python -m autograder.build

# Re-pin constraints.txt to what is installed now (drop torch's local "+cpu" tag so the pin
# also matches CUDA builds).
lock: $(INSTALLED)
	{ head -n 2 constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | sed -E 's/^(torch==[0-9.]+)\+[a-z0-9]+$$/\1/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache
