"""``run_bench.py --history``: each method's score over commits, and the commits where it moved.

A *series* is one leaderboard cell over time: the same method row, protocol group, task and task
data (fingerprint). Its points are commits in the order the history first saw them; a commit run
several times counts once, with its latest run. Between two consecutive points a score *moved*
when the change is larger than its noise:

* both runs' per-pair similarities are at hand (the history keeps them) → the paired bootstrap of
  :mod:`harness.core.significance` (the same resamples of pairs for both runs, under the
  protocol's aggregation): moved when p < 0.05;
* otherwise → intervals: moved when the earlier score lies outside the later run's 95 % interval
  (the rule ``--baseline`` uses).

Writes ``plots/history.png`` from the second commit on (one panel per task, a line per method row,
whiskers = 95 % interval, moved points ringed in red; one commit would be a dot per series on an
empty axis: the report page shows its scores as a table) and ``history.md`` (the moves, and the
latest score of every series).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.hashing import atomic_write_text
from harness.runner.history.log import BLOBS, read_gold, read_history, read_similarity
from harness.runner.records.schema import metric_axis
from harness.runner.tables.frames import GROUP_KEYS, ROW_KEYS, ordered_tasks

ALPHA = 0.05
SERIES_KEYS = (*GROUP_KEYS, *ROW_KEYS, "task", "fingerprint")


@dataclass
class Series:
    key: dict[str, str]
    # one history entry per commit, in commit order
    points: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return (
            f"{self.key['method']} · {Path(self.key['backbone']).name or self.key['backbone']}"
            + (f" · fit={self.key['fit_set']}" if self.key["fit_set"] else "")
        )


def commit_label(entry: dict[str, Any]) -> str:
    commit = entry.get("commit")
    if not commit:
        return f"(no git) {entry['date'][:16]}"
    return commit[:8] + ("+" if commit.endswith("+dirty") else "")


def build_series(entries: list[dict[str, Any]]) -> tuple[list[Series], list[str]]:
    """Series of the history, and every commit label in the order the history first saw it."""
    commits: list[str] = []
    by_key: dict[tuple, dict[str, dict[str, Any]]] = {}
    for entry in sorted(entries, key=lambda e: e["date"]):
        label = commit_label(entry)
        if label not in commits:
            commits.append(label)
        # latest run per commit
        by_key.setdefault(tuple(entry[k] for k in SERIES_KEYS), {})[label] = entry
    series = []
    for key, per_commit in by_key.items():
        ordered = sorted(per_commit.items(), key=lambda item: commits.index(item[0]))
        series.append(Series(dict(zip(SERIES_KEYS, key)), [entry for _, entry in ordered]))
    return series, commits


def compare(
    before: dict[str, Any], after: dict[str, Any], blobs: Path, rounds: int, seed: int
) -> dict[str, Any]:
    """The change from ``before`` to ``after`` and whether it exceeds the noise (see the module
    docstring)."""
    from harness.core.significance import paired_bootstrap, scored

    change = after["score"] - before["score"]
    n = after["n_pairs"]
    a = read_similarity(blobs, after["similarity"], n)
    b = read_similarity(blobs, before["similarity"], n)
    gold = read_gold(blobs, after["gold"], n) if after["gold"] == before["gold"] else None
    # a labelled-pairs score (ap, roc_auc...) is compared by its intervals: the paired test below
    # resamples Spearman
    spearman = after.get("metric", "spearman") == "spearman"
    if spearman and a is not None and b is not None and gold is not None:
        values, subsets = gold
        result = paired_bootstrap(
            scored(a, values, subsets, after["aggregation"], rounds, seed),
            scored(b, values, subsets, after["aggregation"], rounds, seed),
        )
        return {
            "change": change,
            "ci95": [result.ci_low, result.ci_high],
            "p_value": result.p_value,
            "test": result.test,
            "moved": bool(result.p_value < ALPHA),
        }
    ci = after.get("ci95")
    if not ci:
        return {
            "change": change,
            "ci95": None,
            "p_value": None,
            "test": "none (no interval)",
            "moved": False,
        }
    low, high = ci[0] - before["score"], ci[1] - before["score"]
    return {
        "change": change,
        "ci95": [low, high],
        "p_value": None,
        "test": "95 % interval",
        "moved": bool(high < 0 or low > 0),
    }


def find_moves(series: list[Series], blobs: Path, rounds: int, seed: int) -> list[dict[str, Any]]:
    moves = []
    for s in series:
        for before, after in zip(s.points, s.points[1:]):
            result = compare(before, after, blobs, rounds, seed)
            if result["moved"]:
                moves.append(
                    {
                        "commit": commit_label(after),
                        "previous": commit_label(before),
                        "date": after["date"],
                        "method": s.key["method"],
                        "backbone": s.key["backbone"],
                        "task": s.key["task"],
                        "before": before["score"],
                        "after": after["score"],
                        **result,
                        "group": {k: s.key[k] for k in GROUP_KEYS},
                    }
                )
    return moves


def history_png(
    series: list[Series], commits: list[str], moves: list[dict[str, Any]], path: Path
) -> Path:
    """Score by commit per task, whiskers the 95 % intervals, red rings on the moves. Not drawn
    again when ``path`` was drawn from the same inputs by the same code (a warm re-run imports no
    matplotlib)."""
    import hashlib

    from harness.core.codekeys import code_digest
    from harness.core.hashing import canonical_json
    from harness.runner.tables import plots
    from harness.runner.tables.plot_worker import draw

    drawn = {
        "series": [
            [label, s.key["metric"], [[commit_label(p), p["score"], p["ci95"]] for p in s.points]]
            for s, label in zip(series, series_labels(series))
        ],
        "commits": commits,
        "moves": sorted([m["method"], m["backbone"], m["task"], m["commit"]] for m in moves),
        "code": code_digest(plots.__name__, __name__),
    }
    key = hashlib.sha256(canonical_json(drawn).encode("utf-8")).hexdigest()
    # drawn_from reads through a link; a link under the name is never kept (the page would show its
    # target): it is drawn again, and the atomic write replaces the link, not its target.
    if not path.is_symlink() and plots.drawn_from(path) == key:
        return path
    return draw(_draw_history, series, commits, moves, path, key)  # by the run's worker, if any


def series_labels(series: list[Series]) -> list[str]:
    """Each series' legend label: its method row, plus its protocol group when the history holds
    several (only the settings that differ between groups: "aggregation=wmean"), so two series
    never share a label."""
    groups = [tuple(s.key[k] for k in GROUP_KEYS) for s in series]
    differ = [i for i, key in enumerate(GROUP_KEYS) if len({g[i] for g in groups}) > 1]
    labels = []
    for s, group in zip(series, groups):
        protocol = ", ".join(f"{GROUP_KEYS[i]}={group[i]}" for i in differ)
        labels.append(s.label + (f" · {protocol}" if protocol else ""))
    return labels


def series_colours(labels: list[str]) -> dict[str, tuple[float, float, float, float]]:
    """One colour per distinct label (the same row has the same colour in every task's panel):
    tab10 up to ten series, tab20 up to twenty, then evenly spaced hues."""
    from matplotlib import colormaps

    distinct = list(dict.fromkeys(labels))
    n = len(distinct)
    if n <= 10:
        colours = [colormaps["tab10"](i) for i in range(n)]
    elif n <= 20:
        colours = [colormaps["tab20"](i) for i in range(n)]
    else:
        colours = [colormaps["hsv"](i / n) for i in range(n)]
    return dict(zip(distinct, colours))


def _draw_history(
    series: list[Series], commits: list[str], moves: list[dict[str, Any]], path: Path, key: str
) -> Path:
    """One panel per task; the legend (one entry per series, shared by the panels) sits below them,
    off the data."""
    import numpy as np

    from harness.runner.tables.plots import _pyplot, save_figure

    plt = _pyplot()
    tasks = ordered_tasks(s.key["task"] for s in series)
    labels = series_labels(series)
    colours = series_colours(labels)
    # The legend is as wide as its longest label (~0.06 in a character at 7.5 pt, plus the swatch):
    # two columns when they fit side by side, else one; the figure widens to hold it, never clipping
    # it.
    longest = max(len(label) for label in labels)
    ncols = 2 if longest <= 48 else 1
    legend_rows = -(-(len(colours) + 1) // ncols)  # the "moved" entry too
    width = max(7.0, 0.9 * len(commits) + 4, ncols * (0.062 * longest + 0.8) + 0.4)
    fig, axes = plt.subplots(
        len(tasks),
        1,
        squeeze=False,
        layout="constrained",
        figsize=(width, 3.4 * len(tasks) + 0.2 * legend_rows + 0.4),
    )
    moved = {(m["method"], m["backbone"], m["task"], m["commit"]) for m in moves}
    handles: dict[str, Any] = {}
    for ax, task in zip(axes[:, 0], tasks):
        for s, label in ((s, label) for s, label in zip(series, labels) if s.key["task"] == task):
            x = np.array([commits.index(commit_label(p)) for p in s.points])
            y = np.array([p["score"] for p in s.points])
            ci = np.array([p["ci95"] or [p["score"]] * 2 for p in s.points], dtype=float)
            line = ax.errorbar(
                x,
                y,
                yerr=np.abs(np.vstack([y - ci[:, 0], ci[:, 1] - y])),
                marker="o",
                markersize=4,
                capsize=2,
                linewidth=1.3,
                color=colours[label],
                label=label,
            )
            handles.setdefault(label, line)
            rings = [
                i
                for i, p in enumerate(s.points)
                if (s.key["method"], s.key["backbone"], task, commit_label(p)) in moved
            ]
            if rings:
                handles["moved"] = ax.scatter(
                    x[rings],
                    y[rings],
                    s=160,
                    facecolors="none",
                    edgecolors="#d62728",
                    linewidths=2,
                    zorder=5,
                )
            line[0].set_zorder(3)
        ax.set_xticks(range(len(commits)), commits, rotation=30, ha="right", fontsize=8)
        ax.set_xlim(-0.5, len(commits) - 0.5)
        # the panel's main score (AP, Spearman...; a task in two groups may have two)
        score = " / ".join(
            dict.fromkeys(metric_axis(s.key["metric"]) for s in series if s.key["task"] == task)
        )
        ax.set(title=f"{task}: {score} by commit (whiskers: 95 % interval)", ylabel=score)
        ax.grid(alpha=0.3)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside lower center",
        ncols=ncols,
        fontsize=7.5,
        frameon=False,
    )
    return save_figure(fig, path, input_key=key)


def move_row(move: dict[str, Any]) -> dict[str, Any]:
    """A move's columns as history.md and the page show them, before its test's own."""
    return {
        "commit": move["commit"],
        "after": move["previous"],
        "method": move["method"],
        "task": move["task"],
        "before": move["before"],
        "now": move["after"],
        "change": move["change"],
    }


def history_markdown(series: list[Series], commits: list[str], moves: list[dict[str, Any]]) -> str:
    from tabulate import tabulate

    def fmt_ci(ci: list[float] | None) -> str:
        return "—" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"

    parts = [
        "# sts-bench history",
        "",
        f"{len(commits)} commit(s), {len(series)} series (method row × protocol × task × data). A "
        "score *moved* when the change beats its noise: paired bootstrap p < 0.05 where both "
        "runs' per-pair similarities are kept, else the earlier score outside the later 95 % "
        "interval.",
        "",
    ]
    rows = [
        {
            **move_row(m),
            "change 95 % CI": fmt_ci(m["ci95"]),
            "p": "—" if m["p_value"] is None else f"{m['p_value']:.3g}",
            "test": m["test"],
        }
        for m in moves
    ]
    parts += [
        "## Moves",
        "",
        tabulate(rows, headers="keys", tablefmt="pipe", floatfmt=".2f")
        if rows
        else "No score moved by more than its noise.",
        "",
    ]
    latest = [
        {
            "method": s.key["method"],
            "task": s.key["task"],
            "commits": len(s.points),
            "latest commit": commit_label(s.points[-1]),
            "score": s.points[-1]["score"],
            "metric": s.key.get("metric", "spearman"),
            "source": s.key["source"],
            "aggregation": s.key["aggregation"],
        }
        for s in series
    ]
    parts += [
        "## Latest score of each series",
        "",
        tabulate(latest, headers="keys", tablefmt="pipe", floatfmt=".2f"),
    ]
    return "\n".join(parts) + "\n"


@dataclass
class HistoryReport:
    series: list[Series]
    commits: list[str]
    moves: list[dict[str, Any]]
    paths: list[Path]
    table: str


def history_report(
    out_dir: Path, rounds: int = 1000, seed: int = 1234, plots: bool = True
) -> HistoryReport:
    """Read the history under ``out_dir``, find the moves, write history.md (and
    plots/history.png)."""
    series, commits = build_series(read_history(out_dir))
    moves = find_moves(series, out_dir / BLOBS, rounds, seed)
    text = history_markdown(series, commits, moves)
    paths = [out_dir / "history.md"]
    atomic_write_text(paths[0], text)
    if plots and len(commits) > 1:  # one commit is one dot per series: the page shows a table
        paths.append(history_png(series, commits, moves, out_dir / "plots" / "history.png"))
    return HistoryReport(series, commits, moves, paths, text)
