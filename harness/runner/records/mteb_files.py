"""sts-bench scores as MTEB result files, so they can sit beside the MTEB leaderboard's
(docs/MTEB.md has the layout, the experiments and the keys with examples).

Every embedding result is written as MTEB's ``TaskResult`` JSON at
``<output>/mteb/<model name as path>/<revision>/<MTEB task name>.json`` (+ ``model_meta.json``),
the layout ``mteb.ResultCache(...).load_results()`` and ``TaskResult.from_disk`` read. The model is
the configured method, its revision a hash of everything that changes its vectors plus the task
source; a fit on the scored task's own sentences lists the task in ``training_datasets``.
A vector setting (``--dims``, ``--precision``) is an MTEB *experiment* of the same model
(``experiments/<ModelMeta.experiment_name of its kwargs>/``: ``embed_dim``, ``output_dtypes``,
``calibration``); similarities are not: every row of one setting goes to that setting's file,
under MTEB's key for its similarity (cosine with ``main_score``; a Hamming row as ``manhattan_*``
and ``euclidean_*`` of the unpacked bits, as MTEB computes them, with a null ``main_score``). A file
already at a setting's path (same task, dataset revision and subsets) is merged into: its other
similarities' keys stay. The values are the task kind's (``TaskKind.mteb_values``), per MTEB
subset, as fractions; ``dataset_revision`` is MTEB's pin only for data read at it, else
``<source>-<data fingerprint>``. MTEB is not imported (seconds, more than a warm run): the files
are byte for byte what ``TaskResult.to_disk``/``ModelMeta.to_dict`` write of them
(``tests/test_mteb_settings.py``). No link is followed: files are written atomically, a folder link
under ``mteb/`` is refused, and files read back are read without following a link.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.compression import SIMILARITIES, VectorSetting
from harness.core.hashing import atomic_write_text, key_hash, strict_json
from harness.core.kinds import Evidence, kind_of
from harness.runner.records.lock import NotAFile, read_inside, refuse_linked_folders
from harness.runner.records.outputs import StepOutput
from harness.runner.records.schema import main_value
from harness.runner.records.store import file_slug

if TYPE_CHECKING:
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.records.schema import Record
    from harness.runner.settings.config import BenchConfig

IDENTITY_PROTOCOL = ("similarity", "source", "fit_set", "first_last_layers", "max_length", "dtype")
# MTEB's similarity_fn_name of every sts-bench model; a row's own similarity is a score key.
MODEL_SIMILARITY = "cosine"
ENGLISH = ["eng-Latn"]  # the language of every registered task (STS12-16, STS-B, SICK-R)
EXPERIMENTS = "experiments"  # the folder of a model's experiments (mteb.cache.result_cache)
# MTEB's OutputDType value of each precision below fp32 (mteb.types.OutputDType).
OUTPUT_DTYPES = {"int8": "int8", "uint8": "uint8", "binary": "binary", "ubinary": "binary"}
# MTEB's STS score keys, in the order they are written (cosine's first: the keys files had before
# other similarities were written, in their old order).
SCORE_KEYS = (
    "pearson",
    "spearman",
    "cosine_pearson",
    "cosine_spearman",
    "manhattan_pearson",
    "manhattan_spearman",
    "euclidean_pearson",
    "euclidean_spearman",
    "dot_pearson",
    "dot_spearman",
    # PairClassification's keys (labelled pairs), in MTEB's order of similarity functions
    *(
        f"{prefix}_{metric}"
        for prefix in ("similarity", "cosine", "manhattan", "euclidean", "dot", "max")
        for metric in ("accuracy", "f1", "precision", "recall", "ap")
    ),
)
log = logging.getLogger("sts_bench.results")


def mteb_version() -> str | None:
    try:
        return importlib.metadata.version("mteb")
    except importlib.metadata.PackageNotFoundError:
        return None


def _slug(text: str) -> str:
    return file_slug(text, r"[^A-Za-z0-9.=_-]+") or "model"


def model_identity(
    label: str, spec: dict[str, Any], backbone: dict[str, Any] | None, protocol: dict[str, Any]
) -> tuple[str, str]:
    """(MTEB model name, revision) of a configured method (``label``: the method's own, without a
    vector setting's suffix). ``harness.mteb_model`` uses the same, so a model evaluated by MTEB
    and the same settings run here share one folder. The similarity hashed is the model's own
    (cosine) whatever a row compares by: every setting is the same model, and revisions stay what
    they were before rows had other similarities."""
    short = Path(str(spec.get("backbone", ""))).name or str(spec.get("backbone", ""))
    name = f"sts-bench/{_slug(label)}-{_slug(short)}"
    identity = {
        "spec": spec,
        "weights": (backbone or {}).get("fingerprint"),
        "protocol": {
            k: MODEL_SIMILARITY if k == "similarity" else protocol.get(k) for k in IDENTITY_PROTOCOL
        },
    }
    return name, key_hash(identity, 12)


def vector_setting(record: Record) -> VectorSetting | None:
    """The setting of an embedding method's record (``record["vector"]``; a record without one is
    the full vector compared by its protocol's similarity); None for a pair scorer's."""
    vector = record.get("vector")
    if vector is None:
        similarity = record["protocol"].get("similarity")
        return VectorSetting(None, "fp32", similarity) if similarity in SIMILARITIES else None
    dims = vector["dims"]
    return VectorSetting(
        dims if isinstance(dims, int) else None, vector["precision"], vector["similarity"]
    )


def experiment_kwargs(record: Record) -> dict[str, Any] | None:
    """MTEB's ``experiment_kwargs`` of the record's vector setting (module docstring), sorted;
    None for the full vector.

    >>> experiment_kwargs({"vector": {"dims": 64, "precision": "ubinary", "similarity": "hamming",
    ...                               "full_dims": 384, "bytes_per_vector": 8}})
    {'embed_dim': 64, 'output_dtypes': 'binary'}
    """
    setting = vector_setting(record)
    if setting is None:
        return None
    kwargs: dict[str, Any] = {}
    if setting.dims is not None:
        kwargs["embed_dim"] = setting.dims
    if setting.precision in OUTPUT_DTYPES:  # fp32, or sparse: the vectors as the method made them
        kwargs["output_dtypes"] = OUTPUT_DTYPES[setting.precision]
    vector = record.get("vector")
    calibration = vector.get("calibration") if vector is not None else None
    if setting.calibrated and calibration:
        kwargs["calibration"] = str(calibration["name"])
    return dict(sorted(kwargs.items())) or None


# What MTEB replaces in a value of an experiment name, and its longest name before hashing
# (mteb.models.model_meta._serialize_experiment_kwargs_to_name).
_INVALID = set('<>:"|?*\\/\0')
_MAX_EXPERIMENT_NAME = 200


def experiment_name(kwargs: Mapping[str, Any] | None) -> str | None:
    """MTEB's ``ModelMeta.experiment_name`` of ``kwargs`` (str and int values, as ours are):
    ``key_value`` pairs in key order joined by ``__``, characters a folder name cannot hold
    replaced by ``_``; a name over 200 characters is ``exp_<sha256[:16]>`` of it.

    >>> experiment_name({"output_dtypes": "int8", "embed_dim": 64})
    'embed_dim_64__output_dtypes_int8'
    >>> experiment_name({"calibration": "corpus:/a/b.txt"})
    'calibration_corpus__a_b.txt'
    """
    if not kwargs:
        return None

    def value(v: Any) -> str:
        text = str(v)
        for char in _INVALID:
            text = text.replace(char, "_")
        return text

    name = "__".join(f"{key}_{value(v)}" for key, v in sorted(kwargs.items()))
    if len(name) > _MAX_EXPERIMENT_NAME or any(c in _INVALID for c in name):
        return f"exp_{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return name


def _languages(task_name: str, subsets: list[str], source: str) -> dict[str, list[str]]:
    """Languages of each MTEB subset: English for registered tasks, MTEB's metadata otherwise (the
    run read the task through mteb, so mteb is already imported)."""
    if source != "mteb" or subsets == ["default"]:
        return dict.fromkeys(subsets, ENGLISH)
    from harness.core.data.sources.mteb_tasks import mteb_task

    mapping = mteb_task(task_name).metadata.hf_subsets_to_langscripts
    return {s: list(mapping.get(s, [])) for s in subsets}


def _subset_scores(
    values: Mapping[str, Any], subset: str, languages: list[str], version: str | None
) -> dict[str, Any]:
    """One subset's scores in MTEB's layout: :data:`SCORE_KEYS` in order, then a kind's own."""
    return {
        **{k: values[k] for k in SCORE_KEYS if k in values},
        **{k: v for k, v in values.items() if k not in SCORE_KEYS and k != "main_score"},
        "main_score": values.get("main_score"),
        "hf_subset": subset,
        "languages": languages,
        "mteb_version": version,
    }


def task_result(record: Record, task_name: str) -> dict[str, Any]:
    """MTEB's TaskResult JSON for one sts-bench record (an embedding method's): its similarity's
    keys (:func:`_correlations`), and ``main_score`` when it is the cosine row (else null)."""
    task, pairs = record["task"], record["pairs"]
    setting = vector_setting(record)
    compared_by = setting.similarity if setting is not None else MODEL_SIMILARITY
    similarity = np.asarray(pairs["similarity"], dtype=np.float64)
    gold = np.asarray(pairs["gold"], dtype=np.float64)
    labels = pairs.get("subset") if task["source"] == "mteb" else None
    groups = (
        {"default": np.arange(len(gold))}
        if labels is None
        else {s: np.flatnonzero(np.asarray(labels) == s) for s in dict.fromkeys(labels)}
    )
    languages = _languages(task_name, list(groups), task["source"])
    version = mteb_version()
    scores = []
    kind = kind_of(record)
    extra = kind.evidence_extra(record)
    for subset, idx in groups.items():
        evidence = Evidence(similarity[idx], gold[idx], None, extra)
        values = kind.mteb_values(evidence, compared_by)
        rounded = {k: None if v is None else round(v, 6) for k, v in values.items()}
        scores.append(_subset_scores(rounded, subset, languages[subset], version))
    timings = record.get("timings") or {}
    return {
        "dataset_revision": dataset_revision(task),
        "task_name": task_name,
        "mteb_version": version,
        "scores": {"validation" if task["split"] == "dev" else task["split"]: scores},
        "evaluation_time": round(
            sum(timings.get(k, 0.0) for k in ("fit_s", "encode_s", "score_s")), 4
        ),
        "kg_co2_emissions": None,
        "date": _timestamp(record.get("created")),
        "evaluation_phases": None,
    }


def dataset_revision(task: Mapping[str, Any]) -> str:
    """MTEB's or the hub's pinned revision (origin ``path@rev``), else ``<source>-<data sha>``."""
    _, at, pin = str(task["origin"]).rpartition("@")
    pinned = task["source"] in ("mteb", "hub") and bool(at and pin)
    return pin if pinned else f"{task['source']}-{task['fingerprint'][:12]}"


def _timestamp(created: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(created)).timestamp()
    except ValueError:
        return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _subsets(result: Mapping[str, Any]) -> dict[str, list[str]] | None:
    """Each split's subsets of a TaskResult JSON, None when it is not one."""
    scores = result.get("scores")
    if not isinstance(scores, dict):
        return None
    found = {}
    for split, entries in scores.items():
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            return None
        found[split] = [e.get("hf_subset") for e in entries]
    return found


def merged(new: dict[str, Any], old: Any) -> dict[str, Any]:
    """``new`` with the score keys of ``old`` (the file already at its path) that ``new`` does not
    have, when ``old`` is the same task on the same dataset revision with the same subsets (else
    ``new``). ``main_score`` is ``new``'s unless null; the file's timing and date stay the main
    score's row's."""
    if (
        not isinstance(old, dict)
        or old.get("task_name") != new["task_name"]
        or old.get("dataset_revision") != new["dataset_revision"]
        or _subsets(old) != _subsets(new)
    ):
        return new
    out = dict(new)
    owns_main = False
    out["scores"] = {}
    for split, entries in new["scores"].items():
        rows = []
        for entry, before in zip(entries, old["scores"][split], strict=True):
            values = {k: before[k] for k in (*SCORE_KEYS, "main_score") if _number(before.get(k))}
            values.update({k: entry[k] for k in SCORE_KEYS if k in entry})
            if entry["main_score"] is not None:
                owns_main = True
                values["main_score"] = entry["main_score"]
            rows.append(
                _subset_scores(
                    values, entry["hf_subset"], entry["languages"], entry["mteb_version"]
                )
            )
        out["scores"][split] = rows
    if not owns_main and any(
        _number(e.get("main_score")) for entries in old["scores"].values() for e in entries
    ):
        for key in ("evaluation_time", "kg_co2_emissions", "date", "evaluation_phases"):
            out[key] = old.get(key)
    return out


def model_meta(
    name: str,
    revision: str,
    adapted_from: str | None,
    max_tokens: int | None,
    trained_on: set[str],
    embed_dim: int | None = None,
    n_parameters: int | None = None,
    experiment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``model_meta.json``: MTEB's ModelMeta fields, filled with what sts-bench knows: the hub id of
    the weights (None for a local folder), the width of the vectors scored and the backbone's
    parameters; for a vector setting, its ``experiment_kwargs`` and (below fp32) the
    ``output_dtypes`` MTEB's ``CompressionWrapper`` declares."""
    dtype = (experiment or {}).get("output_dtypes")
    return {
        "loader_kwargs": {},
        "name": name,
        "revision": revision,
        "release_date": None,
        "languages": None,
        "n_parameters": n_parameters,
        "n_active_parameters_override": None,
        "n_embedding_parameters": None,
        "memory_usage_mb": None,
        "max_tokens": max_tokens,
        "embed_dim": embed_dim,
        "license": None,
        "open_weights": None,
        "public_training_code": None,
        "public_training_data": None,
        "framework": ["PyTorch"],
        "reference": None,
        "similarity_fn_name": MODEL_SIMILARITY,
        "use_instructions": False,
        "training_datasets": sorted(trained_on) or None,
        "adapted_from": adapted_from,
        "superseded_by": None,
        "modalities": ["text"],
        "model_type": ["dense"],
        "citation": None,
        "contacts": None,
        "experiment_kwargs": dict(experiment) if experiment else None,
        "output_dtypes": [dtype] if dtype else None,
        "extra_requirements_groups": None,
        "loader": None,
        "is_cross_encoder": False,
    }


def _read_json(path: Path) -> Any:
    """The JSON at ``path`` (None when missing or not JSON; a link: None, with one warning)."""
    try:
        return json.loads(read_inside(path).decode("utf-8"))
    except NotAFile as err:
        log.warning("mteb: %s %s; not read (it is written again as a file)", path, err.strerror)
        return None
    except (OSError, ValueError):
        return None


def _trained_on(
    meta_path: Path, name: str, revision: str, experiment: Mapping[str, Any] | None = None
) -> set[str]:
    """The tasks an existing model_meta.json of this model already lists (verified: same name,
    revision and experiment)."""
    old = _read_json(meta_path)
    if (
        not isinstance(old, dict)
        or old.get("name") != name
        or old.get("revision") != revision
        or (old.get("experiment_kwargs") or None) != (dict(experiment) if experiment else None)
    ):
        return set()
    listed = old.get("training_datasets") or []
    return {str(t) for t in listed} if isinstance(listed, list) else set()


def result_folder(out_dir: Path, record: Record) -> Path | None:
    """Where the record's MTEB files go (module docstring); None for a pair scorer's record."""
    setting = vector_setting(record)
    if setting is None:
        return None
    method = record["method"]
    name, revision = model_identity(
        _method_label(record, setting), method["spec"], record.get("backbone"), record["protocol"]
    )
    folder = out_dir / name.replace("/", "__") / revision
    experiment = experiment_name(experiment_kwargs(record))
    return folder if experiment is None else folder / EXPERIMENTS / experiment


def _method_label(record: Record, setting: VectorSetting) -> str:
    """The method's own label: the row's, less its setting's suffix (``avg · 64d int8``: avg)."""
    label, suffix = record["method"]["label"], setting.suffix()
    return label.removesuffix(f" · {suffix}") if suffix else label


def write_mteb_result(out_dir: Path, record: Record) -> Path | None:
    """Write the record's MTEB result file (merged into the one there: :func:`merged`) and its
    model_meta.json; None for pair scorers, whose scores are not similarities of embeddings and
    have no MTEB STS counterpart."""
    folder = result_folder(out_dir, record)
    if folder is None or main_value(record) is None:
        return None  # an undefined score has no MTEB score
    setting = vector_setting(record)
    assert setting is not None  # result_folder gave a folder
    task_name = record["task"].get("mteb_name") or record["task"]["name"]
    method = record["method"]
    name, revision = model_identity(
        _method_label(record, setting), method["spec"], record.get("backbone"), record["protocol"]
    )
    path = folder / f"{task_name}.json"
    refuse_linked_folders(out_dir.parent, path)  # mteb/<model>/<revision>/...: real folders only
    result = task_result(record, task_name)
    if path.exists() or path.is_symlink():
        result = merged(result, _read_json(path))
    atomic_write_text(path, json.dumps(strict_json(result), indent=2, allow_nan=False) + "\n")
    experiment = experiment_kwargs(record)
    trained_on = _trained_on(folder / "model_meta.json", name, revision, experiment)
    if record["protocol"].get("transductive"):
        trained_on.add(task_name)
    backbone = record.get("backbone") or {}
    meta = model_meta(
        name,
        revision,
        backbone.get("hub_id"),
        method["spec"].get("max_length"),
        trained_on,
        record.get("embed_dim"),
        backbone.get("n_parameters"),
        experiment,
    )
    atomic_write_text(
        folder / "model_meta.json", json.dumps(strict_json(meta), indent=2, allow_nan=False) + "\n"
    )
    return path


class MtebFiles:
    """The report step of MTEB result files: one per record of this run
    (:func:`write_mteb_result`), the rows of one vector setting sharing theirs."""

    name = "mteb-files"

    def enabled(self, cfg: BenchConfig) -> bool:
        return True

    def memo_key(self, inputs: ReportInputs) -> None:
        return None  # a file per record, each a small JSON: cheaper to write than to memoise

    def write(self, inputs: ReportInputs) -> StepOutput:
        paths = [write_mteb_result(inputs.out_dir / "mteb", record) for record in inputs.records]
        return StepOutput(list(dict.fromkeys(p for p in paths if p is not None)))
