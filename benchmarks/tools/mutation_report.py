"""Mutation testing with mutmut: run it on a copy of the tree, write docs/measurements/mutation.md.

    .venv/bin/python -m pip install -e '.[mutation]'                   # mutmut, pinned
    .venv/bin/python benchmarks/tools/mutation_report.py  # writes docs/measurements/mutation.md
    .venv/bin/python benchmarks/tools/mutation_report.py --workdir /tmp/mut --no-run  # report again

pyproject.toml's ``[tool.mutmut]`` says what is mutated and which tests run. mutmut writes its
``mutants/`` folder beside pyproject.toml, so it runs in a copy (``git ls-files``, untracked files
included); a rerun in the same ``--workdir`` resumes. Text outside the report's markers is kept.
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "docs" / "measurements" / "mutation.md"
BEGIN, END = "<!-- mutation-results:begin -->", "<!-- mutation-results:end -->"
RESULT_LINE = re.compile(r"^\s+(\S+__mutmut_\d+): (.+)$")
KILLED = ("killed", "timeout", "caught by type check")  # a timeout: the mutant never ends


def parse_results(text: str) -> dict[str, str]:
    """Mutant name -> status from ``mutmut results --all true`` (lines ``    name: status``)."""
    return {m[1]: m[2].strip() for line in text.splitlines() if (m := RESULT_LINE.match(line))}


def split_name(name: str) -> tuple[str, str]:
    """``harness.core.scoring.x_mean__mutmut_3`` -> (``harness/core/scoring.py``, ``x_mean``):
    mutmut names a mutant by module, mangled function (``x_f``, ``xǁClassǁmethod``) and number."""
    parts = name.split(".")
    i = next(i for i, part in enumerate(parts) if part.startswith(("x_", "xǁ")))
    return "/".join(parts[:i]) + ".py", ".".join(parts[i:]).rsplit("__mutmut_", 1)[0]


FUNCTIONS = ast.FunctionDef | ast.AsyncFunctionDef


@functools.cache  # one parse per module, not one per survivor (mutmut's copy is megabytes)
def _functions(source: str) -> dict[str, str]:
    lines = source.splitlines()  # not ast.get_source_segment, which splits the source per call
    return {
        node.name: "\n".join(lines[node.lineno - 1 : node.end_lineno])
        for node in ast.walk(ast.parse(source))
        if isinstance(node, FUNCTIONS)
    }


def locate(mutated: str, original: str, name: str) -> tuple[int, str, str]:
    """(line in ``original``, original line, mutated line) of mutant ``name``.

    ``mutated`` is mutmut's copy of the module, which holds the function as
    ``<mangled>__mutmut_orig`` and each mutant as ``<mangled>__mutmut_<n>``; the first line where
    they differ, counted from the function's ``def`` in the original module, is the mutant's line.
    """
    mangled, number = name.rsplit(".", 1)[-1].rsplit("__mutmut_", 1)
    defs = _functions(mutated)

    # the def lines renamed alike, so that a mutated default argument shows as a difference
    old, new = (
        defs[f"{mangled}__mutmut_{n}"].replace(f"__mutmut_{n}(", "(", 1).splitlines()
        for n in ("orig", number)
    )
    offset = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    *owner, function = mangled.removeprefix("x_").removeprefix("xǁ").split("ǁ")
    tree = ast.parse(original)
    classes = (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and [n.name] == owner)
    start = next(
        n.lineno
        for n in ast.walk(next(classes, tree))
        if isinstance(n, FUNCTIONS) and n.name == function
    )
    return (
        start + offset,
        old[offset].strip() if offset < len(old) else "",
        new[offset].strip() if offset < len(new) else "",
    )


def render(statuses: dict[str, str], where: dict[str, tuple[int, str, str]], header: str) -> str:
    """The generated part: a row per module, then each survivor with its line and change."""
    by_module: dict[str, Counter[str]] = {}
    for name, status in statuses.items():
        by_module.setdefault(split_name(name)[0], Counter())[status] += 1
    lines = [
        BEGIN,
        "",
        header,
        "",
        "| module | mutants | killed | timeout | survived | no tests | other | score |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [(f"`{m}`", c) for m, c in sorted(by_module.items())]
    for module, counts in [*rows, ("**all**", sum(by_module.values(), Counter()))]:
        total, caught = sum(counts.values()), sum(counts[s] for s in KILLED)
        checked = total - counts["not checked"]
        shown = counts["killed"], counts["timeout"], counts["survived"], counts["no tests"]
        score = f"{100 * caught / checked:.1f} % ({caught}/{checked})" if checked else "–"
        cells = [module, total, *shown, total - sum(shown), score]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += ["", "Score: killed and timed out over the mutants checked. Surviving mutants:", ""]
    for name in sorted(where, key=lambda n: (split_name(n)[0], where[n][0], n)):
        (line, old, new), path, mutant = where[name], split_name(name)[0], name.rsplit(".", 1)[-1]
        lines.append(f"- `{path}:{line}` `{mutant}`: `{old}` → `{new}`")
    return "\n".join([*lines, "", END])


def copy_tree(dest: Path) -> None:
    """The checkout's files (tracked and untracked, not ignored) under ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for name in (n for n in listed.split("\0") if (ROOT / n).is_file()):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="the copy to run in (default: a new one)")
    parser.add_argument("--no-run", action="store_true", help="report the run in --workdir")
    parser.add_argument("--max-children", type=int, default=1, help="mutants at once (1)")
    args = parser.parse_args(argv)
    if args.no_run and not args.workdir:
        parser.error("--no-run reads a finished run: give its --workdir")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="mutmut-"))
    mutmut = [sys.executable, "-m", "mutmut"]
    began, when = time.monotonic(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    if not args.no_run:
        if not (work / "pyproject.toml").exists():
            copy_tree(work)
        ran = subprocess.run([*mutmut, "run", "--max-children", str(args.max_children)], cwd=work)
        if ran.returncode:  # e.g. "Failed to run clean test": mutmut printed why above
            print(f"error: mutmut run exited {ran.returncode} in {work}", file=sys.stderr)
            return 2
    seconds = time.monotonic() - began

    def output(*command: str, cwd: Path = work) -> str:
        return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout

    statuses = parse_results(output(*mutmut, "results", "--all", "true"))
    where = {
        name: locate(
            (work / "mutants" / split_name(name)[0]).read_text("utf-8"),
            (work / split_name(name)[0]).read_text("utf-8"),
            name,
        )
        for name, status in statuses.items()
        if status == "survived"
    }
    command = f"python benchmarks/tools/mutation_report.py --max-children {args.max_children}"
    run = "read from an earlier run" if args.no_run else f"`{command}`, {seconds:.0f} s"
    tool = f"mutmut {output(*mutmut, '--version').split()[-1]} (`[tool.mutmut]` in pyproject.toml)"
    commit = output("git", "rev-parse", "--short", "HEAD", cwd=ROOT).strip()
    header = (
        f"_Generated by `benchmarks/tools/mutation_report.py`; edit outside the markers._ {when}: "
        f"{tool}, commit {commit}, {run}; {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}."
    )
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    text = REPORT.read_text("utf-8") if REPORT.exists() else f"# Mutation testing\n\n{BEGIN}{END}\n"
    head, tail = text[: text.index(BEGIN)], text[text.index(END) + len(END) :]
    REPORT.write_text(head + render(statuses, where, header) + tail, "utf-8")
    print(f"wrote {REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
