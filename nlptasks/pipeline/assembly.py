"""Steps 5 to 8, assembled once for every command that builds a Trainer: ``nlptasks run`` (and so
each ``tune`` trial) and ``nlptasks eval``.

:func:`assemble` builds the model (step 5; in evaluation mode, the run's trained model through the
backend ``eval`` chose), prepares it (``[optimize]``; the ``[peft]`` adapter when training), gets
the metrics (step 6) told which split they score, derives the training arguments' keywords from the
recipe, and returns a ``build(kwargs)`` that makes steps 7, 8 and 8b with everything the engine
wraps around them: readable logs, the checkpoint / NaN / resume guard, the token count, the seeded
length-grouped epochs, length-sorted evaluation and the split names.  ``run`` calls ``build``
again after an out-of-memory fallback; ``eval`` calls it once and evaluates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nlptasks.context import RunContext
from nlptasks.engine.model.classes import record as record_model_class
from nlptasks.engine.model.examples import EXAMPLES_FILE, write_examples
from nlptasks.engine.model.introspect import accepted_inputs
from nlptasks.engine.model.modeling import ON_META
from nlptasks.engine.model.peft import apply_peft
from nlptasks.engine.system.distributed import is_main
from nlptasks.engine.training.evaluation import for_splits, name_splits
from nlptasks.engine.training.optimize import prepare_model
from nlptasks.engine.training.ordering import order_evaluation, order_training
from nlptasks.engine.training.structure import model_problems
from nlptasks.engine.training.throughput import count_training_tokens
from nlptasks.engine.training.trainer import guard_trainer, training_kwargs, use_readable_logs
from nlptasks.errors import RecipeError

__all__ = ["Assembly", "assemble"]


@dataclass
class Assembly:
    """What :func:`assemble` made: the model, step 6's metrics, the ``TrainingArguments`` keywords,
    and ``build(kwargs)`` for the Trainer.  ``counted`` holds, per built trainer, the tokens it
    trained on (the last one's is the run's)."""

    model: Any
    compute_metrics: Callable[[Any], dict[str, float]] | None
    kwargs: dict[str, Any]
    build: Callable[[dict[str, Any]], Any]
    counted: list[dict[str, Any]] = field(default_factory=list)


def assemble(ctx: RunContext, hooks: Any, data: Any, progress: bool) -> Assembly:
    """Steps 5 and 6 now, steps 7 to 8b in the returned ``build`` (see the module docstring)."""
    training = ctx.trained_run is None
    model = hooks.nlptasks_build_model(ctx=ctx)  # 5
    # what exports and loaders rebuild: the class step 5 returned (a plugin's own head included)
    record_model_class(ctx.manifest, model)
    if training and (problems := model_problems(model, ctx.recipe)):  # what validate checks on a config at hand
        raise RecipeError("recipe", problems)
    model = prepare_model(ctx, model, training=training)  # [optimize]: attention (and freezing when training)
    examples = (
        training and is_main() and not ctx.state.get(ON_META)
    )  # a few of step 4's examples, as the model takes them
    if examples:
        ctx.output_dir.mkdir(parents=True, exist_ok=True)
        # none when step 4's columns are not the model's inputs: made again below from step 8a's collator
        examples = not write_examples(
            ctx.output_dir / EXAMPLES_FILE, data, model, ctx.task.label_fields_for(ctx.options)
        )
    if training and ctx.recipe.peft is not None:  # the adapter goes on the model step 5 built
        model = apply_peft(ctx, model, data)
    compute_metrics = for_splits(ctx, hooks.nlptasks_metrics(ctx=ctx))  # 6, told which split it scores
    has_validation = "validation" in data and len(data["validation"]) > 0
    kwargs = training_kwargs(ctx, has_validation, compute_metrics is not None, progress=progress)
    names = label_names(ctx, model)
    if names is not None and "label_names" not in ctx.recipe.train.extra:
        kwargs["label_names"] = names
    collators: list[Any] = []
    assembly = Assembly(model=model, compute_metrics=compute_metrics, kwargs=kwargs, build=lambda k: None)

    def build(kwargs: dict[str, Any]) -> Any:  # steps 7, 8 and 8b (7 and 8b again after an OOM fallback)
        args = hooks.nlptasks_training_arguments(ctx=ctx, kwargs=dict(kwargs))  # 7
        if not collators:
            collators.append(hooks.nlptasks_data_collator(ctx=ctx))  # 8
            if examples:
                labels = ctx.task.label_fields_for(ctx.options)
                write_examples(ctx.output_dir / EXAMPLES_FILE, data, model, labels, collator=collators[0])
        trainer = hooks.nlptasks_trainer(  # 8b
            ctx=ctx, model=model, args=args, data=data, data_collator=collators[0], compute_metrics=compute_metrics
        )
        use_readable_logs(trainer, ctx, progress)
        guard_trainer(trainer, ctx)  # checkpoints every N steps, NaN stop, --resume
        assembly.counted.append(count_training_tokens(trainer, ctx.resume_from))  # tokens, loss, tokens/s, MFU
        order_training(trainer, ctx)  # length-grouped epochs drawn from seed and epoch: --resume replays them
        order_evaluation(trainer, ctx)  # length-sorted evaluation batches, results in data order
        name_splits(trainer, ctx, data)  # ctx.evaluating names the split around evaluate/predict
        return trainer

    assembly.build = build
    return assembly


def label_names(ctx: RunContext, model: Any) -> list[str] | None:
    """The Trainer's ``label_names`` from the label fields the task declares, where transformers'
    own guess from the model class would differ and the model takes them all (an ONNX stand-in
    evaluated by ``nlptasks eval`` takes ``start_positions`` and ``end_positions`` but its class
    name says nothing of answer spans); ``None``: leave transformers' guess."""
    from transformers.utils import find_labels

    declared = list(ctx.task.label_fields_for(ctx.options))
    if not declared:
        return None
    try:
        guessed = find_labels(type(model))
        taken = accepted_inputs(model)
    except (TypeError, ValueError, AttributeError):
        return None
    if set(guessed) == set(declared) or not set(declared) <= taken:
        return None
    return declared
