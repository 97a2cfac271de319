"""PNG figures (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


TITLE_FONT: dict[str, Any] = {"size": 9.5, "weight": "bold"}  # a bar chart block's protocol line
DPI = 110  # of every PNG: text is measured at it (hinting makes its width vary with the dpi)
INPUT_KEY = "sts-bench-input"  # PNG text chunk: the digest of what a figure was drawn from
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Text chunks the tool's renderer (:func:`save_figure`) writes: the digest of a
# figure's inputs where it has one (history.png), and matplotlib's own "Software" line on every
# figure.
TOOL_TEXT = (INPUT_KEY.encode("latin-1") + b"\0", b"Software\0Matplotlib version")


def save_figure(fig, path: Path, input_key: str | None = None) -> Path:
    """Lay out, render the PNG to bytes, write it atomically (creating its folder) and free the
    figure: a failure (disk full) leaves the previous good PNG in place, never a truncated one.
    ``input_key`` is stored in the PNG (see :func:`drawn_from`)."""
    import io

    from harness.core.hashing import atomic_write_bytes

    try:
        # a figure drawn with layout="constrained" lays itself out
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(
            buffer, format="png", dpi=DPI, metadata={INPUT_KEY: input_key} if input_key else None
        )
    finally:
        _pyplot().close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def drawn_from(path: Path) -> str | None:
    """The ``input_key`` a PNG written by :func:`save_figure` carries, read from its ``tEXt`` chunks
    without matplotlib; None for a missing, foreign or damaged file (every chunk is checked, as the
    page checks what it embeds: :func:`png_problem`). A figure whose
    inputs have the same key is not drawn again (a warm re-run then needs no matplotlib)."""
    texts: dict[bytes, bytes] = {}
    try:
        problem = png_problem(path.read_bytes(), texts)
    except OSError:
        return None
    key = texts.get(INPUT_KEY.encode("latin-1"))
    return key.decode("latin-1") if problem is None and key is not None else None


def png_problem(data: bytes, texts: dict[bytes, bytes] | None = None) -> str | None:
    """Why ``data`` is not a PNG the tool wrote (None: it is one): the PNG signature, an ``IHDR``
    first, every chunk whole with its CRC right, ``IEND`` last and nothing after it, and a text
    chunk of :data:`TOOL_TEXT`. Its ``tEXt`` chunks go into ``texts`` (keyword: text) when given.

    >>> png_problem(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    'not a PNG (no PNG signature)'
    """
    if not data.startswith(PNG_SIGNATURE):
        return "not a PNG (no PNG signature)"
    offset, first, ours = len(PNG_SIGNATURE), True, False
    while offset + 12 <= len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        crc = data[offset + 8 + length : offset + 12 + length]
        whole = len(body) == length and len(crc) == 4
        if not whole or zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            return f"a damaged PNG (chunk {kind.decode('latin-1')!r} at byte {offset})"
        if first and kind != b"IHDR":
            return "not a PNG (no IHDR chunk first)"
        first = False
        ours = ours or (kind == b"tEXt" and body.startswith(TOOL_TEXT))
        if kind == b"tEXt" and texts is not None:
            keyword, _, text = body.partition(b"\0")
            texts[keyword] = text
        offset += 12 + length
        if kind == b"IEND":
            if offset != len(data):
                return f"a PNG with {len(data) - offset} byte(s) after its end"
            return None if ours else "a PNG sts-bench did not write (no text chunk of its renderer)"
    return "a truncated PNG (no IEND chunk)"


def diagnostics_png(records: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Left: covariance spectrum (singular values / the largest, log scale) per method.
    Right: distribution of the cosine of random sentence pairs per method."""
    import numpy as np

    plt = _pyplot()
    fig, (spectrum, histogram) = plt.subplots(1, 2, figsize=(12, 4.6))
    for record in records:
        diag = record["diagnostics"]
        label = record["method"]["label"]
        values = np.asarray(diag["singular_values"])
        spectrum.plot(np.arange(1, len(values) + 1), values / values[0], label=label, linewidth=1.4)
        edges = np.asarray(diag["cosine_histogram"]["edges"])
        counts = np.asarray(diag["cosine_histogram"]["counts"])
        histogram.stairs(counts / counts.sum(), edges, label=label, linewidth=1.4)
    # Below 1e-3 sits at most a null direction (e.g. LayerNorm outputs lie on a hyperplane): cut it
    # off so the shapes that matter stay readable.
    spectrum.set(
        yscale="log",
        ylim=(1e-3, 1.5),
        xlabel="component",
        ylabel="singular value / largest",
        title=f"{records[0]['task']['title']}: spectrum of centred vectors",
    )
    histogram.set(
        xlabel="cosine of random sentence pairs",
        ylabel="share of pairs",
        xlim=(-1, 1),
        title="pairwise cosine (isotropic vectors centre on 0)",
    )
    for ax in (spectrum, histogram):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def bar_label(row: Mapping[str, Any]) -> str:
    """A bar's label: method · backbone folder name · fit set, wrapped onto lines, never cut."""
    import textwrap

    short = Path(row["backbone"]).name or row["backbone"]  # a folder's name, not its whole path
    text = f"{row['method']} · {short}" + (f" · fit={row['fit_set']}" if row["fit_set"] else "")
    return textwrap.fill(text, 44, break_long_words=False, break_on_hyphens=False)


def leaderboard_png(long: list[dict[str, Any]], path: Path) -> Path:
    """Horizontal bars, one block per protocol group titled with its protocol line (the line that
    heads its table): one panel per task of the group, one bar per (method, backbone, fit set) row,
    with the 95 % bootstrap interval as a whisker. ``long``:
    :func:`~harness.runner.tables.frames.long_rows`."""
    from harness.runner.tables.frames import GROUP_KEYS, protocol_line

    plt = _pyplot()
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in sorted(long, key=lambda row: tuple(str(row[k]) for k in GROUP_KEYS)):
        groups.setdefault(tuple(row[k] for k in GROUP_KEYS), []).append(row)
    blocks = [_bar_block(data) for data in groups.values()]
    width = max(3.2 * len(tasks) + 3.2 for tasks, _, _ in blocks)
    heights = [0.42 * sum(label.count("\n") + 1 for label in rows) + 1.6 for _, rows, _ in blocks]
    fig = plt.figure(figsize=(width, sum(heights)), layout="constrained")
    subfigures = fig.subfigures(len(blocks), 1, height_ratios=heights, squeeze=False)[:, 0]
    for subfigure, (key, data), block in zip(subfigures, groups.items(), blocks):
        _draw_bars(subfigure, data, *block)
        title = f"Protocol: {protocol_line(dict(zip(GROUP_KEYS, key)))}"
        subfigure.suptitle(fitted(title, width - 0.3, **TITLE_FONT), **TITLE_FONT)
    return save_figure(fig, path)


def fitted(text: str, inches: float, **font: Any) -> str:
    """``text`` over as many lines as it takes for each to be at most ``inches`` wide in ``font``
    (measured as the PNG draws it, at :data:`DPI`, not guessed from a character count): broken
    between its " · "-joined settings, and inside one only where it alone is wider (a long path), so
    a protocol title stays inside its figure at any length (issue 52: a fixed split was clipped)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    renderer, prop = RendererAgg(1, 1, DPI), FontProperties(**font)

    def fits(line: str) -> bool:
        return renderer.get_text_width_height_descent(line, prop, False)[0] <= inches * DPI

    lines: list[str] = []
    for part in text.split(" · "):
        if lines and fits(f"{lines[-1]} · {part}"):
            lines[-1] += f" · {part}"
            continue
        while not fits(part):  # one setting wider than the figure: cut where the most still fits
            cut = next((n for n in range(len(part) - 1, 1, -1) if fits(part[:n])), 1)
            lines, part = [*lines, part[:cut]], part[cut:]
        lines.append(part)
    return "\n".join(lines)


def _bar_block(data: list[dict[str, Any]]) -> tuple[list[str], list[str], dict[str, float]]:
    """A group's tasks, its row labels (lowest mean first, so the best is on top) and their
    means."""
    import math

    import numpy as np

    from harness.runner.tables.frames import ordered_tasks

    tasks = ordered_tasks(row["task"] for row in data)
    by_row: dict[str, list[float]] = {}
    for row in data:
        by_row.setdefault(bar_label(row), []).append(row["score"])
    means = {name: float(np.mean(values)) for name, values in by_row.items()}
    rows = sorted(means, key=lambda name: (math.isnan(means[name]), means[name], name))
    return tasks, rows, means


def _draw_bars(
    subfigure,
    data: list[dict[str, Any]],
    tasks: list[str],
    rows: list[str],
    means: dict[str, float],
) -> None:
    import numpy as np

    from harness.runner.records.schema import metric_axis

    axes = subfigure.subplots(1, len(tasks), sharey=True, squeeze=False)[0]
    for ax, task in zip(axes, tasks):
        cells = {bar_label(row): row for row in data if row["task"] == task}
        column = {
            name: np.array([cells[r][name] if r in cells else np.nan for r in rows], dtype=float)
            for name in ("score", "ci_low", "ci_high")
        }
        values = column["score"]
        low, high = values - column["ci_low"], column["ci_high"] - values
        err = np.nan_to_num(np.vstack([low, high]), nan=0.0)
        ax.barh(
            range(len(rows)),
            np.nan_to_num(values),
            xerr=err,
            color="#4C72B0",
            ecolor="#333333",
            capsize=2,
        )
        for y, (value, right) in enumerate(zip(values, np.nan_to_num(values + high, nan=0.0))):
            if np.isfinite(value):  # right of the whisker, so the label never sits on it
                ax.text(max(right, value, 0) + 1.5, y, f"{value:.1f}", va="center", fontsize=8)
        ax.set_title(task)
        ax.set_xlim(min(0, np.nanmin(values) - 5) if np.isfinite(values).any() else 0, 108)
        ax.set_xlabel(metric_axis(data[0]["metric"]))  # one group: one main score
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(rows)), rows, fontsize=8)


def frontier_png(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """plots/frontier.png: per (protocol group, task) a panel of Spearman against bytes per vector
    (log scale): a colour per method, a marker per precision, a line through each (method,
    precision, similarity)'s dimensions, the 95 % intervals as whiskers, the Pareto set ringed and
    joined by a dashed step (rows of :func:`harness.runner.tables.frontier.frontier_rows`)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator

    from harness.runner.tables.frames import GROUP_KEYS, protocol_line

    plt = _pyplot()
    panels: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in rows:
        panels.setdefault((tuple(row[k] for k in GROUP_KEYS), row["task"]), []).append(row)
    n = max(len(panels), 1)
    cols = min(n, 2)
    height = (n + cols - 1) // cols
    fig, axes = plt.subplots(height, cols, figsize=(7.2 * cols, 4.6 * height), squeeze=False)
    methods = sorted({(r["of"], r["backbone"], r["fit_set"]) for r in rows})
    colours = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    markers = {"fp32": "o", "int8": "s", "uint8": "D", "binary": "^", "ubinary": "v", "sparse": "*"}
    for ax, ((group, task), members) in zip(axes.flat, panels.items()):
        lines: dict[tuple, list[Mapping[str, Any]]] = {}
        for row in members:
            key = (row["of"], row["backbone"], row["fit_set"], row["precision"], row["similarity"])
            lines.setdefault(key, []).append(row)
        for (*method, precision, _similarity), points in sorted(lines.items()):
            points = sorted(points, key=lambda r: r["bytes_per_vector"])
            ax.errorbar(
                [r["bytes_per_vector"] for r in points],
                [r["spearman"] for r in points],
                yerr=[[_below(r) for r in points], [_above(r) for r in points]],
                color=colours[tuple(method)],
                marker=markers.get(str(precision), "o"),
                ms=5,
                capsize=2,
                lw=1,
                elinewidth=0.8,
                alpha=0.9,
            )
        front = sorted((r for r in members if r["pareto"]), key=lambda r: r["bytes_per_vector"])
        front_xy = [r["bytes_per_vector"] for r in front], [r["spearman"] for r in front]
        ax.step(
            *front_xy,
            where="post",
            color="black",
            lw=0.8,
            ls="--",
            alpha=0.6,
        )
        ax.scatter(
            *front_xy,
            s=130,
            facecolors="none",
            edgecolors="black",
            linewidths=1.2,
            zorder=5,
        )
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(LogLocator(base=2))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
        ax.set_xlabel("bytes per vector (log scale)")
        ax.set_ylabel("Spearman ×100")
        protocol = fitted(protocol_line(dict(zip(GROUP_KEYS, group))), 6.2, size=8)
        ax.set_title(f"{task}\n{protocol}", fontsize=8)  # a panel is 7.2 in wide, its axes ~6.2
        ax.grid(alpha=0.3)
        shown = sorted({str(r["precision"]) for r in members}, key=list(markers).index)
        handles = [
            Line2D(
                [], [], color=colours[m], lw=2, label=m[0] if not m[2] else f"{m[0]} (fit: {m[2]})"
            )
            for m in methods
            if any((r["of"], r["backbone"], r["fit_set"]) == m for r in members)
        ]
        handles += [
            Line2D([], [], color="grey", marker=markers[p], ls="", label=p)
            for p in shown
            if p in markers
        ]
        handles.append(
            Line2D([], [], color="black", marker="o", mfc="none", ms=9, ls="--", label="Pareto set")
        )
        ax.legend(handles=handles, fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    return save_figure(fig, path)


def _below(row: Mapping[str, Any]) -> float:
    """The whisker under a point: to its interval's low end (0 without an interval)."""
    low = row["ci_low"]
    return float(row["spearman"]) - float(low) if low == low and low is not None else 0.0


def _above(row: Mapping[str, Any]) -> float:
    high = row["ci_high"]
    return float(high) - float(row["spearman"]) if high == high and high is not None else 0.0
