"""Step 5, generic part: loading and building models, PEFT, packing, what a model takes."""

from __future__ import annotations

__all__: list[str] = []
