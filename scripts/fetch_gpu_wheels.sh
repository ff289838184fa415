#!/usr/bin/env bash
# Download, into .whl/, the wheels that scripts/gpu_check.sh needs on a GPU machine whose
# Python (3.12 by default) has torch, numpy, matplotlib and pytest but no Jupyter stack.
# Run on a machine with internet; then carry .whl/ to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-3.12}
mkdir -p .whl
# Resolve the Jupyter/nbgrader stack for that Python, pinned by constraints.txt where it can.
grep -vE '^(torch|numpy|matplotlib|pytest|pluggy|iniconfig|packaging|sympy|mpmath|networkx|filelock|fsspec|jinja2|Jinja2|MarkupSafe|typing_extensions|pillow|contourpy|cycler|fonttools|kiwisolver|pyparsing|python-dateutil|six|setuptools)==' constraints.txt | grep -v '^#' > /tmp/gpu-wheels.txt
python3 -m pip download --only-binary=:all: --no-deps --python-version "$version" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d .whl -r /tmp/gpu-wheels.txt
du -sh .whl
