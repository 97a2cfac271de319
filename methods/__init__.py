"""The method name table. Adding a method = one new module + one line here.

Classes are imported on demand (``get_method``), so naming a method never costs more than its
own module; no method module imports torch at import time.

Methods from outside the repo come in three ways (docs/PLUGINS.md), each found only when a name
is not built in, or when every method is listed:

* ``path/to/file.py:Class`` or ``package.module:Class`` given as a method name (:func:`get_method`);
* an installed package's entry point in the group ``sts_bench.methods`` (``name = "module:Class"``);
* :func:`register_method` from Python, for a class built at run time.

A plugin's name may not be a built-in's, so ``avg`` always means this table's ``avg``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from harness.core.errors import UserError, did_you_mean

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from harness.core.api import Method

METHODS: dict[str, str] = {
    "cls": "methods.pooling:Cls",
    "avg": "methods.pooling:Avg",
    "first-last": "methods.pooling:FirstLast",
    "last": "methods.pooling:Last",
    "avg-sentence": "methods.pooling:MeanSentence",
    "prompteol": "methods.prompteol:PromptEOL",
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
# Plugin classes this process has loaded or been given (files, entry points, register_method: encoder
# objects from harness.evaluate), by method name.
REGISTERED: dict[str, type[Method]] = {}


def get_method(name: str) -> type[Method]:
    """The class registered under ``name``, or named by a ``file.py:Class`` / ``module:Class``
    reference; an unknown name is a one-line error with a suggestion."""
    if name in METHODS:
        module_name, _, class_name = METHODS[name].partition(":")
        return getattr(importlib.import_module(module_name), class_name)
    if name in REGISTERED:
        return REGISTERED[name]
    from methods import plugins

    installed = plugins.entry_points()
    if plugins.is_reference(name):
        cls = plugins.load_reference(name)
        if cls.name in installed and installed[cls.name].value != f"{cls.__module__}:{cls.__qualname__}":
            raise UserError(f"--methods {name}: '{cls.name}' is the name of an installed plugin "
                            f"({installed[cls.name].value}); give the class another name")
        _add(cls, f"--methods {name}")
        return cls
    if name in installed:
        return _entry_point(installed[name])
    known = [*METHODS, *sorted({*REGISTERED, *installed})]
    raise UserError(f"unknown method '{name}'{did_you_mean(name, known)}; known methods: {', '.join(known)} "
                    "(see --list; a method from a file: --methods path/to/file.py:ClassName)")


def method_name(name: str) -> str:
    """The method's own name for a name or a reference: ``plugin.py:MaxPool`` → ``max-pool``."""
    return name if name in METHODS else get_method(name).name


def all_methods() -> list[type[Method]]:
    """Built-in methods, then installed plugins, then those loaded or registered in this process."""
    from methods import plugins

    for _, ep in sorted(plugins.entry_points().items()):
        if ep.name not in REGISTERED:
            _entry_point(ep)
    return [*(get_method(name) for name in METHODS), *REGISTERED.values()]


def builtin_methods() -> list[type[Method]]:
    return [get_method(name) for name in METHODS]


def plugin_origin(cls: type[Method]) -> str | None:
    """Where a plugin method came from (its module), None for a built-in."""
    return None if METHODS.get(cls.name, "").partition(":")[0] == cls.__module__ else cls.__module__


def register_method(cls: type[Method]) -> None:
    """Make ``cls`` runnable by its ``cls.name`` in this process, as if it were built in: ``--methods``,
    ``--set``, records, leaderboards, ``harness.mteb_model``. Registering a name again replaces the
    class this process had under it; a built-in's name or an installed plugin's is refused."""
    from methods import plugins

    plugins.check_class(cls, f"register_method({cls!r})")
    if cls.name in plugins.entry_points() and REGISTERED.get(cls.name) is not cls:
        raise UserError(f"register_method: '{cls.name}' is an installed plugin's name (entry point group "
                        f"{plugins.GROUP}); give the class another name")
    REGISTERED.pop(cls.name, None)
    _add(cls, "register_method")


def _entry_point(ep: EntryPoint) -> type[Method]:
    from methods import plugins

    where = f"plugin '{ep.name}' ({plugins.GROUP} entry point {ep.value!r})"
    if ep.name in METHODS:
        raise UserError(f"{where}: '{ep.name}' is a built-in method's name; rename the entry point and its class, "
                        "or uninstall the plugin's package")
    cls = plugins.load_entry_point(ep)
    _add(cls, where)
    return cls


def _add(cls: type[Method], where: str) -> None:
    """Register a plugin class (every way in comes here): its name must be free, then it must
    provide what its base class needs (``plugins.check_contract``), so it is refused now rather than
    failing in the middle of a run."""
    from methods import plugins

    if cls.name in METHODS:
        raise UserError(f"{where}: '{cls.name}' is a built-in method's name; give the plugin class another name "
                        f"(e.g. name = \"my-{cls.name}\")")
    held = REGISTERED.get(cls.name)
    if held is not None and held is not cls:
        raise UserError(f"{where}: the method name '{cls.name}' is already taken by {held.__module__}."
                        f"{held.__qualname__}; give one of the classes another name")
    plugins.check_contract(cls, where)
    REGISTERED[cls.name] = cls
