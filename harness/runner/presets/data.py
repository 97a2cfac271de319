"""The papers' protocols as data: ``harness/runner/presets/<name>.toml`` read into plain values.

Kept apart from :mod:`harness.runner.papers.run` (which runs them) so that validating
``--paper NAME`` needs no part of the runner.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import UserError, did_you_mean
from harness.core.kinds import KINDS

# The measures a row may compare: every metric of the task kinds (harness.core.kinds) and DSE's own.
METRICS = (*dict.fromkeys(m for k in KINDS.values() for m in k.metrics), "degradation_pct")
PAPER_DIR = Path(__file__).resolve().parent  # the TOMLs sit beside this module
PAPERS = tuple(sorted(path.stem for path in PAPER_DIR.glob("*.toml")))


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str = ""
    # a model choice: --backbone replaces it, as it replaces the paper's backbone
    model: bool = False


@dataclass(frozen=True)
class Row:
    model: str
    setting: str
    table: str
    method: str
    published: dict[str, float | None]  # task → number (None: no published figure, measured anyway)
    backbone: str | None = None  # a fixed model of this row; None = the paper's backbone
    settings: dict[str, Setting] = field(default_factory=dict)
    options: dict[str, dict[str, Setting]] = field(default_factory=dict)
    # What the row's figures measure: "spearman" (an STS task), a pairclass score
    # (record["scores"]["metrics"][metric]: ap, roc_auc, accuracy, f1, accuracy_best, f1_best) or
    # "degradation_pct" (DSE's measure vs its teacher).
    metric: str = "spearman"
    source: str = ""  # where the figures are read when not the paper's own table (a README ...)
    # The published figure of the row's Avg. line when the paper gives only the average (DSE's
    # abstract: 4.6 % over five GLUE tasks); None: the mean of the per-task figures, if all given.
    average: float | None = None


@dataclass(frozen=True)
class Paper:
    name: str
    title: str
    code: str
    backbone: str
    tasks: tuple[str, ...]
    sources: dict[str, Setting]
    settings: dict[str, Setting]
    options: dict[str, dict[str, Setting]]
    rows: tuple[Row, ...]
    # The rows differ only in model size (PromptEOL's OPT 125M ... 66B): --backbone then replaces
    # every row's model, not only the rows without one.
    rows_take_backbone: bool = False

    def source_of(self, task: str) -> Setting:
        return self.sources.get(task) or self.sources["default"]


def _setting(raw: Any) -> Setting:
    if isinstance(raw, dict) and "value" in raw:
        return Setting(raw["value"], raw.get("source", ""), bool(raw.get("model", False)))
    return Setting(raw)


def _options(raw: dict[str, Any]) -> dict[str, dict[str, Setting]]:
    return {
        method: {name: _setting(value) for name, value in values.items()}
        for method, values in raw.items()
    }


def load_paper(name: str) -> Paper:
    path = PAPER_DIR / f"{name}.toml"
    if name not in PAPERS:
        raise UserError(
            f"--paper {name}: unknown paper{did_you_mean(name, PAPERS)}; known: {', '.join(PAPERS)}"
        )
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    rows = tuple(
        Row(
            model=r["model"],
            setting=r["setting"],
            table=r["table"],
            method=r["method"],
            published={
                task: None if value == "" else float(value)
                for task, value in r["published"].items()
            },
            backbone=r.get("backbone"),
            settings={k: _setting(v) for k, v in r.get("settings", {}).items()},
            options=_options(r.get("options", {})),
            metric=r.get("metric", "spearman"),
            source=r.get("source", ""),
            average=None if r.get("average", "") == "" else float(r["average"]),
        )
        for r in data["rows"]
    )
    for row in rows:
        if row.metric not in METRICS:
            raise UserError(
                f"--paper {name}: row {row.model} ({row.setting}) has metric '{row.metric}'; "
                f"expected one of {', '.join(METRICS)}"
            )
    return Paper(
        name=data["name"],
        title=data["title"],
        code=data["code"],
        backbone=data["backbone"],
        tasks=tuple(data["tasks"]),
        sources={k: _setting(v) for k, v in data["sources"].items()},
        settings={k: _setting(v) for k, v in data["settings"].items()},
        options=_options(data.get("options", {})),
        rows=rows,
        rows_take_backbone=bool(data.get("rows_take_backbone", False)),
    )
