"""The report page's quality-cost frontier (issue 32): a section ``#frontier`` (in the page's nav)
only when the folder holds a compressed vector setting, with plots/frontier.png embedded and, per
protocol group and task, the rows by bytes per vector with their Pareto mark, Spearman and interval
and verdict against the full vector.

The page's numbers are checked against the records and significance.csv as written, with the Pareto
set computed here by another algorithm than harness.runner.tables.frontier.pareto; the browser test
compares what Chromium shows with frontier.csv; a method label carrying markup is shown as text."""

from __future__ import annotations

import base64
import csv
import json
import math
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from browser import Browser
from test_page import ATTRIBUTES, SCRIPT, TAGS, Parts
from test_report import need_chromium

import harness
from harness.runner.settings.config import BenchConfig

PARETO = "●"


class Section(HTMLParser):
    """The ``section#frontier`` of a page: its h3 headings, its tables (rows of cells, each cell's
    class, data-sort and text), its images' ``src``; ``found`` whether the section is there."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.found = False
        self.headings: list[str] = []
        self.tables: list[list[list[dict[str, str]]]] = []
        self.images: list[str] = []
        self._depth = 0  # sections open inside #frontier, itself included
        self._text: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "section" and (self._depth or values.get("id") == "frontier"):
            self.found = True
            self._depth += 1
        if not self._depth:
            return
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag == "td":
            self.tables[-1][-1].append({"class": values.get("class", ""), "sort": values.get("data-sort", "")})
            self._text = []
        elif tag == "h3":
            self._text = []
        elif tag == "img":
            self.images.append(values["src"])

    def handle_endtag(self, tag: str) -> None:
        if not self._depth:
            return
        if tag == "section":
            self._depth -= 1
        elif tag == "td" and self._text is not None:
            self.tables[-1][-1][-1]["text"] = "".join(self._text)
            self._text = None
        elif tag == "h3" and self._text is not None:
            self.headings.append("".join(self._text))
            self._text = None

    def handle_data(self, data: str) -> None:
        if self._depth and self._text is not None:
            self._text.append(data)


def body_rows(table: list[list[dict[str, str]]]) -> list[list[dict[str, str]]]:
    return [row for row in table if row]  # the header row has th cells only


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((out / "runs").glob("*.json"))]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def bytes_of(vector: dict[str, Any]) -> int:
    """One vector's bytes, from its dimensions and precision (not from the record's own count)."""
    dims = vector["full_dims"] if vector["dims"] == "full" else int(vector["dims"])
    return {"fp32": 4 * dims, "int8": dims, "uint8": dims}.get(vector["precision"], math.ceil(dims / 8))


def on_front(points: list[tuple[int, float]]) -> list[bool]:
    """The Pareto set by a sweep, not by pairs: a point is on it when it scores above every point with
    fewer bytes and at least as high as every point with as many."""
    below: dict[int, float] = {}  # bytes -> best score among points with strictly fewer bytes
    best = -math.inf
    for size in sorted({b for b, _ in points}):
        below[size] = best
        best = max(best, max(s for b, s in points if b == size))
    top = {size: max(s for b, s in points if b == size) for size in below}
    return [s > below[b] and s >= top[b] for b, s in points]


def words(delta: float, p: float) -> str:
    """The verdict the brief asks for, e.g. "not significantly below full (-0.49, p=0.5)"."""
    if p >= 0.05:
        said = "not significantly below full" if delta <= 0 else "not significantly above full"
    else:
        said = "significantly below full" if delta < 0 else "significantly above full"
    return f"{said} ({delta:+.2f}, p={p:.2g})"


def expected_tables(out: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Per (aggregation, task): every record's row as the section must show it, from runs/ and
    significance.csv alone, in the page's order (bytes, then higher Spearman)."""
    recs = [r for r in records(out) if r.get("vector")]
    tests = {(t["aggregation"], t["task"], frozenset((t["method_a"], t["method_b"]))): float(t["p_value"])
             for t in read_csv(out / "significance.csv") if t["test"].startswith("paired bootstrap")}
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in recs:
        vector = rec["vector"]
        full = vector["dims"] == "full" and vector["precision"] == "fp32"
        cells.setdefault((rec["protocol"]["aggregation"], rec["task"]["title"]), []).append(
            {"rec": rec, "bytes": bytes_of(vector), "spearman": rec["scores"]["spearman"], "full": full})
    found = {}
    for (aggregation, task), rows in cells.items():
        for row, front in zip(rows, on_front([(r["bytes"], r["spearman"]) for r in rows])):
            rec = row["rec"]
            reference = next(r for r in rows if r["full"] and r["rec"]["method"]["spec"] == rec["method"]["spec"])
            label, full_label = rec["method"]["label"], reference["rec"]["method"]["label"]
            low, high = rec["scores"]["spearman_ci95"]
            row.update(label=label, pareto=front, ci=f"{low:.2f} – {high:.2f}", verdict="the full vector")
            if not row["full"]:
                p = tests[(aggregation, task, frozenset((label, full_label)))]
                row["verdict"] = words(row["spearman"] - reference["spearman"], p)
        found[(aggregation, task)] = sorted(rows, key=lambda r: (r["bytes"], -r["spearman"]))
    return found


@pytest.fixture(scope="module")
def folder(tmp_path_factory, senteval_root, tiny_bert) -> Path:
    """Two protocol groups with compressed settings: avg and whitening on STS-B and STS12 in
    16 dims or all 32, fp32, int8 or binary (aggregation all); avg in 8 dims or all, fp32 or binary
    (aggregation wmean)."""
    out = tmp_path_factory.mktemp("frontier") / "out"
    base = dict(methods=("avg", "whitening"), tasks=("sts12", "stsb"), backbone=str(tiny_bert), source="senteval",
                senteval_dir=str(senteval_root), cache_dir=str(out.parent / "cache"), output_dir=str(out),
                progress=False, bootstrap=200, threads=1, dims=("16", "full"), precision=("fp32", "int8", "binary"))
    harness.run(BenchConfig(**base))
    harness.run(BenchConfig(**{**base, "methods": ("avg",), "aggregation": "wmean", "dims": ("8", "full"),
                               "precision": ("fp32", "binary")}))
    return out


def test_the_section_shows_each_tasks_frontier_as_the_records_and_significance_csv_give_it(folder, monkeypatch):
    from harness.core import significance
    from harness.runner.page.build import Page
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.records.store import load_results
    from harness.runner.tables import comparisons

    def no_resampling(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the page resampled: it must read significance.csv")

    # The page step rebuilds index.html from the files alone: no paired test is recomputed.
    for module, name in ((comparisons, "compare"), (significance, "paired_bootstrap"), (significance, "scored")):
        monkeypatch.setattr(module, name, no_resampling)
    cfg = BenchConfig(output_dir=str(folder), bootstrap=200, progress=False)
    Page().write(ReportInputs(cfg, folder, [], load_results(folder / "runs")))
    text = (folder / "index.html").read_text(encoding="utf-8")
    section = Section(text)
    assert section.found and '<a href="#frontier">' in text

    expected = expected_tables(folder)
    assert len(expected) == 4 and len(section.tables) == len(section.headings) == 4  # 2 groups x 2 tasks
    for heading, table in zip(section.headings, section.tables):
        task, protocol = heading.split(" · ", 1)
        rows = expected[(protocol.removeprefix("aggregation=").split(" ")[0], task)]
        shown = body_rows(table)
        assert [c[1]["text"] for c in shown] == [r["label"] for r in rows], heading
        for cells, row in zip(shown, rows):
            pareto, _, _, _, marks, size, spearman, verdict = cells
            assert pareto["text"] == (PARETO if row["pareto"] else ""), (heading, row["label"])
            protocol = row["rec"]["protocol"]
            assert marks["text"] == (("†" if protocol["transductive"] else "") + ("‡" if protocol["labelled_training"]
                                     else "") + ("§" if protocol["selected_on"] else ""))
            assert size["text"] == str(row["bytes"]) and size["sort"] == str(row["bytes"])
            assert spearman["text"] == f"{row['spearman']:.2f}{row['ci']}"
            assert verdict["text"] == row["verdict"], (heading, row["label"])
            significant = row["verdict"].startswith("significantly")
            assert ("neg" in verdict["class"] or "pos" in verdict["class"]) == significant

    fronts = [r["pareto"] for rows in expected.values() for r in rows]
    assert any(fronts) and not all(fronts)  # rows on the Pareto set and rows off it were both checked

    # The same numbers as frontier.csv, row for row.
    csv_rows = read_csv(folder / "frontier.csv")
    assert len(csv_rows) == sum(len(rows) for rows in expected.values())
    shown = {(h.split(" · ")[0], h.split("aggregation=")[1].split(" ")[0], c[1]["text"]): c
             for h, t in zip(section.headings, section.tables) for c in body_rows(t)}
    for row in csv_rows:
        cells = shown[(row["task"], row["aggregation"], row["method"])]
        assert cells[5]["text"] == row["bytes_per_vector"] and cells[0]["text"] == (PARETO if row["pareto"] == "True"
                                                                                    else "")
        assert cells[6]["text"].startswith(f"{float(row['spearman']):.2f}")

    # plots/frontier.png is embedded in the section, and only there.
    png = (folder / "plots" / "frontier.png").read_bytes()
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    assert section.images == [uri] and text.count(uri) == 1


def test_no_section_without_a_compressed_setting(folder, tiny_bert, senteval_root, tmp_path):
    from harness.runner.page.frontier_tables import frontier_section
    from harness.runner.tables.frames import long_rows

    out = tmp_path / "out"
    harness.run(BenchConfig(methods=("avg", "whitening"), tasks=("stsb",), backbone=str(tiny_bert), source="senteval",
                            senteval_dir=str(senteval_root), cache_dir=str(folder.parent / "cache"),
                            output_dir=str(out), progress=False, bootstrap=50, threads=1))
    text = (out / "index.html").read_text(encoding="utf-8")
    assert not Section(text).found and "#frontier" not in text and "Quality–cost frontier" not in text
    assert not (out / "frontier.csv").exists()
    long = long_rows(records(out))[0]
    assert long and frontier_section(long, [], None) is None
    # The same records with a compressed setting among them do get one.
    assert frontier_section(long_rows(records(folder))[0], [], None) is not None


def test_chromium_shows_the_frontier_as_frontier_csv_has_it(folder, tmp_path):
    need_chromium()
    csv_rows = read_csv(folder / "frontier.csv")
    with Browser(tmp_path / "profile") as browser:
        browser.open((folder / "index.html").as_uri())
        assert browser.errors == []
        assert browser.evaluate("document.querySelector('nav a[href=\"#frontier\"]') !== null")
        browser.evaluate("document.querySelector('nav a[href=\"#frontier\"]').click()")
        box = browser.evaluate("(() => { const s = document.getElementById('frontier'); const r = "
                               "s.getBoundingClientRect(); return {display: getComputedStyle(s).display, "
                               "width: r.width, height: r.height, top: r.top, "
                               "heading: s.querySelector('h2').textContent}; })()")
        assert box["display"] != "none" and box["width"] > 0 and box["height"] > 0
        assert abs(box["top"]) < 5 and box["heading"] == "Quality–cost frontier"  # the nav link jumps to it
        image = browser.evaluate("(() => { const i = document.querySelector('#frontier img'); "
                                 "return {complete: i.complete, width: i.naturalWidth, height: i.naturalHeight}; })()")
        assert image["complete"] and image["width"] > 0 and image["height"] > 0
        tables = browser.evaluate(
            "Array.from(document.querySelectorAll('#frontier h3')).map(h => ({heading: h.textContent, rows: "
            "Array.from(h.nextElementSibling.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.innerText)"
            ")}))")
    assert len(tables) == len({(r["task"], r["aggregation"]) for r in csv_rows})
    for table in tables:
        task, aggregation = table["heading"].split(" · ")[0], table["heading"].split("aggregation=")[1].split(" ")[0]
        want = sorted((r for r in csv_rows if r["task"] == task and r["aggregation"] == aggregation),
                      key=lambda r: (int(r["bytes_per_vector"]), -float(r["spearman"])))
        assert [row[1] for row in table["rows"]] == [r["method"] for r in want], table["heading"]
        assert [row[5] for row in table["rows"]] == [r["bytes_per_vector"] for r in want]
        assert [row[0] for row in table["rows"]] == [PARETO if r["pareto"] == "True" else "" for r in want]
        assert [row[6].split()[0] for row in table["rows"]] == [f"{float(r['spearman']):.2f}" for r in want]


def test_a_method_label_with_markup_is_shown_as_text_in_the_frontier(senteval_root, tiny_bert, tmp_path):
    """As test_page.py's hostile page: the prompt is part of the method label, so of every row label
    of its settings."""
    out = tmp_path / "out"
    harness.run(BenchConfig(methods=("avg",), tasks=("stsb",), backbone=str(tiny_bert), source="senteval",
                            senteval_dir=str(senteval_root), cache_dir=str(tmp_path / "cache"), output_dir=str(out),
                            progress=False, bootstrap=50, threads=1, plots=False, precision=("fp32", "binary"),
                            method_params={"avg": {"prompt": SCRIPT}}))
    text = (out / "index.html").read_text(encoding="utf-8")
    parts = Parts(text)
    assert {tag for tag, _ in parts.tags} <= TAGS, {tag for tag, _ in parts.tags} - TAGS
    assert {name for _, attrs in parts.tags for name in attrs} <= ATTRIBUTES
    assert [tag for tag, _ in parts.tags].count("script") == 1  # the page's own
    assert "<script>alert" not in text and "\"'&" not in text
    section = Section(text)
    labels = [row[1]["text"] for table in section.tables for row in body_rows(table)]
    assert sorted(labels) == sorted([f"avg[prompt={SCRIPT}]", f"avg[prompt={SCRIPT}] · binary"])
    verdicts = [row[7]["text"] for table in section.tables for row in body_rows(table)]
    assert "the full vector" in verdicts and any("below full" in v or "above full" in v for v in verdicts)
