"""The command line: flags and config files into a ``BenchConfig`` (:mod:`.parser`) and the exit
codes and one-line errors every failure becomes (:mod:`.exits`). The top room: may import every
other."""
