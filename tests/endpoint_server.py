"""A real OpenAI-compatible embeddings server on 127.0.0.1, in a thread of the test: ``POST
/v1/embeddings`` answers with a model's vectors as OpenAI does (``data[*].index``/``embedding``,
``usage``), and can be told to answer the next requests with a fault: 429 (with Retry-After), 500, a
slow answer (past the client's timeout), a body that is not JSON, too few vectors, vectors of
another width, a number that overflows a float (``10**400``), a body padded past any bound, an answer
trickled a byte at a time (its body, or the whole of it from the status line), a redirect, 401
echoing the key, or 413 above a batch size; ``echo_key`` answers with the Authorization header as
the model's name. A trickle stops by itself after ``trickle_for`` seconds. It counts the requests
and keeps their bodies and whether they carried the key.

Its models are functions of the text, so a test computes the expected vectors itself:
``words`` (a bag of hashed words, 16 dimensions) and any table of sentence → vector a test gives
(the packaged MiniLM's own vectors, for the STS-B equality in tests/test_endpoint.py).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

Model = Callable[[list[str]], np.ndarray]


def words(texts: list[str], dims: int = 16) -> np.ndarray:
    """A bag of hashed words with a weight per word: deterministic, no model, float32."""
    out = np.zeros((len(texts), dims), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            digest = hashlib.sha256(word.encode()).digest()
            out[i, digest[0] % dims] += 1.0 + digest[1] / 255
    return out


def shortened(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """OpenAI's ``dimensions``: the first ``dimensions`` values, scaled back to unit length."""
    if dimensions is None:
        return vectors
    cut = vectors[:, :dimensions]
    return (cut / np.linalg.norm(cut, axis=1, keepdims=True).clip(1e-12)).astype(np.float32)


class _Quiet(ThreadingHTTPServer):
    """A server whose request errors (a client that hung up mid-answer) are kept in ``errors``
    rather than printed to ``sys.stderr``: a test captures that stream as the run's, and a
    traceback there must be the run's own."""

    errors: list[str]

    def handle_error(self, request: object, client_address: object) -> None:
        self.errors.append(traceback.format_exc())


class EmbeddingsServer:
    """The server and its switches (``faults``: what the next requests get, in order)."""

    def __init__(self, models: dict[str, Model] | None = None, key: str | None = None) -> None:
        self.models: dict[str, Model] = {"words": words, **(models or {})}
        self.key = key  # the Bearer key it requires (None: any or none)
        self.faults: list[str] = []
        self.max_batch: int | None = None  # more inputs than this: 413
        self.slow_s = 2.0
        self.trickle_s, self.trickle_for = 0.2, 4.0  # a byte every trickle_s, for at most trickle_for
        self.echo_key = False
        self.requests = 0
        self.bodies: list[dict] = []
        self.authorized: list[str | None] = []
        self.lock = threading.Lock()
        self.errors: list[str] = []  # the handler's own exceptions, with their tracebacks
        self.httpd = _Quiet(("127.0.0.1", 0), self._handler())
        self.httpd.errors = self.errors
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> EmbeddingsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def inputs(self) -> list[str]:
        return [text for body in self.bodies for text in body["input"]]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
                self.answer(status, json.dumps({"error": {"message": message, "type": "test"}}).encode(), headers)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                auth = self.headers.get("Authorization")
                with server.lock:
                    server.requests += 1
                    fault = server.faults.pop(0) if server.faults else None
                    server.authorized.append(auth)
                if self.path != "/v1/embeddings":
                    return self.error(404, f"no route {self.path}")
                body = json.loads(raw)
                with server.lock:
                    server.bodies.append(body)
                if server.key is not None and auth != f"Bearer {server.key}":
                    sent = (auth or "").removeprefix("Bearer ")
                    return self.error(401, f"Incorrect API key provided: {sent}.")
                if fault is not None and fault.startswith("429"):  # "429" or "429 after SECONDS"
                    wait = fault.partition(" after ")[2] or "0"
                    return self.error(429, "Rate limit reached", {"Retry-After": wait})
                if fault == "302":  # elsewhere: a client that follows it sends the key there
                    return self.answer(302, b"", {"Location": "http://127.0.0.1:9/v1/embeddings"})
                if fault == "500":
                    return self.error(500, "The server had an error while processing your request.")
                if fault == "slow":
                    time.sleep(server.slow_s)
                if fault == "malformed":
                    return self.answer(200, b'{"object": "list", "data": [{"embedding": [0.1, ')
                texts = body["input"]
                if server.max_batch is not None and len(texts) > server.max_batch:
                    return self.error(413, f"batch of {len(texts)} inputs, more than {server.max_batch}")
                model = server.models.get(body["model"])
                if model is None:
                    return self.error(404, f"The model `{body['model']}` does not exist")
                vectors = shortened(model(list(texts)), body.get("dimensions"))
                if fault == "count":
                    vectors = vectors[:-1]
                if fault == "width":
                    vectors = vectors[:, :-1]
                data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
                data.reverse()  # in any order: the client reads each item's index
                tokens = sum(len(t.split()) for t in texts)
                usage = {"prompt_tokens": tokens, "total_tokens": tokens}
                if fault == "overflow":  # valid JSON, a number no float holds
                    data[0]["embedding"][0] = "OVERFLOW"
                served = auth if server.echo_key else body["model"]
                answer = json.dumps({"object": "list", "model": served, "data": data, "usage": usage}).encode()
                answer = answer.replace(b'"OVERFLOW"', b"1" + b"0" * 400)
                if fault == "huge":  # valid JSON, 4 MB of trailing whitespace
                    answer += b" " * 4_000_000
                if fault == "trickle headers":
                    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(answer)}\r\n\r\n".encode()
                    return self.trickle(head + answer)
                if fault == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    return self.trickle(answer)
                self.answer(200, answer)

            def trickle(self, raw: bytes) -> None:
                end = time.monotonic() + server.trickle_for
                for i in range(len(raw)):
                    if time.monotonic() > end:
                        self.close_connection = True
                        return
                    self.wfile.write(raw[i : i + 1])
                    time.sleep(server.trickle_s)

        return Handler


@pytest.fixture
def embeddings_server() -> Iterator[EmbeddingsServer]:
    with EmbeddingsServer() as server:
        yield server


# The docs' model names, served by stand-ins of their shape (a 512-wide one takes dimensions=256)
DOC_MODELS: dict[str, Model] = {
    "text-embedding-3-small": words,
    "text-embedding-3-large": lambda texts: words(texts, 512),
    "BAAI/bge-small-en-v1.5": words,
}


@pytest.fixture
def endpoint_url() -> Iterator[str]:
    """The URL of a local server of the docs' models (their commands: tests/test_readme.py)."""
    with EmbeddingsServer(DOC_MODELS) as server:
        yield server.url
