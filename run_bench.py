#!/usr/bin/env python3
"""sts-bench command line: parse flags into a BenchConfig, run it, map the outcome to an exit code.

    python run_bench.py                                  # every default method, STS-B, packaged MiniLM
    python run_bench.py --methods whitening avg --tasks stsb --backbone bert-base-uncased
    python run_bench.py --list

Exit codes (harness/runner/cli/exits.py): 0 ok · 1 a regression against --baseline, nothing else ·
2 bad input · 3 environment or I/O failure (disk full, permission denied, out of memory) · 4 a bug ·
130 interrupted (everything encoded so far stays cached; the next run resumes from it).
143 terminated by SIGTERM (as for Ctrl-C). 2 and 3 print one ``error:`` line; ``--debug`` or
STS_BENCH_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import logging
import os
import sys


def print_listing() -> None:
    from harness.core.data.tasks import TASKS
    from harness.runner.papers.data import PAPERS, load_paper
    from methods import all_methods

    print("Methods:")
    for method in all_methods():
        flags = " ".join(f"--{method.name}-{o.name}".replace("_", "-") for o in method.options)
        print(f"  {method.name:<12} {method.summary}" + (f"  [{flags}]" if flags else ""))
    print("\nTasks (--tasks; sources: packaged = STS-B only, senteval, hub):")
    for spec in TASKS.values():
        print(f"  {spec.name:<12} {spec.description}")
    print("\nPapers (--paper; their protocols, with the published numbers beside the measured ones):")
    for name in PAPERS:
        print(f"  {name:<14} {load_paper(name).title}")


def main(argv: list[str] | None = None) -> int:
    # The hub is optional: a folder or an already-cached snapshot must load without network calls.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    from harness.runner.cli.exits import debug_requested, guarded, terminate_like_interrupt

    with terminate_like_interrupt():
        return guarded(lambda: _main(argv), debug=debug_requested(argv))


def _main(argv: list[str] | None) -> int:
    import harness
    from harness.runner.cli.parser import from_cli

    cfg, list_only = from_cli(argv)
    if list_only:
        print_listing()
        return 0
    outcome = harness.run(cfg)
    print(outcome.table)
    if outcome.dry_run:
        return 0
    print(f"wrote {len(outcome.result_paths)} result file(s) under {cfg.output_dir}/runs and "
          f"{', '.join(str(p) for p in outcome.leaderboard_paths)}", file=sys.stderr)
    if outcome.regressions is not None:
        drops = outcome.regressions
        if len(drops):
            from tabulate import tabulate

            verdict = "REGRESSION" if outcome.exit_code else "drops, none a regression"
            print(f"\n{verdict} vs {cfg.baseline}: a regression is a drop larger than {cfg.tolerance} points "
                  "(--tolerance) whose 95 % interval excludes the baseline:")
            print(tabulate(drops, headers="keys", tablefmt="pipe", showindex=False, floatfmt=".2f"))
        else:
            print(f"no drop vs {cfg.baseline}", file=sys.stderr)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
