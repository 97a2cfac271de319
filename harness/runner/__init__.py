"""The floor above the methods, in rooms (subpackages) that are floors of their own; a room imports
only the rooms below it (``tests/test_layers.py`` holds this order), from the bottom up:

    settings   BenchConfig and the checks of values         records   the result record, its files
    tables     leaderboards, comparisons, the gate, plots   history   scores by commit, moves
    page       index.html                                   studies   diagnostics, cost
    execution  context, plan, evaluate, report steps, run   papers    papers' protocols
    mteb       MTEB encoder from Python                     cli       flags, exit codes

Only this floor knows ``BenchConfig``.
"""

ROOMS = (
    "settings",
    "records",
    "tables",
    "history",
    "page",
    "studies",
    "execution",
    "papers",
    "mteb",
    "cli",
)
