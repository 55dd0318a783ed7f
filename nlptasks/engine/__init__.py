"""The engine: the step code behind the ten steps (private), in rooms.

Nothing here is public API: its modules change without notice.  Plugins use
:mod:`nlptasks.plugin`, which re-exports the helpers meant for them; the engine knows no task by
name and imports nothing above it (no plugin host, no inference floor, no pipeline, no CLI).

The rooms, lowest first (a room may import its own and the rooms below; tools/imports.py checks)::

    system     the machine: CUDA and bitsandbytes checks, native bf16, distributed processes
    io         files on disk and run folders (manifest, COMPLETE, atomic writes)
    data       steps 2 to 4: reading and splitting data, rows, inputs, the data doctor, tokenizers
    model      step 5: loading and building models, PEFT, packing, what a model takes
    training   steps 6 to 9: training arguments, the Trainer and its guards, [optimize], ordering,
               resume, throughput, evaluation by split, preflight checks
    reports    the model card, curves, compare, inspect-batch's rendering
    defaults   the engine's default hook implementations (registered by the plugin host)
"""

from __future__ import annotations

import importlib
from typing import Any

from nlptasks.deprecations import deprecated

__all__: list[str] = []  # private: import from nlptasks.plugin

_MOVED = {
    "get_tokenizer": "nlptasks.engine.data.tokenization",
    "load_model": "nlptasks.engine.model.modeling",
}
"""Helpers this package used to export, still found here with a ``DeprecationWarning`` naming their
public home (``load_trained_model`` and ``predict_logits`` now live above the engine, in the
inference floor: import them from :mod:`nlptasks.plugin`)."""


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module 'nlptasks.engine' has no attribute {name!r}")
    deprecated(
        f"name:nlptasks.engine.{name}",
        f"nlptasks.engine.{name} is private",
        f"import {name} from nlptasks.plugin",
    )
    return getattr(importlib.import_module(module), name)
