"""Steps 2 to 4, generic part: reading and splitting data, rows and inputs, the data doctor, tokenizers."""

from __future__ import annotations

__all__: list[str] = []
