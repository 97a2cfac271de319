"""The wheel holds every module and data file of the tree, and the console script: packages are
discovered, so a new room or subpackage cannot silently drop out of an install."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from fixtures import tree_copy

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_every_module_data_file_and_the_console_script(tmp_path):
    tree = tree_copy(tmp_path / "tree")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                           "-w", str(tmp_path / "dist"), str(tree)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "warning" not in done.stderr.lower(), done.stderr[-2000:]  # no setuptools warning flood
    (wheel,) = (tmp_path / "dist").glob("sts_bench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {str(p.relative_to(ROOT)) for folder in ("harness", "methods") for p in (ROOT / folder).rglob("*")
                if p.suffix in (".py", ".toml") and "__pycache__" not in p.parts}
    assert expected and not expected - names, sorted(expected - names)
    assert "run_bench.py" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "sts-bench = harness.runner.cli.commands:main" in zipfile.ZipFile(wheel).read(entry).decode()
