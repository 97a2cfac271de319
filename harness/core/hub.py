"""Calls that may reach the HuggingFace hub: each is tried once per process.

Offline, a hub call fails only after its HTTP retries (about 23 s for a ``datasets`` load: waits of
1, 2, 4, 8 and 8 s), each retry logged as a warning. A paper preset asks for the same missing model
or dataset once per row, so the harness remembers a failure by its key and repeats its one-line
error at once, keeps the hub libraries' retry warnings out of the output (the error line says
what failed and how to work offline), and after a failure to reach the hub at all switches the
hub libraries to their offline mode, so later calls answer from the local caches at once.

>>> calls = []
>>> def unreachable():
...     calls.append(1)
...     raise OSError("network unreachable")
>>> for _ in range(2):
...     try:
...         once(("doc", "example"), unreachable, lambda err: f"could not fetch ({err})")
...     except UserError as err:
...         print(err)
could not fetch (network unreachable)
could not fetch (network unreachable)
>>> len(calls)
1
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Hashable, Iterator
from typing import TypeVar

from harness.core.errors import UserError

T = TypeVar("T")
# A failed call's message, rebuilt at each raise: its wording follows the caller (errors.flag).
_FAILED: dict[Hashable, Callable[[], str]] = {}
HUB_LOGGERS = ("huggingface_hub", "datasets")


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


def once(key: Hashable, call: Callable[[], T], message: Callable[[Exception], str]) -> T:
    """``call()``; if it raises (anything but a :class:`UserError`, which passes through), raise a
    ``UserError(message(error))`` and remember it under ``key``, so a later ``once`` with that key in
    this process raises the same error without calling. A failure to reach the hub at all (no
    network) also turns on the hub libraries' offline mode for the rest of the process
    (:func:`go_offline`)."""
    if key in _FAILED:
        raise UserError(_FAILED[key]())
    try:
        with quiet_hub_logs():
            return call()
    except UserError:
        raise
    except Exception as err:  # the hub libraries raise many types; the user needs the cause, in one line
        _FAILED[key] = functools.partial(message, err)  # err itself is unbound after the except
        if unreachable(err):
            go_offline()
        raise UserError(_FAILED[key]()) from None


# Exceptions, anywhere in an error's chain, that mean the hub could not be reached at all.
UNREACHABLE = ("gaierror", "ConnectError", "ConnectionError", "ConnectTimeout", "NameResolutionError")


def unreachable(err: BaseException) -> bool:
    """True when ``err`` or its cause is a failure to connect (DNS, refused, no route), not an answer
    of the hub (an unknown repo, a gated model)."""
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
        "the HuggingFace hub is unreachable: the rest of this run reads models and datasets from the local "
        "caches only (set HF_HUB_OFFLINE=1 to start that way)")


def first_line(err: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type name when empty), as whole sentences: those
    that fit in ``limit`` characters, and at least the first one however long. A message is never
    cut mid-sentence (it would end the user's line with half a word)."""
    import re

    line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if len(line) <= limit:
        return line
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s)", line)]
    fitting = [end for end in ends if end <= limit]
    return line[:fitting[-1] if fitting else ends[0]] if ends else line
