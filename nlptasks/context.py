"""The state of one run, handed to every step: :class:`RunContext`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.types import TaskSpec

if TYPE_CHECKING:
    from nlptasks.recipe import Recipe

__all__ = ["RunContext"]

log = logging.getLogger("nlptasks")


@dataclass
class RunContext:
    """The state of one run, handed to every step.

    Steps read the recipe through ``recipe`` and ``options`` and leave what later steps need in
    the attributes below; anything else a plugin wants to carry goes into ``state``.
    """

    recipe: Recipe
    """The validated recipe (``ctx.recipe.model.max_length``, ``ctx.recipe.train.padding`` ...)."""
    task: TaskSpec
    """The task's :class:`~nlptasks.types.TaskSpec`."""
    options: Any
    """The validated ``[options]`` (an instance of ``task.options``)."""
    output_dir: Path
    """The run folder ``<output.dir>/<task>/<run_name>/``."""
    sources: dict[str, str] = field(default_factory=dict)
    """Split → where it came from (a file path): name it in errors."""
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)
    """Split → reason → rows dropped (:meth:`drop`); saved in ``metrics.json``."""
    tokenizer: Any = None
    """Set by ``get_tokenizer`` in step 4; saved with the model."""
    labels: list[str] | None = None
    """The class names, if the task has classes: saved as ``labels.json`` and in ``nlptasks.json``."""
    manifest: dict[str, Any] = field(default_factory=dict)
    """Extra entries for the run's ``nlptasks.json`` (what step 10 reads back)."""
    side: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Split → side data step 4 keeps for scoring that split per original example (window →
    example maps, offsets, raw rows): ``ctx.side[split]["windows"] = ...``.  Step 6's
    ``compute_metrics`` receives it as :attr:`nlptasks.types.Evaluation.side`."""
    evaluating: str | None = None
    """The split being evaluated or predicted right now (set by the engine around every
    ``trainer.evaluate`` / ``trainer.predict``); ``None`` outside them."""
    recorded: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Split → figures measured outside evaluation (:meth:`record`), merged into ``metrics.json``."""
    state: dict[str, Any] = field(default_factory=dict)
    """Anything else a plugin carries from one step to a later one."""
    log: logging.Logger = log
    """The ``nlptasks`` logger."""
    resume_from: Path | None = None
    """The checkpoint step 9 continues from (``nlptasks run --resume``); ``None``: a fresh start."""
    skip_malformed_rows: bool = False
    """Set in step 1 by a task whose options say to skip malformed rows: the default step 2 then
    leaves out a row whose value is of another kind than its column's (a list among strings),
    counted with :meth:`drop` as ``"malformed"``, where it would stop with an error naming it."""

    trained_run: Path | None = None
    """Set when the steps run to evaluate a trained run rather than train one (``nlptasks
    eval``): that run's folder.  Then the data holds only the labelled data to evaluate, as the
    ``test`` split (no ``train``); ``tokenizer`` and ``labels`` are already the run's when step 4
    starts, and step 4 keeps them: rows whose labels the run never saw are dropped with
    :meth:`drop` (reason ``"label unknown to the run"``) where a run would stop, and
    :func:`nlptasks.plugin.load_model` in step 5 loads the run's trained weights (its adapter
    included) instead of the recipe's model."""
    trained_manifest: dict[str, Any] | None = None
    """With :attr:`trained_run`: its parsed ``nlptasks.json`` (the adapter chosen)."""
    trained_model: Callable[[str | type], Any] | None = None
    """With :attr:`trained_run`: ``trained_model(auto_class)`` (a transformers class name, or a
    plugin's own model class) gives the run's trained model as a
    module a Trainer evaluates, through the backend ``nlptasks eval --backend`` chose (what
    :func:`nlptasks.plugin.load_model` returns in step 5 then)."""
    evaluations: dict[str, Any] = field(default_factory=dict)
    """Split → its latest :class:`~nlptasks.types.Evaluation` (predictions and label ids, in the
    split's order, with its side data), kept by the engine each time step 6 scores a split:
    what ``nlptasks_errors`` reads to list the wrong predictions."""

    def drop(self, split: str, reason: str, count: int) -> None:
        """Record that ``count`` rows of ``split`` were dropped for ``reason`` (logged, saved)."""
        if count <= 0:
            return
        per_split = self.dropped.setdefault(split, {})
        per_split[reason] = per_split.get(reason, 0) + count
        where = self.sources.get(split, split)
        self.log.warning("dropped %d %s row(s) from %s (%s)", count, reason, split, where)

    def record(self, split: str, name: str, value: Any) -> None:
        """Save a figure about ``split`` measured outside evaluation (e.g. tags repaired in step 4)
        under ``name`` in that split's metrics (``metrics.json`` and the final table)."""
        self.recorded.setdefault(split, {})[name] = value

    @property
    def checkpoints_dir(self) -> Path:
        """Where the Trainer writes checkpoints while training (``<run>/checkpoints``)."""
        return self.output_dir / "checkpoints"
