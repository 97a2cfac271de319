"""Project tools: the index of docs/measurements, the mutation report, the GPU check. See
:mod:`benchmarks`."""
