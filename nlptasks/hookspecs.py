"""The ten-step pipeline contract, as pluggy hook specifications.

This module is the API reference for plugin authors: every hook below is one step of a run, in
the order the engine calls it.  ``nlptasks run RECIPE`` calls them like this::

    register_tasks                                  (once, when plugins load)
    1  nlptasks_setup(ctx)                          all implementations run
    2  nlptasks_load_data(ctx)             -> raw   first result wins
    3  nlptasks_split(ctx, data)           -> data  first result wins
    4  nlptasks_preprocess(ctx, data)      -> data  first result wins
    5  nlptasks_build_model(ctx)           -> model first result wins
       (engine: with a [peft] table, wrap the model in the adapter)
    6  nlptasks_metrics(ctx)               -> fn    first result wins
    7  nlptasks_training_arguments(ctx, kwargs) -> TrainingArguments, first result wins
    8  nlptasks_data_collator(ctx)         -> collator, first result wins
       nlptasks_trainer(ctx, model, args, data, data_collator, compute_metrics) -> Trainer
    9  nlptasks_train(ctx, trainer, data)  -> metrics, first result wins
       nlptasks_report(ctx, trainer, data, metrics) -> [Markdown section]  all run (model card)
    10 nlptasks_load_predictor(run_dir, manifest) -> predictor (for nlptasks infer)

``nlptasks check RECIPE`` (the data doctor) runs steps 1 to 3, then
       nlptasks_check(ctx, data)           -> [Finding]  all run

Calling conventions
-------------------
*first result wins*: implementations are called newest-registered first (``tryfirst`` /
``trylast`` adjust the order) until one returns something other than ``None``.  The engine's own
generic implementations are registered as ``trylast`` defaults, so any plugin overrides them just
by returning a value.  *all run*: every implementation is called and the results are collected.
Every pipeline step (1 to 10) *may wrap*: an implementation declared with ``@hookimpl(wrapper=True)`` is a generator
that runs code before and after the step, sees (and may replace) its result, and is how
cross-cutting plugins (loggers, timers) work.

Which plugins take part
-----------------------
A plugin that calls ``register(TaskSpec(...))`` in :func:`register_tasks` is a *task plugin*.
The recipe's ``task = "..."`` picks one task; steps 1 to 10 are then called with the *other* task
plugins left out, so a task plugin only ever sees runs of its own tasks (a plugin that provides
several tasks reads ``ctx.task.name``).  Plugins that register no task (cross-cutting plugins) take
part in every run.

PEFT
----
With a ``[peft]`` table in the recipe, the engine wraps the model that step 5 returns in a peft
adapter right after step 5 (``nlptasks.engine.adapters.apply_peft``) and logs the trainable and
total parameter counts; steps 6 to 9 get the ``PeftModel``, and the run saves only the adapter
(plus, for a model built from scratch, the frozen base under ``base/``).  A task plugin takes part
by declaring ``TaskSpec.peft_task_type``; in step 10 it loads the run's model with
``nlptasks.engine.load_trained_model(run_dir, manifest, auto_class)``, which gives the plain
model or the base with the chosen adapter (``nlptasks infer --adapter NAME`` / ``--base-only``).

Heavy libraries (torch, transformers, datasets) are imported inside hook bodies, never at module
level, so that ``nlptasks --help`` stays instant.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from datasets import DatasetDict
    from transformers import PreTrainedModel, Trainer, TrainingArguments

    from nlptasks.context import RunContext
    from nlptasks.types import Finding, Predictor, TaskSpec

PROJECT = "nlptasks"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------


@hookspec
def register_tasks(register: Callable[[TaskSpec], None]) -> None:
    """Declare the task(s) this plugin provides.

    **When:** once, right after plugins are loaded, before any recipe is validated.

    :param register: call it once per task with a :class:`nlptasks.TaskSpec`: the task's name
        (what a recipe writes as ``task = "..."``), a one-line description, the pydantic model
        that validates the recipe's ``[options]`` table, the metric that picks the best
        checkpoint, and (for PEFT) the peft task type of its model.  The host records which plugin registered which task; registering a name that
        another plugin already registered is an error that names both plugins.
    :returns: nothing (*all run*).

    Example::

        @hookimpl
        def register_tasks(register):
            register(TaskSpec(name="cls", description="Text classification",
                              options=ClsOptions, best_metric="accuracy"))
    """


# --------------------------------------------------------------------------------------------
# Step 1: setup
# --------------------------------------------------------------------------------------------


@hookspec
def nlptasks_setup(ctx: RunContext) -> None:
    """Step 1. Prepare the run: seeds, logging, the output directory, environment checks.

    **When:** first, after the recipe is validated and ``ctx`` is built.

    :param ctx: the run's :class:`nlptasks.RunContext` (recipe, task, options, output dir, and
        the state the later steps fill in).
    :returns: nothing (*all run*).  The engine's default seeds Python, NumPy and torch from
        ``recipe.seed`` and creates ``ctx.output_dir``.  Raise :class:`nlptasks.NlptasksError`
        to stop the run with a message.
    """


# --------------------------------------------------------------------------------------------
# Step 2: load data
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_load_data(ctx: RunContext) -> DatasetDict | None:
    """Step 2. Load the raw data as a ``datasets.DatasetDict``.

    **When:** after setup.

    :param ctx: the run context; ``ctx.recipe.data`` says where the data is.
    :returns: a ``DatasetDict`` with a ``train`` split and whichever of ``validation`` and
        ``test`` the recipe names (*first result wins*).  Record where each split came from in
        ``ctx.sources[split]`` so errors can name the file.  The engine's default reads csv,
        json/jsonl, a ``save_to_disk`` folder, or a hub dataset id (``data.hub``), and applies
        ``data.max_train_rows`` / ``data.max_eval_rows``.  It adds a ``__row__`` column: each row's
        number in its file (1-based, header excluded), which survives the split, so errors in
        later steps can name the file row.  A task plugin overrides it to read a format of its
        own (e.g. CoNLL files).
    """


# --------------------------------------------------------------------------------------------
# Step 3: split
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_split(ctx: RunContext, data: DatasetDict) -> DatasetDict | None:
    """Step 3. Make sure there are train/validation(/test) splits.

    **When:** after loading.

    :param ctx: the run context; ``ctx.recipe.data.split`` holds ratios and a seed.
    :param data: the raw splits from step 2.
    :returns: the ``DatasetDict`` to train and evaluate on (*first result wins*).  The engine's
        default carves the splits the recipe did not give as files out of ``train`` with the
        ratios and seed in ``data.split``, stratified on the column named by
        ``TaskSpec.stratify_by`` when the task declares one.
    """


# --------------------------------------------------------------------------------------------
# The data doctor (nlptasks check), after step 3
# --------------------------------------------------------------------------------------------


@hookspec
def nlptasks_check(ctx: RunContext, data: DatasetDict) -> list[Finding] | None:
    """Data doctor. Report what is wrong or doubtful in the data, before anything trains.

    **When:** by ``nlptasks check RECIPE``, after steps 1 to 3 (setup, load, split); never during
    ``nlptasks run``.  No model weights are loaded; a plugin may build or load the tokenizer
    (``nlptasks.engine.get_tokenizer``) to measure what ``model.max_length`` would cut.

    :param ctx: the run context, as steps 1 to 3 left it (``ctx.sources`` names each split's
        file; the output folder is a throw-away one).
    :param data: the split data, *not yet preprocessed*: rows as loaded, with their file row
        numbers in a ``__row__`` column where the loader kept them.
    :returns: a list of :class:`nlptasks.Finding` (*all run*: every plugin's findings are
        collected).  A task plugin checks what it knows about its columns: label sets that
        differ between splits, class balance, empty and duplicate rows, train↔validation/test
        overlap, the share of examples and gold labels beyond ``model.max_length``, and its own
        defects (e.g. tag transitions, responses cut away).  :mod:`nlptasks.engine.doctor` has
        helpers for the task-independent part of each check.  An ``error`` finding makes
        ``nlptasks check`` exit non-zero: use it for what would stop the run or void its scores.
    """


# --------------------------------------------------------------------------------------------
# Step 4: preprocess / tokenize
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_preprocess(ctx: RunContext, data: DatasetDict) -> DatasetDict | None:
    """Step 4. Clean, encode labels and tokenize: turn raw rows into model inputs.

    **When:** after splitting.  This is the heart of a task plugin.

    :param ctx: the run context.  Get the tokenizer with
        ``nlptasks.engine.get_tokenizer(ctx, corpus)`` (a pretrained one, or a vocabulary built
        from ``corpus`` for from-scratch models); it is stored in ``ctx.tokenizer`` and saved
        with the model.  Count rows you drop with ``ctx.drop(split, reason, n)`` (they are
        logged and written to ``metrics.json``); set ``ctx.labels`` when the task has classes.
    :param data: the split ``DatasetDict`` from step 3.
    :returns: the tokenized ``DatasetDict`` (*first result wins*).  Raise
        :class:`nlptasks.DataError` naming the file and row for bad data.  There is no generic
        default: the engine's fallback raises an error saying no plugin preprocesses this task.
    """


# --------------------------------------------------------------------------------------------
# Step 5: build the model
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_build_model(ctx: RunContext) -> PreTrainedModel | None:
    """Step 5. Build the model with the task's head.

    **When:** after preprocessing (so the tokenizer and labels are known).

    :param ctx: the run context.  ``nlptasks.engine.load_model(ctx, "AutoModelFor...", **cfg)``
        loads ``model.name_or_path`` (hub id or local folder) or builds the architecture in
        ``model.scratch`` from a config sized to ``ctx.tokenizer``.
    :returns: a ``transformers.PreTrainedModel`` (*first result wins*).  There is no generic
        default: the engine's fallback raises an error saying no plugin builds this task's model.
        Build the full model even when the recipe has a ``[peft]`` table: the engine then wraps it
        in the adapter right after this step (for tasks that declare ``TaskSpec.peft_task_type``),
        saves the frozen base when it was built from scratch, and logs
        ``trainable N of M parameters (P%)``.
    """


# --------------------------------------------------------------------------------------------
# Step 6: metrics
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_metrics(ctx: RunContext) -> Callable[[Any], dict[str, float]] | None:
    """Step 6. Provide ``compute_metrics`` for the Trainer.

    **When:** after the model is built.

    :param ctx: the run context.
    :returns: a function taking a ``transformers.EvalPrediction`` and returning a flat dict of
        floats (*first result wins*).  Keys with a ``/`` (``f1/positive``) are per-class values
        and are shown as a table.  The task's ``best_metric`` must be among the keys.  The
        engine's default returns ``None``: only the loss is reported.  Metrics must compute
        offline (no ``evaluate.load`` of hub metrics).
    """


# --------------------------------------------------------------------------------------------
# Step 7: training arguments
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_training_arguments(ctx: RunContext, kwargs: dict[str, Any]) -> TrainingArguments | None:
    """Step 7. Build ``transformers.TrainingArguments``.

    **When:** after metrics.

    :param ctx: the run context.
    :param kwargs: the keyword arguments the engine derived from the recipe's ``[train]`` table
        (output dir, epochs, batch sizes, learning rate, warmup, precision, evaluation and
        best-checkpoint settings, ``train.extra``).  A wrapper may edit this dict before its
        ``yield`` to change what the default builds.
    :returns: a ``TrainingArguments`` (*first result wins*).  The engine's default returns
        ``TrainingArguments(**kwargs)``.
    """


# --------------------------------------------------------------------------------------------
# Step 8: data collator and trainer
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_data_collator(ctx: RunContext) -> Callable[[list[dict[str, Any]]], Any] | None:
    """Step 8a. Provide the data collator that turns a list of examples into a batch.

    **When:** after the training arguments.

    :param ctx: the run context; ``ctx.recipe.train.padding`` is ``"dynamic"`` (pad each batch to
        its longest example) or ``"max_length"``.
    :returns: a collator (*first result wins*).  The engine's default pads dynamically with
        ``DataCollatorWithPadding(ctx.tokenizer)``; token-level tasks return their own.
    """


@hookspec(firstresult=True)
def nlptasks_trainer(
    ctx: RunContext,
    model: PreTrainedModel,
    args: TrainingArguments,
    data: DatasetDict,
    data_collator: Callable[[list[dict[str, Any]]], Any],
    compute_metrics: Callable[[Any], dict[str, float]] | None,
) -> Trainer | None:
    """Step 8b. Build the ``transformers.Trainer``.

    **When:** right after the data collator.

    :param ctx: the run context.
    :param model: from step 5.
    :param args: from step 7.
    :param data: the tokenized splits from step 4.
    :param data_collator: from step 8a.
    :param compute_metrics: from step 6 (may be ``None``).
    :returns: a ``Trainer`` (*first result wins*).  The engine's default builds
        ``Trainer(model, args, train_dataset, eval_dataset, processing_class=ctx.tokenizer,
        data_collator, compute_metrics)``.  Override it to use a Trainer subclass (a custom loss).
    """


# --------------------------------------------------------------------------------------------
# Step 9: train, evaluate, predict
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_train(ctx: RunContext, trainer: Trainer, data: DatasetDict) -> dict[str, Any] | None:
    """Step 9. Train, then evaluate on validation and test.

    **When:** last step of ``nlptasks run``; the engine saves the model afterwards.

    :param ctx: the run context.
    :param trainer: from step 8b.
    :param data: the tokenized splits.
    :returns: metrics by split, e.g. ``{"train": {...}, "validation": {...}, "test": {...}}``,
        keys without the Trainer's ``eval_``/``test_`` prefixes (*first result wins*).  The
        engine's default trains, keeps the best checkpoint on the task's ``best_metric``, then
        evaluates validation and test.

    Call ``trainer.train()`` without arguments: the engine has wrapped it so that it resumes from
    ``ctx.resume_from`` (``nlptasks run --resume``), saves a checkpoint every
    ``output.checkpoint_steps`` and raises a one-line error at the first NaN or infinite training
    loss (docs/reliability.md).
    """


# --------------------------------------------------------------------------------------------
# The run report (model card), after step 9
# --------------------------------------------------------------------------------------------


@hookspec
def nlptasks_report(ctx: RunContext, trainer: Trainer, data: DatasetDict, metrics: dict[str, Any]) -> list[str] | None:
    """Run report. Contribute the task's own sections to the run's model card (``README.md``).

    **When:** by ``nlptasks run``, after step 9 and after the model is saved, before the run is
    marked complete.  The engine writes the generic parts of the card itself (task, base model,
    data and row counts, the metrics table, ``training_curves.png``, the recipe, how to load the
    run); this hook adds what only the task knows.  Not called in a distributed run (more than one
    process): rank 0 writes the card alone, and a hook's ``trainer.predict`` would wait for the others.

    :param ctx: the run context; write any files (PNGs) into ``ctx.output_dir`` and link them by
        their bare name from the Markdown.
    :param trainer: the Trainer of step 9, its best model loaded (``trainer.predict`` gives the
        predictions on a split).
    :param data: the tokenized splits of step 4.
    :param metrics: the metrics of step 9 by split (what ``metrics.json`` holds).
    :returns: a list of Markdown sections, each starting with a ``## `` heading (*all run*: every
        plugin's sections are collected, in plugin order).  Helpers in
        :mod:`nlptasks.engine.report`: ``write_confusion_matrix`` (a classification task's
        confusion-matrix PNG) and ``per_class_table`` (per-class or per-entity-type figures from the
        ``name/class`` metric keys).  Return ``None`` (or nothing) to add nothing.
    """


# --------------------------------------------------------------------------------------------
# Step 10: inference
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any]) -> Predictor | None:
    """Step 10. Load a trained run for inference.

    **When:** by ``nlptasks infer`` (and the Python API), in a process that never saw the recipe.

    :param run_dir: a complete run directory (model, tokenizer, ``nlptasks.json``).
    :param manifest: the parsed ``nlptasks.json``: ``task``, ``labels``, ``max_length`` and the
        task's own entries.
    :returns: a :class:`nlptasks.Predictor`: a callable that takes a list of inputs (strings, or
        dicts read from a csv/jsonl file) and returns one JSON-serialisable dict per input, in
        order (*first result wins*).  The engine's fallback raises an error saying no plugin can
        serve this task.  A predictor may also offer file formats of its own for
        ``nlptasks infer --format NAME`` (``formats``, ``read_inputs``, ``write_outputs``: see
        :class:`nlptasks.Predictor`), e.g. CoNLL in and out for a tagging task.
    """
