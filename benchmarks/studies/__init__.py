"""Scaling studies: how the harness itself scales and behaves (pairs, memory, dask, fits, training,
cost, batch invariance, batching). See :mod:`benchmarks`."""
