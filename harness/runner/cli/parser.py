"""The command line and the config file: flags and TOML settings → a validated ``BenchConfig``.

Precedence is CLI > config file > defaults. Every flag of a setting, its group, metavar, type and
``--help`` line with its default, and every config-file key, is derived from the setting's one
declaration in ``BenchConfig`` (:mod:`harness.runner.settings.declaration`); this module holds only
what is not a setting: ``--config``, ``--set``, ``--debug`` and ``run_bench.py``'s ``--list``.
Method options are ``--set method.option=value`` (repeatable) and ``[method]`` tables of a config
file, collected from the method classes themselves; the older ``--<method>-<option>`` flags stay
as hidden aliases.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.core.errors import UserError, did_you_mean
from harness.core.hashing import read_table
from harness.runner.settings.config import BenchConfig
from harness.runner.settings.declaration import Setting, by_name, commands, groups

# split_names and split_tasks are re-exported: callers import them from here
from harness.runner.settings.validate import (  # noqa: F401
    check_field,
    parse_batch_size,
    parse_layers,
    split_names,
    split_tasks,
)

# Flags that are not settings, each at the end of its --help group: (group, flag, keywords).
NOT_SETTINGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "what to run",
        "--set",
        {
            "action": "append",
            "dest": "set_options",
            "metavar": "METHOD.OPTION=VALUE",
            "help": "a method option, repeatable: --set whitening.k=256 (options: sts-bench list "
            "METHOD)",
        },
    ),
    (
        "what to run",
        "--config",
        {"metavar": "FILE", "help": "TOML file of settings; flags override it"},
    ),
    (
        "outputs",
        "--debug",
        {
            "action": "store_true",
            "help": "print the traceback of a failure (also STS_BENCH_DEBUG=1)",
        },
    ),
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line (through UserError) instead of usage + exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see --help)")


def _word_type(hint: Any) -> Any:
    """What argparse converts a flag's word with: ``int`` for ``int`` and ``int | None``, ``float``
    for ``float``; None (the text itself) for the rest."""
    import typing

    members = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return members[0] if len(members) == 1 and members[0] in (int, float) else None


def add_setting_flag(group: Any, s: Setting, text: str | None = None) -> None:
    """``s``'s flag (and its alias's), as its declaration says (``text``: another help line). A
    choice is checked by BenchConfig.validate, which suggests the name meant (argparse's own choices
    would not), so its metavar only lists them: ``{all,mean,wmean}``."""
    # An older spelling (--senteval-dir = --data-dir senteval=DIR) works but is not listed: --help
    # shows one way to say each thing (docs/USAGE.md names the aliases).
    text = argparse.SUPPRESS if s.fills else text or s.help_text()
    if isinstance(s.default, bool):  # a switch: --diagnostics turns it on, --no-plots off
        group.add_argument(
            s.flag, dest=s.name, action="store_false" if s.default else "store_true", help=text
        )
    elif s.many is not None:
        group.add_argument(s.flag, dest=s.name, nargs="+", metavar=s.metavar, help=text)
    elif s.table:  # --data-dir senteval=DIR --data-dir hub=DIR
        group.add_argument(s.flag, dest=s.name, action="append", metavar=s.metavar, help=text)
    else:
        metavar = s.metavar or ("{" + ",".join(s.choices()) + "}" if s.choices else None)
        group.add_argument(
            s.flag, dest=s.name, type=s.text or _word_type(s.hint), metavar=metavar, help=text
        )
    if s.alias is not None:
        group.add_argument(
            "--" + s.alias.name.replace("_", "-"),
            dest=s.alias.name,
            metavar=s.alias.metavar,
            help=argparse.SUPPRESS,
        )


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a run, in the groups the settings declare, then the method options' aliases."""
    for title, settings in groups(BenchConfig).items():
        group = parser.add_argument_group(title)
        for s in settings:
            add_setting_flag(group, s)
        for _, flag, keywords in (entry for entry in NOT_SETTINGS if entry[0] == title):
            group.add_argument(flag, **keywords)
    add_method_flags(parser)


def add_method_flags(parser: argparse.ArgumentParser) -> None:
    """``--<method>-<option>``: the older spelling of ``--set method.option=value``, hidden from
    --help and kept as aliases for scripts that use them."""
    from methods import builtin_methods

    # Built-ins only: building the parser must not import every installed plugin (they take --set).
    for method in builtin_methods():
        for opt in method.options:
            flag = f"--{method.name}-{opt.name}".replace("_", "-")
            dest = f"{method.name}.{opt.name}"
            if isinstance(opt.default, bool):  # an on/off option is a bare flag
                parser.add_argument(flag, dest=dest, action="store_true", help=argparse.SUPPRESS)
            else:
                parser.add_argument(
                    flag, dest=dest, type=opt.type, choices=opt.choices, help=argparse.SUPPRESS
                )


def add_mode_flags(parser: argparse.ArgumentParser) -> None:
    """``run_bench.py``'s modes as flags: ``--list [METHOD]`` and the settings a subcommand sets
    (``--dry-run`` is ``plan``, ``--history`` is ``history``, ``--paper NAME`` is ``paper
    NAME``)."""
    modes = parser.add_argument_group(
        "modes (sts-bench: the subcommands list, plan, history, paper)"
    )
    modes.add_argument(
        "--list",
        nargs="?",
        const="",
        metavar="METHOD",
        help="print methods, tasks, sources, fit sets and papers; with METHOD, its options",
    )
    for s in commands(BenchConfig).values():
        add_setting_flag(modes, s, mode_help(s))


def mode_help(s: Setting) -> str:
    """A subcommand's setting's help line; ``paper``'s names the papers (the settings room is
    below the papers and cannot read them)."""
    if s.name != "paper":
        return s.help_text()
    from harness.runner.presets.data import PAPERS

    return f"{s.help_text()}: {', '.join(PAPERS)}"


def build_parser() -> argparse.ArgumentParser:
    """``run_bench.py``: a run's flags and the modes as flags."""
    p = _Parser(
        prog="run_bench.py",
        argument_default=argparse.SUPPRESS,
        description="Benchmark sentence-embedding methods on STS tasks (also: the "
        "sts-bench command).",
    )
    add_mode_flags(p)
    add_run_flags(p)
    return p


def read_setting(s: Setting, value: Any, where: str) -> Any:
    """One setting's value from the command line (argparse has converted the words) or a config
    file (TOML's own types), checked against the field's type: a list setting takes a string or a
    list of strings and splits them (``methods = "avg,cls"``); a setting with a parser of its own
    reads a TOML string with it (``batch_size = "auto"``, ``first_last_layers = "1,-1"``); a TOML
    array stands for a tuple."""
    if s.many is not None:
        listed = [value] if isinstance(value, str) else value
        check_field(BenchConfig, s.name, listed, where)
        return s.many(listed)
    if s.table:  # the command line's KEY=VALUE words, or a config file's table
        from harness.core.typecheck import problem

        entries = parse_entries(s, value) if isinstance(value, list) else value
        if (why := problem(entries, s.hint, s.name)) is not None:
            raise UserError(f"{where}: {why}")
        return entries
    if s.text is not None and isinstance(value, str):
        try:
            value = s.text(value)
        except argparse.ArgumentTypeError as err:
            raise UserError(f"{where}: {s.name}: {err}") from None
    check_field(BenchConfig, s.name, value, where)
    return tuple(value) if isinstance(value, list) else value


def parse_entries(s: Setting, words: Sequence[Any]) -> dict[str, Any]:
    """A table setting's ``KEY=VALUE`` words (``--data-dir senteval=DIR``, repeatable) as a dict;
    one line for a word without ``=`` or a key given twice."""
    out: dict[str, Any] = {}
    for word in words:
        key, eq, value = str(word).partition("=")
        if not eq or not key.strip():
            raise UserError(f"{s.flag} {word}: expected {s.metavar or 'KEY=VALUE'}")
        key = key.strip()
        if key in out and out[key] != value:
            raise UserError(f"{s.flag}: {key} is given twice ({out[key]}, {value}); give it once")
        out[key] = value
    return out


def _fill(out: dict[str, Any], fills: list[tuple[Setting, Any]]) -> None:
    """Older spellings of table entries (``--senteval-dir DIR``) into their table (``data_dir``);
    one line when the table names another value for the same key."""
    for s, value in fills:
        if value is None:
            continue
        table, key = s.fills  # type: ignore[misc]
        entries = out.setdefault(table, {})
        if entries.setdefault(key, value) != value:
            flag = by_name(BenchConfig)[table].flag
            raise UserError(
                f"{s.flag} {value} and {flag} {key}={entries[key]} name two values of {key}; "
                "give one"
            )


def from_mapping(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Flat settings (a CLI namespace or a TOML table) → BenchConfig field values, each read and
    checked by :func:`read_setting`; ``method.option`` keys and ``[method]`` tables →
    ``method_params``; an older spelling of a table's entry (``senteval_dir``) into its table."""
    known = by_name(BenchConfig)
    aliases = {s.alias.name: s for s in known.values() if s.alias is not None}
    out: dict[str, Any] = {}
    params: dict[str, dict[str, Any]] = {}
    fills: list[tuple[Setting, Any]] = []
    for key, value in values.items():
        if key in known and known[key].table:
            out[key] = read_setting(known[key], value, where)
        elif key in known and known[key].fills is not None:
            fills.append((known[key], read_setting(known[key], value, where)))
        elif "." in key:
            method, _, option = key.partition(".")
            params.setdefault(method, {})[option] = value
        elif isinstance(value, dict):
            params.setdefault(key, {}).update(value)
        elif key in aliases:
            target = aliases[key]
            check_field(BenchConfig, target.name, value, where)
            out[target.name] = target.alias.to(value)  # type: ignore[union-attr]
        elif key in known:
            out[key] = read_setting(known[key], value, where)
        else:
            names = sorted([*known, *aliases])
            raise UserError(f"{where}: unknown setting '{key}'{did_you_mean(key, names)}")
    _fill(out, fills)
    if params:
        out["method_params"] = params
    return out


def _task_tables(tables: Any, file: Path) -> tuple[str, ...]:
    """A config file's ``[[task]]`` tables as ``--tasks`` entries, paths from the file's folder."""
    from harness.core.data.declared import table_entry

    if tables is None:
        return ()
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise UserError(
            f'{file}: \'task\' must be [[task]] tables, each with file = "PATH" or hf = "DIR_OR_ID"'
        )
    return tuple(
        table_entry(t, file.parent, f"{file}: [[task]] #{i}") for i, t in enumerate(tables, start=1)
    )


def load_config_file(path: str) -> dict[str, Any]:
    file = Path(path).expanduser()
    data = read_table(file, "--config", json_ok=False)
    data = {k.replace("-", "_"): v for k, v in data.items()}
    declared = _task_tables(data.pop("task", None), file)
    settings = from_mapping(data, str(path))
    if "tasks" in settings or declared:
        from harness.core.data.declared import rebase

        rebased = tuple(rebase(t, file.parent) for t in settings.get("tasks", ()))
        settings["tasks"] = rebased + declared
    if "method_params" in settings:
        from harness.runner.settings.validate import check_method_params

        settings["method_params"] = check_method_params(settings["method_params"], str(path))
    return settings


def config_from_args(namespace: dict[str, Any]) -> BenchConfig:
    """A parsed command line (flags, ``--set``, ``--config``) merged over the defaults, validated.
    ``--list`` must have been taken out of ``namespace`` already."""
    from harness.runner.settings.validate import check_method_params, parse_set_options

    namespace.pop("debug", None)  # read before parsing (harness.runner.cli.exits)
    config_path = namespace.pop("config", None)
    set_options = parse_set_options(namespace.pop("set_options", None) or [])
    # The command line first: a plugin it names by file (--methods x.py:Class) is then known to the
    # config file's [plugin] table.
    cli = from_mapping(namespace, "command line")
    settings = load_config_file(config_path) if config_path else {}
    merged_params = {**settings.pop("method_params", {})}
    given = [
        check_method_params(cli.pop("method_params", {}), None),
        check_method_params(set_options, "--set"),
    ]
    for params in given:
        for method, values in params.items():
            merged_params[method] = {**merged_params.get(method, {}), **values}
    explicit = frozenset([*settings, *cli])
    tables = {  # a table of the config file and the command line's entries merge key by key
        s.name: {**settings[s.name], **cli[s.name]}
        for s in by_name(BenchConfig).values()
        if s.table and s.name in settings and s.name in cli
    }
    cfg = replace(
        BenchConfig(),
        **{**settings, **cli, **tables, "method_params": merged_params},
        explicit=explicit,
    )
    if cfg.paper is not None:
        from harness.runner.presets.data import load_paper

        load_paper(cfg.paper)  # an unknown name is one line with a suggestion, before anything runs
    return cfg.validate()


def run_bench_command(argv: Sequence[str] | None) -> tuple[str, dict[str, Any]]:
    """``run_bench.py``'s command line as the ``sts-bench`` subcommand it stands for and its
    arguments: ``--list [METHOD]`` → ``list``, ``--dry-run`` → ``plan``, ``--history`` →
    ``history``, ``--paper NAME`` → ``paper``, otherwise ``run``. The mode flags' values stay in
    the arguments (``--paper NAME --dry-run`` plans the paper's rows)."""
    namespace = vars(build_parser().parse_args(argv))
    if "list" in namespace:
        return "list", {"method": namespace.pop("list") or None}
    chosen = [command for command, s in commands(BenchConfig).items() if namespace.get(s.name)]
    return (chosen[-1] if chosen else "run"), namespace


def from_cli(argv: Sequence[str] | None = None) -> tuple[BenchConfig, bool]:
    """``run_bench.py``'s command line into a validated config; the bool says ``--list`` was asked
    for."""
    command, namespace = run_bench_command(argv)
    if command == "list":
        return BenchConfig(), True
    return config_from_args(namespace), False
