"""Methods from outside the repo: a ``file.py:Class`` or ``module:Class`` reference, and the
``sts_bench.methods`` entry point group of installed packages (docs/PLUGINS.md).

The registry (:mod:`methods`) asks here only for a name it does not hold itself, or when it lists
every method, so a run of built-in methods never reads package metadata nor imports a plugin.
Every way a plugin can be wrong before it runs is one line that says which plugin, what is wrong
and how to fix it: it does not import, exits or prints while it imports, or its name is taken —
a :class:`UserError` (exit 2); its class breaks the method contract (harness.method_api:
:func:`check_class`, :func:`check_contract`) — a :class:`PluginError` naming the method and its
file (exit 5), raised when the class is registered, before the run computes anything.

Once loaded, a plugin method is a guest of the run in a worker process (:mod:`methods.wall`): what
it prints goes to stderr, and whatever it does wrong is one :class:`PluginError` line (exit 5).

A plugin file is imported as the module ``sts_bench_file_<stem>`` (``my-method.py`` →
``sts_bench_file_my_method``), registered in ``sys.modules`` with the file as its origin: that is
how :mod:`harness.core.codekeys` finds its source, so the file's code is part of the key of
everything the method caches, and editing it recomputes its fits and vectors. The name holds the
stem, not the folder, so two checkouts sharing a cache share the plugin's entries too.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import PluginError, UserError
from methods.guests import importing_as, what_happened, who

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from harness.core.api import Method

# pyproject.toml: [project.entry-points."sts_bench.methods"] NAME = "module:Class"
GROUP = "sts_bench.methods"
FILE_PREFIX = "sts_bench_file_"
# A method's name is a --methods item, the METHOD of --set METHOD.OPTION=VALUE and a [METHOD] table.
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def is_reference(text: str) -> bool:
    """``path/to/file.py:Class`` or ``package.module:Class`` (anything with a colon)."""
    return ":" in text


def broken(cls: type, where: str, what: str) -> PluginError:
    """The one line of a contract violation: ``where`` (how the class came in), what is wrong and
    what to add, then the method and its file."""
    return PluginError(f"{where}: {what} ({who(cls)}: the method contract, harness.method_api)")


def check_class(cls: object, where: str) -> type[Method]:
    """``cls`` as a method class, or one line saying what it lacks (``where`` names the plugin);
    what its base class needs of it is :func:`check_contract`'s, once its name is known to be
    free."""
    from harness.core.api import EmbeddingMethod, PairScoringMethod

    if not (isinstance(cls, type) and issubclass(cls, EmbeddingMethod | PairScoringMethod)):
        what = (
            f"{cls!r} is not a method class; derive it from EmbeddingMethod (encode) or "
            "PairScoringMethod (score_pairs) of harness.method_api (docs/PLUGINS.md)"
        )
        raise broken(cls, where, what) if isinstance(cls, type) else UserError(f"{where}: {what}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not NAME.match(name):
        raise broken(
            cls,
            where,
            f'{cls.__name__}.name = {name!r}; set a class attribute name = "my-method" '
            "(lower case letters, digits, - and _): it is what --methods and --set use",
        )
    if not isinstance(getattr(cls, "summary", None), str) or not cls.summary.strip():
        raise broken(
            cls,
            where,
            f'{cls.__name__} has no summary; set a class attribute summary = "one line" '
            "(shown by --list)",
        )
    return cls


def check_contract(cls: type[Method], where: str) -> None:
    """What a method class must provide beyond its name, checked when it is registered (the
    registry's ``add``), so a plugin that cannot work is refused with one line before the run
    computes anything, rather than failing halfway with an error from the harness's own code (a
    KeyError read as a bug in sts-bench): its base's ``kind``, options that are :class:`Option` s
    with one name each and a default of their type (among their choices), the call that makes its
    result, a ``fit`` when it fits, a post-processor's ``view`` option. The contract is written out
    in :mod:`harness.method_api`; every built-in keeps it (tests/test_method_contract.py)."""
    _check_kind(cls, where)
    _check_options(cls, where)
    _check_contract(cls, where)


def _check_kind(cls: type[Method], where: str) -> None:
    """``kind`` is the base's: records and tables file the method by it."""
    from harness.core.api import EmbeddingMethod, PairScoringMethod

    base = EmbeddingMethod if issubclass(cls, EmbeddingMethod) else PairScoringMethod
    if getattr(cls, "kind", None) != base.kind:
        raise broken(
            cls,
            where,
            f"{cls.__name__}.kind = {getattr(cls, 'kind', None)!r}; a {base.__name__}'s "
            f"kind is {base.kind!r}: remove the attribute (the base sets it)",
        )


# Option types whose defaults are checked against them (a callable type of the plugin's own is not).
PLAIN_TYPES: tuple[type, ...] = (str, int, float, bool)


def _default_fits(option: Any) -> bool:
    """Whether an option's default is a value of its type (an int for a float; None means unset)."""
    kind, default = option.type, option.default
    if default is None or kind not in PLAIN_TYPES:
        return True
    if kind is float:
        return isinstance(default, int | float) and not isinstance(default, bool)
    if kind is int:
        return isinstance(default, int) and not isinstance(default, bool)
    return isinstance(default, kind)


def _check_options(cls: type[Method], where: str) -> None:
    """``options`` is a sequence of :class:`Option` with one name each (a name is a ``--set`` key),
    each default a value of its type and one of its choices."""
    from harness.core.api import Option

    options = cls.options
    if not isinstance(options, tuple | list):
        raise broken(
            cls,
            where,
            f"{cls.__name__}.options is {type(options).__name__}, not a tuple; write "
            "options = (Option(name, default, help), ...) with Option from harness.method_api",
        )
    seen: set[str] = set()
    for i, option in enumerate(options):
        if not isinstance(option, Option):
            raise broken(
                cls,
                where,
                f"{cls.__name__}.options[{i}] is {option!r:.80}, not an Option; write "
                "Option(name, default, help) with Option from harness.method_api",
            )
        if not isinstance(option.name, str) or not option.name.isidentifier():
            raise broken(
                cls,
                where,
                f"{cls.__name__} has an option named {option.name!r}; an option's name is "
                "a Python identifier (it is the OPTION of --set METHOD.OPTION=VALUE)",
            )
        if option.name in seen:
            auto = (
                " (view methods get prompt and prompt2 added for them: define both or neither)"
                if option.name in ("prompt", "prompt2")
                else ""
            )
            raise broken(
                cls,
                where,
                f"{cls.__name__} has two options named '{option.name}'{auto}; give each "
                "option its own name",
            )
        seen.add(option.name)
        if not _default_fits(option):
            raise broken(
                cls,
                where,
                f"{cls.__name__}'s option '{option.name}' has default {option.default!r} "
                f"of type {type(option.default).__name__}, not {option.type.__name__}; "
                "give it a default of its type (or type= the default's)",
            )
        if (
            option.choices is not None
            and option.default not in option.choices
            and option.name != "view"
        ):
            raise broken(
                cls,
                where,
                f"{cls.__name__}'s option '{option.name}' has default {option.default!r}, "
                f"not one of its choices {tuple(option.choices)!r}; add it to the choices "
                "or choose a default among them",
            )


def _check_contract(cls: type[Method], where: str) -> None:
    """What the class's base needs of it: the method that makes its result, a ``fit`` when it fits,
    and a post-processor's ``view`` option (its base reads it to build the spec)."""
    from harness.core.api import (
        EmbeddingMethod,
        Method,
        PairScoringMethod,
        SparseEmbeddingMethod,
    )
    from methods.pooling import BASE_VIEWS, PostProcessor

    name = cls.__name__
    if (
        issubclass(cls, SparseEmbeddingMethod)
        and cls.encode_sparse is SparseEmbeddingMethod.encode_sparse
    ):
        raise broken(
            cls,
            where,
            f"{name} defines no encode_sparse(sentences); a SparseEmbeddingMethod returns "
            "SparseVectors from it (docs/PLUGINS.md)",
        )
    if (
        issubclass(cls, EmbeddingMethod)
        and cls.encode is EmbeddingMethod.encode
        and cls.encode_sides is EmbeddingMethod.encode_sides
    ):
        raise broken(
            cls,
            where,
            f"{name} defines no encode(sentences); an EmbeddingMethod returns float32 "
            "(n, d) vectors from encode (docs/PLUGINS.md)",
        )
    if issubclass(cls, PairScoringMethod) and cls.score_pairs is PairScoringMethod.score_pairs:
        raise broken(
            cls,
            where,
            f"{name} defines no score_pairs(s1, s2); a PairScoringMethod returns one score "
            "per pair from it (docs/PLUGINS.md)",
        )
    if cls.uses_fit_set and cls.fit is Method.fit:
        raise broken(
            cls,
            where,
            f"{name} has uses_fit_set = True but no fit(fit_set); define fit (set "
            'self.fit_info = {"fit_set": fit_set.describe(), ...} there), or drop '
            "uses_fit_set",
        )
    if issubclass(cls, PostProcessor):
        view = next((o for o in cls.options if o.name == "view"), None)
        fix = (
            'add Option("view", "avg", "pooled view to transform", choices=BASE_VIEWS) to its '
            f"options (BASE_VIEWS from harness.method_api: {', '.join(BASE_VIEWS)})"
        )
        if view is None:
            raise broken(
                cls, where, f"{name} derives from PostProcessor but has no 'view' option; {fix}"
            )
        choices = tuple(view.choices or ())
        if not choices or not set(choices) <= set(BASE_VIEWS) or view.default not in choices:
            raise broken(
                cls,
                where,
                f"{name}'s 'view' option (default {view.default!r}, choices "
                f"{view.choices!r}) must choose among BASE_VIEWS, its default one of them; "
                f"{fix}",
            )


def load_reference(text: str) -> type[Method]:
    """The class a ``file.py:Class`` or ``module:Class`` reference names."""
    target, _, class_name = text.rpartition(":")
    where = f"--methods {text}"
    if not target or not class_name.isidentifier():
        raise UserError(f"{where}: expected path/to/file.py:ClassName or package.module:ClassName")
    if target.endswith(".py") or "/" in target or "\\" in target:
        module = _import_file(Path(target).expanduser(), where)
    else:
        module = _import_module(target, where)
    if not hasattr(module, class_name):
        from harness.core.errors import did_you_mean

        classes = [name for name, value in vars(module).items() if isinstance(value, type)]
        raise UserError(
            f"{where}: {target} defines no {class_name}{did_you_mean(class_name, classes)}; "
            f"its classes: {', '.join(classes) or 'none'}"
        )
    return check_class(getattr(module, class_name), where)


def _import_file(path: Path, where: str) -> object:
    if not path.is_file():
        from harness.core.hashing import not_a_file

        reason = not_a_file(path)  # a folder or a FIFO named like a file is called what it is
        what = f"no such file {path}" if reason == "no such file" else f"{path} {reason}"
        raise UserError(
            f"{where}: {what} (relative to {Path.cwd()}); give the path of the plugin's .py file"
        )
    if path.suffix != ".py":
        raise UserError(f"{where}: {path} is not a .py file; a plugin file is Python source")
    module_name = FILE_PREFIX + re.sub(r"\W", "_", path.stem)
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        origin = Path(getattr(loaded, "__file__", "") or "")
        if origin.resolve() == path.resolve():
            return loaded
        raise UserError(
            f"{where}: another plugin file named {path.name} ({origin}) is already loaded in this "
            "process; rename one of them"
        )
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{where}: {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # before running it: dataclasses and codekeys look the module up
    sys.modules[module_name] = module
    try:
        with importing_as(f"plugin {path.name}: "):
            spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[module_name]
        raise
    # SystemExit too: a file that exits on import must not end the run with 0
    except BaseException as err:
        del sys.modules[module_name]
        if isinstance(err, SystemExit):
            raise UserError(
                f"{where}: importing {path} {what_happened(err)} at {_failing_line(err, path)}; "
                "a plugin file only defines its classes: move the exit under "
                'if __name__ == "__main__":'
            ) from None
        raise UserError(
            f"{where}: importing {path} failed at {_failing_line(err, path)}: "
            f"{type(err).__name__}: {err}; fix the file (or run it with python to see the "
            "traceback)"
        ) from None
    return module


def _import_module(name: str, where: str) -> object:
    try:
        with importing_as(f"plugin {name}: "):
            return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and (name == err.name or name.startswith(err.name + ".")):
            raise UserError(
                f"{where}: no module {name} on the Python path; install its package, add its "
                "folder to PYTHONPATH, or give a file: path/to/file.py:ClassName"
            ) from None
        raise UserError(
            f"{where}: importing {name} failed: {type(err).__name__}: {err}; install what it needs"
        ) from None
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # SystemExit too (see _import_file)
        raise UserError(
            f"{where}: importing {name} failed: {what_happened(err)}; fix the module"
        ) from None


def _failing_line(err: BaseException, path: Path) -> str:
    """``file.py:LINE`` of the deepest frame of ``err`` inside the plugin file (its syntax error's
    line)."""
    if isinstance(err, SyntaxError) and err.lineno is not None:
        return f"{path}:{err.lineno}"
    frames = [
        f
        for f in traceback.extract_tb(err.__traceback__)
        if Path(f.filename).resolve() == path.resolve()
    ]
    return f"{path}:{frames[-1].lineno}" if frames else str(path)


def entry_points() -> dict[str, EntryPoint]:
    """The installed ``sts_bench.methods`` entry points by name (package metadata only: nothing is
    imported)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=GROUP)}


def load_entry_point(ep: EntryPoint) -> type[Method]:
    """The class an installed entry point names; its name must be the method's name."""
    package = ep.dist.name if ep.dist is not None else None
    where = f"plugin '{ep.name}' ({GROUP} entry point {ep.value!r}" + (
        f" of {package})" if package else ")"
    )
    try:
        with importing_as(f"plugin {ep.name}: "):
            cls = ep.load()
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # SystemExit too (see _import_file)
        fix = (
            f"reinstall {package} or uninstall it (pip uninstall {package})"
            if package
            else "reinstall or uninstall the package that declares it"
        )
        raise UserError(f"{where} failed to import: {what_happened(err)}; {fix}") from None
    cls = check_class(cls, where)
    if cls.name != ep.name:
        raise UserError(
            f"{where}: the class is named '{cls.name}'; the entry point's name must be the "
            "method's "
            f'name: {cls.name} = "{ep.value}" in {package or "its package"}\'s pyproject.toml'
        )
    return cls


# -- a plugin as a guest of the run ---------------------------------------------------------------
