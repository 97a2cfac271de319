"""Peer comparisons: the harness against other encoders on the same sentences, and the scripts the
peers run in a process (or an environment) of their own. See :mod:`benchmarks`."""
