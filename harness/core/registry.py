"""A registry of named things of one kind (backbone families; task sources and the other extension
points may follow): one generic type, so every extension point registers, lists and refuses alike.

>>> colours = Registry[int]("colour")
>>> colours.register("red", 1)
1
>>> colours.get("red"), colours.names(), "blue" in colours
(1, ['red'], False)
>>> colours.get("rd")
Traceback (most recent call last):
...
harness.core.errors.UserError: unknown colour 'rd' (did you mean 'red'?); known: red
"""

from __future__ import annotations

from typing import Generic, TypeVar

from harness.core.errors import UserError, did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """Objects of one ``kind`` by name, in registration order. A name is held once: registering
    it again is refused (say why in the name, or unregister first); an unknown name is refused
    with the closest known one."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._held: dict[str, T] = {}

    def register(self, name: str, obj: T) -> T:
        """Hold ``obj`` under ``name``; returns it (so a registration can be an expression)."""
        if name in self._held:
            raise UserError(f"{self.kind} '{name}' is registered already; choose another name")
        self._held[name] = obj
        return obj

    def unregister(self, name: str) -> T:
        """Let go of ``name``; returns what it held."""
        self.get(name)
        return self._held.pop(name)

    def get(self, name: str) -> T:
        if name not in self._held:
            known = self.names()
            raise UserError(
                f"unknown {self.kind} '{name}'{did_you_mean(name, known)}; "
                f"known: {', '.join(known) or 'none'}"
            )
        return self._held[name]

    def names(self) -> list[str]:
        return list(self._held)

    def items(self) -> list[tuple[str, T]]:
        return list(self._held.items())

    def __contains__(self, name: object) -> bool:
        return name in self._held

    def __len__(self) -> int:
        return len(self._held)
