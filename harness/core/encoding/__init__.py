"""The encoding engine's front door: from text to cached vectors.

Everything outside this package (methods, the runner, the method API, benchmarks) imports only the
names below; the modules behind them (backbone families, the native engines and their kernels,
batching, windows, shared prefixes) are private to the engine and may move.
``tests/test_layers.py`` holds both rules.

============================  ===============================================================
``resolve_backbone``          open a backbone: a packaged alias, a local folder or a hub id
``BackboneRef``               a resolved backbone (layers, width, causal, weights' identity)
``EncodeSettings``            how the pass runs: device, dtype, threads, batching, max_length
``View``, ``Prompt``          what a vector is: pooling of a layer of the text a prompt makes
``ViewProvider``              ``views`` through the cache: ``get(sentences, view) -> array``
``ForwardPass``               one pass without the cache (benchmarks, a student's dropout pass)
``WindowTask``                encode work a worker runs (several GPUs, dask, ray)
``Checkpoint``                the model and tokenizer for trainers, batched and pooled as here
``read_model_json``           a JSON file of a model's folder, read through the intake and held
                              to its declared schema (``config.json``: ``ModelConfig``)
============================  ===============================================================

Importing it loads neither torch nor transformers; the pass imports them when it first runs.

>>> from harness.core.encoding import View, Prompt
>>> str(View("mean", 6, Prompt("query: ")))
"mean@6 under prompt 'query: {sentence}'"
"""

from __future__ import annotations

from harness.core.encoding.backbone import BackboneRef, resolve_backbone
from harness.core.encoding.checkpoint import Checkpoint
from harness.core.encoding.forward import ForwardPass
from harness.core.encoding.model_files import read_model_json
from harness.core.encoding.pooling import View
from harness.core.encoding.prompts import Prompt
from harness.core.encoding.provider import ViewProvider
from harness.core.encoding.settings import EncodeSettings
from harness.core.encoding.windows import WindowTask

__all__ = [
    "BackboneRef",
    "Checkpoint",
    "EncodeSettings",
    "ForwardPass",
    "Prompt",
    "View",
    "ViewProvider",
    "WindowTask",
    "read_model_json",
    "resolve_backbone",
]
