"""One runtime checker of values against type annotations: run-wide settings and result records.

The run config's field annotations (:mod:`harness.runner.settings.config`) and the record's
TypedDicts (:mod:`harness.runner.records.schema`) are the only statement of what a setting or a
record holds; this module reads them, so a field added there is checked with no change here. It sits
in the core because both rooms use it (records are above settings, the core is below both).

Why our own and not pydantic's ``TypeAdapter`` (pydantic 2 is installed, through mteb):

* cost: ``import pydantic`` plus a ``TypeAdapter`` takes ~0.3 s (``python -X importtime``) and
  this checker nothing beyond ``typing``; the command line checks settings before every run, and
  ``import harness`` must stay cheap;
* words: an error is one line in our words, ``bench.toml: seed = 1.5: expected an integer`` or
  ``record.task.n_pairs is not an integer``; pydantic's multi-line reports would need translating;
* strictness as users mean it: ``true`` is not an integer (Python says ``True`` is an ``int``),
  ``"8"`` is not an integer either (pydantic's default mode would convert it), nor is one beyond 64
  bits, and NaN or ±inf is not a number (records are strict JSON); a TOML array stands for a tuple;
* speed where it matters: a record's per-pair lists (thousands of floats, thousands of records) are
  checked by type set and one finite sum in C before falling back to item by item.

What it understands: ``Any``, ``None``, ``bool``, ``int``, ``float``, ``str`` and other classes
(``isinstance``), ``X | Y``, ``list[X]``, ``tuple[X, ...]`` (a tuple or a list), ``dict[K, V]``
(values checked), ``frozenset[X]``/``set[X]`` and TypedDicts (required keys, ``NotRequired``).

>>> from typing import TypedDict
>>> class Task(TypedDict):
...     name: str
...     n_pairs: int
>>> problem({"name": "stsb", "n_pairs": True}, Task, "task")
'task.n_pairs is not an integer'
>>> fits((1, -1), tuple[int, ...]), fits([1, "a"], tuple[int, ...]), describe(tuple[int, ...])
(True, False, 'a list of integers')
"""

from __future__ import annotations

import functools
import math
import sys
import types
import typing
from typing import Any, NotRequired

from harness.core.errors import UserError

_NAMES = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    type(None): "null",
}
_INT64 = 1 << 63  # an integer from outside fits the widest integer dtype (numpy's, torch's)
_PLURALS = {"an integer": "integers", "a string": "strings", "a number": "numbers"}


def describe(hint: Any) -> str:
    """What a value of ``hint`` is, in words: ``int`` → "an integer"; ``str | None`` → "a string"
    (None is the unset value, never what a user is asked to write); ``tuple[int, ...]`` → "a list of
    integers"; ``dict[...]`` and TypedDicts → "an object"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        named = [describe(a) for a in args if a is not type(None)]
        return " or ".join(named) if named else "null"
    if origin in (tuple, list, frozenset, set):
        inner = describe(args[0]) if args else "anything"
        return "a list of " + _PLURALS.get(inner, inner)
    if origin is dict or typing.is_typeddict(hint):
        return "an object"
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is a value of ``hint``."""
    return problem(value, hint, "value") is None


def problem(value: Any, hint: Any, path: str) -> str | None:
    """Why ``value`` does not fit ``hint`` (``"{path}.key is not an integer"``, ``"{path} lacks
    key"``), or None when it does. Of a union, the first member's reason is given."""
    if hint is Any:
        return None
    if typing.is_typeddict(hint):
        return _typeddict_problem(value, hint, path)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        checked = [problem(value, arg, path) for arg in args]
        return None if any(c is None for c in checked) else next(c for c in checked if c)
    if origin is dict:
        if not isinstance(value, dict):
            return f"{path} is not an object"
        inner = args[1] if args else Any
        return next((p for k, v in value.items() if (p := problem(v, inner, f"{path}.{k}"))), None)
    if origin in (list, tuple, frozenset, set):
        return _items_problem(value, origin, args[0] if args else Any, path)
    return None if _scalar_fits(value, hint) else f"{path} is not {describe(hint)}"


def held_to(
    value: Any, schema: Any, where: object, fix: str, error: type[Exception] = UserError
) -> Any:
    """``value`` when it fits ``schema``, a format's one declaration (:func:`problem`: an integer
    within 64 bits, a finite float, ``true`` neither); otherwise ``error`` with one line naming the
    field: ``"WHERE: data[2].embedding is not a list of numbers; FIX"``."""
    try:
        found = problem(value, schema, "")
    except RecursionError:  # a recursive schema (a post-processor's processors) nested too deep
        found = "nested too deep"
    if found is not None:
        raise error(f"{where}: {found.strip(' .')}; {fix}")
    return value


def _scalar_fits(value: Any, hint: Any) -> bool:
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:  # True is an int to Python, not to a user writing `seed = true`; 64 bits
        return isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64
    if hint is float:  # finite and within a float64: never NaN, ±inf, nor an integer of 400 digits
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and abs(value) <= sys.float_info.max
    return isinstance(value, hint)


def _items_problem(value: Any, origin: Any, inner: Any, path: str) -> str | None:
    """A list (``list[X]``), a tuple or list (``tuple[X, ...]``: a TOML array stands for a tuple),
    or a set, each item of ``inner``."""
    accepted = {list: list, tuple: tuple | list, frozenset: frozenset | set, set: frozenset | set}[
        origin
    ]
    if not isinstance(value, accepted):
        return f"{path} is not {describe(list[inner])}"
    # Fast paths for the per-pair lists (thousands of items per record, thousands of records):
    # types compared as a set in C, and one sum that is finite only if every term is (a NaN or
    # ±inf stays non-finite; an overflow to inf merely falls through to the item-by-item check).
    kinds = set(map(type, value))
    if inner in (float, float | None) and kinds <= {float} and math.isfinite(sum(value)):
        return None
    if inner is str and kinds <= {str}:
        return None
    return next((p for i, v in enumerate(value) if (p := problem(v, inner, f"{path}[{i}]"))), None)


def _typeddict_problem(value: Any, hint: Any, path: str) -> str | None:
    if not isinstance(value, dict):
        return f"{path} is not an object"
    hints, required = _fields(hint)
    missing = sorted(required - set(value))
    if missing:
        return f"{path} lacks {', '.join(missing)}"
    for key, inner in hints.items():
        if key in value and (found := problem(value[key], inner, f"{path}.{key}")):
            return found
    return None


@functools.cache
def _fields(hint: Any) -> tuple[dict[str, Any], frozenset[str]]:
    """A TypedDict's field annotations (``NotRequired`` unwrapped) and its required keys, read once
    per class: resolving the hints each time cost more than checking the record."""
    hints = typing.get_type_hints(hint, include_extras=True)
    # NotRequired read from the hints: with postponed annotations __required_keys__ cannot see it;
    # a class declared total=False requires none
    required = frozenset(k for k, v in hints.items() if typing.get_origin(v) is not NotRequired)
    required = required if hint.__total__ else frozenset()
    return {k: _unwrap(v) for k, v in hints.items()}, required


def _unwrap(hint: Any) -> Any:
    """``NotRequired[X]`` → ``X`` (get_type_hints keeps the wrapper on older Pythons)."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is NotRequired else hint


@functools.lru_cache(maxsize=16)
def annotations_of(owner: type) -> dict[str, Any]:
    """A class's annotations, resolved (its module may use postponed annotations)."""
    return typing.get_type_hints(owner)
