"""One registry type for the extension points: named objects of one kind (task sources, tasks).

A :class:`Registry` holds objects by name, in the order they were registered. ``register(name,
obj)`` adds one, or refuses it with one line that says why (a malformed name, a name that is taken,
an object its ``check`` refuses); ``registry[name]`` looks one up, and a name it does not hold is
one line with the closest name (``did you mean``) and the names it holds. A registry with an entry
point ``group`` also holds what installed packages declare there (``[project.entry-points.
"sts_bench.sources"]`` → ``name = "module:object"``): they are loaded, once per process, when a name
is not found or every name is listed, and refused the same way. Built-ins come from ``builtins``, a
function called once, on first use, so that creating a registry imports nothing.

The idea is lm-eval's registry; the refusals are ours (:class:`~harness.core.errors.UserError`,
exit 2 on the command line).

>>> def check(name, value):
...     return None if value >= 0 else "negative"
>>> colours: Registry[int] = Registry("colour", check=check)
>>> colours.register("red", 1)
1
>>> colours["red"], "blue" in colours, list(colours)
(1, False, ['red'])
>>> colours["rde"]
Traceback (most recent call last):
...
harness.core.errors.UserError: unknown colour 'rde' (did you mean 'red'?); colours: red
>>> colours.register("blue", -1)
Traceback (most recent call last):
...
harness.core.errors.UserError: cannot register colour 'blue': negative
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from harness.core.errors import UserError, did_you_mean

T = TypeVar("T")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


class Registry(Generic[T]):
    """Objects of one ``kind`` by name (see the module's docstring).

    ``check(name, obj)`` returns why ``obj`` may not be registered under ``name`` (a few words), or
    None; ``group`` is the entry point group installed packages register in; ``builtins(registry)``
    registers the built-ins, called once before the first lookup.
    """

    def __init__(
        self,
        kind: str,
        *,
        check: Callable[[str, T], str | None] | None = None,
        group: str | None = None,
        builtins: Callable[[Registry[T]], None] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self._check = check
        self._builtins = builtins
        self._held: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._scanned = group is None  # entry points looked at (none to look at without a group)

    def _ready(self) -> dict[str, T]:
        if self._builtins is not None:
            builtins, self._builtins = self._builtins, None
            builtins(self)
        return self._held

    def register(self, name: str, obj: T, *, origin: str = "") -> T:
        """Hold ``obj`` under ``name`` (``origin``: where it came from, for messages) and return it;
        one ``UserError`` line naming what is wrong otherwise."""
        held = self._ready()
        why = None
        if not isinstance(name, str) or not NAME.match(name):
            why = "a name is letters, digits, '.', '_', '+' or '-', starting with a letter or digit"
        elif name in held:
            first = self._origins.get(name)
            why = f"the name is taken{f' (by {first})' if first else ''}; choose another"
        elif self._check is not None:
            why = self._check(name, obj)
        if why is not None:
            by = f" ({origin})" if origin else ""
            raise UserError(f"cannot register {self.kind} '{name}'{by}: {why}")
        held[name] = obj
        if origin:
            self._origins[name] = origin
        return obj

    def unregister(self, name: str) -> T:
        """Take ``name`` out (a test's registration, or one to replace) and return what it held."""
        self._origins.pop(name, None)
        return self._ready().pop(name)

    def origin(self, name: str) -> str:
        """Where ``name`` was registered from ("" for a built-in or a plain ``register`` call)."""
        return self._origins.get(name, "")

    def _scan(self) -> None:
        """Load the installed entry points of ``group`` (once): each is registered under its name,
        refused like any registration."""
        if self._scanned:
            return
        self._scanned = True
        from importlib.metadata import entry_points

        held = self._ready()
        for point in entry_points(group=self.group or ""):
            if point.name in held:
                continue  # a name held already wins; the entry point stays unused
            origin = f"entry point {point.value} in {self.group}"
            try:
                obj = point.load()
            except Exception as err:  # a broken package: one line, naming the entry point
                first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
                raise UserError(
                    f"cannot register {self.kind} '{point.name}' ({origin}): it does not import "
                    f"({type(err).__name__}: {first}); fix or uninstall that package"
                ) from None
            self.register(point.name, obj, origin=origin)

    def __contains__(self, name: object) -> bool:
        if name in self._ready():
            return True
        self._scan()
        return name in self._held

    def __getitem__(self, name: str) -> T:
        if name not in self:
            known = list(self)
            raise UserError(
                f"unknown {self.kind} '{name}'{did_you_mean(name, known)}; {self.kind}s: "
                f"{', '.join(known)}"
            )
        return self._held[name]

    def get(self, name: str, default: T | None = None) -> T | None:
        """``registry[name]``, or ``default`` when it holds no such name."""
        return self._held[name] if name in self else default

    def __iter__(self) -> Iterator[str]:
        self._scan()
        return iter(list(self._ready()))

    def __len__(self) -> int:
        self._scan()
        return len(self._ready())

    def names(self) -> list[str]:
        """Every name held, in the order registered (built-ins first)."""
        return list(self)

    def values(self) -> list[T]:
        return [self._held[name] for name in self]

    def items(self) -> list[tuple[str, T]]:
        return [(name, self._held[name]) for name in self]
