"""``results/index.html``: the report page, one self-contained file rebuilt from ``runs/`` like the
other leaderboards.

It holds every protocol group's leaderboard (score, 95 % interval, ★ not significantly below the
best, † ‡ marks; a caption naming its score), each group's paired tests, the quality-cost frontier
where a row is a compressed vector setting (:mod:`.frontier_tables`), each prompt set's spread
(``prompts.csv``, :func:`prompt_sets`), paper deltas from ``paper-*.csv`` where present, the
history of scores by commit (``history.jsonl``) and every plot under ``plots/``. Each score's
settings show on hover (its ``title``) and in full under the row's "settings" expander; every table
sorts by a click on its header. CSS and JavaScript are inlined from the package's static files
(:mod:`.assets`) and plots are ``data:`` URIs, so nothing is fetched when the page is viewed; the
page embeds only PNGs this tool wrote (:mod:`.pngs`).

The markup is Jinja2 templates (``templates/page.html.j2`` and its parts, ``parts.html.j2``), fed
plain data (:mod:`.boards`, :mod:`.paper_deltas`, :mod:`.cells`) and rendered with autoescape on and
undefined variables an error: a method, task, prompt, path or CSV cell reaches the page escaped
whatever it holds, with no escape call to forget. The only unescaped text is the package's own CSS
and JavaScript (:func:`.assets.static_text` says why).
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup

from harness.core.hashing import atomic_write_text
from harness.runner.history.moves import HistoryReport, commit_label, move_row, series_labels
from harness.runner.page import assets
from harness.runner.page.boards import Board, board_table, paired_tests
from harness.runner.page.cells import Table, signed_class, significance_class, table
from harness.runner.page.frontier_tables import frontier_section
from harness.runner.page.paper_deltas import MODEL_DIFFERS, NOT_RUN, PAPER_COLUMNS, papers
from harness.runner.page.pngs import Figure, plots, png_uri
from harness.runner.records.lock import read_inside
from harness.runner.records.schema import main_score, metric_axis
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
from harness.runner.tables.frontier import PARETO_MARK
from harness.runner.tables.leaderboard import LEGEND, TIED, inputs_line, protocol_line, with_ranks
from harness.runner.tables.prompt_spread import of_set

if TYPE_CHECKING:
    from harness.runner.records.schema import Record

# The paper runner imports the first two from here (harness/runner/papers/run.py); they live in
# .paper_deltas.
__all__ = [
    "MODEL_DIFFERS",
    "NOT_RUN",
    "PAPER_COLUMNS",
    "environment",
    "part",
    "write_report",
]
HISTORY_CAPTION = " by commit; red rings: moved by more than its noise"
ONE_COMMIT = ", the only one so far (95 % interval); the plot by commit is drawn from the second"
log = logging.getLogger("sts_bench.report")


@dataclass(frozen=True)
class History:
    """The history section: commit and series counts, the moves beyond noise (None: none moved),
    the history plot (None: not drawn or not embeddable), and with one commit its scores as a
    table instead of the plot (None: several commits)."""

    commits: int
    series: int
    moves: Table | None
    figure: Figure | None
    scores: Table | None = None


@cache
def environment() -> jinja2.Environment:
    """The templates of ``templates/``, read from the installed package: every ``{{ value }}``
    escaped (``autoescape=True``: every template here is HTML), an undefined name or attribute an
    error rather than an empty string (``StrictUndefined``)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("harness.runner.page", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.globals.update(tied=TIED, alpha=ALPHA, pareto_mark=PARETO_MARK)
    return env


def part(name: str, *args: Any) -> Markup:
    """One macro of ``parts.html.j2`` rendered alone, e.g. ``part("papers", papers(out_dir))``."""
    macro = getattr(environment().get_template("parts.html.j2").module, name)
    return Markup(macro(*args))  # a macro's output is already escaped markup


def history_section(history: HistoryReport | None, png: bytes | None) -> History | None:
    """The history section's data; None when there is no history yet. With one commit, a table of
    its scores (and no plot: a dot per series on a mostly empty axis, issue 52)."""
    if history is None or not history.series:
        return None
    rows = [{**move_row(m), "p": m["p_value"], "test": m["test"]} for m in history.moves]
    # Every move beat its noise: its change is coloured by sign.
    moves = table(
        rows,
        ("before", "now", "change", "p"),
        colour=lambda row, c: signed_class(row[c]) if c == "change" else "",
    )
    drawn = " / ".join(dict.fromkeys(metric_axis(s.key["metric"]) for s in history.series))
    if len(history.commits) == 1:
        latest = []
        for label, s in zip(series_labels(history.series), history.series):
            low, high = s.points[-1]["ci95"] or (math.nan, math.nan)
            score = {"value": s.points[-1]["score"], "ci_low": low, "ci_high": high}
            latest.append({"series": label, "task": s.key["task"], **score})
        caption = f"{drawn} at commit {commit_label(s.points[-1])}{ONE_COMMIT}"
        scores = replace(table(latest, ("value", "ci_low", "ci_high")), caption=caption)
        return History(1, len(history.series), None, None, scores)
    figure = Figure(drawn + HISTORY_CAPTION, png_uri(png)) if png is not None else None
    return History(len(history.commits), len(history.series), moves if rows else None, figure)


SPREAD = tuple("task n_prompts min worst median max best delta ci_low ci_high".split())


def prompt_sets(out_dir: Path, records: Sequence[Record]) -> list[tuple[str, Table]]:
    """``prompts.csv`` as its step wrote it (:mod:`harness.runner.tables.prompt_spread`: the page
    resamples nothing): per set its heading (method · backbone) and its table (a row per task and
    the Avg., captioned with the score and the protocol); none when no record is a prompt of a set
    (a file left from earlier records is not shown) or the file cannot be read (one warning)."""
    if not any(of_set(rec) for rec in records):
        return []
    path, keys = out_dir / "prompts.csv", ("method", "backbone", "fit_set", *GROUP_KEYS)
    try:
        lines = list(csv.DictReader(io.StringIO(read_inside(path, out_dir).decode(), newline="")))
    except (OSError, ValueError, csv.Error) as err:
        log.warning("report: %s cannot be read (%s); left out of the page", path, err)
        return []
    found = []
    for _, group in groupby(lines, key=lambda r: [r[k] for k in keys]):  # as prompts.md's tables
        first, *_ = members = list(group)
        spread = table(
            [{**{c: r[c] for c in SPREAD}, "p": r["p_value"]} for r in members],
            ("min", "median", "max", "delta", "ci_low", "ci_high", "p"),
            colour=lambda row, c: significance_class(row[c], row["p"]) if c == "delta" else "",
        )
        fit = f" · fit set {first['fit_set']}" if first["fit_set"] else ""
        name = f"{first['method']} · {Path(first['backbone']).name}{fit}"
        score = f"{metric_axis(first['metric'])} over the prompts · protocol: "
        line = f"{protocol_line(first)} · prompt set sha256 {first['sha256'][:12]}"
        found.append((name, replace(spread, caption=score + line)))
    return found


def boards(
    records: Sequence[Record],
    marks: set,
    significance: list[dict[str, Any]],
    long: list[dict[str, Any]] | None = None,
    ranks: dict[tuple, dict[str, float]] | None = None,
) -> list[Board]:
    """One :class:`Board` per protocol group of ``records`` (the newest record of each cell);
    ``long``: their long rows, when the caller has them already; ``ranks``: each row's rank and
    Avg. interval (:func:`harness.runner.tables.comparisons.compare`)."""
    long = long_rows(records)[0] if long is None else long
    wide, all_tasks, all_extra = wide_rows(long)
    cells = {}
    for rec in newest(records):
        keys = record_keys(rec)
        group_key, row_key = (tuple(keys[k] for k in GROUP_KEYS), tuple(keys[k] for k in ROW_KEYS))
        cells[(group_key, row_key, rec["task"]["title"])] = rec
    found = []
    # wide is sorted by group
    for values, rows in groupby(wide, key=lambda row: tuple(row[k] for k in GROUP_KEYS)):
        group = with_ranks(
            [{**row, "not_below_best": tied_tasks(row, [*all_tasks, AVG], marks)} for row in rows],
            ranks,
        )
        group_dict = dict(zip(GROUP_KEYS, values))
        tasks = [t for t in all_tasks if any(row[t] == row[t] for row in group)]  # NaN != NaN
        extra = [c for c in all_extra if any(row[c] == row[c] for row in group)]
        found.append(
            Board(
                protocol_line(group_dict),
                inputs_line(long, group_dict),  # prompts and half-precision weights
                board_table(group, tasks, extra, cells, values),
                paired_tests(significance, group_dict),
            )
        )
    return found


def write_report(
    records: Sequence[Record],
    marks: set,
    significance: list[dict[str, Any]],
    out_dir: Path,
    history: HistoryReport | None = None,
    ranks: dict[tuple, dict[str, float]] | None = None,
) -> Path:
    """Write the whole page to ``out_dir/index.html`` (atomically) and return its path; ``ranks``:
    each row's rank and Avg. interval."""
    from harness.core import __version__
    from harness.runner.records.store import git_sha, now_iso

    images = plots(out_dir)
    long = long_rows(records)[0]
    frontier = frontier_section(long, significance, images.get("frontier"))
    # The frontier plot shows in its section; without one (no compressed setting) it is a plot
    # like any other.
    own = {"history", "frontier"} if frontier is not None else {"history"}
    text = (
        environment()
        .get_template("page.html.j2")
        .render(
            css=assets.css(),
            js=assets.js(),
            built=now_iso(),
            count=len(records),
            version=__version__,
            commit=str(git_sha())[:12],
            legend=LEGEND,
            boards=boards(records, marks, significance, long, ranks),
            frontier=frontier,
            papers=papers(out_dir, records),
            prompts=prompt_sets(out_dir, records),
            history=history_section(history, images.get("history")),
            plots=[
                Figure(_drawn(stem, records), png_uri(d))
                for stem, d in images.items()
                if stem not in own
            ],
        )
    )
    atomic_write_text(out_dir / "index.html", text)
    return out_dir / "index.html"


def _drawn(stem: str, records: Sequence[Record]) -> str:
    """A plot's caption: the leaderboard chart names the scores it draws (``AP ×100``)."""
    scores = " / ".join(dict.fromkeys(metric_axis(main_score(r)) for r in records))
    return f"{stem}: {scores}" if stem == "leaderboard" else stem
