"""``ner``: named-entity recognition as word-level token classification.

The whole task lives in this package: options, CoNLL/jsonl loading (step 2), tag checks, windows
and sub-word label alignment (4), the token-classification head (5), seqeval metrics on whole
sentences, merged back from the windows with the side data step 4 keeps per split (6), the
collator (8) and inference with character offsets (10).  See ``docs/tasks/ner.md``.

Data: rows ``{"tokens": [...], "tags": [...]}`` (jsonl/json, a ``save_to_disk`` folder or a hub
dataset whose tags are a ``ClassLabel`` sequence), or CoNLL files (``.conll``/``.bio``/``.iob``/
``.txt``: token and tag per line, a blank line between sentences).

No truncation loss: a sentence longer than ``model.max_length`` sub-tokens is cut into windows of
whole words overlapping by ``options.stride`` words, in training and evaluation; evaluation and
inference take each word's prediction from the window where the word is most central, and
seqeval scores every gold word (``word_coverage`` in the metrics says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.plugin import (
    ROW_COLUMN,
    UNKNOWN_LABEL,
    DataError,
    Evaluation,
    LoadOptions,
    NlptasksError,
    RunContext,
    TaskSpec,
    Usage,
    build_trainer,
    data_columns,
    get_tokenizer,
    hookimpl,
    label_config,
    load_file,
    load_model,
    per_class_table,
)

from .data import LINE, PREFIXES
from .options import NerOptions, recipe_problems
from .packing import packed_trainer, resolve_packing

SPLITS = ("train", "validation", "test")


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name="ner",
            description="Named-entity recognition: one tag per word, seqeval entity F1, long sentences windowed.",
            options=NerOptions,
            best_metric="f1",
            greater_is_better=True,
            peft_task_type="TOKEN_CLS",
            recipe_problems=recipe_problems,
            metrics=(
                "f1",
                "precision",
                "recall",
                "accuracy",
                "words_scored",
                "word_coverage",
                "f1/<type>",
                "precision/<type>",
                "recall/<type>",
                "support/<type>",
            ),
            label_fields={"labels": "token"},
            usage=_usage,
        )
    )


def _usage(manifest: dict[str, Any]) -> Usage:
    """A sentence of the run's data; the labels row lists entity types, not the scheme's tags."""
    types = sorted({str(tag)[2:] for tag in manifest.get("labels") or [] if tag != "O"})
    scheme = (manifest.get("ner") or {}).get("scheme", "BIO")
    return Usage(
        example=(manifest.get("example") or "your text",),
        labels=", ".join(f"`{t}`" for t in types) + f" (entity types; {scheme} tags)",
    )


# --------------------------------------------------------------------------------------------
# Step 2: CoNLL and jsonl files, with line numbers
# --------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_load_data(ctx: RunContext) -> Any:
    """Local files: CoNLL (by extension), jsonl with line numbers; others via the engine."""
    from datasets import DatasetDict

    from .data import check_rows, is_conll, iter_conll, read_jsonl, to_dataset

    cfg = ctx.recipe.data
    if cfg.hub:
        return None  # the engine's default loads hub datasets
    opts: NerOptions = ctx.options
    data = DatasetDict()
    for split in SPLITS:
        path_text = getattr(cfg, split)
        if not path_text:
            continue
        path = Path(path_text)
        ctx.sources[split] = path_text
        if cfg.format == "auto" and is_conll(path):
            rows = ((line, tokens, tags) for line, tokens, tags in iter_conll(path))
            keys = ("tokens", "tags")
        elif (cfg.format == "jsonl" or path.suffix.lower() in (".jsonl", ".ndjson")) and path.is_file():
            objs, invalid = read_jsonl(path, opts.skip_invalid_rows)
            ctx.drop(split, "invalid JSON", invalid)
            rows = ((o[LINE], o.get(opts.tokens_column), o.get(opts.tags_column)) for o in objs)
            keys = (opts.tokens_column, opts.tags_column)
            for o in objs[:1]:
                _require_keys(o, opts, path_text)
        else:
            skipped: list[int] = []
            skip = skipped.append if opts.skip_invalid_rows else None  # called inside load_file, in this iteration
            ds = load_file(path_text, cfg.format, (lambda row, _why, note=skip: note(row)) if skip else None)
            ctx.drop(split, "malformed", len(skipped))
            if LINE not in ds.column_names:
                numbered = ROW_COLUMN in ds.column_names  # rows were left out: each keeps its number
                ds = ds.add_column(LINE, list(ds[ROW_COLUMN]) if numbered else list(range(1, len(ds) + 1)))
                if numbered:
                    ds = ds.remove_columns(ROW_COLUMN)
            data[split] = ds
            continue
        checked = check_rows(rows, path_text, *keys, skip_invalid=opts.skip_invalid_rows)
        for reason, n in checked.skipped.items():
            ctx.drop(split, reason, n)
        if not checked.tokens:
            raise DataError("no sentences", path=path_text)
        data[split] = to_dataset(checked, opts.tokens_column, opts.tags_column)
    for split in list(data):
        limit = cfg.max_train_rows if split == "train" else cfg.max_eval_rows
        if limit is not None and len(data[split]) > limit:
            data[split] = data[split].select(range(limit))
        ctx.log.info("%s: %d sentences from %s", split, len(data[split]), ctx.sources[split])
    return data


def _require_keys(obj: dict[str, Any], opts: NerOptions, path: str) -> None:
    for key, option in ((opts.tokens_column, "tokens_column"), (opts.tags_column, "tags_column")):
        if key not in obj:
            fields = ", ".join(k for k in obj if k != LINE)
            raise DataError(
                f"no {key!r} field; the fields are: {fields}",
                path=path,
                row=obj[LINE],
                hint=f"Name the right field with --set options.{option}=NAME.",
            )


# --------------------------------------------------------------------------------------------
# Step 4: check tags, build labels, tokenize into windows
# --------------------------------------------------------------------------------------------


def _clean_split(ctx: RunContext, split: str, ds: Any) -> tuple[list[list[str]], list[list[str]], list[int]]:
    from .data import check_rows, class_label_names

    opts: NerOptions = ctx.options
    where = ctx.sources.get(split, split)
    for column, option in ((opts.tokens_column, "tokens_column"), (opts.tags_column, "tags_column")):
        if column not in ds.column_names:
            raise DataError(
                f"no column {column!r}; the columns are: {', '.join(data_columns(ds))}",
                path=where,
                hint=f"Name the right column with --set options.{option}=NAME.",
            )
    names = class_label_names(ds, opts.tags_column)
    lines = ds[LINE] if LINE in ds.column_names else list(range(1, len(ds) + 1))
    checked = check_rows(
        zip(lines, ds[opts.tokens_column], ds[opts.tags_column], strict=True),
        where,
        opts.tokens_column,
        opts.tags_column,
        opts.skip_invalid_rows,
    )
    for reason, n in checked.skipped.items():
        ctx.drop(split, reason, n)
    tags = []
    for line, row in zip(checked.lines, checked.tags, strict=True):
        out = []
        for tag in row:
            if isinstance(tag, int):
                if names is None or not 0 <= tag < len(names):
                    raise DataError(f"integer tag {tag} without ClassLabel names to read it", path=where, row=line)
                tag = names[tag]
            out.append(_normal_tag(tag, opts.scheme, where, line))
        tags.append(out)
    return checked.tokens, tags, checked.lines


def _normal_tag(tag: str, scheme: str, where: str, line: int) -> str:
    from .data import split_tag

    prefix, kind = split_tag(tag.strip())
    if prefix == "O":
        return "O"
    if prefix not in PREFIXES[scheme]:
        allowed = "/".join(PREFIXES[scheme])
        raise DataError(
            f"tag {tag!r} is not valid in the {scheme} scheme (expected O or {allowed}-TYPE)",
            path=where,
            row=line,
            hint="Set the scheme of your data with --set options.scheme=BIO (or IOB1, BIOES).",
        )
    return f"{prefix}-{kind}"


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import Dataset, DatasetDict

    from .align import encode, scored_words
    from .data import ordered_labels, repair_sentence, split_tag

    opts: NerOptions = ctx.options
    cleaned = {split: _clean_split(ctx, split, ds) for split, ds in data.items()}
    for split, (tokens, _, _) in cleaned.items():
        if not tokens:
            raise DataError("no sentences left after skipping bad rows", path=ctx.sources.get(split, split))

    # Invalid transitions (I-X after O): repair and count, or stop.
    repaired: dict[str, int] = {}
    for split, (tokens, tags, lines) in cleaned.items():
        for k, row in enumerate(tags):
            fixed, first = repair_sentence(row, opts.scheme)
            if first is None:
                continue
            if opts.invalid_transition == "error":
                before = row[first - 1] if first else "the sentence start"
                raise DataError(
                    f"tag {row[first]!r} at word {first + 1} ({tokens[k][first]!r}) follows {before!r}: "
                    f"it does not continue an entity in the {opts.scheme} scheme",
                    path=ctx.sources.get(split, split),
                    row=lines[k],
                    hint="Fix the tag, or let nlptasks repair such tags (I-X → B-X, counted) with "
                    "--set options.invalid_transition=repair.",
                )
            repaired[split] = repaired.get(split, 0) + sum(a != b for a, b in zip(row, fixed, strict=True))
            tags[k] = fixed
    for split, n in repaired.items():
        ctx.log.warning("repaired %d tag(s) in %s that did not continue an entity (I-X → B-X)", n, split)

    # Labels: from the recipe, or O + every prefix of each entity type seen in training.
    if ctx.trained_run is not None:  # nlptasks eval: the run's tags; sentences with others are counted, not scored
        labels, origin = list(ctx.labels or []), "the run"
        for split, (tokens, tags, lines) in list(cleaned.items()):
            keep = [k for k, row in enumerate(tags) if set(row) <= set(labels)]
            ctx.drop(split, UNKNOWN_LABEL, len(tags) - len(keep))
            cleaned[split] = ([tokens[k] for k in keep], [tags[k] for k in keep], [lines[k] for k in keep])
    elif opts.labels is not None:
        labels, origin = list(opts.labels), "options.labels"
        if "O" not in labels:
            raise NlptasksError(
                "options.labels: must include 'O'", hint='e.g. --set \'options.labels=["O", "B-PER", "I-PER"]\''
            )
    else:
        types = {split_tag(t)[1] for row in cleaned["train"][1] for t in row} - {None}
        labels, origin = ordered_labels({str(t) for t in types}, opts.scheme), "the training data"
    known = set(labels)
    for split, (_tokens, tags, lines) in cleaned.items():
        for row, line in zip(tags, lines, strict=True):
            for tag in row:
                if tag not in known:
                    types_seen = sorted({split_tag(t)[1] for t in labels if t != "O"})
                    raise DataError(
                        f"tag {tag!r} does not occur in {origin} (entity types there: {', '.join(types_seen) or 'none'})",
                        path=ctx.sources.get(split, split),
                        row=line,
                        hint="Fix the tag, or list every tag in options.labels.",
                    )
    ctx.labels = labels
    label2id = {name: i for i, name in enumerate(labels)}
    b_to_i = {label2id[t]: label2id["I" + t[1:]] for t in labels if t.startswith("B-") and "I" + t[1:] in label2id}

    train_tokens = cleaned["train"][0] if "train" in cleaned else []
    tokenizer = get_tokenizer(ctx, corpus=(" ".join(t) for t in train_tokens))
    if not getattr(tokenizer, "is_fast", False):
        raise NlptasksError(
            "ner needs a fast tokenizer (word_ids() maps sub-tokens to words); this model has a slow one",
            hint="Pick a model with a tokenizer.json, or use [model.scratch].",
        )
    max_length = ctx.recipe.model.max_length
    budget = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if opts.stride >= budget:
        raise NlptasksError(
            f"options.stride: {opts.stride} words of overlap leave no room for new words in a window of "
            f"{budget} sub-tokens (model.max_length {max_length})",
            hint=f"Use a smaller stride, e.g. --set options.stride={max(0, budget // 4)}.",
        )

    if ctx.trained_manifest is not None:  # nlptasks eval: as the run split its inputs
        word_split = ctx.trained_manifest.get("ner", {}).get("word_split", "whitespace")
    elif opts.input_split == "auto":
        words = [w for row in train_tokens for w in row]
        single = sum(len(w) == 1 for w in words) / max(len(words), 1)
        word_split = "char" if single >= 0.9 else "whitespace"
    else:
        word_split = opts.input_split

    padding = "max_length" if ctx.recipe.train.padding == "max_length" else False
    out = DatasetDict()
    for split, (tokens, tags, _) in cleaned.items():
        ids = [[label2id[t] for t in row] for row in tags]
        features, windows = encode(
            tokenizer, tokens, max_length, opts.stride, opts.overflow, ids, opts.subword_labels, b_to_i, padding
        )
        out[split] = Dataset.from_dict(features)
        lengths = [len(t) for t in tokens]
        long = (
            len(windows) - len(tokens)
            if opts.overflow == "window"
            else sum(1 for w in windows if w.end < lengths[w.sentence])
        )
        ctx.log.info(
            "%s: %d sentences → %d windows (%s sentences longer than %d sub-tokens%s)",
            split,
            len(tokens),
            len(windows),
            long,
            max_length,
            "" if opts.overflow == "window" else ", truncated",
        )
        if split != "train":  # what step 6 needs to score whole sentences from the windows
            ctx.side[split] = {
                "rows": cleaned[split][2],
                "tokens": tokens,
                "windows": windows,
                "gold": tags,
                "lengths": lengths,
                "words": sum(lengths),
                "scored": scored_words(windows, lengths),
            }
        ctx.record(split, "repaired_tags", repaired.get(split, 0))
    separator = "" if word_split == "char" else " "
    for split in ("test", "validation", "train"):
        if split in cleaned and cleaned[split][0]:
            ctx.manifest["example"] = separator.join(cleaned[split][0][0])
            break
    ctx.manifest["ner"] = {
        "scheme": opts.scheme,
        "subword_labels": opts.subword_labels,
        "predict_from": "first sub-token of each word",
        "stride": opts.stride,
        "overflow": opts.overflow,
        "word_split": word_split,
    }
    return out


@hookimpl
def nlptasks_check(ctx: RunContext, data: Any) -> list[Any]:
    """The data doctor: tags against the scheme, invalid transitions, entity types per split,
    empty/duplicate/shared sentences, and sentences longer than model.max_length."""
    from .check import check

    return check(ctx, data)


# --------------------------------------------------------------------------------------------
# Steps 5, 6, 8: model, metrics, collator
# --------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    assert ctx.labels is not None
    model = load_model(ctx, "AutoModelForTokenClassification", **label_config(ctx.labels))
    ctx.state["packing"] = ctx.manifest["packing"] = resolve_packing(ctx, model)
    return model


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    from .metrics import entity_report, sentence_predictions

    labels = list(ctx.labels or [])
    opts: NerOptions = ctx.options

    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        """Entity scores of the split's whole sentences, merged from its windows (``evaluation.side``)."""
        preds = evaluation.predictions
        if isinstance(preds, tuple):
            preds = preds[0]
        if preds.ndim == 3:
            preds = preds.argmax(-1)
        info = evaluation.side
        gold, pred = sentence_predictions(info, preds, labels)
        metrics = entity_report(gold, pred, opts.mode, opts.scheme)
        metrics["words_scored"] = info["scored"]
        metrics["word_coverage"] = info["scored"] / info["words"] if info["words"] else 1.0
        return metrics

    return compute_metrics


@hookimpl
def nlptasks_errors(ctx: RunContext, split: str, evaluation: Any) -> list[dict[str, Any]] | None:
    """Every sentence whose predicted entities differ from its gold ones: the file row, the words,
    and the entities missed and invented (type, word span, text)."""
    if evaluation is None:
        return None
    from .metrics import sentence_errors, sentence_predictions

    preds = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
    gold, pred = sentence_predictions(
        evaluation.side, preds if preds.ndim == 2 else preds.argmax(-1), list(ctx.labels or [])
    )
    char = (ctx.manifest.get("ner") or {}).get("word_split") == "char"
    return sentence_errors(evaluation.side, gold, pred, "" if char else " ")


@hookimpl
def nlptasks_data_collator(ctx: RunContext) -> Any:
    from transformers import DataCollatorForTokenClassification

    if ctx.recipe.train.padding == "max_length":
        return DataCollatorForTokenClassification(
            ctx.tokenizer, padding="max_length", max_length=ctx.recipe.model.max_length
        )
    return DataCollatorForTokenClassification(ctx.tokenizer)


@hookimpl
def nlptasks_trainer(
    ctx: RunContext, model: Any, args: Any, data: Any, data_collator: Any, compute_metrics: Any
) -> Any:
    """The default Trainer (packed training batches with options.packing), keeping label ids (not
    logits) between evaluation batches."""
    from transformers import Trainer

    cls = packed_trainer(Trainer) if ctx.state.get("packing") else Trainer
    return build_trainer(
        cls, ctx, model, args, data, data_collator, compute_metrics, preprocess_logits_for_metrics=_argmax
    )


def _argmax(logits: Any, labels: Any) -> Any:
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


# --------------------------------------------------------------------------------------------
# Step 10: inference
# --------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_report(ctx: RunContext, trainer: Any, data: Any, metrics: dict[str, Any]) -> list[str]:
    """The model card's per-entity-type table (test split, else validation)."""
    for split in ("test", "validation"):
        per_type = {k: v for k, v in (metrics.get(split) or {}).items() if "/" in k}
        if per_type:
            return [
                f"## Per entity type ({split})\n\nEntity-level (seqeval), whole sentences.\n\n"
                + per_class_table(per_type, title="type")
            ]
    return []


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != "ner":
        return None
    from .predict import NerPredictor

    return NerPredictor(run_dir, manifest, options)
