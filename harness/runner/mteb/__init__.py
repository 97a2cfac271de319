"""MTEB from Python: any sts-bench method as an MTEB encoder (:mod:`.model`), built exactly as a run
builds it. May import: execution and below. (MTEB result *files* are records' business:
:mod:`harness.runner.records.mteb_files`.)"""
