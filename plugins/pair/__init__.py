"""``pair``: sentence-pair tasks (paraphrase, same intent, NLI, similarity scores).

Two modes (``options.mode``):

``cross`` (default)
    a cross-encoder: both texts in one sequence (``[CLS] a [SEP] b [SEP]``, with token type ids
    where the model has them) and a classification head, or for ``label_type = "score"`` a
    regression head with one output. Metrics: accuracy, macro-F1 (and ``f1`` of the positive
    class when there are two) for classes; Pearson and Spearman for scores. The run folder loads
    in ``transformers.pipeline("text-classification")`` with ``text_pair``.
``bi``
    a bi-encoder: one shared encoder embeds each text (mean pooling, or the first token), trained
    on the cosine similarity of the two embeddings (CoSENT, or a contrastive loss for binary
    labels). The saved model is the plain encoder. Metrics: Spearman/Pearson of cosine vs gold;
    for binary labels also the accuracy at the best threshold found on validation, which is
    stored with the run and used to label pairs at inference. Inference can also rank a
    candidate file for each query (``nlptasks infer --candidates FILE --top-k K``).

Data: csv/jsonl/hub with two text columns and a label column (names in ``[options]``). A row with
an empty side, a missing label or (for scores) a label that is not a number is an error naming
the file and row, or, with ``options.bad_rows = "skip"``, dropped and counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from nlptasks.plugin import (
    ROW_COLUMN,
    Evaluation,
    Finding,
    LoadOptions,
    Problem,
    RecipeError,
    RunContext,
    TaskSpec,
    Usage,
    balance,
    blank_texts,
    build_trainer,
    classification_report,
    classification_sections,
    correlations,
    data_columns,
    duplicates,
    get_tokenizer,
    hookimpl,
    label_config,
    label_sets,
    load_model,
    make_training_arguments,
    row_numbers,
    split_overlap,
    truncation,
    unique_labels,
)
from nlptasks.plugin import label_text as _label_text

from .rows import class_labels, clean
from .rows import score_value as _score


class PairOptions(BaseModel):
    """Options of the ``pair`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["cross", "bi"] = Field(
        "cross",
        description="'cross': both texts in one sequence with a classification/regression head; "
        "'bi': one shared encoder embeds each text, trained on their cosine similarity.",
    )
    label_type: Literal["classes", "score"] = Field(
        "classes", description="'classes': labels are class names (e.g. 0/1); 'score': labels are numbers (e.g. 0-5)."
    )
    text_a_column: str = Field("text_a", description="Column (or JSON key) holding the first text.")
    text_b_column: str = Field("text_b", description="Column (or JSON key) holding the second text.")
    label_column: str = Field("label", description="Column (or JSON key) holding the label or score.")
    labels: Annotated[list[str], AfterValidator(unique_labels)] | None = Field(
        None,
        min_length=2,
        description="Class names in class-id order (classes only). Default: the labels of the training data, sorted.",
    )
    bad_rows: Literal["error", "skip"] = Field(
        "error",
        description="A row with an empty side, no label or a non-numeric score: 'error' stops with its file "
        "and row; 'skip' drops it and counts it in the log and metrics.json.",
    )
    pooling: Literal["mean", "cls"] = Field(
        "mean", description="Bi-encoder sentence embedding: mean of the token states, or the first token's."
    )
    loss: Literal["cosent", "contrastive"] = Field(
        "cosent",
        description="Bi-encoder training objective: 'cosent' (classes or scores) or 'contrastive' (binary classes).",
    )
    scale: float = Field(20.0, gt=0, le=1000, description="CoSENT scale applied to the cosine similarities.")
    margin: float = Field(
        0.5, ge=-1, lt=1, description="Contrastive loss: dissimilar pairs are pushed below this cosine."
    )

    @model_validator(mode="after")
    def _consistent(self) -> PairOptions:
        if self.label_type == "score" and self.labels is not None:
            raise ValueError("options.labels lists class names, but label_type is 'score'")
        if self.loss == "contrastive" and self.label_type == "score":
            raise ValueError("options.loss = 'contrastive' needs binary classes; use 'cosent' for scores")
        return self


def _best_metric(options: PairOptions) -> str:
    """accuracy for cross-encoder classes; spearman for scores and for the bi-encoder"""
    return "accuracy" if options.mode == "cross" and options.label_type == "classes" else "spearman"


def _peft_task_type(options: PairOptions) -> str:
    """SEQ_CLS in cross mode, FEATURE_EXTRACTION (the plain encoder) in bi mode"""
    return "FEATURE_EXTRACTION" if options.mode == "bi" else "SEQ_CLS"


def _stratify(options: PairOptions) -> str | None:
    return options.label_column if options.label_type == "classes" else None


def _metrics(options: PairOptions) -> tuple[str, ...]:
    """cross-encoder classes: accuracy and F1s; scores and the bi-encoder: Spearman and Pearson
    (a binary bi-encoder's accuracy at its threshold is found after training: it cannot pick
    checkpoints)"""
    if options.mode == "bi" or options.label_type == "score":
        return ("spearman", "pearson")
    return (
        "accuracy",
        "f1_macro",
        "precision_macro",
        "recall_macro",
        "f1",
        "f1/<class>",
        "precision/<class>",
        "recall/<class>",
        "support/<class>",
    )


def _usage(manifest: dict[str, Any]) -> Usage:
    """The two texts of a pair of the run's data; bi-encoders: the labels they can give, if any."""
    example = manifest.get("example")
    pair = tuple(example) if isinstance(example, list) and len(example) == 2 else ("text a", "text b")
    labels = None
    if manifest.get("mode") == "bi":
        labels = (
            (
                "`" + "`, `".join(manifest["labels"]) + f"` (cosine similarity ≥ {manifest['threshold']:.4f}: "
                f"`{manifest['labels'][1]}`)"
            )
            if manifest.get("threshold") is not None and manifest.get("labels")
            else "- (similarity scores)"
        )
    elif manifest.get("label_type") == "score":
        low, high = (manifest.get("score_range") or [None, None])[:2]
        labels = f"- (scores, {low:g} to {high:g} in training)" if low is not None else "- (scores)"
    return Usage(example=pair, labels=labels)


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name="pair",
            description="Sentence pairs: cross-encoder classes or scores, or a bi-encoder for similarity and ranking.",
            options=PairOptions,
            best_metric=_best_metric,
            greater_is_better=True,
            stratify_by=_stratify,
            peft_task_type=_peft_task_type,
            metrics=_metrics,
            label_fields={"labels": "example"},
            usage=_usage,
        )
    )


# ---------------------------------------------------------------------------------------------
# Step 4: clean and tokenize
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import DatasetDict

    opts: PairOptions = ctx.options
    data = clean(ctx, data)
    if opts.label_type == "classes":
        labels = class_labels(ctx, data)
        ctx.labels = labels
        label2id = {name: i for i, name in enumerate(labels)}
        if opts.mode == "bi" and len(labels) != 2:
            raise RecipeError(
                "recipe",
                [
                    Problem(
                        "options.mode",
                        f"the bi-encoder needs two classes or scores; the data has {len(labels)} "
                        f'labels ({", ".join(labels)}); use mode = "cross" for more classes',
                    )
                ],
            )
        target = lambda v: label2id[_label_text(v)]  # noqa: E731
    else:
        target = _score
        if "train" in data:
            scores = [_score(v) for v in data["train"][opts.label_column]]
            ctx.manifest["score_range"] = [min(scores), max(scores)]  # type: ignore[type-var]

    train = data["train"] if "train" in data else None
    corpus = (
        None
        if train is None
        else [str(t) for t in train[opts.text_a_column]] + [str(t) for t in train[opts.text_b_column]]
    )
    tokenizer = get_tokenizer(ctx, corpus=corpus)
    max_length = ctx.recipe.model.max_length
    pad = "max_length" if ctx.recipe.train.padding == "max_length" else False

    def encode_cross(batch: dict[str, list[Any]]) -> dict[str, Any]:
        a = [str(t) for t in batch[opts.text_a_column]]
        b = [str(t) for t in batch[opts.text_b_column]]
        enc = dict(tokenizer(a, b, truncation=True, max_length=max_length, padding=pad))
        enc["labels"] = [target(v) for v in batch[opts.label_column]]
        return enc

    def encode_bi(batch: dict[str, list[Any]]) -> dict[str, Any]:
        enc: dict[str, Any] = {}
        for side, column in (("a", opts.text_a_column), ("b", opts.text_b_column)):
            sided = tokenizer([str(t) for t in batch[column]], truncation=True, max_length=max_length, padding=pad)
            enc[f"input_ids_{side}"] = sided["input_ids"]
            enc[f"attention_mask_{side}"] = sided["attention_mask"]
        enc["length"] = [len(x) + len(y) for x, y in zip(enc["input_ids_a"], enc["input_ids_b"], strict=True)]
        enc["labels"] = [float(target(v)) for v in batch[opts.label_column]]  # type: ignore[arg-type]
        return enc

    encode = encode_bi if opts.mode == "bi" else encode_cross
    out = DatasetDict()
    for split, ds in data.items():
        if split != "train":  # the errors of nlptasks eval name the file row and show both texts
            ctx.side[split] = {
                "rows": list(ds[ROW_COLUMN]),
                "text_a": [str(t) for t in ds[opts.text_a_column]],
                "text_b": [str(t) for t in ds[opts.text_b_column]],
            }
        out[split] = ds.map(encode, batched=True, remove_columns=ds.column_names, desc=f"tokenize {split}")
    ctx.manifest.update(
        mode=opts.mode,
        label_type=opts.label_type,
        text_a_column=opts.text_a_column,
        text_b_column=opts.text_b_column,
    )
    if opts.mode == "bi":
        ctx.manifest["pooling"] = opts.pooling
    for split in ("test", "validation", "train"):
        if split in data and len(data[split]):
            row = data[split][0]
            ctx.manifest["example"] = [str(row[opts.text_a_column]), str(row[opts.text_b_column])]
            break
    return out


@hookimpl
def nlptasks_check(ctx: RunContext, data: Any) -> list[Any]:
    """The data doctor: empty sides, labels or scores, label sets and balance, duplicate pairs,
    pairs shared by train and validation/test, and pairs longer than model.max_length."""
    opts: PairOptions = ctx.options
    findings = []
    names = {
        "text_a_column": opts.text_a_column,
        "text_b_column": opts.text_b_column,
        "label_column": opts.label_column,
    }
    for split, ds in data.items():
        for key, column in names.items():
            if column not in ds.column_names:
                findings.append(
                    Finding(
                        "error",
                        "columns",
                        f"no column {column!r} (options.{key}); the columns are: {', '.join(data_columns(ds))}",
                        split,
                    )
                )
    if findings:
        return findings
    consequence = "a run stops on them" if opts.bad_rows == "error" else "a run skips them (options.bad_rows = 'skip')"
    level = "error" if opts.bad_rows == "error" else "warning"
    findings += blank_texts(ctx, data, [opts.text_a_column, opts.text_b_column], level=level, consequence=consequence)
    for split, ds in data.items():
        bad = [
            n
            for n, v in zip(row_numbers(ds), ds[opts.label_column], strict=True)
            if _label_text(v) is None or (opts.label_type == "score" and _score(v) is None)
        ]
        if bad:
            what = "without a numeric score" if opts.label_type == "score" else "without a label"
            findings.append(Finding(level, "empty-label", f"{len(bad)} row(s) {what}; {consequence}", split, bad))

    def norm(value: Any) -> str:
        return " ".join(str(value).split()) if value is not None else ""

    pair = lambda row: (norm(row[opts.text_a_column]), norm(row[opts.text_b_column]))  # noqa: E731
    either_order = lambda row: tuple(sorted(pair(row)))  # noqa: E731
    if opts.label_type == "classes":

        def labels_of(row: dict[str, Any]) -> list[str]:
            label = _label_text(row[opts.label_column])
            return [] if label is None else [label]

        findings += label_sets(
            ctx,
            data,
            labels_of,
            known=opts.labels,
            known_from="options.labels" if opts.labels else "train",
            hint="; a run stops on them (fix the rows, or list every label in options.labels)",
        )
        findings += balance(ctx, data, labels_of)
    else:
        for split, ds in data.items():
            scores = [x for x in (_score(v) for v in ds[opts.label_column]) if x is not None]
            if scores:
                findings.append(
                    Finding(
                        "info",
                        "scores",
                        f"scores from {min(scores):g} to {max(scores):g}, mean "
                        f"{sum(scores) / len(scores):.2f} over {len(scores):,} rows",
                        split,
                    )
                )
    findings += duplicates(ctx, data, either_order, label=lambda row: _label_text(row[opts.label_column]), what="pair")
    findings += split_overlap(ctx, data, either_order, what="pair (in either order)")

    corpus = (
        [norm(t) for column in (opts.text_a_column, opts.text_b_column) for t in data["train"][column]]
        if "train" in data
        else []
    )
    tokenizer = get_tokenizer(ctx, corpus=corpus)
    max_length = ctx.recipe.model.max_length
    for split, ds in data.items():
        a = [norm(t) for t in ds[opts.text_a_column]]
        b = [norm(t) for t in ds[opts.text_b_column]]
        if opts.mode == "cross":
            lengths = [len(ids) for ids in tokenizer(a, b, truncation=False)["input_ids"]]
        else:  # each side is encoded on its own
            la, lb = (tokenizer(side, truncation=False)["input_ids"] for side in (a, b))
            lengths = [max(len(x), len(y)) for x, y in zip(la, lb, strict=True)]
        long_rows = [n for n, length in zip(row_numbers(ds), lengths, strict=True) if length > max_length]
        findings.append(
            truncation(
                split,
                long_rows,
                len(ds),
                max_length=max_length,
                what="pair(s)",
                consequence="their ends are cut off; raise model.max_length to keep them",
            )
        )
    return findings


# ---------------------------------------------------------------------------------------------
# Steps 5 to 9
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    opts: PairOptions = ctx.options
    if opts.mode == "bi":
        return load_model(ctx, "AutoModel")
    if opts.label_type == "score":
        return load_model(ctx, "AutoModelForSequenceClassification", num_labels=1, problem_type="regression")
    assert ctx.labels is not None
    return load_model(ctx, "AutoModelForSequenceClassification", **label_config(ctx.labels))


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    opts: PairOptions = ctx.options
    labels = list(ctx.labels or [])

    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        predictions, references = evaluation.predictions, evaluation.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        if opts.mode == "bi" or opts.label_type == "score":
            return correlations(predictions.reshape(-1), references)
        report = classification_report(predictions.argmax(-1), references, labels)
        if len(labels) == 2:
            report["f1"] = report[f"f1/{labels[1]}"]  # the positive class: the second in class order
        return report

    return compute_metrics


@hookimpl
def nlptasks_training_arguments(ctx: RunContext, kwargs: dict[str, Any]) -> Any:
    if ctx.options.mode != "bi":
        return None
    # The encoder's forward() takes neither side's columns nor labels: keep them for our loss.
    return make_training_arguments({**kwargs, "remove_unused_columns": False, "label_names": ["labels"]})


@hookimpl
def nlptasks_data_collator(ctx: RunContext) -> Any:
    if ctx.options.mode != "bi":
        return None  # the engine's default pads the single pair sequence
    from .biencoder import PairCollator

    return PairCollator(ctx.tokenizer)


@hookimpl
def nlptasks_trainer(
    ctx: RunContext, model: Any, args: Any, data: Any, data_collator: Any, compute_metrics: Any
) -> Any:
    opts: PairOptions = ctx.options
    if opts.mode != "bi":
        return None
    from .biencoder import make_trainer_class

    trainer = build_trainer(make_trainer_class(), ctx, model, args, data, data_collator, compute_metrics)
    trainer.pooling, trainer.loss_name, trainer.scale, trainer.margin = opts.pooling, opts.loss, opts.scale, opts.margin
    return trainer


@hookimpl
def nlptasks_train(ctx: RunContext, trainer: Any, data: Any) -> Any:
    """Bi-encoder with two classes: after the default step 9, find the cosine threshold with the
    best validation accuracy, store it with the run, and score test at that threshold."""
    opts: PairOptions = ctx.options
    if opts.mode != "bi" or opts.label_type != "classes":
        return None
    from .evaluation import train_with_threshold

    return train_with_threshold(ctx, trainer, data)


@hookimpl
def nlptasks_evaluate(ctx: RunContext, trainer: Any, data: Any, split: str) -> Any:
    """Bi-encoder with two classes (nlptasks eval): the split's accuracy at the run's cosine
    threshold, as step 9 scores test."""
    opts: PairOptions = ctx.options
    threshold = (ctx.trained_manifest or {}).get("threshold")
    if opts.mode != "bi" or opts.label_type != "classes" or threshold is None:
        return None
    from .evaluation import evaluate_at_threshold

    return evaluate_at_threshold(ctx, trainer, data, split, threshold)


@hookimpl
def nlptasks_errors(ctx: RunContext, split: str, evaluation: Any) -> list[dict[str, Any]] | None:
    """Classes: every pair whose predicted label is wrong (a bi-encoder's at its threshold).
    Scores: every pair with its predicted and gold score and the absolute difference, largest
    first (a score has no *wrong*; the worst come first)."""
    if evaluation is None:
        return None
    from .evaluation import pair_errors

    return pair_errors(ctx, evaluation)


@hookimpl
def nlptasks_report(ctx: RunContext, trainer: Any, data: Any, metrics: dict[str, Any]) -> list[str]:
    """Cross-encoder with classes: the model card's per-class table and confusion matrix."""
    if ctx.options.mode != "cross" or ctx.options.label_type != "classes":
        return []
    return classification_sections(ctx, trainer, data, metrics)


# ---------------------------------------------------------------------------------------------
# Step 10: inference
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != "pair":
        return None
    from .predict import BiEncoderPredictor, CrossEncoderPredictor

    if manifest.get("mode") == "bi":
        return BiEncoderPredictor(run_dir, manifest, options)
    return CrossEncoderPredictor(run_dir, manifest, options)
