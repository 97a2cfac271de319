"""Presets: each paper's protocol as data (``<name>.toml`` read by :mod:`.data`), the published
tables generated from them (:mod:`.reference`), and what a paper table's lines must be to be shown
(:mod:`.evidence`: figures recomputed from the TOML and the verified records). The page reads them;
running a paper is :mod:`harness.runner.papers`. May import: records and below."""
