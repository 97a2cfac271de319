"""The floor below the methods: the method API, data (tasks, sources, fit sets), encoding (backbone,
engines, forward pass, pooling, windows, vector cache), artifacts and scoring.

Nothing here imports :mod:`methods` or :mod:`harness.runner`; ``tests/test_layers.py`` enforces it.
"""

__version__ = "0.1.0"
