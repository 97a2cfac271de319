"""The commands: ``sts-bench run | plan | list | history | paper``; ``run_bench.py`` is an alias of
them (its modes as flags: :func:`harness.runner.cli.parser.run_bench_command`) and goes through the
same :func:`execute`. Each parses its arguments into a ``BenchConfig``, runs it, prints what it
found and maps the outcome to an exit code (:mod:`.exits`).

    sts-bench run --methods flow whitening       python run_bench.py --methods flow whitening
    sts-bench plan --tasks sts12 sickr           python run_bench.py --dry-run --tasks sts12 sickr
    sts-bench list whitening                     python run_bench.py --list whitening
    sts-bench history                            python run_bench.py --history
    sts-bench paper bert-whitening               python run_bench.py --paper bert-whitening
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from harness.core.kinds import KINDS, kind_of
from harness.runner.cli.parser import (
    _Parser,
    add_run_flags,
    config_from_args,
    mode_help,
    run_bench_command,
)
from harness.runner.settings.config import BenchConfig
from harness.runner.settings.declaration import commands

COMMANDS = {
    "run": "benchmark methods on tasks: scores, leaderboards, the report page",
    "plan": "print what a run would encode, fit and score, and what is cached; run nothing",
    "list": "methods (with their options), tasks, sources, fit sets and papers",
    "history": "draw each score by commit from history.jsonl and rebuild index.html; run nothing",
    "paper": "a paper's own protocol, with its published numbers beside the measured ones",
}


def build_command_parser() -> argparse.ArgumentParser:
    from methods import METHODS

    parser = _Parser(
        prog="sts-bench", description="Benchmark sentence-embedding methods on STS tasks."
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    sets = commands(BenchConfig)
    for name, text in COMMANDS.items():
        sub = subparsers.add_parser(
            name, help=text, description=text, argument_default=argparse.SUPPRESS
        )
        if name == "list":
            sub.add_argument(
                "method",
                nargs="?",
                help=f"a method whose options to show: {', '.join(METHODS)}, "
                "a plugin's name, or path/to/file.py:ClassName",
            )
            continue
        chosen = sets.get(name)
        if chosen is not None and not isinstance(chosen.default, bool):  # paper NAME: its value
            sub.add_argument(chosen.name, metavar=chosen.metavar, help=mode_help(chosen))
        add_run_flags(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``sts-bench``: the console script."""

    def body() -> int:
        words = list(sys.argv[1:] if argv is None else argv)
        namespace = vars(build_command_parser().parse_args(words))
        return execute(namespace.pop("command"), namespace)

    return _guarded(body, argv)


def run_bench_main(argv: Sequence[str] | None = None) -> int:
    """``python run_bench.py``: the subcommand its mode flags stand for (``--list``, ``--dry-run``,
    ``--history``, ``--paper``; otherwise ``run``), through :func:`execute` as ``sts-bench``."""
    return _guarded(lambda: execute(*run_bench_command(argv)), argv)


def _guarded(body: Callable[[], int], argv: Sequence[str] | None) -> int:
    # The hub is optional: a folder or an already-cached snapshot must load without network calls.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    from harness.runner.cli.exits import debug_requested, guarded, terminate_like_interrupt

    with terminate_like_interrupt():
        code = guarded(body, debug=debug_requested(argv))
    if argv is None:  # the process's own command line: it ends after this return
        # Everything alive now lives until the process ends: moved out of the collector's reach,
        # the interpreter's teardown skips tracing millions of torch objects one last time (a
        # quarter second of a cold run). Threads, atexit handlers and finalizers still run.
        gc.freeze()
    return code


def execute(command: str, namespace: dict[str, Any]) -> int:
    """One command with its parsed arguments: ``list`` prints; the others set the setting their
    command declares (``plan``: ``dry_run``; ``paper NAME`` has set ``paper`` already) and run."""
    if command == "list":
        print(listing(namespace.get("method")))
        return 0
    chosen = commands(BenchConfig).get(command)
    if chosen is not None and isinstance(chosen.default, bool):
        namespace[chosen.name] = True
    return run_config(config_from_args(namespace))


def run_config(cfg: BenchConfig) -> int:
    """Run ``cfg``; print its table (stdout), what it wrote and the gate's verdict (stderr)."""
    import harness
    from harness.core.stages import from_process_start

    with from_process_start():  # the stages: line counts the process's start (stages.py)
        outcome = harness.run(cfg)
    print(outcome.table)
    if outcome.dry_run:
        return 0
    print(
        f"wrote {len(outcome.result_paths)} result file(s) under {cfg.output_dir}/runs and "
        f"{', '.join(str(p) for p in outcome.leaderboard_paths)}",
        file=sys.stderr,
    )
    if outcome.regressions is not None:
        drops = outcome.regressions
        if len(drops):
            from tabulate import tabulate

            verdict = "REGRESSION" if outcome.exit_code else "drops, none a regression"
            print(
                f"\n{verdict} vs {cfg.baseline}: a regression is a drop larger than "
                f"{cfg.tolerance} points (--tolerance) whose 95 % interval excludes the baseline:"
            )
            print(tabulate(drops, headers="keys", tablefmt="pipe", showindex=False, floatfmt=".2f"))
        else:
            print(f"no drop vs {cfg.baseline}", file=sys.stderr)
    return outcome.exit_code


def listing(method: str | None = None) -> str:
    """What can be run, from the registries; with ``method``, that method's options and defaults."""
    from harness.core.data.declared import KEYS
    from harness.core.data.fitsets import FIT_SET_KINDS
    from harness.core.data.sources import run_sources
    from harness.core.data.splits import unique
    from harness.core.data.tasks import TASKS
    from harness.runner.presets.data import PAPERS, load_paper
    from methods import all_methods, get_method, plugin_origin

    if method is not None:
        return method_options(get_method(method))
    lines = [
        "Methods (--methods; options: sts-bench list METHOD, set with --set METHOD.OPTION=VALUE):"
    ]
    for m in all_methods():
        origin = plugin_origin(m)
        lines.append(f"  {m.name:<14} {m.summary}" + (f" [plugin: {origin}]" if origin else ""))
    lines += [
        "",
        f"Tasks (--tasks; from --source {', '.join(run_sources())}: packaged holds STS-B only, "
        "mteb also any MTEB STS task by its name):",
    ]
    width = max(14, *(len(name) + 1 for name in TASKS))
    for name in unique([spec.kind for spec in TASKS.values()]):
        kind = KINDS[name]
        sources = "; [the sources that have it]" if kind.labelled else ""
        lines.append(f" kind {name} ({kind.summary}{sources}):")
        for spec in (spec for spec in TASKS.values() if kind_of(spec) is kind):
            where = f" [{', '.join(spec.where)}]" if kind.labelled else ""
            lines.append(f"  {spec.name:<{width}} {spec.description}{where}")
    pad = " " * (width + 3)
    lines += [
        f"  {'file:PATH':<{width}} your own pairs: a CSV, TSV or JSONL file (header sentence1, "
        "sentence2, score), e.g.",
        f"{pad}'file:my_pairs.tsv?score=label&range=0,1&name=mine' (keys: " + ", ".join(KEYS) + ")",
        f"  {'hf:DIR_OR_ID':<{width}} a HuggingFace dataset (a save_to_disk folder, or a hub id), "
        "same keys",
        f"{pad}(each carries its own source: --tasks stsb file:my_pairs.tsv is one run, one table)",
    ]
    lines += [
        "",
        f"Fit sets (--fit-set): {', '.join(FIT_SET_KINDS)}",
        "",
        "Papers (--paper NAME, or sts-bench paper NAME; their protocols, published numbers beside "
        "ours):",
    ]
    lines += [f"  {name:<14} {load_paper(name).title}" for name in PAPERS]
    return "\n".join(lines)


def method_options(cls) -> str:
    """One method's summary and options: name, default (from the code), choices, what it does."""
    lines = [f"{cls.name}: {cls.summary}"]
    if not cls.options:
        return "\n".join([*lines, "  (no options)"])
    lines.append(f"options (--set {cls.name}.OPTION=VALUE, or [{cls.name}] in a config file):")
    width = max(len(o.name) for o in cls.options)
    for opt in cls.options:
        choices = f"; one of {', '.join(map(str, opt.choices))}" if opt.choices else ""
        lines.append(f"  {opt.name:<{width}}  default {opt.default!r}{choices}: {opt.help}")
    return "\n".join(lines)
