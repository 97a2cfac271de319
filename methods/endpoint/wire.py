"""What an OpenAI-compatible embeddings endpoint is sent, and how its answer becomes vectors.

This is the part of the ``endpoint`` method that decides the numbers: the request body (model,
inputs, ``dimensions``) and the reading of ``data[*].embedding`` (floats, or base64 of little-endian
float32). The endpoint method's cache keys on this module's code alone
(``methods.endpoint.Endpoint.code``): batching, concurrency, retries and the progress line
(``methods.endpoint.http``) change when a vector arrives, never what it is.

The answer, as OpenAI documents it and vLLM, text-embeddings-inference, Ollama and LiteLLM
serve it::

    {"object": "list", "model": "NAME",
     "data": [{"object": "embedding", "index": 0, "embedding": [0.1, -0.2, ...]}, ...],
     "usage": {"prompt_tokens": 12, "total_tokens": 12}}

>>> answer = b'{"data": [{"index": 1, "embedding": [0, 1]},'
>>> answer += b' {"index": 0, "embedding": "AACAPwAAAAA="}],'
>>> answer += b' "usage": {"prompt_tokens": 5, "total_tokens": 5}, "model": "m"}'
>>> read = read_answer(answer, 2, None)
>>> read.vectors.tolist(), read.prompt_tokens
([[1.0, 0.0], [0.0, 1.0]], 5)
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import numpy as np

from harness.core.typecheck import held_to


class Malformed(ValueError):
    """The body is not JSON: a truncated or garbled transfer, worth another attempt."""


class WrongAnswer(ValueError):
    """JSON that is not the embeddings the request asked for (a count, a width, a value): the
    server's answer, which asking again would not change."""


# The fields read of an answer: usage where it holds counts, never model (a server echoes anything)
class EmbeddingsAnswer(TypedDict):
    data: list[AnswerItem]
    usage: NotRequired[Any]


class AnswerItem(TypedDict):
    embedding: list[float] | str  # finite numbers, or base64 of little-endian float32
    index: NotRequired[int | None]


FORMAT = "an embeddings endpoint answers OpenAI's format, data[*].embedding finite numbers"


@dataclass(frozen=True)
class Answer:
    """One request's vectors (float32, one row per input, in the inputs' order) and what the
    server said it spent (``None`` where it did not say: text-embeddings-inference may not); not
    the answer's ``model``, where a server may echo anything (the key it was sent)."""

    vectors: np.ndarray
    prompt_tokens: int | None
    total_tokens: int | None


def request_body(model: str, texts: Sequence[str], dimensions: int) -> bytes:
    """The JSON body of ``POST {url}/embeddings``; ``dimensions`` 0 leaves the model's own width
    (the field is sent only when asked: a server whose model takes no ``dimensions`` refuses it).

    >>> request_body("m", ["a b"], 0)
    b'{"model": "m", "input": ["a b"]}'
    >>> request_body("m", ["a"], 256)
    b'{"model": "m", "input": ["a"], "dimensions": 256}'
    """
    body: dict[str, Any] = {"model": model, "input": list(texts)}
    if dimensions:
        body["dimensions"] = dimensions
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def read_answer(payload: bytes, n: int, dimensions: int | None) -> Answer:
    """The vectors of an answer to ``n`` inputs, in input order (by each item's ``index``, which
    OpenAI's answers carry; by position where none has one). ``dimensions``: the width asked for
    (None: any, the same for every row). Raises :class:`Malformed` for a body that is not JSON and
    :class:`WrongAnswer` for anything else that is not ``n`` vectors of one width whose numbers
    are finite and fit float32."""
    try:  # a long integer is read as a float (10**400: inf, refused below), not as a big int
        answer = json.loads(payload, parse_int=lambda s: int(s) if len(s) < 19 else float(s))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise Malformed(f"the answer is not JSON ({str(err)[:80]})") from None
    except RecursionError:
        raise WrongAnswer("the answer is nested too deep to be embeddings") from None
    data = held_to(answer, EmbeddingsAnswer, "the answer", FORMAT, WrongAnswer)["data"]
    if len(data) != n:
        raise WrongAnswer(f"the answer holds {len(data)} embeddings for {n} inputs")
    order = _order(data)
    rows = [_vector(data[i]["embedding"], i) for i in order]
    widths = {len(row) for row in rows}
    if len(widths) != 1 or 0 in widths:
        raise WrongAnswer(f"the answer's embeddings have widths {sorted(widths)[:4]}, not one")
    width = widths.pop()
    if dimensions is not None and width != dimensions:
        raise WrongAnswer(f"the answer's embeddings have {width} dimensions, not {dimensions}")
    with np.errstate(over="ignore"):  # beyond float32's range becomes inf: refused below
        vectors = np.asarray(rows, dtype=np.float32)
    if not np.isfinite(vectors).all():
        raise WrongAnswer("the answer holds NaN, infinite values or values beyond float32's range")
    usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    return Answer(vectors, _count(usage.get("prompt_tokens")), _count(usage.get("total_tokens")))


def _order(data: list[dict[str, Any]]) -> list[int]:
    """Positions of ``data`` in input order: by ``index`` when every item has one (and they are
    0..n-1 once each), by position when none has."""
    given = [item.get("index") for item in data]
    if all(index is None for index in given):
        return list(range(len(data)))
    indices = [-1 if i is None else i for i in given]
    if sorted(indices) != list(range(len(data))):
        raise WrongAnswer(f"the answer's indices {given[:6]} are not 0..{len(data) - 1} once each")
    return sorted(range(len(data)), key=lambda position: indices[position])


def _vector(value: list[float] | str, at: int) -> list[float] | np.ndarray:
    """One embedding: a list of finite numbers, or base64 of little-endian float32
    (``encoding_format=base64``, which some proxies answer with)."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise WrongAnswer(f"embedding {at} is a string that is not base64") from None
        if len(raw) % 4:
            raise WrongAnswer(f"embedding {at} is base64 of {len(raw)} bytes, not float32s")
        return np.frombuffer(raw, dtype="<f4")
    return value


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
