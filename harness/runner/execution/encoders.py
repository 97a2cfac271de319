"""An encoder object from Python as a method of the run: anything with ``encode(list[str])``
returning an array-like (n, d) becomes an :class:`~harness.core.api.EmbeddingMethod` subclass named
by the user (:func:`encoder_method`), registered in this process (``methods.register_method``) and
scored like every built-in method: same cosine, intervals, paired tests, ★ marks, records and
reports.

Its vectors are computed once per run: :meth:`ObjectEncoder.prepare` receives every sentence of the
run's tasks and calls ``encode`` on those it does not hold yet, in first-seen order, in chunks of
:data:`CHUNK`. Where they are kept:

* ``cache_key=None``: in memory for this run only; a later run calls ``encode`` again.
* ``cache_key="v1"``: in the cache (``ArtifactStore.vectors``) under (name, cache_key) and the
  digest of this module's code. An object's code cannot be digested reliably (it may be a compiled
  model, a closure, a remote service), so **the user names its version**: change ``cache_key``
  whenever the encoder changes, or stale vectors are served.

What ``encode`` returns is checked before it is used (:func:`checked_vectors`): a wrong shape, a row
count that differs from the sentences given, a non-numeric array or a NaN/inf is one ``PluginError``
line (a ``UserError``) naming the encoder. The run checks a plugin method's vectors and pair scores
with the same functions (:mod:`.evaluate`), as a ``PluginError`` naming the plugin's file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from harness.core.api import EmbeddingMethod, MethodContext, MethodSpec, SpecRequest
from harness.core.errors import PluginError, UserError

if TYPE_CHECKING:
    from harness.core.vector_store import VectorStore

CHUNK = 4096  # sentences per encode() call: what a chunk computed is cached before the next one
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_+-]*")  # a leaderboard row, a --set key and a folder name


def describe(encoder: Any) -> str:
    """``module.Class`` of an encoder object, for records and messages."""
    kind = type(encoder)
    return f"{kind.__module__}.{kind.__qualname__}"


def checked_vectors(
    output: Any, n: int, who: str, call: str = "encode()", error: type[UserError] = UserError
) -> np.ndarray:
    """``output`` of ``call`` on ``n`` sentences as float32 (n, d), or one ``error`` line, after
    ``who`` (``encoder 'NAME' (module.Class)``, a plugin method's name and file), saying what is
    wrong with it. Tensors are accepted through ``.detach().cpu().numpy()`` (torch is not imported).

    >>> checked_vectors([[1, 2], [3, 4]], 2, "encoder 'enc'").dtype
    dtype('float32')
    >>> checked_vectors([1.0, 2.0], 2, "encoder 'enc'")
    Traceback (most recent call last):
    harness.core.errors.UserError: encoder 'enc': encode() returned shape (2,) for 2 sentences; ...
    """
    need = f"{call} must return an array-like (n, d) of finite numbers, one row per sentence"
    array = _numbers(output, who, call, need, error)
    if array.ndim != 2 or array.shape[1] == 0:
        raise error(f"{who}: {call} returned shape {array.shape} for {n} sentences; {need}")
    if array.shape[0] != n:
        raise error(f"{who}: {call} returned {array.shape[0]} rows for {n} sentences; {need}")
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf: caught below
        vectors = array.astype(np.float32)
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise error(
            f"{who}: {call} returned NaN or inf (or values beyond float32) in {int(bad.sum())} of "
            f"{n} rows, first row {first}; {need}"
        )
    return vectors


def checked_scores(
    output: Any, n: int, who: str, call: str = "score_pairs()", error: type[UserError] = UserError
) -> np.ndarray:
    """``output`` of ``call`` on ``n`` pairs as float64 (n,), one finite score per pair, or one
    ``error`` line after ``who`` saying what is wrong with it.

    >>> checked_scores([0.5, 1], 2, "plugin method 'x'").tolist()
    [0.5, 1.0]
    """
    need = f"{call} must return one finite number per pair, an array-like of shape (n,)"
    array = _numbers(output, who, call, need, error)
    if array.shape != (n,):
        raise error(f"{who}: {call} returned shape {array.shape} for {n} pairs; {need}")
    scores = array.astype(np.float64)
    bad = ~np.isfinite(scores)
    if bad.any():
        raise error(
            f"{who}: {call} returned NaN or inf for {int(bad.sum())} of {n} pairs, first pair "
            f"{int(np.flatnonzero(bad)[0])}; {need}"
        )
    return scores


def _numbers(output: Any, who: str, call: str, need: str, error: type[UserError]) -> np.ndarray:
    """``output`` as a numeric numpy array (ints or floats; bools, strings and objects are
    refused)."""
    if hasattr(output, "detach") and hasattr(output, "cpu"):  # a torch tensor, maybe on a GPU
        output = _tensor_numbers(output, who, call, need, error)
    try:
        array = np.asarray(output)
    except (TypeError, ValueError) as err:  # ragged rows
        raise error(
            f"{who}: {call} returned {type(output).__name__} that is not an array "
            f"({str(err).splitlines()[0][:120]}); {need}"
        ) from None
    if array.dtype.kind not in "iuf":
        raise error(
            f"{who}: {call} returned {type(output).__name__} of {array.dtype} values, not numbers; "
            f"{need}"
        )
    return array


# torch's float types numpy has no type for (bfloat16, the float8s): read through float32
_NUMPY_FLOATS = ("torch.float16", "torch.float32", "torch.float64")


def _tensor_numbers(output: Any, who: str, call: str, need: str, error: type[UserError]) -> Any:
    """A tensor's values as numpy: bfloat16 and float8 through float32 (numpy has no such type);
    a tensor numpy cannot read (sparse, on the meta device) is one ``error`` line naming ``call``,
    the call that returned it, not whichever guarded call happened to be running."""
    try:
        tensor = output.detach().cpu()
        if tensor.is_floating_point() and str(tensor.dtype) not in _NUMPY_FLOATS:
            tensor = tensor.float()
        return tensor.numpy()
    except Exception as err:  # whatever the tensor library raises: the value is the guest's
        first = (str(err).strip().splitlines() or [""])[0][:120]
        raise error(
            f"{who}: {call} returned {type(output).__name__} that numpy cannot read "
            f"({type(err).__name__}: {first}); {need}"
        ) from None


class ObjectEncoder(EmbeddingMethod):
    """Base of the classes :func:`encoder_method` builds; ``encoder`` and ``cache_key`` are
    theirs."""

    summary = "an encoder object given from Python (harness.evaluate)"
    encoder: ClassVar[Any]
    cache_key: ClassVar[str | None] = None
    # How a PluginError names it and where its code is (methods.guests): the object's class and
    # module, not this module, where the class around it is built.
    plugin_source: ClassVar[str]
    plugin_module: ClassVar[str]
    # The caller's own object stays in the caller's process (methods/wall.py): its model may be on
    # the caller's GPU, and the process is the caller's anyway.
    in_process: ClassVar[bool] = True

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._memory: dict[str, np.ndarray] = {}
        self._dim: int | None = None
        self._store: VectorStore | None = None
        if self.cache_key is not None:
            self._store = ctx.artifacts.vectors(
                {"kind": "python-encoder", "name": self.name, "cache_key": self.cache_key},
                code=self.code(),
            )

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        """No backbone of the run's: the object is its own model."""
        spec = super().make_spec(request, ctx)
        return replace(
            spec,
            backbone="none",
            revision=None,
            pooling="none",
            layers=(),
            params={"encoder": describe(cls.encoder), "cache_key": cls.cache_key},
        )

    def encoder_impl(self) -> str:
        return describe(self.encoder)

    def describe_encode(self, sentences: Sequence[str]) -> str:
        missing = len(self._missing(sentences))
        return (
            f"{len(set(sentences)) - missing} cached, {missing} to encode with "
            f"{describe(self.encoder)}"
        )

    def _missing(self, sentences: Sequence[str]) -> list[str]:
        if self._store is not None:
            return self._store.missing(sentences)
        return [s for s in dict.fromkeys(sentences) if s not in self._memory]

    def prepare(self, sentences: Sequence[str]) -> None:
        from methods.guests import guest

        todo = self._missing(sentences)
        who = f"encoder '{self.name}' ({describe(self.encoder)})"
        for start in range(0, len(todo), CHUNK):
            texts = todo[start : start + CHUNK]
            # the object's own call: its exit or exception named as its
            with guest(type(self), "encode()"):
                output = self.encoder.encode(list(texts))
            # PluginError (a UserError): the object is the caller's code; the run keeps the other
            # results
            vectors = checked_vectors(output, len(texts), who, error=PluginError)
            if self._dim is not None and vectors.shape[1] != self._dim:
                raise PluginError(
                    f"{who}: encode() returned {vectors.shape[1]} dimensions after {self._dim} in "
                    "an earlier call; every vector must have the same size"
                )
            self._dim = vectors.shape[1]
            self.ctx.count_forwarded(len(texts), "python")
            if self._store is None:
                self._memory.update(zip(texts, vectors))
                continue
            try:
                self._store.add(texts, vectors)
            except ValueError as err:  # the store holds another dimension: the encoder changed
                raise UserError(
                    f"{who}: {err} under cache_key={self.cache_key!r}; the encoder changed, so "
                    "give it a new cache_key"
                ) from None

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        self.prepare(sentences)
        if self._store is not None:
            return self._store.get(sentences)
        if not sentences:
            return np.empty((0, self._dim or 0), np.float32)
        return np.stack([self._memory[s] for s in sentences])


def encoder_method(encoder: Any, name: str, cache_key: str | None = None) -> type[ObjectEncoder]:
    """A method class named ``name`` that encodes with ``encoder`` (not yet registered).

    >>> class Lengths:
    ...     def encode(self, texts): return [[len(t), 1.0] for t in texts]
    >>> encoder_method(Lengths(), "lengths").name
    'lengths'
    """
    if not callable(getattr(encoder, "encode", None)):
        raise UserError(
            f"encoder {describe(encoder)} has no encode method; pass an object with "
            "encode(list[str]) -> array (n, d)"
        )
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise UserError(
            f"encoder name {name!r}: use letters, digits, '-', '_' or '+' (it names a leaderboard "
            "row and a folder)"
        )
    if cache_key is not None and (not isinstance(cache_key, str) or not cache_key.strip()):
        raise UserError(
            f"cache_key {cache_key!r}: expected a non-empty string naming the encoder's version, "
            "or None for no cache"
        )
    attrs = {
        "name": name,
        "encoder": encoder,
        "cache_key": cache_key,
        "__module__": __name__,
        "plugin_source": describe(encoder),
        "plugin_module": type(encoder).__module__,
        "summary": f"{describe(encoder)} from Python"
        + (f" (cache_key {cache_key})" if cache_key else ""),
    }
    return type(f"Encoder_{name.replace('-', '_').replace('+', '_')}", (ObjectEncoder,), attrs)
