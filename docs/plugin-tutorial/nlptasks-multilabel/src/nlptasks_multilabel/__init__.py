"""``multilabel``: multi-label text classification, as a third-party nlptasks plugin.

Each text gets any number of labels (zero included): the aspects a review talks about, the
topics of an article.  The plugin implements the steps a task must provide, and no others:

* step 4 ``nlptasks_preprocess``: parse the labels, encode them multi-hot, tokenize;
* step 5 ``nlptasks_build_model``: a sequence classifier with one sigmoid output per label;
* step 6 ``nlptasks_metrics``: micro/macro F1, exact match, per-label F1 at ``threshold``;
* step 10 ``nlptasks_load_predictor``: ``{"text", "labels", "scores"}`` per input.

Loading, splitting, training arguments, the collator, the Trainer and the training loop all
come from the engine's defaults.

Data: csv or jsonl with a text column and a labels column.  In csv the labels of one row are
joined with ``options.separator`` (``服务|位置``; an empty cell means "no label"); in jsonl they
may also be a JSON list (``["服务", "位置"]``).  The label set is what the training data uses,
sorted; a label in validation or test that training never saw is an error naming the file and
row.  Rows with an empty text are dropped and counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nlptasks.plugin import (
    UNKNOWN_LABEL,
    DataError,
    Evaluation,
    LoadOptions,
    RunContext,
    TaskSpec,
    get_tokenizer,
    hookimpl,
    input_texts,
    label_config,
    load_model,
    load_run,
    predict_logits,
    require_columns,
    row_numbers,
    sigmoid,
)

__version__ = "0.1.0"

TASK = "multilabel"


class MultilabelOptions(BaseModel):
    """Options of the ``multilabel`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    text_column: str = Field("text", description="Column (or JSON key) holding the text.")
    labels_column: str = Field(
        "labels",
        description="Column (or JSON key) holding the labels: a string of labels joined with "
        "`separator` (an empty string means no label), or a JSON list of labels.",
    )
    separator: str = Field("|", min_length=1, description="What joins several labels in one cell, e.g. '服务|位置'.")
    threshold: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="A label is predicted when its sigmoid probability is at least this "
        "(used by the metrics and by `nlptasks infer`).",
    )


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name=TASK,
            description="Multi-label classification: any number of labels per text (micro/macro F1).",
            options=MultilabelOptions,
            best_metric="f1_micro",
            greater_is_better=True,
            stratify_by=None,  # a row has several labels: plain random splits
            metrics=(
                "f1_micro",
                "precision_micro",
                "recall_micro",
                "exact_match",
                "f1_macro",
                "f1/<label>",
                "precision/<label>",
                "recall/<label>",
                "support/<label>",
            ),
            label_fields={"labels": "example"},  # one multi-hot vector per text
            peft_task_type="SEQ_CLS",  # a sequence classifier: lora, ia3, prompt, p_tuning train it
        )
    )


# ---------------------------------------------------------------------------------------------
# Step 4: preprocess
# ---------------------------------------------------------------------------------------------


def parse_labels(value: Any, separator: str) -> list[str]:
    """One cell → its labels, stripped, empty parts and repeats dropped, order kept.

    ``"服务|位置"`` and ``["服务", "位置"]`` both give ``["服务", "位置"]``; ``None``, ``""`` and
    ``[]`` give ``[]``.
    """
    if value is None:
        return []
    parts = value if isinstance(value, (list, tuple)) else str(value).split(separator)
    out: list[str] = []
    for part in parts:
        if part is None:
            continue
        label = str(part).strip()
        if label and label not in out:
            out.append(label)
    return out


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:

    opts: MultilabelOptions = ctx.options
    require_columns(ctx, data, {"text_column": opts.text_column, "labels_column": opts.labels_column})

    # Drop (and count) rows without text; parse every row's labels, remembering its row number.
    parsed: dict[str, list[tuple[int, str, list[str]]]] = {}
    for split, ds in data.items():
        rows, empty = [], 0
        numbers = row_numbers(ds)  # each row's number in its file, for errors
        columns = zip(numbers, ds[opts.text_column], ds[opts.labels_column], strict=True)
        for number, text, value in columns:
            if text is None or not str(text).strip():
                empty += 1
            else:
                rows.append((number, str(text), parse_labels(value, opts.separator)))
        ctx.drop(split, "empty text", empty)
        if not rows:
            raise DataError("no rows left after dropping empty texts", path=ctx.sources.get(split, split))
        parsed[split] = rows

    if ctx.trained_run is not None:  # `nlptasks eval`: the run's labels; rows with others are counted
        return _encode(ctx, _known_rows(ctx, parsed, list(ctx.labels or [])), list(ctx.labels or []))

    # The label set is the training data's; a label seen only elsewhere is an error.
    labels = sorted({label for _, _, row_labels in parsed["train"] for label in row_labels})
    if not labels:
        raise DataError(
            f"no row of the training data has a label (column {opts.labels_column!r}, separator {opts.separator!r})",
            path=ctx.sources.get("train"),
        )
    known = set(labels)
    for split, rows in parsed.items():
        if split == "train":
            continue
        for row, _, row_labels in rows:
            unseen = [label for label in row_labels if label not in known]
            if unseen:
                raise DataError(
                    f"label {unseen[0]!r} does not occur in the training data; known labels: {', '.join(labels)}",
                    path=ctx.sources.get(split, split),
                    row=row,
                    hint="Fix the row, or add training examples with this label.",
                )
    ctx.labels = labels
    return _encode(ctx, parsed, labels)


def _known_rows(ctx: RunContext, parsed: dict[str, list[Any]], labels: list[str]) -> dict[str, list[Any]]:
    """The rows whose labels are all among ``labels``; the others dropped and counted."""
    out = {}
    for split, rows in parsed.items():
        out[split] = [row for row in rows if set(row[2]) <= set(labels)]
        ctx.drop(split, UNKNOWN_LABEL, len(rows) - len(out[split]))
    return out


def _encode(ctx: RunContext, parsed: dict[str, list[Any]], labels: list[str]) -> Any:
    """Tokenize every split with multi-hot targets over ``labels``."""
    import numpy as np
    from datasets import Dataset, DatasetDict

    opts: MultilabelOptions = ctx.options
    index = {label: i for i, label in enumerate(labels)}
    train = parsed.get("train", [])  # no train split under `nlptasks eval` (the run's tokenizer)
    tokenizer = get_tokenizer(ctx, corpus=(text for _, text, _ in train))
    max_length = ctx.recipe.model.max_length
    pad = "max_length" if ctx.recipe.train.padding == "max_length" else False

    out = DatasetDict()
    for split, rows in parsed.items():
        if split != "train":  # what nlptasks_errors needs to name each wrong row
            ctx.side[split] = {"rows": [row for row, _, _ in rows], "texts": [text for _, text, _ in rows]}
        enc = tokenizer([text for _, text, _ in rows], truncation=True, max_length=max_length, padding=pad)
        # Multi-hot targets: row i, column j is 1.0 when text i has label j.  float32, because the
        # model's loss (binary cross-entropy) wants float targets of the logits' dtype.
        multi_hot = np.zeros((len(rows), len(labels)), dtype=np.float32)
        for i, (_, _, row_labels) in enumerate(rows):
            multi_hot[i, [index[label] for label in row_labels]] = 1.0
        out[split] = Dataset.from_dict({**enc, "labels": multi_hot})
        counts = ", ".join(f"{name} {int(n)}" for name, n in zip(labels, multi_hot.sum(axis=0), strict=True))
        none = int((multi_hot.sum(axis=1) == 0).sum())
        ctx.log.info("%s labels: %s; %d row(s) without a label", split, counts, none)
    ctx.manifest["text_column"] = opts.text_column
    ctx.manifest["threshold"] = opts.threshold
    first = "test" if "test" in parsed else "train"
    ctx.manifest["example"] = parsed[first][0][1]  # a text the run's messages and card show
    return out


# ---------------------------------------------------------------------------------------------
# Step 5: the model
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    assert ctx.labels is not None
    return load_model(
        ctx,
        "AutoModelForSequenceClassification",
        problem_type="multi_label_classification",  # sigmoid + binary cross-entropy per label
        **label_config(ctx.labels),  # num_labels, id2label, label2id: plain transformers shows the names
    )


# ---------------------------------------------------------------------------------------------
# Step 6: metrics
# ---------------------------------------------------------------------------------------------


def multilabel_report(predicted: Any, reference: Any, labels: list[str]) -> dict[str, float]:
    """Metrics of 0/1 matrices (rows: texts, columns: labels).

    ``f1_micro``/``precision_micro``/``recall_micro`` count every (text, label) decision;
    ``f1_macro`` averages the per-label F1 (0 for a label never predicted nor present);
    ``exact_match`` is the share of texts whose label set is exactly right (subset accuracy);
    per label: ``f1/<label>``, ``precision/<label>``, ``recall/<label>``, ``support/<label>``.
    """
    import numpy as np

    pred = np.asarray(predicted).astype(bool)
    ref = np.asarray(reference).astype(bool)

    def prf(tp: float, fp: float, fn: float) -> tuple[float, float, float]:
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn) if tp + fn else 0.0
        return p, r, (2 * p * r / (p + r) if p + r else 0.0)

    tp = (pred & ref).sum(axis=0).astype(float)
    fp = (pred & ~ref).sum(axis=0).astype(float)
    fn = (~pred & ref).sum(axis=0).astype(float)
    p, r, f = prf(float(tp.sum()), float(fp.sum()), float(fn.sum()))
    out: dict[str, float] = {
        "f1_micro": f,
        "precision_micro": p,
        "recall_micro": r,
        "exact_match": float((pred == ref).all(axis=1).mean()) if len(ref) else 0.0,
    }
    f1s = []
    for i, name in enumerate(labels):
        pi, ri, fi = prf(tp[i], fp[i], fn[i])
        out[f"f1/{name}"] = fi
        out[f"precision/{name}"] = pi
        out[f"recall/{name}"] = ri
        out[f"support/{name}"] = float(ref[:, i].sum())
        f1s.append(fi)
    out["f1_macro"] = sum(f1s) / max(len(f1s), 1)
    return out


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    labels = list(ctx.labels or [])
    threshold = ctx.options.threshold

    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        logits, references = evaluation.predictions, evaluation.label_ids
        if isinstance(logits, tuple):
            logits = logits[0]
        return multilabel_report(sigmoid(logits) >= threshold, references >= 0.5, labels)

    return compute_metrics


@hookimpl
def nlptasks_errors(ctx: RunContext, split: str, evaluation: Any) -> list[dict[str, Any]] | None:
    """`nlptasks eval`'s errors file: every text whose predicted label set is not its gold set."""
    if evaluation is None:
        return None
    labels = list(ctx.labels or [])
    logits = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
    predicted, gold = sigmoid(logits) >= ctx.options.threshold, evaluation.label_ids >= 0.5
    side = evaluation.side
    return [
        {
            "row": side["rows"][i],
            "text": side["texts"][i],
            "gold": [name for name, on in zip(labels, gold[i], strict=True) if on],
            "predicted": [name for name, on in zip(labels, predicted[i], strict=True) if on],
        }
        for i in range(len(gold))
        if (predicted[i] != gold[i]).any()
    ]


# ---------------------------------------------------------------------------------------------
# Step 10: inference
# ---------------------------------------------------------------------------------------------


class MultilabelPredictor:
    """Texts (or dicts with the text column) → ``{"text", "labels", "scores"}``, batched.

    ``labels`` are the labels whose probability reaches ``threshold`` (the run's, from
    ``nlptasks.json``; change the attribute to use another), most probable first; ``scores`` has
    every label's probability.
    """

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        # the run's tokenizer and model: a fine-tuned model, or for a run with [peft] its base with
        # the adapter (the one `nlptasks infer --adapter NAME` chooses)
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForSequenceClassification", options)
        task_options = manifest.get("options", {})  # the recipe's [options] of the run
        self.text_column = manifest.get("text_column") or task_options.get("text_column", "text")
        self.threshold = float(manifest.get("threshold", task_options.get("threshold", 0.5)))
        self.max_length = options.max_length or manifest.get("max_length")  # --max-length, else the run's
        self.batch_size = options.batch_size or 32
        self.id2label = {int(k): v for k, v in self.model.config.id2label.items()}

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        texts = input_texts(inputs, self.text_column)  # strings, or rows with the text column
        probs = sigmoid(predict_logits(self.model, self.tokenizer, texts, self.batch_size, self.max_length))
        results = []
        for text, p in zip(texts, probs, strict=True):
            order = sorted(range(len(p)), key=lambda i: -p[i])
            results.append(
                {
                    "text": text,
                    "labels": [self.id2label[i] for i in order if p[i] >= self.threshold],
                    "scores": {self.id2label[i]: round(float(p[i]), 6) for i in range(len(p))},
                }
            )
        return results


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != TASK:
        return None
    return MultilabelPredictor(run_dir, manifest, options)
