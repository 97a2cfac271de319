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
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn, TextIO

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

    The guest cannot decide how the run ends (docs/PLUGINS.md, "What a guest cannot do"): while it
    runs, ``os._exit`` raises (:class:`CalledOsExit`) instead of ending the process; memory it
    fails to allocate in its own code is its fault, not the machine's; a working directory it
    changes is put back, and is its fault; a non-daemon thread it starts and leaves running is
    noted (:func:`lingering`), so the process can end without it.

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
    folder = _cwd()
    threads = set(threading.enumerate())
    try:
        with _os_exit_raises(), printing_as(f"plugin {getattr(cls, 'name', cls.__name__)}: "):
            yield
    except (
        BaseException
    ) as err:  # SystemExit too: a plugin must never end the run, least of all with 0
        _back_to(folder)
        if is_out_of_memory(err) and _allocated_by(err, cls):
            raise PluginError(out_of_memory(cls, call, err)) from err
        if _stays(err):
            raise
        raise PluginError(misbehaved(cls, call, err)) from err
    finally:
        _note_threads(threads, cls, call)
    moved = _back_to(folder)
    if moved is not None:
        raise PluginError(
            f"{who(cls)}: {call} changed the working directory to {moved} (put back to {folder}); "
            "a method must not change the process's folder, the run's relative paths depend on "
            "it: open the plugin's files by absolute path (Path(__file__).parent / NAME)"
        )


# -- what a guest cannot decide: how the process ends, its folder, its memory, its threads ------


class CalledOsExit(SystemExit):
    """A guest's ``os._exit(code)``, raised where it was called: while :func:`guest` runs a
    plugin's call, ``os._exit`` is :func:`_raise_exit`, so the run can say who ended it and write
    the other results, instead of ending at once with the plugin's code (often 0)."""


_REAL_OS_EXIT = os._exit
_held = 0  # guest calls running now (nested, or on several threads)
_held_lock = threading.Lock()
_held_pid = 0  # the process that holds os._exit: a child it forks exits for real


def _raise_exit(code: int) -> NoReturn:
    if os.getpid() != _held_pid:  # a forked child (multiprocessing, a data loader) ends as it asks
        _REAL_OS_EXIT(code)
    raise CalledOsExit(code)


@contextlib.contextmanager
def _os_exit_raises() -> Iterator[None]:
    """While the body runs, ``os._exit`` raises :class:`CalledOsExit` in this process. Only the
    name ``os._exit`` is replaced: ``posix._exit``, an alias bound before (``from os import
    _exit``), a signal the plugin sends itself and a crash in native code still end the process."""
    global _held, _held_pid
    with _held_lock:
        if _held == 0:
            _held_pid = os.getpid()
            setattr(os, "_exit", _raise_exit)  # noqa: B010 (mypy: a module's function, replaced)
        _held += 1
    try:
        yield
    finally:
        with _held_lock:
            _held -= 1
            if _held == 0:
                setattr(os, "_exit", _REAL_OS_EXIT)  # noqa: B010


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under the run
        return None


def _back_to(folder: str | None) -> str | None:
    """Put the working directory back to ``folder`` if a guest changed it; returns where it had
    gone (None when unchanged)."""
    now = _cwd()
    if folder is None or now == folder:
        return None
    with contextlib.suppress(OSError):
        os.chdir(folder)
    return now or "a folder that no longer exists"


def is_out_of_memory(err: BaseException) -> bool:
    """MemoryError (numpy's too), torch's CUDA OOM, or the RuntimeError torch's CPU allocator
    raises."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    return isinstance(err, RuntimeError) and any(w in str(err).lower() for w in _OOM_WORDS)


_OURS = (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent / "harness")


def _allocated_by(err: BaseException, cls: type) -> bool:
    """Whether the allocation that failed was the plugin's: the deepest frame of ``err`` that is
    either the plugin's code or the harness's is the plugin's (numpy, torch and other libraries it
    called between are its own). Memory the harness failed to get, even on the plugin's behalf
    (``ctx.views(...).get``), stays the machine's (exit 3)."""
    home = _home(cls)
    if home is None:
        return False
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if frame.filename == __file__:
            continue
        if _in_home(frame.filename, home):
            return True
        if any(_in_home(frame.filename, ours) for ours in _OURS):
            return False
    return False


def out_of_memory(cls: type, call: str, err: BaseException) -> str:
    kind = "MemoryError" if isinstance(err, MemoryError) else type(err).__name__
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return (
        f"{who(cls)}: {call} ran out of memory ({kind}: {first}){_location(err, cls)}; the "
        "plugin asked for more memory than the machine has: allocate in smaller pieces (a "
        "smaller batch), or run it where there is more memory"
    )


# Non-daemon threads a guest call started and left running, with who started them (its line).
_spawned: dict[threading.Thread, str] = {}


def _note_threads(before: set[threading.Thread], cls: type, call: str) -> None:
    for thread in threading.enumerate():
        if thread not in before and not thread.daemon and thread.is_alive():
            _spawned.setdefault(thread, f"{who(cls)}: {call}")


def lingering() -> list[tuple[threading.Thread, str | None]]:
    """The non-daemon threads still running besides the main one (they would keep the process
    alive), each with the guest call that started it (None: not started by one)."""
    main = threading.main_thread()
    return [
        (thread, _spawned.get(thread))
        for thread in threading.enumerate()
        if thread is not main and not thread.daemon and thread.is_alive()
    ]


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
