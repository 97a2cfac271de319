"""The report page, ``results/index.html``: self-contained, rebuilt from runs/, and checked in a
real headless Chromium (Debian's ``chromium``; ``.ci/run`` installs it): it loads with no console
error, shows the scores, sorts, and a screenshot is written for a human to look at."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from browser import Browser, chromium_binary
from conftest import ROOT

import harness
from harness.runner.settings.config import BenchConfig

PAPER = ("paper,table,model,setting,task,published,measured,delta,status\n"
         "BERT-whitening,Table 1,tiny,target,STS-B,71.34,70.00,-1.34,outside tolerance\n")


def need_chromium() -> None:
    if chromium_binary() is None:
        message = "Debian's chromium is not installed: apt-get install -y chromium (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def scores(out: Path) -> dict[tuple[str, str], dict]:
    found = {}
    for path in (out / "runs").glob("*.json"):
        rec = json.loads(path.read_text(encoding="utf-8"))
        found[(rec["method"]["label"], rec["task"]["title"])] = rec
    return found


@pytest.fixture(scope="module")
def page(tmp_path_factory, senteval_root, tiny_bert) -> Path:
    """Two protocol groups, a paper CSV (and a broken one), two runs of history."""
    out = tmp_path_factory.mktemp("report") / "out"
    out.mkdir()
    (out / "paper-whitening.csv").write_text(PAPER, encoding="utf-8")
    (out / "paper-broken.csv").write_text("paper,task\nx,y\n", encoding="utf-8")
    base = dict(methods=("avg", "whitening", "random"), tasks=("sts12", "stsb"), backbone=str(tiny_bert),
                source="senteval", senteval_dir=str(senteval_root), cache_dir=str(out.parent / "cache"),
                output_dir=str(out), progress=False, bootstrap=200, threads=1)
    harness.run(BenchConfig(**base))
    harness.run(BenchConfig(**{**base, "aggregation": "wmean", "methods": ("avg", "first-last")}))
    return out / "index.html"


def test_the_page_is_one_file_that_fetches_nothing(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", text, re.I)
    assert "<link" not in text and not re.search(r"<script[^>]+src", text)
    images = re.findall(r"<img [^>]*src='([^']*)'", text)
    assert images and all(src.startswith("data:image/png;base64,") for src in images)
    assert text.count("<h2>Protocol: ") == 2  # one leaderboard per protocol group
    assert "71.34" in text and "-1.34" in text and "paper-broken.csv skipped" in text


def test_chromium_loads_it_without_errors_and_shows_the_scores(page, tmp_path):
    need_chromium()
    recs = scores(page.parent)
    with Browser(tmp_path / "profile") as browser:
        browser.open(page.as_uri())
        assert browser.errors == []
        text = browser.evaluate("document.body.innerText")
        for (label, task), rec in recs.items():
            assert f"{rec['scores']['spearman']:.2f}" in text, (label, task)
        title = browser.evaluate("document.querySelector('td.score').title")
        assert "pooling" in title and "bootstrap 200 rounds" in title
        # Sort the first board by STS-B, highest first: the first row is the best STS-B score.
        column = browser.evaluate("Array.from(document.querySelector('table.board').tHead.rows[0].cells)"
                                  ".findIndex(c => c.textContent === 'STS-B')")
        browser.evaluate(f"document.querySelector('table.board').tHead.rows[0].cells[{column}].click()")
        first = browser.evaluate(f"document.querySelector('table.board').tBodies[0].rows[0].cells[{column}]"
                                 ".getAttribute('data-sort')")
        cells = browser.evaluate(f"Array.from(document.querySelector('table.board').tBodies[0].rows)"
                                 f".map(r => r.cells[{column}].getAttribute('data-sort'))")
        assert float(first) == max(float(c) for c in cells if c)
        shot = browser.screenshot(tmp_path / "report.png")
    assert shot.stat().st_size > 10_000


@pytest.mark.real
def test_the_embedded_default_in_chromium(real_cache, tmp_path):
    """The page of the embedded default (MiniLM on STS-B) shows its numbers; the screenshot also goes
    to results/plots/report-embedded-default.png for a human."""
    need_chromium()
    outcome = harness.run(BenchConfig(cache_dir=str(real_cache), output_dir=str(tmp_path), progress=False))
    avg = next(r for r in outcome.records if r["method"]["name"] == "avg")["scores"]["spearman"]
    assert avg == pytest.approx(82.03, abs=0.05)
    with Browser(tmp_path / "profile") as browser:
        browser.open((tmp_path / "index.html").as_uri())
        assert browser.errors == []
        text = browser.evaluate("document.body.innerText")
        assert f"{avg:.2f}" in text and "flow" in text and "★" in text
        shot = browser.screenshot(tmp_path / "report.png")
    keep = ROOT / "results" / "plots" / "report-embedded-default.png"
    keep.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, keep)
