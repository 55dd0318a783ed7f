"""The pipeline: the ten steps driven through the plugin host.

``run`` (train and save a run), ``check`` (the data doctor), ``inspect_batch`` and ``eval`` share
one steps-1-to-4 function (:func:`steps_1_to_4`) and ``run``, ``eval`` and ``tune``'s trials one
assembly of steps 5 to 8 (:mod:`nlptasks.pipeline.assembly`); the commands that do not train run
it in a throw-away folder that is removed afterwards.  Above the engine, the plugin host and the
inference floor, below the CLI.
"""

from __future__ import annotations

from nlptasks.inference.loading import latest_run, load_predictor
from nlptasks.pipeline.check import Report, check
from nlptasks.pipeline.inspect import inspect_batch
from nlptasks.pipeline.run import RunResult, run, save_run
from nlptasks.pipeline.steps import (
    get_host,
    library_progress_bars,
    load_recipe,
    prepared,
    scratch_context,
    steps_1_to_4,
)

__all__ = [
    "Report",
    "RunResult",
    "check",
    "get_host",
    "inspect_batch",
    "latest_run",
    "library_progress_bars",
    "load_predictor",
    "load_recipe",
    "prepared",
    "run",
    "save_run",
    "scratch_context",
    "steps_1_to_4",
]
