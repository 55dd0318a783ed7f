"""Step 3, generic part: carve the splits the recipe did not give as files out of ``train``, with
the ratios and seed in ``data.split``, stratified on the task's ``stratify_by`` column."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from nlptasks.errors import NlptasksError

if TYPE_CHECKING:
    from datasets import DatasetDict

    from nlptasks.context import RunContext

__all__ = ["split_data", "stratified_indices"]


def stratified_indices(labels: list[Any] | None, n: int, ratios: dict[str, float], seed: int) -> dict[str, list[int]]:
    """Split ``range(n)`` into ``train`` and the named held-out parts.

    With ``labels``, each class is split on its own (so every part keeps the class mix; a class
    too small to share still goes to train).  Deterministic for a given seed.
    """
    rng = random.Random(seed)
    groups: dict[Any, list[int]] = defaultdict(list)
    if labels is None:
        groups[None] = list(range(n))
    else:
        for i, label in enumerate(labels):
            groups[label].append(i)
    parts: dict[str, list[int]] = {name: [] for name in ["train", *ratios]}
    for key in sorted(groups, key=str):
        idx = groups[key]
        rng.shuffle(idx)
        start = 0
        for name, ratio in ratios.items():
            take = int(round(ratio * len(idx)))
            if labels is None:
                take = max(take, 1) if len(idx) > len(ratios) else take
            parts[name] += idx[start : start + take]
            start += take
        parts["train"] += idx[start:]
    for name in parts:
        parts[name].sort()
    return parts


def split_data(ctx: RunContext, data: DatasetDict) -> DatasetDict:
    """Default step 3: carve missing validation/test splits out of train."""
    from datasets import DatasetDict

    cfg = ctx.recipe.data.split
    ratios: dict[str, float] = {}
    if "validation" not in data:
        ratios["validation"] = cfg.validation if cfg.validation is not None else 0.1
    if "test" not in data:
        if cfg.test is not None:
            ratios["test"] = cfg.test
        elif "validation" in ratios and cfg.validation is None:
            ratios["test"] = 0.1
    if not ratios:
        return data
    if sum(ratios.values()) >= 0.9:
        raise NlptasksError(
            f"data.split: held-out fractions add up to {sum(ratios.values()):.2f}; leave at least 10% for training"
        )
    train = data["train"]
    column = None
    if cfg.stratify and ctx.task.stratify_by is not None:
        column = ctx.task.stratify_by(ctx.options)
        if column is not None and column not in train.column_names:
            column = None  # the task's preprocessing reports the missing column with its file
    labels = [str(v) for v in train[column]] if column else None
    parts = stratified_indices(labels, len(train), ratios, cfg.seed)
    for name, ratio in ratios.items():
        if not parts[name]:
            per_class = f", split per class of {column!r}" if column else ""
            raise NlptasksError(
                f"data.split.{name}: {ratio:g} of {len(train)} training rows{per_class} leaves no rows for {name}",
                hint=f"Give data.{name} as a file, raise data.split.{name}, or split without classes: "
                "--set data.split.stratify=false",
            )
    out = DatasetDict({"train": train.select(parts["train"])})
    source = ctx.sources.get("train", "train")
    for name in ("validation", "test"):
        if name in data:
            out[name] = data[name]
        elif name in parts:
            out[name] = train.select(parts[name])
            ctx.sources[name] = f"{source} ({ratios[name]:.0%} split, seed {cfg.seed})"
    ctx.log.info(
        "split %s%s: %s",
        source,
        f", stratified on {column!r}" if column else "",
        ", ".join(f"{k} {len(v)}" for k, v in out.items()),
    )
    return out
