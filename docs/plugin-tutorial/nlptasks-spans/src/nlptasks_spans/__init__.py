"""``spans``: entity spans, nested ones included, by a GlobalPointer head, as a third-party plugin.

A text in; its entities out, each a span of characters with a type.  Spans may nest: in
"杭州西湖大酒店" the whole is an ORG and "杭州" a LOC, which one tag per token (BIO) cannot say.
The shape this tutorial shows is **a head of the plugin's own**: step 5 returns
:class:`~nlptasks_spans.model.SpanModel`, a ``PreTrainedModel`` subclass that wraps the encoder
``load_model(ctx, "AutoModel")`` gives, with outputs of rank 4, ``(batch, types, tokens, tokens)``,
whose last two axes grow with each batch's padded length.  Its labels are spans
(``TaskSpec.label_fields`` kind ``"span"``: ``[type, first token, last token]`` triples), which
the collator (step 8) turns into the head's 0/1 matrices.

The plugin implements:

* ``register_tasks``: the task, its metrics, its span labels, PEFT (``FEATURE_EXTRACTION``: peft's
  wrapper passes every argument through, and nlptasks trains the plugin's own head in full);
* step 4 ``nlptasks_preprocess``: read entities (character spans, or BIO tags) and tokenize with
  character offsets; a span that does not start and end on tokens, or runs past
  ``model.max_length``, is counted and left out;
* step 5 ``nlptasks_build_model``: ``SpanModel.around(load_model(ctx, "AutoModel"))`` to train, and
  ``load_model(ctx, SpanModel)`` under ``nlptasks eval`` (the run's trained head);
* step 6 ``nlptasks_metrics``: span precision, recall and F1 (micro), F1 per type;
* step 8 ``nlptasks_data_collator``: pads the inputs and draws the spans into the matrices;
* ``nlptasks_errors`` (``nlptasks eval``): every text whose predicted spans differ from the gold;
* step 10 ``nlptasks_load_predictor``: ``{"text", "entities": [{"text", "label", "start", "end",
  "score"}]}``.

Data: jsonl rows with the text and its entities (``{"text": "...", "entities": [{"start": 0,
"end": 2, "label": "LOC"}]}``, ``end`` exclusive; or ``[start, end, label]`` lists), or rows of
``tokens`` and BIO ``tags`` (the MSRA layout), turned into character spans.
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
    Usage,
    filter_rows,
    get_tokenizer,
    hookimpl,
    input_fields,
    load_model,
    load_run,
    row_numbers,
    sigmoid,
)

__version__ = "0.1.0"

TASK = "spans"


class SpanOptions(BaseModel):
    """Options of the ``spans`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    text_column: str = Field("text", description="Column holding the text.")
    entities_column: str = Field(
        "entities",
        description="Column holding the text's entities: a list of {start, end, label} (character offsets, "
        "end exclusive) or [start, end, label].",
    )
    tokens_column: str = Field(
        "tokens", description="Without a text column: the column of tokens (characters, for Chinese) ..."
    )
    tags_column: str = Field("tags", description="... and the column of their BIO tags (B-LOC, I-LOC, O).")
    head_size: int = Field(64, ge=8, le=512, description="Size of the head's query and key per type (even).")


def _usage(manifest: dict[str, Any]) -> Usage:
    example = manifest.get("example")
    return Usage(example=(example if isinstance(example, str) else "杭州西湖大酒店的张伟说",), labels=None)


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name=TASK,
            description="Entity spans, nested ones included, with a GlobalPointer head (span F1).",
            options=SpanOptions,
            best_metric="f1",
            greater_is_better=True,
            metrics=("f1", "precision", "recall", "f1/<type>"),
            label_fields={"labels": "span"},  # [type, first token, last token] per entity
            # a head of the plugin's own: FEATURE_EXTRACTION's wrapper hands the model every argument;
            # nlptasks trains and saves `head` in full (the model's modules besides `encoder`).
            # prompt and p_tuning are refused by nlptasks itself: span labels index token positions.
            peft_task_type="FEATURE_EXTRACTION",
            peft_unsupported={"prefix": "SpanModel.forward takes no past_key_values to hand a prefix to its encoder"},
            usage=_usage,
        )
    )


# ---------------------------------------------------------------------------------------------
# Step 4: entities as character spans, then as token spans
# ---------------------------------------------------------------------------------------------


def bio_spans(tokens: list[str], tags: list[str]) -> tuple[str, list[tuple[int, int, str]]]:
    """A BIO-tagged row as ``(text, [(start, end, type)])``: tokens joined with nothing when each is
    one character (Chinese), else with spaces."""
    joiner = "" if all(len(t) == 1 for t in tokens) else " "
    text, starts = "", []
    for i, token in enumerate(tokens):
        if i and joiner:
            text += joiner
        starts.append(len(text))
        text += token
    spans, open_at, kind = [], None, None
    for i, tag in enumerate([*tags, "O"]):
        inside = tag.startswith("I-") and kind == tag[2:] and open_at is not None
        if open_at is not None and not inside:
            spans.append((starts[open_at], starts[i - 1] + len(tokens[i - 1]), str(kind)))
            open_at, kind = None, None
        if tag.startswith(("B-", "I-")) and not inside:
            open_at, kind = i, tag[2:]
    return text, spans


def entity_spans(value: Any) -> list[tuple[int, int, str]] | str:
    """A row's entities as ``(start, end, type)``, or why they cannot be read."""
    if not isinstance(value, list):
        return f"entities are not a list (got {value!r})"
    spans = []
    for item in value:
        if isinstance(item, dict):
            item = [item.get("start"), item.get("end"), item.get("label")]
        if not (isinstance(item, (list, tuple)) and len(item) == 3):
            return f"entity {item!r} is not {{start, end, label}}"
        start, end, label = item
        if not (isinstance(start, int) and isinstance(end, int) and isinstance(label, str) and label):
            return f"entity {list(item)!r}: start and end must be integers and label a name"
        spans.append((start, end, label))
    return spans


def row_entities(row: dict[str, Any], opts: SpanOptions, layout: str) -> tuple[str, list[tuple[int, int, str]]] | str:
    """``(text, spans)`` of a row, or why it is not an example."""
    if layout == "bio":
        tokens, tags = row.get(opts.tokens_column), row.get(opts.tags_column)
        if not isinstance(tokens, list) or not isinstance(tags, list) or len(tokens) != len(tags):
            return f"{opts.tokens_column} and {opts.tags_column} must be lists of one length"
        text, spans = bio_spans([str(t) for t in tokens], [str(t) for t in tags])
    else:
        text, found = row.get(opts.text_column), entity_spans(row.get(opts.entities_column))
        if isinstance(found, str):
            return found
        spans = found
    if not isinstance(text, str) or not text.strip():
        return "empty text"
    for start, end, label in spans:
        if not 0 <= start < end <= len(text):
            return f"entity {label} [{start}, {end}) is outside the text's {len(text)} characters"
    return text, spans


def layout_of(ctx: RunContext, split: str, ds: Any, opts: SpanOptions) -> str:
    """``"spans"`` (text and entities columns) or ``"bio"`` (tokens and tags), else an error naming
    the file and the columns it has."""
    columns = ds.column_names
    if opts.text_column in columns and opts.entities_column in columns:
        return "spans"
    if opts.tokens_column in columns and opts.tags_column in columns:
        return "bio"
    present = ", ".join(c for c in columns if not c.startswith("__"))
    raise DataError(
        f"neither columns {opts.text_column!r} and {opts.entities_column!r} (options.text_column, "
        f"options.entities_column) nor {opts.tokens_column!r} and {opts.tags_column!r} (BIO); the columns are: {present}",
        path=ctx.sources.get(split, split),
        hint="Name the columns with --set options.text_column=NAME --set options.entities_column=NAME.",
    )


def token_span(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """The first and last token of characters ``[start, end)``, or ``None`` when the span does not
    start and end on a token boundary (or lies beyond the truncated tokens)."""
    first = next((i for i, (a, b) in enumerate(offsets) if b > a and a == start), None)
    last = next((i for i, (a, b) in enumerate(offsets) if b > a and b == end), None)
    return (first, last) if first is not None and last is not None and first <= last else None


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from datasets import Dataset, DatasetDict

    opts: SpanOptions = ctx.options
    rows: dict[str, tuple[list[int], list[str], list[list[tuple[int, int, str]]]]] = {}
    for split, ds in data.items():
        layout = layout_of(ctx, split, ds, opts)

        def problem(row: dict[str, Any], layout: str = layout) -> str | None:
            found = row_entities(row, opts, layout)
            return found if isinstance(found, str) else None

        hint = "Each entity is {start, end, label} with 0 <= start < end <= the text's length (end exclusive)."
        ds = filter_rows(ctx, split, ds, problem, "error", hint)
        read = [row_entities(row, opts, layout) for row in ds]
        rows[split] = (row_numbers(ds), [r[0] for r in read], [r[1] for r in read])  # type: ignore[index]

    if ctx.trained_run is not None:  # nlptasks eval: the run's types; texts with others are counted
        labels = list(ctx.labels or [])
        for split, (numbers, texts, spans) in list(rows.items()):
            keep = [k for k, s in enumerate(spans) if {t for _, _, t in s} <= set(labels)]
            ctx.drop(split, UNKNOWN_LABEL, len(texts) - len(keep))
            rows[split] = ([numbers[k] for k in keep], [texts[k] for k in keep], [spans[k] for k in keep])
    else:
        labels = sorted({t for s in rows["train"][2] for _, _, t in s})
        if not labels:
            raise DataError("no entity in the training data", path=ctx.sources.get("train", "train"))
    ctx.labels = labels
    type_id = {name: i for i, name in enumerate(labels)}

    tokenizer = get_tokenizer(ctx, corpus=rows.get("train", ([], [], []))[1])
    if not getattr(tokenizer, "is_fast", False):
        raise DataError("spans needs a fast tokenizer (character offsets); this model has a slow one")
    out = DatasetDict()
    for split, (numbers, texts, spans) in rows.items():
        enc = tokenizer(texts, truncation=True, max_length=ctx.recipe.model.max_length, return_offsets_mapping=True)
        labels_column, lost = [], 0
        for offsets, entities in zip(enc.pop("offset_mapping"), spans, strict=True):
            triples = []
            for start, end, name in entities:
                where = token_span(offsets, start, end)
                if where is None:
                    lost += 1
                else:
                    triples.append([type_id[name], where[0], where[1]])
            labels_column.append(triples)
        if lost:
            ctx.log.warning("%s: %d entities left out (not on token boundaries, or past model.max_length)", split, lost)
        out[split] = Dataset.from_dict({**enc, "labels": labels_column})
        ctx.side[split] = {"rows": numbers, "texts": texts}
    ctx.manifest["example"] = rows[next(s for s in ("test", "validation", "train") if s in rows)][1][0]
    ctx.manifest["head_size"] = opts.head_size
    return out


# ---------------------------------------------------------------------------------------------
# Steps 5, 6 and 8
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    from .model import SpanModel

    if ctx.trained_run is not None:  # nlptasks eval: the run's trained model, head included
        return load_model(ctx, SpanModel)
    encoder = load_model(ctx, "AutoModel")  # pretrained or from scratch, as the recipe says
    return SpanModel.around(encoder, list(ctx.labels or []), head_size=ctx.options.head_size)


def found_spans(scores: Any, labels: Any | None = None) -> list[set[tuple[int, int, int]]]:
    """Per example, the ``(type, first, last)`` cells above 0 (``labels``: the cells equal to 1)."""
    import numpy as np

    marked = (labels == 1) if labels is not None else (scores > 0)
    found: list[set[tuple[int, int, int]]] = [set() for _ in range(len(marked))]
    for b, t, i, j in zip(*np.nonzero(marked), strict=True):
        found[int(b)].add((int(t), int(i), int(j)))
    return found


def span_scores(predicted: list[set[Any]], gold: list[set[Any]], labels: list[str]) -> dict[str, float]:
    """Micro precision, recall and F1 of exact spans, and F1 per type."""

    def f1(p: int, g: int, hit: int) -> tuple[float, float, float]:
        precision, recall = (hit / p if p else 0.0), (hit / g if g else 0.0)
        return precision, recall, (2 * precision * recall / (precision + recall) if precision + recall else 0.0)

    hits = [p & g for p, g in zip(predicted, gold, strict=True)]
    precision, recall, score = f1(sum(map(len, predicted)), sum(map(len, gold)), sum(map(len, hits)))
    result = {"f1": score, "precision": precision, "recall": recall}
    for t, name in enumerate(labels):
        p, g, h = (sum(1 for cells in group for cell in cells if cell[0] == t) for group in (predicted, gold, hits))
        result[f"f1/{name}"] = f1(p, g, h)[2]
    return result


@hookimpl
def nlptasks_metrics(ctx: RunContext) -> Any:
    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        logits = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
        return span_scores(found_spans(logits), found_spans(None, evaluation.label_ids), list(ctx.labels or []))

    return compute_metrics


class SpanCollator:
    """Examples → a padded batch, and ``labels`` of shape ``(batch, types, tokens, tokens)``: 1 at
    each entity's (first, last) token cell of its type, 0 elsewhere."""

    def __init__(self, tokenizer: Any, types: int, max_length: int | None = None) -> None:
        self.tokenizer, self.types, self.max_length = tokenizer, types, max_length

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        inputs = [{k: v for k, v in e.items() if k != "labels"} for e in examples]
        padding = "max_length" if self.max_length else True
        batch = dict(self.tokenizer.pad(inputs, padding=padding, max_length=self.max_length, return_tensors="pt"))
        if "labels" in examples[0]:
            length = batch["input_ids"].shape[1]
            labels = torch.zeros(len(examples), self.types, length, length)
            for b, example in enumerate(examples):
                for t, i, j in example["labels"]:
                    labels[b, t, i, j] = 1.0
            batch["labels"] = labels
        return batch


@hookimpl
def nlptasks_data_collator(ctx: RunContext) -> Any:
    fixed = ctx.recipe.model.max_length if ctx.recipe.train.padding == "max_length" else None
    return SpanCollator(ctx.tokenizer, len(ctx.labels or []), fixed)


@hookimpl
def nlptasks_errors(ctx: RunContext, split: str, evaluation: Any) -> list[dict[str, Any]] | None:
    """`nlptasks eval`'s errors file: every text whose predicted spans are not its gold spans."""
    if evaluation is None:
        return None
    logits = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
    predicted, gold = found_spans(logits), found_spans(None, evaluation.label_ids)
    names = list(ctx.labels or [])

    def shown(cells: set[tuple[int, int, int]]) -> list[list[Any]]:
        return [[names[t], i, j] for t, i, j in sorted(cells, key=lambda c: (c[1], c[2], c[0]))]

    side = evaluation.side
    return [
        {"row": side["rows"][k], "text": side["texts"][k], "gold": shown(g), "predicted": shown(p)}
        for k, (p, g) in enumerate(zip(predicted, gold, strict=True))
        if p != g
    ]


# ---------------------------------------------------------------------------------------------
# Step 10: inference
# ---------------------------------------------------------------------------------------------


class SpanPredictor:
    """Texts → ``{"text", "entities"}``, each entity ``{"text", "label", "start", "end", "score"}``
    (characters of the text, ``end`` exclusive; ``score`` the sigmoid of the span's logit), in order
    of ``start``; nested spans are all listed.  Inputs follow the rule of every task
    (``nlptasks.plugin.input_fields``): strings, or rows with the run's text column."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        from .model import SpanModel

        # the run's tokenizer and model through the backend the options chose: the trained
        # SpanModel (with its adapter for a [peft] run), or an ONNX export of it
        self.tokenizer, self.model = load_run(run_dir, manifest, SpanModel, options)
        self.labels = list(manifest["labels"])
        self.column = manifest.get("text_column", "text")
        self.max_length = options.max_length or manifest.get("max_length")
        self.batch_size = options.batch_size or 32

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        import torch

        texts = [row[self.column] for row in input_fields(inputs, [self.column])]
        results = []
        device = next(self.model.parameters()).device
        for at in range(0, len(texts), self.batch_size):
            chunk = texts[at : at + self.batch_size]
            enc = self.tokenizer(
                chunk, truncation=True, max_length=self.max_length, return_offsets_mapping=True, padding=True
            )
            offsets = enc.pop("offset_mapping")
            takes = getattr(self.model, "input_names", None) or list(enc)  # an ONNX graph's inputs
            with torch.inference_mode():
                batch = {k: torch.tensor(v, device=device) for k, v in enc.items() if k in takes}
                logits = self.model(**batch)["logits"].float().cpu().numpy()
            for text, scores, spans in zip(chunk, logits, offsets, strict=True):
                found = found_spans(scores[None])[0]
                entities = [
                    {
                        "text": text[spans[i][0] : spans[j][1]],
                        "label": self.labels[t],
                        "start": spans[i][0],
                        "end": spans[j][1],
                        "score": round(float(sigmoid(scores[t, i, j])), 6),
                    }
                    for t, i, j in found
                    if spans[i][1] > spans[i][0] and spans[j][1] > spans[j][0]  # not [CLS] / [SEP]
                ]
                entities.sort(key=lambda e: (e["start"], -e["end"], e["label"]))
                results.append({"text": text, "entities": entities})
        return results


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != TASK:
        return None
    return SpanPredictor(run_dir, manifest, options)
