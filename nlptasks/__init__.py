"""nlptasks: NLP fine-tuning as recipes and plugins.

The public API for plugin authors is small and lives here::

    from nlptasks import hookimpl, TaskSpec, RunContext, DataError

The hooks themselves (the ten-step contract) are documented in :mod:`nlptasks.hookspecs`.
Importing this package is cheap: torch, transformers and datasets load only when a step runs.
"""

from nlptasks.context import NoOptions, Predictor, RunContext, TaskSpec
from nlptasks.errors import DataError, NlptasksError, PluginError, Problem, RecipeError
from nlptasks.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = [
    "DataError",
    "NlptasksError",
    "NoOptions",
    "PluginError",
    "Predictor",
    "Problem",
    "RecipeError",
    "RunContext",
    "TaskSpec",
    "__version__",
    "hookimpl",
]
