"""Every other checkpoint: whatever transformers' ``AutoModel`` loads, as an encoder (positions from
0). The registry answers with this family when no other takes a config."""

from __future__ import annotations

from harness.core.encoding.families.family import Family

FAMILY = Family(name="transformers", label="transformers model")
