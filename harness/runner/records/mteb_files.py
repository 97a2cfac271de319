"""sts-bench scores as MTEB result files, so they can sit beside the MTEB leaderboard's.

Every embedding result of a run is also written as MTEB's ``TaskResult`` JSON::

    <output>/mteb/<model name as path>/<revision>/<MTEB task name>.json   (+ model_meta.json)

which is the layout of the ``results/`` folder of MTEB's results repository and of MTEB's local
cache (``~/.cache/mteb/results/``): ``mteb.ResultCache(...).load_results()`` and
``mteb.TaskResult.from_disk`` read these files (``tests/test_mteb.py`` does both).

The "model" is the configured method: ``sts-bench/<method label>-<backbone>``, and its revision is
a hash of everything that changes its vectors (method spec, backbone content, fit set, layers,
max_length, dtype) plus the task source. A fit on the scored task's own sentences (``target``)
lists the task in ``training_datasets``, which is how MTEB marks a model that has seen a task.

Scores are computed from the record's per-pair similarities the way MTEB does it: one Spearman
and Pearson of cosine against gold per MTEB subset (``default``, or each language subset of an
MTEB task), as fractions. ``dataset_revision`` is MTEB's pinned revision when the pairs came
from MTEB's dataset at that revision, and ``<source>-<data fingerprint>`` otherwise (SentEval's
tokenized text, the packaged STS-B, local files), so different data never passes for MTEB's.
MTEB is not imported: the files are plain JSON in MTEB's schema.

No link is followed (the output folder is closed, :mod:`.lock`): each file is written atomically (a
link under its name is replaced, not its target), a folder link under ``mteb/`` is refused, and the
model_meta.json read back is read without following a link (a link: skipped with one warning).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.hashing import atomic_write_text, key_hash, strict_json
from harness.runner.records.lock import NotAFile, read_inside, refuse_linked_folders
from harness.runner.records.outputs import StepOutput
from harness.runner.records.store import file_slug

if TYPE_CHECKING:
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.records.schema import Record
    from harness.runner.settings.config import BenchConfig

IDENTITY_PROTOCOL = ("similarity", "source", "fit_set", "first_last_layers", "max_length", "dtype")
ENGLISH = ["eng-Latn"]  # the language of every registered task (STS12-16, STS-B, SICK-R)
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
    """(MTEB model name, revision) of a configured method. ``harness.mteb_model`` uses the same, so
    a model evaluated by MTEB and the same settings run here share one folder."""
    short = Path(str(spec.get("backbone", ""))).name or str(spec.get("backbone", ""))
    name = f"sts-bench/{_slug(label)}-{_slug(short)}"
    identity = {
        "spec": spec,
        "weights": (backbone or {}).get("fingerprint"),
        "protocol": {k: protocol.get(k) for k in IDENTITY_PROTOCOL},
    }
    return name, key_hash(identity, 12)


def _correlations(similarity: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    from harness.core.scoring import pearson, spearman

    rho, r = spearman(similarity, gold), pearson(similarity, gold)
    return {
        "pearson": r,
        "spearman": rho,
        "cosine_pearson": r,
        "cosine_spearman": rho,
        "main_score": rho,
    }


def _languages(task_name: str, subsets: list[str], source: str) -> dict[str, list[str]]:
    """Languages of each MTEB subset: English for registered tasks, MTEB's metadata otherwise (the
    run read the task through mteb, so mteb is already imported)."""
    if source != "mteb" or subsets == ["default"]:
        return dict.fromkeys(subsets, ENGLISH)
    from harness.core.data.sources.mteb_tasks import mteb_task

    mapping = mteb_task(task_name).metadata.hf_subsets_to_langscripts
    return {s: list(mapping.get(s, [])) for s in subsets}


def task_result(record: Record, task_name: str) -> dict[str, Any]:
    """MTEB's TaskResult JSON for one sts-bench record (an embedding method's)."""
    task, pairs = record["task"], record["pairs"]
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
    scores = [
        {
            **{k: round(v, 6) for k, v in _correlations(similarity[idx], gold[idx]).items()},
            "hf_subset": subset,
            "languages": languages[subset],
            "mteb_version": version,
        }
        for subset, idx in groups.items()
    ]
    pinned = task["source"] in ("mteb", "hub") and str(task["origin"]).rsplit("@", 1)[-1] not in (
        "",
        task["origin"],
    )
    revision = (
        str(task["origin"]).rsplit("@", 1)[-1]
        if pinned
        else f"{task['source']}-{task['fingerprint'][:12]}"
    )
    timings = record.get("timings") or {}
    return {
        "dataset_revision": revision,
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


def _timestamp(created: str | None) -> float | None:
    import datetime as dt

    try:
        return dt.datetime.fromisoformat(str(created)).timestamp()
    except ValueError:
        return None


def model_meta(
    name: str,
    revision: str,
    adapted_from: str | None,
    max_tokens: int | None,
    trained_on: set[str],
    embed_dim: int | None = None,
    n_parameters: int | None = None,
) -> dict[str, Any]:
    """``model_meta.json``: MTEB's ModelMeta fields, filled with what sts-bench knows: the hub id of
    the weights (None for a local folder), the width of the vectors scored and the backbone's
    parameters."""
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
        "similarity_fn_name": "cosine",
        "use_instructions": False,
        "training_datasets": sorted(trained_on) or None,
        "adapted_from": adapted_from,
        "superseded_by": None,
        "modalities": ["text"],
        "model_type": ["dense"],
        "citation": None,
        "contacts": None,
        "experiment_kwargs": None,
        "output_dtypes": None,
        "extra_requirements_groups": None,
        "loader": None,
        "is_cross_encoder": False,
    }


def _trained_on(meta_path: Path, name: str, revision: str) -> set[str]:
    """The tasks an existing model_meta.json of this model already lists (verified: same name and
    revision)."""
    try:
        old = json.loads(read_inside(meta_path).decode("utf-8"))
    except NotAFile as err:
        log.warning(
            "mteb: %s %s; not read (it is written again as a file)", meta_path, err.strerror
        )
        return set()
    except (OSError, ValueError):
        return set()
    if not isinstance(old, dict) or old.get("name") != name or old.get("revision") != revision:
        return set()
    listed = old.get("training_datasets") or []
    return {str(t) for t in listed} if isinstance(listed, list) else set()


def write_mteb_result(out_dir: Path, record: Record) -> Path | None:
    """Write the record's MTEB result file (and its model_meta.json); None for pair scorers, whose
    scores are not cosines of embeddings and have no MTEB STS counterpart."""
    if record["protocol"].get("similarity") != "cosine" or record["scores"]["spearman"] is None:
        return None  # an undefined score has no MTEB main_score
    task_name = record["task"].get("mteb_name") or record["task"]["name"]
    method = record["method"]
    name, revision = model_identity(
        method["label"], method["spec"], record.get("backbone"), record["protocol"]
    )
    folder = out_dir / name.replace("/", "__") / revision
    path = folder / f"{task_name}.json"
    refuse_linked_folders(out_dir.parent, path)  # mteb/<model>/<revision>/: real folders only
    atomic_write_text(
        path,
        json.dumps(strict_json(task_result(record, task_name)), indent=2, allow_nan=False) + "\n",
    )
    trained_on = _trained_on(folder / "model_meta.json", name, revision)
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
    )
    atomic_write_text(
        folder / "model_meta.json", json.dumps(strict_json(meta), indent=2, allow_nan=False) + "\n"
    )
    return path


class MtebFiles:
    """The report step of MTEB result files: one per record of this run
    (:func:`write_mteb_result`)."""

    name = "mteb-files"

    def enabled(self, cfg: BenchConfig) -> bool:
        return True

    def memo_key(self, inputs: ReportInputs) -> None:
        return None  # a file per record, each a small JSON: cheaper to write than to memoise

    def write(self, inputs: ReportInputs) -> StepOutput:
        paths = [write_mteb_result(inputs.out_dir / "mteb", record) for record in inputs.records]
        return StepOutput([p for p in paths if p is not None])
