"""Settings: ``BenchConfig`` (every setting of a run, CLI > config file > defaults) and the checks
of values by type and range (:mod:`.validate`). The bottom room of the runner: it imports only the
core and the method registry (for method options), never another room."""
