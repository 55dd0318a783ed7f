"""Files on disk and run folders: reading text and csv, the manifest, ``COMPLETE``, atomic writes."""

from __future__ import annotations

__all__: list[str] = []
