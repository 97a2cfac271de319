"""The two tiers: ``make test`` runs every test (CI), ``make test-fast`` leaves out the ``heavy``,
``slow`` and ``real`` tests, and ``make test-tiers`` proves that what is left still runs every module
of harness/ and methods/ (tests/exercised.py). Here: the tools themselves, on small runs, and that
the Makefile, pyproject.toml and docs/DEVELOPMENT.md name one selection.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import cpu_times
import exercised

ROOT = Path(__file__).resolve().parent.parent
FAST = 'not slow and not real and not heavy'


def makefile() -> str:
    return (ROOT / "Makefile").read_text(encoding="utf-8")


def test_the_fast_tier_is_one_selection_in_the_makefile_and_the_docs():
    text = makefile()
    assert re.search(rf'^FAST_TESTS = -m "{FAST}"$', text, re.M)
    for target in ("test-fast", "test-tiers"):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M)
        assert recipe and "$(FAST_TESTS)" in recipe.group(1), target
    assert "--exercised-require" in re.search(r"^test-tiers:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    test = re.search(r"^test:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert test.strip() == "$(PY) -m pytest $(PARALLEL)"  # the whole suite: every marker
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    markers = config["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("heavy:") for m in markers)
    assert f'-m "{FAST}"' in (ROOT / "docs" / "DEVELOPMENT.md").read_text(encoding="utf-8")


def test_the_recorder_sees_the_functions_and_lines_a_call_runs():
    from harness.core import significance

    recorder = exercised.Recorder()
    recorder.start()
    try:
        t, p = significance.williams_t(0.8, 0.7, 0.9, 100)
    finally:
        recorder.stop()
    assert (round(t, 2), round(p, 4)) == (3.67, 0.0004)  # the module docstring's worked example
    name = significance.__file__
    called = recorder.called[name]
    ran = (significance.williams_t, significance.student_t_sf)
    assert {f"{f.__name__}:{f.__code__.co_firstlineno}" for f in ran} <= called
    body = exercised.executable_lines(Path(name))
    assert recorder.lines[name] <= body | {significance.williams_t.__code__.co_firstlineno}
    assert len(recorder.lines[name] & body) > 10


def test_the_report_names_a_module_never_imported_or_whose_functions_never_ran(tmp_path):
    files = [exercised.relative(path) for path in exercised.project_files()]
    assert "harness/core/significance.py" in files and "methods/dse.py" in files
    ran = {name: {"lines": [1], "called": sorted(exercised.functions(ROOT / name))} for name in files}
    ran.pop("methods/dse.py")
    ran["harness/core/significance.py"]["called"] = []
    (tmp_path / "gw0.json").write_text(json.dumps(ran), encoding="utf-8")
    rows = exercised.report(tmp_path)
    assert exercised.unexercised(rows) == ["harness/core/significance.py", "methods/dse.py"]
    assert json.loads((tmp_path / exercised.REPORT).read_text(encoding="utf-8")) == rows
    assert "methods/dse.py" in exercised.table(rows, rows)


def test_a_run_that_misses_modules_fails_under_require_and_says_which(tmp_path):
    """The plugins in a pytest process of their own, on one test that runs one module's function."""
    (tmp_path / "test_one.py").write_text(
        "from harness.core.significance import williams_t\n\n"
        "def test_one():\n    assert williams_t(0.8, 0.7, 0.9, 100)[0] > 3 and sum(range(2_000_000))\n",
        encoding="utf-8")
    records, times = tmp_path / "records", tmp_path / "cpu.json"
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "exercised", "-p", "cpu_times",
         "--rootdir", str(tmp_path), f"--exercised={records}", "--exercised-require", f"--cpu-times={times}",
         "--cpu-budget=0", str(tmp_path / "test_one.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr  # the test passed; the requirement failed
    assert "1 passed" in run.stdout and "NOT EXERCISED: harness/__init__.py" in run.stdout
    rows = json.loads((records / exercised.REPORT).read_text(encoding="utf-8"))
    assert rows["harness/core/significance.py"]["called"] >= 3 and not rows["methods/dse.py"]["imported"]
    assert list(json.loads(times.read_text(encoding="utf-8"))) == ["test_one.py::test_one"]
    assert "its call over the 0 s budget" in run.stdout


def test_cpu_seconds_count_the_subprocesses_a_test_waits_for():
    before = cpu_times.cpu()
    subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], check=True)
    assert cpu_times.cpu() - before > 0.02
