"""Calls that may reach the HuggingFace hub: each is tried once per run.

Offline, a hub call fails only after its HTTP retries (about 23 s for a ``datasets`` load: waits of
1, 2, 4, 8 and 8 s), each retry logged as a warning. So a :class:`HubFailures` remembers a failure
by its key and repeats its one-line error at once; the hub libraries' retry warnings are kept out
of the output (the error line says what failed and how to work offline), and after a failure to
reach the hub at all the hub libraries switch to their offline mode (their own process-wide
setting), so later calls answer from the local caches at once.

Failures are remembered by the object the caller passes, or, when it passes none, by the one the
run in progress made current (the runner's ``RunContext`` owns one and holds it current for the
run: :meth:`HubFailures.current`, a context variable, so the data sources and the backbone need no
extra argument); outside a run, nothing is remembered. Two runs never share a failure.

>>> calls = []
>>> def unreachable():
...     calls.append(1)
...     raise OSError("network unreachable")
>>> failures = HubFailures()
>>> for _ in range(2):
...     try:
...         once(("doc", "example"), unreachable, lambda err: f"could not fetch ({err})", failures)
...     except UserError as err:
...         print(err)
could not fetch (network unreachable)
could not fetch (network unreachable)
>>> len(calls), ("doc", "example") in failures
(1, True)
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Hashable, Iterator
from contextvars import ContextVar
from typing import TypeVar

from harness.core.errors import UserError

T = TypeVar("T")
HUB_LOGGERS = ("huggingface_hub", "datasets")


class HubFailures:
    """The hub calls that failed, by key: each one's message, rebuilt at each raise (its wording
    follows the caller: errors.flag). Owned by whoever runs the calls (the run's ``RunContext``)."""

    def __init__(self) -> None:
        self.failed: dict[Hashable, Callable[[], str]] = {}

    def __contains__(self, key: Hashable) -> bool:
        return key in self.failed

    @contextlib.contextmanager
    def current(self) -> Iterator[HubFailures]:
        """While inside, :func:`once` calls that pass no ``failures`` are remembered here."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)


# The HubFailures of the run in progress (None outside one): set only by HubFailures.current().
_CURRENT: ContextVar[HubFailures | None] = ContextVar("sts_bench_hub_failures", default=None)


def current_failures() -> HubFailures | None:
    """The failures of the run (or paper) in progress, None outside one: a run started inside a
    paper's rows shares the paper's, so a missing hub model is asked once per paper."""
    return _CURRENT.get()


@contextlib.contextmanager
def quiet_hub_logs() -> Iterator[None]:
    """Only errors from the hub libraries' loggers while inside (no per-retry warnings)."""
    loggers = [logging.getLogger(name) for name in HUB_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def once(
    key: Hashable,
    call: Callable[[], T],
    message: Callable[[Exception], str],
    failures: HubFailures | None = None,
) -> T:
    """``call()``; if it raises (anything but a :class:`UserError`, which passes through), raise a
    ``UserError(message(error))`` and remember it under ``key`` in ``failures`` (None: the run's,
    see the module docstring; outside a run, nowhere), so a later ``once`` with that key and those
    failures raises the same error without calling. A failure to reach the hub at all (no
    network) also turns on the hub libraries' offline mode for the rest of the process
    (:func:`go_offline`)."""
    failed = (failures if failures is not None else _CURRENT.get() or HubFailures()).failed
    if key in failed:
        raise UserError(failed[key]())
    try:
        with quiet_hub_logs():
            return call()
    except UserError:
        raise
    # the hub libraries raise many types; the user needs the cause, in one line
    except Exception as err:
        failed[key] = functools.partial(message, err)  # err itself is unbound after the except
        if unreachable(err):
            go_offline()
        raise UserError(failed[key]()) from None


# Exceptions, anywhere in an error's chain, that mean the hub could not be reached at all.
UNREACHABLE = (
    "gaierror",
    "ConnectError",
    "ConnectionError",
    "ConnectTimeout",
    "NameResolutionError",
)


def unreachable(err: BaseException) -> bool:
    """True when ``err`` or its cause is a failure to connect (DNS, refused, no route), not an
    answer of the hub (an unknown repo, a gated model)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ in UNREACHABLE:
            return True
        current = current.__cause__ or current.__context__
    return False


def go_offline() -> None:
    """The hub libraries' offline mode (``HF_HUB_OFFLINE=1``) for the rest of the process: their
    later calls answer from the local caches at once instead of retrying the network (a
    ``datasets`` load retried for ~23 s). Said once, as a warning."""
    import huggingface_hub.constants as hub_constants

    if hub_constants.HF_HUB_OFFLINE:
        return
    hub_constants.HF_HUB_OFFLINE = True
    try:
        import datasets.config

        datasets.config.HF_HUB_OFFLINE = True
    except ImportError:  # datasets is a dependency, but the model path does not need it
        pass
    logging.getLogger("sts_bench.hub").warning(
        "the HuggingFace hub is unreachable: the rest of this run reads models and datasets from "
        "the local caches only (set HF_HUB_OFFLINE=1 to start that way)"
    )


def first_line(err: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type name when empty), as whole sentences:
    those that fit in ``limit`` characters, and at least the first one however long. A message is
    never cut mid-sentence (it would end the user's line with half a word)."""
    import re

    line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if len(line) <= limit:
        return line
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s)", line)]
    fitting = [end for end in ends if end <= limit]
    return line[: fitting[-1] if fitting else ends[0]] if ends else line
