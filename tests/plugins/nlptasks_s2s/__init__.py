"""``s2s``: sequence to sequence (a source text in, a generated target text out), as a
third-party plugin written against ``nlptasks.plugin`` alone: the proof for encoder-decoder tasks.

* ``register_tasks``: its label field is the decoder's target (``{"labels": "target"}``), its
  peft task type ``SEQ_2_SEQ_LM``;
* step 4: a vocabulary built from the sources and targets (``get_tokenizer``); sources become the
  encoder's ``input_ids``, targets the ``labels`` (the target's tokens and the end token);
* step 5: ``AutoModelForSeq2SeqLM`` (a T5 or BART from ``[model.scratch]``), told the vocabulary's
  start, end and padding tokens;
* step 6: exact match and character accuracy of the generated targets;
* steps 7 and 8: ``Seq2SeqTrainingArguments`` (evaluation generates) and ``Seq2SeqTrainer``
  through ``build_trainer``;
* step 10: a predictor that generates: ``{"source", "target"}``.

The data (``data/``, written by ``make_data.py``): words and their reversal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nlptasks.plugin import (
    ROW_COLUMN,
    Evaluation,
    LoadOptions,
    RunContext,
    TaskSpec,
    Usage,
    build_trainer,
    filter_rows,
    get_tokenizer,
    hookimpl,
    input_texts,
    load_model,
    load_run,
    require_columns,
)

TASK = "s2s"
START, END = "[CLS]", "[SEP]"  # a from-scratch vocabulary's framing tokens: the decoder's start and end


class S2SOptions(BaseModel):
    """Options of the ``s2s`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    source_column: str = Field("source", description="Column (or JSON key) holding the source text.")
    target_column: str = Field("target", description="Column (or JSON key) holding the target text.")
    max_target_length: int = Field(
        16,
        ge=2,
        description="Longest target in tokens, its end token included: longer targets are cut, and "
        "generation stops there.",
    )


def _usage(manifest: dict[str, Any]) -> Usage:
    """A source text; the run generates its target."""
    example = manifest.get("example")
    return Usage(example=(example if isinstance(example, str) else "abc",), labels="- (targets are generated)")


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name=TASK,
            description="Sequence to sequence: generate a target text from a source text (exact match).",
            options=S2SOptions,
            best_metric="exact_match",
            greater_is_better=True,
            metrics=("exact_match", "char_accuracy"),
            label_fields={"labels": "target"},
            peft_task_type="SEQ_2_SEQ_LM",
            usage=_usage,
        )
    )


# --- step 4 -------------------------------------------------------------------------------------


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import DatasetDict

    opts: S2SOptions = ctx.options
    require_columns(ctx, data, {"source_column": opts.source_column, "target_column": opts.target_column})

    def problem(row: dict[str, Any]) -> str | None:
        for name, column in (("source", opts.source_column), ("target", opts.target_column)):
            if not isinstance(row[column], str) or not row[column].strip():
                return f"empty {name}"
        return None

    data = DatasetDict({split: filter_rows(ctx, split, ds, problem) for split, ds in data.items()})
    corpus = None
    if "train" in data:
        corpus = [*data["train"][opts.source_column], *data["train"][opts.target_column]]
    tokenizer = get_tokenizer(ctx, corpus=corpus)
    max_length = ctx.recipe.model.max_length

    def encode(batch: dict[str, list[Any]]) -> dict[str, Any]:
        enc = tokenizer(batch[opts.source_column], truncation=True, max_length=max_length)
        targets = tokenizer(batch[opts.target_column], truncation=True, max_length=opts.max_target_length + 1)
        return {
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "labels": [ids[1:] for ids in targets["input_ids"]],  # no start token: the decoder starts with it
        }

    out = DatasetDict()
    for split, ds in data.items():
        out[split] = ds.map(
            encode,
            batched=True,
            remove_columns=[c for c in ds.column_names if c != ROW_COLUMN],
            desc=f"tokenize {split}",
        )
    ctx.manifest["source_column"] = opts.source_column
    ctx.manifest["max_target_length"] = opts.max_target_length
    for split in ("test", "validation", "train"):
        if split in data and len(data[split]):
            ctx.manifest["example"] = data[split][0][opts.source_column]
            break
    return out


# --- steps 5 to 8 -------------------------------------------------------------------------------


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    tokenizer = ctx.tokenizer
    start, end = tokenizer.convert_tokens_to_ids(START), tokenizer.convert_tokens_to_ids(END)
    return load_model(ctx, "AutoModelForSeq2SeqLM", decoder_start_token_id=start, bos_token_id=start, eos_token_id=end)


def decode_all(tokenizer: Any, ids: Any) -> list[str]:
    """Texts of rows of token ids (``-100``, the padding of labels and of gathered predictions, skipped)."""
    rows = ids.tolist() if hasattr(ids, "tolist") else ids
    return [tokenizer.decode([t for t in row if t >= 0], skip_special_tokens=True).replace(" ", "") for row in rows]


def scores(predicted: list[str], gold: list[str]) -> dict[str, float]:
    """Exact match and character accuracy (position by position, over the longer text)."""
    exact = sum(p == g for p, g in zip(predicted, gold, strict=True))
    same = sum(sum(a == b for a, b in zip(p, g, strict=False)) for p, g in zip(predicted, gold, strict=True))
    total = sum(max(len(p), len(g)) for p, g in zip(predicted, gold, strict=True)) or 1
    return {"exact_match": exact / max(len(gold), 1), "char_accuracy": same / total}


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    tokenizer = ctx.tokenizer

    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        generated = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
        return scores(decode_all(tokenizer, generated), decode_all(tokenizer, evaluation.label_ids))

    return compute_metrics


@hookimpl
def nlptasks_training_arguments(ctx: RunContext, kwargs: dict[str, Any]) -> Any:
    from transformers import Seq2SeqTrainingArguments

    length = ctx.options.max_target_length
    return Seq2SeqTrainingArguments(
        **kwargs, predict_with_generate=True, generation_max_length=length, generation_num_beams=1
    )


@hookimpl
def nlptasks_data_collator(ctx: RunContext) -> Any:
    from transformers import DataCollatorForSeq2Seq

    return DataCollatorForSeq2Seq(ctx.tokenizer, label_pad_token_id=-100)


@hookimpl
def nlptasks_trainer(
    ctx: RunContext, model: Any, args: Any, data: Any, data_collator: Any, compute_metrics: Any
) -> Any:
    from transformers import Seq2SeqTrainer

    return build_trainer(Seq2SeqTrainer, ctx, model, args, data, data_collator, compute_metrics)


# --- step 10 ------------------------------------------------------------------------------------


class S2SPredictor:
    """Source texts (or rows with the source column) → ``{"source", "target"}``, generated greedily."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForSeq2SeqLM", options)
        self.column = manifest.get("source_column", "source")
        self.max_length = options.max_length or manifest.get("max_length")
        self.max_new_tokens = int(manifest.get("max_target_length", 16))
        self.batch_size = options.batch_size or 16

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        import torch

        texts = input_texts(inputs, self.column)
        device = next(self.model.parameters()).device
        results = []
        for i in range(0, len(texts), self.batch_size):
            chunk = texts[i : i + self.batch_size]
            enc = self.tokenizer(chunk, truncation=True, max_length=self.max_length, padding=True, return_tensors="pt")
            with torch.inference_mode():
                generated = self.model.generate(
                    input_ids=enc["input_ids"].to(device),
                    attention_mask=enc["attention_mask"].to(device),
                    max_length=self.max_new_tokens + 1,  # the start token too
                    do_sample=False,
                    num_beams=1,
                )
            results += [
                {"source": s, "target": t} for s, t in zip(chunk, decode_all(self.tokenizer, generated), strict=True)
            ]
        return results


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != TASK:
        return None
    return S2SPredictor(run_dir, manifest, options)
