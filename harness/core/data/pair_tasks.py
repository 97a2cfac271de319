"""The sentence-pair classification tasks (kind ``pairclass``), declared as data.

GLUE's sentence-pair tasks (MRPC, QQP, QNLI, RTE, MNLI matched and mismatched) and SNLI, read from
GLUE's own folder (``--source glue``, :mod:`harness.core.data.sources.glue`) or the datasets on
the hub (``--source hub``); MTEB's English PairClassification tasks (SprintDuplicateQuestions,
TwitterSemEval2015, TwitterURLCorpus), read through MTEB's task objects (``--source mteb``) or
MTEB's hub copies at the revisions MTEB pins (``--source hub``).

``classes`` are in each dataset's label-index order (the hub's ``ClassLabel`` order; GLUE's files
name the classes of QNLI, RTE, MNLI and SNLI and number those of MRPC and QQP in the same order):
QNLI's and RTE's 0 is ``entailment``, not the negative class. Every task is ranked by average
precision of the similarity for its positive class (MTEB's main score for PairClassification);
accuracy (what GLUE and DSE report) and F1 are recorded beside it, at the threshold chosen on
``threshold_split``. GLUE's test labels are hidden, so GLUE's tasks score their dev split (MNLI:
``dev_matched``; ``mnli-mm`` scores ``dev_mismatched``); SNLI scores its test split. MTEB's tasks
have no train split: ``threshold_split`` is "" (only the best threshold on the scored split, §).

GLUE's, SNLI's and MultiNLI's hub datasets are not pinned by MTEB and have no revision here (the
hub's newest); MTEB's are pinned to the revisions MTEB's task metadata names. A local hub folder
(``--hub-root DIR``) holds ``<dataset>/<config>/<split>*.{parquet,jsonl,json,csv}`` (a snapshot of
the hub repository) or a ``save_to_disk`` folder; MNLI is read from ``glue/mnli/`` or, without it,
from ``multi_nli/`` (the same pairs and label order), which ``--fit-set nli`` reads too.
"""

from __future__ import annotations

from typing import Any

from harness.core.data.splits import TaskSpec

GLUE_CITATION = (
    "Wang et al. 2019, GLUE: A Multi-Task Benchmark and Analysis Platform for Natural Language "
    "Understanding (ICLR)"
)
NLI_CLASSES = ("entailment", "neutral", "contradiction")
QA_NLI_CLASSES = ("entailment", "not_entailment")
GLUE_SPLITS = {"train": "train", "dev": "validation"}  # ours -> the hub's
MNLI_SPLITS = {
    "train": "train",
    "dev_matched": "validation_matched",
    "dev_mismatched": "validation_mismatched",
}
NLI_COLUMNS = ("premise", "hypothesis", "label")
# MultiNLI's own dataset, for a local hub folder without glue/mnli/ (same pairs, same labels).
MULTI_NLI = {"path": "nyu-mll/multi_nli", "splits": MNLI_SPLITS, "columns": NLI_COLUMNS}


def _glue(config: str, columns: tuple[str, str, str], splits: dict[str, str]) -> dict[str, Any]:
    return {"path": "nyu-mll/glue", "config": config, "splits": splits, "columns": columns}


def _mnli(name: str, title: str, split: str, which: str) -> TaskSpec:
    return TaskSpec(
        name=name,
        title=title,
        description=f"MultiNLI {which} (GLUE): entailment / neutral / contradiction; train 392702 "
        f"/ {split} {9815 if which == 'matched' else 9832}",
        splits=("train", split),
        eval_split=split,
        kind="pairclass",
        main_score="ap",
        classes=NLI_CLASSES,
        positive="entailment",
        threshold_split="train",
        gold_range=(0.0, 2.0),
        citation="Williams, Nangia & Bowman 2018, A Broad-Coverage Challenge Corpus for Sentence "
        f"Understanding through Inference (NAACL); {GLUE_CITATION}",
        where={
            "glue": {
                "folder": "MNLI",
                "columns": ("sentence1", "sentence2", "gold_label"),
                "labels": "name",
            },
            "hub": {
                **_glue("mnli", NLI_COLUMNS, {"train": "train", split: MNLI_SPLITS[split]}),
                "or": ({**MULTI_NLI, "splits": {"train": "train", split: MNLI_SPLITS[split]}},),
            },
        },
    )


def _mteb(
    name: str, title: str, path: str, revision: str, description: str, citation: str, **kw: Any
) -> TaskSpec:
    splits: dict[str, str] = kw.pop("hub_splits", {"test": "test"})
    return TaskSpec(
        name=name,
        title=title,
        description=description,
        splits=tuple(splits),
        eval_split="test",
        kind="pairclass",
        main_score="ap",
        threshold_split="",
        gold_range=(0.0, 1.0),
        citation=citation,
        where={
            "hub": {
                "path": path,
                "revision": revision,
                "splits": splits,
                "columns": ("sent1", "sent2", "labels"),
            },
            "mteb": {"name": title},
        },
        **kw,
    )


PAIR_TASKS: tuple[TaskSpec, ...] = (
    TaskSpec(
        name="mrpc",
        title="MRPC",
        description="Microsoft Research Paraphrase Corpus (GLUE): paraphrase or not; train 3668 "
        "/ dev 408",
        splits=("train", "dev"),
        eval_split="dev",
        kind="pairclass",
        main_score="ap",
        classes=("not_equivalent", "equivalent"),
        positive="equivalent",
        threshold_split="train",
        gold_range=(0.0, 1.0),
        citation="Dolan & Brockett 2005, Automatically Constructing a Corpus of Sentential "
        f"Paraphrases (IWP); {GLUE_CITATION}",
        where={
            "glue": {"folder": "MRPC", "columns": ("#1 String", "#2 String", "Quality")},
            "hub": _glue("mrpc", ("sentence1", "sentence2", "label"), GLUE_SPLITS),
        },
    ),
    TaskSpec(
        name="qqp",
        title="QQP",
        description="Quora Question Pairs (GLUE): duplicate or not; train 363846 / dev 40430",
        splits=("train", "dev"),
        eval_split="dev",
        kind="pairclass",
        main_score="ap",
        classes=("not_duplicate", "duplicate"),
        positive="duplicate",
        threshold_split="train",
        gold_range=(0.0, 1.0),
        citation=f"Iyer, Dandekar & Csernai 2017, First Quora Dataset Release: Question Pairs; "
        f"{GLUE_CITATION}",
        where={
            # The real train file has lines with missing fields; GLUE's processors skip them.
            "glue": {
                "folder": "QQP",
                "columns": ("question1", "question2", "is_duplicate"),
                "short_rows": "skip",
            },
            "hub": _glue("qqp", ("question1", "question2", "label"), GLUE_SPLITS),
        },
    ),
    TaskSpec(
        name="qnli",
        title="QNLI",
        description="Question NLI (GLUE, from SQuAD): does the sentence answer the question; "
        "train 104743 / dev 5463",
        splits=("train", "dev"),
        eval_split="dev",
        kind="pairclass",
        main_score="ap",
        classes=QA_NLI_CLASSES,
        positive="entailment",
        threshold_split="train",
        gold_range=(0.0, 1.0),
        sides=("query", "document"),  # a question, then a sentence that may answer it
        citation="Rajpurkar et al. 2016, SQuAD: 100,000+ Questions for Machine Comprehension of "
        f"Text (EMNLP); {GLUE_CITATION}",
        where={
            "glue": {
                "folder": "QNLI",
                "columns": ("question", "sentence", "label"),
                "labels": "name",
            },
            "hub": _glue("qnli", ("question", "sentence", "label"), GLUE_SPLITS),
        },
    ),
    TaskSpec(
        name="rte",
        title="RTE",
        description="Recognizing Textual Entailment (RTE1-3, 5; GLUE): entailment or not; train "
        "2490 / dev 277",
        splits=("train", "dev"),
        eval_split="dev",
        kind="pairclass",
        main_score="ap",
        classes=QA_NLI_CLASSES,
        positive="entailment",
        threshold_split="train",
        gold_range=(0.0, 1.0),
        citation="Dagan et al. 2006, Bar Haim et al. 2006, Giampiccolo et al. 2007, Bentivogli "
        f"et al. 2009 (the PASCAL RTE challenges); {GLUE_CITATION}",
        where={
            "glue": {
                "folder": "RTE",
                "columns": ("sentence1", "sentence2", "label"),
                "labels": "name",
            },
            "hub": _glue("rte", ("sentence1", "sentence2", "label"), GLUE_SPLITS),
        },
    ),
    _mnli("mnli", "MNLI", "dev_matched", "matched"),
    _mnli("mnli-mm", "MNLI-mm", "dev_mismatched", "mismatched"),
    TaskSpec(
        name="snli",
        title="SNLI",
        description="Stanford NLI, 3 classes as MNLI's; no-majority pairs dropped: train 549367 / "
        "dev 9842 / test 9824",
        splits=("train", "dev", "test"),
        eval_split="test",
        kind="pairclass",
        main_score="ap",
        classes=NLI_CLASSES,
        positive="entailment",
        threshold_split="train",
        gold_range=(0.0, 2.0),
        citation="Bowman et al. 2015, A large annotated corpus for learning natural language "
        "inference (EMNLP)",
        where={
            "glue": {
                "folder": "SNLI",
                "columns": ("sentence1", "sentence2", "gold_label"),
                "labels": "name",
                "drop": ("-",),  # no majority label among the annotators
            },
            "hub": {
                "path": "stanfordnlp/snli",
                "config": "plain_text",
                "splits": {"train": "train", "dev": "validation", "test": "test"},
                "columns": NLI_COLUMNS,
                "drop": (-1,),
            },
        },
    ),
    _mteb(
        "sprintduplicatequestions",
        "SprintDuplicateQuestions",
        "mteb/sprintduplicatequestions-pairclassification",
        "d66bd1f72af766a5cc4b0ca5e00c162f89e8cc46",
        "MTEB PairClassification: duplicate questions from the Sprint technical forum",
        "Shah et al. 2018, Adversarial Domain Adaptation for Duplicate Question Detection (EMNLP)",
        classes=("not_duplicate", "duplicate"),
        positive="duplicate",
        hub_splits={"dev": "validation", "test": "test"},
    ),
    _mteb(
        "twittersemeval2015",
        "TwitterSemEval2015",
        "mteb/twittersemeval2015-pairclassification",
        "70970daeab8776df92f5ea462b6173c0b46fd2d1",
        "MTEB PairClassification: paraphrase pairs of tweets (SemEval-2015 Task 1, PIT)",
        "Xu, Callison-Burch & Dolan 2015, SemEval-2015 Task 1: Paraphrase and Semantic Similarity "
        "in Twitter (PIT)",
        classes=("not_paraphrase", "paraphrase"),
        positive="paraphrase",
    ),
    _mteb(
        "twitterurlcorpus",
        "TwitterURLCorpus",
        "mteb/twitterurlcorpus-pairclassification",
        "8b6510b0b1fa4e4c4f879467980e9be563ec1cdf",
        "MTEB PairClassification: paraphrase pairs of tweets sharing a URL",
        "Lan et al. 2017, A Continuously Growing Dataset of Sentential Paraphrases (EMNLP)",
        classes=("not_paraphrase", "paraphrase"),
        positive="paraphrase",
    ),
)
