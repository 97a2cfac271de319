"""The run's calls into plugin methods (each in its worker: :mod:`methods.wall`): building them and
asking their hooks once, up front; the one line that ends a run in which a plugin failed after
every other result was written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.data.splits import unique
from harness.core.errors import EndpointError, PluginError
from harness.runner.execution.context import RunContext
from harness.runner.settings.config import BenchConfig


def build_methods(cfg: BenchConfig, ctx: RunContext) -> None:
    """Build every method of the run into ``ctx`` (the plan takes them from there), a plugin's in
    its worker; then ask each plugin, once, for what the plan and the records read of it
    (``label()``, ``backbone_views()``, ``fit_set_name()``, ``inputs()``, ``selected_on()``), so a
    plugin that raises there, or answers with the wrong type, is one line before anything is
    computed."""
    from methods.guests import is_guest, who

    for name in unique(cfg.methods):
        method = ctx.sibling(name)
        if not is_guest(type(method)):
            continue
        kind = type(method)
        expected: list[tuple[str, Any, str]] = [
            ("label()", method.label, "a non-empty str"),
            ("backbone_views()", method.backbone_views, "a list of View"),
            ("inputs()", method.inputs, "a str or None"),
            ("selected_on()", method.selected_on, "a str or None"),
        ]
        if method.uses_fit_set:
            expected.append(("fit_set_name()", method.fit_set_name, "a fit set's name (str)"))
        for call, hook, answer in expected:
            got = hook()
            if not answers_as_read(call, got):
                raise PluginError(
                    f"{who(kind)}: {call} returned {got!r:.80}; it must return {answer} "
                    "(harness.method_api)"
                )


def answers_as_read(call: str, got: Any) -> bool:
    """Whether a plugin's hook answered with the type the run reads it as."""
    from harness.core.encoding import View

    if call == "backbone_views()":
        return isinstance(got, list | tuple) and all(isinstance(view, View) for view in got)
    if call in ("label()", "fit_set_name()"):
        return isinstance(got, str) and bool(got)
    return got is None or isinstance(got, str)


# What leaves a method out of a run whose other methods are still scored and written: a plugin
# misbehaving (exit 5), or an endpoint failing while a method encodes with it (exit 6).
Failure = PluginError | EndpointError


def what_failed(err: Failure) -> str:
    """The error's line without the plugin's name and file (the console line shows the label)."""
    return str(err).partition("): ")[2] or str(err)


def plugin_failure(
    broken: list[tuple[str, str, Failure]], refused: list[str], out: Path, wrote: bool
) -> Failure:
    """One line for every plugin failure of the run: the first one's message, then which cells were
    not recorded and where the others are when the run ``wrote`` any (and any score refused as
    undefined); of the first one's type (an endpoint's failure keeps its exit code)."""
    cells = "; ".join(f"{label} on {task}" for label, task, _ in broken)
    undefined = (
        f"; Spearman undefined for {'; '.join(refused)}, not recorded either" if refused else ""
    )
    written = f"; the other results were written to {out / 'runs'}" if wrote else ""
    kind = EndpointError if isinstance(broken[0][2], EndpointError) else PluginError
    return kind(f"{broken[0][2]} (not recorded: {cells}{undefined}{written})")
