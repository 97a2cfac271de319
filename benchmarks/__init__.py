"""Benchmarks: each script prints its measurements side by side in one run (see README).

The suite, by what a script is:

- ``peers/``: the harness against other encoders on the same sentences (sentence-transformers on
  torch, ONNX Runtime and OpenVINO, MTEB's own evaluation, a plain transformers loop), each side in
  a process of its own; the scripts the peers run in their own environment live there too.
- ``studies/``: how the harness itself scales and behaves (pairs, memory, dask, flow fits, SimCSE
  training, query × candidate cost, batch invariance, batching).
- ``tools/``: what keeps the measurements honest and checks other machines: the index of
  docs/measurements, the mutation report, the GPU check.

Shared by all: :mod:`benchmarks.report` (the CPU kind and dtypes in every header, the load, the
markdown written) and :mod:`benchmarks.side_by_side`, the peer harness (the options every peer
benchmark spells alike, each side in a fresh process, alternating rounds, medians and ratios, the
report's header and tables). Every benchmark reaches the engine through its front door,
``harness.core.encoding``'s names (``tests/test_layers.py``). What left the suite, and where a
script used to be, is in ``benchmarks/history.toml``.
"""
