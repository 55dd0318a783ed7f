"""``nlptasks inspect-batch``: steps 1 to 4 of a recipe, then the model inputs shown token by token.

What the model will see is printed before any training: each token, and whether it is in the
loss (its label is not -100).  For token-level labels the label is shown; for one label per
example (classification) the label is printed once.  A split in which an example has no token in
the loss is an error naming the rows (e.g. an SFT response cut away by ``model.max_length``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nlptasks.context import RunContext
from nlptasks.engine.data import ROW_COLUMN
from nlptasks.errors import NlptasksError
from nlptasks.plugins import Host, get_host
from nlptasks.recipe import LoadedRecipe


def preprocessed(loaded: LoadedRecipe, host: Host | None = None) -> tuple[RunContext, Any]:
    """Run steps 1 to 4 (in a throw-away output folder); return the context and the data."""
    from nlptasks.engine.runner import _library_progress_bars

    host = host or get_host()
    tmp = tempfile.mkdtemp(prefix="nlptasks-inspect-")
    ctx = RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=Path(tmp) / "run")
    hooks = host.hooks_for(loaded.task)
    with _library_progress_bars(False):
        hooks.nlptasks_setup(ctx=ctx)
        raw = hooks.nlptasks_load_data(ctx=ctx)
        data = hooks.nlptasks_split(ctx=ctx, data=raw)
        data = hooks.nlptasks_preprocess(ctx=ctx, data=data)
    return ctx, data


def token_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """The text each token adds (decoding growing prefixes, so multi-byte characters split over
    several byte-level tokens are shown once, on the token that completes them)."""
    pieces, previous = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if text.endswith("\ufffd"):
            pieces.append("")
            continue
        pieces.append(text[len(previous):] if text.startswith(previous) else tokenizer.decode([ids[i]]))
        previous = text
    return pieces


def show(ctx: RunContext, data: Any, split: str, rows: int, out: Callable[[str], None] = print) -> None:
    """Print the first ``rows`` examples of ``split``, token by token."""
    if split not in data:
        raise NlptasksError(f"no {split!r} split after preprocessing (splits: {', '.join(data)})")
    ds = data[split]
    where = ctx.sources.get(split, split)
    tokenizer = ctx.tokenizer
    numbers = ds[ROW_COLUMN] if ROW_COLUMN in ds.column_names else list(range(1, len(ds) + 1))
    out(f"{split}: {len(ds)} examples from {where}")
    for index in range(min(rows, len(ds))):
        example = ds[index]
        ids = list(example["input_ids"])
        labels = example.get("labels")
        token_level = isinstance(labels, list)
        flags = [label != -100 for label in labels] if token_level else [True] * len(ids)
        head = f"\nexample {index + 1} (row {numbers[index]}): {len(ids)} tokens"
        if token_level:
            head += f", {sum(flags)} in the loss"
        elif labels is not None:
            name = ctx.labels[labels] if ctx.labels and isinstance(labels, int) and 0 <= labels < len(ctx.labels) else labels
            head += f", label {name!r}"
        out(head)
        pieces = token_pieces(tokenizer, ids) if tokenizer is not None else [str(i) for i in ids]
        marked, inside = [], False
        for piece, flag in zip(pieces, flags, strict=True):
            if token_level and flag != inside:
                marked.append("«" if flag else "»")
                inside = flag
            marked.append(piece)
        if inside:
            marked.append("»")
        out("  text: " + "".join(marked).replace("\n", "⏎"))
        if token_level:
            out("  «...» marks the tokens in the loss")
        out(f"  {'pos':>4} {'id':>7}  {'loss':<4}  token")
        for pos, (tok, piece) in enumerate(zip(ids, pieces, strict=True)):
            if token_level:
                label = labels[pos]
                mark = "yes" if flags[pos] else "-"
                if flags[pos] and label != tok:
                    mark = ctx.labels[label] if ctx.labels and 0 <= label < len(ctx.labels) else str(label)
            else:
                mark = ""
            out(f"  {pos:>4} {tok:>7}  {mark:<4}  {piece!r}")


def inspect_batch(loaded: LoadedRecipe, split: str = "train", rows: int = 3, host: Host | None = None,
                  out: Callable[[str], None] = print) -> None:
    """The ``inspect-batch`` command: show ``rows`` examples; raise if an example has no token in
    the loss (in any split)."""
    ctx, data = preprocessed(loaded, host)
    show(ctx, data, split, rows, out)
    empty = {}
    for name, ds in data.items():
        if len(ds) and isinstance(ds[0].get("labels"), list):
            numbers = ds[ROW_COLUMN] if ROW_COLUMN in ds.column_names else range(1, len(ds) + 1)
            bad = [n for n, labels in zip(numbers, ds["labels"], strict=True) if all(v == -100 for v in labels)]
            if bad:
                empty[name] = bad
    if ctx.dropped:
        parts = [f"{s}: " + ", ".join(f"{n} {reason}" for reason, n in d.items()) for s, d in ctx.dropped.items()]
        out("\ndropped rows: " + "; ".join(parts))
    if empty:
        listing = "; ".join(f"{ctx.sources.get(s, s)} rows {', '.join(map(str, r[:10]))}{' ...' if len(r) > 10 else ''}"
                            for s, r in empty.items())
        raise NlptasksError(
            f"{sum(len(r) for r in empty.values())} example(s) have no token in the loss: {listing}",
            hint="They teach nothing (often: the answer was cut by model.max_length). Raise model.max_length or fix the rows.",
        )
    out("\nok: every example has tokens in the loss")
