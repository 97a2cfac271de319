"""``centered``: a pooled view minus its mean over the fit set, as a one-file sts-bench plugin.

Run it without installing anything::

    sts-bench run --methods avg examples/centered_avg.py:Centered --set centered.view=first-last

Subtracting the mean removes the common direction every BERT vector shares (the anisotropy that
BERT-whitening and all-but-the-top also remove), so cosines compare what differs. Worked example:
vectors (3, 1) and (3, -1) have cosine 0.8; their mean is (3, 0), and the centred (0, 1) and
(0, -1) have cosine -1.

The mean is kept in the artifact store to show how a fit is cached: keyed on the fitted vectors
and on this file's code (``self.code()``), so editing the file fits again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from harness.method_api import BASE_VIEWS, FitSet, Option, PostProcessor, npy_bytes


class Centered(PostProcessor):
    name = "centered"
    summary = (
        "a pooled view minus its mean over --fit-set (all-but-the-top with no direction removed)"
    )
    options = (Option("view", "avg", "pooled view to centre", choices=BASE_VIEWS),)

    def fit(self, fit_set: FitSet) -> None:
        x = self.pooled(fit_set.sentences)
        self.mean = self._mean(x)
        self.fit_info = {"fit_set": fit_set.describe()}

    def _mean(self, x: np.ndarray) -> np.ndarray:
        digest = hashlib.sha256(np.ascontiguousarray(x, dtype=np.float32).tobytes()).hexdigest()
        folder = self.ctx.artifacts.folder(
            "centered", {"vectors": digest, "shape": list(x.shape)}, code=self.code()
        )
        if folder.complete():
            return np.load(folder.path("mean.npy"), allow_pickle=False)
        mean = x.mean(axis=0, dtype=np.float64).astype(np.float32)
        folder.commit({"mean.npy": npy_bytes(mean)}, {"sentences": len(x)})
        return mean

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        return self.pooled(sentences) - self.mean
