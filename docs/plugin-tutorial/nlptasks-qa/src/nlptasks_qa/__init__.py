"""``qa``: extractive question answering, as a third-party nlptasks plugin.

A question and a context in, the span of the context that answers it out.  Contexts longer than
``model.max_length`` are cut into overlapping windows (see ``spans.py``); the model learns on
windows, but an example is scored, and answered, once: by the best span over all its windows.
That is the shape this tutorial shows: step 4 keeps, per split, which window belongs to which
example and where each token sits in the context (``ctx.side``), and step 6 receives it with the
predictions of exactly that split (``evaluation.side``), so no step 9 of our own is needed.

The plugin implements:

* ``register_tasks``: the task, its metric names, its label columns (answer positions), PEFT;
* step 2 is the engine's (csv, json, jsonl...); step 4 ``nlptasks_preprocess``: check rows, find
  each answer in its context, cut windows, label answer positions;
* step 5 ``nlptasks_build_model``: ``AutoModelForQuestionAnswering``;
* step 6 ``nlptasks_metrics``: exact match and F1 per question, over all its windows;
* ``nlptasks_check``: the data doctor (answers missing from their context, contexts cut into windows);
* step 10 ``nlptasks_load_predictor``: ``{"question", "answer", "start", "end", "score"}``.

Data: rows with a question, a context and the answer text (column names in ``[options]``), and
optionally the answer's first character in the context (SQuAD's ``answer_start``); without it the
answer's first occurrence is taken.  A row whose answer is not in its context is an error naming
the file and row, or dropped and counted with ``options.bad_rows = "skip"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nlptasks.plugin import (
    Evaluation,
    Finding,
    LoadOptions,
    NlptasksError,
    RunContext,
    TaskSpec,
    Usage,
    blank_texts,
    duplicates,
    filter_rows,
    get_tokenizer,
    hookimpl,
    input_fields,
    load_model,
    load_run,
    predict_per_token,
    require_columns,
    row_numbers,
    split_overlap,
    truncation,
)

from .spans import answer_f1, answer_positions, best_spans, exact_match, make_windows

__version__ = "0.1.0"

TASK = "qa"


class QaOptions(BaseModel):
    """Options of the ``qa`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    question_column: str = Field("question", description="Column (or JSON key) holding the question.")
    context_column: str = Field("context", description="Column (or JSON key) holding the context the answer is in.")
    answer_column: str = Field("answer", description="Column (or JSON key) holding the answer text.")
    answer_start_column: str = Field(
        "answer_start",
        description="Column with the answer's first character in the context (0-based); when the column is "
        "absent or empty, the answer's first occurrence in the context.",
    )
    stride: int = Field(32, ge=0, description="Context tokens shared by consecutive windows of a long context.")
    max_answer_tokens: int = Field(
        30, ge=1, description="Longest answer, in tokens, that scoring and inference propose."
    )
    bad_rows: Literal["error", "skip"] = Field(
        "error",
        description="A row with an empty question or context, or an answer that is not in its context: 'error' "
        "stops with its file and row; 'skip' drops it and counts it in metrics.json.",
    )


def _usage(manifest: dict[str, Any]) -> Usage:
    """A question and its context from the run's data; answers are spans, not labels."""
    example = manifest.get("example")
    pair = tuple(example) if isinstance(example, list) and len(example) == 2 else ("your question", "its context")
    return Usage(example=pair, labels="- (answers are spans of the context)")


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name=TASK,
            description="Extractive question answering: the span of a context that answers a question.",
            options=QaOptions,
            best_metric="f1",
            greater_is_better=True,
            metrics=("f1", "exact_match", "answers_in_windows", "windows_per_question"),
            # the loss is on the answer's first and last token of each window
            label_fields={"start_positions": "position", "end_positions": "position"},
            peft_task_type="QUESTION_ANS",
            usage=_usage,
        )
    )


# ---------------------------------------------------------------------------------------------
# Step 4: answers in their contexts, windows, answer positions
# ---------------------------------------------------------------------------------------------


def answer_span(row: dict[str, Any], opts: QaOptions) -> tuple[int, int] | str:
    """The answer's ``(start, end)`` characters in its context, or why there is none."""
    question, context, answer = (row.get(c) for c in (opts.question_column, opts.context_column, opts.answer_column))
    for name, value in (("question", question), ("context", context), ("answer", answer)):
        if not isinstance(value, str) or not value.strip():
            return f"empty {name}"
    start = row.get(opts.answer_start_column)
    if start in (None, ""):
        start = context.find(answer)
        if start < 0:
            return "the answer is not in the context"
    try:
        start = int(start)
    except (TypeError, ValueError):
        return f"{opts.answer_start_column} is not a number (got {start!r})"
    if context[start : start + len(answer)] != answer:
        return f"the context has no {answer!r} at character {start} ({opts.answer_start_column})"
    return start, start + len(answer)


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import Dataset, DatasetDict

    opts: QaOptions = ctx.options
    require_columns(
        ctx,
        data,
        {
            "question_column": opts.question_column,
            "context_column": opts.context_column,
            "answer_column": opts.answer_column,
        },
    )

    def problem(row: dict[str, Any]) -> str | None:
        span = answer_span(row, opts)
        return span if isinstance(span, str) else None

    on_problem = "error" if opts.bad_rows == "error" else "drop"
    hint = "Fix the row, or drop such rows and count them with --set options.bad_rows=skip."
    data = DatasetDict({split: filter_rows(ctx, split, ds, problem, on_problem, hint) for split, ds in data.items()})

    questions = {split: [str(q) for q in ds[opts.question_column]] for split, ds in data.items()}
    contexts = {split: [str(c) for c in ds[opts.context_column]] for split, ds in data.items()}
    # built from train when from scratch; `nlptasks eval` (no train split) gets the run's own
    corpus = questions["train"] + contexts["train"] if "train" in data else None
    tokenizer = get_tokenizer(ctx, corpus=corpus)
    if not getattr(tokenizer, "is_fast", False):
        raise NlptasksError(
            "qa needs a fast tokenizer (character offsets); this model has a slow one",
            hint="Pick a model with a tokenizer.json, or use [model.scratch].",
        )
    max_length = ctx.recipe.model.max_length
    padding = "max_length" if ctx.recipe.train.padding == "max_length" else False
    out = DatasetDict()
    for split, ds in data.items():
        spans = [answer_span(row, opts) for row in ds]
        windows = make_windows(tokenizer, questions[split], contexts[split], max_length, opts.stride, padding)
        starts, ends = answer_positions(windows, [s[0] for s in spans], [s[1] for s in spans])  # type: ignore[index]
        out[split] = Dataset.from_dict({**windows.features, "start_positions": starts, "end_positions": ends})
        covered = len({windows.example[w] for w, s in enumerate(starts) if s != 0})
        ctx.log.info(
            "%s: %d questions → %d windows; %d answers lie wholly inside a window",
            split,
            len(ds),
            len(windows.example),
            covered,
        )
        if split != "train":  # what step 6 needs to score per question, over all its windows
            ctx.side[split] = {
                "windows": windows.example,
                "offsets": windows.offsets,
                "contexts": contexts[split],
                "answers": [str(a) for a in ds[opts.answer_column]],
                "covered": covered,
            }
    for split in ("test", "validation", "train"):
        if split in data and len(data[split]):
            ctx.manifest["example"] = [questions[split][0], contexts[split][0]]
            break
    ctx.manifest.update(
        question_column=opts.question_column,
        context_column=opts.context_column,
        stride=opts.stride,
        max_answer_tokens=opts.max_answer_tokens,
    )
    return out


@hookimpl
def nlptasks_check(ctx: RunContext, data: Any) -> list[Any]:
    """The data doctor: empty fields, answers missing from their contexts, repeated questions,
    questions shared with train, and how many contexts are cut into windows."""
    opts: QaOptions = ctx.options
    columns = (opts.question_column, opts.context_column, opts.answer_column)
    for split, ds in data.items():
        missing = [c for c in columns if c not in ds.column_names]
        if missing:
            return [
                Finding(
                    "error",
                    "columns",
                    f"no column {missing[0]!r}; the columns are: {', '.join(ds.column_names)} (name it in [options])",
                    split,
                )
            ]
    level = "error" if opts.bad_rows == "error" else "warning"
    consequence = "a run stops on them" if opts.bad_rows == "error" else "a run skips them"
    findings = blank_texts(ctx, data, list(columns), level=level, consequence=consequence)
    for split, ds in data.items():
        spans = [answer_span(row, opts) for row in ds]
        lost = [
            n
            for n, span in zip(row_numbers(ds), spans, strict=True)
            if isinstance(span, str) and not span.startswith("empty")
        ]  # empty fields: blank_texts
        if lost:
            findings.append(
                Finding(
                    level,
                    "answer-missing",
                    f"{len(lost)} answer(s) not found in their context (or not at answer_start); {consequence}",
                    split,
                    lost,
                )
            )

    def question(row: dict[str, Any]) -> tuple[str, str]:
        return (str(row[opts.question_column]).strip(), str(row[opts.context_column]).strip())

    findings += duplicates(ctx, data, question, what="question and context")
    findings += split_overlap(ctx, data, question, what="question and context")
    train = data["train"] if "train" in data else None
    corpus = (
        [str(t) for column in (opts.question_column, opts.context_column) for t in train[column]] if train else None
    )
    tokenizer = get_tokenizer(ctx, corpus=corpus)  # built from train when from scratch, as a run does
    max_length = ctx.recipe.model.max_length
    for split, ds in data.items():
        lengths = [
            len(ids)
            for ids in tokenizer([str(q) for q in ds[opts.question_column]], [str(c) for c in ds[opts.context_column]])[
                "input_ids"
            ]
        ]
        long_rows = [n for n, length in zip(row_numbers(ds), lengths, strict=True) if length > max_length]
        findings.append(
            truncation(
                split,
                long_rows,
                len(ds),
                max_length=max_length,
                what="question(s)",
                consequence="their contexts are cut into windows; none is lost",
            )
        )
    return findings


# ---------------------------------------------------------------------------------------------
# Steps 5 and 6
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    return load_model(ctx, "AutoModelForQuestionAnswering")


def score_split(evaluation: Evaluation, max_answer_tokens: int) -> dict[str, float]:
    """Exact match and F1 of each question's best span over all its windows, averaged."""
    from .spans import Windows

    start_logits, end_logits = evaluation.predictions[:2]
    side = evaluation.side
    windows = Windows({}, side["windows"], side["offsets"])
    n = len(side["contexts"])
    spans = best_spans(windows, list(start_logits), list(end_logits), n, max_answer_tokens)
    predicted = ["" if span is None else side["contexts"][e][span.start : span.end] for e, span in enumerate(spans)]
    gold = side["answers"]
    return {
        "f1": sum(answer_f1(p, g) for p, g in zip(predicted, gold, strict=True)) / max(n, 1),
        "exact_match": sum(exact_match(p, g) for p, g in zip(predicted, gold, strict=True)) / max(n, 1),
        "answers_in_windows": side["covered"] / max(n, 1),
        "windows_per_question": len(side["windows"]) / max(n, 1),
    }


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    opts: QaOptions = ctx.options

    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        # evaluation.split is "validation" or "test"; evaluation.side is what step 4 kept for it
        return score_split(evaluation, opts.max_answer_tokens)

    return compute_metrics


# ---------------------------------------------------------------------------------------------
# Step 10: inference
# ---------------------------------------------------------------------------------------------


class QaPredictor:
    """(question, context) pairs → ``{"question", "answer", "start", "end", "score"}``.

    Inputs follow the rule of every task (``nlptasks.plugin.input_fields``): rows with the run's
    question and context columns, ``question<TAB>context`` strings, or consecutive strings
    (``nlptasks infer --model RUN "question" "context"``).  ``start``/``end`` are characters of the
    context; ``score`` is the probability the model gives the answer's first and last token in its
    window (``answer`` is ``""`` when no window proposes a span).
    """

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        # the run's tokenizer and model: fine-tuned, or for a run with [peft] the base and adapter
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForQuestionAnswering", options)
        self.columns = (manifest.get("question_column", "question"), manifest.get("context_column", "context"))
        self.max_length = options.max_length or int(manifest.get("max_length") or 384)
        self.stride = int(manifest.get("stride", 32))
        self.max_answer_tokens = int(manifest.get("max_answer_tokens", 30))
        self.batch_size = options.batch_size or 32

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        import numpy as np

        rows = input_fields(inputs, self.columns)
        if not rows:
            return []
        questions = [row[self.columns[0]] for row in rows]
        contexts = [row[self.columns[1]] for row in rows]
        windows = make_windows(self.tokenizer, questions, contexts, self.max_length, self.stride)
        logits = predict_per_token(
            self.model, self.tokenizer, windows.features, self.batch_size, outputs=("start_logits", "end_logits")
        )
        spans = best_spans(windows, logits["start_logits"], logits["end_logits"], len(rows), self.max_answer_tokens)
        results = []
        for i, span in enumerate(spans):
            if span is None:
                results.append({"question": questions[i], "answer": "", "start": None, "end": None, "score": 0.0})
                continue
            # softmax of the start and of the end logits within the span's window
            norm = sum(float(np.logaddexp.reduce(logits[k][span.window])) for k in ("start_logits", "end_logits"))
            results.append(
                {
                    "question": questions[i],
                    "answer": contexts[i][span.start : span.end],
                    "start": span.start,
                    "end": span.end,
                    "score": round(float(np.exp(span.score - norm)), 6),
                }
            )
        return results


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != TASK:
        return None
    return QaPredictor(run_dir, manifest, options)
