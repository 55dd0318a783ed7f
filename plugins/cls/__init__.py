"""``cls``: sequence classification (sentiment, topic, intent...).

The whole task lives here: options, preprocessing (steps 4), the model head (5), metrics (6) and
inference (10).  Everything else comes from the engine's defaults.

Data: one text column and one label column (names in ``[options]``).  Labels are taken from the
training data as they are spelt (strings or integers), sorted (numerically when they are all
integers) unless ``options.labels`` gives the order.  The saved model carries ``id2label`` /
``label2id``, so ``transformers.pipeline("text-classification", model=RUN_DIR)`` gives the same
labels as ``nlptasks infer``.

With ``options.multi_label = true`` a text has any number of labels, zero included
(``multilabel.py``: a sigmoid per label, thresholds chosen on validation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from nlptasks.plugin import (
    ROW_COLUMN,
    UNKNOWN_LABEL,
    DataError,
    Evaluation,
    Finding,
    LoadOptions,
    NlptasksError,
    RunContext,
    TaskSpec,
    balance,
    blank_texts,
    classification_errors,
    classification_report,
    classification_sections,
    data_columns,
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
    sigmoid,
    softmax,
    sort_labels,
    split_overlap,
    truncation,
    unique_labels,
)

from . import multilabel
from .encoding import check_labels, encode_splits


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
    multi_label: bool = Field(
        False,
        description="Any number of labels per text (zero included): a JSON list in jsonl/json, or labels "
        "joined by `separator`; one sigmoid per label, decided by thresholds chosen on validation.",
    )
    separator: str | None = Field(
        None,
        min_length=1,
        description="With multi_label: what joins several labels in one cell (default '|': 'joy|fear').",
    )
    threshold: Literal["per_label", "global"] | Annotated[float, Field(gt=0, lt=1)] | None = Field(
        None,
        description="With multi_label: 'per_label' (default: each label's best-F1 threshold on validation, "
        "the global one for labels with fewer than 5 validation examples), 'global' (the best micro-F1 "
        "threshold for every label), or a number above 0 and below 1 (fixed, nothing chosen).",
    )

    @field_validator("separator", "threshold", mode="before")
    @classmethod
    def _multi_label_only(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and not info.data.get("multi_label"):
            raise ValueError(
                f"applies only to multi-label classification: set options.multi_label = true, "
                f"or remove options.{info.field_name}"
            )
        if info.field_name != "threshold" or value is None or value in ("per_label", "global"):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1:
            return float(value)
        raise ValueError(f"choose 'per_label', 'global', or a number above 0 and below 1 (got {value!r})")

    @model_validator(mode="after")
    def _multi_label_defaults(self) -> ClsOptions:
        if self.multi_label:
            self.separator = self.separator or "|"
            self.threshold = "per_label" if self.threshold is None else self.threshold
        return self


def _best_metric(options: ClsOptions) -> str:
    """accuracy (multi-label: f1_macro)"""
    return "f1_macro" if options.multi_label else "accuracy"


def _stratify_by(options: ClsOptions) -> str | None:
    """the label column (multi-label: none)"""
    return None if options.multi_label else options.label_column


SINGLE_LABEL_METRICS = (
    "accuracy",
    "f1_macro",
    "precision_macro",
    "recall_macro",
    "f1/<class>",
    "precision/<class>",
    "recall/<class>",
    "support/<class>",
)


def _metrics(options: ClsOptions) -> tuple[str, ...]:
    """accuracy, macro F1/precision/recall, per class (multi-label: micro and macro F1, exact match, jaccard, per label)"""
    return multilabel.METRICS if options.multi_label else SINGLE_LABEL_METRICS


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name="cls",
            description="Sequence classification: one label per text, or any number with options.multi_label.",
            options=ClsOptions,
            best_metric=_best_metric,
            greater_is_better=True,
            stratify_by=_stratify_by,
            peft_task_type="SEQ_CLS",
            metrics=_metrics,
            label_fields={"labels": "example"},
        )
    )


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import DatasetDict

    opts: ClsOptions = ctx.options
    require_columns(ctx, data, {"text_column": opts.text_column, "label_column": opts.label_column})
    if opts.multi_label:
        return multilabel.preprocess(ctx, data)
    _refuse_lists(ctx, data)

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
    """Tokenize every split with the labels' ids (``encoding.encode_splits``)."""
    label2id = {name: i for i, name in enumerate(labels)}

    def counts(ids: list[int]) -> str:
        found = {name: 0 for name in labels}
        for i in ids:
            found[labels[i]] += 1
        return ", ".join(f"{k} {v}" for k, v in found.items())

    return encode_splits(ctx, data, labels, lambda cell: label2id[label_text(cell)], counts)  # type: ignore[index]


def _list_rows(ds: Any, column: str) -> list[int]:
    """File rows of ``ds`` whose label is a list (several labels in one cell)."""
    return [n for n, v in zip(row_numbers(ds), ds[column], strict=True) if isinstance(v, (list, tuple))]


def _refuse_lists(ctx: RunContext, data: Any) -> None:
    """A list of labels in a single-label run: the data is multi-label, said before anything trains."""
    column = ctx.options.label_column
    for split, ds in data.items():
        rows = _list_rows(ds, column)
        if rows:
            raise DataError(
                f"column {column!r} holds a list of labels ({len(rows)} row(s)): multi-label data, "
                "but options.multi_label is false",
                path=ctx.sources.get(split, split),
                row=rows[0],
                hint="Set options.multi_label = true (any number of labels per text), or give one label per row.",
            )


def _check_labels(ctx: RunContext, split: str, ds: Any, known: set[str], origin: str) -> None:
    labels = ([label_text(value)] for value in ds[ctx.options.label_column])
    check_labels(ctx, split, ds[ROW_COLUMN], labels, sort_labels(known), origin)


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
                    f"{', '.join(data_columns(ds))} (name the "
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
        value = row[opts.label_column]
        label = None if isinstance(value, (list, tuple)) else label_text(value)
        return [] if label is None else [label]

    findings += blank_texts(ctx, data, [opts.text_column])
    if opts.multi_label:
        found, labels_of = multilabel.check(ctx, data)
        findings += found
    for split, ds in data.items():
        lists = [] if opts.multi_label else _list_rows(ds, opts.label_column)
        if lists:
            findings.append(
                Finding(
                    "error",
                    "multi-label",
                    f"{len(lists)} row(s) hold a list of labels: multi-label data, but options.multi_label "
                    "is false (set it to true, or give one label per row)",
                    split,
                    lists,
                )
            )
        if opts.multi_label:
            continue
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
    if "train" in data and opts.labels is None and not opts.multi_label:
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
    if ctx.options.multi_label:
        return multilabel.build_model(ctx)
    return load_model(ctx, "AutoModelForSequenceClassification", **label_config(ctx.labels))


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    if ctx.options.multi_label:
        return multilabel.metrics(ctx)
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
    if ctx.options.multi_label:
        return multilabel.errors(ctx, evaluation)
    return classification_errors(evaluation, list(ctx.labels or []), {"text": evaluation.side["texts"]})


@hookimpl
def nlptasks_report(ctx: RunContext, trainer: Any, data: Any, metrics: dict[str, Any]) -> list[str]:
    """The model card's per-class table and confusion matrix (test split, else validation);
    multi-label: the per-label table and the thresholds."""
    if ctx.options.multi_label:
        return multilabel.report(ctx, metrics)
    return classification_sections(ctx, trainer, data, metrics)


class ClsPredictor:
    """Texts (or rows with the text column) → ``{"text", "label", "score", "scores"}``, batched:
    the best label, its probability, and every label's probability (``scores``, in the run's label
    order, as ``transformers.pipeline(..., top_k=None)`` gives them).

    A multi-label run gives ``{"text", "labels", "scores"}``: every label whose sigmoid probability
    reaches its threshold (the run's, or ``LoadOptions.threshold`` for all), in the run's label order."""

    takes_threshold = True

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        self.multi_label = bool(manifest.get("multi_label"))
        if options.threshold is not None and not self.multi_label:
            raise NlptasksError(
                f"threshold {options.threshold}: {run_dir} is a single-label cls run (its label is the most "
                "probable one; no threshold decides it)",
                hint="Leave out --threshold, or train with options.multi_label = true.",
            )
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForSequenceClassification", options)
        self.text_column = manifest.get("text_column") or manifest.get("options", {}).get("text_column", "text")
        self.max_length = options.max_length or manifest.get("max_length")
        self.batch_size = options.batch_size or 32
        self.id2label = {int(k): v for k, v in self.model.config.id2label.items()}
        if self.multi_label:
            names = [self.id2label[i] for i in range(len(self.id2label))]
            mode = options.threshold if options.threshold is not None else manifest.get("options", {}).get("threshold")
            self.thresholds = multilabel.recorded_cuts(manifest.get("thresholds"), names, mode or "per_label")

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        texts = input_texts(inputs, self.text_column)
        logits = predict_logits(self.model, self.tokenizer, texts, self.batch_size, self.max_length)
        if self.multi_label:
            decided = multilabel.decide(sigmoid(logits), self.thresholds, self.id2label)
            return [{"text": text, **d} for text, d in zip(texts, decided, strict=True)]
        probs = softmax(logits)
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
