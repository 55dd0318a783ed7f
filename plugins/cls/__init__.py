"""``cls``: sequence classification (sentiment, topic, intent...).

The whole task lives here: options, preprocessing (steps 4), the model head (5), metrics (6) and
inference (10).  Everything else comes from the engine's defaults.

Data: one text column and one label column (names in ``[options]``).  Labels are taken from the
training data as they are spelt (strings or integers), sorted (numerically when they are all
integers) unless ``options.labels`` gives the order.  The saved model carries ``id2label`` /
``label2id``, so ``transformers.pipeline("text-classification", model=RUN_DIR)`` gives the same
labels as ``nlptasks infer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from nlptasks.plugin import (
    ROW_COLUMN,
    UNKNOWN_LABEL,
    DataError,
    Evaluation,
    Finding,
    LoadOptions,
    RunContext,
    TaskSpec,
    balance,
    blank_texts,
    classification_errors,
    classification_report,
    classification_sections,
    duplicates,
    filter_rows,
    get_tokenizer,
    hookimpl,
    input_texts,
    label_config,
    label_sets,
    label_text,
    load_model,
    load_run,
    predict_logits,
    require_columns,
    row_numbers,
    softmax,
    sort_labels,
    split_overlap,
    truncation,
    unique_labels,
)


class ClsOptions(BaseModel):
    """Options of the ``cls`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    text_column: str = Field("text", description="Column (or JSON key) holding the text.")
    label_column: str = Field("label", description="Column (or JSON key) holding the label.")
    labels: Annotated[list[str], AfterValidator(unique_labels)] | None = Field(
        None,
        min_length=2,
        description="Label names in class-id order. Default: the labels found in the training data, sorted.",
    )


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name="cls",
            description="Sequence classification: one label per text (accuracy, macro-F1, per-class report).",
            options=ClsOptions,
            best_metric="accuracy",
            greater_is_better=True,
            stratify_by=lambda options: options.label_column,
            peft_task_type="SEQ_CLS",
            metrics=(
                "accuracy",
                "f1_macro",
                "precision_macro",
                "recall_macro",
                "f1/<class>",
                "precision/<class>",
                "recall/<class>",
                "support/<class>",
            ),
            label_fields={"labels": "example"},
        )
    )


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import DatasetDict

    opts: ClsOptions = ctx.options
    require_columns(ctx, data, {"text_column": opts.text_column, "label_column": opts.label_column})

    def problem(row: dict[str, Any]) -> str | None:
        text = row[opts.text_column]
        if text is None or not str(text).strip():
            return "empty text"
        return "empty label" if label_text(row[opts.label_column]) is None else None

    if ctx.trained_run is not None:  # nlptasks eval: the run's labels; rows with others are counted, not scored
        known = set(ctx.labels or [])

        def problem_or_unknown(row: dict[str, Any]) -> str | None:
            return problem(row) or (None if label_text(row[opts.label_column]) in known else UNKNOWN_LABEL)

        data = DatasetDict({split: filter_rows(ctx, split, ds, problem_or_unknown) for split, ds in data.items()})
        return _encode(ctx, data, list(ctx.labels or []))
    data = DatasetDict({split: filter_rows(ctx, split, ds, problem) for split, ds in data.items()})

    # The label set comes from train (or the recipe); unseen labels elsewhere are errors.
    train_labels = {label_text(v) for v in data["train"][opts.label_column]}
    if opts.labels is not None:
        labels = list(opts.labels)
        for split, ds in data.items():
            _check_labels(ctx, split, ds, set(labels), "options.labels")
    else:
        labels = sort_labels({t for t in train_labels if t is not None})
        if len(labels) < 2:  # before the other splits' labels: this is the problem to fix first
            raise DataError(
                f"the training data has a single label ({labels[0]!r}); classification needs at least two",
                path=ctx.sources.get("train"),
            )
        for split, ds in data.items():
            if split != "train":
                _check_labels(ctx, split, ds, set(labels), "the training data")
    if len(labels) < 2:
        raise DataError(
            f"the training data has a single label ({labels[0]!r}); classification needs at least two",
            path=ctx.sources.get("train"),
        )
    ctx.labels = labels
    return _encode(ctx, data, labels)


def _encode(ctx: RunContext, data: Any, labels: list[str]) -> Any:
    """Tokenize every split with the labels' ids; keep the rows and texts of the scored splits
    (``ctx.side``) for the errors of ``nlptasks eval``."""
    from datasets import DatasetDict

    opts: ClsOptions = ctx.options
    label2id = {name: i for i, name in enumerate(labels)}
    corpus = (str(t) for t in data["train"][opts.text_column]) if "train" in data else None
    tokenizer = get_tokenizer(ctx, corpus=corpus)
    max_length = ctx.recipe.model.max_length
    pad = "max_length" if ctx.recipe.train.padding == "max_length" else False

    def encode(batch: dict[str, list[Any]]) -> dict[str, Any]:
        enc = tokenizer([str(t) for t in batch[opts.text_column]], truncation=True, max_length=max_length, padding=pad)
        enc["labels"] = [label2id[label_text(v)] for v in batch[opts.label_column]]  # type: ignore[index]
        return dict(enc)

    out = DatasetDict()
    for split, ds in data.items():
        if split != "train":
            ctx.side[split] = {"rows": list(ds[ROW_COLUMN]), "texts": [str(t) for t in ds[opts.text_column]]}
        out[split] = ds.map(encode, batched=True, remove_columns=ds.column_names, desc=f"tokenize {split}")
        counts = {name: 0 for name in labels}
        for i in out[split]["labels"]:
            counts[labels[i]] += 1
        ctx.log.info("%s labels: %s", split, ", ".join(f"{k} {v}" for k, v in counts.items()))
    ctx.manifest["text_column"] = opts.text_column
    ctx.manifest["example"] = _first_text(data, opts.text_column)
    return out


def _first_text(data: Any, column: str) -> str | None:
    """The first text of test, else validation, else train: the example the run's messages show."""
    for split in ("test", "validation", "train"):
        if split in data and len(data[split]):
            return str(data[split][0][column])
    return None


def _check_labels(ctx: RunContext, split: str, ds: Any, known: set[str], origin: str) -> None:
    for row, value in zip(ds[ROW_COLUMN], ds[ctx.options.label_column], strict=True):
        label = label_text(value)
        if label not in known:
            raise DataError(
                f"label {label!r} does not occur in {origin}; known labels: {', '.join(sort_labels(known))}",
                path=ctx.sources.get(split, split),
                row=row,
                hint="Fix the row, or list every label in options.labels.",
            )


@hookimpl
def nlptasks_check(ctx: RunContext, data: Any) -> list[Any]:
    """The data doctor: empty texts and labels, label sets, balance, duplicates, overlap, length."""
    opts: ClsOptions = ctx.options
    findings = []
    for split, ds in data.items():
        missing = [c for c in (opts.text_column, opts.label_column) if c not in ds.column_names]
        if missing:
            findings.append(
                Finding(
                    "error",
                    "columns",
                    f"no column {missing[0]!r}; the columns are: "
                    f"{', '.join(c for c in ds.column_names if c != ROW_COLUMN)} (name the "
                    "right one in options.text_column / options.label_column)",
                    split,
                )
            )
    if findings:
        return findings

    def text(row: dict[str, Any]) -> str | None:
        value = row[opts.text_column]
        return " ".join(str(value).split()) if value is not None and str(value).strip() else None

    def labels_of(row: dict[str, Any]) -> list[str]:
        label = label_text(row[opts.label_column])
        return [] if label is None else [label]

    findings += blank_texts(ctx, data, [opts.text_column])
    for split, ds in data.items():
        no_label = [n for n, v in zip(row_numbers(ds), ds[opts.label_column], strict=True) if label_text(v) is None]
        if no_label:
            findings.append(
                Finding(
                    "warning",
                    "empty-label",
                    f"{len(no_label)} row(s) without a label; a run drops them",
                    split,
                    no_label,
                )
            )
    findings += label_sets(
        ctx,
        data,
        labels_of,
        known=opts.labels,
        known_from="options.labels" if opts.labels else "train",
        hint="; a run stops on them (fix the rows, or list every label in options.labels)",
    )
    if "train" in data and opts.labels is None:
        seen = {label for row in data["train"] for label in labels_of(row)}
        if len(seen) < 2:
            findings.append(
                Finding(
                    "error",
                    "single-label",
                    f"the training data has {len(seen)} label(s) "
                    f"({', '.join(map(repr, sorted(seen)))}); classification needs at least two",
                    "train",
                )
            )
    findings += balance(ctx, data, labels_of)
    findings += duplicates(ctx, data, text, label=lambda row: tuple(labels_of(row)))
    findings += split_overlap(ctx, data, text)

    train_texts = [str(t) for t in data["train"][opts.text_column] if t is not None] if "train" in data else []
    tokenizer = get_tokenizer(ctx, corpus=iter(train_texts))
    max_length = ctx.recipe.model.max_length
    for split, ds in data.items():
        rows, texts = row_numbers(ds), ["" if t is None else str(t) for t in ds[opts.text_column]]
        lengths = [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]]
        long_rows = [n for n, length in zip(rows, lengths, strict=True) if length > max_length]
        findings.append(
            truncation(
                split,
                long_rows,
                len(ds),
                max_length=max_length,
                consequence="the end of each is cut off; raise model.max_length to keep it",
            )
        )
    return findings


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    assert ctx.labels is not None
    return load_model(ctx, "AutoModelForSequenceClassification", **label_config(ctx.labels))


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    labels = list(ctx.labels or [])

    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        logits, references = evaluation.predictions, evaluation.label_ids
        if isinstance(logits, tuple):
            logits = logits[0]
        return classification_report(logits.argmax(-1), references, labels)

    return compute_metrics


@hookimpl
def nlptasks_errors(ctx: RunContext, split: str, evaluation: Any) -> list[dict[str, Any]] | None:
    """Every text whose predicted label is not its gold label, with the file row and the score."""
    if evaluation is None:
        return None
    return classification_errors(evaluation, list(ctx.labels or []), {"text": evaluation.side["texts"]})


@hookimpl
def nlptasks_report(ctx: RunContext, trainer: Any, data: Any, metrics: dict[str, Any]) -> list[str]:
    """The model card's per-class table and confusion matrix (test split, else validation)."""
    return classification_sections(ctx, trainer, data, metrics)


class ClsPredictor:
    """Texts (or rows with the text column) → ``{"text", "label", "score", "scores"}``, batched:
    the best label, its probability, and every label's probability (``scores``, in the run's label
    order, as ``transformers.pipeline(..., top_k=None)`` gives them)."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForSequenceClassification", options)
        self.text_column = manifest.get("text_column") or manifest.get("options", {}).get("text_column", "text")
        self.max_length = options.max_length or manifest.get("max_length")
        self.batch_size = options.batch_size or 32
        self.id2label = {int(k): v for k, v in self.model.config.id2label.items()}

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        texts = input_texts(inputs, self.text_column)
        probs = softmax(predict_logits(self.model, self.tokenizer, texts, self.batch_size, self.max_length))
        results = []
        for text, p in zip(texts, probs, strict=True):
            best = int(p.argmax())
            scores = {self.id2label[i]: round(float(v), 6) for i, v in enumerate(p)}
            results.append(
                {"text": text, "label": self.id2label[best], "score": scores[self.id2label[best]], "scores": scores}
            )
        return results


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != "cls":
        return None
    return ClsPredictor(run_dir, manifest, options)
