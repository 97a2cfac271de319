"""Papers: running every row of a paper's protocol (:mod:`harness.runner.presets`, its data) with
its published numbers beside ours (:mod:`.run`). May import: execution and below."""
