"""docs/REFERENCE.md, the published tables, written from the papers' TOMLs (the data ``--paper``
runs against), so the doc and the comparisons cannot disagree.
``python -m harness.runner.presets.reference`` prints it; tests/test_readme.py checks the committed
file equals it.
"""

from __future__ import annotations

from harness.runner.presets.data import PAPERS, Paper, Row, load_paper
from harness.runner.presets.evidence import figure, show

INTRO = """# Published reference tables

The figures sts-bench compares against, one section per paper, exactly as `--paper NAME` reads \
them from
`harness/runner/presets/<name>.toml` (Spearman ×100 unless the row says otherwise; "—" where the \
paper gives
no figure). Each protocol setting carries where it comes from: a table of the paper or a file of the
authors' code. Generated: `python -m harness.runner.presets.reference > docs/REFERENCE.md`
(tests/test_readme.py fails when this file and the TOMLs disagree). How to run a paper's \
protocol, and
what runs offline: [PROTOCOLS.md](PROTOCOLS.md#reproducing-the-papers).
"""


def _row_settings(row: Row) -> str:
    parts = [f"{name}={show(s.value)}" for name, s in row.settings.items()]
    parts += [
        f"{method}.{name}={show(s.value)}"
        for method, opts in row.options.items()
        for name, s in opts.items()
    ]
    if row.backbone:
        parts.insert(0, f"backbone={row.backbone}")
    if row.metric != "spearman":
        parts.append(f"metric={row.metric}")
    if row.average is not None:
        parts.append(f"published Avg.={row.average:.2f}")
    return "; ".join(parts)


def paper_section(paper: Paper) -> str:
    """One paper: its protocol settings with their sources, then its published rows."""
    lines = [
        f"## {paper.name}",
        "",
        f"{paper.title}. Code: `{paper.code}`. Backbone: `{paper.backbone}`.",
        "",
        "| setting | value | from |",
        "|---|---|---|",
    ]
    lines += [
        f"| data of {'every other task' if task == 'default' else task} | {show(s.value)} "
        f"| {s.source} |"
        for task, s in paper.sources.items()
    ]
    lines += [f"| {name} | {show(s.value)} | {s.source} |" for name, s in paper.settings.items()]
    lines += [
        f"| {method}.{name} | {show(s.value)} | {s.source} |"
        for method, opts in paper.options.items()
        for name, s in opts.items()
    ]
    tasks = [t for t in paper.tasks if any(t in row.published for row in paper.rows)]
    # A paper whose rows say where their figures are read (a table's URL, a README) gets the column.
    sourced = any(row.source for row in paper.rows)
    lines += [
        "",
        "| model | setting | method | table | "
        + " | ".join(tasks)
        + " | row settings |"
        + (" figures from |" if sourced else ""),
        "|---|---|---|---|" + "---:|" * len(tasks) + "---|" + ("---|" if sourced else ""),
    ]
    lines += [
        f"| {row.model} | {row.setting} | {row.method} | {row.table} | "
        + " | ".join(figure(row.published.get(t)) for t in tasks)
        + f" | {_row_settings(row)} |"
        + (f" {row.source} |" if sourced else "")
        for row in paper.rows
    ]
    return "\n".join(lines)


def reference_markdown() -> str:
    return INTRO + "".join(f"\n{paper_section(load_paper(name))}\n" for name in PAPERS)


if __name__ == "__main__":
    print(reference_markdown(), end="")
