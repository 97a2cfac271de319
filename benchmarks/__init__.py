"""Benchmarks: each script prints its measurements side by side in one run (see README)."""
