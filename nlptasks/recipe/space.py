"""Rules of the ``[tune]`` table (``nlptasks tune``) that its fields alone cannot express: the
objective must be a metric of the task, and every key of ``[tune.space]`` must be a key of the
recipe that takes the values the search would give it.

A space key is checked the way a trial would use it: its values (low and high, a value between
them, every choice) are applied one at a time as ``--set KEY=VALUE`` overrides and the recipe is
validated again (by the ``check`` function that :func:`nlptasks.recipe.load_recipe` passes in);
what that reports is said under ``tune.space."KEY"``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from nlptasks.errors import Problem, did_you_mean
from nlptasks.recipe.schema import Recipe
from nlptasks.recipe.tuning import TuneConfig, TuneDistribution
from nlptasks.types import TaskSpec

__all__ = [
    "FORBIDDEN_SPACE_KEYS",
    "objective_of",
    "quote_space_keys",
    "space_problems",
    "space_values",
    "tune_metric_problems",
]

FORBIDDEN_SPACE_KEYS = ("task", "tune", "output")
"""Keys (and tables) a search may not set: the task, the search itself, where runs go."""

Check = Callable[[list[str], Any], list[Problem]]
"""``check(key parts, value)``: the problems of the recipe with that one override applied."""


def quote_space_keys(problems: list[Problem], raw: dict[str, Any]) -> list[Problem]:
    """Pydantic writes ``tune.space.train.learning_rate.low``; say ``tune.space."train.learning_rate".low``
    (the key path is one key), with a did-you-mean for a misspelt distribution key."""
    tune = raw.get("tune")
    space = tune.get("space") if isinstance(tune, dict) else None
    if not isinstance(space, dict):
        return problems
    keys = sorted((str(k) for k in space), key=len, reverse=True)
    out = []
    for p in problems:
        if not p.where.startswith("tune.space."):
            out.append(p)
            continue
        rest = p.where[len("tune.space.") :]
        key = next((k for k in keys if rest == k or rest.startswith(k + ".")), None)
        if key is None:
            out.append(p)
            continue
        inner = rest[len(key) + 1 :]
        where = f'tune.space."{key}"' + (f".{inner}" if inner else "")
        message = p.message
        if inner and message.startswith("unknown key") and "did you mean" not in message:
            hint = did_you_mean(inner, TuneDistribution.model_fields)
            message = (
                f"unknown key{hint}"
                if hint
                else f"unknown key; allowed keys: {', '.join(TuneDistribution.model_fields)}"
            )
        out.append(Problem(where, message))
    return out


def objective_of(recipe: Recipe, spec: TaskSpec, options: BaseModel) -> tuple[str, bool]:
    """``(metric, greater is better)`` of a study: ``tune.objective``, else ``train.best_metric``,
    else the task's best metric; the direction from ``tune.direction``, or (``auto``) the task's
    for its own best metric, ``minimize`` for a loss, else ``maximize`` (as the engine decides for
    ``train.best_metric``)."""
    tune = recipe.tune or TuneConfig.model_construct(direction="auto")
    task_best = spec.best_metric_for(options)
    metric = tune.objective or recipe.train.best_metric or task_best
    if tune.direction != "auto":
        return metric, tune.direction == "maximize"
    if metric == task_best:
        return metric, spec.greater_is_better
    return metric, not metric.endswith("loss")


def tune_metric_problems(recipe: Recipe, spec: TaskSpec, options: BaseModel) -> list[Problem]:
    """``tune.objective`` must be a metric the task computes (as ``train.best_metric`` must)."""
    objective = recipe.tune.objective if recipe.tune is not None else None
    declared = spec.metrics(options) if callable(spec.metrics) else spec.metrics
    if objective is None or not declared or spec.knows_metric(objective, options):
        return []
    return [
        Problem(
            "tune.objective",
            f"{objective!r} is not a metric of task {spec.name!r}; its metrics: {', '.join(spec.metrics_for(options))}",
        )
    ]


def space_values(dist: TuneDistribution) -> list[Any]:
    """The values of one distribution that validation tries: every choice; low, high and (for a
    float range) a value between them that no integer key would take."""
    if dist.choices is not None:
        return list(dist.choices)
    assert dist.low is not None and dist.high is not None
    values: list[Any] = [dist.low, dist.high]
    if not dist.is_int() and dist.step is None:
        values.append(dist.low + (dist.high - dist.low) * 0.37)
    return values


def space_problems(recipe: Recipe, check: Check) -> list[Problem]:
    """Every ``[tune.space]`` key must be a recipe key that takes the values searched (see the
    module docstring); keys of ``task``, ``[tune]`` and ``[output]`` are refused."""
    if recipe.tune is None:
        return []
    problems = []
    for key, dist in recipe.tune.space.items():
        where = f'tune.space."{key}"'
        parts = [p.strip() for p in key.split(".")]
        if not all(parts) or not re.fullmatch(r"[\w.\- ]+", key):
            problems.append(
                Problem(where, 'not a key path: write recipe keys as table.key, e.g. "train.learning_rate"')
            )
            continue
        if parts[0] in FORBIDDEN_SPACE_KEYS:
            problems.append(
                Problem(
                    where,
                    f"{parts[0]!r} cannot be searched (the task, the [tune] table and "
                    "[output] are the study's own); search training keys such as "
                    "train.learning_rate",
                )
            )
            continue
        seen: set[str] = set()
        for value in space_values(dist):
            for p in check(parts, value):
                text = _said(p, key, value)
                if text not in seen:
                    seen.add(text)
                    problems.append(Problem(where, text))
            if seen:
                break  # the first refused value says enough
    return problems


def _said(problem: Problem, key: str, value: Any) -> str:
    """A problem of the recipe with ``key = value``, as said under ``tune.space."key"``."""
    message = problem.message
    if problem.where == key and message.startswith("unknown key"):
        parent = key.rpartition(".")[0]
        message = re.sub(
            r"did you mean '([^']+)'",
            lambda m: f"did you mean '{parent}.{m.group(1)}'" if parent else m.group(0),
            message,
        )
        return f"{message}: no such recipe key"
    shown = f"{value!r}" if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
    if problem.where in (key, ""):
        return f"value {shown} refused: {message}"
    return f"value {shown} refused: {problem.where}: {message}"
