"""How an error names a command-line flag when the caller is ``harness.mteb_model`` (see
:func:`harness.core.errors.flag`): the argument or setting of the Python call instead."""

PYTHON_NAMES = {
    "--backbone": "backbone",
    "--hub-root": "settings['hub_root']",
    "--cache-dir": "settings['cache_dir']",
    "--fit-set": "fit_set",
    "--max-length": "settings['max_length']",
    "--dtype": "settings['dtype']",
    "--device": "settings['device']",
}
