"""Execution: the run's context (:mod:`.context`, the MethodContext methods see), backends
(:mod:`.backends`, :mod:`.ray_local`), checks before any work (:mod:`.preflight`), the plan
(:mod:`.plan`) and ``--dry-run`` (:mod:`.dry_run`), labelled-data leakage (:mod:`.leakage`),
scoring one (method, task) into a record (:mod:`.evaluate`), the report steps (:mod:`.reports`) and
the run itself (:mod:`.run`: plan → encode → evaluate → reports). May import every room below:
studies, page, history, tables, records, settings."""
