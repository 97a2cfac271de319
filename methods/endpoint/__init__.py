"""A model behind an OpenAI-compatible embeddings endpoint (``POST {url}/embeddings``): a hosted
embedder, or any model vLLM, text-embeddings-inference, Ollama or LiteLLM serve, scored like a
method of the run.

The endpoint is named by ``--backbone http://HOST:PORT/v1`` (or ``--set endpoint.url=URL``, which
leaves ``--backbone`` to the run's other methods) and its model by ``--set endpoint.model=NAME``.
Each distinct sentence is sent once; its vector is cached under the endpoint's URL, the model,
``dimensions``, ``cache_key`` and the code that reads the answers (:mod:`methods.endpoint.wire`),
never under the key, so a warm run sends no request. The API key is read from the environment
(``$OPENAI_API_KEY``, or the variable ``key_env`` names) when the requests are sent: it is in no
spec, record, cache key, log line or page.

Batching, concurrency and retries are :mod:`methods.endpoint.http`'s; a failing endpoint is one
``EndpointError`` line (exit 6), the vectors that came back before it stay cached.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.api import EmbeddingMethod, MethodContext, MethodSpec, Option, SpecRequest
from harness.core.errors import EndpointError, UserError
from harness.core.progress import progress_bar

if TYPE_CHECKING:
    from harness.core.data.splits import SplitData
    from harness.core.vector_store import VectorStore
    from methods.endpoint.http import Spent

FLUSH = 2048  # sentences kept in memory before they are written to the cache as one part
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def endpoint_url(given: str, option: str = "--backbone") -> str:
    """The API root of ``given`` (``http(s)://HOST[:PORT]/PATH``, a trailing ``/embeddings`` or
    ``/`` dropped), or one line saying why it is not one, naming the ``option`` it came from. A
    user name, password, query or fragment is refused: they would be written to records and
    pages, and a key belongs in the environment.

    >>> endpoint_url("http://127.0.0.1:8000/v1/embeddings/")
    'http://127.0.0.1:8000/v1'
    >>> endpoint_url("https://me:sk-1@api.example.com/v1")
    Traceback (most recent call last):
    harness.core.errors.UserError: endpoint https://api.example.com/v1: the URL holds a user ...
    """
    try:
        parts = urllib.parse.urlsplit(given.strip())
        parts.port  # noqa: B018 (a port that is not a number raises here)
        usable = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unclosed IPv6 bracket, a port that is not a number
        usable = False
    if not usable:
        raise UserError(
            f"{option} {given.split('?')[0]!r} is not an http(s) URL with a host; give the "
            "API's root, e.g. http://127.0.0.1:8000/v1 or https://api.openai.com/v1"
        )
    shown = f"{parts.scheme.lower()}://{parts.netloc.rpartition('@')[2]}{parts.path}"
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise UserError(
            f"endpoint {shown}: the URL holds a user name, password, query or fragment, which "
            "would be written to every record; give the API key in $OPENAI_API_KEY (or the "
            "variable --set endpoint.key_env=NAME names) and the URL without them"
        )
    path = parts.path.rstrip("/")
    path = path[: -len("/embeddings")] if path.endswith("/embeddings") else path
    return f"{parts.scheme.lower()}://{parts.netloc}{path}"


class Endpoint(EmbeddingMethod):
    name = "endpoint"
    summary = (
        "a model behind an OpenAI-compatible POST /v1/embeddings (hosted, vLLM, TEI, Ollama, "
        "LiteLLM): --backbone URL --set endpoint.model=NAME"
    )
    options = (
        Option("model", "", "the model the endpoint serves (required): text-embedding-3-small"),
        Option(
            "url",
            "backbone",
            "the API root, http(s)://HOST[:PORT]/v1; backbone = --backbone (an http(s) URL)",
            in_label=False,
        ),
        Option(
            "dimensions",
            0,
            "the dimensions request field (models that shorten their vectors); 0: not sent",
            type=int,
        ),
        Option(
            "cache_key",
            "",
            "a version of the served model, part of the cache key: change it when the model "
            "behind the name changes",
        ),
        Option(
            "batch_size",
            32,
            "inputs per request (OpenAI takes 2048, TEI 32 by default)",
            type=int,
            in_label=False,
        ),
        Option(
            "max_chars",
            50_000,
            "characters per request, a stand-in for a token budget (~4 characters a token)",
            type=int,
            in_label=False,
        ),
        Option("concurrency", 4, "requests in flight at once", type=int, in_label=False),
        Option(
            "attempts",
            6,
            "tries of a batch through 429, 5xx, timeouts, dropped connections (with backoff)",
            type=int,
            in_label=False,
        ),
        Option("timeout", 60.0, "seconds one request may take", type=float, in_label=False),
        Option(
            "key_env",
            "OPENAI_API_KEY",
            "the environment variable holding the API key (sent as Bearer; unset: none sent)",
            in_label=False,
        ),
    )

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._vectors: VectorStore | None = None
        self.spent: Spent | None = None  # what this run asked of the endpoint (record: usage)

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        """No backbone of the run's: the endpoint is its own model. ``url`` resolved (from
        ``--backbone`` by default) and every option checked here, before anything is encoded."""
        spec = super().make_spec(request, ctx)
        params, given = dict(spec.params), "--set endpoint.url"
        if params["url"] == "backbone":
            if not request.backbone.lower().startswith(("http://", "https://")):
                raise UserError(
                    f"endpoint: --backbone {request.backbone} is not an endpoint's URL; name one "
                    "with --backbone http://HOST:PORT/v1, or --set endpoint.url=URL to keep "
                    "--backbone for the other methods"
                )
            params["url"], given = request.backbone, "--backbone"
        params["url"] = endpoint_url(params["url"], given)
        if not str(params["model"]).strip():
            raise UserError(
                f"endpoint {params['url']}: name the model it serves: --set endpoint.model=NAME"
            )
        # the counts' ranges are the option checks' (a positive integer; dimensions >= 0)
        if not params["timeout"] > 0:
            raise UserError(f"--set endpoint.timeout={params['timeout']}: expected seconds > 0")
        if not _ENV_NAME.fullmatch(params["key_env"]):
            raise UserError(  # the value is not shown: it may be the key, pasted by mistake
                "--set endpoint.key_env: expected the name of the environment variable holding "
                "the key, e.g. OPENAI_API_KEY, not the key itself"
            )
        # the tables' backbone column: the model and host[:port], never the URL's path
        tag = f"{params['model']} @ {urllib.parse.urlsplit(params['url']).netloc}"
        return replace(spec, backbone=tag, revision=None, pooling="none", layers=(), params=params)

    def reads_backbone(self) -> bool:
        return False  # spec.backbone names the endpoint, not a checkpoint

    def code(self) -> tuple[str, ...]:
        """What the cached vectors depend on in this project's code: the request body and the
        reading of the answer, not the batching, retries or bookkeeping around them."""
        return ("methods.endpoint.wire",)

    def who(self) -> str:
        return f"endpoint {self.spec.params['url']} (model {self.spec.params['model']})"

    def store(self) -> VectorStore:
        if self._vectors is None:
            p = self.spec.params
            key = {
                "kind": "endpoint",
                "url": p["url"],
                "model": p["model"],
                "dimensions": p["dimensions"] or None,
                "cache_key": p["cache_key"],
            }
            self._vectors = self.ctx.artifacts.vectors(key, code=self.code())
        return self._vectors

    def describe_encode(self, sentences: Sequence[str]) -> str:
        from methods.endpoint.http import batches

        p = self.spec.params
        todo = self.store().missing(sentences)
        requests = len(batches(todo, p["batch_size"], p["max_chars"]))
        return (
            f"{len(set(sentences)) - len(todo)} cached, {len(todo)} to send to {self.who()} in "
            f"{requests} request(s)"
        )

    def prepare(self, sentences: Sequence[str]) -> None:
        """Send every sentence the cache lacks; each batch's vectors are kept as they arrive and
        written to the cache every :data:`FLUSH` sentences and when the run stops, failed or not."""
        from methods.endpoint.http import Client, Limits

        store = self.store()
        todo = store.missing(sentences)
        if not todo:
            return
        p = self.spec.params
        limits = Limits(
            p["batch_size"], p["max_chars"], p["concurrency"], p["attempts"], p["timeout"]
        )
        key = os.environ.get(p["key_env"]) or None
        client = Client(
            p["url"], p["model"], p["dimensions"], key, limits, self.who(), p["key_env"]
        )
        held: list[tuple[list[str], np.ndarray]] = []
        width = store.dim

        def keep(texts: list[str], vectors: np.ndarray) -> None:
            nonlocal width
            if width is not None and vectors.shape[1] != width:
                raise EndpointError(
                    f"{self.who()}: an answer has {vectors.shape[1]} dimensions after {width}; "
                    "the served model changed: set --set endpoint.cache_key=NEW to cache it apart"
                )
            width = vectors.shape[1]
            held.append((texts, vectors))
            if sum(len(t) for t, _ in held) >= FLUSH:
                flush()

        def flush() -> None:
            if held:
                texts = [t for batch, _ in held for t in batch]
                store.add(texts, np.concatenate([v for _, v in held]))
                held.clear()

        desc = f"encode {self.spec.backbone}"
        try:
            with progress_bar(len(todo), desc, "sentence", self.ctx.encode.progress) as bar:
                client.run(todo, keep, bar)
        finally:  # what came back is cached, whatever stopped the run
            flush()
            self.spent = client.spent
            self.ctx.count_forwarded(client.spent.inputs, "endpoint")

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        self.prepare(sentences)
        return self.store().get(sentences)

    def annotate(self, split: SplitData, similarity: np.ndarray) -> dict[str, Any]:
        """The endpoint as the record keeps it: URL (no credentials), the model asked for (never
        an answer's), dimensions asked and received, and what this run asked of it (requests,
        retries, inputs, and the tokens the answers' ``usage`` reported: 0 requests on a warm
        run). The usage is the run's, for every task it encoded at once, not this task's."""
        from methods.endpoint.http import Spent

        p = self.spec.params
        spent = self.spent or Spent()
        return {
            "endpoint": {
                "url": p["url"],
                "model": p["model"],
                "dimensions": p["dimensions"] or None,
                "vector_dim": self.store().dim,
                "key_env": p["key_env"],
                "usage": spent.record(),
            }
        }
