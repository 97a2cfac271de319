"""A plugin method is a guest of the run: every call into its code goes through :func:`guest`.

:func:`guest` sends what the plugin prints to stderr (``plugin NAME: ...`` lines, never inside the
table on stdout) and turns whatever it raises or exits with, except Ctrl-C, its own
:class:`UserError` and the machine failing, into one :class:`PluginError` line naming the plugin and
its file (exit 5). :func:`blame` does the same, from the traceback, for an exception that left a
plugin's code through a call no guard wraps. Built-in methods are not guests: a bug in one is still
a bug in sts-bench (exit 4, with the traceback). Loading a plugin is :mod:`methods.plugins`.
"""

from __future__ import annotations

import contextlib
import errno
import io
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from harness.core.errors import PluginError, ResourceError, UserError

# OSErrors that are the machine failing (disk full, a read-only or forbidden folder), whoever made
# the call: they stay exit 3, like the same failure in the harness's own code (the cache a plugin
# writes).
_MACHINE_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EIO,
    errno.EMFILE,
    errno.ENFILE,
}
_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_guest(cls: type) -> bool:
    """Whether ``cls`` (a method class, or the class of a method instance) is a plugin's: any class
    not defined in this package, where every built-in method and its helper classes (DSE's head)
    live; an encoder object's class (``harness.evaluate``) is a guest too. The same split as
    :func:`methods.plugin_origin`, read from the class alone (this module may not import the
    registry, which imports it)."""
    return not cls.__module__.startswith("methods.")


def source(cls: type) -> str:
    """The plugin's file, relative to the current folder when it lies under it (what the user
    typed); ``plugin_source`` when the class declares one (an encoder object's ``module.Class``: the
    class :func:`harness.evaluate` builds around it lives in the harness's own module)."""
    declared = getattr(cls, "plugin_source", None)
    if isinstance(declared, str):
        return declared
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return _shown(file) if file else cls.__module__


def _shown(file: str) -> str:
    path = Path(file)
    with contextlib.suppress(ValueError, OSError):
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    return str(path)


def who(cls: type) -> str:
    """``plugin method 'NAME' (path/to/file.py)``: how every error line names a plugin."""
    return f"plugin method '{getattr(cls, 'name', cls.__name__)}' ({source(cls)})"


def _home(cls: type) -> Path | None:
    """Where the plugin's code lives: its package's folder, or its module's file (a plugin file);
    for an encoder object's class, the object's module (``plugin_module``), not the harness's."""
    module = getattr(cls, "plugin_module", None) or cls.__module__
    top = sys.modules.get(module.partition(".")[0])
    folders = getattr(top, "__path__", None)
    if folders:
        return Path(next(iter(folders))).resolve()
    file = getattr(sys.modules.get(module), "__file__", None)
    return Path(file).resolve() if file else None


def _in_home(filename: str, home: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        path = Path(filename).resolve()
        return path == home or home in path.parents
    return False


def _location(err: BaseException, cls: type) -> str:
    """`` at file.py:LINE``: the deepest frame of ``err`` in the plugin's own code ("" when
    none)."""
    home = _home(cls)
    if home is None:
        return ""
    frames = [
        f
        for f in traceback.extract_tb(err.__traceback__)
        if _in_home(f.filename, home) and f.filename != __file__
    ]  # not guest()'s own frame
    return f" at {_shown(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""


def what_happened(err: BaseException) -> str:
    """``Type: first line of its message`` (``called sys.exit(CODE)`` for an exit), at most 200
    characters."""
    if isinstance(err, SystemExit):
        return f"called sys.exit({err.code!r})"
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _stays(err: BaseException) -> bool:
    """What a plugin may let through as it is: Ctrl-C and SIGTERM (the run stops, exit 130/143), its
    own UserError (bad input, exit 2: docs/PLUGINS.md), and the machine failing (exit 3)."""
    if isinstance(err, KeyboardInterrupt | UserError | ResourceError | MemoryError):
        return True
    if type(err).__name__ == "OutOfMemoryError" or (
        isinstance(err, RuntimeError) and any(w in str(err).lower() for w in _OOM_WORDS)
    ):
        return True
    return isinstance(err, OSError) and err.errno in _MACHINE_ERRNOS


def misbehaved(cls: type, call: str, err: BaseException) -> str:
    """The one line for a plugin whose ``call`` raised or exited with ``err``: what it did, where,
    the fix."""
    if isinstance(err, SystemExit):
        return (
            f"{who(cls)}: {call} {what_happened(err)}{_location(err, cls)}; a method returns its "
            "result or "
            "raises an exception, it never ends the process: remove the exit"
        )
    return (
        f"{who(cls)}: {call} raised {what_happened(err)}{_location(err, cls)}; fix the plugin "
        "(--debug prints the "
        "traceback)"
    )


class _Lines(io.TextIOBase):
    """A text stream that writes each line it is given to ``target``, after ``prefix``: a plugin's
    prints, said on stderr as the plugin's (``plugin NAME: ...``), never inside the table on
    stdout."""

    def __init__(self, prefix: str, target: TextIO) -> None:
        super().__init__()
        self.prefix, self.target, self.pending = prefix, target, ""

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        """stderr's descriptor: a child process the plugin hands ``sys.stdout`` to writes there
        too."""
        return self.target.fileno()

    def write(self, text: str) -> int:
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        for line in lines:
            self.target.write(f"{self.prefix}{line}\n")
        if lines:
            self.target.flush()  # a plugin that prints then blocks: its line is seen at once
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def finish(self) -> None:
        """Write what is left of an unfinished last line."""
        if self.pending:
            self.target.write(f"{self.prefix}{self.pending}\n")
            self.pending = ""
        self.target.flush()


@contextlib.contextmanager
def printing_as(prefix: str) -> Iterator[None]:
    """While the body runs, what it prints on stdout goes to stderr as ``prefix`` lines."""
    lines = _Lines(prefix, sys.stderr)
    try:
        with contextlib.redirect_stdout(lines):
            yield
    finally:
        lines.finish()


@contextlib.contextmanager
def guest(cls: type, call: str) -> Iterator[None]:
    """Run the body, a call into method class ``cls``'s code (``call``: ``"encode()"``, for the
    message), as a guest's: a plugin's prints go to stderr, and whatever it raises or exits with
    becomes one :class:`PluginError` line, except what :func:`_stays` lets through. Ctrl-C is never
    caught here, so the first press stops the run. A built-in class runs as it is (its bug is the
    harness's: exit 4, traceback).

    >>> from harness.core.api import EmbeddingMethod
    >>> fields = {"name": "quits", "summary": "s", "__module__": "my_plugin"}
    >>> Quits = type("Quits", (EmbeddingMethod,), fields)
    >>> with guest(Quits, "encode()"):
    ...     raise SystemExit(0)
    Traceback (most recent call last):
    harness.core.errors.PluginError: plugin method 'quits' (my_plugin): encode() called ...
    """
    if not is_guest(cls):
        yield
        return
    try:
        with printing_as(f"plugin {getattr(cls, 'name', cls.__name__)}: "):
            yield
    except (
        BaseException
    ) as err:  # SystemExit too: a plugin must never end the run, least of all with 0
        if _stays(err):
            raise
        raise PluginError(misbehaved(cls, call, err)) from err


def blame(err: BaseException, classes: Any) -> PluginError | None:
    """A :class:`PluginError` for ``err`` when its deepest frame in a plugin's own code (a plugin of
    ``classes``) raised it from a call the run does not guard one by one (a report's call of
    ``label()``, ``--dry-run``'s ``describe_fit``); None when no plugin code is in its traceback."""
    if _stays(err):
        return None
    homes = [(cls, home) for cls in classes if is_guest(cls) and (home := _home(cls)) is not None]
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        for cls, home in homes:
            if _in_home(frame.filename, home):
                return PluginError(misbehaved(cls, f"{frame.name}()", err))
    return None
