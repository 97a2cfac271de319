"""Task sources: ``packaged`` (offline STS-B), ``senteval`` (a SentEval data directory), ``hub``
(MTEB's copies on the HuggingFace hub, through ``datasets``). Each exposes
``load(spec, splits, ...) -> dict[split, SplitData]``; shared parsing lives in :mod:`.rows`."""
