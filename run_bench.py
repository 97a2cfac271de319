#!/usr/bin/env python3
"""sts-bench command line: parse flags into a BenchConfig, run it, map the outcome to an exit code.

    python run_bench.py                         # every default method, STS-B, packaged MiniLM
    python run_bench.py --methods whitening avg --tasks stsb --backbone bert-base-uncased
    python run_bench.py --list

The same runs are ``sts-bench run ...`` (``sts-bench --help``: run, plan, list, history, paper).
Exit codes (harness/runner/cli/exits.py): 0 ok · 1 a regression against --baseline, nothing else ·
2 bad input · 3 environment or I/O failure (disk full, permission denied, out of memory) · 4 a bug ·
5 a plugin method misbehaved (one line naming it and its file; the other results are written) ·
130 interrupted, 143 terminated (everything encoded so far stays cached; the next run resumes from
it). 2 and 3 print one ``error:`` line; ``--debug`` or STS_BENCH_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from harness.runner.cli.commands import run_bench_main

    return run_bench_main(argv)


if __name__ == "__main__":
    sys.exit(main())
