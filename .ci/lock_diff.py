"""Print where the running environment differs from the lock files named on the command line.

    .venv-newest/bin/python .ci/lock_diff.py requirements.lock requirements-nodeps.lock

`make test-newest` runs it in the venv resolved to the newest versions, so a CI log says which
upgrades a failure there comes with. Standard library only; always exits 0.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
# Installers (uv has its own lock) and the project itself.
IGNORED = {"pip", "uv", "sts-bench"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(paths: list[str]) -> dict[str, str]:
    pins = {}
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                if match := PIN.match(line):
                    pins[canonical(match.group(1))] = match.group(2)
    return pins


def main(paths: list[str]) -> None:
    pins = locked(paths)
    installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    rows = []
    for name in sorted(set(pins) | set(installed)):
        if name in IGNORED or pins.get(name) == installed.get(name):
            continue
        rows.append((name, pins.get(name, "-"), installed.get(name, "-")))
    if not rows:
        print(f"newest versions = the lock ({len(pins)} packages)")
        return
    print(f"{len(rows)} of {len(pins)} locked packages differ (- = absent):")
    width = max(len("package"), *(len(row[0]) for row in rows))
    print(f"  {'package':<{width}}  {'lock':<16}  newest")
    for name, lock, now in rows:
        print(f"  {name:<{width}}  {lock:<16}  {now}")


if __name__ == "__main__":
    main(sys.argv[1:])
