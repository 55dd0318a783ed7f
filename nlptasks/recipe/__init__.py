"""Recipes: TOML files validated by pydantic.

A recipe says which task to run (``task = "cls"``), on which data, with which model and
training settings.  :func:`load_recipe` reads one, applies ``--set key=value`` overrides, and
reports **every** problem at once, each with its key path (``train.learning_rate: ...``).
Unknown keys get a did-you-mean; allowed values come from the field types; the task's
``[options]`` table is validated by the model the task plugin registered.

Relative data paths and a local ``model.name_or_path`` are relative to the recipe file;
``output.dir`` and paths given with ``--set`` are relative to the current directory.

The package: :mod:`~nlptasks.recipe.schema` (the tables), :mod:`~nlptasks.recipe.rules` (rules
across keys and the task), :mod:`~nlptasks.recipe.load` (loading), :mod:`~nlptasks.recipe.toml`
(TOML in and out).
"""

from __future__ import annotations

from nlptasks.recipe.load import LoadedRecipe, TaskRegistry, load_recipe, problems_from, recipe_json_schema
from nlptasks.recipe.schema import (
    CUDA_ONLY_OPTIMIZERS,
    PATH_KEYS,
    PEFT_METHOD_KEYS,
    DataConfig,
    ModelConfig,
    OptimizeConfig,
    OutputConfig,
    PeftConfig,
    Recipe,
    ScratchConfig,
    SplitConfig,
    TrainConfig,
)
from nlptasks.recipe.space import objective_of
from nlptasks.recipe.toml import dump_toml, override_text, parse_override, read_toml
from nlptasks.recipe.tuning import TuneConfig, TuneDistribution

__all__ = [
    "CUDA_ONLY_OPTIMIZERS",
    "PATH_KEYS",
    "PEFT_METHOD_KEYS",
    "DataConfig",
    "LoadedRecipe",
    "ModelConfig",
    "OptimizeConfig",
    "OutputConfig",
    "PeftConfig",
    "Recipe",
    "ScratchConfig",
    "SplitConfig",
    "TaskRegistry",
    "TrainConfig",
    "TuneConfig",
    "TuneDistribution",
    "dump_toml",
    "load_recipe",
    "objective_of",
    "override_text",
    "parse_override",
    "problems_from",
    "read_toml",
    "recipe_json_schema",
]
