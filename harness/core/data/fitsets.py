"""Fit sets: the unlabeled sentences a post-processor (whitening, flow) is fitted on.

The fit set changes published numbers as much as the method does (BERT-flow "target" vs "NLI"),
so it is one named setting, shared by every method that fits, recorded with its fingerprint
in every score:

* ``target``      — both sides of every pair of every split the source has for the task (labels
                    unused): the papers' *transductive* setting, since it holds the scored sentences
* ``target-pairs``— the same sentences as they occur in the pairs, repeats kept (BERT-whitening's
                    and BERT-flow's code fit on this)
* ``heldout``     — every split but the scored one, minus any scored sentence: what methods that
                    train use by default (simcse-train, DSE's cross-pairs)
* ``test``        — the evaluated split only
* ``train``       — the task's train split (STS-B, SICK-R)
* ``corpus:FILE`` — one sentence per line (blank lines skipped); ``wiki1m:FILE`` is the same reader,
                    named for SimCSE's 1M Wikipedia sentences (wiki1m_for_simcse.txt)
* ``nli``         — premises and hypotheses of SNLI + MultiNLI train (BERT-flow's "NLI" setting),
                    from the hub through ``datasets``, or from the hub source's location
                    (``--data-dir hub=DIR``, ``--hub-root DIR``): ``DIR/{snli,multi_nli}/``
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.data.sources.rows import read_lines
from harness.core.data.splits import LoadedTask, TaskSpec, unique
from harness.core.errors import UserError

TASK_KINDS = ("target", "target-pairs", "heldout", "test", "train")
FIT_SET_KINDS = (
    "target",
    "target-pairs",
    "heldout",
    "test",
    "train",
    "corpus:FILE",
    "wiki1m:FILE",
    "nli",
)
FILE_KINDS = ("corpus:", "wiki1m:")
NLI_DATASETS = ("stanfordnlp/snli", "nyu-mll/multi_nli")


@dataclass(frozen=True)
class FitSet:
    name: str
    sentences: tuple[str, ...]
    fingerprint: str
    origin: str
    # The sentence pairs these sentences came from, for methods that fit on pairs (BERT-flow's pair
    # batches); empty for a plain corpus.
    pairs: tuple[tuple[str, str], ...] = ()

    def overlap(self, sentences: Iterable[str]) -> int:
        """How many of ``sentences`` (distinct) the fit set holds: > 0 makes a score
        transductive."""
        mine = set(self.sentences)
        return sum(1 for s in set(sentences) if s in mine)

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "n_sentences": len(self.sentences),
            "fingerprint": self.fingerprint,
            "origin": self.origin,
        }


def make_fit_set(
    name: str, sentences: list[str], origin: str, pairs: Iterable[tuple[str, str]] = ()
) -> FitSet:
    digest = hashlib.sha256("\n".join(sentences).encode("utf-8")).hexdigest()
    return FitSet(
        name=name, sentences=tuple(sentences), fingerprint=digest, origin=origin, pairs=tuple(pairs)
    )


def task_pairs(task: LoadedTask, splits: Iterable[str]) -> list[tuple[str, str]]:
    return [pair for name in splits for pair in zip(task.splits[name].s1, task.splits[name].s2)]


def check_fit_set_name(name: str) -> None:
    if name in TASK_KINDS or name == "nli":
        return
    if any(name.startswith(prefix) and len(name) > len(prefix) for prefix in FILE_KINDS):
        return
    raise UserError(f"--fit-set {name}: expected one of {', '.join(FIT_SET_KINDS)}")


def splits_needed(name: str, spec: TaskSpec) -> tuple[str, ...]:
    """Which splits of ``spec`` must be loaded to build this fit set (beyond the eval split)."""
    if name in ("target", "target-pairs", "heldout"):
        return spec.splits
    if name == "train":
        if "train" not in spec.splits:
            raise UserError(
                f"--fit-set train: {spec.title} has no train split; use --fit-set target, test or "
                "corpus:FILE"
            )
        return ("train",)
    return ()


def read_corpus(path_text: str, kind: str = "corpus") -> FitSet:
    path = Path(path_text).expanduser()
    sentences = unique(
        s.strip() for s in read_lines(path, f"--fit-set {kind}:{path_text}") if s.strip()
    )
    if not sentences:
        raise UserError(f"--fit-set {kind}:{path_text}: the file has no non-blank line")
    return make_fit_set(f"{kind}:{path.name}", sentences, str(path.resolve()))


@functools.lru_cache(maxsize=2)
def read_nli(hub_root: str | None) -> FitSet:
    """Unique premises and hypotheses of the SNLI and MultiNLI train splits (labels unused)."""
    from datasets import load_dataset

    from harness.core.hub import first_line, once

    sentences: list[str] = []
    pairs: list[tuple[str, str]] = []
    origins = []
    for repo in NLI_DATASETS:
        location = str(Path(hub_root).expanduser() / repo.split("/")[-1]) if hub_root else repo
        # mypy cannot infer a lambda whose default argument binds the loop variable against once()'s
        # Callables
        rows = once(
            ("dataset", location, "train"),
            lambda location=location: load_dataset(location, split="train"),  # type: ignore[misc]
            lambda err, location=location: (
                f"--fit-set nli: could not load {location}: {first_line(err)}; "  # type: ignore[misc]
                "offline, pass --hub-root DIR holding snli/ and multi_nli/ with premise and "
                "hypothesis columns"
            ),
        )
        missing = [c for c in ("premise", "hypothesis") if c not in rows.column_names]
        if missing:
            raise UserError(f"--fit-set nli: {location} lacks column(s) {', '.join(missing)}")
        premises = [str(s).strip() for s in rows["premise"]]
        hypotheses = [str(s).strip() for s in rows["hypothesis"]]
        sentences += premises + hypotheses
        pairs += [(a, b) for a, b in zip(premises, hypotheses) if a and b]
        origins.append(location)
    return make_fit_set("nli", unique(s for s in sentences if s), " + ".join(origins), pairs)


def heldout(task: LoadedTask) -> FitSet:
    """Every split but the evaluated one, minus any sentence that also occurs in the evaluated
    split: the default corpus of methods that *train* (simcse-train, DSE's cross-pairs), so they
    never see a sentence they are scored on."""
    others = [name for name in task.splits if name != task.spec.eval_split]
    scored = set(task.eval.sentences())
    sentences = [s for s in task.sentences(others) if s not in scored]
    if not sentences:
        raise UserError(
            f"fit set heldout: the {task.source} source has no split of {task.spec.title} besides "
            f"'{task.spec.eval_split}' to train on; pass a corpus apart from the scored sentences "
            "(e.g. --simcse-train-corpus corpus:FILE or --dse-pool corpus:FILE)"
        )
    return make_fit_set(
        "heldout", sentences, f"{task.spec.title} {'+'.join(others)} minus {task.spec.eval_split}"
    )


def build_fit_set(
    name: str, task: LoadedTask, locations: Mapping[str, str] | None = None
) -> FitSet:
    """The fit set ``name`` for ``task`` (corpus files and NLI do not depend on the task);
    ``locations``: the run's mapping source → location, of which ``nli`` reads the hub's."""
    for prefix in FILE_KINDS:
        if name.startswith(prefix):
            return read_corpus(name.removeprefix(prefix), prefix.rstrip(":"))
    if name == "nli":
        from harness.core.data.sources import SOURCES

        return read_nli(SOURCES["hub"].location_in(locations or {}))
    if name == "test":
        return make_fit_set(
            "test",
            task.eval.sentences(),
            f"{task.spec.title} test",
            task_pairs(task, [task.spec.eval_split]),
        )
    if name == "train":
        if "train" not in task.splits:
            raise UserError(
                f"--fit-set train: the {task.source} source has no train split for "
                f"{task.spec.title}; use --fit-set target, test or corpus:FILE"
            )
        return make_fit_set(
            "train",
            task.sentences(["train"]),
            f"{task.spec.title} train",
            task_pairs(task, ["train"]),
        )
    origin = f"{task.spec.title} {'+'.join(task.splits)}"
    if name == "target":
        return make_fit_set("target", task.sentences(), origin, task_pairs(task, task.splits))
    if name == "target-pairs":
        # BERT-whitening's eval.py and BERT-flow's run_siamese.py: both sides of every pair of every
        # split, in pair order, repeats kept (a sentence in five pairs weighs five times).
        pairs = task_pairs(task, task.splits)
        return make_fit_set(
            "target-pairs",
            [s for pair in pairs for s in pair],
            origin + " (pairs, repeats kept)",
            pairs,
        )
    if name == "heldout":
        return heldout(task)
    raise UserError(f"--fit-set {name}: expected one of {', '.join(FIT_SET_KINDS)}")
