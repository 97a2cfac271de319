"""The method name table. Adding a method = one new module + one line here.

Classes are imported on demand (``get_method``), so naming a method never costs more than its
own module; no method module imports torch at import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from harness.core.errors import UserError, did_you_mean

if TYPE_CHECKING:
    from harness.core.api import Method

METHODS: dict[str, str] = {
    "cls": "methods.pooling:Cls",
    "avg": "methods.pooling:Avg",
    "first-last": "methods.pooling:FirstLast",
    "whitening": "methods.whitening:Whitening",
    "flow": "methods.flow:BertFlow",
    "sbert": "methods.sbert:SBert",
    "simcse": "methods.simcse:SimCSE",
    "simcse-train": "methods.simcse_train:SimCSETrain",
    "cross-encoder": "methods.cross_encoder:CrossEncoder",
    "dse": "methods.dse:DSE",
    "random": "methods.random_baseline:RandomBaseline",
}


# Classes registered in this process (plugins, encoder objects from ``harness.evaluate``), by name.
REGISTERED: dict[str, type[Method]] = {}


def register_method(cls: type[Method]) -> None:
    """Make ``cls`` a method of this process under ``cls.name`` (registering the name again replaces
    the earlier class); a built-in name is refused, so a plugin never shadows a published method."""
    if cls.name in METHODS:
        raise UserError(f"method name '{cls.name}' is a built-in method's; give yours another name")
    REGISTERED[cls.name] = cls


def get_method(name: str) -> type[Method]:
    """The class registered under ``name``; an unknown name is a one-line error with a suggestion."""
    if name in REGISTERED:
        return REGISTERED[name]
    if name not in METHODS:
        known = [*METHODS, *REGISTERED]
        raise UserError(f"unknown method '{name}'{did_you_mean(name, known)}; "
                        f"known methods: {', '.join(known)} (see --list)")
    module_name, _, class_name = METHODS[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def all_methods() -> list[type[Method]]:
    return [get_method(name) for name in [*METHODS, *REGISTERED]]

