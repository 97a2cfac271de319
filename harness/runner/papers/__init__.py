"""Papers: each paper's protocol as data (``<name>.toml`` read by :mod:`.data`) and running every
row of it with its published numbers beside ours (:mod:`.run`). May import: execution and below."""
