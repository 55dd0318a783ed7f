"""The ``[tune]`` table of a recipe (``nlptasks tune``): the study's settings and its search
space.  :mod:`nlptasks.recipe.space` checks what these models alone cannot (the objective is a
metric of the task, every space key is a recipe key that takes the values searched)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["TuneConfig", "TuneDistribution"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True, allow_inf_nan=False)


class TuneDistribution(Section):
    """One searched recipe key of ``nlptasks tune``: the key path (``"train.learning_rate"``, in quotes)
    names a table with either a range, ``{ low = 1e-5, high = 1e-3, log = true }`` (integers if low and
    high are both integers, else floats), or a list, ``{ choices = [16, 32] }``.  Every value is checked
    as ``--set KEY=VALUE`` would be: a key the recipe does not have, or a value it refuses, is an error
    naming ``tune.space."KEY"``."""

    low: int | float | None = Field(None, description="Range: the smallest value (with high).")
    high: int | float | None = Field(None, description="Range: the largest value, included (with low).")
    log: bool = Field(False, description="Range: draw on a log scale (low must be > 0; not with step).")
    step: int | float | None = Field(
        None, gt=0, description="Range: only low, low + step, low + 2 step ... (integer ranges: default 1)."
    )
    choices: list[str | int | float | bool] | None = Field(
        None, min_length=1, description="The values to choose from (instead of low/high)."
    )

    @model_validator(mode="after")
    def _range_or_choices(self) -> TuneDistribution:
        ranged = self.low is not None or self.high is not None
        if self.choices is not None:
            if ranged or self.log or self.step is not None:
                raise ValueError("give either choices or a range (low, high, log, step), not both")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give a range, { low = ..., high = ... }, or { choices = [...] }")
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"log = true needs low > 0 (got {self.low})")
        if self.log and self.step is not None:
            raise ValueError("log and step do not go together: give one of them")
        if self.is_int() and self.step is not None and not isinstance(self.step, int):
            raise ValueError(f"an integer range takes an integer step (got {self.step})")
        return self

    def is_int(self) -> bool:
        """Whether this is an integer range (low and high are both integers)."""
        return self.choices is None and isinstance(self.low, int) and isinstance(self.high, int)


class TuneConfig(Section):
    """Hyperparameter search with ``nlptasks tune RECIPE`` (docs/tune.md): each trial is an ordinary
    run of the recipe with the searched keys set as ``--set`` would set them.  ``nlptasks run``
    ignores this table; ``nlptasks validate`` checks it."""

    trials: int = Field(
        10,
        ge=1,
        le=100000,
        description="Finished trials the study aims at (complete, pruned and failed; --trials overrides).",
    )
    timeout: float | None = Field(
        None,
        gt=0,
        le=10**8,
        description="Start no new trial after this many seconds (--timeout overrides). Default: none.",
    )
    objective: str | None = Field(
        None,
        description="The validation metric to optimize. Default: train.best_metric, else the task's best metric "
        "(e.g. 'accuracy').",
    )
    direction: Literal["auto", "maximize", "minimize"] = Field(
        "auto",
        description="'auto': the task's direction for its best metric, 'minimize' for a loss, else 'maximize'.",
    )
    sampler: Literal["tpe", "random"] = Field(
        "tpe", description="Optuna sampler: 'tpe' (Tree-structured Parzen Estimator) or 'random'."
    )
    seed: int | None = Field(
        None, ge=0, lt=2**32, description="Seed of the sampler (default: the recipe's seed; --workers add 0, 1, 2...)."
    )
    pruner: Literal["median", "halving", "none"] = Field(
        "median",
        description="Stop unpromising trials early from the validation metric at each evaluation during "
        "training: 'median' (below the median of earlier trials at the same step), 'halving' (successive "
        "halving), 'none'.",
    )
    space: dict[str, TuneDistribution] = Field(
        description="The search space: recipe key path → distribution (see [tune.space]), e.g. "
        '"train.learning_rate" = { low = 1e-5, high = 1e-3, log = true }.',
    )

    @field_validator("space")
    @classmethod
    def _not_empty(cls, value: dict[str, TuneDistribution]) -> dict[str, TuneDistribution]:
        if not value:
            raise ValueError(
                "empty: name at least one recipe key to search, e.g. "
                '"train.learning_rate" = { low = 1e-5, high = 1e-3, log = true }'
            )
        return value
