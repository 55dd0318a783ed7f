"""``sft``: supervised fine-tuning of a causal LM on instructions or chats.

The whole task lives here: options, preprocessing with a loss mask from character offsets (step
4), the decoder (5), the collator with optional packing (8a), a Trainer that reports perplexity
and, optionally, a generation metric (8b, 9), and generation at inference (10).

Data: the alpaca shape (``instruction``, ``input``, ``output``) or the chat shape (``messages``
with ``role``/``content``), from jsonl/json files or a hub dataset.  Each example is rendered with
a chat template that is stored with the run's tokenizer (see ``templates.py``); only the
assistant's tokens are in the loss.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nlptasks.plugin import (
    ROW_COLUMN,
    VIRTUAL_TOKEN_METHODS,
    DataError,
    LoadOptions,
    Problem,
    RecipeError,
    RunContext,
    TaskSpec,
    Usage,
    build_trainer,
    evaluate_split,
    get_tokenizer,
    hookimpl,
    load_model,
    perplexity_trainer,
    train_and_evaluate,
)

from .packing import packing_collator, resolve_packing
from .templates import recipe_problems


class GenerationEval(BaseModel):
    """Greedy generation on a fixed validation subset, scored and logged beside the loss."""

    model_config = ConfigDict(extra="forbid")

    every_steps: int = Field(
        0, ge=0, le=10**9, description="Also score during training every N optimizer steps (0: only after training)."
    )
    rows: int = Field(16, ge=1, le=10**6, description="How many validation (and test) rows to generate for.")
    metric: Literal["rouge_l", "char_f1", "exact_match"] = Field(
        "rouge_l", description="Score of a generated answer against the reference answer."
    )
    max_new_tokens: int = Field(64, ge=1, le=32768, description="Longest generated answer, in tokens.")


class SftOptions(BaseModel):
    """Options of the ``sft`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    shape: Literal["auto", "alpaca", "chat"] = Field(
        "auto",
        description="Row shape: 'alpaca' (instruction/input/output), 'chat' (messages), or 'auto' "
        "(by the columns present).",
    )
    instruction_column: str = Field("instruction", description="Alpaca shape: the instruction column.")
    input_column: str = Field(
        "input", description="Alpaca shape: the optional input column (appended to the instruction)."
    )
    output_column: str = Field("output", description="Alpaca shape: the response column.")
    messages_column: str = Field(
        "messages", description="Chat shape: the column with the list of {role, content} turns."
    )
    template: Literal["auto", "chatml", "alpaca", "tokenizer"] = Field(
        "auto",
        description="Chat template, stored with the run: 'tokenizer' (the tokenizer's own), 'chatml', "
        "'alpaca', or 'auto' (the tokenizer's own if it has one, else chatml for from-scratch models "
        "and alpaca for pretrained ones).",
    )
    system: str | None = Field(
        None, description="System prompt added to conversations without one (stored; used at inference too)."
    )
    packing: bool | Literal["auto"] = Field(
        "auto",
        description="Concatenate each micro-batch into one padding-free sequence; positions restart "
        "and attention stays within each example (checked on the model before training). 'auto': "
        "on unless the model's attention crosses packed examples, peft.method adds virtual tokens "
        "or train.padding = 'max_length' (the log says which); true: required (an error otherwise).",
    )
    no_response: Literal["error", "drop"] = Field(
        "error",
        description="An example whose response is cut away entirely by model.max_length: stop with an "
        "error naming the row, or drop it (counted).",
    )
    bad_rows: Literal["error", "skip"] = Field(
        "error", description="A malformed row: stop with an error naming the file and row, or skip it (counted)."
    )
    generation_eval: GenerationEval | None = Field(
        None, description="Optional generation metric on validation/test rows (see [options.generation_eval])."
    )


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name="sft",
            description="Instruction / chat fine-tuning of a causal LM (loss on responses only; perplexity).",
            options=SftOptions,
            best_metric="loss",
            greater_is_better=False,
            peft_task_type="CAUSAL_LM",
            peft_unsupported=_peft_unsupported,
            metrics=_metrics,
            label_fields={"labels": "token"},
            usage=_usage,
            recipe_problems=recipe_problems,
        )
    )


def _peft_unsupported(options: SftOptions) -> dict[str, str]:
    """prefix, p_tuning and prompt with options.packing = true"""
    if options.packing is not True:  # "auto" turns packing off for them
        return {}
    # They drop the restarting position ids (prompt, p_tuning) or hand the model a cache (prefix):
    # either way packed examples would attend to each other.
    return {
        method: "with options.packing = true its virtual tokens or key/value prefix would let packed examples "
        "attend to each other; set options.packing = false, or use lora or ia3"
        for method in VIRTUAL_TOKEN_METHODS
    }


def _metrics(options: SftOptions) -> tuple[str, ...]:
    """perplexity (the generation score of [options.generation_eval] is reported after training,
    so it cannot pick checkpoints)"""
    return ("perplexity",)


def _usage(manifest: dict[str, Any]) -> Usage:
    """A prompt of the run's data; a generating task has no labels."""
    return Usage(example=(manifest.get("example") or "your prompt",), labels="- (generates text)")


# ---------------------------------------------------------------------------------------------
# Step 4: conversations → token ids and a loss mask
# ---------------------------------------------------------------------------------------------


def tokenizer_and_template(
    ctx: RunContext, train: list[tuple[int, list[dict[str, str]]]]
) -> tuple[Any, Any, list[int]]:
    """The tokenizer (built from the training conversations when from scratch), the chat
    template with it, and the token ids generation stops at."""
    from .templates import choose_template, stop_token_ids

    # The template's own words (role names, alpaca headers) belong in a from-scratch vocabulary too.
    markers = "user\nassistant\nsystem\n### Instruction:\n### Response:\n"
    corpus = (text for _, conv in train for text in (markers, *(m["content"] for m in conv)))
    tokenizer = get_tokenizer(ctx, corpus=corpus, style="decoder")
    if tokenizer.pad_token_id is None:  # many decoders ship without one; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token
    name = ctx.options.template
    if ctx.trained_manifest is not None:  # nlptasks eval: the template the run trained with, its stop tokens
        name = ctx.trained_manifest.get("template", name)
    template = choose_template(name, tokenizer, scratch=ctx.recipe.model.scratch is not None)
    stops = stop_token_ids(tokenizer, template.stop_tokens)
    if not stops:
        raise RecipeError(
            "recipe",
            [
                Problem(
                    "options.template",
                    "the tokenizer has no eos token and the template no end-of-turn token: generation could never stop",
                )
            ],
        )
    return tokenizer, template, stops


@hookimpl
def nlptasks_setup(ctx: RunContext) -> None:
    # options.bad_rows = "skip" covers rows step 2 cannot even table (a list where text belongs)
    ctx.skip_malformed_rows = ctx.options.bad_rows == "skip"


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import DatasetDict

    from .data import RowProblem, detect_shape, reference, to_messages
    from .templates import loss_labels, supervised_spans

    opts: SftOptions = ctx.options
    conversations: dict[str, list[tuple[int, list[dict[str, str]]]]] = {}
    references: dict[str, list[str | None]] = {}
    for split, ds in data.items():
        where = ctx.sources.get(split, split)
        try:
            shape = detect_shape(ds.column_names, opts)
        except RowProblem as exc:
            raise DataError(
                str(exc), path=where, hint="Name the columns in [options] (see `nlptasks schema`)."
            ) from None
        rows = ds[ROW_COLUMN] if ROW_COLUMN in ds.column_names else list(range(1, len(ds) + 1))
        kept, refs, bad = [], [], 0
        for row_number, row in zip(rows, ds, strict=True):
            try:
                kept.append((row_number, to_messages(row, shape, opts)))
                refs.append(reference(row, shape, opts))
            except RowProblem as exc:
                if opts.bad_rows == "error":
                    raise DataError(
                        str(exc),
                        path=where,
                        row=row_number,
                        hint="Fix the row, or skip such rows with --set options.bad_rows=skip.",
                    ) from None
                bad += 1
        ctx.drop(split, "malformed", bad)
        if not kept:
            raise DataError("no usable rows", path=where)
        conversations[split], references[split] = kept, refs
    ctx.manifest["shape"] = shape

    tokenizer, template, stops = tokenizer_and_template(ctx, conversations.get("train", []))
    ctx.state["stop_ids"] = stops
    ctx.log.info(
        "template %s (stored with the tokenizer); generation stops at %s",
        template.name,
        ", ".join(tokenizer.convert_ids_to_tokens(stops)),
    )

    max_length = ctx.recipe.model.max_length
    out = DatasetDict()
    for split, items in conversations.items():
        where = ctx.sources.get(split, split)
        columns: dict[str, list[Any]] = {"input_ids": [], "attention_mask": [], "labels": [], ROW_COLUMN: []}
        cut = 0
        for row_number, messages in items:
            try:
                text, spans = supervised_spans(tokenizer, messages)
            except ValueError as exc:
                raise DataError(
                    str(exc), path=where, row=row_number, hint="Use a built-in template: --set options.template=chatml"
                ) from None
            enc = tokenizer(
                text, add_special_tokens=False, return_offsets_mapping=True, truncation=True, max_length=max_length
            )
            labels = loss_labels(enc["input_ids"], enc["offset_mapping"], spans)
            if all(v == -100 for v in labels):
                if opts.no_response == "error":
                    raise DataError(
                        f"the response is cut away entirely: the prompt alone fills model.max_length ({max_length} tokens)",
                        path=where,
                        row=row_number,
                        hint="Raise --set model.max_length=N, or drop such rows with --set options.no_response=drop.",
                    )
                cut += 1
                continue
            columns["input_ids"].append(enc["input_ids"])
            columns["attention_mask"].append(enc["attention_mask"])
            columns["labels"].append(labels)
            columns[ROW_COLUMN].append(row_number)
        ctx.drop(split, "response cut away by max_length", cut)
        if not columns["input_ids"]:
            raise DataError("no rows left with a response inside model.max_length", path=where)
        from datasets import Dataset

        out[split] = Dataset.from_dict(columns)
        supervised = sum(sum(1 for v in labels if v != -100) for labels in columns["labels"])
        total = sum(len(ids) for ids in columns["input_ids"])
        ctx.log.info(
            "%s: %d examples, %s tokens, %s in the loss (%.0f%%)",
            split,
            len(out[split]),
            f"{total:,}",
            f"{supervised:,}",
            100 * supervised / max(1, total),
        )

    gen = opts.generation_eval
    if gen is not None or ctx.trained_run is not None:  # nlptasks eval lists every generation
        limit = gen.rows if gen is not None else None
        ctx.state["generation_rows"] = {
            split: [
                (row, [m for m in messages[:-1]], ref)
                for (row, messages), ref in zip(conversations[split], references[split], strict=True)
                if ref
            ][:limit]
            for split in ("validation", "test")
            if split in conversations
        }
    for split in ("test", "validation", "train"):
        if conversations.get(split):
            prompts = [m["content"] for m in conversations[split][0][1] if m["role"] == "user"]
            if prompts:
                ctx.manifest["example"] = prompts[-1]
                break
    ctx.manifest.update(
        template=template.name,
        template_sha256=template.sha256,
        stop_tokens=tokenizer.convert_ids_to_tokens(stops),
        system=opts.system,
    )
    return out


@hookimpl
def nlptasks_check(ctx: RunContext, data: Any) -> list[Any]:
    """The data doctor: malformed rows, empty prompts, duplicate and shared prompts, and
    responses that model.max_length cuts (partly, or away entirely)."""
    from .check import check

    return check(ctx, data)


# ---------------------------------------------------------------------------------------------
# Step 5: the decoder
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    tokenizer = ctx.tokenizer
    extra = {}
    if ctx.recipe.model.scratch is not None:
        scratch = ctx.recipe.model.scratch
        extra = {
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            # llama/qwen2 configs default to 32 key/value heads, whatever the number of heads
            "num_key_value_heads": scratch.extra.get("num_key_value_heads", scratch.heads),
        }
    model = load_model(ctx, "AutoModelForCausalLM", **extra)
    embeddings = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > embeddings:  # the template added end-of-turn tokens to a pretrained vocabulary
        ctx.log.info("resizing the embeddings from %d to %d tokens (template tokens added)", embeddings, len(tokenizer))
        model.resize_token_embeddings(len(tokenizer))
    stops = ctx.state["stop_ids"]
    model.generation_config.eos_token_id = stops
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if getattr(model.config, "use_cache", None) is not None:
        model.config.use_cache = False  # no KV cache while training; generation turns it on
    ctx.state["packing"] = ctx.manifest["packing"] = resolve_packing(ctx, model)
    return model


# ---------------------------------------------------------------------------------------------
# Steps 8 and 9: collator, trainer with perplexity and the generation metric
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_data_collator(ctx: RunContext) -> Any:
    from transformers import DataCollatorForSeq2Seq

    if ctx.state.get("packing"):
        return packing_collator(ctx)
    fixed = ctx.recipe.train.padding == "max_length"
    return DataCollatorForSeq2Seq(
        ctx.tokenizer,
        padding="max_length" if fixed else True,
        max_length=ctx.recipe.model.max_length if fixed else None,
        label_pad_token_id=-100,
    )


@hookimpl
def nlptasks_trainer(
    ctx: RunContext, model: Any, args: Any, data: Any, data_collator: Any, compute_metrics: Any
) -> Any:
    from transformers import TrainerCallback

    trainer = build_trainer(perplexity_trainer(), ctx, model, args, data, data_collator, compute_metrics)
    gen = ctx.options.generation_eval
    rows = ctx.state.get("generation_rows", {}).get("validation")
    if gen is not None and gen.every_steps and rows:

        class GenerationMetric(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
                if state.global_step % gen.every_steps == 0 and state.is_world_process_zero:
                    value = generation_score(ctx, model, "validation")
                    trainer.log({f"eval_gen_{gen.metric}": value})

        trainer.add_callback(GenerationMetric())
    return trainer


def generation_score(ctx: RunContext, model: Any, split: str) -> float:
    """The split's generation metric (``options.generation_eval``) over its generation rows; the
    generations are kept in ``ctx.state["generations"][split]`` (the errors of nlptasks eval)."""
    from .generate import GenerationSettings, generate
    from .metrics import score

    gen = ctx.options.generation_eval
    rows = ctx.state["generation_rows"][split]
    settings = GenerationSettings(max_new_tokens=gen.max_new_tokens) if gen is not None else GenerationSettings()
    predictions = generate(
        model,
        ctx.tokenizer,
        [messages for _, messages, _ in rows],
        ctx.state["stop_ids"],
        settings,
        max_length=ctx.recipe.model.max_length,
    )
    ctx.state.setdefault("generations", {})[split] = predictions
    return score(gen.metric if gen is not None else "rouge_l", predictions, [ref for _, _, ref in rows])


@hookimpl
def nlptasks_evaluate(ctx: RunContext, trainer: Any, data: Any, split: str) -> Any:
    """nlptasks eval: the loss as step 9 reports it, and the generation metric when the run's
    options set one (the generations are made for the errors file either way)."""
    metrics = evaluate_split(trainer, data, split)
    if ctx.state.get("generation_rows", {}).get(split):
        value = generation_score(ctx, trainer.model, split)
        gen = ctx.options.generation_eval
        if gen is not None:
            metrics[f"gen_{gen.metric}"] = value
    return metrics


@hookimpl
def nlptasks_errors(ctx: RunContext, split: str, evaluation: Any) -> list[dict[str, Any]] | None:
    """Every generated answer that differs from its reference, beside it, with its score, the
    lowest first.  Answers are compared as texts with their whitespace collapsed (runs of spaces,
    tabs and newlines count as one space; leading and trailing ones are ignored), so an answer
    equal to its reference but for spacing is not listed (``exact_match``'s rule)."""
    from .metrics import METRICS, exact_match

    rows, generations = ctx.state.get("generation_rows", {}).get(split), ctx.state.get("generations", {}).get(split)
    if not rows or generations is None:
        return None
    gen = ctx.options.generation_eval
    metric = gen.metric if gen is not None else "rouge_l"
    out = [
        {
            "row": row,
            "prompt": messages[-1]["content"] if messages else "",
            "reference": ref,
            "generation": text,
            metric: round(METRICS[metric](text, ref), 6),
        }
        for (row, messages, ref), text in zip(rows, generations, strict=True)
        if not exact_match(text, ref)
    ]
    return sorted(out, key=lambda e: e[metric])


@hookimpl
def nlptasks_train(ctx: RunContext, trainer: Any, data: Any) -> Any:
    metrics = train_and_evaluate(ctx, trainer, data)
    gen = ctx.options.generation_eval
    if gen is not None:
        for split, rows in ctx.state.get("generation_rows", {}).items():
            if rows and split in metrics:
                value = generation_score(ctx, trainer.model, split)
                metrics[split][f"gen_{gen.metric}"] = value
                ctx.log.info("%s: %s %.4f over %d generated answers", split, gen.metric, value, len(rows))
    return metrics


# ---------------------------------------------------------------------------------------------
# Step 10: generation (predict.py)
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != "sft":
        return None
    from .predict import SftPredictor

    return SftPredictor(run_dir, manifest, options)
