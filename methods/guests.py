"""A plugin method is a guest of the run: every call into its code goes through :func:`guest`.

:func:`guest` sends what the plugin prints to stderr (``plugin NAME: ...`` lines, never inside the
table on stdout) and turns whatever it raises or exits with, except Ctrl-C, its own
:class:`UserError` and the machine failing, into one :class:`PluginError` line naming the plugin and
its file (exit 5). A plugin method's calls run in a worker process of their own
(:mod:`methods.wall`, which calls :func:`guest` there), so what it does to its process cannot end,
hang or mislabel the run; an encoder object given from Python stays in the caller's process.
Built-in methods are not guests: a bug in one is still a bug in sts-bench (exit 4, with the
traceback). Loading a plugin is :mod:`methods.plugins`.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from harness.core.errors import PluginError, ResourceError, UserError, is_out_of_memory

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
    frame = _deepest(err, [home]) if home else None
    return f" at {_shown(frame.filename)}:{frame.lineno}" if frame else ""


def _deepest(err: BaseException, places: list[Path]) -> traceback.FrameSummary | None:
    """The deepest frame of ``err`` in one of ``places`` (not guest()'s own frame)."""
    frames = reversed(traceback.extract_tb(err.__traceback__))
    inside = (f for f in frames if any(_in_home(f.filename, p) for p in places))
    return next((f for f in inside if f.filename != __file__), None)


def what_happened(err: BaseException) -> str:
    """``Type: first line of its message`` (``called sys.exit(CODE)`` for an exit,
    ``called os._exit(CODE)`` for the exit :func:`guest` turned into an exception), at most 200
    characters."""
    if isinstance(err, CalledOsExit):
        return f"called os._exit({err.code!r})"
    if isinstance(err, SystemExit):
        return f"called sys.exit({err.code!r})"
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _stays(err: BaseException) -> bool:
    """What a plugin may let through as it is: Ctrl-C and SIGTERM (the run stops, exit 130/143), its
    own UserError (bad input, exit 2: docs/PLUGINS.md), and the machine failing (exit 3; memory
    the plugin's own code failed to allocate is its fault, :func:`guest` says so first)."""
    if isinstance(err, KeyboardInterrupt | UserError | ResourceError) or is_out_of_memory(err):
        return True
    return isinstance(err, OSError) and err.errno in _MACHINE_ERRNOS


def misbehaved(cls: type, call: str, err: BaseException) -> str:
    """The one line for a plugin whose ``call`` raised or exited with ``err``: what it did, where,
    the fix."""
    if isinstance(err, SystemExit):
        return (
            f"{who(cls)}: {call} {what_happened(err)}{_location(err, cls)}; a method returns its "
            "result or raises an exception, it never ends the process: remove the exit"
        )
    return (
        f"{who(cls)}: {call} raised {what_happened(err)}{_location(err, cls)}; fix the plugin "
        "(--debug prints the traceback)"
    )


class Lines(io.TextIOBase):
    """A text stream that hands each whole line it is given, after ``prefix``, to ``emit``: a
    plugin's prints, said on stderr as the plugin's (``plugin NAME: ...``), never inside the table
    on stdout (in a worker, ``emit`` sends them to the run, which writes them)."""

    def __init__(self, prefix: str, emit: Callable[[str], None]) -> None:
        super().__init__()
        self.prefix, self.emit, self.pending = prefix, emit, ""

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        """stderr's descriptor: a child process the plugin hands ``sys.stdout`` to writes there
        too."""
        return 2

    def write(self, text: str) -> int:
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        for line in lines:  # each at once: a plugin that prints then blocks is seen printing
            self.emit(f"{self.prefix}{line}")
        return len(text)

    def finish(self) -> None:
        """Write what is left of an unfinished last line."""
        if self.pending:
            self.write("\n")


def to_stderr(line: str) -> None:
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()


@contextlib.contextmanager
def printing_as(prefix: str) -> Iterator[None]:
    """While the body runs, what it prints on stdout goes to stderr as ``prefix`` lines."""
    lines = Lines(prefix, to_stderr)
    try:
        with contextlib.redirect_stdout(lines):
            yield
    finally:
        lines.finish()


@contextlib.contextmanager
def importing_as(prefix: str) -> Iterator[None]:
    """While a plugin's module is imported: its prints go to stderr as ``prefix`` lines, its
    ``os._exit`` raises (:class:`CalledOsExit`, an exit the loader reports) and a working directory
    it changes is put back."""
    folder = _cwd()
    try:
        with _os_exit_raises(), printing_as(prefix):
            yield
    finally:
        _back_to(folder)


@contextlib.contextmanager
def guest(cls: type, call: str) -> Iterator[None]:
    """Run the body, a call into method class ``cls``'s code (``call``: ``"encode()"``, for the
    message), as a guest's: a plugin's prints go to stderr, and whatever it raises or exits with
    becomes one :class:`PluginError` line, except what :func:`_stays` lets through. Ctrl-C is never
    caught here, so the first press stops the run. A built-in class runs as it is (its bug is the
    harness's: exit 4, traceback).

    Memory it fails to allocate in its own code is its fault, not the machine's. What it does to
    its process (``os._exit``, a signal handler, a thread, ``chdir``) is the worker's it runs in
    (:mod:`methods.wall`; docs/PLUGINS.md, "What a guest cannot decide").

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
    # SystemExit too: a plugin must never end the run, least of all with 0
    except BaseException as err:
        if is_out_of_memory(err) and _allocated_by(err, cls):
            raise PluginError(out_of_memory(cls, call, err)) from err
        if _stays(err):
            raise
        raise PluginError(misbehaved(cls, call, err)) from err


# -- a plugin file's import: its exit and its folder; the memory a guest's own code fails to get --


class CalledOsExit(SystemExit):
    """A plugin file's ``os._exit(code)`` while it is imported (:func:`importing_as`), raised where
    it was called, so the loader can say which file and line ended it."""


_REAL_OS_EXIT = os._exit


@contextlib.contextmanager
def _os_exit_raises() -> Iterator[None]:
    """While the body runs, ``os._exit`` raises :class:`CalledOsExit` in this process (a child it
    forks exits for real). Only the name is replaced: ``posix._exit``, an alias bound before
    (``from os import _exit``) and a signal still end the process, as they would any import."""
    pid = os.getpid()

    def raise_exit(code: int) -> NoReturn:
        if os.getpid() != pid:  # a forked child (multiprocessing, a data loader) ends as it asks
            _REAL_OS_EXIT(code)
        raise CalledOsExit(code)

    setattr(os, "_exit", raise_exit)  # noqa: B010 (mypy: a module's function, replaced)
    try:
        yield
    finally:
        setattr(os, "_exit", _REAL_OS_EXIT)  # noqa: B010


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under the run
        return None


def _back_to(folder: str | None) -> None:
    """Put the working directory back to ``folder`` if the import changed it."""
    if folder is not None and _cwd() != folder:
        with contextlib.suppress(OSError):
            os.chdir(folder)


_OURS = (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent / "harness")


def _allocated_by(err: BaseException, cls: type) -> bool:
    """Whether the allocation that failed was the plugin's: the deepest frame of ``err`` that is
    either the plugin's code or the harness's is the plugin's (numpy, torch and other libraries it
    called between are its own). Memory the harness failed to get, even on the plugin's behalf
    (``ctx.views(...).get``), stays the machine's (exit 3)."""
    home = _home(cls)
    frame = _deepest(err, [home, *_OURS]) if home else None
    return frame is not None and home is not None and _in_home(frame.filename, home)


def out_of_memory(cls: type, call: str, err: BaseException) -> str:
    kind = "MemoryError" if isinstance(err, MemoryError) else type(err).__name__
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return (
        f"{who(cls)}: {call} ran out of memory ({kind}: {first}){_location(err, cls)}; the "
        "plugin asked for more memory than the machine has: allocate in smaller pieces (a "
        "smaller batch), or run it where there is more memory"
    )
