"""``choice``: multiple choice, as a third-party nlptasks plugin.

A context (a question, the start of a story) and N candidate answers in; the index of the right
one out.  The model (``AutoModelForMultipleChoice``) scores each (context, candidate) pair with one
logit, and the N logits of an example compete in one softmax.  That is the shape this tutorial
shows: an example is **N sequences**, so its features have one more axis than a text's,
``(num_choices, tokens)``, and a batch is ``(batch, num_choices, tokens)`` — step 4 and step 8 (the
collator) are where a plugin says so.

The plugin implements:

* ``register_tasks``: the task, its metric, its label column (the right choice's index), PEFT;
* step 4 ``nlptasks_preprocess``: check every row (N candidates, a label in 0..N-1), tokenize each
  context with each of its candidates;
* step 5 ``nlptasks_build_model``: ``AutoModelForMultipleChoice``;
* step 6 ``nlptasks_metrics``: accuracy;
* step 8 ``nlptasks_data_collator``: pads all candidates of a batch to one length;
* ``nlptasks_errors`` (``nlptasks eval``) and ``nlptasks_report`` (the model card);
* step 10 ``nlptasks_load_predictor``: ``{"context", "choices", "label", "answer", "scores"}``.

Data: rows with a context, the candidates and the label (column names in ``[options]``).  The
candidates are one column holding a list (jsonl: ``"choices": ["...", "..."]``) or numbered
columns (csv: ``choices0, choices1, ...``).  N is read from the training data (the count most of
its rows have); a row with another count, an empty candidate or a label outside 0..N-1 is an error
naming the file and row.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nlptasks.plugin import (
    DataError,
    Evaluation,
    LoadOptions,
    RunContext,
    TaskSpec,
    Usage,
    filter_rows,
    get_tokenizer,
    hookimpl,
    input_fields,
    load_model,
    load_run,
    require_columns,
    row_numbers,
    softmax,
)

__version__ = "0.1.0"

TASK = "choice"

# peft prepends virtual tokens to the model's input, but this model's input is (batch, choices,
# tokens): peft builds its prompts for `batch` sequences, the model runs batch x choices of them.
_VIRTUAL_TOKENS = (
    "peft adds its virtual tokens per input row, while a multiple-choice model runs "
    "each row's candidates as separate sequences (batch x choices), so they do not line up"
)


class ChoiceOptions(BaseModel):
    """Options of the ``choice`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    context_column: str = Field("context", description="Column (or JSON key) holding the context or question.")
    choices_column: str = Field(
        "choices",
        description="Where the candidates are: a column holding a list of texts (jsonl), or, when no column has "
        "this name, the prefix of numbered columns choices0, choices1, ... (csv).",
    )
    label_column: str = Field("label", description="Column holding the index (0-based) of the right candidate.")


def _usage(manifest: dict[str, Any]) -> Usage:
    """A context and its candidates from the run's data; the answer is an index."""
    example = manifest.get("example")
    texts = tuple(example) if isinstance(example, list) and len(example) > 2 else ("your question", "yes", "no")
    return Usage(example=texts, labels="- (the index of the right candidate)")


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name=TASK,
            description="Multiple choice: which of N candidates answers the context (accuracy).",
            options=ChoiceOptions,
            best_metric="accuracy",
            greater_is_better=True,
            metrics=("accuracy",),
            label_fields={"labels": "example"},  # the right candidate's index, one per example
            # the head scores each (context, candidate) sequence with one logit, as a sequence
            # classifier would: peft's SEQ_CLS wrapper trains it (lora, ia3) and keeps the head
            peft_task_type="SEQ_CLS",
            peft_unsupported={"prompt": _VIRTUAL_TOKENS, "p_tuning": _VIRTUAL_TOKENS},
            usage=_usage,
        )
    )


# ---------------------------------------------------------------------------------------------
# Step 4: check the rows, tokenize each context with each candidate
# ---------------------------------------------------------------------------------------------


def numbered_columns(columns: list[str], prefix: str) -> list[str]:
    """``prefix0, prefix1, ...`` among ``columns``, in order, up to the first number missing."""
    found = {int(m.group(1)): c for c in columns if (m := re.fullmatch(re.escape(prefix) + r"(\d+)", c))}
    return [found[i] for i in itertools.takewhile(found.__contains__, itertools.count())]


def candidates(row: dict[str, Any], opts: ChoiceOptions, numbered: list[str]) -> list[Any] | str:
    """A row's candidates (a list column, or the numbered columns without their empty tail), or
    why they cannot be read."""
    if not numbered:
        value = row.get(opts.choices_column)
        return list(value) if isinstance(value, list) else f"{opts.choices_column} is not a list (got {value!r})"
    values = [row.get(c) for c in numbered]
    while values and (values[-1] is None or not str(values[-1]).strip()):
        values.pop()  # a csv row with fewer candidates leaves its last cells empty
    return values


def label_index(value: Any) -> int | None:
    """The label as a candidate index (an int, or a string of digits), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def row_problem(row: dict[str, Any], opts: ChoiceOptions, numbered: list[str], n: int) -> str | None:
    """Why ``row`` is not an example with ``n`` candidates, or ``None``."""
    context = row.get(opts.context_column)
    if not isinstance(context, str) or not context.strip():
        return "empty context"
    found = candidates(row, opts, numbered)
    if isinstance(found, str):
        return found
    if len(found) != n:
        return f"{len(found)} candidates, but the data has {n} per row"
    for i, text in enumerate(found):
        if not isinstance(text, str) or not text.strip():
            return f"candidate {i} is empty"
    label = label_index(row.get(opts.label_column))
    if label is None:
        return f"{opts.label_column} {row.get(opts.label_column)!r} is not a candidate index"
    if not 0 <= label < n:
        return f"{opts.label_column} {label} is out of range: the candidates are 0..{n - 1}"
    return None


def encode(
    tokenizer: Any, contexts: list[str], choices: list[list[str]], max_length: int | None, padding: bool | str = False
) -> dict[str, list[Any]]:
    """Each context paired with each of its candidates: feature → one ``(num_choices, tokens)``
    list per example."""
    n = len(choices[0]) if choices else 0
    flat = tokenizer(
        [c for c in contexts for _ in range(n)],
        [text for row in choices for text in row],
        truncation=True,
        max_length=max_length,
        padding=padding,
    )
    return {key: [values[i * n : (i + 1) * n] for i in range(len(contexts))] for key, values in flat.items()}


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import Dataset, DatasetDict

    opts: ChoiceOptions = ctx.options
    require_columns(ctx, data, {"context_column": opts.context_column, "label_column": opts.label_column})
    if ctx.trained_run is not None:  # `nlptasks eval`: the run's number of candidates
        n = int((ctx.trained_manifest or {})["num_choices"])
    else:
        n = _candidate_count(ctx, data["train"], opts)

    rows: dict[str, tuple[list[int], list[str], list[list[str]], list[int]]] = {}
    for split, ds in data.items():
        numbered = _numbered(ctx, split, ds, opts)
        hint = (
            f"Every row needs a non-empty {opts.context_column!r}, {n} non-empty candidates and a "
            f"{opts.label_column!r} between 0 and {n - 1}."
        )
        ds = filter_rows(ctx, split, ds, lambda row, nb=numbered: row_problem(row, opts, nb, n), "error", hint)
        rows[split] = (
            row_numbers(ds),
            [str(c) for c in ds[opts.context_column]],
            [[str(t) for t in candidates(row, opts, numbered)] for row in ds],  # type: ignore[union-attr]
            [int(label_index(v)) for v in ds[opts.label_column]],
        )  # type: ignore[arg-type]

    train = rows.get("train", ([], [], [], []))  # no train split under `nlptasks eval` (the run's tokenizer)
    tokenizer = get_tokenizer(ctx, corpus=[*train[1], *(text for row in train[2] for text in row)])
    padding = "max_length" if ctx.recipe.train.padding == "max_length" else False
    out = DatasetDict()
    for split, (numbers, contexts, choices, labels) in rows.items():
        features = encode(tokenizer, contexts, choices, ctx.recipe.model.max_length, padding)
        out[split] = Dataset.from_dict({**features, "labels": labels})
        if split != "train":  # what nlptasks_errors needs to name each wrong answer
            ctx.side[split] = {"rows": numbers, "contexts": contexts, "choices": choices}
        ctx.log.info("%s: %d examples of %d candidates", split, len(labels), n)
    _, contexts, choices, _ = rows[next(s for s in ("test", "validation", "train") if s in rows)]
    ctx.manifest["example"] = [contexts[0], *choices[0]]  # what the run's messages and card show
    ctx.manifest.update(num_choices=n, context_column=opts.context_column, choices_column=opts.choices_column)
    return out


def _candidate_count(ctx: RunContext, train: Any, opts: ChoiceOptions) -> int:
    """N: the number of candidates most training rows have (at least two)."""
    numbered = _numbered(ctx, "train", train, opts)
    counts = Counter(len(found) for row in train if isinstance(found := candidates(row, opts, numbered), list))
    if not counts or counts.most_common(1)[0][0] < 2:
        raise DataError(
            f"no training row has two or more candidates in {opts.choices_column!r}",
            path=ctx.sources.get("train", "train"),
        )
    return counts.most_common(1)[0][0]


def _numbered(ctx: RunContext, split: str, ds: Any, opts: ChoiceOptions) -> list[str]:
    """The numbered candidate columns of a split (``[]`` when it has a list column), or an error
    naming the file when it has neither."""
    if opts.choices_column in ds.column_names:
        return []
    numbered = numbered_columns(ds.column_names, opts.choices_column)
    if len(numbered) < 2:
        present = ", ".join(c for c in ds.column_names if not c.startswith("__"))
        raise DataError(
            f"no column {opts.choices_column!r} holding the candidates, nor columns "
            f"{opts.choices_column}0, {opts.choices_column}1, ... (options.choices_column); "
            f"the columns are: {present}",
            path=ctx.sources.get(split, split),
            hint="Name the candidates with --set options.choices_column=NAME.",
        )
    return numbered


# ---------------------------------------------------------------------------------------------
# Steps 5, 6 and 8
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    return load_model(ctx, "AutoModelForMultipleChoice")  # one logit per (context, candidate)


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        logits = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
        return {"accuracy": float((logits.argmax(-1) == evaluation.label_ids).mean()) if len(logits) else 0.0}

    return compute_metrics


class ChoiceCollator:
    """Examples of ``(num_choices, tokens)`` features → a batch of ``(batch, num_choices, longest)``
    tensors: every candidate of every example padded to the batch's longest, and ``labels``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        n = len(examples[0]["input_ids"])
        keys = [k for k in examples[0] if k != "labels"]
        flat = [{k: example[k][i] for k in keys} for example in examples for i in range(n)]
        batch = {k: v.view(len(examples), n, -1) for k, v in self.tokenizer.pad(flat, return_tensors="pt").items()}
        if "labels" in examples[0]:
            batch["labels"] = torch.tensor([int(example["labels"]) for example in examples])
        return batch


@hookimpl
def nlptasks_data_collator(ctx: RunContext) -> Any:
    return ChoiceCollator(ctx.tokenizer)


# ---------------------------------------------------------------------------------------------
# nlptasks eval's errors, and the model card
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_errors(ctx: RunContext, split: str, evaluation: Any) -> list[dict[str, Any]] | None:
    """`nlptasks eval`'s errors file: every example whose best-scored candidate is not the right one."""
    if evaluation is None:
        return None
    logits = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
    probs = softmax(logits)
    side = evaluation.side
    wrong = []
    for i, (p, gold) in enumerate(zip(probs, evaluation.label_ids, strict=True)):
        predicted = int(p.argmax())
        if predicted != int(gold):
            wrong.append(
                {
                    "row": side["rows"][i],
                    "context": side["contexts"][i],
                    "choices": side["choices"][i],
                    "gold": int(gold),
                    "predicted": predicted,
                    "score": round(float(p[predicted]), 6),
                    "gold_score": round(float(p[int(gold)]), 6),
                }
            )
    return wrong


@hookimpl
def nlptasks_report(ctx: RunContext, trainer: Any, data: Any, metrics: dict[str, Any]) -> list[str] | None:
    """A card section from the last test (else validation) evaluation: how often each position is the
    right answer and how often the model picks it (a model that learnt a position shows here)."""
    split = next((s for s in ("test", "validation") if s in ctx.evaluations), None)
    if split is None:
        return None
    evaluation = ctx.evaluations[split]
    logits = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
    predicted, gold = logits.argmax(-1), evaluation.label_ids
    lines = [
        f"## Answers by position ({split})",
        "",
        "| candidate | right answer | predicted | accuracy when right |",
        "|---|---:|---:|---:|",
    ]
    for i in range(logits.shape[-1]):
        here = gold == i
        accuracy = f"{(predicted[here] == i).mean():.3f}" if here.any() else "-"
        lines.append(f"| {i} | {int(here.sum())} | {int((predicted == i).sum())} | {accuracy} |")
    lines += ["", f"Chance is 1/{logits.shape[-1]} = {1 / logits.shape[-1]:.3f}."]
    return ["\n".join(lines)]


# ---------------------------------------------------------------------------------------------
# Step 10: inference
# ---------------------------------------------------------------------------------------------


class ChoicePredictor:
    """A context and its candidates → ``{"context", "choices", "label", "answer", "scores"}``.

    Inputs follow the rule of every task (``nlptasks.plugin.input_fields``), with the run's
    ``num_choices`` N: a row with the context column and the numbered candidate columns
    (``choices0`` ... of a csv), or with the candidates as one list (a jsonl row); a line
    ``context<TAB>candidate<TAB>...``; or N + 1 consecutive strings (``nlptasks infer --model RUN
    "context" "candidate 0" ... "candidate N-1"``).  ``label`` is the best candidate's index,
    ``answer`` its text, ``scores`` every candidate's probability (a softmax over the N).
    """

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        # the run's tokenizer and model, through the backend the options chose: fine-tuned, for a
        # run with [peft] the base and adapter, or an ONNX export
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForMultipleChoice", options)
        self.n = int(manifest["num_choices"])
        self.context_column = manifest.get("context_column", "context")
        self.choices_column = manifest.get("choices_column", "choices")
        self.fields = [self.context_column, *(f"{self.choices_column}{i}" for i in range(self.n))]
        self.max_length = options.max_length or manifest.get("max_length")  # --max-length, else the run's
        self.batch_size = options.batch_size or 16  # --batch-size, else 16 examples (64 sequences)
        self.collate = ChoiceCollator(self.tokenizer)

    def _spread(self, item: Any, number: int) -> Any:
        """A row holding its candidates as one list → the same row with numbered columns."""
        if not (isinstance(item, dict) and isinstance(item.get(self.choices_column), list)):
            return item
        texts = item[self.choices_column]
        if len(texts) != self.n:
            raise DataError(f"{len(texts)} candidates in {self.choices_column!r}; this run takes {self.n}", row=number)
        return {
            **{k: v for k, v in item.items() if k != self.choices_column},
            **dict(zip(self.fields[1:], texts, strict=True)),
        }

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        import numpy as np
        import torch

        rows = input_fields([self._spread(x, i) for i, x in enumerate(inputs, start=1)], self.fields)
        if not rows:
            return []
        contexts = [row[self.fields[0]] for row in rows]
        choices = [[row[f] for f in self.fields[1:]] for row in rows]
        features = encode(self.tokenizer, contexts, choices, self.max_length)
        longest = [max(len(ids) for ids in example) for example in features["input_ids"]]
        order = sorted(range(len(rows)), key=lambda i: longest[i])  # batches of similar length
        device = next(self.model.parameters()).device
        logits: list[Any] = [None] * len(rows)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                batch = self.collate([{k: features[k][i] for k in features} for i in idx])
                out = self.model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu().numpy()
                for j, i in enumerate(idx):
                    logits[i] = out[j]
        results = []
        for context, texts, scores in zip(contexts, choices, softmax(np.stack(logits)), strict=True):
            best = int(scores.argmax())
            results.append(
                {
                    "context": context,
                    "choices": texts,
                    "label": best,
                    "answer": texts[best],
                    "scores": [round(float(s), 6) for s in scores],
                }
            )
        return results


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != TASK:
        return None
    return ChoicePredictor(run_dir, manifest, options)
