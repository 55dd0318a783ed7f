"""What step 4 does alike for one label and for several: refuse a label the run does not know,
naming its row; tokenize every split, turn its label cells into targets, keep what ``nlptasks
eval`` names wrong rows by, and log the label counts."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from nlptasks.plugin import ROW_COLUMN, DataError, RunContext, get_tokenizer


def check_labels(
    ctx: RunContext, split: str, rows: Iterable[int], labels: Iterable[list[str]], known: list[str], origin: str
) -> None:
    """Stop at the first row of ``split`` (file row numbers ``rows``, each row's ``labels``) with a
    label outside ``known``, naming the file, the row, where the known labels come from (``origin``)
    and, in ``known``'s order, what they are."""
    allowed = set(known)
    for row, row_labels in zip(rows, labels, strict=True):
        unseen = [label for label in row_labels if label not in allowed]
        if unseen:
            raise DataError(
                f"label {unseen[0]!r} does not occur in {origin}; known labels: {', '.join(known)}",
                path=ctx.sources.get(split, split),
                row=row,
                hint="Fix the row, or list every label in options.labels.",
            )


def encode_splits(
    ctx: RunContext, data: Any, labels: list[str], targets: Callable[[Any], Any], counts: Callable[[Any], str]
) -> Any:
    """Every split tokenized, its ``labels`` column ``targets(cell)`` for each label cell (a class id,
    or a multi-hot vector); the rows and texts of the scored splits kept in ``ctx.side``;
    ``counts(targets of a split)`` logged; the text column and an example recorded in the manifest."""
    from datasets import DatasetDict

    opts = ctx.options
    corpus = (str(t) for t in data["train"][opts.text_column]) if "train" in data else None
    tokenizer = get_tokenizer(ctx, corpus=corpus)
    max_length = ctx.recipe.model.max_length
    pad = "max_length" if ctx.recipe.train.padding == "max_length" else False

    def encode(batch: dict[str, list[Any]]) -> dict[str, Any]:
        enc = tokenizer([str(t) for t in batch[opts.text_column]], truncation=True, max_length=max_length, padding=pad)
        enc["labels"] = [targets(v) for v in batch[opts.label_column]]
        return dict(enc)

    out = DatasetDict()
    for split, ds in data.items():
        if split != "train":
            ctx.side[split] = {"rows": list(ds[ROW_COLUMN]), "texts": [str(t) for t in ds[opts.text_column]]}
        out[split] = ds.map(encode, batched=True, remove_columns=ds.column_names, desc=f"tokenize {split}")
        ctx.log.info("%s labels: %s", split, counts(out[split]["labels"]))
    ctx.manifest["text_column"] = opts.text_column
    ctx.manifest["example"] = first_text(data, opts.text_column)
    return out


def first_text(data: Any, column: str) -> str | None:
    """The first text of test, else validation, else train: the example the run's messages show."""
    for split in ("test", "validation", "train"):
        if split in data and len(data[split]):
            return str(data[split][0][column])
    return None
