"""Records: the result record's schema (:mod:`.schema`), the files it lives in (:mod:`.store`:
one sealed JSON per (method, task) under ``runs/``, written and verified on read), the output
folder's lock (:mod:`.lock`), the MTEB result files made from a record (:mod:`.mteb_files`) and the
protocol of a report step (:mod:`.outputs`). May import: settings."""
