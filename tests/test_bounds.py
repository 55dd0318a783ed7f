"""Every number a recipe can set has bounds: a value no run could use (``train.batch_size =
9223372036854775807``) is refused by ``validate`` with the key and the range, never by a traceback
in ``run``.  The sweep covers the recipe's tables and every task plugin's ``[options]``."""

from __future__ import annotations

import types
import typing

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

from nlptasks.host import get_host
from nlptasks.recipe import Recipe

# Keys whose bounds are those of the key they stand for: a search space's low/high/step/choices
# take the values of the recipe key it tunes (checked against that key's field by space_problems).
UNBOUNDED_BY_DESIGN = {"tune.space.low", "tune.space.high", "tune.space.step", "tune.space.choices"}


def _members(annotation: typing.Any) -> tuple[typing.Any, ...]:
    return typing.get_args(annotation) or (annotation,)


def _numeric(annotation: typing.Any) -> bool:
    for member in _members(annotation):
        if member in (int, float):
            return True
        if typing.get_origin(member) in (list, tuple, dict, typing.Union, types.UnionType) and _numeric(member):
            return True
    return False


def unbounded_fields(model: type[BaseModel], prefix: str = "", seen: set | None = None) -> list[str]:
    """``key: lower/upper bound missing`` for every int or float field of ``model`` and its tables."""
    seen = set() if seen is None else seen
    if model in seen:
        return []
    seen.add(model)
    found = []
    for name, info in model.model_fields.items():
        for member in _members(info.annotation):
            if isinstance(member, type) and issubclass(member, BaseModel):
                found += unbounded_fields(member, f"{prefix}{name}.", seen)
        key = prefix + name
        if not _numeric(info.annotation) or key in UNBOUNDED_BY_DESIGN:
            continue
        low = any(isinstance(m, (Ge, Gt)) for m in info.metadata)
        high = any(isinstance(m, (Le, Lt)) for m in info.metadata)
        if not (low and high):
            found.append(f"{key}: {'upper' if low else 'lower'} bound missing")
    return found


def test_every_numeric_recipe_key_has_bounds():
    assert unbounded_fields(Recipe) == []


def test_every_numeric_task_option_has_bounds():
    missing = [
        f for spec in get_host().tasks.values() for f in unbounded_fields(spec.options, f"options[{spec.name}].")
    ]
    assert missing == []


def test_the_sweep_catches_a_missing_bound():
    from pydantic import Field

    class Table(BaseModel):
        size: int = Field(1, ge=1)
        ratio: float | None = None

    class Top(BaseModel):
        table: Table = Table()

    assert unbounded_fields(Top) == ["table.size: upper bound missing", "table.ratio: lower bound missing"]
