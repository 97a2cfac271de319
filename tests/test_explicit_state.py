"""No hidden process-wide state: two ``harness.evaluate`` calls in one process, each with its own
cache and output folder, share nothing — not the encoder method the first registered, not a hub
failure it remembered, not the file its code digests were memoised in, not its bootstrap resamples.
Each piece of state travels in an object the run owns (``RunContext``: ``registry``, ``artifacts``
with its ``CodeDigests``, ``resamples``, ``hub_failures``)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import harness
from harness.core import bootstrap
from harness.core.authenticity import SECRET_ENV
from harness.core.errors import UserError
from harness.core.hub import once


class HubAsking:
    """Bag-of-hashed-words vectors; on each encode it asks a hub call that always fails, as a model
    download would, and counts how often the call was really made (a remembered failure is not)."""

    def __init__(self, attempts: list[str]) -> None:
        self.attempts = attempts

    def encode(self, texts):
        def fetch() -> None:
            self.attempts.append("tried")
            raise OSError("404: no such repository")

        with pytest.raises(UserError, match="could not fetch"):
            once(("test", "missing-model"), fetch, lambda err: f"could not fetch ({err})")
        with pytest.raises(UserError, match="could not fetch"):  # the same run: remembered, not tried
            once(("test", "missing-model"), fetch, lambda err: f"could not fetch ({err})")
        out = np.zeros((len(texts), 16))
        for i, text in enumerate(texts):
            for word in text.split():
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % 16] += 1.0
        return out


def snapshot(folder):
    """Every file under ``folder`` with its bytes and modification time."""
    return {p.relative_to(folder): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_two_evaluate_calls_share_no_state(tiny_bert, senteval_root, tmp_path, monkeypatch):
    from methods import PROCESS, REGISTERED, get_method

    monkeypatch.delenv(SECRET_ENV, raising=False)  # the code-digest memo is kept on disk only without one
    resampled: list[int] = []
    real = bootstrap._resampled_scores
    monkeypatch.setattr(bootstrap, "_resampled_scores",
                        lambda *args, **kwargs: resampled.append(args[4]) or real(*args, **kwargs))
    attempts: list[str] = []

    def evaluate(k: int):
        return harness.evaluate(HubAsking(attempts), tasks="stsb", name=f"words-{k}", backbone=str(tiny_bert),
                                source="senteval", senteval_dir=str(senteval_root), cache_dir=str(tmp_path / f"c{k}"),
                                output_dir=tmp_path / f"o{k}", progress=False, plots=False, bootstrap=50)

    first = evaluate(1)
    assert attempts == ["tried"] and resampled  # one hub attempt; the interval was resampled
    after_first = len(resampled)
    memo_1 = tmp_path / "c1" / "code-digests.json"
    assert memo_1.is_file()
    cache_1 = snapshot(tmp_path / "c1")
    with pytest.raises(UserError, match="unknown method 'words-1'"):  # registered for its run only
        get_method("words-1")
    assert "words-1" not in REGISTERED and "words-1" not in PROCESS.plugins()

    second = evaluate(2)
    assert attempts == ["tried", "tried"]  # the first run's failure was not remembered for the second
    assert len(resampled) == 2 * after_first  # its resamples were computed again, not served from the first's
    assert (tmp_path / "c2" / "code-digests.json").is_file()  # its own memo, in its own cache
    assert snapshot(tmp_path / "c1") == cache_1  # nothing in the first cache was written or touched
    assert [r["method"]["label"] for r in second.records] == ["words-2"]
    assert first.records[0]["scores"]["spearman"] == second.records[0]["scores"]["spearman"]
    assert "words-2" not in REGISTERED
    with pytest.raises(UserError):  # outside a run, a failure is remembered by nobody: tried again
        once(("test", "missing-model"), lambda: attempts.append("tried") or 1 / 0, lambda err: "no")
    assert len(attempts) == 3
