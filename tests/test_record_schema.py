"""The result record's schema (harness.runner.records.schema): what a reader accepts.

A record must be intact (its checksum) *and* hold scores that its own pairs give: the expected
values below are computed here with scipy, not with the harness's scoring, so a check that trusted
the stored numbers, recomputed under another aggregation or ignored the subsets would fail them.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from scipy import stats

from harness.core.scoring import score_split
from harness.runner.records.schema import RESULT_SCHEMA_VERSION, checksum, problems, seal

SIMILARITY = [0.1, 0.4, 0.35, 0.8, 0.2, 0.9, 0.5, 0.7]
GOLD = [1.0, 2.0, 3.0, 4.0, 0.5, 4.5, 2.5, 3.5]
SUBSET = ["a", "a", "a", "a", "b", "b", "b", "b"]


def _subset(label: str) -> dict:
    idx = [i for i, s in enumerate(SUBSET) if s == label]
    x, y = np.asarray(SIMILARITY)[idx], np.asarray(GOLD)[idx]
    return {"spearman": 100 * stats.spearmanr(x, y).statistic, "pearson": 100 * stats.pearsonr(x, y).statistic,
            "n": len(idx), "undefined": None}


SUBSETS = {label: _subset(label) for label in ("a", "b")}
# --aggregation mean: the unweighted mean of the subsets' correlations (not one over all 8 pairs)
SPEARMAN = float(np.mean([s["spearman"] for s in SUBSETS.values()]))
PEARSON = float(np.mean([s["pearson"] for s in SUBSETS.values()]))

GOOD = {
    "schema_version": RESULT_SCHEMA_VERSION, "harness": {"name": "sts-bench", "version": "0", "git_sha": None},
    "created": "2026-11-30T00:00:00+00:00",
    "method": {"name": "avg", "label": "avg", "kind": "embedding", "summary": "", "spec": {"backbone": "m"}},
    "backbone": None,
    "task": {"name": "sts12", "title": "STS12", "source": "packaged", "split": "test", "origin": "x",
             "fingerprint": "f", "n_pairs": 8, "subsets": {"a": 4, "b": 4}, "mteb_name": None},
    "protocol": {"aggregation": "mean", "source": "packaged", "dtype": "fp32", "max_length": 128,
                 "first_last_layers": [1, -1]},
    "fit": None,
    # the interval its pairs give with these rounds and seed: it is drawn again on read (issue 42)
    "scores": {"spearman": SPEARMAN, "pearson": PEARSON,
               "spearman_ci95": list(score_split(np.asarray(SIMILARITY), GOLD, SUBSET, "mean", 50, 1).ci95),
               "bootstrap_rounds": 50, "bootstrap_seed": 1, "n_zero_vectors": 0, "undefined": None},
    "subset_scores": copy.deepcopy(SUBSETS),
    "pairs": {"similarity": list(SIMILARITY), "gold": list(GOLD), "subset": list(SUBSET)},
    "env": {}, "timings": {"fit_s": 0.0},
}


def edited(change):
    record = copy.deepcopy(GOOD)
    change(record)
    return record


def _pairs_all(record):
    """The same record filed under --aggregation all: the scores of a mean no longer follow."""
    record["protocol"]["aggregation"] = "all"


@pytest.mark.parametrize(("case", "record", "problem"), [
    ("a float for an int", seal(edited(lambda r: r["task"].update(n_pairs=8.0))), "n_pairs is not an integer"),
    ("a bool for an int", seal(edited(lambda r: r["task"].update(n_pairs=True))), "n_pairs is not an integer"),
    ("a string score", seal(edited(lambda r: r["scores"].update(spearman="50"))), "scores.spearman"),
    ("a key missing", seal(edited(lambda r: r["scores"].pop("undefined"))), "scores lacks undefined"),
    ("pairs of another length", seal(edited(lambda r: r["pairs"]["gold"].pop())), "pairs do not match n_pairs"),
    ("no checksum", edited(lambda r: None), "no checksum"),
    ("another schema", seal(edited(lambda r: r.update(schema_version=1))), "schema 1"),
    ("an edit after sealing", edited(lambda r: r.update(seal(r), created="2027")), "does not match its checksum"),
    ("not an object", [1, 2], "not a JSON object"),
    # sealed again after the edit: the checksum holds, the evidence does not
    ("a better Spearman", seal(edited(lambda r: r["scores"].update(spearman=99.0))),
     f"scores.spearman 99.0 is not what its own 8 pairs give ({SPEARMAN:.4f})"),
    ("a better Pearson", seal(edited(lambda r: r["scores"].update(pearson=PEARSON + 1e-4))), "scores.pearson"),
    ("a subset's score", seal(edited(lambda r: r["subset_scores"]["b"].update(spearman=50.0))),
     "subset_scores.b.spearman 50.0 is not what its own pairs give (100.0000)"),
    ("a subset's size", seal(edited(lambda r: r["subset_scores"]["a"].update(n=5))), "subset_scores.a"),
    ("a subset dropped", seal(edited(lambda r: r["subset_scores"].pop("b"))), "subset_scores has ['a']"),
    ("another aggregation", seal(edited(_pairs_all)), "scores.spearman"),
    ("an unknown aggregation", seal(edited(lambda r: r["protocol"].update(aggregation="max"))),
     "protocol.aggregation 'max' is not one of all, mean, wmean"),
    ("a protocol key missing", seal(edited(lambda r: r["protocol"].pop("dtype"))), "protocol lacks dtype"),
    ("no backbone in the spec", seal(edited(lambda r: r["method"]["spec"].pop("backbone"))),
     "method.spec.backbone is not a string"),
    ("the score outside its interval", seal(edited(lambda r: r["scores"].update(spearman_ci95=[98.5, 99.5]))),
     f"its Spearman {SPEARMAN:.4f} lies outside its own 95 % interval [98.5000, 99.5000]"),
    ("an interval of three numbers", seal(edited(lambda r: r["scores"].update(spearman_ci95=[0.0, 1.0, 2.0]))),
     "has 3 numbers, not 2"),
    ("an interval beyond 100", seal(edited(lambda r: r["scores"].update(spearman_ci95=[-120.0, 100.0]))),
     "reaches beyond ±100"),
    ("zero vectors that are not there", seal(edited(lambda r: r["scores"].update(n_zero_vectors=1))),
     "scores.n_zero_vectors 1, but 0 of its similarities are 0"),
    ("a defined score filed undefined",
     seal(edited(lambda r: r["scores"].update(spearman=None, pearson=None, spearman_ci95=None,
                                              undefined="every gold score is equal"))),
     "its Spearman is recorded as undefined (every gold score is equal), but its own pairs give"),
    ("subset labels of another length", seal(edited(lambda r: r["pairs"]["subset"].pop())),
     "pairs.subset has 7 labels for n_pairs 8"),
    ("subset sizes that do not count the labels", seal(edited(lambda r: r["task"].update(subsets={"a": 8}))),
     "task.subsets"),
])
def test_a_record_that_is_not_one_says_why(case, record, problem):
    assert problem in problems(record)


def _constant_gold(record):
    """Every gold score equal: undefined, and stored as null with a reason (as a run writes it)."""
    record["pairs"]["gold"] = [3.0] * 8
    record["scores"].update(spearman=None, pearson=None, spearman_ci95=None, undefined="every gold score is equal")
    for entry in record["subset_scores"].values():
        entry.update(spearman=None, pearson=None, undefined="every gold score is equal")


def test_a_sealed_record_passes_and_undefined_scores_are_null():
    assert problems(seal(GOOD)) is None
    undefined = seal(edited(_constant_gold))
    assert problems(undefined) is None
    assert seal(GOOD)["checksum"] == checksum(GOOD)


def test_an_undefined_score_must_stay_undefined_when_recomputed():
    """A null score is evidence too: numbers put into an undefined record's place, sealed, are refused."""
    record = edited(_constant_gold)
    record["scores"].update(spearman=80.0, pearson=80.0, spearman_ci95=[70.0, 90.0], undefined=None)
    assert "its Spearman is recorded as 80.0, but its own pairs give undefined" in problems(seal(record))


def test_a_zero_vector_count_is_held_to_the_zero_similarities():
    record = edited(lambda r: None)
    record["pairs"]["similarity"][0] = 0.0  # a zero vector's cosine is 0: then one may be counted
    rank_a = stats.spearmanr(record["pairs"]["similarity"][:4], GOLD[:4]).statistic
    r_a = stats.pearsonr(record["pairs"]["similarity"][:4], GOLD[:4]).statistic
    record["subset_scores"]["a"].update(spearman=100 * rank_a, pearson=100 * r_a)
    record["scores"].update(spearman=float(np.mean([100 * rank_a, SUBSETS["b"]["spearman"]])),
                            pearson=float(np.mean([100 * r_a, SUBSETS["b"]["pearson"]])),
                            spearman_ci95=None, bootstrap_rounds=0, n_zero_vectors=1)
    assert problems(seal(record)) is None
    record["scores"]["n_zero_vectors"] = 2
    assert "scores.n_zero_vectors 2, but 1 of its similarities are 0" in problems(seal(record))
