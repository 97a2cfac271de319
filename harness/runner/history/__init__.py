"""History: every run's scores by commit (:mod:`.log`, ``history.jsonl`` and its blobs) and the
commits where a score moved beyond its noise (:mod:`.moves`). May import: tables, records,
settings."""
