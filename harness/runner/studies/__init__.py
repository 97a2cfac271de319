"""Studies a run can add: anisotropy diagnostics (:mod:`.diagnostics`) and the query × candidate
cost of a pair scorer against its sentence encoder (:mod:`.cost`). May import: tables, records,
settings."""
