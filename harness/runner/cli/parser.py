"""The command line and the config file: flags and TOML settings → a validated ``BenchConfig``.

Precedence is CLI > config file > defaults. Flags come in groups; their choices and defaults are
read from the registries and from ``BenchConfig`` (nothing is typed twice). Method options are
``--set method.option=value`` (repeatable) and ``[method]`` tables of a config file, collected from
the method classes themselves; the older ``--<method>-<option>`` flags stay as hidden aliases.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from harness.core.errors import UserError, did_you_mean
from harness.runner.settings.config import BenchConfig


def split_names(values: Sequence[str]) -> tuple[str, ...]:
    """``["avg,cls", "flow"]`` → ``("avg", "cls", "flow")``: space- or comma-separated lists."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def split_tasks(values: Sequence[str]) -> tuple[str, ...]:
    """``--tasks`` entries: names as :func:`split_names`, but an entry with its own source
    (``file:p.tsv?range=0,5``) keeps its commas; a comma splits it only before another ``file:``
    or ``hf:`` entry. ``["stsb,file:a.tsv?range=-1,1"]`` → ``("stsb", "file:a.tsv?range=-1,1")``."""
    import re

    from harness.core.data.declared import KINDS, is_declared

    starts = re.compile(r",(?=\s*(?:" + "|".join(KINDS) + r"):)", re.IGNORECASE)
    out: list[str] = []
    for value in values:
        for part in starts.split(value):
            out += [part.strip()] if is_declared(part.strip()) else split_names([part])
    return tuple(out)


def parse_layers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.replace(" ", ",").split(",") if part)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer ids like 1,-1, got {text!r}") from None


def parse_batch_size(text: str) -> int:
    """``auto`` → 0 (token-budget batches); otherwise a positive sentence count."""
    if text.strip().lower() == "auto":
        return 0
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'auto', got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line (through UserError) instead of usage + exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see --help)")


def _shown(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ",".join(map(str, value)) if all(isinstance(v, int) for v in value) else " ".join(map(str, value))
    return {True: "on", False: "off", None: "none"}.get(value, str(value)) if isinstance(value, bool | None) \
        else str(value)


def _one_of(choices: Sequence[str]) -> str:
    """The metavar of a choice: ``{all,mean,wmean}`` (checked by BenchConfig.validate, which suggests
    the name meant: argparse's own choices would not)."""
    return "{" + ",".join(choices) + "}"


def _help(text: str, field: str | None = None, shown: str | None = None) -> str:
    """A help line with its default taken from ``BenchConfig`` (never typed twice)."""
    if shown is None and field is not None:
        shown = _shown(getattr(BenchConfig(), field))
    return f"{text} (default: {shown})" if shown else text


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a run, in groups; choices and defaults come from the registries and BenchConfig."""
    for group in (_what_flags, _data_flags, _encoding_flags, _scheduling_flags, _statistics_flags, _gate_flags,
                  _output_flags):
        group(parser)
    add_method_flags(parser)


def _what_flags(parser: argparse.ArgumentParser) -> None:
    from harness.core.data.tasks import TASKS
    from methods import METHODS

    what = parser.add_argument_group("what to run")
    what.add_argument("--methods", nargs="+", metavar="METHOD",
                      help=_help(f"space- or comma-separated: {', '.join(METHODS)}, an installed plugin's name "
                                 "(--list), or a plugin file path/to/file.py:ClassName", "methods"))
    what.add_argument("--tasks", nargs="+", metavar="TASK",
                      help=_help(f"{', '.join(TASKS)}, any MTEB STS task with --source mteb, or your own: "
                                 "file:PATH (CSV/TSV/JSONL) or hf:DIR_OR_ID, with ?KEY=VALUE&... options "
                                 "(see sts-bench list)",
                                 "tasks"))
    what.add_argument("--set", action="append", dest="set_options", metavar="METHOD.OPTION=VALUE",
                      help="a method option, repeatable: --set whitening.k=256 (options: sts-bench list METHOD)")
    what.add_argument("--config", metavar="FILE", help="TOML file of settings; flags override it")


def _data_flags(parser: argparse.ArgumentParser) -> None:
    from harness.core.data.fitsets import FIT_SET_KINDS
    from harness.core.data.tasks import SOURCES

    data = parser.add_argument_group("data")
    data.add_argument("--source", metavar=_one_of(SOURCES), help=_help("where tasks are read from", "source"))
    data.add_argument("--senteval-dir", metavar="DIR", help="SentEval's data/downstream folder (--source senteval)")
    data.add_argument("--hub-root", metavar="DIR", help="a local folder standing in for the hub (--source hub, "
                                                         "--fit-set nli)")
    data.add_argument("--fit-set", metavar="SET", help=_help(f"what fitting methods fit on: {', '.join(FIT_SET_KINDS)}",
                                                             "fit_set"))
    data.add_argument("--fit-corpus", metavar="FILE", help="same as --fit-set corpus:FILE")
    data.add_argument("--allow-gold-out-of-range", action="store_true",
                      help="warn instead of failing on a gold score outside the task's range")
    data.add_argument("--allow-undefined", action="store_true",
                      help="record a correlation that cannot be computed (constant gold or similarity, fewer "
                           "than 3 pairs) as undefined and unranked instead of failing")


def _encoding_flags(parser: argparse.ArgumentParser) -> None:
    from harness.core.encoding.devices import DTYPES
    from harness.core.encoding.engines import IMPLS

    model = parser.add_argument_group("backbone and encoding")
    model.add_argument("--backbone", help=_help("HF id, local folder, or minilm (the packaged all-MiniLM-L6-v2)",
                                                "backbone"))
    model.add_argument("--revision", help="hub revision (branch, tag or commit) of --backbone")
    model.add_argument("--max-length", type=int, metavar="N",
                       help=_help("tokens per sentence, capped at the model's positions", "max_length"))
    model.add_argument("--first-last-layers", type=parse_layers, metavar="I,J",
                       help=_help("hidden_states ids of first-last (SimCSE's paper table used 0,-1)",
                                  "first_last_layers"))
    model.add_argument("--dtype", metavar=_one_of(DTYPES), help=_help("compute dtype (autocast)", "dtype"))
    model.add_argument("--device", help=_help("auto, cpu, cuda, cuda:N, or cuda:0,1,... (a worker per GPU)",
                                              "device"))
    model.add_argument("--encoder-impl", metavar=_one_of(IMPLS),
                       help=_help("auto runs BERT, RoBERTa, MPNet and DeBERTa-v2/v3 with the built-in encoder",
                                  "encoder_impl"))
    model.add_argument("--batch-size", type=parse_batch_size, metavar="N|auto",
                       help=_help("sentences per batch, or auto: a token budget", shown="auto"))
    model.add_argument("--max-tokens", type=int, metavar="N",
                       help=_help("token budget of an auto batch", shown="4096 on CPU, 65536 on GPU"))
    model.add_argument("--trust-remote-code", action="store_true", help="allow a checkpoint's own code (off)")


def _scheduling_flags(parser: argparse.ArgumentParser) -> None:
    from harness.runner.settings.config import BACKENDS, VERIFY_UNDER_BASELINE

    where = parser.add_argument_group("scheduling")
    where.add_argument("--backend", metavar=_one_of(BACKENDS), help=_help("where encode windows run", "backend"))
    where.add_argument("--scheduler-address", metavar="ADDRESS", help="dask scheduler or ray cluster address")
    where.add_argument("--threads", type=int, metavar="N",
                       help=_help("CPU threads for torch", shown="the cores this process may use"))
    where.add_argument("--cache-dir", metavar="DIR",
                       help=_help("embedding and artifact cache", shown="$STS_BENCH_CACHE or ~/.cache/sts-bench"))
    where.add_argument("--verify-cache", type=int, metavar="N",
                       help=_help("re-encode N cached sentences per backbone and compare; a mismatch fails (exit 3)",
                                  shown=f"{VERIFY_UNDER_BASELINE} under --baseline, else 0"))


def _statistics_flags(parser: argparse.ArgumentParser) -> None:
    from harness.core.scoring import AGGREGATIONS

    stats = parser.add_argument_group("statistics")
    stats.add_argument("--aggregation", metavar=_one_of(AGGREGATIONS),
                       help=_help("over a task's subsets", "aggregation"))
    stats.add_argument("--bootstrap", type=int, metavar="N",
                       help=_help("rounds of the 95%% interval; 0: off", "bootstrap"))
    stats.add_argument("--seed", type=int, help=_help("of every draw, fit and training", "seed"))


def _gate_flags(parser: argparse.ArgumentParser) -> None:
    gate = parser.add_argument_group("regression gate")
    gate.add_argument("--baseline", metavar="CSV", help="a leaderboard.csv to compare with: exit 1 on a regression, "
                                                        "2 on a cell it lacks")
    gate.add_argument("--baseline-partial", action="store_true", help="compare only the cells the baseline has")
    gate.add_argument("--tolerance", type=float, metavar="POINTS", help=_help("allowed drop", "tolerance"))


def _output_flags(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("outputs")
    out.add_argument("--output-dir", metavar="DIR", help=_help("runs/, leaderboards, plots, index.html",
                                                               "output_dir"))
    out.add_argument("--export-embeddings", metavar="DIR",
                     help="write each scored method × task × split's sentences and vectors (.npy) under DIR")
    out.add_argument("--diagnostics", action="store_true", help="anisotropy diagnostics per method and task")
    out.add_argument("--cost", action="store_true", help="query × candidate cost of cross-encoder vs dse")
    out.add_argument("--no-plots", dest="plots", action="store_false", help="no PNG plots")
    out.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    out.add_argument("--debug", action="store_true", help="print the traceback of a failure (also STS_BENCH_DEBUG=1)")


def add_method_flags(parser: argparse.ArgumentParser) -> None:
    """``--<method>-<option>``: the older spelling of ``--set method.option=value``, hidden from
    --help and kept as aliases for scripts that use them."""
    from methods import builtin_methods

    # Built-ins only: building the parser must not import every installed plugin (they take --set).
    for method in builtin_methods():
        for opt in method.options:
            flag, dest = f"--{method.name}-{opt.name}".replace("_", "-"), f"{method.name}.{opt.name}"
            if isinstance(opt.default, bool):  # an on/off option is a bare flag
                parser.add_argument(flag, dest=dest, action="store_true", help=argparse.SUPPRESS)
            else:
                parser.add_argument(flag, dest=dest, type=opt.type, choices=opt.choices, help=argparse.SUPPRESS)


def add_mode_flags(parser: argparse.ArgumentParser) -> None:
    """``run_bench.py``'s modes as flags (``sts-bench`` has them as subcommands)."""
    from harness.runner.papers.data import PAPERS

    modes = parser.add_argument_group("modes (sts-bench: the subcommands list, plan, history, paper)")
    modes.add_argument("--list", action="store_true", help="print methods, tasks, sources, fit sets and papers")
    modes.add_argument("--dry-run", action="store_true", help="print the plan and run nothing")
    modes.add_argument("--history", action="store_true",
                       help="draw each score by commit from history.jsonl and rebuild index.html; run nothing")
    modes.add_argument("--paper", metavar="NAME", help=f"a paper's own protocol: {', '.join(PAPERS)}")


def build_parser() -> argparse.ArgumentParser:
    """``run_bench.py``: a run's flags and the modes as flags."""
    p = _Parser(prog="run_bench.py", argument_default=argparse.SUPPRESS,
                description="Benchmark sentence-embedding methods on STS tasks (also: the sts-bench command).")
    add_mode_flags(p)
    add_run_flags(p)
    return p


def _from_mapping(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Turn flat settings (CLI namespace or TOML table) into BenchConfig field values, each checked
    against its field's type (:mod:`harness.runner.settings.validate`)."""
    from harness.runner.settings.validate import check_field, check_fields

    names = {f.name for f in fields(BenchConfig)} - {"explicit"}  # explicit is derived, never set
    out: dict[str, Any] = {}
    params: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        if "." in key:
            method, _, option = key.partition(".")
            params.setdefault(method, {})[option] = value
        elif isinstance(value, dict):
            params.setdefault(key, {}).update(value)
        elif key in ("methods", "tasks"):
            listed = [value] if isinstance(value, str) else value
            check_field(BenchConfig, key, listed, where)
            out[key] = split_tasks(listed) if key == "tasks" else split_names(listed)
            if key == "methods":  # a plugin by reference is loaded now, so its [table] and --set know it
                from harness.runner.settings.validate import method_names

                out[key] = method_names(out[key])
        elif key == "fit_corpus":
            check_field(BenchConfig, "fit_set", value, where)
            out["fit_set"] = f"corpus:{value}"
        elif key == "first_last_layers" and isinstance(value, str):
            try:
                out[key] = parse_layers(value)
            except argparse.ArgumentTypeError as err:
                raise UserError(f"{where}: first_last_layers: {err}") from None
        elif key == "batch_size" and isinstance(value, str):  # README documents `batch_size = "auto"`
            try:
                out[key] = parse_batch_size(value)
            except argparse.ArgumentTypeError as err:
                raise UserError(f"{where}: batch_size: {err}") from None
        elif key in names:
            check_field(BenchConfig, key, value, where)
            out[key] = tuple(value) if key == "first_last_layers" and isinstance(value, list) else value
        else:
            raise UserError(f"{where}: unknown setting '{key}'{did_you_mean(key, sorted(names))}")
    check_fields(BenchConfig, out, where)
    if params:
        out["method_params"] = params
    return out


def _task_tables(tables: Any, file: Path) -> tuple[str, ...]:
    """A config file's ``[[task]]`` tables as ``--tasks`` entries, paths from the file's folder."""
    from harness.core.data.declared import table_entry

    if tables is None:
        return ()
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise UserError(f"{file}: 'task' must be [[task]] tables, each with file = \"PATH\" or hf = \"DIR_OR_ID\"")
    return tuple(table_entry(t, file.parent, f"{file}: [[task]] #{i}") for i, t in enumerate(tables, start=1))


def load_config_file(path: str) -> dict[str, Any]:
    import tomllib

    file = Path(path).expanduser()
    if not file.is_file():
        raise UserError(f"--config {path}: no such file")
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(f"--config {path}: not UTF-8 text (byte {err.start}); save it as UTF-8 TOML") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"--config {path}: not valid TOML ({err})") from None
    data = {k.replace("-", "_"): v for k, v in data.items()}
    declared = _task_tables(data.pop("task", None), file)
    settings = _from_mapping(data, str(path))
    if "tasks" in settings or declared:
        from harness.core.data.declared import rebase

        settings["tasks"] = tuple(rebase(t, file.parent) for t in settings.get("tasks", ())) + declared
    if "method_params" in settings:
        from harness.runner.settings.validate import check_method_params

        settings["method_params"] = check_method_params(settings["method_params"], str(path))
    return settings


def config_from_args(namespace: dict[str, Any]) -> BenchConfig:
    """A parsed command line (flags, ``--set``, ``--config``) merged over the defaults, validated.
    Mode flags must have been taken out of ``namespace`` already."""
    from harness.runner.settings.validate import check_method_params, parse_set_options

    namespace.pop("debug", None)  # read before parsing (harness.runner.cli.exits)
    config_path = namespace.pop("config", None)
    set_options = parse_set_options(namespace.pop("set_options", None) or [])
    # The command line first: a plugin it names by file (--methods x.py:Class) is then known to the
    # config file's [plugin] table.
    cli = _from_mapping(namespace, "command line")
    settings = load_config_file(config_path) if config_path else {}
    merged_params = {**settings.pop("method_params", {})}
    given = [check_method_params(cli.pop("method_params", {}), None), check_method_params(set_options, "--set")]
    for params in given:
        for method, values in params.items():
            merged_params[method] = {**merged_params.get(method, {}), **values}
    explicit = frozenset([*settings, *cli])
    cfg = replace(BenchConfig(), **{**settings, **cli, "method_params": merged_params}, explicit=explicit)
    if cfg.paper is not None:
        from harness.runner.papers.data import load_paper

        load_paper(cfg.paper)  # an unknown name is one line with a suggestion, before anything runs
    return cfg.validate()


def from_cli(argv: Sequence[str] | None = None) -> tuple[BenchConfig, bool]:
    """``run_bench.py``'s command line into a validated config; the bool says ``--list`` was asked for."""
    namespace = vars(build_parser().parse_args(argv))
    if namespace.pop("list", False):
        return BenchConfig(), True
    return config_from_args(namespace), False
