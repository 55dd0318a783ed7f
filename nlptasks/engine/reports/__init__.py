"""Run reports: the model card, its figures, and inspect-batch's rendering."""

from __future__ import annotations

__all__: list[str] = []
