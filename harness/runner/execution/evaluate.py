"""Score one (method, task): fit if the method fits, encode both sides or score the pairs, score
under the run's protocol, and assemble the result record (its schema:
:mod:`harness.runner.records.schema`).

A plugin method's calls run in its worker (:mod:`methods.wall`) and what it returns is
checked before it is used, with the checks ``harness.evaluate`` applies to an encoder object
(:mod:`.encoders`): float32 (n, d) finite vectors, one finite score per pair, a JSON ``fit_info``
and ``annotate`` result. A wrong one is one ``PluginError`` line. Built-in methods are trusted as
they are (a wrong output of theirs is a bug in sts-bench, with its traceback).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from harness.core.api import EmbeddingMethod, PairScoringMethod, SparseEmbeddingMethod
from harness.core.compression import (
    Calibration,
    VectorSetting,
    calibrate,
    distinct_rows,
    indexed_similarity,
)
from harness.core.errors import PluginError
from harness.core.kinds import Scored as KindScored
from harness.core.kinds import kind_of
from harness.core.stages import stage
from harness.runner.execution.encoders import checked_scores, checked_vectors
from harness.runner.records.schema import RESULT_SCHEMA_VERSION, Record, strict
from harness.runner.records.store import environment, git_sha, now_iso
from harness.runner.settings.console import say
from methods.guests import is_guest, who
from methods.wall import call_named

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.core.data.fitsets import FitSet
    from harness.core.data.splits import SplitData
    from harness.core.data.tasks import LoadedTask
    from harness.runner.execution.context import RunContext
    from harness.runner.settings.config import BenchConfig


def backbone_record(method: Method, ctx: RunContext) -> dict[str, Any] | None:
    if not method.reads_backbone():
        return None
    ref = ctx.backbone(method.spec.backbone, method.spec.revision)
    impl = method.encoder_impl()
    # read from the safetensors headers; metadata only, so an unreadable header is just unknown
    try:
        n_parameters = ref.parameter_count()
    except (OSError, ValueError, KeyError, TypeError):
        n_parameters = None
    return {
        "name": ref.name,
        "origin": ref.origin,
        "revision": ref.revision,
        "fingerprint": ref.fingerprint,
        "path": ref.path,
        "num_layers": ref.num_layers,
        "hidden_size": ref.hidden_size,
        "encoder_impl": impl,
        "hub_id": ref.hub_id(),
        "n_parameters": n_parameters,
        "causal": ref.causal,
        # a LoRA merged into the weights (--set METHOD.adapter=DIR): its folder and digest
        **({"adapter": adapter} if (adapter := _adapter_record(method, ctx)) else {}),
        # the dtype the weights were loaded in: a decoder's follows --dtype on the transformers path
        "weights": ref.weight_dtype(ctx.encode.dtype),
    }


def _adapter_record(method: Method, ctx: RunContext) -> dict[str, Any] | None:
    """The adapter merged into the backbone the method's views come from (folder, sha256, rank,
    alpha), None without one."""
    if not method.spec.params.get("adapter") or not method.backbone_views():
        return None
    adapter = ctx.views(method.spec).ref.adapter
    return adapter.record() if adapter is not None else None


@dataclass
class Similarities:
    """A method's similarities of a task's pairs, however it gives them (vectors compared by one
    setting, its own pair scores, a classifier's margins): the scored split's, those of each split
    the task's kind also reads (``extras``: a labelled task's threshold split), the pairs with a
    zero vector and a classifier's argmax class per pair (``predicted``, None otherwise)."""

    scored: np.ndarray
    extras: dict[str, np.ndarray]
    n_zero: int = 0
    predicted: np.ndarray | None = None


def _split_entries(task: LoadedTask, read: Sequence[str]) -> dict[str, Any]:
    """``task.splits_read``: each split the score read, the scored one first, with its own sha256
    and pairs (what fed the threshold); ``task.fingerprint`` hashes them together."""
    splits = {name: task.splits[name] for name in (task.spec.eval_split, *read)}
    return {name: {"fingerprint": s.fingerprint, "n_pairs": len(s)} for name, s in splits.items()}


def build_record(
    method: Method,
    task: LoadedTask,
    scores: KindScored,
    cfg: BenchConfig,
    ctx: RunContext,
    timings: dict[str, float],
    similarity: np.ndarray,
    fit_set: FitSet | None = None,
    leakage: dict[str, Any] | None = None,
    read: Sequence[str] = (),
) -> Record:
    """The record of one score. ``pairs`` keeps each pair's similarity (and gold), so tests between
    methods (:mod:`harness.runner.tables.comparisons`) are rebuilt from result files alone."""
    from harness.core import __version__

    split = task.eval
    protocol = cfg.protocol()
    protocol["fit_set"] = method.fit_set_name() if method.uses_fit_set else None
    # "source" stays the run's --source (where registry tasks come from: it groups tables); a task
    # that brings its own data (file:, hf:) says so here, and its fingerprint is its content.
    protocol["task_source"] = task.source
    # Transductive: the method fitted or trained on sentences of the split it is scored on.
    overlap = fit_set.overlap(split.sentences()) if fit_set is not None else 0
    protocol["transductive"] = overlap > 0
    protocol["fit_overlap_sentences"] = overlap if fit_set is not None else None
    protocol["labelled_training"] = leakage
    protocol["prompt"] = method.inputs()
    protocol["selected_on"] = method.selected_on()
    if method.prompt_of_set is not None:  # one prompt of a prompt set (.prompt_sets)
        protocol["prompt_set"] = method.prompt_of_set.record()
    if isinstance(method, PairScoringMethod):
        protocol["similarity"] = "score_pairs"  # the method's own pair score, not a cosine
    kind = kind_of(task)
    protocol.update(kind.protocol_fields(scores))
    if kind.metric(scores.main_score).on_scored:
        # ranked by a threshold chosen on the pairs it scores: §, as any such selection
        protocol["selected_on"] = protocol["selected_on"] or "threshold chosen on the scored split"
    devices = sorted({d for p in ctx.providers() for d in p.stats.devices} | ctx.devices)
    record: Record = {
        "schema_version": RESULT_SCHEMA_VERSION,
        "harness": {"name": "sts-bench", "version": __version__, "git_sha": git_sha()},
        "created": now_iso(),
        "method": {
            "name": method.name,
            "label": method.label(),
            "kind": method.kind,
            "summary": method.summary,
            "spec": method.spec.to_dict(),
        },
        "backbone": backbone_record(method, ctx),
        "task": {
            "name": task.spec.name,
            "title": task.spec.title,
            "source": task.source,
            "split": task.spec.eval_split,
            "origin": split.origin,
            "fingerprint": task.fingerprint(read),  # with the rows of every split it read
            "n_pairs": len(split),
            "subsets": split.subset_sizes(),
            "mteb_name": task.spec.mteb_name or None,
            **kind.task_fields(task.spec),  # type: ignore[typeddict-item]
            **({"splits_read": _split_entries(task, read)} if read else {}),
        },
        "protocol": protocol,
        "fit": method.fit_info,
        "scores": kind.scores_field(scores, cfg.bootstrap, cfg.seed),  # type: ignore[typeddict-item]
        "subset_scores": scores.subsets,
        "pairs": {
            "similarity": [float(x) for x in similarity],
            "gold": [float(g) for g in split.gold],
            "subset": list(split.subsets) if split.subsets is not None else None,
        },
        "env": environment(devices, cfg.dtype, cfg.dtype_picked),
        "timings": timings,
    }
    return strict(record)


@dataclass
class Scored:
    """A (method, task) scored: its record, and for an embedding method the vectors of both sides
    (``left[i]`` is the vector of ``sentences[0][i]``, ``right[i]`` of ``sentences[1][i]``: the
    distinct sentences of each side), which ``--export-embeddings`` writes."""

    record: Record
    left: np.ndarray | None = None
    right: np.ndarray | None = None
    sentences: tuple[tuple[str, ...], tuple[str, ...]] | None = None


@dataclass(frozen=True)
class PairSides:
    """The vectors of a split's pairs as the distinct sentences of each side and each pair's rows:
    pair i is ``(left[left_rows[i]], right[right_rows[i]])``. A million pairs over a few thousand
    sentences hold a few thousand vectors, not two million (issue 42: 1M pairs at 384 dimensions
    were 3 GB of float32 sides and 6 GB more in float64)."""

    s1: tuple[str, ...]
    s2: tuple[str, ...]
    left: np.ndarray
    right: np.ndarray
    left_rows: np.ndarray
    right_rows: np.ndarray

    @property
    def dims(self) -> int:
        return int(self.left.shape[1])

    def similarity(
        self, setting: VectorSetting, calibration: Calibration | None
    ) -> tuple[np.ndarray, int]:
        """Each pair's similarity under ``setting``, gathered a chunk of pairs at a time."""
        return indexed_similarity(
            self.left, self.left_rows, self.right, self.right_rows, setting, calibration
        )


def pair_sides(method: EmbeddingMethod, s1: Sequence[str], s2: Sequence[str]) -> PairSides:
    """Encode both sides of the pairs ``(s1[i], s2[i])`` once per distinct sentence of each side.

    A method whose ``encode_sides`` is the harness's own (each side's sentences encoded on their
    own) is given each side's distinct sentences; one that overrides it (a plugin may read the
    pairs together) is given the pairs as they are, and its rows are the pairs'. A plugin's vectors
    are checked (:func:`checked_sides`) before they are used.
    """
    kind = type(method)
    call = call_named(kind, "encode_sides")  # encode() unless the plugin reads the pairs itself
    if call == "encode()":
        (u1, rows1), (u2, rows2) = distinct_rows(s1), distinct_rows(s2)
    else:
        u1, u2 = list(s1), list(s2)
        rows1 = rows2 = np.arange(len(s1))
    left, right = called(
        method,
        "encode_sides",
        u1,
        u2,
        check=lambda out: checked_sides(out, (len(u1), len(u2)), kind, call),
    )
    return PairSides(tuple(u1), tuple(u2), left, right, rows1, rows2)


def score(
    method: Method,
    task: LoadedTask,
    fit_set: FitSet | None,
    cfg: BenchConfig,
    ctx: RunContext,
    leakage: dict[str, Any] | None = None,
    calibration_set: FitSet | None = None,
) -> list[Scored]:
    """Fit (if the method fits), encode both sides, score, keeping the vectors that were scored:
    one :class:`Scored` per vector setting of the run (``--dims`` × ``--precision`` ×
    ``--similarity``, the full vector first) for an embedding method, all from the one encode; one
    for a method that scores pairs.
    ``calibration_set``: the sentences int8/uint8 ranges are calibrated on (the run's --fit-set).

    A scored split is the task's kind × the method's output, each asked once: the output gives
    :class:`Similarities` of the scored split and of every split the kind reads
    (:meth:`~harness.core.kinds.TaskKind.extra_splits`), the kind scores them
    (:func:`scored_record`)."""
    t0 = time.perf_counter()
    called(method, "begin_task", task.spec)  # a method trained per task switches to this task's
    if method.uses_fit_set and fit_set is not None:
        with stage(f"fit {method.name}"):
            called(method, "fit", fit_set, check=lambda _: checked_fit_info(method, fit_set))
    t1 = time.perf_counter()
    split = task.eval
    extras = extra_splits(task, cfg)
    if kind_of(task).labelled and classifies(method):  # its own classes: nothing else is read
        margin, predicted = classified(method, split.s1, split.s2, task)
        sims = Similarities(margin, {}, 0, predicted)
        clock = (t0, t1, time.perf_counter())
        record = scored_record(method, task, fit_set, cfg, ctx, leakage, sims, clock)
        record["protocol"]["similarity"] = "classify_pairs"  # the positive class's logit margin
        return [Scored(record)]
    if isinstance(method, PairScoringMethod):
        sims = Similarities(
            pair_scores(method, split.s1, split.s2),
            {name: pair_scores(method, rows.s1, rows.s2) for name, rows in extras.items()},
        )
        clock = (t0, t1, time.perf_counter())
        return [Scored(scored_record(method, task, fit_set, cfg, ctx, leakage, sims, clock))]
    if not isinstance(method, EmbeddingMethod):
        raise TypeError(
            f"{type(method).__name__} is neither an EmbeddingMethod nor a PairScoringMethod"
        )
    if isinstance(method, SparseEmbeddingMethod):
        return [sparse_scored(method, task, fit_set, cfg, ctx, leakage, (t0, t1))]
    sides = pair_sides(method, split.s1, split.s2)
    t2 = time.perf_counter()
    grid = cfg.vector_grid()
    calibration = calibrated_ranges(method, calibration_set, grid)
    extra_sides = {name: pair_sides(method, rows.s1, rows.s2) for name, rows in extras.items()}
    out = []
    for setting in grid:
        t_setting = time.perf_counter()
        similarity, n_zero = sides.similarity(setting, calibration)
        others = {name: s.similarity(setting, calibration)[0] for name, s in extra_sides.items()}
        if n_zero:
            say(
                f"warning: {setting.label(method.label())} on {task.spec.title}: {n_zero} pair(s) "
                "with a zero vector; their cosine is set to 0"
            )
        # the full vector's encode time is the encode; a compressed one's, its compression
        clock = (t0, t1, t2) if setting.full else (t_setting, t_setting, time.perf_counter())
        sims = Similarities(similarity, others, n_zero)
        record = scored_record(method, task, fit_set, cfg, ctx, leakage, sims, clock)
        vector = vector_record(setting, sides.dims, calibration_set, split.sentences())
        record["vector"] = strict(vector)
        record["protocol"]["similarity"] = setting.similarity
        if vector.get("calibration", {}).get("overlap_sentences"):
            record["protocol"]["transductive"] = True  # ranges learnt on the scored sentences: †
        record["method"]["label"] = setting.label(method.label())
        # the width of the vectors scored (whitening's k, a DSE student's, a cut): MTEB's embed_dim
        record["embed_dim"] = int(setting.dims or sides.dims)
        if setting.full and cfg.diagnostics:
            from harness.runner.studies.diagnostics import anisotropy, unique_rows

            record["diagnostics"] = strict(
                anisotropy(unique_rows(sides.s1, sides.s2, sides.left, sides.right), cfg.seed)
            )
        out.append(
            Scored(record, sides.left, sides.right, (sides.s1, sides.s2))
            if setting.full
            else Scored(record)
        )
    return out


def sparse_scored(
    method: SparseEmbeddingMethod,
    task: LoadedTask,
    fit_set: FitSet | None,
    cfg: BenchConfig,
    ctx: RunContext,
    leakage: dict[str, Any] | None,
    begun: tuple[float, float],
) -> Scored:
    """A sparse method's one score: its vectors as they are (no ``--dims``/``--precision``), by
    its own similarity, with their active dimensions, FLOPS and bytes in ``record["vector"]``
    (:mod:`harness.core.sparse`). Nothing is densified."""
    from harness.core.sparse import SPARSE, describe
    from harness.runner.execution.sparse_sides import SparsePairs

    split = task.eval
    sides = SparsePairs.encode(method, split.s1, split.s2)
    t2 = time.perf_counter()
    how = SparsePairs.similarity_of(method)
    similarity, n_zero = sides.similarity(how)
    others = {
        name: SparsePairs.encode(method, rows.s1, rows.s2).similarity(how)[0]
        for name, rows in extra_splits(task, cfg).items()
    }
    if n_zero:
        say(
            f"warning: {method.label()} on {task.spec.title}: {n_zero} pair(s) with a zero "
            "vector; their cosine is set to 0"
        )
    sims = Similarities(similarity, others, n_zero)
    record = scored_record(method, task, fit_set, cfg, ctx, leakage, sims, (*begun, t2))
    record["vector"] = strict(describe(*sides.arrays(), how))
    record["protocol"]["similarity"] = how
    record["method"]["label"] = VectorSetting(None, SPARSE, how).label(method.label())
    record["embed_dim"] = int(sides.left.dim)
    return Scored(record)


def scored_record(
    method: Method,
    task: LoadedTask,
    fit_set: FitSet | None,
    cfg: BenchConfig,
    ctx: RunContext,
    leakage: dict[str, Any] | None,
    sims: Similarities,
    clock: tuple[float, float, float],
) -> Record:
    """The record of one similarity per pair, scored by the task's kind under the run's protocol
    (its evidence: :meth:`~harness.core.kinds.TaskKind.split_evidence`), with the fields the
    method annotates (DSE's teacher, a cross-encoder's symmetry, "columns")."""
    kind = kind_of(task)
    split = task.eval
    extras = {name: (task.splits[name], sim) for name, sim in sims.extras.items()}
    evidence = kind.split_evidence(task.spec, split, sims.scored, extras, sims.predicted)
    scores = kind.score(
        evidence,
        task.spec.main_score,
        cfg.bootstrap,
        cfg.seed,
        sims.n_zero,
        memo=ctx.resamples,  # the run's: the significance table reuses these resamples
        aggregation=cfg.aggregation,
    )
    t0, t1, t2 = clock
    timings = {
        "fit_s": round(t1 - t0, 4),
        "encode_s": round(t2 - t1, 4),
        "score_s": round(time.perf_counter() - t2, 4),
    }
    record = build_record(
        method, task, scores, cfg, ctx, timings, sims.scored, fit_set, leakage, list(extras)
    )
    if sims.predicted is not None:
        record["pairs"]["predicted"] = [int(c) for c in sims.predicted]
    extra = called(
        method,
        "annotate",
        split,
        sims.scored,
        check=lambda out: checked_annotation(out, type(method)),
    )
    return cast("Record", {**record, **strict(extra)})


def extra_splits(task: LoadedTask, cfg: BenchConfig) -> dict[str, SplitData]:
    """The splits besides the scored one that the task's kind reads under this run's protocol
    (a labelled task's threshold split, unless ``--pair-thresholds none``), those the source has."""
    names = kind_of(task).extra_splits(task.spec, cfg.pair_thresholds)
    return {name: task.splits[name] for name in names if name in task.splits}


def pair_scores(method: Method, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
    """A pair scorer's scores of the pairs (s1[i], s2[i]), a plugin's checked."""
    who_ = who(type(method))
    check = lambda out: checked_scores(out, len(s1), who_, error=PluginError)  # noqa: E731
    return np.asarray(called(method, "score_pairs", s1, s2, check=check))


def classifies(method: Method) -> bool:
    """Whether ``method`` classifies the pairs of the task begun itself: it has
    ``classify_pairs``, and ``classifies()`` (when it has one) says yes for this task (DSE's
    teacher and student classify only a task they were fine-tuned on; elsewhere their score is the
    similarity)."""
    if not callable(getattr(method, "classify_pairs", None)):
        return False
    asks = getattr(method, "classifies", None)
    if not callable(asks):
        return True
    return bool(called(method, "classifies"))


def classified(
    method: Method, s1: Sequence[str], s2: Sequence[str], task: LoadedTask
) -> tuple[np.ndarray, np.ndarray]:
    """A classifier's own view of labelled pairs: ``classify_pairs`` gives (n, classes) logits; the
    similarity is the positive class's margin (its logit minus the log-sum-exp of the others, a
    log-odds), the decision the argmax."""
    kind, classes = type(method), task.spec.classes
    logits = np.asarray(called(method, "classify_pairs", s1, s2, classes), dtype=np.float64)
    if logits.shape != (len(s1), len(classes)) or not np.all(np.isfinite(logits)):
        raise PluginError(
            f"{who(kind)}: classify_pairs() returned {logits.shape} values for {len(s1)} pairs of "
            f"{len(classes)} classes; it must return finite (n, {len(classes)}) logits"
        )
    positive = task.spec.positive_index
    others = np.delete(logits, positive, axis=1)
    top = others.max(axis=1, keepdims=True)
    margin = logits[:, positive] - (top[:, 0] + np.log(np.exp(others - top).sum(axis=1)))
    return margin, np.argmax(logits, axis=1)


def calibrated_ranges(
    method: EmbeddingMethod, calibration_set: FitSet | None, grid: Sequence[VectorSetting]
) -> Calibration | None:
    """The per-dimension ranges int8/uint8 settings quantise on: the min and max of the method's
    vectors of the calibration sentences (read from the cache: the plan encoded them). None when
    no setting of ``grid`` needs them."""
    if not any(setting.calibrated for setting in grid):
        return None
    if calibration_set is None:
        raise ValueError("an int8/uint8 setting needs the plan's calibration set")
    sentences = list(dict.fromkeys(calibration_set.sentences))
    who_ = who(type(method))
    check = lambda out: checked_vectors(out, len(sentences), who_, "encode()", PluginError)  # noqa: E731
    return calibrate(called(method, "encode", sentences, check=check))


def vector_record(
    setting: VectorSetting, full_dims: int, calibration_set: FitSet | None, scored: Iterable[str]
) -> dict[str, Any]:
    """``record["vector"]``: the setting, its bytes per vector and, for int8/uint8, the sentences
    its ranges were calibrated on and how many of them are sentences of the scored split."""
    vector = setting.describe(full_dims)
    if setting.calibrated and calibration_set is not None:
        vector["calibration"] = {
            **calibration_set.describe(),
            "overlap_sentences": calibration_set.overlap(scored),
        }
    return vector


# -- what a plugin method returns, checked before the run uses it ---------------------------------


def called(method: Method, name: str, *args: Any, check: Any = None) -> Any:
    """``method.<name>(*args)``: the one place a call into a method is told a guest's (a plugin's,
    made in its worker, :mod:`methods.wall`; its answer passed through ``check`` before the run
    uses it) from a built-in's (trusted as it is)."""
    out = getattr(method, name)(*args)
    return check(out) if check is not None and is_guest(type(method)) else out


def checked_sides(
    sides: Any, n: int | tuple[int, int], kind: type, call: str
) -> tuple[np.ndarray, np.ndarray]:
    """A plugin's vectors of both sides of ``n`` pairs (or of ``(n1, n2)`` sentences of each side),
    each float32 (n, d) of one width d."""
    named = who(kind)
    if not (isinstance(sides, tuple | list) and len(sides) == 2):
        raise PluginError(
            f"{named}: encode_sides() returned {type(sides).__name__}; it must return a pair "
            "(vectors of the first sentences, vectors of the second), each float32 (n, d)"
        )
    counts = n if isinstance(n, tuple) else (n, n)
    left, right = (
        checked_vectors(side, count, named, call, PluginError) for side, count in zip(sides, counts)
    )
    if left.shape[1] != right.shape[1]:
        raise PluginError(
            f"{named}: {call} returned {left.shape[1]} dimensions for the first sentences of the "
            f"pairs and {right.shape[1]} for the second; every vector must have the same size"
        )
    return left, right


def checked_fit_info(method: Method, fit_set: FitSet) -> None:
    """A plugin's ``fit_info`` after ``fit``: None or a dict of JSON values whose ``fit_set``, if
    any, is a dict. Without a ``fit_set`` the run adds the one it gave: the tables, the gate and the
    record's file name read it, as they read every built-in's."""
    info = method.fit_info
    if info is not None and (
        not isinstance(info, dict)
        or not isinstance(info.get("fit_set", {}), dict)
        or not _json(info)
    ):
        raise PluginError(
            f"{who(type(method))}: fit() set self.fit_info to {info!r:.80}; set it to a dict of "
            "JSON values (str, int, float, bool, None, lists, dicts), e.g. "
            '{"fit_set": fit_set.describe()}, or leave it None'
        )
    method.fit_info = {"fit_set": fit_set.describe(), **(info or {})}


# Record fields the run writes itself: an annotation may add fields, and "columns", not replace
# these.
_RECORD_FIELDS = frozenset(Record.__annotations__) - {"columns"}


def checked_annotation(extra: Any, kind: type) -> dict[str, Any]:
    """A plugin's ``annotate`` result: a dict of JSON values that does not overwrite the record's
    own fields; its ``columns`` a dict of title → number (leaderboard columns)."""
    named = who(kind)
    need = (
        'annotate() must return a dict of JSON values ({} for none), with "columns" a dict of '
        "title → number if any"
    )
    if (
        not isinstance(extra, dict)
        or not all(isinstance(key, str) for key in extra)
        or not _json(extra)
    ):
        raise PluginError(f"{named}: annotate() returned {extra!r:.80}; {need}")
    taken = sorted(_RECORD_FIELDS & set(extra))
    if taken:
        raise PluginError(
            f"{named}: annotate() returned the record's own field(s) {', '.join(taken)}; name the "
            "fields it adds otherwise"
        )
    columns = extra.get("columns", {})
    if not isinstance(columns, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in columns.items()
    ):
        raise PluginError(f"{named}: annotate() returned columns {columns!r:.80}; {need}")
    return extra


def _json(value: Any) -> bool:
    """Whether ``value`` is what a record can hold (strict JSON once NaN/inf are nulled)."""
    import json

    try:
        json.dumps(strict(value), allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True
