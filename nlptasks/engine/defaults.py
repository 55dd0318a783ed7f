"""The engine's generic step implementations, registered as ``trylast`` defaults.

Any plugin overrides a step by implementing the same hook and returning a value.  Steps 4, 5
and 10 have no generic implementation: their fallbacks raise an error naming the task, because a
task plugin must provide them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.errors import PluginError
from nlptasks.hookspecs import hookimpl

__all__ = [
    "nlptasks_build_model",
    "nlptasks_data_collator",
    "nlptasks_load_data",
    "nlptasks_load_predictor",
    "nlptasks_metrics",
    "nlptasks_preprocess",
    "nlptasks_setup",
    "nlptasks_split",
    "nlptasks_train",
    "nlptasks_trainer",
    "nlptasks_training_arguments",
]


def _missing(step: str, task: str, plugin: str) -> PluginError:
    return PluginError(
        f"no plugin implements {step} for task {task!r} (plugin {plugin!r} returned nothing)",
        hint="See which hooks each plugin implements with `nlptasks plugins`.",
    )


@hookimpl(trylast=True)
def nlptasks_setup(ctx: Any) -> None:
    from transformers import set_seed

    set_seed(ctx.recipe.seed)
    ctx.output_dir.mkdir(parents=True, exist_ok=True)


@hookimpl(trylast=True)
def nlptasks_load_data(ctx: Any) -> Any:
    from nlptasks.engine.data.reading import load_data

    return load_data(ctx)


@hookimpl(trylast=True)
def nlptasks_split(ctx: Any, data: Any) -> Any:
    from nlptasks.engine.data.splitting import split_data

    return split_data(ctx, data)


@hookimpl(trylast=True)
def nlptasks_preprocess(ctx: Any, data: Any) -> Any:
    raise _missing("step 4 (nlptasks_preprocess)", ctx.task.name, ctx.task.plugin)


@hookimpl(trylast=True)
def nlptasks_build_model(ctx: Any) -> Any:
    raise _missing("step 5 (nlptasks_build_model)", ctx.task.name, ctx.task.plugin)


@hookimpl(trylast=True)
def nlptasks_metrics(ctx: Any) -> None:
    return None


@hookimpl(trylast=True)
def nlptasks_training_arguments(ctx: Any, kwargs: dict[str, Any]) -> Any:
    from nlptasks.engine.training.trainer import make_training_arguments

    return make_training_arguments(kwargs)


@hookimpl(trylast=True)
def nlptasks_data_collator(ctx: Any) -> Any:
    from transformers import DataCollatorWithPadding, default_data_collator

    if ctx.recipe.train.padding == "max_length":
        return default_data_collator
    return DataCollatorWithPadding(ctx.tokenizer)


@hookimpl(trylast=True)
def nlptasks_trainer(ctx: Any, model: Any, args: Any, data: Any, data_collator: Any, compute_metrics: Any) -> Any:
    from transformers import Trainer

    from nlptasks.engine.training.trainer import build_trainer

    return build_trainer(Trainer, ctx, model, args, data, data_collator, compute_metrics)


@hookimpl(trylast=True)
def nlptasks_train(ctx: Any, trainer: Any, data: Any) -> dict[str, Any]:
    from nlptasks.engine.training.trainer import train_and_evaluate

    return train_and_evaluate(ctx, trainer, data)


@hookimpl(trylast=True)
def nlptasks_evaluate(ctx: Any, trainer: Any, data: Any, split: str) -> dict[str, Any]:
    from nlptasks.engine.training.trainer import evaluate_split

    return evaluate_split(trainer, data, split)


@hookimpl(trylast=True)
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: Any) -> Any:
    task = manifest.get("task", "?")
    raise PluginError(
        f"no plugin can load task {task!r} for inference (run {run_dir})",
        hint=f"Install the plugin that provides {task!r}; `nlptasks plugins` lists what is installed.",
    )
