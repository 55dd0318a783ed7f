"""``mlm``: masked-language-model pretraining, from scratch or continued from a checkpoint.

The whole task lives here: options, the text blocks (step 4), the masked-LM model (5), masked-token
accuracy (6), the masking collator (8a), a Trainer that reports perplexity (8b), and filling in
masks at inference (10).  A run is an ordinary transformers masked-LM folder with its tokenizer, so
any task starts from it: ``model.name_or_path = "runs/mlm/<run>"`` in a cls, ner or pair recipe
loads its encoder and its vocabulary (docs/tasks/mlm.md).

Data: raw text, no labels: a ``.txt`` file (one text per non-blank line) or any text column(s)
of csv/jsonl/json files (``options.text_columns``: each column's value is a text of its own, so a
pair file's ``text_a`` and ``text_b`` both count; a list of tokens is joined with spaces).  How
tokens are hidden: :mod:`.masking`.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from nlptasks.plugin import (
    Evaluation,
    Finding,
    LoadOptions,
    Problem,
    RecipeError,
    RunContext,
    TaskSpec,
    Usage,
    blank_texts,
    build_trainer,
    data_columns,
    duplicates,
    filter_rows,
    get_tokenizer,
    hookimpl,
    is_blank,
    load_model,
    perplexity_trainer,
    require_columns,
    split_overlap,
    unique_labels,
)


class MlmOptions(BaseModel):
    """Options of the ``mlm`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    text_columns: Annotated[list[str], AfterValidator(unique_labels)] = Field(
        ["text"],
        min_length=1,
        description="Columns (or JSON keys) holding text; each value is a text of its own. A .txt file has one: 'text'.",
    )
    masking: Literal["span", "token"] = Field(
        "span",
        description="'span': hide runs of consecutive tokens (SpanBERT: lengths geometric, p = 0.2; a word or "
        "phrase of a character vocabulary at once); 'token': each token on its own (BERT).",
    )
    mask_probability: float = Field(0.15, gt=0, lt=1, description="Share of each block's tokens hidden.")
    span_max: int = Field(10, ge=1, le=512, description="masking = 'span': the longest span, in tokens.")
    concatenate: bool = Field(
        True,
        description="Write the texts one after the other and cut them into full blocks of model.max_length "
        "tokens (no padding); false: one block per text (a long text cut into several).",
    )
    top_k: int = Field(5, ge=1, le=1000, description="Inference: candidates given for each masked token.")


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name="mlm",
            description="Masked-language-model pretraining on raw text (perplexity, masked-token accuracy).",
            options=MlmOptions,
            best_metric="loss",
            greater_is_better=False,
            metrics=("perplexity", "accuracy"),
            label_fields={"labels": "token"},
            usage=_usage,
        )
    )


def _usage(manifest: Any) -> Usage:
    """An example with one masked character (the middle of the run's example text)."""
    example = manifest.get("example") or "今天天气很好。"
    mask = manifest.get("mask_token") or "[MASK]"
    middle = len(example) // 2
    return Usage(example=(example[:middle] + mask + example[middle + 1 :],), labels="the tokens of the vocabulary")


def _texts(row: dict[str, Any], columns: list[str]) -> list[str]:
    """The non-blank texts of a row (a list of tokens joined with spaces)."""
    out = []
    for column in columns:
        value = row.get(column)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        if not is_blank(value):
            out.append(str(value).strip())
    return out


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import Dataset, DatasetDict

    from .masking import MaskingCollator, blocks

    opts: MlmOptions = ctx.options
    require_columns(ctx, data, {f"text_columns[{i}]": c for i, c in enumerate(opts.text_columns)})
    data = DatasetDict(
        {
            split: filter_rows(ctx, split, ds, lambda row: None if _texts(row, opts.text_columns) else "empty text")
            for split, ds in data.items()
        }
    )
    texts = {split: [t for row in ds for t in _texts(row, opts.text_columns)] for split, ds in data.items()}
    corpus = texts.get("train")
    tokenizer = get_tokenizer(ctx, corpus=corpus)
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    missing = [
        name for name, v in (("mask", tokenizer.mask_token_id), ("[CLS]/<s>", start), ("[SEP]/</s>", end)) if v is None
    ]
    if missing:
        raise RecipeError(
            "recipe",
            [
                Problem(
                    "model.name_or_path",
                    f"the tokenizer of {ctx.recipe.model.name_or_path!r} has no {' or '.join(missing)} token, "
                    "which masked-LM training needs; use an encoder's tokenizer (BERT, RoBERTa...) or [model.scratch]",
                )
            ],
        )
    import numpy as np

    max_length = ctx.recipe.model.max_length
    masking = MaskingCollator(tokenizer, opts, len(tokenizer), ctx.recipe.seed)
    out = DatasetDict()
    for split, split_texts in texts.items():
        ids = tokenizer(split_texts, add_special_tokens=False, verbose=False)["input_ids"]
        cut = blocks(ids, start, end, max_length, opts.concatenate)
        tokens = sum(len(i) for i in ids)
        ctx.log.info(
            "%s: %d texts, %s tokens, %d blocks of up to %d",
            split,
            len(split_texts),
            f"{tokens:,}",
            len(cut),
            max_length,
        )
        ctx.record(split, "tokens", tokens)
        if split == "train" and ctx.trained_run is None:
            out[split] = Dataset.from_dict({"input_ids": cut, **_other_inputs(cut, tokenizer)})
            continue
        rng = np.random.default_rng([ctx.recipe.seed, zlib.crc32(split.encode())])  # the same masks every time
        masked = [masking.mask(b, rng) for b in cut]
        inputs = [m[0] for m in masked]
        out[split] = Dataset.from_dict(
            {"input_ids": inputs, **_other_inputs(inputs, tokenizer), "labels": [m[1] for m in masked]}
        )
    first = next((t for split in ("test", "validation", "train") for t in texts.get(split, [])), None)
    ctx.manifest["text_column"] = opts.text_columns[0]
    ctx.manifest["example"] = first[:40] if first else None
    ctx.manifest["mask_token"] = tokenizer.mask_token
    return out


def _other_inputs(blocks: list[list[int]], tokenizer: Any) -> dict[str, list[list[int]]]:
    """The model inputs beside ``input_ids`` that the tokenizer gives (an attention mask, BERT's
    segment ids: all one segment), so the run's examples (examples.json, which an ONNX export
    traces) have the inputs the predictor's tokenizer passes."""
    out = {"attention_mask": [[1] * len(b) for b in blocks]}
    if "token_type_ids" in tokenizer.model_input_names:
        out["token_type_ids"] = [[0] * len(b) for b in blocks]
    return out


@hookimpl
def nlptasks_check(ctx: RunContext, data: Any) -> list[Any]:
    """The data doctor: missing columns, blank texts, duplicates, validation/test texts also in
    train (their perplexity measures memory), and each split's size in texts and characters."""
    opts: MlmOptions = ctx.options
    findings: list[Any] = []
    for split, ds in data.items():
        missing = [c for c in opts.text_columns if c not in ds.column_names]
        if missing:
            present = ", ".join(data_columns(ds))
            findings.append(
                Finding(
                    "error",
                    "columns",
                    f"no column {missing[0]!r}; the columns are: {present} (name them in options.text_columns)",
                    split,
                )
            )
    if findings:
        return findings
    findings += blank_texts(ctx, data, opts.text_columns, consequence="a run leaves these texts out")

    def text(row: dict[str, Any]) -> tuple[str, ...]:
        return tuple(" ".join(t.split()) for t in _texts(row, opts.text_columns))

    findings += duplicates(ctx, data, text)
    findings += split_overlap(ctx, data, text)
    for split, ds in data.items():
        texts = [t for row in ds for t in _texts(row, opts.text_columns)]
        findings.append(Finding("info", "size", f"{len(texts):,} text(s), {sum(map(len, texts)):,} characters", split))
    return findings


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    tokenizer = ctx.tokenizer
    model = load_model(ctx, "AutoModelForMaskedLM")
    if ctx.trained_run is not None:  # nlptasks eval: the run's model (torch or an export) as it is
        return model
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        ctx.log.info("resizing the embeddings from %d to %d tokens", rows, len(tokenizer))
        model.resize_token_embeddings(len(tokenizer))
    return model


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        predictions, labels = evaluation.predictions, evaluation.label_ids
        hidden = labels != -100
        return {"accuracy": float((predictions[hidden] == labels[hidden]).mean()) if hidden.any() else 0.0}

    return compute_metrics


@hookimpl
def nlptasks_data_collator(ctx: RunContext) -> Any:
    from .masking import MaskingCollator

    fixed = ctx.recipe.model.max_length if ctx.recipe.train.padding == "max_length" else None
    return MaskingCollator(ctx.tokenizer, ctx.options, len(ctx.tokenizer), ctx.recipe.seed, fixed)


@hookimpl
def nlptasks_trainer(
    ctx: RunContext, model: Any, args: Any, data: Any, data_collator: Any, compute_metrics: Any
) -> Any:
    from .loss import encoder_and_head, masked_only_loss, matching_loss

    unchecked = object()

    class MlmTrainer(perplexity_trainer()):  # type: ignore[misc]  # perplexity: exp of the hidden tokens' loss
        """Training steps take the loss on the hidden tokens only (:mod:`.loss`) where it is the model's."""

        fast: Any = unchecked

        def compute_loss(
            self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
        ) -> Any:
            plain = return_outputs or not model.training or model is not self.model or self.label_smoother is not None
            if not plain and self.fast is unchecked:
                take = self.model_accepts_loss_kwargs and num_items_in_batch is not None
                kwargs = {"num_items_in_batch": num_items_in_batch} if take else {}
                parts = encoder_and_head(model)
                reduction, why = matching_loss(model, parts, inputs, kwargs) if parts else (None, "no encoder + head")
                self.fast = (parts, reduction) if reduction else None
                if reduction:
                    ctx.log.info("training loss on the hidden tokens only (their vocabulary projection alone): %s", why)
                else:
                    ctx.log.info("training loss through the model's own forward (%s)", why)
            if plain or self.fast is None:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            parts, reduction = self.fast
            return masked_only_loss(parts, inputs, num_items_in_batch if reduction == "items" else None)

    def best_tokens(logits: Any, labels: Any) -> Any:  # keep the argmax, not vocabulary-sized logits
        return (logits[0] if isinstance(logits, tuple) else logits).argmax(-1)

    trainer = build_trainer(
        MlmTrainer,
        ctx,
        model,
        args,
        data,
        data_collator,
        compute_metrics,
        preprocess_logits_for_metrics=best_tokens,
    )
    if hasattr(data_collator, "callback"):  # ours (a plugin wrapping step 8a may give another)
        trainer.add_callback(data_collator.callback())
    return trainer


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != "mlm":
        return None
    from .predict import MlmPredictor

    return MlmPredictor(run_dir, manifest, options)
