"""Settings checked by type and range before anything is computed.

Run-wide settings are checked from their declarations (:mod:`.declare`): the type from the
``BenchConfig`` field's annotation (:mod:`harness.core.typecheck`, the checker records use too),
then the declared choices, range and a setting's own check, so a field added there is checked with
no change here. Method options are checked through their ``Option``: a config-file value is
converted with ``Option.type`` (as argparse converts a flag), must be one of ``Option.choices``,
and numbers must be finite and within the range their default implies (a count whose default is
positive must be ≥ 1, a number whose default is not negative must not be negative).

>>> from dataclasses import dataclass
>>> @dataclass
... class Settings:
...     seed: int = 0
>>> check_field(Settings, "seed", 1.5, "bench.toml")
Traceback (most recent call last):
...
harness.core.errors.UserError: bench.toml: seed = 1.5: expected an integer
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.core.errors import UserError, did_you_mean
from harness.core.typecheck import annotations_of, describe, fits

if TYPE_CHECKING:
    from harness.runner.settings.declaration import Setting


def check_field(owner: type, name: str, value: Any, where: str) -> None:
    """Raise a one-line UserError when ``value`` does not fit the type of field ``name`` of the
    dataclass ``owner`` (``BenchConfig``)."""
    hint = annotations_of(owner).get(name)
    if hint is not None and not fits(value, hint):
        beyond = isinstance(value, int) and fits(0, hint) and not fits(0.5, hint)
        within = " within 64 bits" if beyond else ""  # an integer, but wider than any dtype
        raise UserError(f"{where}: {name} = {value!r}: expected {describe(hint)}{within}")


def check_fields(owner: type, values: Mapping[str, Any], where: str) -> None:
    for name, value in values.items():
        check_field(owner, name, value, where)


def check_setting(s: Setting, value: Any) -> None:
    """The declared choices, range and own check of one setting, its type already checked; the
    message names the flag: ``--aggregation median: expected one of all, mean, wmean``."""
    if value is None:  # the unset value of an optional setting (its meaning is the field's)
        return
    if s.choices is not None and value not in (choices := tuple(s.choices())):
        raise UserError(
            f"{s.flag} {value}: expected one of {', '.join(choices)}{did_you_mean(value, choices)}"
        )
    if s.minimum is not None and value < s.minimum:
        said = (
            "must not be negative"
            if s.minimum == 0
            else "must be a positive integer"
            if s.minimum == 1
            else f"must be at least {s.minimum}"
        )
        raise UserError(f"{s.flag} {value}: {said}")
    if s.maximum is not None and value > s.maximum:
        why = f" ({s.why_maximum})" if s.why_maximum else ""
        raise UserError(f"{s.flag} {value}: must be at most {s.maximum}{why}")
    if s.check is not None:
        s.check(value)


def split_names(values: Sequence[str]) -> tuple[str, ...]:
    """``["avg,cls", "flow"]`` → ``("avg", "cls", "flow")``: space- or comma-separated lists."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def split_tasks(values: Sequence[str]) -> tuple[str, ...]:
    """``--tasks`` entries: names as :func:`split_names`, but an entry with its own source
    (``file:p.tsv?range=0,5``) keeps its commas; a comma splits it only before another ``file:``
    or ``hf:`` entry. ``["stsb,file:a.tsv?range=-1,1"]`` → ``("stsb", "file:a.tsv?range=-1,1")``."""
    from harness.core.data.declared import KINDS, is_declared

    starts = re.compile(r",(?=\s*(?:" + "|".join(KINDS) + r"):)", re.IGNORECASE)
    out: list[str] = []
    for value in values:
        for part in starts.split(value):
            out += [part.strip()] if is_declared(part.strip()) else split_names([part])
    return tuple(out)


def parse_layers(text: str) -> tuple[int, ...]:
    """``"1,-1"`` (or ``"1 -1"``) → ``(1, -1)``."""
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


BOOLEAN_WORDS = ("1", "true", "yes", "on", "0", "false", "no", "off")


def _converted(opt: Any, value: Any, label: str) -> Any:
    """A config-file value through ``Option.type``, the way argparse converts a flag's text."""
    if isinstance(value, list | dict):
        raise UserError(f"{label}: expected a single value")
    if opt.type is str:
        if not isinstance(value, str):
            raise UserError(f"{label}: expected a string")
        # A free text keeps its spaces (a prompt prefix 'query: '); a name among choices does not.
        return value.strip() if opt.choices is not None else value
    if isinstance(value, bool) and not isinstance(opt.default, bool):
        raise UserError(f"{label}: expected a number or a name, not true/false")
    if (
        isinstance(opt.default, bool)
        and not isinstance(value, bool)
        and str(value).lower() not in BOOLEAN_WORDS
    ):
        # a yes/no option's converter may read any other word as "no": say so instead of guessing
        raise UserError(f"{label}: expected true or false (also 1/0, yes/no, on/off)")
    try:
        return opt.type(value.strip() if isinstance(value, str) else str(value))
    except (TypeError, ValueError) as exc:
        kind = getattr(opt.type, "__name__", "value")
        said = str(exc)
        # A method's own converter may say what it expects
        # (``k must be auto or a positive integer``); int()'s and float()'s own texts ("invalid
        # literal for int() ...") are not for users.
        if (
            kind not in ("int", "float")
            and said
            and not said.startswith(("invalid literal", "could not convert"))
        ):
            raise UserError(f"{label}: {said}") from None
        expected = {"int": "an integer", "float": "a number"}.get(kind)
        if expected is None:
            # a method's converter that reads a number with int() or float() (whitening's k: an
            # integer, or all): name the type it failed on, and what the option means
            wanted = (
                "an integer"
                if said.startswith("invalid literal for int()")
                else "a number"
                if said.startswith("could not convert")
                else "a valid value"
            )
            expected = f"{wanted} ({opt.help})"
        raise UserError(f"{label}: expected {expected}") from None


def check_option(opt: Any, value: Any, label: str, convert: bool) -> Any:
    """Check (and, for config-file values, convert) one method option; returns the value to use.
    ``label`` names the setting and its value as the user wrote it
    (``bench.toml: [flow] lr = -1``)."""
    if convert:
        value = _converted(opt, value, label)
    if opt.choices is not None and value not in opt.choices:
        raise UserError(f"{label}: expected one of {', '.join(map(str, opt.choices))}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if not math.isfinite(value):
        raise UserError(f"{label}: expected a finite number")
    default = opt.default
    counts = isinstance(value, int) and (
        default is None or (isinstance(default, int) and default >= 1)
    )
    if counts and value < 1:
        raise UserError(f"{label}: expected a positive integer")
    if (default is None or (isinstance(default, int | float) and default >= 0)) and value < 0:
        raise UserError(f"{label}: must not be negative")
    return value


def parse_set_options(items: list[str]) -> dict[str, dict[str, str]]:
    """``["whitening.k=256", "flow.lr=1e-4"]`` →
    ``{"whitening": {"k": "256"}, "flow": {"lr": "1e-4"}}`` (values as text:
    :func:`check_method_params` converts them with the option's type).

    >>> parse_set_options(["whitening.k=256"])
    {'whitening': {'k': '256'}}
    """
    out: dict[str, dict[str, str]] = {}
    for item in items:
        target, equals, value = item.partition("=")
        method, dot, option = target.strip().partition(".")
        if not (equals and dot and method and option):
            raise UserError(
                f"--set {item}: expected METHOD.OPTION=VALUE, e.g. --set whitening.k=256"
            )
        # the value verbatim: a prompt's spaces are part of it (_converted strips what is not text)
        out.setdefault(method, {})[option.strip().replace("-", "_")] = value
    return out


def method_names(names: Sequence[str]) -> tuple[str, ...]:
    """Method names with each plugin reference (``x.py:Class``, ``module:Class``) loaded and
    replaced by its method's name; other names are left to the run (an unknown one fails there)."""
    from methods import method_name
    from methods.plugins import is_reference

    return tuple(method_name(name) if is_reference(name) else name for name in names)


def check_method_params(
    params: Mapping[str, Mapping[str, Any]], where: str | None
) -> dict[str, dict[str, Any]]:
    """Every method option checked; ``where`` is the config file or ``--set`` (values are
    converted) or None for values that came from flags (argparse converted them: only choices and
    ranges are left)."""
    from methods import get_method

    out: dict[str, dict[str, Any]] = {}
    for method_name, values in params.items():
        if not isinstance(values, Mapping):
            raise UserError(f"{where or 'config'}: [{method_name}] must be a table of options")
        options = {opt.name: opt for opt in get_method(method_name).options}
        out[method_name] = {}
        for name, value in values.items():
            if name not in options:
                raise UserError(
                    f"unknown option '{name}' for method {method_name}"
                    f"{did_you_mean(name, sorted(options))}"
                )
            if where == "--set":
                label = f"--set {method_name}.{name}={value}"
            elif where:
                label = f"{where}: [{method_name}] {name} = {value!r}"
            else:
                label = f"--{method_name}-{name}".replace("_", "-") + f" {value}"
            out[method_name][name] = check_option(
                options[name], value, label, convert=where is not None
            )
    return out
