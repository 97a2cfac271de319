"""The result record: one typed schema, sealed with a checksum when written, verified when read.

A record is one JSON file per (method, task) under ``runs/`` and the only input of every report.
:class:`Record` below *is* its schema: the TypedDicts give readers typed keys (the type checker
holds them to these names) and :func:`problems` walks the same annotations to check a record read
back from disk (:mod:`harness.core.typecheck`, the checker the settings use too), so the schema is
written once. :func:`seal` adds ``checksum``, the sha256 of the record's canonical JSON without it;
a record whose checksum does not match (an edited digit), whose fields are missing or of the wrong
type (a partial or hand-made file) or whose schema is another version is never shown:
:func:`harness.runner.records.store.load_results` skips it with one warning.

A checksum only says the file is what *someone* sealed; anyone who can write ``runs/`` can seal an
edited record with this very function. So a record is also held to its own evidence: its scores are
**recomputed** from the per-pair similarities and gold it carries, under its own aggregation
(:func:`harness.core.scoring.score_split`, the code that scored it), and must agree with the stored
Spearman, Pearson and every subset's scores; its 95 % interval must contain its Spearman, and
``n_pairs``, the subset sizes and ``n_zero_vectors`` must agree with its pairs
(:func:`evidence_problem`). A record that fails is skipped like one with a bad checksum.

Records are strict JSON: no NaN or Infinity anywhere. A score that cannot be computed is ``null``
with the reason in ``undefined`` (:mod:`harness.core.scoring`).

>>> record = seal({"schema_version": 2})
>>> record["checksum"] == checksum({"schema_version": 2})
True
"""

from __future__ import annotations

import hashlib
import typing
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from harness.core import authenticity
from harness.core.bootstrap import ResampleMemo
from harness.core.hashing import canonical_json, strict_json
from harness.core.kinds.base import AGREE as KIND_AGREE
from harness.core.scoring import AGGREGATIONS
from harness.core.sparse import SIMILARITIES as SPARSE_SIMILARITIES
from harness.core.sparse import SPARSE, sparse_bytes
from harness.core.typecheck import problem as type_problem

RESULT_SCHEMA_VERSION = 2  # 2: strict JSON (undefined scores are null), a checksum, checked on read
# The protocol fields that put results into one table (harness.runner.tables.frames.GROUP_KEYS):
# results of different values are never compared, so every record must say what its values are.
PROTOCOL_GROUP = ("aggregation", "source", "dtype", "max_length", "first_last_layers", "metric")
# The group's fields a record's protocol must hold; "metric" is the record's main score (Spearman
# for STS, a labelled task's own: ap, roc_auc, ...), read from its scores.
PROTOCOL_FIELDS = PROTOCOL_GROUP[:-1]
# ×100 points: how close a recomputed score must be (harness.core.kinds.base.AGREE says why)
AGREE = KIND_AGREE


class HarnessInfo(TypedDict):
    name: str
    version: str
    git_sha: str | None


class MethodInfo(TypedDict):
    name: str
    label: str
    kind: str
    summary: str
    spec: dict[str, Any]


class SplitRead(TypedDict):
    fingerprint: str
    n_pairs: int


class TaskInfo(TypedDict):
    name: str
    title: str
    source: str
    split: str
    origin: str
    fingerprint: str
    n_pairs: int
    subsets: dict[str, int]
    mteb_name: str | None
    kind: NotRequired[str]  # its TaskKind (harness.core.kinds); absent: graded pairs (sts)
    classes: NotRequired[list[str]]  # labelled pairs: class names in label-index order
    positive: NotRequired[str]  # labelled pairs: the class a high similarity predicts
    # when the score read splits besides the scored one (a threshold split): each split's own
    # sha256 and n_pairs, the scored one first; "fingerprint" then hashes them all
    splits_read: NotRequired[dict[str, SplitRead]]


class Scores(TypedDict):
    spearman: float | None  # ×100; None when undefined
    pearson: float | None
    spearman_ci95: list[float] | None
    bootstrap_rounds: int
    bootstrap_seed: int
    n_zero_vectors: int
    undefined: str | None  # why the score could not be computed; None when it was
    # labelled pairs (harness.core.pair_metrics): the score they are ranked by, every metric with
    # its interval ({"ap": {"value": 81.2, "ci95": [79.0, 83.1]}, ...}), how accuracy / F1
    # decided, and the thresholds chosen on the threshold split
    main_score: NotRequired[str]
    metrics: NotRequired[dict[str, MetricValue]]
    decision: NotRequired[str]
    threshold: NotRequired[dict[str, float] | None]


class MetricValue(TypedDict):
    value: float | None
    ci95: list[float] | None


class SubsetScores(TypedDict):
    spearman: float | None
    pearson: float | None
    n: int
    undefined: str | None


class Pairs(TypedDict):
    # None only where a method gave a non-finite score (then undefined)
    similarity: list[float | None]
    gold: list[float]
    subset: list[str] | None
    predicted: NotRequired[list[int]]  # a classifier's argmax class per pair (classify_pairs)


class VectorInfo(TypedDict):
    """How an embedding method's vectors were stored and compared for this score
    (:class:`harness.core.compression.VectorSetting`)."""

    dims: int | str  # the first ``dims`` dimensions, or "full"
    full_dims: int  # the width of the method's vectors
    precision: str
    similarity: str  # as compared: hamming for binary/ubinary
    bytes_per_vector: int
    calibration: NotRequired[dict[str, Any]]  # int8/uint8: the fit set the ranges came from
    # sparse vectors (harness.core.sparse): mean active dimensions and SPLADE's FLOPS of the pairs
    active_dims: NotRequired[float]
    flops: NotRequired[float]


class Record(TypedDict):
    schema_version: int
    harness: HarnessInfo
    created: str
    method: MethodInfo
    backbone: dict[str, Any] | None
    task: TaskInfo
    protocol: dict[str, Any]
    fit: dict[str, Any] | None
    scores: Scores
    subset_scores: dict[str, SubsetScores]
    pairs: Pairs
    env: dict[str, Any]
    timings: dict[str, float]
    # leaderboard columns a method declares (DSE's "vs teacher (%)")
    columns: NotRequired[dict[str, float]]
    diagnostics: NotRequired[dict[str, Any]]
    embed_dim: NotRequired[int]  # the width of the vectors scored (embedding methods)
    vector: NotRequired[VectorInfo]  # embedding methods: the setting (--dims/--precision/...)
    auth: NotRequired[str]  # HMAC of the record under $STS_BENCH_CACHE_SECRET, when one was set
    checksum: NotRequired[str]


def checksum(record: Mapping[str, Any]) -> str:
    """sha256 of the record's canonical JSON, its own ``checksum`` field left out."""
    body = {k: v for k, v in record.items() if k != "checksum"}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def _authenticated_body(record: Mapping[str, Any]) -> bytes:
    return canonical_json(
        {k: v for k, v in record.items() if k not in ("checksum", "auth")}
    ).encode("utf-8")


def seal(record: Mapping[str, Any], secret: bytes | None = None) -> dict[str, Any]:
    """The record with its checksum (the last field), and with ``secret`` (the cache secret,
    :mod:`harness.core.authenticity`) its HMAC tag before it: a record anyone could re-seal with
    the checksum cannot be re-tagged without the secret."""
    body = {k: v for k, v in record.items() if k not in ("checksum", "auth")}
    if secret:
        body["auth"] = authenticity.tag(secret, _authenticated_body(body))
    return {**body, "checksum": checksum(body)}


def strict(value: Any) -> Any:
    """:func:`harness.core.hashing.strict_json`: non-finite floats become None (strict JSON)."""
    return strict_json(value)


def problems(
    record: Any, secret: bytes | None = None, memo: ResampleMemo | None = None
) -> str | None:
    """Why ``record`` is not a valid, intact record of this schema (None when it is); with
    ``secret``, also when its HMAC tag does not verify (written without the secret, or forged).
    ``memo``: where the resamples its intervals are recomputed from are memoised (the run's: a
    record this run wrote is checked with the resamples that made its interval)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("schema_version") != RESULT_SCHEMA_VERSION:
        return (
            f"schema {record.get('schema_version')!r}, this harness reads {RESULT_SCHEMA_VERSION}"
        )
    if "checksum" not in record:
        return "no checksum"
    problem = type_problem(record, Record, "record")  # the one checker: harness.core.typecheck
    if problem:
        return problem
    if record["checksum"] != checksum(record):
        return "its content does not match its checksum (edited or damaged)"
    if secret and not authenticity.valid(secret, _authenticated_body(record), record.get("auth")):
        return (
            f"not authenticated by ${authenticity.SECRET_ENV} (written without the secret, or by "
            "someone else); run the benchmark again with the secret to rewrite it"
        )
    n = record["task"]["n_pairs"]
    if len(record["pairs"]["similarity"]) != n or len(record["pairs"]["gold"]) != n:
        return f"pairs do not match n_pairs {n}"
    # the type check above has just said it is one
    return evidence_problem(typing.cast("Record", record), memo)


def protocol_group(record: Mapping[str, Any]) -> dict[str, str]:
    """The protocol group a record's scores are tabled in, as the tables key it (strings): results
    of one group share a table and a column per task; results of two groups are never compared."""
    protocol = record["protocol"]
    return {
        "aggregation": protocol["aggregation"],
        "source": protocol["source"],
        "dtype": protocol["dtype"],
        "max_length": str(protocol["max_length"]),
        "first_last_layers": ",".join(str(x) for x in protocol["first_last_layers"]),
        "metric": main_score(record),
    }


def data_fingerprints(record: Mapping[str, Any]) -> dict[str, str]:
    """The sha256 of each split a record's score read, the scored split first (``splits_read``;
    one written without it read only its scored split, whose sha256 is ``task.fingerprint``)."""
    task = record["task"]
    if "splits_read" in task:
        return {name: entry["fingerprint"] for name, entry in task["splits_read"].items()}
    return {task.get("split", ""): str(task.get("fingerprint") or "")}


def main_score(record: Mapping[str, Any]) -> str:
    """The score a record is ranked by (its kind's): ``spearman`` for STS, ``ap`` for labelled
    pairs unless the task says otherwise."""
    from harness.core.kinds import kind_of

    return kind_of(record).main_score(record)


def score_title(record: Mapping[str, Any]) -> str:
    """How the main score is named on the console and in tables: ``Spearman``, ``AP``...
    (a threshold chosen on the scored split carries §)."""
    return metric_title(main_score(record))


def metric_title(name: str) -> str:
    """:func:`score_title` of a main score's name (a protocol group's ``metric``): the title its
    kind registered it with (:func:`harness.core.kinds.metric_named`)."""
    from harness.core.kinds import metric_named

    metric = metric_named(name)
    return metric.title if metric is not None else name


def metric_axis(name: str) -> str:
    """How an axis or a header names a main score, with its unit: ``AP ×100``."""
    from harness.core.kinds import metric_named

    metric = metric_named(name)
    return metric.axis if metric is not None else name


def main_value(record: Mapping[str, Any]) -> float | None:
    """The record's main score ×100 (None: undefined)."""
    from harness.core.kinds import kind_of

    return kind_of(record).main_value(record)


def main_ci(record: Mapping[str, Any]) -> list[float] | None:
    """The 95 % interval of the record's main score (None: none)."""
    from harness.core.kinds import kind_of

    return kind_of(record).main_ci(record)


def evidence_problem(record: Record, memo: ResampleMemo | None = None) -> str | None:
    """Why ``record``'s scores are not what its own pairs give (None when they are). ``record`` has
    passed the type check: the fields exist and have their types.

    Its kind (:mod:`harness.core.kinds`) computes every score again from the record's evidence
    (pairs, gold, subsets and the kind's own fields) and draws every interval again from the pairs,
    ``bootstrap_rounds`` and ``bootstrap_seed``; a metric registered after the record was written
    is computed and added. ``memo``: where those resamples are memoised (None: nowhere)."""
    from harness.core.errors import UserError
    from harness.core.kinds import kind_of

    problem = _table_keys_problem(record) or _vector_problem(record)
    if problem:
        return problem
    try:
        kind = kind_of(record)
    except UserError as err:
        return str(err)
    return kind.verify(typing.cast(dict, record), memo)


def _table_keys_problem(record: Record) -> str | None:
    """Why the tables could not key ``record`` (None: they can). ``protocol``, ``method.spec`` and
    ``fit`` are free-form objects in the schema; the fields every table reads from them must be
    there and be scalars, or one crafted record would stop every report."""
    protocol = record["protocol"]
    lacking = [key for key in PROTOCOL_FIELDS if key not in protocol]
    if lacking:
        return f"protocol lacks {', '.join(lacking)}"
    if protocol["aggregation"] not in AGGREGATIONS:
        return (
            f"protocol.aggregation {protocol['aggregation']!r} is not one of "
            f"{', '.join(AGGREGATIONS)}"
        )
    for key in ("source", "dtype"):
        if not isinstance(protocol[key], str):
            return f"protocol.{key} is not a string"
    if not isinstance(protocol["max_length"], int | str) or isinstance(
        protocol["max_length"], bool
    ):
        return "protocol.max_length is not an integer"
    layers = protocol["first_last_layers"]
    if not isinstance(layers, list) or not all(
        isinstance(x, int | str) and not isinstance(x, bool) for x in layers
    ):
        return "protocol.first_last_layers is not a list of layers"
    if not isinstance(record["method"]["spec"].get("backbone"), str):
        return "method.spec.backbone is not a string"
    fit_set = (record["fit"] or {}).get("fit_set", {})
    if not isinstance(fit_set, dict) or not isinstance(fit_set.get("name", ""), str):
        return "fit.fit_set is not an object with a name"
    return None


def _vector_problem(record: Record) -> str | None:
    """Why ``record["vector"]`` cannot be the setting its row says (None: it can): a known
    precision and the similarity it is compared by, dimensions within the vectors', the bytes
    those take, the protocol's similarity and the label's suffix alike."""
    from harness.core.compression import (
        BIT_PRECISIONS,
        FULL,
        HAMMING,
        PRECISIONS,
        SIMILARITIES,
        VectorSetting,
        bytes_per_vector,
    )

    vector = record.get("vector")
    if vector is None:
        return None
    precision, similarity, full = vector["precision"], vector["similarity"], vector["full_dims"]
    if precision == SPARSE:
        return _sparse_problem(record)
    if "active_dims" in vector or "flops" in vector:
        return f"vector.active_dims and vector.flops are for sparse vectors, not {precision}"
    if precision not in PRECISIONS:
        return f"vector.precision {precision!r} is not one of {', '.join(PRECISIONS)}"
    bits = precision in BIT_PRECISIONS
    if (similarity == HAMMING) != bits or not (bits or similarity in SIMILARITIES):
        return f"vector.similarity {similarity!r} is not how {precision} vectors are compared"
    dims = vector["dims"]
    if full < 1 or not (dims == FULL or (type(dims) is int and 1 <= dims <= full)):
        return f"vector.dims {dims!r} is not 1..{full} or {FULL}"
    kept = full if dims == FULL else int(dims)
    if vector["bytes_per_vector"] != bytes_per_vector(kept, precision):
        return (
            f"vector.bytes_per_vector {vector['bytes_per_vector']} is not what {kept} dimensions "
            f"in {precision} take"
        )
    if record["protocol"].get("similarity") != similarity:
        return f"protocol.similarity is not vector.similarity {similarity!r}"
    setting = VectorSetting.read(dims, precision, similarity)
    suffix = setting.suffix()
    if suffix and not record["method"]["label"].endswith(f" · {suffix}"):
        return f"method.label does not say its setting ({suffix})"
    return None


def _sparse_problem(record: Record) -> str | None:
    """Why a sparse ``record["vector"]`` cannot be what a sparse method's row says: every
    dimension kept, its similarity one of a sparse vector's, the protocol's similarity alike, the
    active dimensions within the vocabulary and the bytes they take, FLOPS at most as many, the
    label naming a similarity other than cosine."""
    from harness.core.compression import VectorSetting

    vector = record["vector"]
    full, similarity = vector["full_dims"], vector["similarity"]
    active, flops = vector.get("active_dims"), vector.get("flops")
    if vector["dims"] != "full" or type(full) is not int or full < 1:
        return "vector.dims of a sparse vector is not full, or vector.full_dims not a width"
    if similarity not in SPARSE_SIMILARITIES:
        return f"vector.similarity {similarity!r} is not how sparse vectors are compared"
    if record["protocol"].get("similarity") != similarity:
        return f"protocol.similarity is not vector.similarity {similarity!r}"
    if not (isinstance(active, int | float) and 0 <= active <= full):
        return f"vector.active_dims {active!r} is not 0..{full}"
    if vector["bytes_per_vector"] != sparse_bytes(active):
        return f"vector.bytes_per_vector is not what {active} active dimensions take"
    if not (isinstance(flops, int | float) and 0 <= flops <= full):
        return f"vector.flops {flops!r} is not 0..{full}"
    suffix = VectorSetting.read("full", SPARSE, similarity).suffix()
    if suffix and not record["method"]["label"].endswith(f" · {suffix}"):
        return f"method.label does not say its similarity ({suffix})"
    return None
