"""Anisotropy diagnostics (the BERT-flow paper's argument, measured): how much sentence vectors
crowd into a narrow cone, and how evenly their variance spreads over dimensions.

For the unique sentences of a task's eval split, per method:

* ``mean_cos_random_pairs`` — mean cosine of random distinct pairs: ≈ 0 for isotropic vectors,
  close to 1 when everything points the same way;
* ``mean_cos_to_centroid`` — mean cosine between each vector and the mean vector;
* ``eigenvalue_ratio`` — largest / smallest eigenvalue of the covariance (its condition number);
* ``effective_rank`` — exp(entropy of the normalised eigenvalues) (Roy & Vetterli 2007):
  equals d when all d eigenvalues are equal, 1 when one direction holds all the variance.

Worked example: vectors (1, 0) and (0, 1) around their mean (½, ½) have covariance eigenvalues
(1, 0), so the effective rank is exp(0) = 1; their random-pair cosine is 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.runner.records.outputs import StepOutput

if TYPE_CHECKING:
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.records.schema import Record
    from harness.runner.settings.config import BenchConfig

HIST_BINS = 40
MAX_PAIRS = 20000


def singular_values(centered: np.ndarray) -> np.ndarray:
    """Singular values of an (n, d) matrix, largest first, from the symmetric eigensolver on the
    smaller of its two Gram matrices (XᵀX or XXᵀ share their nonzero eigenvalues, the squared
    singular values). LAPACK's SVD of such a matrix has failed to converge with one OpenBLAS build
    on one CPU; the symmetric solver (``eigvalsh``) did not.

    >>> singular_values(np.array([[3.0, 0.0], [0.0, 4.0], [0.0, 0.0]])).round(6).tolist()
    [4.0, 3.0]
    """
    n, d = centered.shape
    gram = centered.T @ centered if d <= n else centered @ centered.T
    eig = np.clip(np.linalg.eigvalsh(gram), 0.0, None)[::-1]
    return np.sqrt(eig)


def anisotropy(vectors: np.ndarray, seed: int = 1234) -> dict[str, Any]:
    """The diagnostics of one (n, d) set of vectors, as plain JSON-ready values."""
    x = np.asarray(vectors, dtype=np.float64)
    n, dim = x.shape
    norms = np.linalg.norm(x, axis=1)
    unit = x / np.where(norms == 0, 1, norms)[:, None]
    rng = np.random.default_rng(seed)
    pairs = min(MAX_PAIRS, n * (n - 1) // 2)
    first = rng.integers(0, n, pairs)
    second = (first + rng.integers(1, n, pairs)) % n  # never the same sentence twice
    cos = np.einsum("ij,ij->i", unit[first], unit[second])
    centroid = x.mean(axis=0)
    centroid /= np.linalg.norm(centroid) or 1.0
    singular = singular_values(x - x.mean(axis=0))
    eig = singular**2 / max(n - 1, 1)
    positive = eig[eig > eig[0] * 1e-12] if eig[0] > 0 else eig[:1]
    share = positive / positive.sum() if positive.sum() > 0 else np.ones(1)
    counts, edges = np.histogram(cos, bins=HIST_BINS, range=(-1.0, 1.0))
    return {
        "n_sentences": int(n),
        "dim": int(dim),
        "mean_cos_random_pairs": float(cos.mean()),
        "mean_cos_to_centroid": float((unit @ centroid).mean()),
        "eigenvalue_ratio": float(positive[0] / positive[-1]),
        "effective_rank": float(np.exp(-(share * np.log(share)).sum())),
        "singular_values": [float(v) for v in singular],
        "cosine_histogram": {
            "edges": [float(e) for e in edges],
            "counts": [int(c) for c in counts],
        },
    }


def unique_rows(
    s1: tuple[str, ...], s2: tuple[str, ...], left: np.ndarray, right: np.ndarray
) -> np.ndarray:
    """One vector per distinct sentence of the split (both sides), first-seen order."""
    rows: dict[str, np.ndarray] = {}
    for texts, vectors in ((s1, left), (s2, right)):
        for text, vector in zip(texts, vectors):
            rows.setdefault(text, vector)
    return np.stack(list(rows.values()))


SUMMARY_KEYS = (
    "mean_cos_random_pairs",
    "mean_cos_to_centroid",
    "eigenvalue_ratio",
    "effective_rank",
)


def diagnostics_markdown(records: Sequence[Record]) -> str:
    """One table per task: rows (method, backbone, fit set), the four summary numbers."""
    from tabulate import tabulate

    parts = [
        "# Anisotropy diagnostics",
        "",
        "On the unique sentences of each task's eval split. mean cos = mean cosine of random "
        "distinct pairs / to the centroid (0 for isotropic vectors); eig. ratio = largest/smallest "
        "covariance "
        "eigenvalue; eff. rank = exp(entropy of normalised eigenvalues), at most the dimension.",
        "",
    ]
    by_task: dict[str, list[Record]] = {}
    for record in records:
        if record.get("diagnostics"):
            by_task.setdefault(record["task"]["title"], []).append(record)
    for task, rows in by_task.items():
        table = [
            [
                r["method"]["label"],
                r["method"]["spec"]["backbone"],
                (r.get("fit") or {}).get("fit_set", {}).get("name", ""),
                r["diagnostics"]["dim"],
                *(r["diagnostics"][k] for k in SUMMARY_KEYS),
            ]
            for r in rows
        ]
        parts += [
            f"## {task}",
            "",
            tabulate(
                table,
                headers=[
                    "method",
                    "backbone",
                    "fit set",
                    "dim",
                    "mean cos (pairs)",
                    "mean cos (centroid)",
                    "eig. ratio",
                    "eff. rank",
                ],
                tablefmt="pipe",
                floatfmt=".3g",
            ),
            "",
        ]
    return "\n".join(parts)


def write_diagnostics(records: Sequence[Record], out_dir: Path) -> list[Path]:
    """results/diagnostics.md and plots/diagnostics-<task>.png from the records that carry
    diagnostics."""
    from harness.core.hashing import atomic_write_text
    from harness.runner.tables.plot_worker import draw
    from harness.runner.tables.plots import diagnostics_png

    chosen = [r for r in records if r.get("diagnostics")]
    if not chosen:
        return []
    paths = [out_dir / "diagnostics.md"]
    atomic_write_text(paths[0], diagnostics_markdown(chosen) + "\n")
    for task in dict.fromkeys(r["task"]["name"] for r in chosen):
        paths.append(
            draw(
                diagnostics_png,
                [r for r in chosen if r["task"]["name"] == task],
                out_dir / "plots" / f"diagnostics-{task}.png",
            )
        )
    return paths


class Diagnostics:
    """The report step of ``--diagnostics``: diagnostics.md and a plot per task
    (:func:`write_diagnostics`)."""

    name = "diagnostics"

    def enabled(self, cfg: BenchConfig) -> bool:
        return cfg.diagnostics

    def memo_key(self, inputs: ReportInputs) -> None:
        return None

    def write(self, inputs: ReportInputs) -> StepOutput:
        return StepOutput(write_diagnostics(inputs.records, inputs.out_dir))
