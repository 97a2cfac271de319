"""The floor above the methods: config and CLI, planning and ``--dry-run``, scheduling and backends,
result records, leaderboards, plots and reports. The only layer that knows ``BenchConfig``."""
