"""nlptasks: NLP fine-tuning as recipes and plugins.

The public API is small and lives here.  For users::

    import nlptasks
    predict = nlptasks.load("runs/cls/<run>")      # predict(["text", ...]) -> one dict per text
    nlptasks.run("recipes/cls.toml", ["train.epochs=1"])

and for plugin authors::

    from nlptasks import hookimpl, TaskSpec, RunContext, DataError

The hooks themselves (the ten-step contract) are documented in :mod:`nlptasks.hookspecs`.
Importing this package is cheap: the names below load on first use (so ``nlptasks --help`` does
not even load pydantic), and torch, transformers and datasets load only when a step runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "DataError": "nlptasks.errors",
    "NlptasksError": "nlptasks.errors",
    "PluginError": "nlptasks.errors",
    "Problem": "nlptasks.errors",
    "RecipeError": "nlptasks.errors",
    "Finding": "nlptasks.engine.doctor",
    "NoOptions": "nlptasks.context",
    "Predictor": "nlptasks.context",
    "RunContext": "nlptasks.context",
    "TaskSpec": "nlptasks.context",
    "hookimpl": "nlptasks.hookspecs",
    "load": "nlptasks.api",
    "run": "nlptasks.api",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:
    from nlptasks.context import NoOptions, Predictor, RunContext, TaskSpec
    from nlptasks.errors import DataError, NlptasksError, PluginError, Problem, RecipeError
    from nlptasks.api import load, run
    from nlptasks.engine.doctor import Finding
    from nlptasks.hookspecs import hookimpl


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nlptasks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
