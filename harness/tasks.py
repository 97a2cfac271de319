"""The STS task registry and the in-memory shape of a loaded task.

A task is named once (``TaskSpec``) and can be read from three sources (``packaged``, ``senteval``,
``hub``); what comes back is the same shape whatever the source: pairs (s1, s2, gold, subset) per
split, with a sha256 fingerprint of the content and a line saying where it came from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from harness.errors import UserError, did_you_mean

SOURCES = ("packaged", "senteval", "hub")


@dataclass(frozen=True)
class TaskSpec:
    """Everything needed to find a task in each source; no data."""

    name: str
    title: str
    description: str
    splits: tuple[str, ...]
    senteval_dir: str
    senteval_subsets: tuple[str, ...] = ()
    hub_path: str = ""
    hub_revision: str = ""
    hub_splits: tuple[str, ...] = ("test",)
    eval_split: str = "test"


# Dataset revisions are the ones MTEB pins, so our `hub` numbers are comparable with MTEB's.
TASKS: dict[str, TaskSpec] = {
    "sts12": TaskSpec(
        "sts12", "STS12", "SemEval-2012 STS: MSRpar, MSRvid, SMTeuroparl, OnWN, SMTnews (3108 pairs)",
        ("test",), "STS/STS12-en-test",
        ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
        "mteb/sts12-sts", "a0d554a64d88156834ff5ae9920b964011b16384"),
    "sts13": TaskSpec(
        "sts13", "STS13", "SemEval-2013 STS without the licensed SMT subset: FNWN, headlines, OnWN (1500)",
        ("test",), "STS/STS13-en-test", ("FNWN", "headlines", "OnWN"),
        "mteb/sts13-sts", "7e90230a92c190f1bf69ae9002b8cea547a64cca"),
    "sts14": TaskSpec(
        "sts14", "STS14", "SemEval-2014 STS: forums, news, headlines, images, OnWN, tweets (3750)",
        ("test",), "STS/STS14-en-test",
        ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
        "mteb/sts14-sts", "6031580fec1f6af667f0bd2da0a551cf4f0b2375"),
    "sts15": TaskSpec(
        "sts15", "STS15", "SemEval-2015 STS: answers-forums/-students, belief, headlines, images (3000)",
        ("test",), "STS/STS15-en-test",
        ("answers-forums", "answers-students", "belief", "headlines", "images"),
        "mteb/sts15-sts", "ae752c7c21bf194d8b67fd573edf7ae58183cbe3"),
    "sts16": TaskSpec(
        "sts16", "STS16", "SemEval-2016 STS: answer-answer, headlines, plagiarism, postediting, q-q (1186)",
        ("test",), "STS/STS16-en-test",
        ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
        "mteb/sts16-sts", "4d8694f8f0e0100860b497b999b3dbed754a0513"),
    "stsb": TaskSpec(
        "stsb", "STS-B", "STS Benchmark (Cer et al. 2017): train 5749 / dev 1500 / test 1379 pairs",
        ("train", "dev", "test"), "STS/STSBenchmark", (),
        "mteb/stsbenchmark-sts", "b0fddb56ed78048fa8b90373c8a3cfc37b684831", ("train", "dev", "test")),
    "sickr": TaskSpec(
        "sickr", "SICK-R", "SICK relatedness: SentEval test 4927 pairs; MTEB's hub copy is all 9927",
        ("train", "dev", "test"), "SICK", (),
        "mteb/sickr-sts", "20a6d6f312dd54037fe07a32d58e5e168867909d"),
}

_ALIASES = {"stsbenchmark": "stsb", "sick": "sickr", "sickrelatedness": "sickr"}


def get_task(name: str) -> TaskSpec:
    """Look a task up by name, forgiving case, '-' and '_': ``STS-B`` → ``stsb``, ``SICK-R`` → ``sickr``."""
    key = name.lower().replace("-", "").replace("_", "")
    key = _ALIASES.get(key, key)
    if key not in TASKS:
        raise UserError(f"unknown task '{name}'{did_you_mean(key, list(TASKS))}; "
                        f"known tasks: {', '.join(TASKS)} (see --list)")
    return TASKS[key]


@dataclass(frozen=True)
class SplitData:
    """The pairs of one split, as parallel tuples, plus where they came from.

    ``subsets`` is the subset label of each pair (STS12-16 from SentEval); ``None`` when the source
    does not keep subsets (STS-B, SICK-R, and MTEB's hub copies, which store each year as one split).
    """

    s1: tuple[str, ...]
    s2: tuple[str, ...]
    gold: tuple[float, ...]
    subsets: tuple[str, ...] | None
    origin: str
    fingerprint: str = field(default="")

    def __post_init__(self) -> None:
        if not (len(self.s1) == len(self.s2) == len(self.gold)):
            raise ValueError("s1, s2 and gold must have the same length")
        if self.subsets is not None and len(self.subsets) != len(self.s1):
            raise ValueError("subsets must label every pair")
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", fingerprint_pairs(self.s1, self.s2, self.gold, self.subsets))

    def __len__(self) -> int:
        return len(self.s1)

    def subset_sizes(self) -> dict[str, int]:
        """Pairs per subset, in first-seen order; ``{}`` when the split has no subsets."""
        sizes: dict[str, int] = {}
        for label in self.subsets or ():
            sizes[label] = sizes.get(label, 0) + 1
        return sizes

    def sentences(self) -> list[str]:
        """Both sides of every pair, first-seen order, without repeats."""
        return unique(list(self.s1) + list(self.s2))


@dataclass(frozen=True)
class LoadedTask:
    """A task read from one source: its splits (only those the source has) and its provenance."""

    spec: TaskSpec
    source: str
    splits: dict[str, SplitData]

    @property
    def eval(self) -> SplitData:
        return self.splits[self.spec.eval_split]

    def sentences(self, splits: Iterable[str] | None = None) -> list[str]:
        """Unlabeled sentences of the given splits (all splits by default), without repeats."""
        names = list(self.splits) if splits is None else list(splits)
        out: list[str] = []
        for name in names:
            out.extend(self.splits[name].sentences())
        return unique(out)


def unique(items: Iterable[str]) -> list[str]:
    """First-seen order without repeats. ``unique(["b", "a", "b"]) == ["b", "a"]``."""
    return list(dict.fromkeys(items))


def fingerprint_pairs(
    s1: Sequence[str], s2: Sequence[str], gold: Sequence[float], subsets: Sequence[str] | None
) -> str:
    """sha256 of the pairs' content in order; any changed sentence, score or label changes it."""
    digest = hashlib.sha256()
    labels = subsets if subsets is not None else [""] * len(s1)
    for a, b, g, label in zip(s1, s2, gold, labels):
        digest.update(json.dumps([a, b, repr(float(g)), label], ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def load_task(spec: TaskSpec, source: str, splits: Sequence[str], *, senteval_dir: str | None = None,
              hub_root: str | None = None) -> LoadedTask:
    """Read ``splits`` of ``spec`` from ``source``; splits the source lacks are skipped silently
    (e.g. MTEB's hub has only the test split of STS12-16), but the eval split must exist."""
    if source == "packaged":
        from harness.sources import packaged

        data = packaged.load(spec, splits)
    elif source == "senteval":
        from harness.sources import senteval

        data = senteval.load(spec, splits, senteval_dir)
    elif source == "hub":
        from harness.sources import hub

        data = hub.load(spec, splits, hub_root)
    else:
        raise UserError(f"unknown source '{source}'{did_you_mean(source, SOURCES)}; "
                        f"use one of: {', '.join(SOURCES)}")
    if spec.eval_split not in data:
        raise UserError(f"{spec.title}: the {source} source has no '{spec.eval_split}' split")
    return LoadedTask(spec=spec, source=source, splits=data)


def stsb_train_split(source: str, senteval_dir: str | None = None, hub_root: str | None = None) -> SplitData:
    """STS-B train from the run's source: what the cross-encoder teacher and DSE student train on."""
    task = load_task(TASKS["stsb"], source, ["train", "test"], senteval_dir=senteval_dir, hub_root=hub_root)
    if "train" not in task.splits:
        raise UserError(f"the {source} source has no STS-B train split to train on; use --source packaged")
    return task.splits["train"]
