"""The report page: ``index.html`` rebuilt from files (:mod:`.html`, its inline CSS and JavaScript in
:mod:`.assets`), together with the history report (:mod:`.build`). May import: history, tables,
records, settings."""
