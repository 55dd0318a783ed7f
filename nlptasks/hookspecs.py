"""The ten-step pipeline contract, as pluggy hook specifications.

This module is the API reference for plugin authors: every hook below is one step of a run, in
the order the engine calls it.  ``nlptasks run RECIPE`` calls them like this::

    register_tasks, register_backends               (once, when plugins load)
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
    10 nlptasks_load_predictor(run_dir, manifest, options) -> predictor (infer, serve, nlptasks.load)

``nlptasks check RECIPE`` (the data doctor) runs steps 1 to 3, then
       nlptasks_check(ctx, data)           -> [Finding]  all run

``nlptasks eval RUN --data FILE`` runs steps 1, 2 (the file as ``test``), 4 to 8 with the run's
recipe, tokenizer, labels and weights (``ctx.trained_run``: :class:`nlptasks.RunContext`), then
       nlptasks_evaluate(ctx, trainer, data, split) -> metrics, first result wins
       nlptasks_errors(ctx, split, evaluation) -> [wrong predictions], first result wins

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

What a task declares
--------------------
Beyond its hooks, a task says in its :class:`nlptasks.TaskSpec` what the engine and the commands
cannot know: its metric names (``train.best_metric`` is checked against them by ``nlptasks
validate``), the columns that carry its labels and how to read them (``nlptasks inspect-batch``
shows the loss positions from them), its peft task type and the PEFT methods it refuses with the
reason (refused by ``validate``), and its :class:`nlptasks.Usage` (the command a run prints to
try it, the model card's usage example and labels row).

PEFT
----
With a ``[peft]`` table in the recipe, the engine wraps step 5's model in a peft adapter and logs
the trainable and total parameter counts; steps 6 to 9 get the ``PeftModel``, and the run saves
only the adapter (and a from-scratch model's frozen base under ``base/``).  A task takes part by
declaring ``TaskSpec.peft_task_type``; in step 10 ``nlptasks.plugin.load_run(run_dir, manifest,
auto_class)`` gives the tokenizer and the plain model or the base with the chosen adapter.

Plugins import what they need from :mod:`nlptasks.plugin` (the public API; docs/plugin-api.md).
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
    from nlptasks.types import Backend, Finding, LoadOptions, Predictor, TaskSpec

__all__ = [
    "NEWER_ARGUMENTS",
    "PROJECT",
    "hookimpl",
    "hookspec",
    "nlptasks_build_model",
    "nlptasks_check",
    "nlptasks_data_collator",
    "nlptasks_errors",
    "nlptasks_evaluate",
    "nlptasks_load_data",
    "nlptasks_load_predictor",
    "nlptasks_metrics",
    "nlptasks_preprocess",
    "nlptasks_report",
    "nlptasks_setup",
    "nlptasks_split",
    "nlptasks_train",
    "nlptasks_trainer",
    "nlptasks_training_arguments",
    "register_backends",
    "register_tasks",
]

PROJECT = "nlptasks"

NEWER_ARGUMENTS: dict[str, tuple[str, ...]] = {"nlptasks_load_predictor": ("options",)}
"""Arguments a hook gained after its first release.  An implementation that takes none of them is
the hook's older form: it keeps working for at least one minor release with a ``nlptasks:
deprecated:`` line on stderr when its plugin registers (:mod:`nlptasks.deprecations`), and ``nlptasks
plugins`` marks it."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""The marker of a hook implementation: ``@hookimpl`` on a function named after a hook below
(``@hookimpl(tryfirst=True)``, ``trylast=True``, or ``wrapper=True`` for a generator that runs
around the step).  A misspelt hook name is an error naming the plugin when it loads."""


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
        checkpoint and its other metric names, the columns that carry its labels, its peft task
        type and refused PEFT methods, and its :class:`nlptasks.Usage`.  The host records which
        plugin registered which task; registering a name that another plugin already registered is
        an error that names both plugins, and a ``TaskSpec`` that does not validate (an unknown
        peft task type, a label kind, a ``best_metric`` outside ``metrics``) makes the plugin fail
        to load, listed by ``nlptasks plugins``.
    :returns: nothing (*all run*).

    Example::

        @hookimpl
        def register_tasks(register):
            register(TaskSpec(name="cls", description="Text classification", options=ClsOptions,
                              best_metric="accuracy", greater_is_better=True,
                              metrics=("accuracy", "f1_macro", "f1/<class>"),
                              label_fields={"labels": "example"}, peft_task_type="SEQ_CLS"))
    """


@hookspec
def register_backends(register: Callable[[Backend], None]) -> None:
    """Declare the inference backend(s) this plugin provides (step 10's runtimes).

    **When:** once, right after plugins are loaded (with ``register_tasks``).

    :param register: call it once per backend with a :class:`nlptasks.Backend`: its name (what
        ``nlptasks infer --backend NAME`` and ``LoadOptions.backend`` say), a description, and its
        ``load_model(run_dir, manifest, auto_class, options)``; optionally which folders it owns
        (its own exports), why it refuses a folder or options, and the module ``nlptasks eval``
        evaluates.  ``torch`` and ``onnx`` are built in; registering a name that is taken is an
        error naming both plugins.
    :returns: nothing (*all run*).

    Example (a backend that runs the torch weights in float64)::

        @hookimpl
        def register_backends(register):
            def load(run_dir, manifest, auto_class, options):
                return load_trained_model(run_dir, manifest, auto_class, options.but(backend="torch")).double()
            register(Backend(name="fp64", description="torch weights in float64", load_model=load))
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
    (``nlptasks.plugin.get_tokenizer``) to measure what ``model.max_length`` would cut.

    :param ctx: the run context, as steps 1 to 3 left it (``ctx.sources`` names each split's
        file; the output folder is a throw-away one).
    :param data: the split data, *not yet preprocessed*: rows as loaded, with their file row
        numbers in a ``__row__`` column where the loader kept them.
    :returns: a list of :class:`nlptasks.Finding` (*all run*: every plugin's findings are
        collected).  A task plugin checks what it knows about its columns: label sets that
        differ between splits, class balance, empty and duplicate rows, train↔validation/test
        overlap, the share of examples and gold labels beyond ``model.max_length``, and its own
        defects (e.g. tag transitions, responses cut away).  :mod:`nlptasks.plugin` has helpers
        for the task-independent part of each check (``blank_texts``, ``duplicates``,
        ``split_overlap``, ``label_sets``, ``balance``, ``truncation``).  An ``error`` finding makes
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
        ``nlptasks.plugin.get_tokenizer(ctx, corpus)`` (a pretrained one, or a vocabulary built
        from ``corpus`` for from-scratch models); it is stored in ``ctx.tokenizer`` and saved
        with the model.  Check columns with ``require_columns`` and drop rows with
        ``filter_rows`` (counted with ``ctx.drop(split, reason, n)``: logged and written to
        ``metrics.json``); set ``ctx.labels`` when the task has classes.  Keep what scoring a
        split per original example needs (window → example maps, offsets, raw rows) in
        ``ctx.side[split]``: step 6 receives it.  Figures measured here (rows repaired) go in with
        ``ctx.record(split, name, value)``; an example input for the run's messages and card in
        ``ctx.manifest["example"]``.
    :param data: the split ``DatasetDict`` from step 3.
    :returns: the tokenized ``DatasetDict`` (*first result wins*), with the label columns the
        task declares in ``TaskSpec.label_fields``.  Raise :class:`nlptasks.DataError` naming the
        file and row for bad data.  There is no generic default: the engine's fallback raises an
        error saying no plugin preprocesses this task.
    """


# --------------------------------------------------------------------------------------------
# Step 5: build the model
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_build_model(ctx: RunContext) -> PreTrainedModel | None:
    """Step 5. Build the model with the task's head.

    **When:** after preprocessing (so the tokenizer and labels are known).

    :param ctx: the run context.  ``nlptasks.plugin.load_model(ctx, "AutoModelFor...", **cfg)``
        loads ``model.name_or_path`` (hub id or local folder) or builds the architecture in
        ``model.scratch`` from a config sized to ``ctx.tokenizer``.
    :returns: a ``transformers.PreTrainedModel`` (*first result wins*).  There is no generic
        default: the engine's fallback raises an error saying no plugin builds this task's model.
        Build the full model even when the recipe has a ``[peft]`` table: the engine then wraps it
        in the adapter right after this step (for tasks that declare ``TaskSpec.peft_task_type``),
        saves the frozen base when it was built from scratch, and logs
        ``trainable N of M parameters (P%)``.  ``nlptasks plan`` runs this step under
        ``torch.device("meta")``: weights without data, so run the model only if not ``is_meta``.
    """


# --------------------------------------------------------------------------------------------
# Step 6: metrics
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_metrics(ctx: RunContext) -> Callable[[Any], dict[str, float]] | None:
    """Step 6. Provide ``compute_metrics`` for the Trainer.

    **When:** after the model is built.

    :param ctx: the run context.
    :returns: a function ``compute_metrics(evaluation)`` returning a flat dict of floats
        (*first result wins*).  It receives a :class:`nlptasks.Evaluation`: the predictions and label ids
        of one split in the split's order (it reads like ``transformers.EvalPrediction``), the
        split's name (``evaluation.split``: ``validation`` or ``test``, whoever asked for the
        evaluation) and ``evaluation.side``, what step 4 kept in ``ctx.side`` for that split, so
        a task that cut examples into windows scores per original example here, without its own
        step 9.  Keys with a ``/`` (``f1/positive``) are per-class values and are shown as a
        table.  The task's ``best_metric`` must be among the keys (the engine checks every
        evaluation).  The engine's default returns ``None``: only the loss is reported.  Metrics
        must compute offline (no ``evaluate.load`` of hub metrics).
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
        data_collator, compute_metrics)``; ``nlptasks.plugin.build_trainer(trainer_class, ctx, ...,
        **kwargs)`` does the same with a Trainer subclass (a custom loss) or further arguments
        (``preprocess_logits_for_metrics``).
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
    loss (docs/reliability.md).  ``trainer.evaluate(eval_dataset=data[split])`` and
    ``trainer.predict(data[split])`` set ``ctx.evaluating`` to the split's name, so step 6 knows
    what it scores.  Figures from ``ctx.record`` are merged into the returned metrics.  A step 9
    that returns without one optimizer step (``trainer.state.global_step == 0``) fails the run:
    the model would be saved as it was built.
    """


# --------------------------------------------------------------------------------------------
# Evaluating a trained run (nlptasks eval)
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_evaluate(ctx: RunContext, trainer: Trainer, data: DatasetDict, split: str) -> dict[str, Any] | None:
    """Score the trained model on one split of labelled data (``nlptasks eval``).

    **When:** after steps 1 to 8 in evaluation mode (``ctx.trained_run`` set; nothing trains).

    :param ctx: the run context (the run's recipe; ``ctx.trained_manifest``: its ``nlptasks.json``).
    :param trainer: the Trainer of step 8, holding the run's trained model.
    :param data: the tokenized splits of step 4.
    :param split: the split to score (``test``).
    :returns: its metrics without key prefixes, as step 9 reports a split (*first result wins*).
        Default: ``nlptasks.plugin.evaluate_split``; a step 9 that adds figures adds them here.
    """


@hookspec(firstresult=True)
def nlptasks_errors(ctx: RunContext, split: str, evaluation: Any) -> list[dict[str, Any]] | None:
    """List the wrong predictions for ``nlptasks eval``'s ``errors.jsonl``.

    **When:** right after ``nlptasks_evaluate`` for the split.

    :param ctx: the run context; ``ctx.side[split]`` holds what step 4 kept (file rows, texts).
    :param split: the evaluated split.
    :param evaluation: its last :class:`nlptasks.Evaluation` (``ctx.evaluations[split]``), or ``None``.
    :returns: (*first result wins*) one JSON-serialisable dict per wrong prediction in file
        order: ``row`` (file row), ``gold``, ``predicted`` and the inputs a reader needs; with no
        *wrong* (generated text, scores) every example, worst first.  ``None``: not supported.
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
        plugin's sections are collected, in plugin order).  Helpers in :mod:`nlptasks.plugin`:
        ``write_confusion_matrix`` (a classification task's confusion-matrix PNG),
        ``per_class_table`` (per-class or per-entity-type figures from the ``name/class`` metric
        keys), and ``classification_sections`` (both, from ``trainer.predict``).  Return ``None``
        (or nothing) to add nothing.
    """


# --------------------------------------------------------------------------------------------
# Step 10: inference
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Predictor | None:
    """Step 10. Load a trained run for inference.

    **When:** by ``nlptasks infer``, ``nlptasks serve``, ``nlptasks export`` (its measurement) and
    ``nlptasks.load``, in a process that never saw the recipe; one process may load several runs,
    or one run twice with different options.

    :param run_dir: a complete run directory (model, tokenizer, ``nlptasks.json``).
    :param manifest: the parsed ``nlptasks.json``: ``task``, ``labels``, ``max_length`` and the
        task's own entries (for ``options.adapter``, the settings of the run that trained it).
    :param options: the :class:`nlptasks.LoadOptions` of this load: precision, backend (already
        chosen for this folder: ``torch``, ``onnx`` or a plugin's), device, ``batch_size`` and
        ``max_length`` (``None``: the predictor's own default and the run's ``max_length``), adapter.
        Hand them to ``nlptasks.plugin.load_run(run_dir, manifest, auto_class, options)``, which loads
        the model through the chosen backend; keep nothing about them anywhere but in the predictor.
    :returns: a :class:`nlptasks.Predictor`: a callable that takes a list of inputs (strings, or
        dicts read from a csv/jsonl file or JSON lines on stdin) and returns one JSON-serialisable
        dict per input, in order (*first result wins*).  Read the inputs with
        ``nlptasks.plugin.input_texts`` / ``input_fields`` (the one rule every task follows,
        several fields included).  The engine's fallback raises an error saying no plugin can
        serve this task.  A predictor may also offer file formats of its own for ``nlptasks infer
        --format NAME`` (``formats``, ``read_inputs``, ``write_outputs``: see
        :class:`nlptasks.Predictor`), e.g. CoNLL in and out for a tagging task.

    An implementation written for the older two-argument form ``nlptasks_load_predictor(run_dir,
    manifest)`` still works, with a ``DeprecationWarning``: ``load_run`` then finds the options
    itself, and ``batch_size`` / ``max_length`` are set as attributes of the predictor it returns.
    """
