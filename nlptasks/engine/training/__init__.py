"""Steps 6 to 9, generic part: training arguments, the Trainer and its guards, ``[optimize]``,
ordering, resume, throughput, evaluation by split, preflight checks."""

from __future__ import annotations

__all__: list[str] = []
