"""Steps 7 and 9, generic part: TrainingArguments from the recipe, then train and evaluate."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from nlptasks.errors import NlptasksError, Problem, RecipeError, did_you_mean

if TYPE_CHECKING:
    from nlptasks.context import RunContext

__all__ = [
    "auto_precision",
    "build_trainer",
    "describe_log",
    "evaluate_split",
    "eval_steps_warning",
    "guard_trainer",
    "make_training_arguments",
    "resolve_precision",
    "train_and_evaluate",
    "training_kwargs",
    "use_readable_logs",
]


def auto_precision(device: str, pretrained: bool = True) -> str:
    """What ``train.precision = "auto"`` trains in on ``device`` (``cuda`` or ``cpu``): bf16 on GPUs
    that support it (a GPU not on this machine is assumed to), fp16 on older GPUs; on a CPU, bf16
    autocast for fine-tuning a pretrained model where the CPU computes in bf16 natively (AVX-512
    BF16 or AMX), else fp32.  Measured here (docs/benchmarks.md, "How the defaults were chosen"):
    MiniLM on SST-2 trains 1.59x faster in bf16 at the same accuracy, while small models built
    from scratch (``pretrained`` false) gained no speed in bf16 and lost accuracy, so they stay
    in fp32.  The planner estimates with the same rule."""
    import torch

    if device == "cuda":
        return "fp16" if torch.cuda.is_available() and not torch.cuda.is_bf16_supported() else "bf16"
    from nlptasks.engine.system.machine import cpu_has_bf16

    return "bf16" if pretrained and cpu_has_bf16() else "fp32"


def resolve_precision(precision: str, pretrained: bool = True) -> str:
    """``train.precision`` on this machine: ``auto`` as :func:`auto_precision` says; fp16 without a
    CUDA GPU is a recipe error."""
    import torch

    cuda = torch.cuda.is_available()
    if precision == "auto":
        return auto_precision("cuda" if cuda else "cpu", pretrained)
    if precision == "fp16" and not cuda:
        raise RecipeError(
            "recipe",
            [Problem("train.precision", "fp16 needs a CUDA GPU; this machine has none (use 'auto' or 'fp32')")],
        )
    return precision


def training_kwargs(ctx: RunContext, has_validation: bool, has_metrics: bool, progress: bool = True) -> dict[str, Any]:
    """The keyword arguments for ``TrainingArguments`` (step 7's input): the recipe's, through the
    one mapping :func:`nlptasks.recipe.arguments.training_arguments`, in this run's situation
    (the best metric the task declares, the precision and optimizer resolved for this machine)."""
    import torch

    from nlptasks.engine.system.distributed import world_size
    from nlptasks.engine.training.optimize import resolve_optimizer
    from nlptasks.recipe.arguments import Situation, optimize_conflicts, training_arguments

    t = ctx.recipe.train
    task_best = ctx.task.best_metric_for(ctx.options)
    best = t.best_metric or task_best
    greater = ctx.task.greater_is_better if best == task_best else not best.endswith("loss")
    if best != "loss" and not has_metrics:
        raise RecipeError(
            "recipe", [Problem("train.best_metric", f"{best!r} needs metrics, but the task computes only the loss")]
        )
    conflicts = optimize_conflicts(ctx.recipe.optimize, t.extra)
    if conflicts:
        raise RecipeError("recipe", conflicts)
    precision = resolve_precision(t.precision, pretrained=ctx.recipe.model.name_or_path is not None)
    situation = Situation(
        output_dir=str(ctx.checkpoints_dir),
        evaluate=has_validation and t.eval_strategy != "no",
        best_metric=best,
        greater_is_better=greater,
        precision=precision,
        optimizer=resolve_optimizer(ctx.recipe.optimize.optimizer),
        cuda=torch.cuda.is_available(),
        world_size=world_size(),
        progress=progress,
    )
    ctx.manifest["precision"] = precision
    if "tensorboard" in t.report_to:  # transformers' TensorBoardCallback reads the folder from here
        import os

        os.environ["TENSORBOARD_LOGGING_DIR"] = str(ctx.output_dir / "tensorboard")
    kwargs = training_arguments(ctx.recipe, situation)
    if kwargs.get("deepspeed"):  # completed here, so a task's own TrainingArguments (step 7) gets it too
        from nlptasks.engine.training.deepspeed import deepspeed_config

        kwargs["deepspeed"] = deepspeed_config(kwargs["deepspeed"])
    return kwargs


def make_training_arguments(kwargs: dict[str, Any]) -> Any:
    """``TrainingArguments(**kwargs)``, with unknown keys reported as ``train.extra.<key>``."""
    from transformers import TrainingArguments

    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        raise RecipeError(
            "recipe",
            [
                Problem(f"train.extra.{k}", f"not a transformers TrainingArguments field{did_you_mean(k, known)}")
                for k in unknown
            ],
        )
    if kwargs.get("deepspeed"):
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            raise RecipeError(
                "recipe",
                [
                    Problem(
                        "train.extra.deepspeed", "needs the deepspeed package (not installed: pip install deepspeed)"
                    )
                ],
                hint="DeepSpeed: docs/optimize.md#deepspeed-zero.",
            )
    try:
        return TrainingArguments(**kwargs)
    except (ValueError, TypeError) as exc:
        raise NlptasksError(f"train: transformers rejected the training arguments: {exc}") from None


_SKIP_IN_LOG = {"total_flos", "epoch", "grad_norm"}
_RATE_KEYS = ("runtime", "samples_per_second", "steps_per_second")


def describe_log(logs: dict[str, Any], step: int, max_steps: int) -> str | None:
    """One readable line for a Trainer log entry (instead of the raw dict it prints).

    Training entries become ``step 20/282 (epoch 0.21): loss 0.6600, learning_rate 3.3e-04``;
    evaluation entries ``validation (epoch 2): loss 0.4120, accuracy 0.8273``.  Per-class values
    (keys with a ``/``) and timings are left out: they are in the final table and metrics.json.
    """
    epoch = logs.get("epoch")
    where = f" (epoch {round(epoch, 2):g})" if isinstance(epoch, (int, float)) else ""
    for prefix, name in (("eval_", "validation"), ("test_", "test")):
        if any(k.startswith(prefix) for k in logs):
            values = {k[len(prefix) :]: v for k, v in logs.items() if k.startswith(prefix)}
            shown = [
                f"{k} {_fmt(v)}"
                for k, v in values.items()
                if "/" not in k and not k.endswith(_RATE_KEYS) and isinstance(v, (int, float))
            ]
            return f"{name}{where}: " + ", ".join(shown)
    if "train_runtime" in logs:
        return f"training done: {logs['train_runtime']:.0f} s, {logs.get('train_samples_per_second', 0):.1f} samples/s"
    shown = [f"{k} {_fmt(v)}" for k, v in logs.items() if k not in _SKIP_IN_LOG and isinstance(v, (int, float))]
    if not shown:
        return None
    return f"step {step}/{max_steps}{where}: " + ", ".join(shown)


def _fmt(value: float) -> str:
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1):
        return str(int(value))
    return f"{value:.4f}" if abs(value) >= 1e-3 else f"{value:.1e}"


def use_readable_logs(trainer: Any, ctx: RunContext, progress: bool) -> None:
    """Replace the Trainer's raw-dict log printers with :func:`describe_log` lines on stderr.

    With progress bars the lines are written above the bar (``tqdm.write``); without, they go to
    the ``nlptasks`` logger.  Either way stdout stays free for the final table.
    """
    import sys

    from transformers import PrinterCallback, ProgressCallback, TrainerCallback

    def emit(line: str, bar: Any = None) -> None:
        if bar is not None:
            bar.write(f"nlptasks: {line}", file=sys.stderr)
        else:
            ctx.log.info("%s", line)

    class ReadableProgress(ProgressCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if state.is_world_process_zero and logs:
                line = describe_log(logs, state.global_step, state.max_steps)
                if line:
                    emit(line, self.training_bar)

    class ReadableLog(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if state.is_world_process_zero and logs:
                line = describe_log(logs, state.global_step, state.max_steps)
                if line:
                    emit(line)

    for printer in (PrinterCallback, ProgressCallback):
        if trainer.pop_callback(printer) is not None:
            trainer.add_callback(ReadableProgress() if progress else ReadableLog())


def build_trainer(
    trainer_class: Any,
    ctx: RunContext,
    model: Any,
    args: Any,
    data: Any,
    data_collator: Any,
    compute_metrics: Any,
    **kwargs: Any,
) -> Any:
    """``trainer_class`` (``transformers.Trainer`` or a subclass) over the run's splits: what step 8b
    builds by default, and what a plugin calls with its own Trainer subclass.  Further keyword
    arguments go to the class (e.g. ``preprocess_logits_for_metrics``)."""
    return trainer_class(
        model=model,
        args=args,
        train_dataset=data["train"] if "train" in data else None,  # nlptasks eval: no train split
        eval_dataset=data["validation"] if "validation" in data else None,
        processing_class=ctx.tokenizer,
        data_collator=data_collator,
        compute_metrics=compute_metrics,
        **kwargs,
    )


def _strip(metrics: dict[str, Any], prefix: str) -> dict[str, Any]:
    out = {}
    for k, v in metrics.items():
        key = k[len(prefix) + 1 :] if k.startswith(prefix + "_") else k
        if isinstance(v, float) and math.isnan(v):
            v = None
        out[key] = v
    return out


def train_and_evaluate(ctx: RunContext, trainer: Any, data: Any) -> dict[str, Any]:
    """Default step 9: train (best checkpoint restored), then evaluate validation and test."""
    result = trainer.train()
    metrics: dict[str, Any] = {"train": _strip(dict(result.metrics), "train")}
    state = trainer.state
    metrics["train"]["steps"] = state.global_step  # optimizer steps (micro-batches / accumulation)
    if state.best_model_checkpoint:
        metrics["train"]["best_step"] = int(state.best_model_checkpoint.rstrip("/").rsplit("-", 1)[-1])
    for split in ("validation", "test"):
        if split in data and len(data[split]):
            metrics[split] = evaluate_split(trainer, data, split)
    return metrics


def evaluate_split(trainer: Any, data: Any, split: str) -> dict[str, Any]:
    """``trainer.evaluate`` on ``data[split]``, its metrics without the Trainer's key prefix: what
    step 9 reports for validation and test, and the default of ``nlptasks_evaluate``."""
    prefix = "eval" if split == "validation" else split
    metrics = _strip(trainer.evaluate(eval_dataset=data[split], metric_key_prefix=prefix), prefix)
    metrics.pop("model_preparation_time", None)  # the Trainer's, before any training: not a figure of the split
    return metrics


def guard_trainer(trainer: Any, ctx: RunContext) -> None:
    """Around step 9, whatever Trainer class and ``nlptasks_train`` a plugin uses:

    - a resumable checkpoint every ``output.checkpoint_steps`` optimizer steps;
    - the first non-finite training loss stops training at that step, with no evaluation or
      checkpoint of the broken weights, and ``trainer.train()`` then raises an error naming the
      step and the last good checkpoint (the run stays incomplete);
    - with ``ctx.resume_from`` set (``nlptasks run --resume``), ``trainer.train()`` continues
      from that checkpoint: weights, optimizer, scheduler, RNG state and position in the data;
    - a warning at the start when ``train.eval_steps`` is more than the run's optimizer steps (no
      evaluation would happen during training: :func:`eval_steps_warning`);
    - restoring the best checkpoint of a model with tied weights (a masked LM's decoder is its
      embeddings) ties them again instead of warning that they are "missing": safetensors stores
      a tied tensor once, and the Trainer names the other copy's keys.
    """
    import torch
    from transformers import TrainerCallback

    every = ctx.recipe.output.checkpoint_steps
    bad: dict[str, Any] = {}
    original_step = trainer.training_step

    def training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        loss = original_step(model, inputs, *args, **kwargs)
        if not bad and isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            bad.update(step=trainer.state.global_step + 1, value=float(loss.detach().float().mean()))
        return loss

    class Guard(TrainerCallback):
        def _stop(self, control: Any) -> Any:
            control.should_training_stop = True
            control.should_save = control.should_evaluate = control.should_log = False
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if bad:
                return self._stop(control)
            if every and state.global_step % every == 0:
                control.should_save = True
            return control

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            return self._stop(control) if bad else control

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            warning = eval_steps_warning(args, state.max_steps)
            if warning and state.is_world_process_zero:
                ctx.log.warning("%s", warning)
            return control

    trainer.training_step = training_step
    trainer.add_callback(Guard())
    original_warnings = getattr(trainer, "_issue_warnings_after_load", None)
    if original_warnings is not None:

        def issue_warnings_after_load(load_result: Any) -> None:
            tied = set(getattr(trainer.model, "all_tied_weights_keys", None) or ())
            missing = [k for k in load_result.missing_keys if k not in tied]
            if len(missing) < len(load_result.missing_keys):
                trainer.model.tie_weights()
                load_result = load_result._replace(missing_keys=missing)
            original_warnings(load_result)

        trainer._issue_warnings_after_load = issue_warnings_after_load
    original_train = trainer.train

    def train(*args: Any, **kwargs: Any) -> Any:
        if ctx.resume_from is not None and not args:
            kwargs.setdefault("resume_from_checkpoint", str(ctx.resume_from))
        result = original_train(*args, **kwargs)
        if bad:
            raise _diverged(ctx, bad["step"], bad["value"], trainer.args.learning_rate)
        return result

    trainer.train = train


def eval_steps_warning(args: Any, max_steps: int) -> str | None:
    """The warning for ``train.eval_steps`` beyond the run's ``max_steps`` optimizer steps, or
    ``None``.  A warning, not a refusal: the steps come from the data (rows, batch, epochs), and a
    quick try of a recipe on fewer rows (``--set data.max_train_rows=...``) is a run worth doing;
    the final evaluation still happens."""
    strategy = getattr(args.eval_strategy, "value", args.eval_strategy)
    every = args.eval_steps
    if strategy != "steps" or not isinstance(every, int) or not max_steps or every <= max_steps:
        return None
    return (
        f"train.eval_steps = {every} is more than the {max_steps} optimizer steps of this run (batch "
        f"{args.per_device_train_batch_size} x {args.gradient_accumulation_steps}, {args.num_train_epochs:g} "
        "epochs): no evaluation during training, only the final one; set train.eval_steps to at most "
        f"{max_steps}, or train.eval_strategy = 'epoch'"
    )


def _diverged(ctx: RunContext, step: int, value: float, learning_rate: float) -> NlptasksError:
    """The error for a non-finite loss at optimizer step ``step``.  That loss came from the weights
    of step ``step - 1``: a checkpoint saved there holds them (finite or not, they give a non-finite
    loss, and ``--resume`` would start from them), so it is removed; the last good checkpoint is the
    newest one before it, whose weights gave a finite loss."""
    import shutil

    from nlptasks.engine.training.resume import checkpoint_problem, checkpoint_step

    saved = [p for p in ctx.checkpoints_dir.glob("checkpoint-*") if p.is_dir() and checkpoint_step(p) >= 0]
    removed = sorted(p for p in saved if checkpoint_step(p) >= step - 1)
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    good = [p for p in saved if checkpoint_step(p) < step - 1 and checkpoint_problem(p) is None]
    if good:
        kept = f"the last good checkpoint is {max(good, key=checkpoint_step)}"
    else:
        kept = "no resumable checkpoint was saved before it" + (
            "" if ctx.recipe.output.checkpoint_steps else " (output.checkpoint_steps is not set)"
        )
    if removed:
        kept += f" ({', '.join(p.name for p in removed)}, holding the weights that gave that loss, was removed)"
    return NlptasksError(
        f"train: the training loss became {value} at step {step}; training stopped there and the run "
        f"{ctx.output_dir} is left incomplete; {kept}",
        hint=f"Lower train.learning_rate (the run used {learning_rate:g}), "
        "or check the data (nlptasks check RECIPE), then start a new run.",
    )
