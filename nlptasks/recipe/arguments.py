"""The recipe → ``transformers.TrainingArguments`` mapping, in one place.

Every ``TrainingArguments`` key nlptasks sets is a row of :data:`ARGUMENTS`: the recipe key that
decides it (named in errors), how its value follows from the recipe and the run's
:class:`Situation` (what the recipe alone cannot say: the resolved precision and optimizer, the
machine, whether there is a validation split), and whether ``train.extra`` may set it too.  The
engine builds step 7's keywords from it (:func:`training_arguments`), recipe validation refuses
``train.extra`` keys that shadow a recipe key from it (:func:`shadowed_by`), and the ``[optimize]``
keys' conflicts with ``train.extra`` come from it (:func:`optimize_conflicts`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from nlptasks.errors import Problem
from nlptasks.recipe.schema import OptimizeConfig, Recipe

__all__ = ["ALIASES", "ARGUMENTS", "Argument", "Situation", "optimize_conflicts", "shadowed_by", "training_arguments"]


@dataclass(frozen=True)
class Situation:
    """What the recipe alone cannot say about a run: where its checkpoints go, whether it evaluates
    during training (a validation split, ``train.eval_strategy`` not ``no``), the metric that picks
    the best checkpoint and its direction, the precision and optimizer resolved for this machine,
    whether there is a CUDA GPU, the number of processes, and whether progress bars show."""

    output_dir: str
    evaluate: bool
    best_metric: str
    greater_is_better: bool
    precision: str
    optimizer: str
    cuda: bool = False
    world_size: int = 1
    progress: bool = True

    def keep_best(self, recipe: Recipe) -> bool:
        """Whether the best checkpoint is kept (and restored at the end)."""
        return self.evaluate and recipe.train.keep_best


Extra = Literal["never", "if-default", "yes"]


@dataclass(frozen=True)
class Argument:
    """One ``TrainingArguments`` key: ``source`` (the recipe key, or what decides it), ``value``
    (a function of the recipe and the :class:`Situation`), ``extra`` (whether ``train.extra`` may set
    it too: ``never``, one place per setting; ``if-default``, when its ``[optimize]`` option is left
    at its default; ``yes``, a default nlptasks picks for the machine) and ``present`` (whether the
    key is set at all for this recipe and situation)."""

    source: str
    value: Callable[[Recipe, Situation], Any]
    extra: Extra = "never"
    present: Callable[[Recipe, Situation], bool] | None = None


def _sharded(r: Recipe) -> bool:
    """Whether ``train.zero`` or ``train.extra`` turns on DeepSpeed or FSDP."""
    return bool(r.train.zero or r.train.extra.get("fsdp") or r.train.extra.get("deepspeed"))


def _cpu_group(r: Recipe, s: Situation) -> bool:
    # bf16 autocast on the CPU, and DDP of CPU processes (accelerate then makes them one gloo group)
    return not s.cuda and (s.world_size > 1 or s.precision == "bf16")


ARGUMENTS: dict[str, Argument] = {
    "output_dir": Argument("output.dir", lambda r, s: s.output_dir),
    "num_train_epochs": Argument("train.epochs", lambda r, s: r.train.epochs),
    "max_steps": Argument("train.max_steps", lambda r, s: r.train.max_steps or -1),
    "per_device_train_batch_size": Argument("train.batch_size", lambda r, s: r.train.batch_size),
    "per_device_eval_batch_size": Argument(
        "train.eval_batch_size", lambda r, s: r.train.eval_batch_size or 2 * r.train.batch_size
    ),
    "learning_rate": Argument("train.learning_rate", lambda r, s: r.train.learning_rate),
    "weight_decay": Argument("train.weight_decay", lambda r, s: r.train.weight_decay),
    "warmup_steps": Argument("train.warmup", lambda r, s: r.train.warmup),
    "lr_scheduler_type": Argument("train.scheduler", lambda r, s: r.train.scheduler),
    "gradient_accumulation_steps": Argument(
        "train.gradient_accumulation_steps", lambda r, s: r.train.gradient_accumulation_steps
    ),
    "eval_strategy": Argument("train.eval_strategy", lambda r, s: r.train.eval_strategy if s.evaluate else "no"),
    "eval_steps": Argument("train.eval_steps", lambda r, s: r.train.eval_steps),
    "logging_steps": Argument("train.logging_steps", lambda r, s: r.train.logging_steps),
    "load_best_model_at_end": Argument("train.keep_best", lambda r, s: s.keep_best(r)),
    "metric_for_best_model": Argument("train.best_metric", lambda r, s: s.best_metric if s.keep_best(r) else None),
    "greater_is_better": Argument(
        "train.best_metric (the task says which way each metric is better)",
        lambda r, s: s.greater_is_better if s.keep_best(r) else None,
    ),
    "bf16": Argument("train.precision", lambda r, s: s.precision == "bf16"),
    "fp16": Argument("train.precision", lambda r, s: s.precision == "fp16"),
    "report_to": Argument("train.report_to", lambda r, s: list(r.train.report_to) or "none"),
    "train_sampling_strategy": Argument(
        "train.group_by_length", lambda r, s: "group_by_length" if r.train.group_by_length else "random"
    ),
    "seed": Argument("seed", lambda r, s: r.seed),
    "save_strategy": Argument(
        "train.keep_best (saves at each evaluation) and output.checkpoint_steps",
        lambda r, s: r.train.eval_strategy if s.keep_best(r) else "no",
    ),
    "save_steps": Argument("output.checkpoint_steps", lambda r, s: r.train.eval_steps),
    # Every N steps a resumable checkpoint (the engine's guard, beside the best-model saves); the
    # Trainer saves optimizer, scheduler and RNG state only without save_only_model.
    "save_total_limit": Argument(
        "output.checkpoint_limit",
        lambda r, s: r.output.checkpoint_limit if r.output.checkpoint_steps else (1 if s.keep_best(r) else None),
    ),
    # Trainer refuses save_only_model with FSDP or DeepSpeed when it restores the best model at the end
    "save_only_model": Argument(
        "output.checkpoint_steps (resumable checkpoints when set; whole checkpoints with FSDP or DeepSpeed)",
        lambda r, s: not r.output.checkpoint_steps and not _sharded(r),
    ),
    # the engine completes it (train_micro_batch_size_per_gpu and the rest "auto": deepspeed_config)
    "deepspeed": Argument(
        "train.zero",
        lambda r, s: {"zero_optimization": {"stage": r.train.zero}},
        "yes",
        lambda r, s: r.train.zero is not None,
    ),
    "logging_nan_inf_filter": Argument("nlptasks (off: a NaN loss must show)", lambda r, s: False),
    "disable_tqdm": Argument("--no-progress", lambda r, s: not s.progress),
    "optim": Argument("optimize.optimizer", lambda r, s: s.optimizer, "if-default"),
    "activation_checkpointing": Argument(
        "optimize.gradient_checkpointing",
        lambda r, s: True,
        "if-default",
        lambda r, s: r.optimize.gradient_checkpointing,
    ),
    # the key/value cache is useless in training and clashes with recomputation
    "use_cache": Argument(
        "optimize.gradient_checkpointing",
        lambda r, s: False,
        "if-default",
        lambda r, s: r.optimize.gradient_checkpointing,
    ),
    "tf32": Argument("optimize.tf32", lambda r, s: True, "if-default", lambda r, s: r.optimize.tf32),
    "torch_compile": Argument("optimize.compile", lambda r, s: True, "if-default", lambda r, s: r.optimize.compile),
    "dataloader_pin_memory": Argument("nlptasks (pinned memory with a CUDA GPU)", lambda r, s: s.cuda, "yes"),
    "use_cpu": Argument("nlptasks (CPU processes and bf16 autocast on the CPU)", lambda r, s: True, "yes", _cpu_group),
    # Trainer multiplies each rank's loss by the number of processes when the model's forward takes
    # **kwargs, assuming it divides by the token count of all ranks; models whose loss is a plain mean
    # (sequence classification) then report, and train on, the loss times the world size.  Per-rank
    # means, averaged by DDP, are right for every model.
    "average_tokens_across_devices": Argument(
        "nlptasks (per-rank loss means in a distributed run)", lambda r, s: False, "yes", lambda r, s: s.world_size > 1
    ),
}
"""``TrainingArguments`` key → :class:`Argument`."""

ALIASES: dict[str, str] = {
    "warmup_ratio": "warmup_steps",
    "evaluation_strategy": "eval_strategy",
    "group_by_length": "train_sampling_strategy",
    "gradient_checkpointing": "activation_checkpointing",
}
"""Older ``TrainingArguments`` names of keys in :data:`ARGUMENTS` (refused in ``train.extra`` alike)."""

_OPTION_OF = {
    "optimize.optimizer": "optimizer",
    "optimize.gradient_checkpointing": "gradient_checkpointing",
    "optimize.tf32": "tf32",
    "optimize.compile": "compile",
}


def _row(key: str) -> Argument | None:
    return ARGUMENTS.get(ALIASES.get(key, key))


def training_arguments(recipe: Recipe, situation: Situation) -> dict[str, Any]:
    """Step 7's keywords: every row of :data:`ARGUMENTS` present for this recipe and situation,
    then ``train.extra`` (which may set only what the rows allow: checked by recipe validation and
    by :func:`optimize_conflicts`)."""
    kwargs = {
        key: arg.value(recipe, situation)
        for key, arg in ARGUMENTS.items()
        if arg.present is None or arg.present(recipe, situation)
    }
    kwargs.update(recipe.train.extra)
    return kwargs


def shadowed_by(key: str) -> str | None:
    """The recipe key that sets ``TrainingArguments`` ``key`` when ``train.extra`` may never set it
    (one place for each setting), else ``None``."""
    row = _row(key)
    return row.source if row is not None and row.extra == "never" else None


def optimize_conflicts(opt: OptimizeConfig, extra: dict[str, Any]) -> list[Problem]:
    """``train.extra`` keys that an ``[optimize]`` option also sets: allowed while the option is
    left at its default (older recipes keep working, and ``extra`` can name any other ``optim``),
    a problem naming both keys when both are set."""
    defaults = OptimizeConfig()
    problems = []
    for key in extra:
        row = _row(key)
        if row is None or row.extra != "if-default":
            continue
        option = _OPTION_OF[row.source]
        if getattr(opt, option) != getattr(defaults, option):
            problems.append(
                Problem(
                    f"train.extra.{key}",
                    f"is also set by optimize.{option} = {getattr(opt, option)!r}; keep only optimize.{option}",
                )
            )
    return problems
