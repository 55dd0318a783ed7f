"""nlptasks: NLP fine-tuning as recipes and plugins.

The public API is small and lives here.  For users::

    import nlptasks
    predict = nlptasks.load("runs/cls/<run>")      # predict(["text", ...]) -> one dict per text
    nlptasks.run("recipes/cls.toml", ["train.epochs=1"])

and for plugin authors, :mod:`nlptasks.plugin` (everything a task plugin needs; the most used
names are re-exported here too)::

    from nlptasks.plugin import hookimpl, TaskSpec, RunContext, DataError, get_tokenizer, load_model

The hooks themselves (the ten-step contract) are documented in :mod:`nlptasks.hookspecs`.
Importing this package is cheap: the names below load on first use (so ``nlptasks --help`` does
not even load pydantic), and torch, transformers and datasets load only when a step runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nlptasks.version import __version__

# public name -> the module that defines it
_EXPORTS = {
    "DataError": "nlptasks.errors",
    "NlptasksError": "nlptasks.errors",
    "PluginError": "nlptasks.errors",
    "Problem": "nlptasks.errors",
    "RecipeError": "nlptasks.errors",
    "Backend": "nlptasks.types",
    "Evaluation": "nlptasks.types",
    "LoadOptions": "nlptasks.types",
    "Finding": "nlptasks.types",
    "NoOptions": "nlptasks.types",
    "Predictor": "nlptasks.types",
    "TaskSpec": "nlptasks.types",
    "Usage": "nlptasks.types",
    "RunContext": "nlptasks.context",
    "hookimpl": "nlptasks.hookspecs",
    "load": "nlptasks.api",
    "load_recipe": "nlptasks.api",
    "predict_file": "nlptasks.api",
    "run": "nlptasks.api",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:
    from nlptasks.api import load, load_recipe, predict_file, run
    from nlptasks.context import RunContext
    from nlptasks.errors import DataError, NlptasksError, PluginError, Problem, RecipeError
    from nlptasks.hookspecs import hookimpl
    from nlptasks.types import Backend, Evaluation, Finding, LoadOptions, NoOptions, Predictor, TaskSpec, Usage


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nlptasks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
