"""Mutation testing of harness/core/ and methods/: do the fast tests fail when the code is wrong?

    .venv/bin/python benchmarks/mutation.py --modules stats --jobs 2          # scoring, bootstrap, significance
    .venv/bin/python benchmarks/mutation.py --modules methods/whitening.py    # one module
    .venv/bin/python benchmarks/mutation.py --modules core --sample 40        # 40 mutants drawn per module
    .venv/bin/python benchmarks/mutation.py --modules flow --list             # the mutants; nothing runs
    .venv/bin/python benchmarks/mutation.py --modules stats --survivors       # the recorded survivors again
    .venv/bin/python benchmarks/mutation.py --report                          # docs/mutation.md from the json

Each mutant is one small change of one module, the kind a plausible bug makes: an arithmetic
operator swapped (``+``/``-``, ``*``/``/``, ``//``→``/``, ``%``→``//``, ``**``→``*``), a comparison
moved by one (``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``is``/``is not``, ``in``/``not in``),
``and``/``or`` swapped, a ``not`` or unary minus dropped, a number plus one, ``True``/``False``
swapped. Strings, docstrings, annotations, decorators, ``TYPE_CHECKING`` blocks, logging calls and
lines marked ``# pragma: no mutate`` are left alone. A mutant is applied to a copy of the tree
(``git ls-files``, untracked files included) under a temporary folder, never to this checkout.

Only the tests that can see a mutant run: the module's fast tests (``TESTS`` below, always with
``-m "not slow and not real"``) run once unmutated with a line tracer, which records which test
executed which line of which module; a mutant then runs, fastest first and stopping at the first
failure (``-x``), only the tests that executed its lines (module-level code, defaults and class
bodies run at import, and a test can read them without running a line of the module: all of the
module's tests). A mutant no test executed is reported
as "no coverage" without running. A test that sets a tracer of its own (``sys.settrace``) must
call the one it finds (``sys.gettrace()``) and put it back, or the lines it runs meanwhile are not
seen (tests/test_oracles_stats.py's ``betacf_events`` does); the tracer is re-installed at each
test's start in any case. A failing test, a collection error or a timeout (3x the tests'
baseline time plus start-up) kills a mutant; ``--confirm`` re-runs each survivor with all of the
module's tests.

Results are kept per module in ``docs/mutation.json`` (a run of some modules updates theirs) and
``docs/mutation.md`` is regenerated between its ``mutation-results`` markers; the rest of that
file is written by hand, and its "Equivalent mutants" table (ids in backticks in the first column)
marks survivors argued to behave exactly like the original.

Why not mutmut: mutmut 3 (``pip install mutmut`` into .venv) reads its settings from
pyproject.toml or setup.cfg, which are not this script's to change, mutates strings (error
messages: hundreds of survivors that say nothing about the tests), and runs its own test selection
over the whole suite, ~10 minutes here. This runner needs nothing beyond pytest.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import contextlib
import copy
import json
import os
import platform
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "mutation.md"
RESULTS = ROOT / "docs" / "mutation.json"
BEGIN, END = "<!-- mutation-results:begin -->", "<!-- mutation-results:end -->"
MARKER = "-m", "not slow and not real"

# The fast tests of each module (files or node ids), run in this process's pytest: tests that run
# the harness in a subprocess would not be traced.
STATS = ("tests/test_scoring.py", "tests/test_oracles_stats.py", "tests/test_doctests.py",
         "tests/test_warm_path.py::test_resampled_scores_are_memoised_in_memory_and_on_disk",
         "tests/test_protocols.py::test_paired_bootstrap_and_williams_on_known_cases",
         "tests/test_protocols.py::test_student_t_tail_matches_scipy_without_importing_it")
METHODS = ("tests/test_oracles.py", "tests/test_methods_direct.py", "tests/test_doctests.py")
FLOW = (*METHODS, "tests/test_flow.py", "tests/test_oracles_flow.py", "tests/test_oracles_glow.py")
ENCODING = (*METHODS, "tests/test_backbone.py", "tests/test_cache.py", "tests/test_kernels.py")
DATA = ("tests/test_sources.py", "tests/test_mteb.py", "tests/test_registry.py", "tests/test_methods_direct.py",
        "tests/test_doctests.py")
TESTS: dict[str, tuple[str, ...]] = {
    "harness/core/scoring.py": STATS,
    "harness/core/bootstrap.py": STATS,
    "harness/core/significance.py": STATS,
    "harness/core/encoding/pooling.py": (*METHODS, "tests/test_simcse.py", "tests/test_backbone.py"),
    "methods/pooling.py": (*METHODS, "tests/test_protocols.py::test_transductive_fit_sets_are_recorded_and_marked"),
    "methods/whitening.py": (*METHODS, "tests/test_whitening.py",
                             "tests/test_warm_path.py::test_whitening_fit_is_read_back_from_the_cache"),
    "methods/flow.py": FLOW,
    "methods/training/flow_fit.py": FLOW,
    "methods/training/glow.py": FLOW,
    "methods/cross_encoder.py": (*METHODS, "tests/test_dse.py"),
    "methods/dse.py": (*METHODS, "tests/test_dse.py"),
    "methods/training/pair_training.py": (*METHODS, "tests/test_dse.py"),
    "methods/simcse.py": (*METHODS, "tests/test_simcse.py"),
    "methods/simcse_train.py": (*METHODS, "tests/test_simcse.py"),
    "methods/training/simcse_loop.py": (*METHODS, "tests/test_simcse.py"),
    "methods/training/loop.py": (*METHODS, "tests/test_simcse.py", "tests/test_dse.py"),
    "methods/training/select.py": (*METHODS, "tests/test_simcse.py", "tests/test_dse.py"),
    "methods/sbert.py": (*METHODS, "tests/test_backbone.py"),
    "methods/random_baseline.py": METHODS,
    "methods/trained.py": (*METHODS, "tests/test_flow.py"),
    "methods/__init__.py": (*METHODS, "tests/test_registry.py"),
    "harness/core/api.py": (*METHODS, "tests/test_registry.py"),
    "harness/core/artifacts.py": ("tests/test_cache.py", "tests/test_faults_artifacts.py", "tests/test_codekeys.py"),
    "harness/core/codekeys.py": ("tests/test_codekeys.py", "tests/test_cache.py"),
    "harness/core/cost_model.py": ("tests/test_dse.py",),
    "harness/core/errors.py": ("tests/test_faults.py",),
    "harness/core/hashing.py": ("tests/test_cache.py", "tests/test_faults_artifacts.py", "tests/test_doctests.py"),
    "harness/core/hub.py": ("tests/test_backbone.py", "tests/test_mteb.py", "tests/test_faults.py"),
    "harness/core/data/": DATA,
    "harness/core/encoding/": ENCODING,
}
# Left out of the per-mutant runs unless --with-slow: ~100 s each on the 2 shared cores this was
# written on (3 epochs of a flow fit on 3,000-4,000 vectors), so every surviving flow mutant would cost
# minutes. Cheaper oracles in tests/test_oracles_flow.py check the fit loop instead.
SLOW = ("tests/test_flow.py::test_fitting_lowers_the_nll_and_makes_the_latent_isotropic",
        "tests/test_flow.py::test_flow_and_whitening_recover_similarity_that_raw_cosine_misses")
GROUPS = {
    "stats": ("harness/core/scoring.py", "harness/core/bootstrap.py", "harness/core/significance.py"),
    "pooling": ("harness/core/encoding/pooling.py", "methods/pooling.py"),
    "whitening": ("methods/whitening.py",),
    "flow": ("methods/flow.py", "methods/training/flow_fit.py", "methods/training/glow.py"),
    "pairs": ("methods/cross_encoder.py", "methods/dse.py", "methods/training/pair_training.py", "methods/simcse.py"),
}
GROUPS["focus"] = GROUPS["stats"] + GROUPS["pooling"] + GROUPS["whitening"] + GROUPS["flow"]
SCOPE = ("harness/core", "methods")


EXCLUDED: list[str] = []  # --exclude: test targets left out (to measure what some tests add)


def tests_of(module: str) -> tuple[str, ...]:
    """The module's entry in TESTS, or that of the closest folder above it, less ``--exclude``."""
    if module in TESTS:
        targets = TESTS[module]
    else:
        folders = [key for key in TESTS if key.endswith("/") and module.startswith(key)]
        if not folders:
            raise SystemExit(f"mutation: no tests mapped for {module}; add it to TESTS in {Path(__file__).name}")
        targets = TESTS[max(folders, key=len)]
    return tuple(t for t in targets if not any(t == e or t.startswith(e + "::") for e in EXCLUDED))


def deselected() -> list[str]:
    """pytest arguments that leave out EXCLUDED node ids inside mapped files (and SLOW ones)."""
    return [arg for e in EXCLUDED if "::" in e for arg in ("--deselect", e)]


def modules_in_scope() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for folder in SCOPE for p in (ROOT / folder).rglob("*.py"))


def resolve_modules(names: list[str]) -> list[str]:
    scope = modules_in_scope()
    out: list[str] = []
    for name in names:
        if name in GROUPS:
            out += GROUPS[name]
        elif name in ("all", "core", "methods"):
            out += [m for m in scope if name == "all" or m.startswith({"core": "harness/core/"}.get(name, "methods/"))]
        elif name in scope:
            out.append(name)
        elif name.endswith("/") or (ROOT / name).is_dir():
            out += [m for m in scope if m.startswith(name.rstrip("/") + "/")]
        else:
            raise SystemExit(f"mutation: {name} is neither a module under {' or '.join(SCOPE)} nor a group "
                             f"({', '.join([*GROUPS, 'core', 'methods', 'all'])})")
    return list(dict.fromkeys(out))


# -- the mutants ----------------------------------------------------------------------------------

BINOPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
          ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
          ast.LShift: ast.RShift, ast.RShift: ast.LShift}
COMPARES = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
LOGGERS = {"log", "logger", "logging", "warnings"}


@dataclass
class Mutant:
    path: str
    line: int
    col: int  # byte offsets, as ast gives them
    end_line: int
    end_col: int
    kind: str
    original: str
    replacement: str
    import_time: bool  # evaluated when the module is imported (module level, defaults, class bodies)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}:{self.col}:{self.kind}"


def _name(op: ast.AST) -> str:
    return type(op).__name__


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _skipped_call(node: ast.Call) -> bool:
    func = node.func
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id in LOGGERS


class _Finder:
    """Walks a module's AST and lists its mutants (see the module docstring for what is mutated)."""

    def __init__(self, path: str, source: str) -> None:
        self.path, self.source = path, source
        self.lines = source.splitlines()
        self.found: list[Mutant] = []

    def add(self, node: ast.AST, new: ast.AST, kind: str, in_body: bool, statement: bool = False) -> None:
        if "pragma: no mutate" in self.lines[node.lineno - 1]:
            return
        text = ast.unparse(new)
        self.found.append(Mutant(self.path, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, kind,
                                 ast.get_source_segment(self.source, node) or "", text if statement else f"({text})",
                                 not in_body))

    def visit(self, node: ast.AST, in_body: bool = False) -> None:
        if isinstance(node, ast.JoinedStr | ast.Import | ast.ImportFrom):
            return
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Call) and _skipped_call(node):
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):  # no decorators, no annotations
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    self.visit(default, in_body)
            for statement in self._body(node.body):
                self.visit(statement, True)
            return
        if isinstance(node, ast.ClassDef):  # no decorators, no bases
            for statement in self._body(node.body):
                self.visit(statement, in_body)
            return
        if isinstance(node, ast.Lambda):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    self.visit(default, in_body)
            self.visit(node.body, True)
            return
        if isinstance(node, ast.AnnAssign):
            for child in (node.target, node.value):
                if child is not None:
                    self.visit(child, in_body)
            return
        self.mutate(node, in_body)
        for child in ast.iter_child_nodes(node):
            self.visit(child, in_body)

    @staticmethod
    def _body(body: list[ast.stmt]) -> list[ast.stmt]:
        """A body without its docstring."""
        if body and isinstance(body[0], ast.Expr) and _is_str(body[0].value):
            return body[1:]
        return body

    def mutate(self, node: ast.AST, in_body: bool) -> None:
        if isinstance(node, ast.BinOp) and type(node.op) in BINOPS and not (_is_str(node.left) or _is_str(node.right)):
            new = copy.copy(node)
            new.op = BINOPS[type(node.op)]()
            self.add(node, new, f"{_name(node.op)}>{_name(new.op)}", in_body)
        elif isinstance(node, ast.AugAssign) and type(node.op) in BINOPS and not _is_str(node.value):
            new = copy.copy(node)
            new.op = BINOPS[type(node.op)]()
            self.add(node, new, f"{_name(node.op)}=>{_name(new.op)}=", in_body, statement=True)
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in COMPARES:
                    new = copy.copy(node)
                    new.ops = [*node.ops[:i], COMPARES[type(op)](), *node.ops[i + 1:]]
                    self.add(node, new, f"{_name(op)}>{_name(new.ops[i])}" + (f"#{i}" if len(node.ops) > 1 else ""),
                             in_body)
        elif isinstance(node, ast.BoolOp):
            new = copy.copy(node)
            new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            self.add(node, new, f"{_name(node.op)}>{_name(new.op)}", in_body)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
            self.add(node, node.operand, f"{'not' if isinstance(node.op, ast.Not) else '-'}x>x", in_body)
        elif isinstance(node, ast.Constant) and not isinstance(node.value, str | bytes):
            value = node.value
            if isinstance(value, bool):
                self.add(node, ast.Constant(not value), f"{value}>{not value}", in_body)
            elif isinstance(value, int | float):
                self.add(node, ast.Constant(value + 1), f"{value!r}>{value + 1!r}", in_body)


def find_mutants(path: str) -> list[Mutant]:
    source = (ROOT / path).read_text(encoding="utf-8")
    tree = ast.parse(source)
    finder = _Finder(path, source)
    for statement in _Finder._body(tree.body):
        finder.visit(statement)
    # Nested operators can start at one column with one kind (``a + b + 2`` and its ``a + b``): the
    # outer one keeps the plain id, the inner ones are told apart by where they end.
    seen: set[str] = set()
    for mutant in finder.found:
        if mutant.id in seen:
            mutant.kind += f"@{mutant.end_line}:{mutant.end_col}"
        seen.add(mutant.id)
    return finder.found


def apply(source: bytes, mutant: Mutant) -> bytes:
    """``source`` with the mutant's span (byte offsets per line) replaced by its replacement."""
    lines = source.splitlines(keepends=True)
    start, end = lines[mutant.line - 1], lines[mutant.end_line - 1]
    new = start[:mutant.col] + mutant.replacement.encode("utf-8") + end[mutant.end_col:]
    return b"".join([*lines[:mutant.line - 1], new, *lines[mutant.end_line:]])


# -- running the tests ----------------------------------------------------------------------------

TRACE_PLUGIN = '''"""Written by benchmarks/mutation.py: which test executed which line of the traced files."""
import json, os, sys, threading, time

FILES = set(json.loads(os.environ["MUTATION_TRACE_FILES"]))
HITS, DURATIONS, CURRENT = {}, {}, ["<collect>"]


def _local(frame, event, arg):
    if event == "line":
        HITS.setdefault(CURRENT[0], {}).setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
    return _local


def _global(frame, event, arg):
    if frame.f_code.co_filename in FILES:
        HITS.setdefault(CURRENT[0], {}).setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
        return _local
    return None


sys.settrace(_global)
threading.settrace(_global)


def pytest_runtest_protocol(item, nextitem):
    CURRENT[0] = item.nodeid
    if sys.gettrace() is not _global:  # a test that set a tracer of its own and left it (or None)
        sys.settrace(_global)
    item._mutation_started = time.perf_counter()


def pytest_runtest_teardown(item, nextitem):
    DURATIONS[item.nodeid] = time.perf_counter() - item._mutation_started


def pytest_sessionfinish(session, exitstatus):
    sys.settrace(None)
    hits = {test: {f: sorted(lines) for f, lines in files.items()} for test, files in HITS.items()}
    with open(os.environ["MUTATION_TRACE_OUT"], "w") as out:
        json.dump({"hits": hits, "durations": DURATIONS}, out)
'''


SERVER = '''"""Written by benchmarks/mutation.py: runs pytest in a forked child per request, with the heavy
third-party modules imported once here (never harness, methods or the tests: the child imports those
fresh, mutant included)."""
import importlib, json, os, signal, sys, time

for name in ("numpy", "scipy.stats", "pandas", "torch", "safetensors.torch", "tokenizers", "tqdm.auto",
             "transformers", "sentence_transformers"):
    try:
        importlib.import_module(name)
    except Exception:
        pass
try:
    import transformers
    for name in ("AutoModel", "AutoTokenizer", "AutoModelForSequenceClassification", "BertModel", "BertConfig",
                 "BertTokenizer", "BertForSequenceClassification", "RobertaModel", "RobertaConfig"):
        getattr(transformers, name)
except Exception:
    pass
import pytest

OURS = ("harness", "methods", "conftest", "fixtures", "fakes", "run_bench", "tests")
loaded = [m for m in sys.modules if m.split(".")[0] in OURS]
if loaded:
    raise SystemExit(f"the server imported {loaded}: mutants would not be seen")


def run(request):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        fd = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            code = int(pytest.main(request["args"]))
        except BaseException:
            code = 3
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    deadline = time.monotonic() + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"rc": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return {"rc": None}
        time.sleep(0.02)


print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    print(json.dumps(run(json.loads(line))), flush=True)
'''
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def tree_files() -> list[str]:
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    return [n for n in names if (ROOT / n).is_file()]


@dataclass
class Outcome:
    status: str  # killed | survived | timeout | error
    seconds: float
    tail: str = ""


class Worker:
    """A copy of the tree to mutate in, with its own pytest temp folder and its own fork server."""

    def __init__(self, base: Path, index: int, files: list[str]) -> None:
        self.dir = base / f"w{index}"
        for name in files:
            (self.dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, self.dir / name)
        (self.dir / "_mutation_trace.py").write_text(TRACE_PLUGIN, encoding="utf-8")
        (self.dir / "_mutation_server.py").write_text(SERVER, encoding="utf-8")
        self.tmp = base / f"t{index}"
        self.output = base / f"out{index}.txt"
        self.server: subprocess.Popen | None = None

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        # No bytecode is written: a mutant must never be run from the .pyc of another of the same size.
        env.update({"PYTHONPATH": str(self.dir), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", **OFFLINE,
                    **(extra or {})})
        return env

    def check_imports(self) -> None:
        """The copy's modules, not the checkout's editable install, must be the ones imported."""
        code = "import harness, methods; print(harness.__file__); print(methods.__file__)"
        done = subprocess.run([sys.executable, "-c", code], cwd=self.dir, env=self.env(), capture_output=True,
                              text=True, check=True)
        for line in done.stdout.split():
            if not Path(line).resolve().is_relative_to(self.dir.resolve()):
                raise SystemExit(f"mutation: the copy imports {line}, not its own modules")

    def args(self, tests: list[str], stop_first: bool = True) -> list[str]:
        return ["-q", "-p", "no:cacheprovider", "-p", "no:warnings", "--basetemp", str(self.tmp), *MARKER,
                *deselected(), *(["-x"] if stop_first else []), *tests]

    def traced(self, tests: list[str], trace: dict[str, str]) -> Outcome:
        """One pytest process with the line tracer (the baseline)."""
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "_mutation_trace",
                               *self.args(tests, stop_first=False)], cwd=self.dir, env=self.env(trace),
                              capture_output=True, text=True)
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        return Outcome("survived" if done.returncode == 0 else "error", time.perf_counter() - started, tail)

    def pytest(self, tests: list[str], timeout: float, stop_first: bool = True) -> Outcome:
        """pytest on ``tests`` in a child forked from this worker's server (the imports of torch and
        transformers are paid once per worker, not once per mutant)."""
        if self.server is None or self.server.poll() is not None:
            self.server = subprocess.Popen([sys.executable, "_mutation_server.py"], cwd=self.dir, env=self.env(),
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            if "ready" not in (self.server.stdout.readline() or ""):
                raise SystemExit("mutation: the test server did not start")
        started = time.perf_counter()
        request = {"args": self.args(tests, stop_first), "timeout": timeout, "output": str(self.output)}
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        line = self.server.stdout.readline()
        if not line:  # the server died (never seen): start a new one for the next request
            self.server = None
            return Outcome("error", time.perf_counter() - started, "the test server died")
        reply = json.loads(line)
        seconds = time.perf_counter() - started
        output = self.output.read_text(encoding="utf-8", errors="replace") if self.output.exists() else ""
        tail = "\n".join(output.splitlines()[-30:])
        if reply["rc"] is None:
            return Outcome("timeout", seconds, tail)
        if reply["rc"] == 0:
            return Outcome("survived", seconds, tail)
        if reply["rc"] in (1, 2, 3):  # failed, interrupted (collection error), internal error
            return Outcome("killed", seconds, tail)
        return Outcome("error", seconds, tail)

    def close(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.stdin.close()
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:  # stopped mid-request; its pytest child ends with its tests
                self.server.kill()
                self.server.wait()

    def run_mutant(self, mutant: Mutant, tests: list[str], timeout: float) -> Outcome:
        target = self.dir / mutant.path
        original = target.read_bytes()
        mutated = apply(original, mutant)
        try:
            compile(mutated, str(target), "exec")
        except SyntaxError as err:
            return Outcome("error", 0.0, f"the mutant does not compile: {err}")
        try:
            target.write_bytes(mutated)
            return self.pytest(tests, timeout)
        finally:
            target.write_bytes(original)


@dataclass
class Coverage:
    """Which tests executed which lines (file = path relative to the tree) and how long each test took."""

    lines: dict[str, dict[int, set[str]]] = field(default_factory=dict)
    touched: dict[str, set[str]] = field(default_factory=dict)  # file → tests that executed any line of it
    at_import: dict[str, set[int]] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    startup: float = 0.0

    def tests_for(self, mutant: Mutant) -> list[str] | None:
        """Tests that executed the mutant's lines (None: no test did), fastest first."""
        by_line = self.lines.get(mutant.path, {})
        span = range(mutant.line, mutant.end_line + 1)
        tests = set().union(*(by_line.get(line, set()) for line in span))
        ran_at_import = any(line in self.at_import.get(mutant.path, set()) for line in span)
        if mutant.import_time or (not tests and ran_at_import):
            # A test can read a constant or an option's default without running a line of the
            # module (tests/test_oracles_flow.py's recipe test): every test runs, not only those that
            # touched it. (The caller keeps those of the module's own targets.)
            tests = set(self.durations)
        if not tests:
            return None
        return sorted(tests, key=lambda t: (self.durations.get(t, 0.0), t))


def baseline(worker: Worker, modules: list[str]) -> Coverage:
    tests = sorted({t for m in modules for t in tests_of(m)})
    out = worker.dir.parent / "trace.json"
    files = {str(path): m for m in modules for path in (worker.dir / m, (worker.dir / m).resolve())}
    print(f"baseline: {len(tests)} test targets, traced ({' '.join(tests)})", flush=True)
    started = time.perf_counter()
    outcome = worker.traced(tests, {"MUTATION_TRACE_FILES": json.dumps(sorted(files)), "MUTATION_TRACE_OUT": str(out)})
    if outcome.status != "survived":
        raise SystemExit(f"mutation: the unmutated tests do not pass ({outcome.status}):\n{outcome.tail}")
    data = json.loads(out.read_text())
    coverage = Coverage(durations=data["durations"])
    coverage.startup = max(5.0, time.perf_counter() - started - sum(coverage.durations.values()))
    for test, hits in data["hits"].items():
        for file, lines in hits.items():
            module = files.get(file)
            if module is None:
                continue
            if test == "<collect>":
                coverage.at_import.setdefault(module, set()).update(lines)
                continue
            coverage.touched.setdefault(module, set()).add(test)
            for line in lines:
                coverage.lines.setdefault(module, {}).setdefault(line, set()).add(test)
    print(f"baseline: {len(coverage.durations)} tests passed in {time.perf_counter() - started:.0f} s "
          f"(start-up ~{coverage.startup:.0f} s)", flush=True)
    return coverage


def in_module_tests(module: str, tests: list[str]) -> list[str]:
    """The node ids among ``tests`` that belong to the module's mapped test targets."""
    targets = tests_of(module)
    return [t for t in tests if any(t == s or t.startswith(s + "::") or t.startswith(s + "[") for s in targets)]


# -- the report -----------------------------------------------------------------------------------

def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{cpu}, {os.cpu_count()} cores (load {load:.1f} at start), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    # the tests decide what is killed as much as the code does: uncommitted tests make it "(modified)" too
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *SCOPE, "tests", "benchmarks/mutation.py"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return head.strip() + (" (modified)" if dirty else "")


def equivalent_ids(text: str) -> dict[str, str]:
    """Survivors argued equivalent in the report's hand-written "Equivalent mutants" table."""
    out, inside = {}, False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line.strip().lower().startswith("## equivalent mutants")
        elif inside and line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            out[cells[0].strip("`")] = cells[-1]
    return out


def render(results: dict[str, dict], equivalents: dict[str, str]) -> str:
    lines = [BEGIN, "", "_Generated by `benchmarks/mutation.py` from `docs/mutation.json`; edit outside the "
             "markers._", "", "| module | mutants | killed | timeout | survived | no coverage | argued equivalent "
             "| score | score without equivalents | run |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    totals = dict.fromkeys(("total", "run", "killed", "timeout", "survived", "uncovered", "equivalent"), 0)
    for module in sorted(results):
        r = results[module]
        survivors = r["survivors"]
        equivalent = sum(1 for s in survivors if s["id"] in equivalents)
        counted = {"total": r["total"], "killed": r["killed"], "timeout": r["timeout"],
                   "survived": sum(1 for s in survivors if s["status"] == "survived"),
                   "uncovered": sum(1 for s in survivors if s["status"] == "no coverage"), "equivalent": equivalent}
        dead = r["killed"] + r["timeout"]
        run_total = r["total"] - r.get("not_run", 0) - r.get("errors", 0)
        for key, value in {**counted, "run": run_total}.items():
            totals[key] += value
        lines.append(f"| `{module}` | {r['total']}{' (sample)' if r.get('sampled') else ''} | {r['killed']} | "
                     f"{r['timeout']} | {counted['survived']} | {counted['uncovered']} | {equivalent} | "
                     f"{_pct(dead, run_total)} | {_pct(dead, run_total - equivalent)} | {r['run']} |")
    dead, total = totals["killed"] + totals["timeout"], totals["run"]
    lines.append(f"| **all** | {totals['total']} | {totals['killed']} | {totals['timeout']} | {totals['survived']} | "
                 f"{totals['uncovered']} | {totals['equivalent']} | {_pct(dead, total)} | "
                 f"{_pct(dead, total - totals['equivalent'])} | |")
    runs = {}
    for r in results.values():
        runs.setdefault(r["run"], r)
    lines += ["", "Runs:", ""]
    for run, r in sorted(runs.items()):
        lines.append(f"- {run}: `{r['command']}` — commit {r['commit']}, {r['machine']}, {r['seconds']:.0f} s")
        reruns = {x["run"]: x for m in results.values() if m["run"] == run for x in m.get("reruns", [])}
        for when, x in sorted(reruns.items()):
            lines.append(f"  - then {when}: `{x['command']}` — its survivors again with the tests of commit "
                         f"{x['commit']}, {x['seconds']:.0f} s")
    lines += ["", "### Surviving mutants", ""]
    any_left = False
    for module in sorted(results):
        left = results[module]["survivors"]
        if not left:
            continue
        any_left = True
        lines += [f"`{module}`:", ""]
        for s in left:
            mark = f" — equivalent: {equivalents[s['id']]}" if s["id"] in equivalents else ""
            where = "no test executes it" if s["status"] == "no coverage" else \
                f"{s['tests']} test{'s' if s['tests'] != 1 else ''} ran"
            lines.append(f"- `{s['id']}` `{_short(s['original'])}` → `{_short(s['replacement'])}` ({where}){mark}")
        lines.append("")
    if not any_left:
        lines.append("None.")
    lines += ["", END]
    return "\n".join(lines)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} % ({part}/{whole})" if whole > 0 else "—"


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(text.split()).replace("`", "'")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def write_report(results: dict[str, dict]) -> None:
    text = REPORT.read_text(encoding="utf-8") if REPORT.exists() else (
        "# Mutation testing\n\n" + BEGIN + "\n" + END + "\n\n## Equivalent mutants\n\n| mutant | why it behaves "
        "like the original |\n|---|---|\n")
    block = render(results, equivalent_ids(text))
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    REPORT.write_text(head + block + tail, encoding="utf-8")


# -- main -----------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", nargs="+", default=["focus"],
                        help=f"modules (paths), folders, or groups: {', '.join(GROUPS)}, core, methods, all "
                             "(default: focus)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run in parallel (one tree copy each)")
    parser.add_argument("--budget", type=float, default=30.0, help="minutes of mutant runs; the rest is not run")
    parser.add_argument("--sample", type=int, default=0, help="at most this many mutants per module, drawn at random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="+", default=[], metavar="ID",
                        help="run only these mutants (ids as the report prints them)")
    parser.add_argument("--survivors", action="store_true",
                        help="re-run only the mutants the recorded run of each module left alive (docs/mutation.json), "
                             "with the tests as they are now; the record is updated (those now killed are "
                             "counted as killed) and the re-run is listed under its run")
    parser.add_argument("--confirm", action="store_true", help="re-run each survivor with all of its module's tests")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--exclude", nargs="+", default=[], metavar="TEST",
                        help="leave out these test files or node ids (e.g. to score the suite without new tests)")
    parser.add_argument("--with-slow", action="store_true", help=f"also run the slow tests ({len(SLOW)}, see SLOW)")
    parser.add_argument("--show", action="store_true", help="print the end of each mutant's pytest output")
    parser.add_argument("--no-report", action="store_true", help="do not update docs/mutation.{json,md}")
    parser.add_argument("--report", action="store_true",
                        help="only regenerate docs/mutation.md from docs/mutation.json (after editing its "
                             "equivalent-mutants table); nothing runs")
    args = parser.parse_args()
    if args.report:
        write_report(json.loads(RESULTS.read_text(encoding="utf-8")))
        print(f"wrote {REPORT.relative_to(ROOT)}")
        return
    EXCLUDED.extend(args.exclude)
    if not args.with_slow:
        EXCLUDED.extend(SLOW)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up the tree copies when stopped

    modules = resolve_modules(args.modules)
    mutants = {m: find_mutants(m) for m in modules}
    if args.only:
        mutants = {m: [x for x in ms if x.id in args.only] for m, ms in mutants.items()}
        unknown = set(args.only) - {x.id for ms in mutants.values() for x in ms}
        if unknown:
            raise SystemExit(f"mutation: no such mutants: {', '.join(sorted(unknown))}")
    if args.survivors:
        recorded = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
        for module, found in mutants.items():
            if module not in recorded:
                raise SystemExit(f"mutation: --survivors: {module} has no recorded run in {RESULTS.name}")
            alive = {s["id"] for s in recorded[module]["survivors"]}
            mutants[module] = [x for x in found if x.id in alive]
            gone = alive - {x.id for x in mutants[module]}
            if gone:  # the module's code changed since: its record must be made again, whole
                raise SystemExit(f"mutation: --survivors: {module} no longer has {', '.join(sorted(gone))}")
    if args.sample:
        rng = random.Random(args.seed)
        mutants = {m: sorted(rng.sample(ms, min(args.sample, len(ms))), key=lambda x: (x.line, x.col))
                   for m, ms in mutants.items()}
    if args.list:
        for module, found in mutants.items():
            print(f"{module}: {len(found)} mutants")
            for m in found:
                print(f"  {m.id}  {_short(m.original, 60)} -> {_short(m.replacement, 60)}")
        return
    modules = [m for m in modules if mutants[m]]
    command = "python benchmarks/mutation.py " + " ".join(sys.argv[1:])
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    started_commit = commit()  # the tree is copied now: later commits are not what runs
    print(f"mutation: {sum(len(v) for v in mutants.values())} mutants in {len(modules)} modules", flush=True)
    with tempfile.TemporaryDirectory(prefix="sts-mutation-") as base, contextlib.ExitStack() as servers:
        files = tree_files()
        workers = [Worker(Path(base), i, files) for i in range(max(1, args.jobs))]
        for worker in workers:  # stopped however this ends (the baseline's check starts the first one)
            servers.callback(worker.close)
        workers[0].check_imports()
        coverage = baseline(workers[0], modules)
        # The same tests, unmutated, through the fork server: a server whose children fail would kill everything.
        check = workers[0].pytest(sorted(coverage.durations, key=coverage.durations.get), timeout=3600)
        if check.status != "survived":
            raise SystemExit(f"mutation: the unmutated tests fail in the fork server:\n{check.tail}")
        print(f"baseline: the same tests pass in the fork server ({check.seconds:.0f} s)", flush=True)
        idle: queue.Queue[Worker] = queue.Queue()
        for worker in workers:
            idle.put(worker)
        deadline = time.monotonic() + 60 * args.budget
        outcomes: dict[str, tuple[Outcome, int]] = {}
        lock = threading.Lock()

        def run(mutant: Mutant) -> None:
            tests = coverage.tests_for(mutant)
            if tests is not None:
                tests = in_module_tests(mutant.path, tests)
            if not tests:
                outcome = Outcome("no coverage", 0.0)
            elif time.monotonic() > deadline:
                outcome = Outcome("not run", 0.0)
            else:
                timeout = coverage.startup + 3 * sum(coverage.durations.get(t, 1.0) for t in tests) + 30
                worker = idle.get()
                try:
                    outcome = worker.run_mutant(mutant, tests, timeout)
                    if outcome.status == "survived" and args.confirm:
                        every = in_module_tests(mutant.path, sorted(coverage.durations, key=coverage.durations.get))
                        if set(every) - set(tests):
                            timeout = coverage.startup + 3 * sum(coverage.durations[t] for t in every) + 30
                            outcome = worker.run_mutant(mutant, every, timeout)
                            tests = every
                finally:
                    idle.put(worker)
            with lock:
                outcomes[mutant.id] = (outcome, len(tests or []))
                done = len(outcomes)
                print(f"[{done}/{total}] {outcome.status:11s} {outcome.seconds:5.1f}s {mutant.id}  "
                      f"{_short(mutant.original, 40)} -> {_short(mutant.replacement, 40)}", flush=True)
                if args.show and outcome.tail:
                    print("    " + outcome.tail.replace("\n", "\n    "), flush=True)

        queue_all = [m for module in modules for m in mutants[module]]
        total = len(queue_all)
        run_started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(workers)) as pool:
            list(pool.map(run, queue_all))
        seconds = time.perf_counter() - run_started

    results = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
    for module in modules if args.survivors else ():
        found, before = mutants[module], results[module]
        status = {m.id: outcomes[m.id][0].status for m in found}
        dead = [i for i, st in status.items() if st in ("killed", "timeout")]
        survivors = []
        for s in before["survivors"]:
            if s["id"] in dead:
                continue
            if status.get(s["id"]) in ("survived", "no coverage"):
                s = {**s, "status": status[s["id"]], "tests": outcomes[s["id"]][1]}
            survivors.append(s)  # an error or "not run" leaves the recorded outcome as it was
        rerun = {"run": started_at, "command": command, "commit": started_commit, "machine": machine(),
                 "seconds": seconds, "mutants": len(found), "killed": len(dead)}
        results[module] = {**before, "killed": before["killed"] + sum(status[i] == "killed" for i in dead),
                           "timeout": before["timeout"] + sum(status[i] == "timeout" for i in dead),
                           "survivors": survivors, "reruns": [*before.get("reruns", []), rerun]}
    for module in () if args.survivors else modules:
        found = mutants[module]
        status = [outcomes[m.id][0].status for m in found]
        results[module] = {
            "total": len(found), "killed": status.count("killed"), "timeout": status.count("timeout"),
            "errors": status.count("error"), "not_run": status.count("not run"),
            "sampled": bool(args.sample or args.only),
            "survivors": [{"id": m.id, "status": outcomes[m.id][0].status, "original": m.original,
                           "replacement": m.replacement, "tests": outcomes[m.id][1]}
                          for m in found if outcomes[m.id][0].status in ("survived", "no coverage")],
            "run": started_at, "command": command, "commit": started_commit, "machine": machine(),
            "seconds": seconds}
    for module in modules:
        r = results[module]
        print(f"{module}: {r['killed'] + r['timeout']}/{r['total']} killed, {len(r['survivors'])} survived, "
              f"{r['errors']} errors, {r['not_run']} not run")
    if not args.no_report:
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        write_report(results)
        print(f"wrote {REPORT.relative_to(ROOT)} and {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
