"""The report page: ``index.html`` rebuilt from files (:mod:`.html`: Jinja2 templates under
``templates/``, the CSS and JavaScript it inlines under ``static/``), together with the history
report (:mod:`.build`). May import: history, tables, records, settings."""
