"""The floor above the methods, in rooms (subpackages) that are floors of their own; a room imports
only the rooms below it (``tests/test_layers.py`` holds this order), from the bottom up:

    settings   BenchConfig and the checks of values         records   the result record, its files
    presets    papers' protocols as data, their evidence    tables    leaderboards, comparisons
    history    scores by commit, moves                      page      index.html
    studies    diagnostics, cost                            execution context, plan, evaluate, run
    papers     running a paper's protocol                   mteb      MTEB encoder from Python
    cli        flags, exit codes

Only this floor knows ``BenchConfig``.
"""

ROOMS = (
    "settings",
    "records",
    "presets",
    "tables",
    "history",
    "page",
    "studies",
    "execution",
    "papers",
    "mteb",
    "cli",
)
