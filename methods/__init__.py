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
    "sn": "methods.calibrations:StandardNormalization",
    "abtt": "methods.calibrations:AllButTheTop",
    "flow": "methods.flow:BertFlow",
    "sbert": "methods.sbert:SBert",
    "simcse": "methods.simcse:SimCSE",
    "simcse-train": "methods.simcse_train:SimCSETrain",
    "cross-encoder": "methods.cross_encoder:CrossEncoder",
    "dse": "methods.dse:DSE",
    "random": "methods.random_baseline:RandomBaseline",
}


def get_method(name: str) -> type[Method]:
    """The class registered under ``name``; an unknown name is a one-line error with a suggestion."""
    if name not in METHODS:
        raise UserError(f"unknown method '{name}'{did_you_mean(name, list(METHODS))}; "
                        f"known methods: {', '.join(METHODS)} (see --list)")
    module_name, _, class_name = METHODS[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def all_methods() -> list[type[Method]]:
    return [get_method(name) for name in METHODS]

