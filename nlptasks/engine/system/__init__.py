"""The machine: CUDA and bitsandbytes checks, native bf16, distributed processes (the engine's lowest room)."""

from __future__ import annotations

__all__: list[str] = []
