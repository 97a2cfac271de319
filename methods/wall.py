"""The wall between the run and a plugin method: the method lives in a worker process of its own.

:func:`built` forks a worker per plugin method instance (the run's process as it is: the plugin's
module, the run's context and cache; nothing imported again, nothing pickled back), builds the
method there and hands the run a stand-in: an instance of the plugin's class, made without running
its code, whose hooks (:data:`HOOKS`) are calls to the worker. The worker runs each under
:func:`methods.guests.guest` and answers with plain data: JSON, numeric arrays as raw bytes, and
the few harness types a hook returns rebuilt field by field (:func:`_types`). The run never
unpickles what a worker sends; the worker unpickles what the run sends it (its parent).

Whatever ends the worker (``os._exit``, ``posix._exit``, libc ``_exit``, a signal, a crash, the
kernel's out-of-memory killer) is one :class:`PluginError` line naming the call it was in. Its
signal handlers, threads and working directory are its own: the run keeps its SIGTERM handler (the
worker's is reset to the default, Ctrl-C ignored: the run stops it), the worker dies with the run
(``PR_SET_PDEATHSIG``) and is stopped when the run closes, its non-daemon threads given
:data:`LINGER_S` to end, then named in a warning.

Fork, not spawn: no import of torch or the plugin again, and a class registered from Python works
as it is. An encoder object given to ``harness.evaluate`` stays in the caller's process
(``in_process``): its model may be on the caller's GPU, which a forked child cannot use. GNU
OpenMP's pool does not survive a fork (the child's first parallel torch op hangs), so when the run
already has threads, the worker's torch runs on one thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.errors import EndpointError, PluginError, ResourceError, UserError
from methods.guests import Lines, guest, is_guest, misbehaved, to_stderr, who

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from harness.core.api import Method

# What the run may call on a method (harness.method_api): each is a call to the worker.
HOOKS = (
    "code", "label", "encoder_impl", "backbone_views", "views_by_task", "prepare", "begin_task",
    "labelled_training_for", "fit_set_name", "fit", "describe_fit", "describe_encode",
    "annotate", "inputs", "selected_on", "encode", "encode_sides", "encode_sparse",
    "sparse_similarity", "score_pairs", "classifies", "classify_pairs",
)  # fmt: skip
BUILD = "building the method (make_spec, create or __init__)"
LINGER_S = 2.0  # how long a stopped worker's threads get to end before it is ended without them
ERRORS = (PluginError, EndpointError, ResourceError, UserError, MemoryError)  # raised again here
_EXIT = os._exit  # the real one, bound before any plugin runs
_live: list[Worker] = []  # this process's workers: one forked later closes their pipes


def _types() -> dict[str, Callable[..., Any]]:
    """The harness types a hook may return, by name (imported when first needed)."""
    from harness.core.api import MethodSpec
    from harness.core.encoding import Prompt, View
    from harness.core.sparse import SparseVectors

    return {
        "View": View,
        "Prompt": Prompt,
        "MethodSpec": MethodSpec,
        "SparseVectors": SparseVectors,
    }


def built(cls: type[Method], build: Callable[[], Method], ctx: Any) -> Method:
    """``build()``'s method: a plugin's made in a worker (the stand-in; ``ctx`` stops the worker
    when it closes), a built-in's or an ``in_process`` encoder object's made here."""
    if not is_guest(cls) or getattr(cls, "in_process", False):
        return build()
    worker = Worker(cls, build)
    if hasattr(ctx, "on_close"):
        ctx.on_close(worker.stop)
    method = object.__new__(cls)
    vars(method).update(spec=worker.call(BUILD, "build")["value"], ctx=ctx, fit_info=None)
    for name in HOOKS:
        if callable(getattr(cls, name, None)):
            setattr(method, name, _Hook(worker, method, name))
    setattr(method, "cost_subjects", lambda: None)  # noqa: B010 (callables cannot cross)
    return method


class Worker:
    """One plugin method in a forked process, and the run's end of the pipe to it."""

    def __init__(self, cls: type[Method], build: Callable[[], Method]) -> None:
        import multiprocessing

        self.cls, self.ended, self.status, self.busy = cls, "", 0, False
        threaded, parent = _threads() > 1, os.getpid()
        ours, theirs = multiprocessing.Pipe()
        sys.stdout.flush(), sys.stderr.flush()
        with warnings.catch_warnings():  # Python 3.12+ warns of fork with threads: see above
            warnings.simplefilter("ignore", DeprecationWarning)
            self.pid = os.fork()
        if self.pid == 0:  # the worker: it never returns into the run's stack
            try:
                ours.close()
                _serve(cls, build, theirs, threaded, parent)
            finally:
                _EXIT(0)
        theirs.close()
        self.conn = ours
        _live.append(self)

    def call(self, said: str, name: str, *args: Any) -> dict[str, Any]:
        """``name(*args)`` in the worker (its prints written first): its answer, the error it
        raised, or one line when it ended without answering."""
        if self.ended:
            raise PluginError(f"{who(self.cls)}: {said} not called: its worker {self.ended}")
        try:
            self.busy = True  # until answered: a call Ctrl-C or SIGTERM interrupts stays so
            self.conn.send((name, args))
            while "print" in (answer := self._receive()):
                to_stderr(answer["print"])
            self.busy = False
        except (EOFError, OSError):
            self.ended = self._end()
            raise PluginError(
                f"{who(self.cls)}: {said} ended the worker process it runs in ({self.ended}); a "
                "method returns its result or raises an exception, it never ends the process: "
                "remove the exit (or find the crash)"
            ) from None
        except (TypeError, ValueError, KeyError, IndexError) as err:  # not what a worker sends
            what = f"{said} answered what the run cannot read ({err})"
            raise PluginError(f"{who(self.cls)}: {what}") from None
        if "errno" in answer:
            raise OSError(answer["errno"], answer["message"])
        if "error" in answer:
            kind = next((k for k in ERRORS if k.__name__ == answer["error"]), PluginError)
            raise kind(answer["message"])
        return answer

    def _receive(self) -> dict[str, Any]:
        """One message: a JSON header, then the raw bytes of each array it names."""
        while not self.conn.poll(0.5):  # a grandchild may hold the pipe open after the worker died
            if self._reaped(0):
                raise EOFError
        head = json.loads(self.conn.recv_bytes())
        arrays = [self.conn.recv_bytes() for _ in range(head.pop("arrays", 0))]
        return {key: _rebuilt(value, arrays) for key, value in head.items()}

    def _reaped(self, wait: float) -> bool:
        """Whether the worker has ended (its status kept), waiting up to ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while self.pid > 0:
            pid, self.status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.pid = -self.pid
            elif time.monotonic() > deadline:
                return False
            else:
                time.sleep(0.01)
        return True

    def _end(self) -> str:
        """How the worker ended, in words (one that closed its pipe and lives on is ended)."""
        if not self._reaped(2.0):
            os.kill(self.pid, signal.SIGKILL)
            self._reaped(60.0)
        self.conn.close()
        if os.WIFSIGNALED(self.status):
            sig = signal.Signals(os.WTERMSIG(self.status)).name
            oom = ": the kernel's out-of-memory killer, or kill -9" if sig == "SIGKILL" else ""
            return f"killed by {sig}{oom}"
        return f"exit status {os.WEXITSTATUS(self.status)}: os._exit, posix._exit or a C exit"

    def stop(self) -> None:
        """End the worker; its threads get :data:`LINGER_S`, then a warning names those left."""
        _live.remove(self) if self in _live else None
        if not (self.ended or self.busy):  # an interrupted call is not waited for
            with contextlib.suppress(PluginError, KeyError):
                left = self.call("stopping", "")["left"]
                if left:
                    print(
                        f"warning: {who(self.cls)} left thread {', '.join(left)} running after "
                        "its last call; its worker was ended without waiting for it (a method "
                        "joins its threads or makes them daemon threads)",
                        file=sys.stderr,
                    )
        self.ended = self.ended or "was stopped with the run"
        self.conn.close()
        if self.pid > 0:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)


class _Hook:
    """A stand-in's hook: the call in the worker; what the worker's context counted is added to the
    run's; ``fit`` brings back the ``fit_info`` it set. A hook without arguments (``label()``)
    answers as it last did once the worker has ended: the run still names the method's row."""

    def __init__(self, worker: Worker, method: Method, name: str) -> None:
        self.worker, self.method, self.name = worker, method, name
        self.last: dict[str, Any] = {}

    def __call__(self, *args: Any) -> Any:
        if self.worker.ended and not args and self.last:
            return self.last["value"]
        said = call_named(type(self.method), self.name)
        answer = self.last = self.worker.call(said, self.name, *args)
        if self.name == "fit":
            self.method.fit_info = answer["fit_info"]
        with contextlib.suppress(AttributeError):  # a caller's own context may count nothing
            for i, device in enumerate(answer["on"] if answer["forwarded"] else ()):
                self.method.ctx.count_forwarded(0 if i else answer["forwarded"], device)
            self.method.ctx.count_pairs_scored(answer["pairs"])
            for _ in range(answer["trained"]):
                self.method.ctx.count_trained()
        return answer["value"]


def _rebuilt(value: Any, arrays: list[bytes]) -> Any:
    """A plain value from the worker, its arrays and harness types rebuilt (never unpickled)."""
    if isinstance(value, list):
        return [_rebuilt(item, arrays) for item in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        index, dtype, shape = value["__array__"]
        if index < 0:  # not numbers: an array of what they were, for the check that refuses it
            return np.empty(shape if np.prod(shape) < 2**20 else 0, dtype=object)
        return np.frombuffer(bytearray(arrays[index]), dtype=np.dtype(dtype)).reshape(shape)
    if "__tuple__" in value:
        return tuple(_rebuilt(item, arrays) for item in value["__tuple__"])
    if "__dict__" in value:
        return {_rebuilt(k, arrays): _rebuilt(v, arrays) for k, v in value["__dict__"]}
    kind, fields = value["__type__"], _rebuilt(value["fields"], arrays)
    if kind in _types():
        return _types()[kind](**fields)
    return type(kind, (), {"__repr__": lambda self: fields["repr"]})()  # named for the check


def _threads() -> int:
    """This process's threads (OpenMP's and other native ones too, on Linux)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


# -- the worker's side -----------------------------------------------------------------------------


def _serve(
    cls: type[Method], build: Callable[[], Method], conn: Connection, threaded: bool, parent: int
) -> None:
    """Build the method, then answer calls until told to stop (an empty name) or orphaned."""
    for other in _live:  # another worker's pipe: its end of file is the run's to see
        other.conn.close()
    _live.clear()
    with contextlib.suppress(Exception):  # Linux: the kernel ends the worker with the run
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the run ended before that
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's: it stops the worker
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the run's handler raises in the run only
    if threaded and "torch" in sys.modules:  # OpenMP's pool did not survive the fork
        sys.modules["torch"].set_num_threads(1)
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        arrays: list[memoryview] = []
        head = {key: _plain(value, arrays) for key, value in message.items()}
        data = json.dumps({**head, "arrays": len(arrays)})
        with lock:  # a plugin's thread may print while the main thread answers
            conn.send_bytes(data.encode())
            for array in arrays:
                conn.send_bytes(array)

    # What the plugin prints goes to the run, which writes it on its stderr (captured or not).
    sys.stderr = Lines("", lambda line: send({"print": line}))
    sys.stdout = Lines(f"plugin {getattr(cls, 'name', cls.__name__)}: ", sys.stderr.emit)
    with contextlib.suppress(OSError):
        os.dup2(2, 1)  # a child process or C code writing to stdout writes to stderr
    method: Any = None
    while True:
        try:
            name, args = conn.recv()
        except (EOFError, OSError):
            return
        if not name:
            return _linger(send)
        counts = _counts(getattr(method, "ctx", None))
        said = BUILD if method is None else call_named(type(method), name)
        try:
            with guest(cls, said):
                if method is None:
                    method = _checked(cls, build())
                    counts, value = _counts(method.ctx), method.spec
                else:
                    value = _readable(getattr(method, name)(*args))
            after = _counts(method.ctx)
            counted = {key: after[key] - counts[key] for key in after}
            send({"value": value, "fit_info": method.fit_info, **counted, "on": _devices(method)})
        except BaseException as err:  # whatever guest() let through, raised again in the run
            if not isinstance(err, (*ERRORS, OSError)):  # its answer could not be sent
                err = PluginError(misbehaved(cls, said, err))
            if isinstance(err, OSError) and err.errno is not None:
                send({"errno": err.errno, "message": err.strerror or str(err)})
            else:
                kind = next((k.__name__ for k in ERRORS if isinstance(err, k)), "PluginError")
                send({"error": kind, "message": str(err) or kind})


def call_named(kind: type, name: str) -> str:
    """The call an error line names: the one the plugin wrote (``encode()`` when the harness's own
    ``encode_sides`` calls it, as for a built-in: then the run encodes each side's distinct
    sentences)."""
    definer = next((k for k in kind.__mro__ if name in vars(k)), kind)
    own = is_guest(definer) and not definer.__module__.startswith("harness.")
    return "encode()" if name == "encode_sides" and not own else f"{name}()"


def _checked(cls: type, method: Any) -> Method:
    """What ``create()`` returned, if it is a method."""
    from harness.core.api import EmbeddingMethod, PairScoringMethod

    if not isinstance(method, EmbeddingMethod | PairScoringMethod):
        raise PluginError(
            f"{who(cls)}: create() returned {type(method).__name__}, not a method; return an "
            "instance of the class (cls(spec, ctx))"
        )
    return method


def _readable(value: Any) -> Any:
    """A tensor as numpy (bfloat16 through float32), as the run's checks read one."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        with contextlib.suppress(Exception):  # a tensor numpy cannot read: refused as itself
            tensor = value.detach().cpu()
            return (tensor.float() if tensor.is_floating_point() else tensor).numpy()
    if isinstance(value, tuple | list) and len(value) == 2:  # encode_sides' pair
        return [_readable(side) for side in value]
    return value


def _plain(value: Any, arrays: list[memoryview]) -> Any:
    """``value`` as JSON, the bytes of each numeric array appended to ``arrays``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            return {"__array__": [-1, "", value.shape]}
        arrays.append(np.ascontiguousarray(value).reshape(-1).view(np.uint8).data)
        return {"__array__": [len(arrays) - 1, value.dtype.str, value.shape]}
    if isinstance(value, list | tuple):
        items = [_plain(item, arrays) for item in value]
        return items if isinstance(value, list) else {"__tuple__": items}
    if isinstance(value, dict):
        return {"__dict__": [[_plain(k, arrays), _plain(v, arrays)] for k, v in value.items()]}
    name = type(value).__name__
    if dataclasses.is_dataclass(value) and name in _types():
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"__type__": name, "fields": _plain(fields, arrays)}
    return {"__type__": name, "fields": _plain({"repr": repr(value)[:200]}, arrays)}


def _devices(method: Any) -> list[str]:
    """The devices the worker's context encoded on (its own model's and its backbone passes')."""
    ctx = method.ctx
    passes = {d for p in getattr(ctx, "providers", list)() for d in p.stats.devices}
    return sorted(passes | set(getattr(ctx, "devices", ())))


def _counts(ctx: Any) -> dict[str, int]:
    """What the worker's context counted: sentences encoded, pairs scored, models trained."""
    return {
        "forwarded": int(getattr(ctx, "sentences_forwarded", 0) or 0),
        "pairs": int(getattr(ctx, "pairs_scored", 0) or 0),
        "trained": int(getattr(ctx, "trained", 0) or 0),
    }


def _linger(send: Callable[[dict[str, Any]], None]) -> None:
    """Stop as Python ends a process (executors shut down, non-daemon threads joined), for at most
    :data:`LINGER_S`; then say which threads are left."""

    def give_up() -> None:
        time.sleep(LINGER_S)
        main = threading.main_thread()
        left = [t for t in threading.enumerate() if t is not main and not t.daemon]
        send({"left": [f"'{thread.name}'" for thread in left]})
        _EXIT(0)

    threading.Thread(target=give_up, daemon=True).start()
    getattr(threading, "_shutdown")()  # noqa: B009 (what interpreter exit runs first)
    send({"left": []})
