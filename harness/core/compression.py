"""Cached vectors made smaller: fewer dimensions, fewer bits per dimension, another similarity.

Issue 32's axes, computed on vectors already encoded (numpy only, no torch), so a grid of
dimensions × precisions × similarities costs no forward pass:

- **dimensions** (:func:`parse_dims`, :func:`truncate`): the first ``k`` dimensions of each
  vector, as a Matryoshka model is meant to be cut (sentence-transformers' ``truncate_dim``); not
  renormalised, so ``dot`` and the distances see the shorter vector as it is.
- **precisions** (:data:`PRECISIONS`, :func:`quantize`): ``fp32`` as is; ``int8``/``uint8`` one byte
  per dimension on per-dimension ranges learnt from calibration vectors (:func:`calibrate`);
  ``binary``/``ubinary`` one bit per dimension (its sign), eight to a byte. The values are those of
  sentence-transformers' ``quantize_embeddings`` on the same inputs (``tests/test_compression.py``
  checks it).
- **similarities** (:data:`SIMILARITIES`, :func:`pair_similarity`): larger is more similar, so a
  distance is negated. An ``int8``/``uint8`` vector is compared as its integers (as float64), as
  sentence-transformers' ``EmbeddingSimilarityEvaluator`` does.

The rule for bits: a ``binary``/``ubinary`` vector is compared by Hamming distance (the number of
dimensions whose signs differ), whatever similarity is asked (:func:`similarity_for`), because that
is how packed bits are searched (XOR and popcount). sentence-transformers' evaluator instead
unpacks the bits to 0/1 floats and applies the asked function; on 0/1 vectors ``manhattan`` is the
Hamming distance and ``euclidean`` its square root, so both rank pairs as Hamming does; ``cosine``
and ``dot`` on bits do not, and are not offered here.

Worked example of int8/uint8 calibration, two dimensions. The calibration vectors
``(-1, 0), (1, 4), (0, 2)`` give the ranges ``low = (-1, 0)``, ``high = (1, 4)``, so 255 steps of
``2/255`` and ``4/255``. The vector ``(0.5, 1.0)`` is ``(0.5 + 1) / (2/255) = 191.25`` and
``(1.0 - 0) / (4/255) = 63.75`` steps above ``low``: floored, ``uint8 (191, 63)``, and 128 less,
``int8 (63, -65)``. ``(1.2, -1.0)`` lies outside the ranges (``280.5`` and ``-63.75`` steps) and is
clipped to the ends, ``uint8 (255, 0)``, ``int8 (127, -128)``:

>>> cal = calibrate(np.array([[-1, 0], [1, 4], [0, 2]], dtype=np.float32))
>>> cal.low, cal.high
(array([-1.,  0.], dtype=float32), array([1., 4.], dtype=float32))
>>> x = np.array([[0.5, 1.0], [1.2, -1.0]], dtype=np.float32)
>>> quantize(x, "uint8", cal)
array([[191,  63],
       [255,   0]], dtype=uint8)
>>> quantize(x, "int8", cal)
array([[  63,  -65],
       [ 127, -128]], dtype=int8)

Worked example of Hamming distance. ``(0.3, -0.1, 0.2, 0.0)`` has the bits ``1 0 1 0`` (``0.0`` is
not above 0), packed high bit first and padded with zeros to ``1010 0000`` = 160, which ``binary``
stores as ``160 - 128 = 32``; ``(0.5, 0.9, -0.4, -0.2)`` has ``1 1 0 0`` = 192, stored as 64. They
differ in the second and third bits: a Hamming distance of 2, a similarity of -2 (asked for
``cosine``, a binary pair is still compared by Hamming distance):

>>> a = quantize(np.array([[0.3, -0.1, 0.2, 0.0]]), "binary")
>>> b = quantize(np.array([[0.5, 0.9, -0.4, -0.2]]), "binary")
>>> a, b, unpack_bits(a, "binary", 4)
(array([[32]], dtype=int8), array([[64]], dtype=int8), array([[1, 0, 1, 0]], dtype=uint8))
>>> pair_similarity(a, b, "cosine", "binary")
(array([-2.]), 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.core.errors import UserError, did_you_mean, flag
from harness.core.scoring import cosine_rows
from harness.core.sparse import SPARSE

PRECISIONS = ("fp32", "int8", "uint8", "binary", "ubinary")
SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
HAMMING = "hamming"  # not asked for: what a binary/ubinary vector is compared by (similarity_for)
BIT_PRECISIONS = ("binary", "ubinary")
FULL = "full"  # --dims full: every dimension the backbone has

_DTYPES = {"int8": np.int8, "uint8": np.uint8, "binary": np.int8, "ubinary": np.uint8}
_POPCOUNT = np.array([bin(byte).count("1") for byte in range(256)], dtype=np.int64)


def parse_dims(values: Sequence[str | int]) -> tuple[int | None, ...]:
    """The dimensions asked for, in order and once each; ``full`` (every dimension) is None.

    >>> parse_dims(["full", "256", 64, "256", " FULL "])
    (None, 256, 64)
    """
    if not values:
        raise UserError(f"{flag('--dims')}: expected at least one number of dimensions or {FULL}")
    dims: dict[int | None, None] = {}
    for value in values:
        text = str(value).strip()
        if text.lower() == FULL:
            dims[None] = None
        elif not isinstance(value, bool) and text.isascii() and text.isdigit():
            number = int(text)
            if number <= 0:
                raise _not_dims(value)
            dims[number] = None
        else:
            raise _not_dims(value)
    return tuple(dims)


def _not_dims(value: object) -> UserError:
    return UserError(
        f"{flag('--dims', str(value))}: expected a positive number of dimensions or {FULL}"
    )


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else one :class:`UserError` line."""
    if precision not in PRECISIONS:
        hint = did_you_mean(precision, PRECISIONS)
        raise UserError(
            f"{flag('--precision', precision)}: unknown precision{hint}; choose among "
            f"{', '.join(PRECISIONS)}"
        )
    return precision


def similarity_for(precision: str, similarity: str) -> str:
    """The similarity a vector of ``precision`` is compared by when ``similarity`` is asked:
    ``similarity`` itself, except that bits (``binary``, ``ubinary``) are always compared by
    ``hamming``. ``hamming`` is not asked for: it follows from the precision.

    >>> similarity_for("int8", "dot"), similarity_for("binary", "dot")
    ('dot', 'hamming')
    """
    check_precision(precision)
    if similarity not in SIMILARITIES:
        hint = (
            f" (it is what {' and '.join(BIT_PRECISIONS)} are compared by, whatever is asked)"
            if similarity == HAMMING
            else did_you_mean(similarity, SIMILARITIES)
        )
        raise UserError(
            f"{flag('--similarity', similarity)}: not a similarity to ask for{hint}; choose "
            f"among {', '.join(SIMILARITIES)}"
        )
    return HAMMING if precision in BIT_PRECISIONS else similarity


def truncate(vectors: np.ndarray, k: int | None) -> np.ndarray:
    """The first ``k`` dimensions of each vector (along the last axis); None: every dimension,
    ``vectors`` itself. Not renormalised. ``truncate(np.arange(6).reshape(2, 3), 2)`` keeps
    ``[[0, 1], [3, 4]]``."""
    if k is None:
        return vectors
    d = vectors.shape[-1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise _not_dims(k)
    if k > d:
        raise UserError(
            f"{flag('--dims', str(k))}: the vectors have {d} dimensions, fewer than {k}; ask for "
            f"at most {d} (or {FULL})"
        )
    return vectors[..., :k]


@dataclass(frozen=True)
class Calibration:
    """Per-dimension ranges for ``int8``/``uint8``: the smallest (``low``) and largest (``high``)
    value of each dimension over the calibration vectors, float32, shape ``(d,)`` each, as
    sentence-transformers' ``quantize_embeddings`` computes them from ``calibration_embeddings``.
    """

    low: np.ndarray
    high: np.ndarray

    def __post_init__(self) -> None:
        low = np.asarray(self.low, dtype=np.float32)
        high = np.asarray(self.high, dtype=np.float32)
        if low.ndim != 1 or low.shape != high.shape:
            raise ValueError(f"a calibration is two (d,) arrays, not {low.shape}, {high.shape}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @property
    def dims(self) -> int:
        return int(self.low.shape[0])

    def first(self, k: int | None) -> Calibration:
        """The ranges of the first ``k`` dimensions: those of the truncated calibration vectors
        (a minimum or maximum per dimension does not depend on the other dimensions)."""
        if k is None:
            return self
        return Calibration(truncate(self.low, k), truncate(self.high, k))


def calibrate(vectors: np.ndarray) -> Calibration:
    """The per-dimension (min, max) of ``vectors`` (n, d), n ≥ 2, as float32."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or len(vectors) < 2:
        raise UserError(
            f"int8/uint8 calibration needs at least 2 vectors of the same length; got an array of "
            f"shape {vectors.shape}"
        )
    if not np.all(np.isfinite(vectors)):
        raise UserError(
            f"int8/uint8 calibration: {int((~np.isfinite(vectors)).sum())} values of the "
            "calibration vectors are NaN or infinite"
        )
    return Calibration(
        low=vectors.min(axis=0).astype(np.float32), high=vectors.max(axis=0).astype(np.float32)
    )


def quantize(
    vectors: np.ndarray, precision: str, calibration: Calibration | None = None
) -> np.ndarray:
    """``vectors`` (n, d), floating, in ``precision``: ``fp32`` float32 (n, d); ``int8``/``uint8``
    (n, d); ``binary`` int8 and ``ubinary`` uint8 (n, ceil(d / 8)).

    ``int8``/``uint8``, per dimension, on ``calibration`` (None: the vectors themselves, as
    sentence-transformers does without calibration vectors): ``step = (high - low) / 255`` in
    float32, a zero step (every calibration value equal) taken as 1; ``q = floor((x - low) /
    step)``, clipped to 0..255 (a value outside the calibration range saturates); ``uint8`` is
    ``q``, ``int8`` is ``q - 128``. So in a dimension of zero range ``x`` becomes ``floor(x -
    low)`` clipped: 0 at ``low`` and below, one more per unit above. All of this as
    sentence-transformers 6.2 does (older releases cast without clipping: out of range, wrapped
    values; and truncated ``int8`` toward zero, one more than ``uint8 - 128`` below the middle).

    ``binary``/``ubinary``: the bit ``x > 0`` of each dimension, eight to a byte, high bit first,
    the last byte padded with 0 bits (``np.packbits``); ``ubinary`` is that byte, ``binary`` the
    byte minus 128.
    """
    check_precision(precision)
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or not np.issubdtype(vectors.dtype, np.floating):
        raise ValueError(
            f"quantize() takes floating vectors (n, d), not {vectors.dtype} {vectors.shape}"
        )
    if precision == "fp32":
        return vectors.astype(np.float32)
    if precision in BIT_PRECISIONS:
        packed = np.packbits(vectors > 0, axis=-1)
        if precision == "ubinary":
            return packed
        return (packed.astype(np.int16) - 128).astype(np.int8)
    if not np.all(np.isfinite(vectors)):
        raise UserError(
            f"{precision}: {int((~np.isfinite(vectors)).sum())} values of the vectors to quantize "
            "are NaN or infinite"
        )
    cal = calibrate(vectors) if calibration is None else calibration
    if cal.dims != vectors.shape[1]:
        raise ValueError(
            f"the calibration has {cal.dims} dimensions, the vectors {vectors.shape[1]}: "
            "truncate both alike (Calibration.first)"
        )
    step = (cal.high - cal.low) / np.float32(255)
    step[step == 0] = 1
    q = np.clip(np.floor((vectors - cal.low) / step), 0, 255)
    return q.astype(np.uint8) if precision == "uint8" else (q - 128).astype(np.int8)


def bytes_per_vector(dims: int, precision: str) -> int:
    """Bytes one vector of ``dims`` dimensions takes in ``precision``.

    >>> [bytes_per_vector(768, p) for p in PRECISIONS], bytes_per_vector(13, "binary")
    ([3072, 768, 768, 96, 96], 2)
    """
    check_precision(precision)
    if isinstance(dims, bool) or not isinstance(dims, (int, np.integer)) or dims <= 0:
        raise _not_dims(dims)
    if precision == "fp32":
        return 4 * int(dims)
    if precision in BIT_PRECISIONS:
        return (int(dims) + 7) // 8
    return int(dims)


def unpack_bits(packed: np.ndarray, precision: str, dims: int) -> np.ndarray:
    """The 0/1 bits (n, dims) of ``binary``/``ubinary`` vectors: for ``binary``, each byte is
    first brought back to its bit pattern by adding 128."""
    if precision not in BIT_PRECISIONS:
        raise ValueError(f"unpack_bits() takes binary or ubinary vectors, not {precision!r}")
    return np.unpackbits(_bit_bytes(packed, precision), axis=-1, count=dims)


def _bit_bytes(packed: np.ndarray, precision: str) -> np.ndarray:
    packed = np.asarray(packed)
    _check_dtype(packed, precision)
    if precision == "binary":
        return (packed.astype(np.int16) + 128).astype(np.uint8)
    return packed


def _check_dtype(vectors: np.ndarray, precision: str) -> None:
    expected = _DTYPES.get(precision)
    if expected is None:
        ok = np.issubdtype(vectors.dtype, np.floating)
    else:
        ok = vectors.dtype == expected
    if not ok:
        raise ValueError(
            f"{precision} vectors are {np.dtype(expected).name if expected else 'floating'}, "
            f"not {vectors.dtype}: quantize() them first"
        )


def pair_similarity(
    a: np.ndarray, b: np.ndarray, similarity: str, precision: str
) -> tuple[np.ndarray, int]:
    """The similarity (float64, larger = more similar) of each row of ``a`` with the same row of
    ``b``, vectors in ``precision`` (as :func:`quantize` returns them), compared by
    :func:`similarity_for` ``(precision, similarity)``; and how many pairs had no defined value.

    ``cosine``: :func:`harness.core.scoring.cosine_rows` (a pair with a zero vector scores 0 and
    is counted); ``dot``: ``Σ aᵢbᵢ``; ``euclidean``: ``-√Σ(aᵢ - bᵢ)²``; ``manhattan``:
    ``-Σ|aᵢ - bᵢ|``; ``int8``/``uint8`` on their integers as float64. ``hamming``: minus the
    number of differing bits of the packed bytes (popcount of their XOR; padding bits are 0 on
    both sides). The count is 0 except for ``cosine``.
    """
    how = similarity if similarity == HAMMING else similarity_for(precision, similarity)
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(
            f"pair_similarity() takes two (n, d) arrays alike, not {a.shape}, {b.shape}"
        )
    _check_dtype(a, precision)
    _check_dtype(b, precision)
    if how == HAMMING:
        differ = np.bitwise_xor(_bit_bytes(a, precision), _bit_bytes(b, precision))
        return -_POPCOUNT[differ].sum(axis=1).astype(np.float64), 0
    if how == "cosine":
        return cosine_rows(a, b)
    x, y = a.astype(np.float64), b.astype(np.float64)
    if how == "dot":
        return np.einsum("ij,ij->i", x, y), 0
    if how == "euclidean":
        return -np.sqrt(((x - y) ** 2).sum(axis=1)), 0
    return -np.abs(x - y).sum(axis=1), 0


# -- the grid a run scores: every (dims, precision, similarity) asked, and the full vector ---------


@dataclass(frozen=True, order=True)
class VectorSetting:
    """One way of storing and comparing a method's vectors: the first ``dims`` dimensions (None:
    all), in ``precision``, compared by ``similarity`` (as compared: ``hamming`` for bits).

    >>> cut, bits = VectorSetting(64, "int8", "cosine"), VectorSetting(None, "binary", "hamming")
    >>> cut.suffix(), bits.suffix(), bits.reference().label("avg")
    ('64d int8', 'binary', 'avg')
    >>> VectorSetting(128, "fp32", "dot").label("avg")
    'avg · 128d dot'
    """

    dims: int | None
    precision: str
    similarity: str

    @classmethod
    def read(cls, dims: object, precision: object, similarity: object) -> VectorSetting:
        """A setting as records and tables write it: ``dims`` a number (or its text) or
        ``full``. ``VectorSetting.read("64", "int8", "cosine").suffix() == "64d int8"``."""
        return cls(None if dims == FULL else int(str(dims)), str(precision), str(similarity))

    @property
    def full(self) -> bool:
        """Every dimension in float32 (or sparse, :mod:`harness.core.sparse`: a sparse method's
        own vectors): the vector the method made, as it made it."""
        return self.dims is None and self.precision in ("fp32", SPARSE)

    @property
    def calibrated(self) -> bool:
        """Whether its values need calibration ranges (``int8``/``uint8``)."""
        return self.precision in ("int8", "uint8")

    def suffix(self) -> str:
        """What a row label adds to the method's label: the dimensions when cut, the precision
        when not fp32, the similarity when not the precision's own (cosine; hamming for bits).
        Sparse vectors are scored only as the method made them: their similarity, when not
        cosine (``splade · dot``)."""
        if self.precision == SPARSE:
            return "" if self.similarity == "cosine" else self.similarity
        own = HAMMING if self.precision in BIT_PRECISIONS else "cosine"
        parts = [
            f"{self.dims}d" if self.dims is not None else "",
            self.precision if self.precision != "fp32" else "",
            self.similarity if self.similarity != own else "",
        ]
        return " ".join(part for part in parts if part)

    def label(self, method_label: str) -> str:
        """The row label: the method's, with :meth:`suffix` after a middle dot if any."""
        suffix = self.suffix()
        return f"{method_label} · {suffix}" if suffix else method_label

    def reference(self) -> VectorSetting:
        """The full vector this setting is compared with: every dimension in fp32, by the same
        similarity (cosine for bits, which have no float similarity of their own); a sparse
        vector is its own full vector."""
        if self.precision == SPARSE:
            return self
        return VectorSetting(
            None, "fp32", "cosine" if self.similarity == HAMMING else self.similarity
        )

    def describe(self, full_dims: int) -> dict[str, object]:
        """As a record keeps it (``record["vector"]``), for vectors of ``full_dims`` dimensions."""
        dims = full_dims if self.dims is None else self.dims
        return {
            "dims": self.dims if self.dims is not None else FULL,
            "full_dims": full_dims,
            "precision": self.precision,
            "similarity": self.similarity,
            "bytes_per_vector": bytes_per_vector(dims, self.precision),
        }


def vector_grid(
    dims: Sequence[str | int], precisions: Sequence[str], similarities: Sequence[str]
) -> tuple[VectorSetting, ...]:
    """Every combination asked, once each (bits collapse to one Hamming setting per dimension),
    with the full vector (every dimension, fp32) of each similarity in it: what every compressed
    setting is tested against. The full vector by the first similarity asked comes first.

    >>> [s.label("avg") for s in vector_grid(["64"], ["int8", "binary"], ["cosine", "dot"])]
    ['avg', 'avg · dot', 'avg · 64d int8', 'avg · 64d int8 dot', 'avg · 64d binary']
    """
    cut = parse_dims(dims)
    if not precisions or not similarities:
        raise UserError(
            f"{flag('--precision' if not precisions else '--similarity')}: expected at least one"
        )
    for precision in precisions:
        check_precision(precision)
    asked = [
        VectorSetting(k, p, similarity_for(p, s))
        for k in cut
        for p in precisions
        for s in similarities
    ]
    references = [VectorSetting(None, "fp32", s) for s in similarities]
    ordered = {setting: None for setting in [*references, *asked] if setting.full} | {
        setting: None for setting in asked if not setting.full
    }
    return tuple(ordered)


def needs_calibration(precisions: Sequence[str]) -> bool:
    """Whether any precision asked needs calibration ranges (fit on the run's ``--fit-set``)."""
    return any(p in ("int8", "uint8") for p in precisions)


def compressed_similarity(
    left: np.ndarray,
    right: np.ndarray,
    setting: VectorSetting,
    calibration: Calibration | None,
) -> tuple[np.ndarray, int]:
    """Each pair's similarity under ``setting``: both sides cut to ``setting.dims``, quantised
    (``int8``/``uint8`` on ``calibration`` cut alike: it must be given), compared.

    >>> left = np.array([[1.0, 2.0, 3.0]], dtype=np.float32); right = -left
    >>> compressed_similarity(left, right, VectorSetting(2, "fp32", "dot"), None)
    (array([-5.]), 0)
    """
    a, b = truncate(left, setting.dims), truncate(right, setting.dims)
    cal = None
    if setting.calibrated:
        if calibration is None:
            raise ValueError(f"{setting.precision} needs calibration ranges")
        cal = calibration.first(setting.dims)
    qa, qb = quantize(a, setting.precision, cal), quantize(b, setting.precision, cal)
    return pair_similarity(qa, qb, setting.similarity, setting.precision)


# Pairs whose vectors are gathered at once by :func:`indexed_similarity`: 2^14 pairs of 1024
# float64 dimensions are 128 MiB a side at most, the same few MiB at 384 as any chunk of rows.
PAIR_CHUNK = 1 << 14


def distinct_rows(sentences: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The distinct sentences in first-seen order, and each sentence's row among them (intp).

    >>> distinct_rows(["b", "a", "b", "c"])
    (['b', 'a', 'c'], array([0, 1, 0, 2]))
    """
    rows: dict[str, int] = {}
    index = np.fromiter(
        (rows.setdefault(s, len(rows)) for s in sentences), dtype=np.intp, count=len(sentences)
    )
    return list(rows), index


def indexed_similarity(
    left: np.ndarray,
    left_rows: np.ndarray,
    right: np.ndarray,
    right_rows: np.ndarray,
    setting: VectorSetting,
    calibration: Calibration | None,
    chunk: int = PAIR_CHUNK,
) -> tuple[np.ndarray, int]:
    """:func:`compressed_similarity` of the pairs ``(left[left_rows[i]], right[right_rows[i]])``,
    gathered :data:`PAIR_CHUNK` pairs at a time: memory grows with the distinct vectors and 8 bytes
    a pair, never pairs × dimensions. Every similarity is a function of its own row (cut, quantised
    per dimension, compared along the row), so the values are those of the whole arrays, bit for
    bit, whatever ``chunk``.

    >>> vectors = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    >>> rows = np.array([0, 1, 1])
    >>> indexed_similarity(vectors, rows, vectors, rows[::-1], VectorSetting(None, "fp32", "dot"),
    ...                    None, chunk=2)
    (array([0., 4., 0.]), 0)
    """
    n = len(left_rows)
    if len(right_rows) != n:
        raise ValueError(f"{n} left rows and {len(right_rows)} right rows: not pairs")
    out = np.empty(n, dtype=np.float64)
    zero = 0
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        out[start:stop], count = compressed_similarity(
            left[left_rows[start:stop]], right[right_rows[start:stop]], setting, calibration
        )
        zero += count
    if n == 0:
        out, zero = compressed_similarity(left[:0], right[:0], setting, calibration)
    return out, zero
