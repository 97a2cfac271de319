"""Execution: the run's context (:mod:`.context`, the MethodContext methods see), backends
(:mod:`.backends`, :mod:`.ray_local`), checks before any work (:mod:`.preflight`), the plan
(:mod:`.plan`) and ``--dry-run`` (:mod:`.dry_run`), prompt sets (:mod:`.prompt_sets`),
labelled-data leakage (:mod:`.leakage`), scoring one (method, task) into a record
(:mod:`.evaluate`), the vectors scored written out (:mod:`.export`, ``--export-embeddings``), the
report steps (:mod:`.reports`), the run itself (:mod:`.run`: plan → encode → evaluate → reports)
and an encoder object from Python run as a method (:mod:`.encoders`, :mod:`.from_python`:
``harness.evaluate``). May import every room below: studies, page, history, tables, records,
settings."""
