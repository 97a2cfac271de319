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
from harness.runner.page.boards import paired_tests
from harness.runner.page.cells import p_text
from harness.runner.page.paper_deltas import papers
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
    assert p_text(p) == shown


def test_paired_test_deltas_are_coloured_only_where_significant():
    group = {k: "x" for k in GROUP_KEYS}
    rows = [  # (delta, p): the colour each must get, decided here by hand
        (2.5, 0.01, "pos"), (3.0, 0.20, "ns"), (-1.2, 0.0001, "neg"), (-4.0, 0.051, "ns"), (1.0, 0.05, "ns")]
    significance = [{"task": "STS-B", "method_a": f"a{i}", "method_b": "b", "delta": d, "ci_low": d - 1,
                     "ci_high": d + 1, "p_value": p, "test": "paired bootstrap", **group}
                    for i, (d, p, _) in enumerate(rows)]
    parsed = Cells(page.part("paired_tests", paired_tests(significance, group)))
    body = [r for r in parsed.rows if r]
    assert len(body) == len(rows)
    for cells, (delta, p, colour) in zip(body, rows):
        delta_cell, p_cell = cells[3], cells[6]
        assert delta_cell[1] == f"{delta:.2f}"
        assert colour in delta_cell[0] and not ({"pos", "neg", "ns"} - {colour}) & delta_cell[0]
        assert p_cell[1] == ("< 0.001" if p < 0.001 else f"{p:.3f}")
    assert "0.000" not in "".join(text for row in body for _, text in row)


def write_paper_csv(path: Path, lines: list[dict[str, Any]]) -> None:
    from harness.runner.presets.evidence import CSV_COLUMNS

    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(CSV_COLUMNS))
        writer.writeheader()
        writer.writerows(lines)


TABLE = "paper, main STS table (wmean)"  # bert-whitening.toml's table of every row


def paper_line(model: str, setting: str, task: str, published: float, measured: float | None, status: str,
               record: str = "") -> dict[str, Any]:
    return {"paper": "bert-whitening", "table": TABLE, "model": model, "setting": setting, "task": task,
            "metric": "spearman", "published": f"{published:.4f}",
            "measured": "" if measured is None else f"{measured:.4f}",
            "delta": "" if measured is None else f"{measured - published:.4f}", "status": status, "record": record}


def scored(method: str, task: str, spearman: float, backbone: str = "bert-base-uncased") -> dict[str, Any]:
    """A record with what names its result file (method spec, protocol, task, fingerprints) and a Spearman."""
    return {"method": {"name": method, "label": method, "spec": {"name": method, "backbone": backbone}},
            "protocol": {"max_length": 64}, "task": {"name": task, "source": "senteval", "fingerprint": "f" + task},
            "scores": {"spearman": spearman}}


def file_of(record: dict[str, Any]) -> str:
    from harness.runner.presets.evidence import record_file

    return record_file(record)


FIRST_LAST = ("BERT-base first-last", "no whitening")  # bert-whitening.toml's first row: STS12 57.86, STS-B 59.04


def test_paper_deltas_say_when_the_model_differs_and_rows_not_run_are_one_line_per_reason(tmp_path):
    hub = "backbone 'x' is not a local folder; download it and pass its folder with --backbone DIR"
    sts12, stsb = scored("first-last", "sts12", 61.5), scored("first-last", "stsb", 81.55, "minilm")
    write_paper_csv(tmp_path / "paper-bert-whitening.csv", [
        paper_line(*FIRST_LAST, "STS12", 57.86, 61.5, "ran", file_of(sts12)),
        paper_line(*FIRST_LAST, "STS-B", 59.04, 81.55, "ran; model differs: minilm (paper: bert-base-uncased)",
                   file_of(stsb)),
        paper_line(*FIRST_LAST, "STS13", 61.97, None, "not run: task not selected (--tasks)"),
        paper_line(*FIRST_LAST, "STS14", 62.49, None, "not run: task not selected (--tasks)"),
        paper_line(*FIRST_LAST, "SICK-R", 63.75, None, "not run: task not selected (--tasks)"),
        paper_line("BERT-base-whitening", "target", "STS12", 63.62, None, f"not run: {hub}"),
        paper_line("BERT-base-whitening", "target", "STS13", 73.02, None, f"not run: {hub}"),
    ])
    (shown,) = papers(tmp_path, [sts12, stsb])
    assert not shown.left_out
    parsed = Cells(page.part("papers", [shown]))
    body = [r for r in parsed.rows if r]
    assert len(body) == 2  # the rows that ran; the five others are two lines
    delta = {row[4][1]: row[8] for row in body}  # paper, table, model, setting, task, metric, ...
    assert delta["STS12"] == ({"num", "pos"}, "+3.64")
    classes, text = delta["STS-B"]
    assert "differs" in classes and not {"pos", "neg"} & classes and text == "+22.51 model differs"
    assert len(parsed.items) == 2
    tasks, hub_line = parsed.items
    assert tasks.startswith("3 not run") and "STS13, STS14, SICK-R" in tasks
    assert hub_line.startswith("2 not run") and hub in hub_line  # the reason in full, its fix included
    # The commands keep the run's model; the tasks left out are named as --tasks takes them.
    assert parsed.codes == ["python run_bench.py --paper bert-whitening --backbone minilm --tasks sts13 sts14 sickr",
                            "python run_bench.py --paper bert-whitening --backbone minilm"]


def test_a_planted_or_edited_paper_csv_shows_only_what_records_and_the_paper_give(tmp_path, caplog):
    """Issue 42: a paper-*.csv the run did not write, or one edited after, never puts a number on the page. Each
    figure is recomputed: published from the bundled TOML, measured from the verified record the line names."""
    sts12, sts13 = scored("first-last", "sts12", 61.5), scored("first-last", "sts13", 70.25)
    other = scored("whitening", "sts14", 77.0)
    honest = [paper_line(*FIRST_LAST, "STS12", 57.86, 61.5, "ran", file_of(sts12)),
              paper_line(*FIRST_LAST, "STS13", 61.97, 70.25, "ran", file_of(sts13))]
    forged = {
        "measured 99.99 on a real record": paper_line(*FIRST_LAST, "STS14", 62.49, 99.99, "ran", file_of(sts12)),
        "measured 99.99, no record": paper_line(*FIRST_LAST, "STS15", 70.96, 99.99, "ran"),
        "a record of another method": paper_line(*FIRST_LAST, "STS14", 62.49, 77.0, "ran", file_of(other)),
        "a record not among the verified": paper_line(*FIRST_LAST, "STS16", 69.76, 50.0, "ran",
                                                      file_of(scored("first-last", "sts16", 50.0))),
        "the published figure edited": paper_line(*FIRST_LAST, "STS-B", 10.0, 61.5, "ran", file_of(sts12)),
        "a row the paper does not have": paper_line("BERT-huge", "x", "STS12", 57.86, 61.5, "ran", file_of(sts12)),
        "a figure on a row that did not run": paper_line(*FIRST_LAST, "SICK-R", 63.75, 99.99, "not run: x"),
    }
    for why, line in forged.items():
        write_paper_csv(tmp_path / "paper-bert-whitening.csv", [*honest, line])
        with caplog.at_level("WARNING", logger="sts_bench.report"):
            caplog.clear()
            (shown,) = papers(tmp_path, [sts12, sts13, other])
        text = page.part("papers", [shown])
        assert "99.99" not in text and "10.00" not in text and "BERT-huge" not in Cells(text).rows.__str__(), why
        assert len(shown.left_out) == 1 and shown.total == 2, why
        body = [[cell.text for cell in row] for row in shown.table.rows]
        assert [row[4:9] for row in body] == [["STS12", "spearman", "57.86", "61.50", "+3.64"],
                                              ["STS13", "spearman", "61.97", "70.25", "+8.28"]], why
        (warning,) = [r.getMessage() for r in caplog.records]
        assert "paper-bert-whitening.csv" in warning and "1 line(s) left out" in warning, why
        assert "left out" in text, why
    # The same two honest lines with the Avg. a full row would have: an Avg. line is recomputed, never read.
    write_paper_csv(tmp_path / "paper-bert-whitening.csv", [*honest, {**honest[0], "task": "Avg."}])
    (shown,) = papers(tmp_path, [sts12, sts13, other])
    assert shown.left_out == ["Avg. of BERT-base first-last (no whitening): its task lines are not all verified"]
    # A file of no bundled paper, or the records' numbers without the records: nothing shown.
    write_paper_csv(tmp_path / "paper-bert-whitening.csv", honest)
    (shown,) = papers(tmp_path, [])
    assert shown.table is not None and shown.table.rows == [] and len(shown.left_out) == 2
    (tmp_path / "paper-bert-whitening.csv").rename(tmp_path / "paper-mine.csv")
    (shown,) = papers(tmp_path, [sts12, sts13])
    assert shown.table is None and "not a paper of sts-bench's" in shown.missing[0]


def bert_flow_record(method: str, task: str, spearman: float, backbone: str = "bert-base-uncased",
                     **extra: Any) -> dict[str, Any]:
    """A record as BERT-flow's paper ran it (bert-flow.toml: wmean, max_length 64, layers 1,-1, STS12 from
    SentEval), or otherwise where ``extra`` says (``max_length=128``, ``params=...``, ``adapter=...``)."""
    record = scored(method, task, spearman, backbone)
    record["protocol"] = {"aggregation": "wmean", "max_length": extra.get("max_length", 64),
                          "first_last_layers": [1, -1], "source": "senteval", "fit_set": None}
    record["method"]["spec"]["params"] = extra.get("params", {})
    if "adapter" in extra:
        record["backbone"] = {"name": backbone, "adapter": extra["adapter"]}
    return record


def test_a_paper_line_is_the_papers_result_only_for_a_record_of_its_model_and_protocol(tmp_path):
    """Issue 51: a planted paper-bert-flow.csv line naming the real MiniLM ``avg`` record was shown as "BERT-base
    last avg, measured 82.03, +34.74", coloured as a real result (only method and task were checked against the
    paper row), and the "model differs" grey came from the CSV's own words. Now each line's status is rebuilt
    from its record: a record of another model, protocol, option or an adapter is grey and says what differs,
    whatever the CSV claims; a record of the paper's own row is coloured, whatever the CSV claims."""
    last_avg, flow = ("BERT-base", "last avg"), ("BERT-base-flow", "target")
    table = "paper Table 2 (STS without NLI supervision; wmean)"

    def line(row: tuple[str, str], published: float, record: dict[str, Any], status: str) -> dict[str, Any]:
        measured = record["scores"]["spearman"]
        return {"paper": "bert-flow", "table": table, "model": row[0], "setting": row[1], "task": "STS12",
                "metric": "spearman", "published": f"{published:.4f}", "measured": f"{measured:.4f}",
                "delta": f"{measured - published:.4f}", "status": status, "record": file_of(record)}

    genuine = bert_flow_record("avg", "sts12", 50.10)
    cases = {  # why: (the record, the CSV's status, the status the page must show; "ran" alone is the paper's)
        "MiniLM's real record, the CSV saying nothing": (
            bert_flow_record("avg", "sts12", 82.03, "minilm"), "ran",
            "ran; model differs: minilm (paper: bert-base-uncased)"),
        "MiniLM's record, the CSV claiming a check of its own": (
            bert_flow_record("avg", "sts12", 82.03, "minilm"), "ran; checked against the authors' run",
            "ran; model differs: minilm (paper: bert-base-uncased)"),
        "the paper's model at another max_length": (
            bert_flow_record("avg", "sts12", 51.0, max_length=128), "ran", "ran; max_length=128 (paper: 64)"),
        "the paper's model with an adapter merged in": (
            bert_flow_record("avg", "sts12", 55.0, adapter={"folder": "lora", "sha256": "ab"}), "ran",
            "ran; model differs: bert-base-uncased with an adapter (paper: bert-base-uncased)"),
        "the paper's own record, the CSV claiming the model differs": (
            genuine, "ran; model differs: bert-large (paper: bert-base-uncased)", "ran"),
    }
    for why, (record, status, expected) in cases.items():
        write_paper_csv(tmp_path / "paper-bert-flow.csv", [line(last_avg, 49.07, record, status)])
        (shown,) = papers(tmp_path, [record])
        assert not shown.left_out and shown.total == 1, why
        (row,) = Cells(page.part("papers", [shown])).rows[1:]
        status_cell, (delta_classes, delta_text) = row[9], row[8]
        assert status_cell[1] == expected, why
        if expected == "ran":  # the paper's result: coloured by its sign, no tag
            assert delta_classes == {"num", "pos"} and delta_text == f"{50.10 - 49.07:+.2f}", why
        else:  # not the paper's result: grey, saying what differs, never coloured as one
            assert "differs" in delta_classes and not {"pos", "neg"} & delta_classes, why
            tag = "model differs" if "model differs" in expected else "protocol differs"
            assert delta_text.endswith(tag), why
    # A flow record trained for 2 epochs where the paper trains 1 is not the paper's row either.
    trained = bert_flow_record("flow", "sts12", 60.0, params={"epochs": 2.0, "levels": 3})
    write_paper_csv(tmp_path / "paper-bert-flow.csv", [line(flow, 63.48, trained, "ran")])
    (shown,) = papers(tmp_path, [trained])
    assert [cell.text for cell in shown.table.rows[0]][9] == "ran; --flow-epochs=2.0 (paper: 1.0)"


def test_the_paper_runner_writes_the_words_the_page_reads():
    """The page finds "model differs" and "not run:" in a row's status; the paper runner writes them
    from the same constants, so a rewording cannot split the two."""
    from harness.runner.papers import run as paper_run
    from harness.runner.presets.data import load_paper
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
             "first_last_layers": "0,-1", "metric": "spearman"}
    return {**group, "method": method, "backbone": "/models/tiny-bert", "kind": "embedding", "fit_set": "",
            "task": task, "score": score, "spearman": score, "ci_low": score - 2, "ci_high": score + 2}


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions save, kept open for inspection (nothing is written)."""
    figures: list = []

    def keep(fig, path, input_key=None):
        if fig.get_layout_engine() is None:  # as save_figure lays out a figure
            fig.tight_layout()
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
                   "first_last_layers": "0,-1", "metric": "spearman", "method": method, "backbone": "/m/tiny",
                   "kind": "embedding",
                   "fit_set": "", "task": "STS-B", "fingerprint": "f"}
            points = [{"commit": f"{c:040x}", "date": f"2026-01-0{c}T00:00", "score": 70.0 + i + c,
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


def test_each_bar_chart_block_names_its_groups_main_score_on_its_axes(drawn, tmp_path):
    """A labelled task ranked by AP is drawn against "AP ×100", an STS task against "Spearman
    ×100", each block by its own protocol group's metric (issue 50: every axis read Spearman)."""
    labelled = [{**long_row("all", m, "pairs_with_label", v), "metric": "ap", "spearman": None}
                for m, v in (("avg", 80.0), ("whitening", 75.0))]
    rows = [*labelled, long_row("all", "avg", "STS-B", 70.0), long_row("all", "avg", "STS12", 60.0)]
    plots.leaderboard_png(rows, tmp_path / "leaderboard.png")
    (fig,) = drawn
    axes = {(ax.get_title(), ax.get_xlabel()) for sub in fig.subfigs for ax in sub.axes}
    assert axes == {("pairs_with_label", "AP ×100"), ("STS12", "Spearman ×100"), ("STS-B", "Spearman ×100")}
    for sub in fig.subfigs:  # the block's protocol line and its axes agree on the score
        labelled_block = sub._suptitle.get_text().startswith("Protocol: score=ap")
        assert {ax.get_xlabel() for ax in sub.axes} == {"AP ×100" if labelled_block else "Spearman ×100"}


def test_each_history_panel_names_its_tasks_main_score(drawn, tmp_path):
    sts = history_series(("mean",), ("avg", "whitening"))
    labelled = [moves.Series({**s.key, "metric": "ap", "task": "pairs_with_label"}, s.points) for s in sts]
    other = [moves.Series({**sts[0].key, "metric": "f1", "task": "pairs_with_label"}, sts[0].points)]
    commits = [moves.commit_label(p) for p in sts[0].points]
    moves._draw_history([*sts, *labelled], commits, [], tmp_path / "history.png", "k")
    moves._draw_history([*labelled, *other], commits, [], tmp_path / "mixed.png", "k")
    first, mixed = drawn
    panels = [(ax.get_title(), ax.get_ylabel()) for ax in first.axes]
    assert panels == [("STS-B: Spearman ×100 by commit (whiskers: 95 % interval)", "Spearman ×100"),
                      ("pairs_with_label: AP ×100 by commit (whiskers: 95 % interval)", "AP ×100")]
    # one task in two protocol groups ranked by two scores: the panel names both, never one for all
    assert [ax.get_ylabel() for ax in mixed.axes] == ["AP ×100 / F1 ×100"]


# A protocol longer than any figure: a file task's path of 400 characters (issue 52: the bar chart's
# title was split in two fixed halves and clipped at both ends).
LONG_SOURCE = "file:/" + "/".join(["a-folder-with-a-long-name"] * 16)


def inside(text, fig) -> bool:
    """Whether ``text`` lies inside ``fig`` as the PNG is drawn: at its dpi (hinting makes a text's width
    vary with the dpi: bold 9.5 pt text is 5 % wider at 110 dpi than at 100)."""
    fig.set_dpi(plots.DPI)
    fig.canvas.draw()
    box = text.get_window_extent(fig.canvas.get_renderer())
    return fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1


@pytest.mark.parametrize("source", ["senteval", LONG_SOURCE])
def test_protocol_titles_stay_inside_their_figure_at_any_length(drawn, tmp_path, source):
    """The narrowest bar chart (one task) and the frontier's panels: every protocol title lies inside
    the figure, measured by the renderer, and holds the whole protocol line (nothing cut away)."""
    from harness.runner.tables.frames import protocol_line

    labelled, other = ({**long_row("mean", m, "pairs", v), "metric": "ap", "source": source} for m, v in
                       (("avg", 80.0), ("cls", 70.0)))
    plots.leaderboard_png([labelled, other], tmp_path / "leaderboard.png")
    frontier = {**labelled, "of": "avg", "precision": "int8", "similarity": "cosine", "bytes_per_vector": 64,
                "spearman": 80.0, "pareto": True}
    plots.frontier_png([frontier, {**frontier, "bytes_per_vector": 256, "spearman": 81.0}], tmp_path / "f.png")
    bars, front = drawn
    line = protocol_line({k: labelled[k] for k in GROUP_KEYS})
    (sub,) = bars.subfigs
    (ax,) = [ax for ax in front.axes if ax.get_title()]
    for title, fig, whole in ((sub._suptitle, bars, f"Protocol: {line}"), (ax.title, front, f"pairs\n{line}")):
        assert inside(title, fig), (title.get_text(), title.get_window_extent(), fig.bbox)
        shown = title.get_text()
        assert shown.replace("\n", "").replace(" · ", "") == whole.replace("\n", "").replace(" · ", "")
        assert shown.count("\n") >= (2 if source == LONG_SOURCE else 1)  # wrapped, not shrunk or cut


def test_a_history_of_one_commit_is_a_table_of_its_scores_not_a_dot_on_an_empty_axis(tmp_path):
    """Issue 52: one commit drew a dot per series on a wide, empty axis. The page shows that commit's
    scores and intervals as a table (none drawn); from the second commit on, the plot."""
    series = [moves.Series(s.key, s.points[:1]) for s in history_series(("mean", "wmean"), ("avg", "cls"))]
    series[-1].points[0]["ci95"] = None  # a score without an interval
    commits = [moves.commit_label(series[0].points[0])]
    png = b"a PNG drawn earlier"
    one = page.history_section(moves.HistoryReport(series, commits, [], [], ""), png)
    assert one is not None and one.figure is None and one.moves is None and one.scores is not None
    assert one.scores.caption.startswith(f"Spearman ×100 at commit {commits[0]}, the only one so far")
    shown = [[c.text for c in row] for row in one.scores.rows]
    assert [h.text for h in one.scores.head] == ["series", "task", "value", "ci_low", "ci_high"]
    expected = [[label, "STS-B", *(f"{v:.2f}" for v in [s.points[0]["score"], *(s.points[0]["ci95"] or [])])]
                for label, s in zip(moves.series_labels(series), series)]
    assert shown == [row + ["—", "—"] * (len(row) == 3) for row in expected]  # the last has no interval
    assert shown[0][2:] == ["71.00", "69.00", "73.00"] and shown[-1][2:] == ["72.00", "—", "—"]
    several = history_series(("mean",), ("avg",))
    labels = [moves.commit_label(p) for p in several[0].points]
    drawn = page.history_section(moves.HistoryReport(several, labels, [], [], ""), png)
    assert drawn is not None and drawn.scores is None and drawn.figure is not None and drawn.commits == 3
    html = page.part("history", one)
    assert "<table" in html and "<img" not in html and f"at commit {commits[0]}" in html


# -- every text a user or a run wrote reaches the page escaped -------------------------------------

SCRIPT = "<script>alert(1)</script>\"'&"  # a prompt, hence a method label; a task title (below)
IMG = "<img src=x onerror=alert(1)>\"'&"  # file names cannot hold "/": a backbone folder, a plot
SVG = "<svg onload=alert(1)>\"'&"  # the folder of a file: task (its path is in every score's title)
# Every element and attribute the page writes itself: anything else on it was injected.
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "nav", "a", "section",
        "table", "caption", "thead", "tbody", "tr", "th", "td", "span", "details", "summary", "pre", "ul", "li", "b",
        "code", "figure", "img", "figcaption", "script"}
ATTRIBUTES = {"lang", "charset", "name", "content", "class", "href", "id", "data-sort", "title", "alt", "src"}


class Parts(HTMLParser):
    """Every start tag with its attributes, every text (entities decoded) and each script's text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data
        self.texts.append(data)

    def shown(self) -> str:
        """Every text and attribute value, as the browser reads them."""
        values = [v for _, attrs in self.tags for v in attrs.values() if v]
        return "\n".join(self.texts + values)


def swap(value: Any, old: str, new: str) -> Any:
    """``value`` (a record, as JSON-like data) with every string equal to ``old`` replaced by ``new``."""
    if isinstance(value, dict):
        return {k: swap(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [swap(v, old, new) for v in value]
    return new if value == old else value


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, senteval_root, tiny_bert) -> tuple[str, Path]:
    """A page whose prompt (so method label), backbone folder, task file folder, task title, paper CSV
    cells and plot name each carry markup and quotes; returns the page and its folder."""
    import shutil

    import harness
    from harness.runner.history.moves import history_report
    from harness.runner.records.store import load_results
    from harness.runner.settings.config import BenchConfig
    from harness.runner.tables.comparisons import compare

    root = tmp_path_factory.mktemp("hostile")
    backbone = shutil.copytree(tiny_bert, root / IMG)
    task = root / SVG / "pairs.tsv"
    task.parent.mkdir()
    rows = [line.split("\t") for line in (senteval_root / "STS" / "STS12-en-test" / "STS.input.MSRpar.txt")
            .read_text(encoding="utf-8").splitlines()[:12]]
    golds = (senteval_root / "STS" / "STS12-en-test" / "STS.gs.MSRpar.txt").read_text().splitlines()[:12]
    task.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{g}\n" for (a, b), g in zip(rows, golds)),
                    encoding="utf-8")
    out = root / "out"
    harness.run(BenchConfig(methods=("avg", "random"), tasks=("stsb", f"file:{task}?range=0,5"),
                            backbone=str(backbone), source="senteval", senteval_dir=str(senteval_root),
                            cache_dir=str(root / "cache"), output_dir=str(out), progress=False, bootstrap=50,
                            threads=1, plots=False, method_params={"avg": {"prompt": SCRIPT}}))
    # A line of no row of the paper is left out, named as text; a row's not-run reason is shown as text.
    write_paper_csv(out / "paper-bert-whitening.csv", [
        {**paper_line(SCRIPT, "target", SVG, 60.0, 61.5, f"ran; {page.MODEL_DIFFERS}: {IMG} (paper: x)"), "table": IMG},
        paper_line(*FIRST_LAST, "STS13", 61.97, None, f"not run: {SCRIPT}")])
    pyplot = plots._pyplot()
    plots.save_figure(pyplot.figure(figsize=(1, 1)), out / "plots" / f"{IMG}.png")  # one the tool wrote
    # A task title cannot hold markup (--tasks names are checked), but a plugin's text can: the page
    # must not rely on that check, so the records are given one in memory.
    records = [swap(rec, "STS-B", SCRIPT) for rec in load_results(out / "runs")]
    significance, marks, _ = compare(records, 50, 1)
    written = page.write_report(records, marks, significance, out, history_report(out, 50, 1, plots=False))
    text = written.read_text(encoding="utf-8")
    return text, out


def test_markup_in_names_prompts_paths_and_csv_cells_is_shown_as_text_never_run(hostile):
    text, _ = hostile
    parts = Parts(text)
    assert {tag for tag, _ in parts.tags} <= TAGS, {tag for tag, _ in parts.tags} - TAGS
    names = {name for _, attrs in parts.tags for name in attrs}
    assert names <= ATTRIBUTES, names - ATTRIBUTES  # no onerror, onload, nor a name a quote broke out into
    assert [tag for tag, _ in parts.tags].count("script") == 1  # the page's own, at its end
    assert all(attrs["src"].startswith("data:image/png;base64,") for tag, attrs in parts.tags if tag == "img")
    shown = parts.shown()
    for hostile_text in (SCRIPT, IMG, SVG):  # each shown whole, as the text it is
        assert hostile_text in shown, hostile_text
    for raw in ("<script>alert", "<img src=x", "<svg", "\"'&"):
        assert raw not in text, raw
    # Where each one is shown: the method's cell, the backbone's cell, a score's settings, the task's
    # header, the paper table and its not-run line, the plot's caption.
    cells = Cells(text)
    methods = [row[0][1] for row in cells.rows if row and row[0][1].startswith("avg[")]
    assert methods and all(m.startswith(f"avg[prompt={SCRIPT}]") for m in methods)
    assert any(IMG in t for t in parts.texts if t == IMG)  # the backbone cell (the folder's name) and the caption
    titles = [attrs.get("title") or "" for tag, attrs in parts.tags if tag == "td"]
    assert any(SVG in t for t in titles) and any(SCRIPT in t for t in titles)
    assert SCRIPT in [t for t in parts.texts if t == SCRIPT] and any(SCRIPT in item for item in cells.items)
    assert [attrs["alt"] for tag, attrs in parts.tags if tag == "img"].count(IMG) == 1


def test_css_and_javascript_are_package_data_read_from_the_package(hostile):
    """The page inlines static/page.css and static/page.js as read through importlib.resources, and
    pyproject.toml's package data ships every template and static file (tests/test_packaging.py
    builds the wheel)."""
    import tomllib
    from fnmatch import fnmatch
    from importlib.resources import files

    from harness.runner.page import assets

    text, _ = hostile
    package = files("harness.runner.page")
    css = package.joinpath("static", "page.css").read_text(encoding="utf-8")
    js = package.joinpath("static", "page.js").read_text(encoding="utf-8")
    assert "table.sortable" in css and "aria-sort" in js  # the files are the page's style and script
    assert f"<style>\n{css}</style>" in text and f"<script>\n{js}</script>" in text
    assert assets.css() == css and assets.js() == js
    parts = Parts(text)
    assert parts.scripts == [f"\n{js}"]
    source = Path(page.__file__).parent
    for module in source.glob("*.py"):  # no copy of either left in code
        code = module.read_text(encoding="utf-8")
        assert "aria-sort" not in code and "--accent" not in code, module
    globs = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-data"]["harness.runner.page"]
    data = [p.relative_to(source).as_posix() for folder in ("templates", "static")
            for p in (source / folder).rglob("*") if p.is_file()]
    assert {"templates/page.html.j2", "templates/parts.html.j2", "static/page.css", "static/page.js"} <= set(data)
    assert all(any(fnmatch(name, glob) for glob in globs) for name in data), (data, globs)


def test_a_static_file_that_would_end_its_element_is_refused(monkeypatch):
    from harness.runner.page import assets

    assert assets.ENDS_RAW_TEXT.search("a { content: '</style>' }")
    assert assets.ENDS_RAW_TEXT.search("x = '</SCRIPT >'") and assets.ENDS_RAW_TEXT.search("<!-- x")
    assert not assets.ENDS_RAW_TEXT.search(assets.js()) and not assets.ENDS_RAW_TEXT.search(assets.css())


def test_a_missing_template_variable_fails_loudly():
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        page.environment().get_template("page.html.j2").render()
