"""Fit sets: the unlabeled sentences a post-processor (whitening, flow) is fitted on.

The fit set changes published numbers as much as the method does (BERT-flow "target" vs "NLI"),
so it is one named setting, shared by every method that fits, recorded with its fingerprint
in every score:

* ``target``      — both sides of every pair of every split the source has for the task (labels unused)
* ``test``        — the evaluated split only
* ``train``       — the task's train split (STS-B, SICK-R)
* ``corpus:FILE`` — one sentence per line (blank lines skipped)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.sources.rows import read_lines
from harness.tasks import LoadedTask, TaskSpec, unique

FIT_SET_KINDS = ("target", "test", "train", "corpus:FILE")


@dataclass(frozen=True)
class FitSet:
    name: str
    sentences: tuple[str, ...]
    fingerprint: str
    origin: str

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "n_sentences": len(self.sentences), "fingerprint": self.fingerprint,
                "origin": self.origin}


def make_fit_set(name: str, sentences: list[str], origin: str) -> FitSet:
    digest = hashlib.sha256("\n".join(sentences).encode("utf-8")).hexdigest()
    return FitSet(name=name, sentences=tuple(sentences), fingerprint=digest, origin=origin)


def check_fit_set_name(name: str) -> None:
    if name in ("target", "test", "train") or (name.startswith("corpus:") and len(name) > len("corpus:")):
        return
    raise UserError(f"--fit-set {name}: expected one of {', '.join(FIT_SET_KINDS)}")


def splits_needed(name: str, spec: TaskSpec) -> tuple[str, ...]:
    """Which splits of ``spec`` must be loaded to build this fit set (beyond the eval split)."""
    if name == "target":
        return spec.splits
    if name == "train":
        if "train" not in spec.splits:
            raise UserError(f"--fit-set train: {spec.title} has no train split; "
                            "use --fit-set target, test or corpus:FILE")
        return ("train",)
    return ()


def read_corpus(path_text: str) -> FitSet:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise UserError(f"--fit-set corpus:{path_text}: no such file (one sentence per line)")
    sentences = unique(line.strip() for line in read_lines(path) if line.strip())
    if not sentences:
        raise UserError(f"--fit-set corpus:{path_text}: the file has no non-blank line")
    return make_fit_set(f"corpus:{path.name}", sentences, str(path.resolve()))


def build_fit_set(name: str, task: LoadedTask) -> FitSet:
    """The fit set ``name`` for ``task`` (corpus files do not depend on the task)."""
    if name.startswith("corpus:"):
        return read_corpus(name.removeprefix("corpus:"))
    if name == "test":
        return make_fit_set("test", task.eval.sentences(), f"{task.spec.title} test")
    if name == "train":
        if "train" not in task.splits:
            raise UserError(f"--fit-set train: the {task.source} source has no train split for "
                            f"{task.spec.title}; use --fit-set target, test or corpus:FILE")
        return make_fit_set("train", task.sentences(["train"]), f"{task.spec.title} train")
    if name == "target":
        return make_fit_set("target", task.sentences(), f"{task.spec.title} {'+'.join(task.splits)}")
    raise UserError(f"--fit-set {name}: expected one of {', '.join(FIT_SET_KINDS)}")
