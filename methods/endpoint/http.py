"""Sending sentences to an OpenAI-compatible embeddings endpoint: ``POST {url}/embeddings`` in
batches within the endpoint's limits, a bounded number of requests in flight, retries with backoff
on what may pass (429, 5xx, a timeout, a dropped connection, a garbled body), and one
:class:`EndpointError` line for what will not (nothing listening, a refused key, an unknown model,
an answer of the wrong shape or too large, retries spent). Standard library only:
``urllib.request`` and a thread pool.

What is sent and how an answer is read is :mod:`methods.endpoint.wire` (the vectors' cache key
holds its code, not this module's). The key is sent as ``Authorization: Bearer``, is never
followed to another host (redirects are refused) and is masked in any text the server sends back
before that text reaches an error line.

The wait before attempt ``a + 1`` (``a`` = 0, 1, ...): what the server asked for (``Retry-After``
in seconds or as a date, or ``retry-after-ms``), else ``BACKOFF_S · 2^a`` capped at
``MAX_BACKOFF_S``, times a random factor in [0.5, 1] so that requests failed together do not
return together::

    attempt 1 fails (HTTP 500)    wait 0.5–1 s
    attempt 2 fails (HTTP 429, Retry-After: 3)    wait 3 s
    attempt 3 fails (timeout)     wait 2–4 s

At most ``attempts`` per batch, each bounded by ``timeout`` seconds from connect to last byte (a
server trickling a byte at a time is cut off at it): a batch gives up after about
``attempts · timeout + 2^(attempts - 1) · BACKOFF_S`` seconds at worst (6 attempts of 60 s:
about 7 minutes).
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.core.errors import EndpointError
from methods.endpoint.wire import Answer, Malformed, WrongAnswer, read_answer, request_body

BACKOFF_S = 1.0  # the first retry's wait when the server names none (doubled per attempt)
MAX_BACKOFF_S = 60.0
# A Retry-After longer than this fails the run rather than idling (a day's quota is spent).
MAX_RETRY_AFTER_S = 300.0
MIB = 1 << 20  # an answer's body: at most 1 MiB an input (~50,000 numbers as JSON) and 1 MiB more
# Statuses a later attempt may get past: timeout, conflict, too early, rate limit, server errors
RETRIED = frozenset({408, 409, 425, 429})
NOTES = {
    401: "the key was refused",
    403: "the key may not use this model",
    404: "no such route or model: the URL is the API's root (http://HOST:PORT/v1) and the model "
    "a name the server serves",
    413: "one input is larger than the endpoint takes",
}


@dataclass(frozen=True)
class Limits:
    """How the endpoint is asked: inputs and characters per request (a conservative stand-in for
    a token budget: English runs about 4 characters a token), requests at once, attempts per
    batch (the first and its retries) and seconds per request."""

    batch_size: int
    max_chars: int
    concurrency: int
    attempts: int
    timeout: float


@dataclass
class Spent:
    """What the run asked of the endpoint: HTTP requests (retries included), retries, inputs whose
    vectors came back, and the tokens the answers' ``usage`` reported (None: no answer said)."""

    requests: int = 0
    retries: int = 0
    inputs: int = 0
    prompt_tokens: int | None = None
    total_tokens: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, answer: Answer, inputs: int) -> None:
        self.inputs += inputs
        self.prompt_tokens = _plus(self.prompt_tokens, answer.prompt_tokens)
        self.total_tokens = _plus(self.total_tokens, answer.total_tokens)

    def record(self) -> dict[str, Any]:
        return {name: value for name, value in vars(self).items() if name != "lock"}


def batches(texts: Sequence[str], batch_size: int, max_chars: int) -> list[list[str]]:
    """``texts`` in order, cut into requests of at most ``batch_size`` inputs and ``max_chars``
    characters (an input longer than that goes alone).

    >>> batches(["aaaa", "bb", "c", "dddddd", "e"], 3, 6)
    [['aaaa', 'bb'], ['c'], ['dddddd'], ['e']]
    """
    out: list[list[str]] = []
    chars = 0
    for text in texts:
        if not out or len(out[-1]) >= batch_size or chars + len(text) > max_chars:
            out.append([])
            chars = 0
        out[-1].append(text)
        chars += len(text)
    return out


class _Stopped(Exception):
    """Another batch failed (or the run was interrupted): this one gives up its retries."""


class _Deadline(threading.Timer):
    """One request's whole time, connect to last byte (a socket read's timeout restarts with each
    byte): at ``seconds``, the socket is shut down, which ends any wait on it at once."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds, self.expire)
        self.daemon, self.expired, self.sockets = True, False, list[socket.socket]()

    def expire(self) -> None:
        self.expired = True
        for sock in self.sockets:  # the connection's shutdown: a read wakes, a handshake's too
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def connected(self, sock: socket.socket) -> socket.socket:
        """``sock`` as TCP connects it, before a TLS handshake: a duplicate is kept (TLS detaches
        ``sock``), whose shutdown ends every wait on the connection, the handshake's too."""
        self.sockets.append(sock.dup())
        if self.expired:  # expired while connecting (that is bounded by the socket's timeout)
            raise TimeoutError()
        return sock

    def end(self) -> None:
        self.cancel()
        for sock in self.sockets:
            sock.close()


class _Opener(
    urllib.request.HTTPHandler, urllib.request.HTTPSHandler, urllib.request.HTTPRedirectHandler
):
    """Hands each connection a request makes to the request's ``deadline``; a redirect is an
    error, not a new host to send the key to."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        def connection(*args: Any, **kw: Any) -> Any:
            made = http_class(*args, **kw)
            create = made._create_connection  # TCP's connect, which HTTPS's then wraps in TLS
            made._create_connection = lambda *a, **k: req.deadline.connected(create(*a, **k))
            return made

        return super().do_open(connection, req, **kwargs)


class Client:
    """Vectors of ``model`` from the endpoint at ``url`` (its API root, ``.../v1``).

    ``who`` names it in every error line (the URL without credentials, the model); ``key`` is the
    API key or None (no ``Authorization`` header: local servers need none)."""

    def __init__(
        self,
        url: str,
        model: str,
        dimensions: int,
        key: str | None,
        limits: Limits,
        who: str,
        key_env: str,
    ) -> None:
        self.route = url.rstrip("/") + "/embeddings"
        self.model, self.dimensions, self.limits, self.who = model, dimensions, limits, who
        self.key, self.key_env = key, key_env
        self.headers = {"Content-Type": "application/json", "User-Agent": "sts-bench"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        self.opener = urllib.request.build_opener(_Opener)
        self.spent = Spent()

    def run(
        self,
        texts: Sequence[str],
        keep: Callable[[list[str], np.ndarray], None],
        progress: Any,
    ) -> None:
        """Every text's vector, handed to ``keep(texts_of_a_batch, vectors)`` in the calling thread
        as each batch comes back (in any order; ``keep`` may refuse one with an
        :class:`EndpointError`). On a failure the batches not yet sent are dropped, those in
        flight are awaited (and kept if they succeed), then the first failure is raised."""
        work = batches(texts, self.limits.batch_size, self.limits.max_chars)
        stop = threading.Event()
        failure: EndpointError | None = None
        workers = max(1, min(self.limits.concurrency, len(work)))
        with ThreadPoolExecutor(workers, thread_name_prefix="sts-bench endpoint") as pool:
            futures: dict[Future[Answer], list[str]] = {
                pool.submit(self.fetch, batch, stop): batch for batch in work
            }
            try:
                for future in as_completed(futures):
                    try:
                        answer = future.result()
                        keep(futures[future], answer.vectors)  # may refuse it: a failure too
                    except (CancelledError, _Stopped):
                        continue
                    except EndpointError as err:
                        if failure is None:
                            failure = err
                            stop.set()
                            for pending in futures:
                                pending.cancel()
                        continue
                    self.spent.add(answer, len(futures[future]))
                    shown = {"requests": self.spent.requests, "retried": self.spent.retries}
                    if self.spent.total_tokens is not None:  # servers that report usage
                        shown["tokens"] = self.spent.total_tokens
                    progress.set_postfix(**shown)
                    progress.update(len(futures[future]))
            except BaseException:  # Ctrl-C: no new request, no retry; those in flight end
                stop.set()
                for pending in futures:
                    pending.cancel()
                raise
        if failure is not None:
            raise failure

    def fetch(self, texts: list[str], stop: threading.Event) -> Answer:
        """One batch's vectors, retried as the module says; a batch the endpoint finds too large
        (HTTP 413) is halved."""
        body = request_body(self.model, texts, self.dimensions)
        last = ""
        for attempt in range(self.limits.attempts):
            if stop.is_set():
                raise _Stopped()
            with self.spent.lock:
                self.spent.requests += 1
                self.spent.retries += attempt > 0
            wait: float | None = None
            try:
                status, payload, headers = self.post(body, len(texts))
            except urllib.error.URLError as err:  # before OSError, which it derives from
                if isinstance(err.reason, ConnectionRefusedError):  # no attempt will find a server
                    what = "nothing listens there; start the server, or give the URL it listens at"
                    raise self.fail(f"connection refused: {what}") from None
                if not isinstance(err.reason, TimeoutError | ConnectionError):  # DNS, TLS
                    raise self.fail(f"unreachable ({self.masked(str(err.reason))})") from None
                last = self.network(err.reason)
            except (http.client.HTTPException, OSError) as err:  # timeout, reset, cut short
                last = self.network(err)
            else:
                if status == 200:
                    try:
                        return read_answer(payload, len(texts), self.dimensions or None)
                    except Malformed as err:
                        last = str(err)
                    except WrongAnswer as err:
                        what = f"{err} (HTTP 200 to a request of {len(texts)} inputs)"
                        raise self.fail(what) from None
                elif status == 413 and len(texts) > 1:
                    half = len(texts) // 2
                    first = self.fetch(texts[:half], stop)
                    second = self.fetch(texts[half:], stop)
                    if first.vectors.shape[1] != second.vectors.shape[1]:
                        raise self.fail("the two halves of a batch came back in two widths")
                    return _joined(first, second)
                elif status in RETRIED or status >= 500:
                    last = f"HTTP {status}: {self.said(payload)}"
                    wait = retry_after(headers)
                    if wait is not None and wait > MAX_RETRY_AFTER_S:
                        raise self.fail(
                            f"HTTP {status} asks to wait {wait:.0f} s (Retry-After), more than "
                            f"{MAX_RETRY_AFTER_S:.0f} s: its quota is spent; run again later"
                        )
                else:
                    raise self.fail(self.refusal(status, payload))
            if attempt + 1 < self.limits.attempts:
                if wait is None:
                    wait = min(MAX_BACKOFF_S, BACKOFF_S * 2**attempt) * random.uniform(0.5, 1.0)
                if stop.wait(wait):
                    raise _Stopped()
        raise self.fail(
            f"{last} on each of {self.limits.attempts} attempts; try again later, or allow more: "
            "--set endpoint.attempts=N, endpoint.timeout=SECONDS"
        )

    def post(self, body: bytes, inputs: int) -> tuple[int, bytes, Any]:
        """One request: (status, body, headers), whatever the status, within its deadline."""
        request = urllib.request.Request(self.route, body, self.headers, method="POST")
        request.deadline = deadline = _Deadline(self.limits.timeout)  # type: ignore[attr-defined]
        deadline.start()
        try:
            with self.opener.open(request, timeout=self.limits.timeout) as response:
                answer = response.status, self.read(response, inputs), response.headers
        except urllib.error.HTTPError as err:
            with err:
                answer = err.code, self.read(err, inputs), err.headers
        except (OSError, http.client.HTTPException):  # what a socket shut at the deadline raises
            if not deadline.expired:
                raise
        finally:
            deadline.end()
        if deadline.expired:  # a body cut short by the shut socket reads as one that ended
            raise TimeoutError()
        return answer

    def read(self, stream: Any, inputs: int) -> bytes:
        """A body of at most :data:`MIB` an input and one more, read in pieces: a larger one is
        no embeddings answer, refused before it is held."""
        body, limit = bytearray(), (inputs + 1) * MIB
        while len(body) <= limit and (piece := stream.read(1 << 16)):
            body += piece
        if len(body) > limit:
            what = f"{inputs + 1} MiB to a request of {inputs} inputs (1 MiB an input and 1 more)"
            raise self.fail(f"an answer of more than {what}: not an embeddings answer")
        return bytes(body)

    def network(self, err: BaseException) -> str:
        if isinstance(err, TimeoutError):
            return f"no answer within {self.limits.timeout:g} s (timeout)"
        return f"connection failed ({type(err).__name__}: {self.masked(str(err))[:80]})"

    def refusal(self, status: int, payload: bytes) -> str:
        """A status no retry gets past, with the server's own words and what to do."""
        note = NOTES.get(status, "")
        if status in (401, 403):
            sent = (
                f"the key in ${self.key_env} was sent"
                if self.key
                else f"no key was sent (${self.key_env} is not set)"
            )
            note = f"{note}; {sent}: set ${self.key_env}, or name another variable with --set "
            note += "endpoint.key_env=NAME"
        if 300 <= status < 400:
            note = "a redirect; give the URL it points to as the endpoint's URL"
        return f"HTTP {status}: {self.said(payload)}" + (f"; {note}" if note else "")

    def said(self, payload: bytes) -> str:
        """The server's message (OpenAI's ``error.message``, text-embeddings-inference's
        ``error``, or the start of the body), key masked, on one line."""
        text = payload.decode("utf-8", "replace")
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if isinstance(answer, dict):
            error = answer.get("error", answer.get("detail", answer.get("message")))
            if isinstance(error, dict):
                error = error.get("message", error)
            if error is not None:
                text = str(error)
        return " ".join(self.masked(text).split())[:200] or "(empty body)"

    def masked(self, text: str) -> str:
        return text.replace(self.key, "***") if self.key else text

    def fail(self, what: str) -> EndpointError:
        return EndpointError(f"{self.who}: {what}")


def retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds the server asks to wait: ``retry-after-ms``, else ``Retry-After`` in seconds or as
    an HTTP date; None when it names none (or nothing readable).

    >>> retry_after({"Retry-After": "3"}), retry_after({"retry-after-ms": "250"}), retry_after({})
    (3.0, 0.25, None)
    >>> retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0)
    10.0
    """
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = next((v for k, v in headers.items() if k.lower() == name), None)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            return None
        return max(0.0, when - (time.time() if now is None else now))
    return None


def _joined(first: Answer, second: Answer) -> Answer:
    return Answer(
        np.concatenate([first.vectors, second.vectors]),
        _plus(first.prompt_tokens, second.prompt_tokens),
        _plus(first.total_tokens, second.total_tokens),
    )


def _plus(a: int | None, b: int | None) -> int | None:
    """A count two answers reported, None when neither did."""
    return None if a is None and b is None else (a or 0) + (b or 0)
