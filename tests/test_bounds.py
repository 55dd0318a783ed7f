"""Every number a recipe can set has bounds: a value no run could use (``train.batch_size =
9223372036854775807``) is refused by ``validate`` with the key and the range, never by a traceback
in ``run``.  The sweep covers the recipe's tables and every task plugin's ``[options]``."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

from nlptasks.host import get_host
from nlptasks.recipe import Recipe

# Keys whose bounds are those of the key they stand for: a search space's low/high/step/choices
# take the values of the recipe key it tunes (checked against that key's field by space_problems).
UNBOUNDED_BY_DESIGN = {"tune.space.low", "tune.space.high", "tune.space.step", "tune.space.choices"}


def _leaves(annotation: typing.Any, bounds: tuple = ()) -> typing.Iterator[tuple[typing.Any, tuple]]:
    """Every int or float inside ``annotation`` (through unions, lists, tuples, dicts and
    ``Annotated``), with the constraints an ``Annotated`` around it carries (``list[Annotated[float,
    Field(ge=0)]]``: an item's own bounds)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *extras = typing.get_args(annotation)
        inner = tuple(c for extra in extras for c in getattr(extra, "metadata", [extra]))
        yield from _leaves(base, (*bounds, *inner))
    elif origin in (list, tuple, dict, typing.Union, types.UnionType):
        for member in typing.get_args(annotation):
            yield from _leaves(member, bounds)
    elif annotation in (int, float):
        yield annotation, bounds


def _members(annotation: typing.Any) -> tuple[typing.Any, ...]:
    return typing.get_args(annotation) or (annotation,)


def unbounded_fields(model: type[BaseModel], prefix: str = "", seen: set | None = None) -> list[str]:
    """``key: lower/upper bound missing`` for every int or float field of ``model`` and its tables
    (a number inside a list or union too: bounded on the field or on the number's own ``Annotated``)."""
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
        if key in UNBOUNDED_BY_DESIGN:
            continue
        for _, own in _leaves(info.annotation):
            constraints = (*info.metadata, *own)
            low = any(isinstance(m, (Ge, Gt)) for m in constraints)
            high = any(isinstance(m, (Le, Lt)) for m in constraints)
            if not (low and high):
                found.append(f"{key}: {'upper' if low else 'lower'} bound missing")
                break
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

    class Lists(BaseModel):  # a number inside a list or behind Annotated is swept too
        weights: list[float] | None = None
        items: list[Annotated[float, Field(ge=0, le=10)]] = []
        choice: Literal["auto"] | Annotated[float, Field(gt=0)] = "auto"

    assert unbounded_fields(Lists) == ["weights: lower bound missing", "choice: upper bound missing"]
