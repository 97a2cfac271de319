"""The result record's schema (harness.runner.records.schema): what a reader accepts."""

from __future__ import annotations

import copy

import pytest

from harness.runner.records.schema import RESULT_SCHEMA_VERSION, checksum, problems, seal

GOOD = {
    "schema_version": RESULT_SCHEMA_VERSION, "harness": {"name": "sts-bench", "version": "0", "git_sha": None},
    "created": "2026-11-30T00:00:00+00:00",
    "method": {"name": "avg", "label": "avg", "kind": "embedding", "summary": "", "spec": {}},
    "backbone": None,
    "task": {"name": "stsb", "title": "STS-B", "source": "packaged", "split": "test", "origin": "x",
             "fingerprint": "f", "n_pairs": 3, "subsets": {}, "mteb_name": None},
    "protocol": {}, "fit": None,
    "scores": {"spearman": 50.0, "pearson": 40.0, "spearman_ci95": [1.0, 2.0], "bootstrap_rounds": 10,
               "bootstrap_seed": 1, "n_zero_vectors": 0, "undefined": None},
    "subset_scores": {}, "pairs": {"similarity": [0.1, 0.2, 0.3], "gold": [1.0, 2.0, 3.0], "subset": None},
    "env": {}, "timings": {"fit_s": 0.0},
}


def edited(change):
    record = copy.deepcopy(GOOD)
    change(record)
    return record


@pytest.mark.parametrize(("case", "record", "problem"), [
    ("a float for an int", seal(edited(lambda r: r["task"].update(n_pairs=3.0))), "n_pairs is not an integer"),
    ("a bool for an int", seal(edited(lambda r: r["task"].update(n_pairs=True))), "n_pairs is not an integer"),
    ("a string score", seal(edited(lambda r: r["scores"].update(spearman="50"))), "scores.spearman"),
    ("a key missing", seal(edited(lambda r: r["scores"].pop("undefined"))), "scores lacks undefined"),
    ("pairs of another length", seal(edited(lambda r: r["pairs"]["gold"].pop())), "pairs do not match n_pairs"),
    ("no checksum", edited(lambda r: None), "no checksum"),
    ("another schema", seal(edited(lambda r: r.update(schema_version=1))), "schema 1"),
    ("an edit after sealing", edited(lambda r: r.update(seal(r), created="2027")), "does not match its checksum"),
    ("not an object", [1, 2], "not a JSON object"),
])
def test_a_record_that_is_not_one_says_why(case, record, problem):
    assert problem in problems(record)


def test_a_sealed_record_passes_and_undefined_scores_are_null():
    assert problems(seal(GOOD)) is None
    undefined = seal(edited(lambda r: r["scores"].update(spearman=None, pearson=None, spearman_ci95=None,
                                                           undefined="every gold score is equal")))
    assert problems(undefined) is None
    assert seal(GOOD)["checksum"] == checksum(GOOD)
