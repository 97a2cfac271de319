"""``harness.evaluate``: an encoder object from Python, scored through the run itself, checked against
an independent computation (the fixture's files read here, cosines and Spearman by numpy/scipy)."""

from __future__ import annotations

import csv
import hashlib
import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

import harness
from harness.core.errors import UserError


class HashedWords:
    """A bag of hashed words: deterministic, no model; counts its calls and the sentences it saw."""

    def __init__(self, dims: int = 32) -> None:
        self.dims, self.calls, self.seen = dims, 0, []

    def encode(self, texts):
        self.calls += 1
        self.seen.append(list(texts))
        out = np.zeros((len(texts), self.dims))
        for i, text in enumerate(texts):
            for word in text.split():
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dims] += 1.0
        return out


def stsb_test_pairs(senteval_root):
    """STS-B test pairs straight from the fixture's CSV (genre, file, split, id, gold, s1, s2)."""
    with (senteval_root / "STS" / "STSBenchmark" / "sts-test.csv").open(encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r[5] for r in rows], [r[6] for r in rows], np.array([float(r[4]) for r in rows])


def settings(tiny_bert, senteval_root, tmp_path, **extra):
    return {"backbone": str(tiny_bert), "source": "senteval", "senteval_dir": str(senteval_root),
            "cache_dir": str(tmp_path / "cache"), "progress": False, "plots": False, **extra}


def test_spearman_equals_scipy_on_independent_cosines(tiny_bert, senteval_root, tmp_path):
    s1, s2, gold = stsb_test_pairs(senteval_root)
    enc = HashedWords()
    outcome = harness.evaluate(enc, tasks="stsb", output_dir=tmp_path / "out", name="words",
                               **settings(tiny_bert, senteval_root, tmp_path))
    a, b = HashedWords().encode(s1), HashedWords().encode(s2)
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    (record,) = outcome.records
    assert record["method"]["label"] == "words" and record["method"]["spec"]["backbone"] == "none"
    assert record["scores"]["spearman"] == pytest.approx(100 * spearmanr(cosine, gold).statistic, abs=1e-6)
    assert record["scores"]["pearson"] == pytest.approx(100 * pearsonr(cosine, gold).statistic, abs=1e-4)
    row = outcome.scores.set_index("method").loc["words"]
    assert row["spearman"] == record["scores"]["spearman"] and row["n_pairs"] == len(gold)
    assert row["ci_low"] < row["spearman"] < row["ci_high"] and row["task"] == "STS-B"
    # One call for the run, with each sentence once, in first-seen order (s1 then s2).
    assert enc.calls == 1 and enc.seen[0] == list(dict.fromkeys(s1 + s2))
    assert outcome.sentences_forwarded == len(enc.seen[0])
    assert (tmp_path / "out" / "leaderboard.csv").is_file() and all(p.exists() for p in outcome.paths)
    assert not (tmp_path / "results").exists()
    from methods import REGISTERED

    assert "words" not in REGISTERED  # registered for the call only: no reference to the encoder is kept


def test_beside_a_builtin_method_the_leaderboard_compares_them(tiny_bert, senteval_root, tmp_path):
    outcome = harness.evaluate(HashedWords(), tasks=["stsb", "sts12"], output_dir=tmp_path / "out", name="words",
                               methods=["avg"], **settings(tiny_bert, senteval_root, tmp_path))
    scores = outcome.scores
    assert sorted(zip(scores["method"], scores["task"])) == [("avg", "STS-B"), ("avg", "STS12"),
                                                             ("words", "STS-B"), ("words", "STS12")]
    spearman = {(r["method"]["label"], r["task"]["title"]): r["scores"]["spearman"] for r in outcome.records}
    with (tmp_path / "out" / "significance.csv").open(encoding="utf-8") as f:
        tests = list(csv.DictReader(f))
    for task in ("STS-B", "STS12"):
        rows = [t for t in tests if t["task"] == task]
        assert {frozenset((t["method_a"], t["method_b"])) for t in rows} == {frozenset(("words", "avg"))}
        assert len(rows) == 2  # paired bootstrap and Williams' t
        a, b = rows[0]["method_a"], rows[0]["method_b"]
        assert float(rows[0]["delta"]) == pytest.approx(spearman[a, task] - spearman[b, task], abs=1e-4)
    board = (tmp_path / "out" / "leaderboard.csv").read_text(encoding="utf-8")
    assert "words" in board and "avg" in board and "★" in (tmp_path / "out" / "leaderboard.md").read_text()


def test_a_cache_key_spares_the_second_encode_and_a_new_key_encodes_again(tiny_bert, senteval_root, tmp_path):
    common = settings(tiny_bert, senteval_root, tmp_path)
    first, again, renamed, uncached = HashedWords(), HashedWords(), HashedWords(), HashedWords()
    cold = harness.evaluate(first, output_dir=tmp_path / "a", name="words", cache_key="v1", **common)
    warm = harness.evaluate(again, output_dir=tmp_path / "b", name="words", cache_key="v1", **common)
    assert first.calls == 1 and again.calls == 0 and warm.sentences_forwarded == 0
    assert warm.records[0]["scores"] == cold.records[0]["scores"]
    harness.evaluate(renamed, output_dir=tmp_path / "c", name="words", cache_key="v2", **common)
    assert renamed.calls == 1
    for _ in range(2):  # no cache_key: nothing kept between calls
        harness.evaluate(uncached, output_dir=tmp_path / "d", name="words", **common)
    assert uncached.calls == 2


class Returns:
    def __init__(self, make) -> None:
        self.make = make

    def encode(self, texts):
        return self.make(len(texts))


@pytest.mark.parametrize(("make", "says"), [
    (lambda n: np.ones(n), r"returned shape \(\d+,\)"),
    (lambda n: np.ones((n, 4, 2)), r"returned shape \(\d+, 4, 2\)"),
    (lambda n: np.ones((n, 0)), r"returned shape \(\d+, 0\)"),
    (lambda n: np.ones((n - 1, 4)), r"returned \d+ rows for \d+ sentences"),
    (lambda n: np.where(np.arange(n)[:, None] == 3, np.nan, 1.0) * np.ones((n, 4)),
     r"NaN or inf .* in 1 of \d+ rows, first row 3"),
    (lambda n: np.full((n, 4), np.inf), "NaN or inf"),
    (lambda n: np.full((n, 4), 1e300), "beyond float32"),
    (lambda n: [["a", "b"]] * n, "not numbers"),
    (lambda n: [[1.0, 2.0]] * (n - 1) + [[1.0]], "not an array"),
    (lambda n: None, "not numbers"),
])
def test_a_bad_encoder_output_is_one_line_naming_the_encoder(make, says, tiny_bert, senteval_root, tmp_path):
    with pytest.raises(UserError, match=says) as err:
        harness.evaluate(Returns(make), output_dir=tmp_path / "out", name="broken",
                         **settings(tiny_bert, senteval_root, tmp_path))
    message = str(err.value)
    assert message.startswith("encoder 'broken' (test_evaluate.Returns)") and "\n" not in message
    assert not list((tmp_path / "out").glob("runs/*"))  # nothing recorded


def test_bad_arguments_are_one_line_errors(tiny_bert, senteval_root, tmp_path):
    common = settings(tiny_bert, senteval_root, tmp_path)
    cases = [({"encoder": object()}, "has no encode method"),
             ({"name": "avg"}, "built-in method's"),
             ({"name": "two words"}, "use letters, digits"),
             ({"cache_key": ""}, "cache_key ''"),
             ({"output_dir": ""}, "output_dir is required"),
             ({"sorce": "senteval"}, "unknown setting 'sorce'.*did you mean 'source'"),
             ({"methods": ["avgg"]}, "unknown method 'avgg'")]
    for given, says in cases:
        args = {"encoder": HashedWords(), "output_dir": tmp_path / "out", "name": "words", **common, **given}
        with pytest.raises(UserError, match=says):
            harness.evaluate(args.pop("encoder"), **args)


def test_the_default_name_is_the_class_in_kebab_case_and_tensors_are_accepted(tiny_bert, senteval_root, tmp_path):
    torch = pytest.importorskip("torch")

    class TorchWords(HashedWords):
        def encode(self, texts):
            return torch.tensor(super().encode(texts), dtype=torch.float64)

    common = settings(tiny_bert, senteval_root, tmp_path)
    outcome = harness.evaluate(TorchWords(), output_dir=tmp_path / "out", **common)
    (record,) = outcome.records
    assert record["method"]["name"] == "torch-words"
    assert not math.isnan(record["scores"]["spearman"])
