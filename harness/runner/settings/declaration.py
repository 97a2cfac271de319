"""A run-wide setting is declared once: a ``BenchConfig`` field whose default is :func:`setting`.

The declaration says everything the harness needs about a setting: its default (the field's),
its type (the field's annotation), its ``--help`` group and text, its choices and range, whether it
is a protocol setting (written into every record's ``protocol``), and how the command line spells
or parses it where that is special. From the declarations come, with nothing typed twice:

* the flags of ``sts-bench run|plan|paper`` and ``run_bench.py``, in their groups, with their
  defaults in ``--help`` (:mod:`harness.runner.cli.parser`);
* the config file's keys (the field names; dashes read as underscores) and how a TOML value is
  read (:func:`harness.runner.cli.parser.from_mapping`);
* the checks of types, choices and ranges, with one ``error:`` line each
  (:meth:`BenchConfig.validate`, :func:`harness.runner.settings.validate.check_setting`);
* the keyword arguments ``harness.evaluate`` accepts (:func:`evaluate_settings`);
* ``BenchConfig.protocol()`` (the declarations with ``protocol=True``);
* the values the core receives (``reaches=``): the run's ``EncodeSettings`` and the
  ``SpecRequest`` methods build their specs from are filled by :func:`reached`, not copied field
  by field, so a setting that reaches the engine is one declaration too.

A setting typed ``dict[str, str]`` is a table: ``--NAME KEY=VALUE``, repeatable, a ``[NAME]`` table
of a config file, a dict in Python (``--data-dir senteval=DIR``); a config file's table and the
command line's entries merge key by key. A setting declared with ``fills=(TABLE, KEY)`` is an older
spelling of one entry of a table (``--senteval-dir DIR`` is ``--data-dir senteval=DIR``): the
command line and a config file read it into the table.

Choices that come from a registry are zero-argument callables, called when needed: importing
``BenchConfig`` must not import torch or the registries.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Config:
...     seed: int = setting(1234, group="statistics", help="of every draw", minimum=0)
>>> (s,) = declared(Config)
>>> s.name, s.default, s.flag, s.minimum, Config().seed
('seed', 1234, '--seed', 0, 1234)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
KEY = "sts_bench_setting"  # the field metadata key that holds a field's Setting


@dataclasses.dataclass(frozen=True)
class Alias:
    """A second spelling that sets the setting through ``to`` (``--fit-corpus FILE`` is
    ``--fit-set corpus:FILE``); ``name`` is also its config-file key."""

    name: str
    metavar: str
    help: str
    to: Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One run-wide setting. ``name``, ``hint`` (the resolved annotation) and ``default`` are filled
    in from its field by :func:`declared`; the rest is the :func:`setting` call's."""

    group: str | None  # the --help group; None: no flag of its own (a subcommand sets it)
    help: str | Callable[[], str]
    shown: str | None = None  # the default as --help says it, where the value says nothing
    choices: Callable[[], Sequence[str]] | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    why_maximum: str = ""  # said after a value above ``maximum``
    protocol: bool = False  # changes scores: in BenchConfig.protocol(), so in every record
    metavar: str | None = None
    text: Callable[[str], Any] | None = None  # one command-line word → value (also a TOML string)
    many: Callable[[Sequence[str]], tuple[str, ...]] | None = None  # words (nargs +) → value
    check: Callable[[Any], None] | None = None  # a check of its own; raises UserError
    command: str | None = None  # the sts-bench subcommand that sets it (plan: dry_run), not a flag
    alias: Alias | None = None
    fills: tuple[str, str] | None = None  # (table setting, key): an older spelling of one entry
    # the core values it fills: "encode" (a field of EncodeSettings of the same name), "encode.impl"
    # (of another name), "spec" (SpecRequest); ``passed`` computes what is passed from the config
    reaches: tuple[str, ...] = ()
    passed: Callable[[Any], Any] | None = None
    name: str = ""
    hint: Any = None
    default: Any = None

    @property
    def table(self) -> bool:
        """A ``dict[str, str]`` setting: ``--NAME KEY=VALUE`` (repeatable), a ``[NAME]`` table."""
        import typing

        members = [a for a in typing.get_args(self.hint) if a is not type(None)]
        return typing.get_origin(self.hint) is dict or any(
            typing.get_origin(a) is dict for a in members
        )

    @property
    def flag(self) -> str:
        """``--max-length``; a switch that is on by default is turned off: ``--no-plots``."""
        dashed = self.name.replace("_", "-")
        return f"--no-{dashed}" if self.default is True else f"--{dashed}"

    def help_text(self) -> str:
        """The help line, its default appended (``(default: all)``) unless the value says nothing
        to a reader (None, an on/off switch)."""
        text = self.help() if callable(self.help) else self.help
        shown = self.shown if self.shown is not None else shown_default(self.default)
        return f"{text} (default: {shown})" if shown else text


def shown_default(value: Any) -> str:
    """A default as --help shows it: ``(1, -1)`` → ``1,-1``, ``("avg", "cls")`` → ``avg cls``;
    nothing for None and on/off switches."""
    if value is None or isinstance(value, bool) or value == {}:
        return ""
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, tuple | list):
        joint = "," if all(isinstance(v, int) for v in value) else " "
        return joint.join(map(str, value))
    return str(value)


def setting(
    default: T | None = None,
    *,
    factory: Callable[[], T] | None = None,
    group: str | None,
    help: str | Callable[[], str],
    **declared: Any,
) -> T:
    """A ``BenchConfig`` field that is a run-wide setting (see :class:`Setting` for ``declared``).
    Typed as its default, so the class reads (to mypy and to people) as plain typed fields."""
    spec = Setting(group=group, help=help, **declared)
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={KEY: spec})
    return dataclasses.field(default=default, metadata={KEY: spec})  # type: ignore[return-value]


@functools.cache
def declared(owner: type) -> tuple[Setting, ...]:
    """The settings of the dataclass ``owner``, in field order, each with its name, type and default
    (a factory's default as it was when first read: help and docs show it; ``BenchConfig()`` calls
    the factory itself)."""
    from harness.core.typecheck import annotations_of

    hints = annotations_of(owner)
    out = []
    for f in dataclasses.fields(owner):
        spec = f.metadata.get(KEY)
        if spec is None:
            continue
        default = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(dataclasses.replace(spec, name=f.name, hint=hints[f.name], default=default))
    return tuple(out)


def reached(config: Any, target: str) -> dict[str, Any]:
    """What the settings of ``config`` (a ``BenchConfig``) declared ``reaches=target`` pass on, by
    the receiving field's name: the keyword arguments of the core value ``target`` names.

    >>> @dataclasses.dataclass(frozen=True)
    ... class Config:
    ...     encoder_impl: str = setting("auto", group="e", help="", reaches=("encode.impl",))
    ...     threads: int = setting(0, group="e", help="", reaches=("encode",),
    ...                            passed=lambda config: config.threads or 8)
    >>> reached(Config(), "encode")
    {'impl': 'auto', 'threads': 8}
    """
    out = {}
    owner: type = type(config)
    for s in declared(owner):
        for reach in s.reaches:
            name, _, field = reach.partition(".")
            if name == target:
                out[field or s.name] = s.passed(config) if s.passed else getattr(config, s.name)
    return out


def by_name(owner: type) -> dict[str, Setting]:
    return {s.name: s for s in declared(owner)}


def groups(owner: type) -> dict[str, list[Setting]]:
    """The settings with a flag, by --help group; groups in the order of their first setting."""
    out: dict[str, list[Setting]] = {}
    for s in declared(owner):
        if s.group is not None and s.command is None:
            out.setdefault(s.group, []).append(s)
    return out


def commands(owner: type) -> dict[str, Setting]:
    """The settings a subcommand sets, by subcommand: ``{"plan": dry_run, "history": ..., ...}``."""
    return {s.command: s for s in declared(owner) if s.command is not None}


def evaluate_settings(owner: type, own: Sequence[str]) -> tuple[str, ...]:
    """What ``harness.evaluate`` takes as keyword settings: every setting but those a subcommand
    sets (a mode, not a setting of a run) and those ``evaluate`` has as arguments of its own."""
    return tuple(s.name for s in declared(owner) if s.command is None and s.name not in own)
