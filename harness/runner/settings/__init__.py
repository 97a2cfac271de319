"""Settings: ``BenchConfig`` (every setting of a run, CLI > config file > defaults), each run-wide
setting declared once as its field (:mod:`.declaration`: flags, config keys, checks and the
protocol derive from it) and the checks of values by type and range (:mod:`.validate`). The
bottom room of the runner: it imports only the core and the method registry (for method options),
never another room."""
