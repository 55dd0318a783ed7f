"""The objects that travel through the ten steps: what a task is, and the state of one run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from nlptasks.recipe import Recipe

__all__ = ["NoOptions", "Predictor", "RunContext", "TaskSpec"]

log = logging.getLogger("nlptasks")


class NoOptions(BaseModel):
    """Options model for a task that takes none: any key in ``[options]`` is an error."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class TaskSpec:
    """What a task plugin declares through ``register_tasks``.

    :param name: the name a recipe uses (``task = "cls"``); lower case, no spaces.
    :param description: one line, shown by ``nlptasks plugins``.
    :param options: pydantic model that validates the recipe's ``[options]`` table (forbid
        unknown keys and describe every field: the messages and ``nlptasks schema`` come from it).
    :param best_metric: the metric (a key of step 6's result, or ``"loss"``) that picks the best
        checkpoint; or, when it depends on the options, a function of the validated options that
        returns it (e.g. accuracy for classes, Spearman for scores).
    :param greater_is_better: whether a higher ``best_metric`` is better.
    :param stratify_by: given the validated options, the column to stratify random splits on
        (``None``: plain random splits).
    :param peft_task_type: the peft task type of the model step 5 builds, which lets a recipe add
        a ``[peft]`` table: ``"SEQ_CLS"``, ``"TOKEN_CLS"``, ``"FEATURE_EXTRACTION"`` or
        ``"CAUSAL_LM"`` (see :mod:`nlptasks.peft_support`), or a function of the validated options
        that returns one (its docstring's first line describes it in listings).  ``None``: the
        task does not support PEFT, and a ``[peft]`` table is a recipe error.
    """

    name: str
    description: str
    options: type[BaseModel] = NoOptions
    best_metric: str | Callable[[Any], str] = "loss"
    greater_is_better: bool = False
    stratify_by: Callable[[Any], str | None] | None = None
    peft_task_type: str | Callable[[Any], str | None] | None = None
    plugin: str = ""  # filled in by the host: the plugin that registered the task

    def best_metric_for(self, options: Any) -> str:
        """The checkpoint-picking metric for a run with these validated ``options``."""
        return self.best_metric(options) if callable(self.best_metric) else self.best_metric

    def peft_task_type_for(self, options: Any) -> str | None:
        """The peft task type for a run with these validated ``options`` (``None``: no PEFT)."""
        if callable(self.peft_task_type):
            return self.peft_task_type(options)
        return self.peft_task_type

    def peft_task_type_text(self) -> str:
        """``peft_task_type`` for listings: the type, ``-``, or the function's description."""
        if callable(self.peft_task_type):
            doc = (self.peft_task_type.__doc__ or "").strip().splitlines()
            return doc[0] if doc else "depends on the task options"
        return self.peft_task_type or "-"

    def best_metric_text(self) -> str:
        """``best_metric`` for listings: the name, or a note that the options decide it."""
        if callable(self.best_metric):
            doc = (self.best_metric.__doc__ or "").strip().splitlines()
            return doc[0] if doc else "depends on the task options"
        return self.best_metric


@runtime_checkable
class Predictor(Protocol):
    """What step 10 returns: call it with inputs, get one dict per input, in order.

    Optional, for file formats of the task's own (``nlptasks infer --format NAME``): a predictor
    may declare ``formats``, a dict ``{name: one-line description}``, and implement
    ``read_inputs(path, fmt, stream) -> Iterable`` (``path`` is ``None`` when reading ``stream``,
    i.e. stdin; return a generator so that big files stream) and ``write_outputs(results, fmt,
    stream)``, which the CLI calls once per chunk of results, in order.  The CLI checks
    ``--format`` against ``formats`` and lists them when a format is not offered; a ``--file``
    whose extension is one of the names uses that format without ``--format``.  Without a task
    format the CLI reads txt/csv/tsv/jsonl and writes JSON lines (or ``--format csv``).

    ``nlptasks infer`` calls the predictor on chunks of ``--chunk-rows`` inputs and sets its
    ``batch_size`` and ``max_length`` attributes, where it has them, from ``--batch-size`` and
    ``--max-length``; a predictor must give each input the same result whatever else is in the
    same call (tests/test_parity.py holds the built-in tasks to it).

    Optional, for ranking (``nlptasks infer --candidates FILE --top-k K``): a predictor may
    implement ``rank(queries, candidates, top_k) -> list[dict]``, one dict per query with its
    ``top_k`` best candidates; the CLI says plainly when a run's predictor cannot rank.

    Optional, for tasks that generate text (``nlptasks infer --max-new-tokens N --temperature T
    --top-p P``): ``configure_generation(max_new_tokens=None, temperature=None, top_p=None)``;
    the CLI passes only the settings given and says plainly when a task does not generate.
    """

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]: ...


@dataclass
class RunContext:
    """The state of one run, handed to every step.

    Steps read the recipe through ``recipe`` and ``options`` and leave what later steps need in
    the attributes below; anything else a plugin wants to carry goes into ``state``.
    """

    recipe: Recipe
    task: TaskSpec
    options: Any
    output_dir: Path
    sources: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)
    tokenizer: Any = None
    labels: list[str] | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    log: logging.Logger = log
    resume_from: Path | None = None
    """The checkpoint step 9 continues from (``nlptasks run --resume``); ``None``: a fresh start."""

    def drop(self, split: str, reason: str, count: int) -> None:
        """Record that ``count`` rows of ``split`` were dropped for ``reason`` (logged, saved)."""
        if count <= 0:
            return
        per_split = self.dropped.setdefault(split, {})
        per_split[reason] = per_split.get(reason, 0) + count
        where = self.sources.get(split, split)
        self.log.warning("dropped %d %s row(s) from %s (%s)", count, reason, split, where)

    @property
    def checkpoints_dir(self) -> Path:
        return self.output_dir / "checkpoints"
