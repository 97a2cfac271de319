"""The report page's builders, checked without a browser: the HTML is parsed and its classes, colours
and text compared with what the inputs say; the plots are inspected as matplotlib figures (where
each title, legend and colour is) before they are saved. tests/test_report.py checks the same page
in Chromium."""

from __future__ import annotations

import csv
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from harness.core.hub import first_line
from harness.runner.history import moves
from harness.runner.page import html as page
from harness.runner.tables import plots
from harness.runner.tables.frames import GROUP_KEYS


class Cells(HTMLParser):
    """Every ``td`` of a fragment as (class, text) by row, every ``li``'s text, every ``code``'s text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, str]]] = []
        self.items: list[str] = []
        self.codes: list[str] = []
        self._open: list[tuple[str, str, list[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "li", "code"):
            self._open.append((tag, dict(attrs).get("class") or "", []))

    def handle_data(self, data: str) -> None:
        for _, _, parts in self._open:
            parts.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "li", "code") and self._open and self._open[-1][0] == tag:
            _, cls, parts = self._open.pop()
            text = "".join(parts).strip()
            if tag == "td":
                self.rows[-1].append((set(cls.split()), text))  # type: ignore[arg-type]
            else:
                (self.items if tag == "li" else self.codes).append(text)


@pytest.mark.parametrize("p, shown", [(0.0, "< 0.001"), (0.00049, "< 0.001"), (0.001, "0.001"), (0.0456, "0.046"),
                                      (0.5, "0.500"), (float("nan"), "—"), ("", "—")])
def test_p_values_never_read_zero(p, shown):
    assert page._p(p) == shown


def test_paired_test_deltas_are_coloured_only_where_significant():
    group = {k: "x" for k in GROUP_KEYS}
    rows = [  # (delta, p): the colour each must get, decided here by hand
        (2.5, 0.01, "pos"), (3.0, 0.20, "ns"), (-1.2, 0.0001, "neg"), (-4.0, 0.051, "ns"), (1.0, 0.05, "ns")]
    significance = [{"task": "STS-B", "method_a": f"a{i}", "method_b": "b", "delta": d, "ci_low": d - 1,
                     "ci_high": d + 1, "p_value": p, "test": "paired bootstrap", **group}
                    for i, (d, p, _) in enumerate(rows)]
    parsed = Cells(page._significance(significance, group))
    body = [r for r in parsed.rows if r]
    assert len(body) == len(rows)
    for cells, (delta, p, colour) in zip(body, rows):
        delta_cell, p_cell = cells[3], cells[6]
        assert delta_cell[1] == f"{delta:.2f}"
        assert colour in delta_cell[0] and not ({"pos", "neg", "ns"} - {colour}) & delta_cell[0]
        assert p_cell[1] == ("< 0.001" if p < 0.001 else f"{p:.3f}")
    assert "0.000" not in "".join(text for row in body for _, text in row)


def write_paper_csv(path: Path, lines: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(page.PAPER_COLUMNS))
        writer.writeheader()
        writer.writerows(lines)


def paper_line(model: str, task: str, published: float, measured: float | None, status: str) -> dict[str, Any]:
    return {"paper": "bert-whitening", "table": "T1", "model": model, "setting": "target", "task": task,
            "published": f"{published:.4f}", "measured": "" if measured is None else f"{measured:.4f}",
            "delta": "" if measured is None else f"{measured - published:.4f}", "status": status}


def test_paper_deltas_say_when_the_model_differs_and_rows_not_run_are_one_line_per_reason(tmp_path):
    hub = "backbone 'x' is not a local folder; download it and pass its folder with --backbone DIR"
    write_paper_csv(tmp_path / "paper-bert-whitening.csv", [
        paper_line("BERT-base", "STS12", 60.0, 61.5, "ran"),
        paper_line("BERT-base", "STS-B", 59.04, 81.55, "ran; model differs: minilm (paper: bert-base-uncased)"),
        paper_line("BERT-base", "STS13", 61.0, None, "not run: task not selected (--tasks)"),
        paper_line("BERT-base", "STS-B", 70.0, None, "not run: task not selected (--tasks)"),
        paper_line("BERT-base", "SICK-R", 63.0, None, "not run: task not selected (--tasks)"),
        paper_line("SBERT", "STS12", 69.0, None, f"not run: {hub}"),
        paper_line("SBERT", "STS13", 79.0, None, f"not run: {hub}"),
    ])
    parsed = Cells(page.papers(tmp_path))
    body = [r for r in parsed.rows if r]
    assert len(body) == 2  # the rows that ran; the five others are two lines
    delta = {row[4][1]: row[7] for row in body}
    assert delta["STS12"] == ({"num", "pos"}, "+1.50")
    classes, text = delta["STS-B"]
    assert "differs" in classes and not {"pos", "neg"} & classes and text == "+22.51 model differs"
    assert len(parsed.items) == 2
    tasks, hub_line = parsed.items
    assert tasks.startswith("3 not run") and "STS13, STS-B, SICK-R" in tasks
    assert hub_line.startswith("2 not run") and hub in hub_line  # the reason in full, its fix included
    # The commands keep the run's model; the tasks left out are named as --tasks takes them.
    assert parsed.codes == ["python run_bench.py --paper bert-whitening --backbone minilm --tasks sts13 stsb sickr",
                            "python run_bench.py --paper bert-whitening --backbone minilm"]


def test_the_paper_runner_writes_the_words_the_page_reads():
    """The page finds "model differs" and "not run:" in a row's status; the paper runner writes them
    from the same constants, so a rewording cannot split the two."""
    from harness.runner.papers import run as paper_run
    from harness.runner.papers.data import load_paper
    from harness.runner.settings.config import BenchConfig

    cfg = BenchConfig(backbone="minilm", explicit=frozenset({"backbone"}))
    plans = paper_run.resolve(load_paper("bert-whitening"), cfg)
    assert any(d.startswith(f"{page.MODEL_DIFFERS}: minilm") for d in plans[0].departures)
    assert page.NOT_RUN == "not run:" and paper_run.NOT_RUN is page.NOT_RUN


def test_error_lines_keep_whole_sentences():
    hub = ("Cannot find an appropriate cached snapshot folder for the specified revision on the local disk and "
           "outgoing traffic has been disabled. To enable repo look-ups and downloads online, set HF_HUB_OFFLINE=0.")
    assert first_line(RuntimeError(hub), 160) == hub[:hub.index(".") + 1]
    assert first_line(RuntimeError(hub), 500) == hub
    one = "a single sentence without an end " * 10
    assert first_line(RuntimeError(one), 50) == one.strip()  # longer than the limit, but not cut
    assert first_line(RuntimeError("first. second\nthird"), 8) == "first."


def long_row(aggregation: str, method: str, task: str, score: float) -> dict[str, Any]:
    group = {"aggregation": aggregation, "source": "senteval", "dtype": "fp32", "max_length": "128",
             "first_last_layers": "0,-1"}
    return {**group, "method": method, "backbone": "/models/tiny-bert", "kind": "embedding", "fit_set": "",
            "task": task, "spearman": score, "ci_low": score - 2, "ci_high": score + 2}


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions save, kept open for inspection (nothing is written)."""
    figures: list = []

    def keep(fig, path, input_key=None):
        fig.canvas.draw()  # lays out (constrained layout runs at draw) so positions can be read
        figures.append(fig)
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    yield figures
    for fig in figures:
        plots._pyplot().close(fig)


def test_the_bar_chart_draws_every_protocol_group_under_its_protocol_line(drawn, tmp_path):
    from harness.runner.tables.frames import protocol_line

    rows = [long_row("mean", "avg", "STS-B", 70.0), long_row("mean", "whitening", "STS-B", 72.0),
            long_row("mean", "avg", "STS12", 60.0),
            long_row("wmean", "avg", "STS-B", 71.0), long_row("wmean", "first-last", "SICK-R", 65.0)]
    plots.leaderboard_png(rows, tmp_path / "leaderboard.png")
    (fig,) = drawn
    titles = [sub._suptitle.get_text().replace("\n", " · ") for sub in fig.subfigs]
    expected = [protocol_line({k: row[k] for k in GROUP_KEYS}) for row in (rows[0], rows[3])]
    assert titles == [f"Protocol: {line}" for line in expected]
    panels = [[ax.get_title() for ax in sub.axes] for sub in fig.subfigs]
    assert panels == [["STS12", "STS-B"], ["STS-B", "SICK-R"]]  # each group its own tasks
    bars = [[t.get_text() for t in sub.axes[0].get_yticklabels()] for sub in fig.subfigs]
    assert bars == [["avg · tiny-bert", "whitening · tiny-bert"], ["first-last · tiny-bert", "avg · tiny-bert"]]


def test_bar_labels_wrap_but_are_never_cut():
    row = {"method": "whitening[k=256,shrinkage=0.1]", "backbone": "/m/sentence-transformers-all-MiniLM-L6-v2",
           "fit_set": "target-pairs-with-a-long-name"}
    label = plots.bar_label(row)
    assert "\n" in label and "..." not in label and label.replace("\n", " ") == \
        "whitening[k=256,shrinkage=0.1] · sentence-transformers-all-MiniLM-L6-v2 · fit=target-pairs-with-a-long-name"


def history_series(aggregations: tuple[str, ...], methods: tuple[str, ...]) -> list[moves.Series]:
    out = []
    for aggregation in aggregations:
        for i, method in enumerate(methods):
            key = {"aggregation": aggregation, "source": "senteval", "dtype": "fp32", "max_length": "128",
                   "first_last_layers": "0,-1", "method": method, "backbone": "/m/tiny", "kind": "embedding",
                   "fit_set": "", "task": "STS-B", "fingerprint": "f"}
            points = [{"commit": f"{c:040x}", "date": f"2026-01-0{c}T00:00", "spearman": 70.0 + i + c,
                       "ci95": [68.0 + i + c, 72.0 + i + c]} for c in (1, 2, 3)]
            out.append(moves.Series(key, points))
    return out


def test_history_labels_name_the_protocol_only_when_groups_differ():
    one = moves.series_labels(history_series(("mean",), ("avg", "whitening")))
    assert one == ["avg · tiny", "whitening · tiny"]
    two = moves.series_labels(history_series(("mean", "wmean"), ("avg",)))
    assert two == ["avg · tiny · aggregation=mean", "avg · tiny · aggregation=wmean"]


def test_history_legend_sits_off_the_data_with_one_colour_per_series(drawn, tmp_path):
    import matplotlib.colors as mcolors

    series = history_series(("mean", "wmean"), ("avg", "whitening[k=256] · fit=target-pairs-of-every-split",
                                               "first-last", "cls", "random", "flow"))
    commits = [moves.commit_label(p) for p in series[0].points]
    moves._draw_history(series, commits, [], tmp_path / "history.png", "k")
    (fig,) = drawn
    (ax,) = fig.axes
    assert ax.get_legend() is None and len(fig.legends) == 1  # one legend, the figure's, not the panel's
    legend = fig.legends[0]
    renderer = fig.canvas.get_renderer()
    box, panel = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert box.y1 <= panel.y0  # below the panel: it covers no point, the latest included
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y0 >= 0  # and wholly on the figure, no label cut
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == moves.series_labels(series) and len(set(labels)) == 12
    colours = {c.get_label(): mcolors.to_hex(c.lines[0].get_color()) for c in ax.containers}
    assert sorted(colours) == sorted(labels) and len(set(colours.values())) == 12  # twelve series, twelve colours
    handles = {t.get_text(): mcolors.to_hex(mcolors.to_rgba_array(h.get_color())[0])
               for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert handles == colours  # the legend's swatch is the series' own colour
