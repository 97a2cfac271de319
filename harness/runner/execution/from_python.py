"""``harness.evaluate``: score an encoder object from Python through the run itself.

The object becomes a method (:func:`harness.runner.execution.encoders.encoder_method`) registered in
this process under the name the user gives, for the duration of the call, and
:func:`harness.runner.execution.run.run` runs it, beside any built-in ``methods``, exactly as the
CLI runs a method: one record per (method, task), bootstrap intervals, paired tests and ★ marks in
the leaderboards, leakage marks, the page. Nothing here scores; this module only turns arguments
into a :class:`BenchConfig`.

Choices, and why:

* ``output_dir`` is required: a library call must not drop ``results/`` into whatever folder the
  interpreter happens to run in.
* Vectors are cached only under a ``cache_key`` the user names (see :mod:`.encoders`); without one
  the object encodes again in every call.
* The vectors scored are exported by default to ``<output_dir>/embeddings`` (they are the point of
  bringing an encoder): ``outcome.embeddings(name, task)``; ``export_embeddings=None`` turns it off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import UserError, did_you_mean
from harness.runner.settings.config import BenchConfig
from harness.runner.settings.declaration import by_name, evaluate_settings
from harness.runner.settings.validate import check_fields

if TYPE_CHECKING:
    from harness.runner.execution.run import RunOutcome

# The settings evaluate has as arguments of its own (methods: the built-ins beside the encoder).
OWN = ("methods", "tasks", "output_dir")


def accepted_settings() -> tuple[str, ...]:
    """The keyword settings :func:`evaluate` takes: every run-wide setting declared in
    ``BenchConfig`` but its own arguments and the modes (``dry_run``, ``history``, ``paper``)."""
    return evaluate_settings(BenchConfig, OWN)


def default_name(encoder: Any) -> str:
    """The class name in kebab case: ``MyEncoder`` → ``my-encoder``."""
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "-", type(encoder).__name__).lower().replace("_", "-")


def evaluate(
    encoder: Any,
    *,
    output_dir: str | Path,
    tasks: str | Sequence[str] = ("stsb",),
    name: str | None = None,
    cache_key: str | None = None,
    methods: str | Sequence[str] = (),
    **settings: Any,
) -> RunOutcome:
    """Score ``encoder`` (anything with ``encode(list[str]) -> array-like (n, d)``) on ``tasks``,
    beside the built-in ``methods``, writing records, leaderboards and exports under ``output_dir``.

    ``name``: its leaderboard row (default: the class name in kebab case). ``cache_key``: the
    version of the encoder its vectors are cached under (None: not cached). ``settings``: any
    run-wide setting (:func:`accepted_settings`, listed at the end of this docstring), checked as
    the command line checks it; a folder may be a ``Path``.

    >>> outcome = harness.evaluate(model, tasks=["stsb"], output_dir="out", cache_key="v1",
    ...                            methods=["avg"])                          # doctest: +SKIP
    >>> outcome.scores[["method", "task", "spearman", "ci_low", "ci_high"]]  # doctest: +SKIP
    """
    from harness.runner.execution.encoders import encoder_method
    from harness.runner.execution.run import run
    from methods import PROCESS

    if not output_dir:
        raise UserError(
            "harness.evaluate: output_dir is required (records, leaderboards and exports go there)"
        )
    name = name if name is not None else default_name(encoder)
    method = encoder_method(encoder, name, cache_key)
    allowed = accepted_settings()
    for key in settings:
        if key not in allowed:
            names = sorted(allowed)
            raise UserError(
                f"harness.evaluate: unknown setting '{key}'{did_you_mean(key, names)}; "
                f"settings are: {', '.join(names)}"
            )
    # folders as paths
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()}
    check_fields(BenchConfig, settings, "harness.evaluate")  # by type, as a config file's are
    builtins = [methods] if isinstance(methods, str) else list(methods)
    task_names = (tasks,) if isinstance(tasks, str) else tuple(tasks)
    settings.setdefault("export_embeddings", str(Path(output_dir) / "embeddings"))
    cfg = replace(
        BenchConfig(),
        **settings,
        methods=(name, *[m for m in builtins if m != name]),
        tasks=task_names,
        output_dir=str(output_dir),
    )
    cfg = replace(cfg, explicit=frozenset(settings) | {"methods", "tasks", "output_dir"})
    cfg = cfg.validate()
    claim_cache_key(cfg, name, cache_key, encoder)
    # Known to this run only, in a layer over the process registry (which is left as it was): the
    # process keeps no reference to the encoder (a model), and another call sees none of it.
    return run(cfg, registry=PROCESS.layer(method))


def claim_cache_key(cfg: BenchConfig, name: str, cache_key: str | None, encoder: Any) -> None:
    """Refuse a ``cache_key`` whose vectors another encoder made. The vectors of (name, cache_key)
    are served to whatever object comes with them (an object's code cannot be digested), so a second
    encoder class under the same name and key would be recorded as itself while scoring the first
    one's vectors, or a mix, for the sentences the first never saw. The first class to use a key is
    kept in the cache beside the vectors, before they are written (a run that fails midway has
    already claimed them); another class is one line, and a new key (or name) is the fix. The same
    class again (a re-run, a notebook cell run twice) is served, as documented: the key is the
    user's word for the encoder's version."""
    if cache_key is None:
        return
    import contextlib

    from harness.core.artifacts import ArtifactStore
    from harness.runner.execution.encoders import ObjectEncoder, describe

    # Keyed and code-digested as the encoder's vector store (encoders.ObjectEncoder), so the claim
    # lives exactly as long as the vectors it speaks for.
    folder = ArtifactStore(cfg.cache_dir).folder(
        "python-encoders", {"name": name, "cache_key": cache_key}, code=(ObjectEncoder.__module__,)
    )
    who = describe(encoder)
    if folder.complete():
        owner = folder.meta()["info"].get("encoder")
        if owner != who:
            raise UserError(
                f"harness.evaluate: cache_key={cache_key!r} of '{name}' holds the vectors of "
                f"{owner}, not of {who}; give this encoder its own cache_key (or name)"
            )
        return
    # A cache that takes no claim takes no vectors either: the run's own cache check says why, in
    # one line.
    with contextlib.suppress(OSError):
        folder.commit({}, {"encoder": who})


def _settings_doc() -> str:
    """The settings :func:`evaluate` takes, one line each from its declaration: name, default, the
    flag it is on the command line and that flag's help."""
    lines = []
    for s in (by_name(BenchConfig)[name] for name in accepted_settings()):
        text = (s.help() if callable(s.help) else s.help).replace("%%", "%")
        lines.append(f"    * ``{s.name}`` = {s.shown or repr(s.default)} ({s.flag}): {text}")
    return "\n    Settings (from ``BenchConfig``'s declarations):\n\n" + "\n".join(lines) + "\n"


evaluate.__doc__ = (evaluate.__doc__ or "") + _settings_doc()
