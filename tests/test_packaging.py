"""The wheel holds every module and data file of the tree, and the console script: packages are
discovered, so a new room or subpackage cannot silently drop out of an install."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from fixtures import tree_copy

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_every_module_data_file_and_the_console_script(tmp_path):
    tree = tree_copy(tmp_path / "tree")
    # The PEP 517 backend called directly, as a frontend would: uv-made venvs (make test-newest) have no pip.
    (tmp_path / "dist").mkdir()
    done = subprocess.run([sys.executable, "-c", "import sys, setuptools.build_meta as backend; "
                           "backend.build_wheel(sys.argv[1])", str(tmp_path / "dist")],
                          cwd=tree, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "warning" not in done.stderr.lower(), done.stderr[-2000:]  # no setuptools warning flood
    (wheel,) = (tmp_path / "dist").glob("sts_bench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {str(p.relative_to(ROOT)) for folder in ("harness", "methods") for p in (ROOT / folder).rglob("*")
                if p.suffix in (".py", ".toml", ".j2", ".css", ".js") and "__pycache__" not in p.parts}
    assert expected and not expected - names, sorted(expected - names)
    assert "run_bench.py" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "sts-bench = harness.runner.cli.commands:main" in zipfile.ZipFile(wheel).read(entry).decode()
