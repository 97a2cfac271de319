"""The method name table. Adding a method = one new module + one line here.

Classes are imported on demand (``get_method``), so naming a method never costs more than its
own module; no method module imports torch at import time.

Methods from outside the repo come in three ways (docs/PLUGINS.md), each found only when a name
is not built in, or when every method is listed:

* ``path/to/file.py:Class`` or ``package.module:Class`` given as a method name (:func:`get_method`);
* an installed package's entry point in the group ``sts_bench.methods`` (``name = "module:Class"``);
* :func:`register_method` from Python, for a class built at run time.

They are held by a :class:`Registry`: :data:`PROCESS` (the process registry, explicit) or a layer
over it that a run is given (``harness.evaluate``'s encoder method lives in one for its run only).

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
    "wmean": "methods.pooling:WeightedMean",
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
    "splade": "methods.splade:Splade",
    "random": "methods.random_baseline:RandomBaseline",
    "endpoint": "methods.endpoint:Endpoint",
}


class Registry:
    """Method classes by name: the built-ins (:data:`METHODS`), then this registry's plugin
    classes (``classes``), then its parent's; names it does not hold are looked up as a
    ``file.py:Class`` reference or an installed entry point and loaded into the root registry.

    :data:`PROCESS` is the process registry: ``harness.register_method``,
    ``--methods file.py:Class`` and entry points add to it, explicitly, for the rest of the process
    (docs/PLUGINS.md). A run resolves names through the registry it is given
    (``RunContext.registry``); ``harness.evaluate`` gives it :meth:`layer` of the process registry
    holding its encoder method, so the method is known to that run only and :data:`PROCESS` is never
    changed by it.

    >>> run = PROCESS.layer()
    >>> run.parent is PROCESS and run.get("avg") is get_method("avg")
    True
    """

    def __init__(self, parent: Registry | None = None) -> None:
        self.parent = parent
        self.classes: dict[str, type[Method]] = {}  # plugin classes held here, by method name

    def layer(self, *classes: type[Method]) -> Registry:
        """A registry over this one holding ``classes`` (each checked as :meth:`register`
        checks)."""
        layered = Registry(self)
        for cls in classes:
            layered.register(cls)
        return layered

    def root(self) -> Registry:
        return self if self.parent is None else self.parent.root()

    def held(self, name: str) -> type[Method] | None:
        """The plugin class this registry or a parent holds under ``name`` (the nearest), else
        None."""
        if name in self.classes:
            return self.classes[name]
        return self.parent.held(name) if self.parent is not None else None

    def plugins(self) -> dict[str, type[Method]]:
        """Every plugin class held here or in a parent, by name (a layer's shadows its parent's)."""
        return {**(self.parent.plugins() if self.parent is not None else {}), **self.classes}

    def get(self, name: str) -> type[Method]:
        """The class registered under ``name``, or named by a ``file.py:Class`` / ``module:Class``
        reference; an unknown name is a one-line error with a suggestion."""
        if name in METHODS:
            module_name, _, class_name = METHODS[name].partition(":")
            return getattr(importlib.import_module(module_name), class_name)
        held = self.held(name)
        if held is not None:
            return held
        from methods import plugins

        root = self.root()
        installed = plugins.entry_points()
        if plugins.is_reference(name):
            cls = plugins.load_reference(name)
            if (
                cls.name in installed
                and installed[cls.name].value != f"{cls.__module__}:{cls.__qualname__}"
            ):
                raise UserError(
                    f"--methods {name}: '{cls.name}' is the name of an installed plugin "
                    f"({installed[cls.name].value}); give the class another name"
                )
            root.add(cls, f"--methods {name}")
            return cls
        if name in installed:
            return root.entry_point(installed[name])
        known = [*METHODS, *sorted({*self.plugins(), *installed})]
        raise UserError(
            f"unknown method '{name}'{did_you_mean(name, known)}; known methods: "
            f"{', '.join(known)} "
            "(see --list; a method from a file: --methods path/to/file.py:ClassName)"
        )

    def all(self) -> list[type[Method]]:
        """Built-in methods, then installed plugins, then those loaded or registered."""
        from methods import plugins

        root = self.root()
        for _, ep in sorted(plugins.entry_points().items()):
            if self.held(ep.name) is None:
                root.entry_point(ep)
        return [*(self.get(name) for name in METHODS), *self.plugins().values()]

    def register(self, cls: type[Method]) -> None:
        """Make ``cls`` runnable by its ``cls.name`` through this registry, as if it were built in.
        Registering a name again replaces the class held under it; a built-in's name or an
        installed plugin's is refused."""
        from methods import plugins

        plugins.check_class(cls, f"register_method({cls!r})")
        if cls.name in plugins.entry_points() and self.held(cls.name) is not cls:
            raise UserError(
                f"register_method: '{cls.name}' is an installed plugin's name (entry point group "
                f"{plugins.GROUP}); give the class another name"
            )
        earlier = self.classes.pop(cls.name, None)
        try:
            self.add(cls, "register_method")
        except UserError:
            if earlier is not None:
                self.classes[cls.name] = earlier
            raise

    def entry_point(self, ep: EntryPoint) -> type[Method]:
        from methods import plugins

        where = f"plugin '{ep.name}' ({plugins.GROUP} entry point {ep.value!r})"
        if ep.name in METHODS:
            raise UserError(
                f"{where}: '{ep.name}' is a built-in method's name; rename the entry point and its "
                "class, or uninstall the plugin's package"
            )
        cls = plugins.load_entry_point(ep)
        self.add(cls, where)
        return cls

    def add(self, cls: type[Method], where: str) -> None:
        """Register a plugin class (every way in comes here): its name must be free, then it must
        keep the method contract (``plugins.check_contract``, harness.method_api), so it is refused
        now rather than failing in the middle of a run."""
        from methods import plugins

        if cls.name in METHODS:
            raise UserError(
                f"{where}: '{cls.name}' is a built-in method's name; give the plugin class another "
                f'name (e.g. name = "my-{cls.name}")'
            )
        held = self.classes.get(cls.name)
        if held is not None and held is not cls:
            raise UserError(
                f"{where}: the method name '{cls.name}' is already taken by {held.__module__}."
                f"{held.__qualname__}; give one of the classes another name"
            )
        plugins.check_contract(cls, where)
        self.classes[cls.name] = cls


# The process registry (explicit, documented in docs/PLUGINS.md): what harness.register_method,
# --methods file.py:Class and installed entry points add, for the rest of the process.
PROCESS = Registry()
# Its plugin classes by name (the same dict), for readers of the registry's contents.
REGISTERED: dict[str, type[Method]] = PROCESS.classes


def get_method(name: str, registry: Registry | None = None) -> type[Method]:
    """``registry.get(name)`` (default: the process registry)."""
    return (registry or PROCESS).get(name)


def method_name(name: str) -> str:
    """The method's own name for a name or a reference: ``plugin.py:MaxPool`` → ``max-pool``."""
    return name if name in METHODS else get_method(name).name


def all_methods() -> list[type[Method]]:
    """Built-in methods, then installed plugins, then those loaded or registered in this process."""
    return PROCESS.all()


def builtin_methods() -> list[type[Method]]:
    return [get_method(name) for name in METHODS]


def plugin_origin(cls: type[Method]) -> str | None:
    """Where a plugin method came from (its module), None for a built-in."""
    return None if METHODS.get(cls.name, "").partition(":")[0] == cls.__module__ else cls.__module__


def register_method(cls: type[Method]) -> None:
    """Make ``cls`` runnable by its ``cls.name`` in this process, as if it were built in:
    ``--methods``, ``--set``, records, leaderboards, ``harness.mteb_model``. Registering a name
    again replaces the class this process had under it; a built-in's name or an installed plugin's
    is refused. This adds to :data:`PROCESS`, the process registry, on purpose (``harness.evaluate``
    does not)."""
    PROCESS.register(cls)
