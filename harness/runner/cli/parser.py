"""The command line and the config file: flags and TOML settings → a validated ``BenchConfig``.

Precedence is CLI > config file > defaults. Method options become ``--<method>-<option>`` flags and
``[<method>]`` tables, collected from the method classes themselves.
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


def build_parser() -> argparse.ArgumentParser:
    from methods import all_methods

    p = _Parser(prog="run_bench.py", argument_default=argparse.SUPPRESS,
                description="Benchmark sentence-embedding methods on STS tasks.")
    p.add_argument("--list", action="store_true", help="print methods and tasks, then exit")
    p.add_argument("--config", help="TOML file of settings (CLI flags override it)")
    p.add_argument("--methods", nargs="+", help="method names, space- or comma-separated (see --list)")
    p.add_argument("--tasks", nargs="+", help="task names: sts12..sts16, stsb, sickr")
    p.add_argument("--backbone", help="HF id, local folder, or 'minilm' (the packaged all-MiniLM-L6-v2)")
    p.add_argument("--revision", help="hub revision (branch, tag or commit) of --backbone")
    p.add_argument("--source", help="where tasks are read from: packaged | senteval | hub")
    p.add_argument("--senteval-dir", help="SentEval's data/downstream folder (with --source senteval)")
    p.add_argument("--hub-root", help="local folder standing in for the hub (--source hub, --fit-set nli)")
    p.add_argument("--aggregation", help="all | mean | wmean over a task's subsets")
    p.add_argument("--fit-set", help="what whitening/flow fit on: target | test | train | corpus:FILE | nli")
    p.add_argument("--fit-corpus", metavar="FILE", help="same as --fit-set corpus:FILE")
    p.add_argument("--first-last-layers", type=parse_layers,
                   help="hidden_states ids for first-last (default 1,-1; SimCSE's paper table used 0,-1)")
    p.add_argument("--dtype", help="fp32 | bf16 | fp16 (autocast); default fp32")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N | cuda:0,1,... (one worker per GPU)")
    p.add_argument("--batch-size", type=parse_batch_size, help="sentences per batch, or 'auto' (token budget)")
    p.add_argument("--max-tokens", type=int, help="token budget of an 'auto' batch (default 4096 CPU, 65536 GPU)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: the cores this process may use)")
    p.add_argument("--backend", help="local | dask | ray: where encode windows run (default local)")
    p.add_argument("--scheduler-address", help="dask scheduler (tcp://HOST:8786) or ray cluster address")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (jobs, unique sentences, what is cached) and run nothing")
    p.add_argument("--max-length", type=int, help="tokens per sentence (truncation); default 128")
    p.add_argument("--cache-dir", help="embedding cache (default $STS_BENCH_CACHE or ~/.cache/sts-bench)")
    p.add_argument("--output-dir", help="where runs/, leaderboard.csv/.md and plots/ go (default results)")
    p.add_argument("--baseline", help="CSV leaderboard to compare against; exit 1 on a drop > --tolerance")
    p.add_argument("--baseline-partial", action="store_true",
                   help="compare only the cells the --baseline has, instead of failing on the rest (exit 2)")
    p.add_argument("--tolerance", type=float, help="allowed drop in points vs --baseline (default 0.5)")
    p.add_argument("--seed", type=int)
    p.add_argument("--bootstrap", type=int, help="bootstrap rounds for the 95%% CI (0 = off; default 1000)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a checkpoint's own code (off)")
    p.add_argument("--encoder-impl", help="auto | native | transformers: auto runs plain BERT and RoBERTa checkpoints "
                   "with the built-in torch encoder (same function, no transformers import)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="skip the leaderboard PNG")
    p.add_argument("--cost", action="store_true",
                   help="query x candidate cost of cross-encoder vs dse: cost.md, cost.json, plots/cost.png")
    p.add_argument("--paper", help="run a paper's own protocol and write results/paper-<name>.md/.csv: "
                   "bert-flow | bert-whitening | simcse | sbert | dse (flags given override it)")
    p.add_argument("--history", action="store_true",
                   help="draw every method's score by commit from history.jsonl, name the commits where a score "
                        "moved beyond its noise, rebuild index.html; runs no benchmark")
    p.add_argument("--allow-gold-out-of-range", action="store_true",
                   help="warn instead of failing when a gold score lies outside the task's range (STS 0-5, SICK 1-5)")
    p.add_argument("--allow-undefined", action="store_true",
                   help="record a correlation that cannot be computed (constant gold or similarity, fewer than 3 "
                        "pairs) as undefined, unranked, instead of failing with exit 2")
    p.add_argument("--debug", action="store_true", help="print the traceback of a failure (also STS_BENCH_DEBUG=1)")
    p.add_argument("--diagnostics", action="store_true",
                   help="anisotropy diagnostics per method and task: diagnostics.md + plots/diagnostics-<task>.png")
    for method in all_methods():
        for opt in method.options:
            flag, dest = f"--{method.name}-{opt.name}".replace("_", "-"), f"{method.name}.{opt.name}"
            if isinstance(opt.default, bool):  # an on/off option is a bare flag
                p.add_argument(flag, dest=dest, action="store_true", help=f"[{method.name}] {opt.help}")
            else:
                p.add_argument(flag, dest=dest, type=opt.type, choices=opt.choices, help=f"[{method.name}] {opt.help}")
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
            out[key] = split_names(listed)
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
    settings = _from_mapping({k.replace("-", "_"): v for k, v in data.items()}, str(path))
    if "method_params" in settings:
        from harness.runner.settings.validate import check_method_params

        settings["method_params"] = check_method_params(settings["method_params"], str(path))
    return settings


def from_cli(argv: Sequence[str] | None = None) -> tuple[BenchConfig, bool]:
    """Parse ``argv`` into a validated config; the bool says ``--list`` was asked for."""
    from harness.runner.settings.validate import check_method_params

    namespace = vars(build_parser().parse_args(argv))
    namespace.pop("debug", None)  # read by run_bench.py before parsing (harness.runner.cli.exits)
    list_only = bool(namespace.pop("list", False))
    config_path = namespace.pop("config", None)
    settings = load_config_file(config_path) if config_path else {}
    cli = _from_mapping(namespace, "command line")
    merged_params = {**settings.pop("method_params", {})}
    for method, values in check_method_params(cli.pop("method_params", {}), None).items():
        merged_params[method] = {**merged_params.get(method, {}), **values}
    explicit = frozenset([*settings, *cli])
    cfg = replace(BenchConfig(), **{**settings, **cli, "method_params": merged_params}, explicit=explicit)
    if list_only:
        return cfg, True
    if cfg.paper is not None:
        from harness.runner.papers.data import load_paper

        load_paper(cfg.paper)  # an unknown name is one line with a suggestion, before anything runs
    return cfg.validate(), False
