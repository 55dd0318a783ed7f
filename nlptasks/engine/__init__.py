"""The engine: the step code behind the ten steps (private).

Nothing here is public API: its modules change without notice.  Plugins use
:mod:`nlptasks.plugin`, which re-exports the helpers meant for them; the engine knows no task by
name and imports nothing above it (no plugin host, no pipeline, no CLI).

The four helpers this package used to export are still found here, with a
``DeprecationWarning`` naming their public home.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__: list[str] = []  # private: import from nlptasks.plugin

_MOVED = {
    "get_tokenizer": "nlptasks.engine.tokenization",
    "load_model": "nlptasks.engine.modeling",
    "load_trained_model": "nlptasks.engine.trained",
    "predict_logits": "nlptasks.engine.inference",
}


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module 'nlptasks.engine' has no attribute {name!r}")
    warnings.warn(
        f"nlptasks.engine.{name} is private; import it from nlptasks.plugin", DeprecationWarning, stacklevel=2
    )
    return getattr(importlib.import_module(module), name)
