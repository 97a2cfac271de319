"""Digests of the code that makes a cached result, so a warm cache never hides a changed method.

A fitted whitening, trained flow weights, cached vectors, bootstrap resamples and memoised reports
are each keyed on their inputs *and* on :func:`code_digest` of the modules that compute them: the
sha256 of every first-party module those modules import at run time, transitively, each taken as
its syntax tree without docstrings and type annotations. Editing a comment, a docstring, a type
hint or the layout of a file changes nothing; editing an expression, a constant or a helper the
code calls recomputes the result.

"First-party" is the packages of the modules asked about plus ``harness`` and ``methods``: a
plugin method's digest covers its own package and the sts-bench code it calls. Imports under
``if TYPE_CHECKING:`` are annotations only and are not followed; neither are the ``__init__``
modules of the packages on the way (``methods/__init__.py`` is the method registry: adding a
method must not recompute every other one), unless a module imports one by name.

Parsing all 168 modules of the tree takes 0.29 s (0.69 s before the one-pass normaliser of
:func:`_parsed`; 2 cores, idle), too much for a warm run, so each file's
normalised digest and imports are memoised against the sha256 of its bytes by a
:class:`CodeDigests` object: in memory, and in the JSON file it is given (the cache's
``code-digests.json``: :class:`harness.core.artifacts.ArtifactStore` owns one per cache). The memo
file is checked on read; a damaged one only costs a re-parse. Nothing here is process-wide: two
stores keep two memos, each in its own cache. :func:`code_digest` is a convenience over one
in-memory :class:`CodeDigests` (no file is read or written), for callers with no cache at hand.

>>> a = _normalised("def f(x):  # one\\n    return x\\n")
>>> b = _normalised('def f(x: int) -> int:\\n    \"\"\"Docs.\"\"\"\\n    return x\\n')
>>> a == b, a == _normalised("def f(x):\\n    return x + 1\\n")
(True, False)
"""

from __future__ import annotations

import ast
import functools
import gc
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
from pathlib import Path
from typing import TypedDict

from harness.core.errors import UserError
from harness.core.hashing import atomic_write_text, canonical_json, read_json

FIRST_PARTY = ("harness", "methods")
MEMO_SCHEMA = 2  # bump when _parsed changes: the memo holds its results
log = logging.getLogger("sts_bench.codekeys")
KEEP = 2000  # memo entries kept beside those in use: older versions of edited files fall out


@functools.lru_cache(maxsize=64)
def package_versions(*names: str) -> dict[str, str | None]:
    """Installed versions of third-party packages: those whose code computes a cached result, and
    those a record names in its environment. Read from package metadata (importing torch to ask
    would cost seconds), once per process. ``None``: not installed."""
    return {name: _installed_version(name) for name in names}


@functools.cache
def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class CodeDigests:
    """Code digests with their parse memo: entries in memory, and in ``memo`` (a JSON file) when
    given.

    Plain data (a path and dicts), so it travels with an :class:`ArtifactStore` to dask/ray workers.
    The file is read on the first digest, not when the object is made, and written after each
    digest that parsed a file.

    >>> from pathlib import Path
    >>> import tempfile
    >>> memo = Path(tempfile.mkdtemp()) / "code-digests.json"
    >>> digests = CodeDigests(memo)
    >>> same = digests.digest("harness.core.hashing") == code_digest("harness.core.hashing")
    >>> same, memo.is_file()
    (True, True)
    """

    def __init__(self, memo: Path | None = None) -> None:
        self.memo = Path(memo) if memo is not None else None
        self.entries: dict[str, ModuleEntry] = {}  # by the sha256 of a file's bytes
        self._loaded = self.memo is None
        self._dirty = False
        self._used: set[str] = set()  # entries of the sources this object digested
        self._closures: dict[tuple[str, ...], tuple[list[str], str]] = {}

    def digest(self, *modules: str) -> str:
        """sha256 over the normalised source of ``modules`` and every first-party module they
        import.

        An unknown module name is part of the digest as a name (a plugin that moved is recomputed).
        """
        return self._closure(tuple(sorted(set(modules))))[1]

    def modules(self, *modules: str) -> list[str]:
        """The modules :meth:`digest` covers for ``modules``, sorted: they and what they import."""
        return list(self._closure(tuple(sorted(set(modules))))[0])

    def forget(self) -> None:
        """Drop the digests already computed (not the parse memo): the next digest reads the files
        again (for a caller whose sources changed meanwhile)."""
        self._closures.clear()

    def _closure(self, modules: tuple[str, ...]) -> tuple[list[str], str]:
        if modules in self._closures:
            return self._closures[modules]
        if not self._loaded:
            assert self.memo is not None
            self.entries.update(_read_memo(self.memo))
            self._loaded = True
        roots = tuple(sorted({*FIRST_PARTY, *(m.split(".")[0] for m in modules)}))
        seen: dict[str, str] = {}
        todo = list(modules)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            entry = self._module_entry(name, roots)
            seen[name] = entry["digest"]
            todo += [m for m in entry["imports"] if m not in seen]
        self._flush()
        digest = hashlib.sha256(canonical_json(sorted(seen.items())).encode("utf-8"))
        self._closures[modules] = (sorted(seen), digest.hexdigest())
        return self._closures[modules]

    def _module_entry(self, name: str, roots: tuple[str, ...]) -> dict:
        """``{"digest", "imports"}`` of one module, from the memo when its bytes are unchanged."""
        path = source_path(name)
        if path is None:
            return {"digest": f"missing:{name}", "imports": []}
        data = path.read_bytes()
        raw = hashlib.sha256(data).hexdigest()
        entry = self.entries.get(raw)
        if entry is None:
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            digest, imports = _parsed(data, package)
            entry = {"digest": digest, "imports": imports}
            self.entries[raw] = entry
            self._dirty = True
        self._used.add(raw)
        return {
            "digest": entry["digest"],
            "imports": [
                m
                for m in entry["imports"]
                if m.split(".")[0] in roots and source_path(m) is not None
            ],
        }

    def _flush(self) -> None:
        if not self._dirty or self.memo is None:
            return
        others = [k for k in self.entries if k not in self._used][-KEEP:]
        files = {
            k: self.entries[k] for k in [*others, *(k for k in self.entries if k in self._used)]
        }
        try:
            atomic_write_text(
                self.memo,
                json.dumps(
                    {
                        "schema": MEMO_SCHEMA,
                        "files": files,
                        "check": hashlib.sha256(canonical_json(files).encode("utf-8")).hexdigest(),
                    }
                ),
            )
            self._dirty = False
        except OSError as err:  # a memo that cannot be written only costs parsing again next time
            log.debug("code digests: cannot write %s (%s)", self.memo, err)


# The convenience digests of code_digest: in memory only, never a file. A pure memo
# of parsed sources (the same bytes always give the same entry), so sharing it changes no value.
_IN_MEMORY = CodeDigests(None)


def code_digest(*modules: str) -> str:
    """:meth:`CodeDigests.digest` in memory only (no memo file is read or written), for a caller
    with no :class:`~harness.core.artifacts.ArtifactStore` at hand; cache folders take theirs from
    the store's own :class:`CodeDigests`."""
    return _IN_MEMORY.digest(*modules)


@functools.lru_cache(maxsize=4096)
def source_path(name: str) -> Path | None:
    """The ``.py`` file of module ``name``, found on disk under its top-level package, without
    importing anything but that package (importing a module to find it could import torch);
    None for a name that is not a module (a class imported from one)."""
    top, _, rest = name.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations is None:  # a plain module
        return (
            Path(spec.origin) if not rest and spec.origin and spec.origin.endswith(".py") else None
        )
    for location in spec.submodule_search_locations:
        base = Path(location).joinpath(*rest.split(".")) if rest else Path(location)
        for candidate in (base / "__init__.py", base.with_suffix(".py") if rest else None):
            if candidate is not None and candidate.is_file():
                return candidate
    return None


def _normalised(source: str) -> str:
    return _parsed(source.encode("utf-8"), "")[0]


def _parsed(data: bytes, package: str) -> tuple[str, list[str]]:
    """(normalised digest, imported module names) of one module's source.

    One pass over the statements does both: docstrings and annotations come off (see
    :func:`_strip`), imports outside ``if TYPE_CHECKING:`` are collected. The garbage collector is
    paused meanwhile: a syntax tree is a few hundred thousand new objects without a single
    reference cycle, and every collection they trigger walks the objects already alive, millions
    once torch is imported (parsing the tree's 170 modules took 0.83 s with the collector on and
    0.37 s with it off, on a busy machine, torch not even imported).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        tree = ast.parse(data)
        imports: set[str] = set()
        _strip(tree.body, package, imports, importing=True)
        tree.body = _without_docstring(tree.body)
        text: list[str] = []
        _dump(tree, text)
    finally:
        if enabled:
            gc.enable()
    return hashlib.sha256("".join(text).encode("utf-8")).hexdigest(), sorted(imports)


# The fields of each statement that hold statement lists (the only places statements nest).
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")
_PLACEHOLDER = ast.Name(id="_", ctx=ast.Load())


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[1:] or [ast.Pass()]
    return body


def _strip(body: list, package: str, imports: set[str], importing: bool) -> None:
    """Remove docstrings and type annotations from the statements in ``body`` and every block
    under them, in place; add what they import to ``imports`` (when ``importing``: not under
    ``if TYPE_CHECKING:``, whose imports serve annotations only).

    With postponed annotations a function's annotations never run, so adding or correcting a type
    hint must not recompute a trained artifact; an annotated class attribute stays a field (a
    dataclass's), its annotation replaced by a placeholder. Statements only nest in statement
    lists, and annotations only sit on statements (a lambda's parameters cannot carry one), so
    expressions are never visited."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.returns = None
            arguments = node.args
            for arg in (
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                *(a for a in (arguments.vararg, arguments.kwarg) if a is not None),
            ):
                arg.annotation = None
            node.body = _without_docstring(node.body)
        elif isinstance(node, ast.ClassDef):
            node.body = _without_docstring(node.body)
        elif isinstance(node, ast.AnnAssign):
            node.annotation = _PLACEHOLDER
        elif importing and isinstance(node, ast.Import):
            imports.update(alias.name for alias in node.names)
        elif importing and isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            imports.add(module)
            imports.update(f"{module}.{alias.name}" for alias in node.names)
        for field in _BLOCKS:
            block = getattr(node, field, None)
            if block:
                inner = importing and not (field == "body" and _is_type_checking(node))
                _strip(block, package, imports, inner)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


# Per node class: its fields, each with whether None is its default (then a None is left out).
_LAYOUT: dict[type, tuple[tuple[str, bool], ...]] = {}


def _dump(node: ast.AST, out: list[str]) -> None:
    """Append ``ast.dump(node)`` (no positions, no indent) to ``out``, the same text, built without
    ``ast.dump``'s per-node bookkeeping for pretty-printing (about 1.5x quicker). The digest of a
    module is the sha256 of this text, so it equals the one of earlier versions that hashed
    ``ast.dump`` (tests/test_codekeys.py compares the two on every module of the tree)."""
    cls = type(node)
    layout = _LAYOUT.get(cls)
    if layout is None:
        layout = _LAYOUT[cls] = tuple(
            (name, getattr(cls, name, ...) is None) for name in cls._fields
        )
    out.append(cls.__name__)
    out.append("(")
    first = True
    for name, none_by_default in layout:
        try:
            value = getattr(node, name)
        except AttributeError:
            continue
        if value is None and none_by_default:
            continue
        out.append(f"{name}=" if first else f", {name}=")
        first = False
        if isinstance(value, ast.AST):
            _dump(value, out)
        elif isinstance(value, list):
            out.append("[")
            for i, item in enumerate(value):
                if i:
                    out.append(", ")
                if isinstance(item, ast.AST):
                    _dump(item, out)
                else:
                    out.append(repr(item))
            out.append("]")
        else:
            out.append(repr(value))
    out.append(")")


class ParseMemo(TypedDict):  # each source's digest and imports, by the sha256 of its bytes
    schema: int
    files: dict[str, ModuleEntry]
    check: str


class ModuleEntry(TypedDict):
    digest: str
    imports: list[str]


def _read_memo(path: Path) -> dict[str, ModuleEntry]:
    try:  # missing, damaged, another schema, or a FIFO or device (never read): parsed again
        data = read_json(path, ParseMemo, "the sources are parsed again")
    except UserError:
        return {}
    if data["schema"] != MEMO_SCHEMA:
        return {}
    if data["check"] != hashlib.sha256(canonical_json(data["files"]).encode("utf-8")).hexdigest():
        log.warning("code digests: %s does not match its checksum; parsing the sources again", path)
        return {}
    return data["files"]
