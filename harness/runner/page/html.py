"""``results/index.html``: the report page, one self-contained file rebuilt from ``runs/`` like the
other leaderboards.

It holds every protocol group's leaderboard (score, 95 % interval, ★ not significantly below the
best, † ‡ marks), each group's paired tests, paper deltas from ``paper-*.csv`` where present, the
history of scores by commit (``history.jsonl``) and every plot under ``plots/``. Each score's
settings show on hover (its ``title``) and in full under the row's "settings" expander; every table
sorts by a click on its header. CSS and JavaScript are inline and plots are ``data:`` URIs, so
nothing is fetched when the page is viewed.

The page embeds only PNGs this tool wrote (:func:`tool_png`): a regular file in ``plots/`` (read
without following a link: a link to ``~/.ssh/id_rsa`` named ``plots/x.png`` would otherwise ship that
file, base64, inside the page), a whole PNG (signature, every chunk's CRC, ``IEND`` last) and one
that carries the text chunk the tool's renderer writes. Anything else is left out with one warning.
Files the page reads (``paper-*.csv``) are read the same way: a link is skipped with one warning.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import logging
import math
import re
import struct
import zlib
from collections.abc import Callable, Sequence
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.hashing import atomic_write_text
from harness.runner.page.assets import CSS, JS
from harness.runner.records.lock import NotAFile, link_target, read_inside
from harness.runner.tables.comparisons import ALPHA  # the paired tests' level
from harness.runner.tables.frames import (
    AVG,
    GROUP_KEYS,
    ROW_KEYS,
    long_rows,
    newest,
    record_keys,
    tied_tasks,
    wide_rows,
)
from harness.runner.tables.leaderboard import LEGEND, TIED, inputs_line, protocol_line
from harness.runner.tables.plots import INPUT_KEY

if TYPE_CHECKING:
    from harness.runner.history.moves import HistoryReport
    from harness.runner.records.schema import Record

# The paper runner writes these words into a row's status (harness/runner/papers/run.py imports them).
MODEL_DIFFERS = "model differs"
NOT_RUN = "not run:"
PAPER_COLUMNS = ("paper", "table", "model", "setting", "task", "published", "measured", "delta", "status")
log = logging.getLogger("sts_bench.report")
esc = html.escape


def _number(value: Any, digits: int = 2) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return esc(str(value))
    return "—" if math.isnan(number) else f"{number:.{digits}f}"


def settings_of(rec: Record) -> str:
    """One score's settings, as a line of text for its hover title."""
    spec, task, protocol = rec["method"]["spec"], rec["task"], rec["protocol"]
    fit = (rec.get("fit") or {}).get("fit_set") or {}
    backbone = rec.get("backbone") or {}
    env = rec.get("env") or {}
    parts = [f"{rec['method']['label']} on {task['title']} {task['split']} ({task['n_pairs']} pairs)",
             f"source {task['source']}: {task['origin']} (data sha256 {task['fingerprint'][:12]})",
             f"pooling {spec['pooling']} layers {spec['layers']} max_length {spec['max_length']}",
             f"options {json.dumps(spec['params'], default=str)}" if spec["params"] else "",
             f"backbone {backbone.get('name')} ({backbone.get('origin')}, {str(backbone.get('fingerprint'))[:12]}, "
             f"{backbone.get('encoder_impl')})" if backbone else "",
             f"fit set {fit.get('name')}: {fit.get('n_sentences')} sentences" if fit else "",
             f"aggregation {protocol['aggregation']}, dtype {protocol['dtype']}, similarity {protocol['similarity']}",
             f"bootstrap {rec['scores'].get('bootstrap_rounds')} rounds, seed {rec['scores'].get('bootstrap_seed')}",
             f"run {rec['created']} at commit {str(rec['harness'].get('git_sha'))[:12]}; torch "
             f"{(env.get('packages') or {}).get('torch')}, {', '.join(env.get('devices') or [])}"]
    return " · ".join(p for p in parts if p)


def _details(rec: Record) -> str:
    """The full settings of a row (from its newest record), for the row's expander."""
    keep = {k: rec.get(k) for k in ("method", "backbone", "protocol", "fit", "env", "harness")}
    keep["task"] = {k: v for k, v in rec["task"].items() if k != "subsets"}
    text = json.dumps(keep, indent=1, default=str, ensure_ascii=False)
    return f"<details><summary>settings</summary><pre>{esc(text)}</pre></details>"


def _sort_value(value: Any) -> str:
    number = _float(value)
    return "" if math.isnan(number) else f"{number:.6g}"


def _board(group: list[dict[str, Any]], tasks: list[str], extra: list[str], cells: dict[tuple, Record],
           group_key: tuple) -> str:
    """One protocol group's leaderboard (its :func:`~harness.runner.tables.frames.wide_rows`); ``tasks`` are the
    group's task columns, ``extra`` the method-declared columns any of its rows fills."""
    head = ["method", "backbone", "fit set", "marks", *tasks, AVG, *extra]
    rows = []
    for row in group:
        row_key = tuple(row[k] for k in ROW_KEYS)
        tied = set(str(row.get("not_below_best") or "").split(","))
        recs = [cells.get((group_key, row_key, t)) for t in tasks]
        first = next((r for r in recs if r is not None), None)
        out = [f"<td>{esc(str(row['method']))}{_details(first) if first else ''}</td>",
               f"<td>{esc(Path(str(row['backbone'])).name or str(row['backbone']))}</td>",
               f"<td>{esc(str(row['fit_set']))}</td>", f"<td class='marks'>{esc(str(row['marks']))}</td>"]
        for task, rec in zip(tasks, recs):
            value = row[task]
            if rec is None or value != value:  # NaN: no score for this task
                why = rec["scores"]["undefined"] if rec is not None else None
                shown = f"<span title='{esc(why)}'>undefined</span>" if why else "—"
                out.append(f"<td class='num' data-sort=''>{shown}</td>")
                continue
            ci = rec["scores"].get("spearman_ci95")
            star = f" <span class='tied' title='not significantly below the best'>{TIED}</span>" if task in tied else ""
            interval = f"<span class='ci'>{_number(ci[0])} – {_number(ci[1])}</span>" if ci else ""
            out.append(f"<td class='num score' data-sort='{value:.4f}' title='{esc(settings_of(rec))}'>"
                       f"{value:.2f}{star}{interval}</td>")
        out.append(f"<td class='num' data-sort='{_sort_value(row[AVG])}'>{_number(row[AVG])}</td>")
        out += [f"<td class='num' data-sort='{_sort_value(row[c])}'>{_number(row[c])}</td>" for c in extra]
        rows.append("<tr>" + "".join(out) + "</tr>")
    header = "".join(f"<th{' class=num' if h in (*tasks, AVG, *extra) else ''}>{esc(h)}</th>" for h in head)
    return (f"<table class='sortable board'><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody>"
            "</table>")


def _p(value: Any) -> str:
    """A p-value as read: ``< 0.001`` below what three digits show (never ``0.000``), ``—`` when undefined."""
    number = _float(value)
    if math.isnan(number):
        return "—"
    return "< 0.001" if number < 0.001 else f"{number:.3f}"


def signed_class(value: Any) -> str:
    """``pos``/``neg`` by the sign of a change (green/red), empty for zero or undefined."""
    number = _float(value)
    return "pos" if number > 0 else "neg" if number < 0 else ""


def significance_class(delta: Any, p: Any) -> str:
    """The colour of a paired-test delta: by its sign where p < 0.05, neutral (``ns``) otherwise, so
    green and red mean "a difference beyond the noise" and nothing else."""
    return signed_class(delta) if _float(p) < ALPHA else "ns"


def _table(rows: list[dict[str, Any]], numeric: tuple[str, ...] = (), css: str = "sortable",
           colour: Callable[[dict[str, Any], str], str] | None = None) -> str:
    """A sortable table of ``rows``; ``colour(row, column)`` gives a numeric cell's class."""
    if not rows:
        return "<p class='note'>none</p>"
    columns = list(rows[0])
    head = "".join(f"<th{' class=num' if c in numeric else ''}>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            value = row[c]
            if c in numeric:
                cls = colour(row, c) if colour is not None else ""
                shown = esc(_p(value)) if c == "p" else _number(value, 2)
                cells.append(f"<td class='num {cls}' data-sort='{_sort_value(value)}'>{shown}</td>")
            else:
                cells.append(f"<td>{esc(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='{css}'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _significance(significance: list[dict[str, Any]], group: dict[str, str]) -> str:
    rows = [{"task": r["task"], "A": r["method_a"], "B": r["method_b"], "delta": r["delta"], "CI low": r["ci_low"],
             "CI high": r["ci_high"], "p": r["p_value"], "test": r["test"]}
            for r in significance if all(str(r.get(key)) == str(value) for key, value in group.items())]
    if not rows:
        return ""
    significant = sum(_float(r["p"]) < ALPHA for r in rows)

    def colour(row: dict[str, Any], column: str) -> str:
        return significance_class(row["delta"], row["p"]) if column == "delta" else ""

    return (f"<details><summary>paired tests ({len(rows)} rows, {significant} with p &lt; {ALPHA}; as in "
            f"significance.csv)</summary><p class='note'>delta = A − B; coloured where p &lt; {ALPHA} (green: A "
            f"higher, red: A lower), grey where the difference is within the noise.</p>"
            f"{_table(rows, ('delta', 'CI low', 'CI high', 'p'), colour=colour)}</details>")


def papers(out_dir: Path) -> str:
    """Paper deltas from every ``paper-*.csv``: published against measured, per paper table cell.
    Rows that ran are a table; a delta measured on another model than the paper's is grey and says
    so. Rows that did not run are one line per reason, with the command that runs them."""
    parts = []
    for path in sorted(out_dir.glob("paper-*.csv")):
        try:
            # Read without following a link (the output folder is closed: harness.runner.records.lock).
            reader = csv.DictReader(io.StringIO(read_inside(path).decode("utf-8"), newline=""))
            missing = [c for c in PAPER_COLUMNS if c not in (reader.fieldnames or [])]
            rows = [{c: row.get(c, "") for c in PAPER_COLUMNS} for row in reader] if not missing else []
        except NotAFile as err:
            log.warning("report: %s %s; left out of the page", path, err.strerror)
            continue
        except (OSError, UnicodeDecodeError, csv.Error) as err:
            missing, rows = [f"unreadable ({err})"], []
        if missing:
            log.warning("report: %s skipped: missing column(s) %s", path, ", ".join(missing))
            parts.append(f"<p class='note'>{esc(path.name)} skipped: missing {esc(', '.join(missing))}</p>")
            continue
        ran = [row for row in rows if not str(row["status"]).startswith(NOT_RUN)]
        parts.append(f"<h3>{esc(path.name)}</h3>{_paper_table(ran)}{not_run_lines(rows)}")
    return "".join(parts)


def _paper_table(rows: list[dict[str, Any]]) -> str:
    """The rows that ran; the delta cell is grey and labelled where the model is not the paper's
    (the paper runner writes MODEL_DIFFERS into the status of such rows)."""
    if not rows:
        return "<p class='note'>No row of this paper ran.</p>"
    head = "".join(f"<th{' class=num' if c in ('published', 'measured', 'delta') else ''}>{esc(c)}</th>"
                   for c in PAPER_COLUMNS)
    body = []
    for row in rows:
        cells = []
        for c in PAPER_COLUMNS:
            value = row[c]
            if c == "delta":
                number = _float(value)
                shown = "—" if math.isnan(number) else f"{number:+.2f}"
                if MODEL_DIFFERS in str(row["status"]):
                    cells.append(f"<td class='num differs' data-sort='{_sort_value(value)}' title='measured on "
                                 f"another model than the paper&#39;s: not comparable'>{shown} "
                                 f"<span class='tag'>{MODEL_DIFFERS}</span></td>")
                else:
                    cells.append(f"<td class='num {signed_class(value)}' data-sort='{_sort_value(value)}'>{shown}</td>")
            elif c in ("published", "measured"):
                cells.append(f"<td class='num' data-sort='{_sort_value(value)}'>{_number(value)}</td>")
            else:
                cells.append(f"<td>{esc(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='sortable paper'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def not_run_lines(rows: list[dict[str, Any]]) -> str:
    """The rows that did not run, one line per reason: how many, which models and tasks, the reason
    in full (it says what to fix), and the command that runs them."""
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        status = str(row["status"])
        if status.startswith(NOT_RUN):
            by_reason.setdefault(status[len(NOT_RUN):].strip(), []).append(row)
    if not by_reason:
        return ""
    # A run on another model than the paper's says so in its rows that ran: the command keeps that model.
    differs = [re.match(rf"{MODEL_DIFFERS}: (\S+) \(paper:", part.strip()) for row in rows
               for part in str(row["status"]).split(";")]
    backbone = next((m.group(1) for m in differs if m), None)
    items = []
    for reason, group in by_reason.items():
        models = list(dict.fromkeys(f"{r['model']} ({r['setting']})" for r in group))
        tasks = list(dict.fromkeys(str(r["task"]) for r in group))
        items.append(f"<li><b>{len(group)} not run</b> ({esc('; '.join(models))} on {esc(', '.join(tasks))}): "
                     f"{esc(reason.rstrip('.'))}. Then run them: <code>"
                     f"{esc(paper_command(str(group[0]['paper']), reason, tasks, backbone))}"
                     "</code></li>")
    total = sum(len(g) for g in by_reason.values())
    return f"<p class='note'>{total} of {len(rows)} rows did not run:</p><ul class='notrun'>{''.join(items)}</ul>"


def paper_command(paper: str, reason: str, tasks: list[str], backbone: str | None = None) -> str:
    """The command that runs a paper's rows that did not run: the tasks left out by ``--tasks`` by
    name; otherwise the paper again, once the reason's own fix is done (it names the flag or folder).
    ``backbone``: the model the run used instead of the paper's, kept so the rerun matches."""
    from harness.core.data.tasks import TASKS

    command = f"python run_bench.py --paper {paper}" + (f" --backbone {backbone}" if backbone else "")
    if "--tasks" in reason:
        by_title = {spec.title: name for name, spec in TASKS.items()}
        command += " --tasks " + " ".join(by_title.get(t, t) for t in tasks)
    return command


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Text chunks the tool's renderer (harness.runner.tables.plots.save_figure) writes: the digest of a
# figure's inputs where it has one (history.png), and matplotlib's own "Software" line on every figure.
TOOL_TEXT = (INPUT_KEY.encode("latin-1") + b"\0", b"Software\0Matplotlib version")


def png_problem(data: bytes) -> str | None:
    """Why ``data`` is not a PNG the tool wrote (None: it is one): the PNG signature, an ``IHDR``
    first, every chunk whole with its CRC right, ``IEND`` last and nothing after it, and a text chunk
    of :data:`TOOL_TEXT`.

    >>> png_problem(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    'not a PNG (no PNG signature)'
    """
    if not data.startswith(PNG_SIGNATURE):
        return "not a PNG (no PNG signature)"
    offset, first, ours = len(PNG_SIGNATURE), True, False
    while offset + 12 <= len(data):
        (length,) = struct.unpack(">I", data[offset:offset + 4])
        kind, body = data[offset + 4:offset + 8], data[offset + 8:offset + 8 + length]
        crc = data[offset + 8 + length:offset + 12 + length]
        if len(body) != length or len(crc) != 4 or zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            return f"a damaged PNG (chunk {kind.decode('latin-1')!r} at byte {offset})"
        if first and kind != b"IHDR":
            return "not a PNG (no IHDR chunk first)"
        first = False
        ours = ours or (kind == b"tEXt" and body.startswith(TOOL_TEXT))
        offset += 12 + length
        if kind == b"IEND":
            if offset != len(data):
                return f"a PNG with {len(data) - offset} byte(s) after its end"
            return None if ours else "a PNG sts-bench did not write (no text chunk of its renderer)"
    return "a truncated PNG (no IEND chunk)"


def tool_png(path: Path, out_dir: Path) -> bytes | None:
    """The bytes of ``path`` when it is a PNG this tool wrote inside ``out_dir`` (see the module
    docstring), else None after one warning naming the file and why it is left out."""
    try:
        data = read_inside(path, out_dir)
    except NotAFile as err:
        log.warning("report: %s %s; left out of the page (it embeds only PNGs sts-bench wrote)", path, err.strerror)
        return None
    except OSError as err:
        log.warning("report: %s cannot be read (%s); left out of the page", path, err.strerror or err)
        return None
    problem = png_problem(data)
    if problem is not None:
        log.warning("report: %s is %s; left out of the page (it embeds only PNGs sts-bench wrote)", path, problem)
        return None
    return data


def png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _figure(data: bytes, caption: str) -> str:
    return f"<figure><img alt='{esc(caption)}' src='{png_uri(data)}'><figcaption>{esc(caption)}</figcaption></figure>"


def _plots(out_dir: Path) -> dict[str, bytes]:
    """Every PNG of ``plots/`` the page may embed, by file stem (see :func:`tool_png`); a ``plots/``
    that is a link is left out whole, with one warning (its target is never listed)."""
    folder = out_dir / "plots"
    if folder.is_symlink():
        log.warning("report: %s is a symbolic link (to %s); its images are left out of the page", folder,
                    link_target(folder))
        return {}
    found = {path.stem: tool_png(path, out_dir) for path in sorted(folder.glob("*.png"))}
    return {stem: data for stem, data in found.items() if data is not None}


def _history(history: HistoryReport | None, png: bytes | None) -> str:
    if history is None or not history.series:
        return ("<p class='note'>No history yet: every run appends to history.jsonl; "
                "<code>python run_bench.py --history</code> draws it.</p>")
    rows = [{"commit": m["commit"], "after": m["previous"], "method": m["method"], "task": m["task"],
             "before": m["before"], "now": m["after"], "change": m["change"], "p": m["p_value"], "test": m["test"]}
            for m in history.moves]
    figure = _figure(png, "score by commit; red rings: moved by more than its noise") if png is not None else ""
    moves = _table(rows, ("before", "now", "change", "p"),  # every move beat its noise: coloured by sign
                   colour=lambda row, c: signed_class(row[c]) if c == "change" else "") if rows else \
        "<p class='note'>No score moved by more than its noise.</p>"
    return f"<p class='meta'>{len(history.commits)} commit(s), {len(history.series)} series.</p>{moves}{figure}"


def render(records: Sequence[Record], marks: set, significance: list[dict[str, Any]], out_dir: Path,
           history: HistoryReport | None = None) -> str:
    """The whole page as one HTML string."""
    from harness.core import __version__
    from harness.runner.records.store import git_sha, now_iso

    long = long_rows(records)[0]
    wide, all_tasks, all_extra = wide_rows(long)
    cells = {}
    for rec in newest(records):
        keys = record_keys(rec)
        cells[(tuple(keys[k] for k in GROUP_KEYS), tuple(keys[k] for k in ROW_KEYS), rec["task"]["title"])] = rec
    boards = []
    for values, rows in groupby(wide, key=lambda row: tuple(row[k] for k in GROUP_KEYS)):  # sorted by group
        group = [{**row, "not_below_best": tied_tasks(row, all_tasks, marks)} for row in rows]
        group_dict = dict(zip(GROUP_KEYS, values))
        tasks = [t for t in all_tasks if any(row[t] == row[t] for row in group)]  # NaN != NaN
        extra = [c for c in all_extra if any(row[c] == row[c] for row in group)]
        board = _board(group, tasks, extra, cells, values)
        inputs = inputs_line(long, group_dict)  # prompts and half-precision weights of the group's rows
        note = f"<p class='note'>{esc(inputs)}</p>" if inputs else ""
        boards.append(f"<h2>Protocol: {esc(protocol_line(group_dict))}</h2>{note}{board}"
                      f"{_significance(significance, group_dict)}")
    images = _plots(out_dir)
    plots = [_figure(data, stem) for stem, data in images.items() if stem != "history"]
    paper = papers(out_dir)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>sts-bench report</title><style>{CSS}</style></head><body>
<h1>sts-bench report</h1>
<p class="meta">Built {esc(now_iso())} from {len(records)} result file(s) in runs/ · sts-bench {esc(__version__)} at
commit {esc(str(git_sha())[:12])} · Spearman ×100 of similarity vs gold; small print: 95 % bootstrap interval.
Hover a score for its settings; open "settings" for a row's full record; click a header to sort.</p>
<nav><a href="#boards">Leaderboards</a><a href="#papers">Paper deltas</a><a href="#history">History</a>
<a href="#plots">Plots</a></nav>
<p class="legend">{esc(LEGEND)}</p>
<section id="boards">{''.join(boards) or "<p class='note'>No result yet.</p>"}</section>
<section id="papers"><h2>Paper deltas</h2>{paper or "<p class='note'>No paper-*.csv in this folder.</p>"}</section>
<section id="history"><h2>History</h2>{_history(history, images.get("history"))}</section>
<section id="plots"><h2>Plots</h2>{''.join(plots) or "<p class='note'>No plot.</p>"}</section>
<script>{JS}</script>
</body></html>
"""


def write_report(records: Sequence[Record], marks: set, significance: list[dict[str, Any]], out_dir: Path,
                 history: HistoryReport | None = None) -> Path:
    path = out_dir / "index.html"
    atomic_write_text(path, render(records, marks, significance, out_dir, history))
    return path
