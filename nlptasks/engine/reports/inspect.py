"""What ``nlptasks inspect-batch`` prints: model inputs token by token, and which are in the loss.

Which columns carry labels, and how to read them, is the task's to say
(``TaskSpec.label_fields``, see :data:`nlptasks.types.LABEL_KINDS`):

``token``     one label per token; ``-100`` marks a token outside the loss (NER tags, SFT responses);
``position``  a token index per example (an answer's start and end): the tokens from the first to
              the last position are marked, each position with its column;
``example``   one value per example (a class, a score, a multi-hot vector): shown once;
``target``    the token ids of the sequence the model generates (a seq2seq decoder's labels): shown
              as their own tokens, on the decoder's side (``decoder_input_ids`` beside them when the
              task gives them), never against the input;
``span``      ``[class id, first token, last token]`` triples per example: every token of a span is
              marked with its class (nested spans: each class, outer first), and the spans are
              listed under the example.

Inputs of any rank are shown as they are: an example whose ``input_ids`` hold several sequences (a
multiple-choice example's candidates) is shown one sequence at a time, each with its own labels.
:func:`loss_problems` finds the examples the loss cannot use (no token in the loss, a position
outside the input); a split without any of the task's label columns is an error, never "ok".
The command itself (steps 1 to 4, then this) is :mod:`nlptasks.pipeline.inspect`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from nlptasks.context import RunContext
from nlptasks.engine.data.reading import ROW_COLUMN
from nlptasks.errors import NlptasksError

__all__ = ["flat_values", "label_columns", "loss_problems", "sequences", "show", "token_pieces"]


def token_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """The text each token adds (decoding growing prefixes, so multi-byte characters split over
    several byte-level tokens are shown once, on the token that completes them)."""
    pieces, previous = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if text.endswith("\ufffd"):
            pieces.append("")
            continue
        pieces.append(text[len(previous) :] if text.startswith(previous) else tokenizer.decode([ids[i]]))
        previous = text
    return pieces


def sequences(value: Any, path: tuple[int, ...] = ()) -> Iterator[tuple[tuple[int, ...], list[Any]]]:
    """``(index path, sequence)`` of every innermost sequence of a nested list: one for a plain
    sequence (path ``()``), one per candidate of a ``(choices, tokens)`` example, and so on."""
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        for i, inner in enumerate(value):
            yield from sequences(inner, (*path, i))
    else:
        yield path, list(value) if isinstance(value, (list, tuple)) else [value]


def _at(value: Any, path: tuple[int, ...]) -> Any:
    for i in path:
        if not isinstance(value, (list, tuple)) or i >= len(value):
            return None
        value = value[i]
    return value


def flat_values(value: Any) -> list[Any]:
    """Every scalar of a nested list, in order."""
    return [v for _, seq in sequences(value) for v in seq]


def label_columns(ctx: RunContext, ds: Any, split: str) -> dict[str, str]:
    """``{column: kind}`` of the task's label fields present in ``ds``; an error naming the
    declared fields and the columns when none is."""
    declared = ctx.task.label_fields_for(ctx.options)
    present = {column: kind for column, kind in declared.items() if column in ds.column_names}
    if not present:
        columns = ", ".join(c for c in ds.column_names if c != ROW_COLUMN)
        raise NlptasksError(
            f"{split}: none of the label fields of task {ctx.task.name!r} ({', '.join(declared) or 'none declared'}) "
            f"is in its preprocessed data (columns: {columns}): nothing would be in the loss",
            hint=f"The {ctx.task.plugin} plugin's step 4 must return its label columns, named in TaskSpec.label_fields.",
        )
    return present


def _class_name(ctx: RunContext, value: Any) -> Any:
    labels = ctx.labels
    if isinstance(value, int) and not isinstance(value, bool) and labels and 0 <= value < len(labels):
        return labels[value]
    if (
        isinstance(value, list)
        and labels
        and len(value) == len(labels)
        and all(isinstance(v, (int, float)) for v in value)
    ):
        return [name for name, v in zip(labels, value, strict=True) if v >= 0.5]  # a multi-hot vector
    return value


def _marks(
    ids: list[int], labels: dict[str, Any], columns: dict[str, str], ctx: RunContext
) -> tuple[list[bool], list[str]]:
    """Per token of one sequence: whether it is in the loss, and what the loss column shows.
    ``labels``: each label column's value for this sequence."""
    in_loss, shown = [False] * len(ids), [""] * len(ids)
    for column, kind in columns.items():
        value = labels.get(column)
        if kind == "token" and isinstance(value, list):
            for pos, (tok, label) in enumerate(zip(ids, value, strict=False)):
                if label != -100:
                    in_loss[pos] = True
                    shown[pos] = str(_class_name(ctx, label)) if label != tok else "yes"
    for column, kind in columns.items():
        for cls, first, last in _spans(labels.get(column)) if kind == "span" else []:
            name = str(_class_name(ctx, cls))
            for pos in range(max(first, 0), min(last, len(ids) - 1) + 1):
                in_loss[pos] = True
                shown[pos] = name if not shown[pos] else f"{shown[pos]},{name}"
    positions = {c: labels.get(c) for c, k in columns.items() if k == "position" and isinstance(labels.get(c), int)}
    if positions:
        low, high = min(positions.values()), max(positions.values())
        for pos in range(max(low, 0), min(high, len(ids) - 1) + 1):
            in_loss[pos] = True
            shown[pos] = shown[pos] or "yes"
        for column, pos in positions.items():
            if 0 <= pos < len(ids):
                shown[pos] = column if shown[pos] in ("", "yes") else f"{shown[pos]},{column}"
    return in_loss, shown


def _spans(value: Any) -> list[tuple[int, int, int]]:
    """The ``(class id, first token, last token)`` triples of a ``span`` label value (others skipped)."""
    found = []
    for item in value if isinstance(value, (list, tuple)) else []:
        if isinstance(item, (list, tuple)) and len(item) == 3 and all(isinstance(v, int) for v in item):
            found.append((int(item[0]), int(item[1]), int(item[2])))
    return found


def _table(
    out: Callable[[str], None],
    tokenizer: Any,
    ids: list[int],
    in_loss: list[bool],
    shown: list[str],
    marked_loss: bool,
    indent: str = "  ",
) -> None:
    pieces = token_pieces(tokenizer, ids) if tokenizer is not None else [str(i) for i in ids]
    marked, inside = [], False
    for piece, flag in zip(pieces, in_loss, strict=True):
        if marked_loss and flag != inside:
            marked.append("«" if flag else "»")
            inside = flag
        marked.append(piece)
    if inside:
        marked.append("»")
    out(f"{indent}text: " + "".join(marked).replace("\n", "⏎"))
    if marked_loss:
        out(f"{indent}«...» marks the tokens in the loss")
    out(f"{indent}{'pos':>4} {'id':>7}  " + ("loss  " if marked_loss else "") + "token")
    for pos, (tok, piece) in enumerate(zip(ids, pieces, strict=True)):
        mark = f"{shown[pos] or '-':<4}  " if marked_loss else ""
        out(f"{indent}{pos:>4} {tok:>7}  {mark}{piece!r}")


def _show_target(out: Callable[[str], None], tokenizer: Any, example: dict[str, Any], column: str) -> None:
    """A target sequence (the decoder's side): each position's label token, beside the decoder's
    input token there when the task gives ``decoder_input_ids``."""
    labels = flat_values(example[column])
    decoder = flat_values(example["decoder_input_ids"]) if "decoder_input_ids" in example else None
    kept = [t for t in labels if t != -100]
    out(f"  {column} (target, the decoder's side): {len(labels)} tokens, {len(kept)} in the loss")
    if tokenizer is not None and kept:
        out("  target text: " + tokenizer.decode(kept, skip_special_tokens=False).replace("\n", "⏎"))
    out(f"  {'pos':>4} {'label':>7}  " + ("decoder input  " if decoder is not None else "") + "label token")
    for pos, tok in enumerate(labels):
        piece = tokenizer.decode([tok]) if tokenizer is not None and tok != -100 else ("-" if tok == -100 else str(tok))
        given = ""
        if decoder is not None:
            d = decoder[pos] if pos < len(decoder) else None
            given = f"{(tokenizer.decode([d]) if tokenizer is not None and d is not None else d)!r:<14} "
        out(f"  {pos:>4} {tok:>7}  {given}{piece!r}")


def show(ctx: RunContext, data: Any, split: str, rows: int, out: Callable[[str], None] = print) -> None:
    """Print the first ``rows`` examples of ``split``, token by token (every sequence of an input
    of any rank; a target sequence on its own)."""
    if split not in data:
        raise NlptasksError(f"no {split!r} split after preprocessing (splits: {', '.join(data)})")
    ds = data[split]
    if "input_ids" not in ds.column_names:
        columns = ", ".join(c for c in ds.column_names if c != ROW_COLUMN)
        raise NlptasksError(
            f"inspect-batch shows examples token by token, and the {ctx.task.name!r} task's preprocessed {split} "
            f"examples have no input_ids (columns: {columns})",
            hint="inspect-batch applies to tasks whose step 4 gives token ids; `nlptasks check RECIPE` still checks the data.",
        )
    columns = label_columns(ctx, ds, split)
    per_token = {c: k for c, k in columns.items() if k in ("token", "position", "span")}
    where = ctx.sources.get(split, split)
    tokenizer = ctx.tokenizer
    numbers = ds[ROW_COLUMN] if ROW_COLUMN in ds.column_names else list(range(1, len(ds) + 1))
    out(f"{split}: {len(ds)} examples from {where}; labels: " + ", ".join(f"{c} ({k})" for c, k in columns.items()))
    for index in range(min(rows, len(ds))):
        example = ds[index]
        parts = list(sequences(example["input_ids"]))
        marks = [
            _marks(
                ids,
                {c: _at(example[c], path) if columns[c] == "token" else example[c] for c in per_token},
                per_token,
                ctx,
            )
            for path, ids in parts
        ]
        total = sum(len(ids) for _, ids in parts)
        head = f"\nexample {index + 1} (row {numbers[index]}): {total} tokens"
        if len(parts) > 1:
            head += f" in {len(parts)} sequences"
        if per_token:
            head += f", {sum(sum(m[0]) for m in marks)} in the loss"
        for column, kind in columns.items():
            if kind == "example":
                head += f", {column} {_class_name(ctx, example[column])!r}"
            elif kind == "position":
                head += f", {column} {example[column]}"
            elif kind == "span":
                head += f", {len(_spans(example[column]))} spans in {column}"
        out(head)
        for (path, ids), (in_loss, shown) in zip(parts, marks, strict=True):
            indent = "  "
            if len(parts) > 1:
                out(f"  sequence {'.'.join(str(i + 1) for i in path)} of {len(parts)}: {len(ids)} tokens")
                indent = "    "
            _table(out, tokenizer, ids, in_loss, shown, bool(per_token), indent)
        for column, kind in columns.items():
            if kind == "target":
                _show_target(out, tokenizer, example, column)
            elif kind == "span" and len(parts) == 1:
                _show_spans(out, ctx, parts[0][1], example[column])


def _show_spans(out: Callable[[str], None], ctx: RunContext, ids: list[int], value: Any) -> None:
    """Each span of an example: its class, its token positions and its text."""
    for cls, first, last in _spans(value):
        inside = 0 <= first <= last < len(ids)
        text = ctx.tokenizer.decode(ids[first : last + 1]) if ctx.tokenizer is not None and inside else "?"
        where = "" if inside else f"  (outside the {len(ids)} tokens)"
        out(f"  span {_class_name(ctx, cls)!r}: tokens {first}..{last} {text!r}{where}")


def loss_problems(ctx: RunContext, data: Any) -> dict[str, dict[str, list[int]]]:
    """Split → problem → file rows of the examples the loss cannot use: a token or target label
    column with no token in the loss, a position outside the example's tokens.  Raises when a split
    has none of the task's label columns."""
    problems: dict[str, dict[str, list[int]]] = {}
    for split, ds in data.items():
        if not len(ds):
            continue
        columns = label_columns(ctx, ds, split)
        numbers = ds[ROW_COLUMN] if ROW_COLUMN in ds.column_names else list(range(1, len(ds) + 1))
        lengths = (
            [max(len(s) for _, s in sequences(ids)) for ids in ds["input_ids"]]
            if "input_ids" in ds.column_names
            else None
        )
        found: dict[str, list[int]] = {}
        for column, kind in columns.items():
            if kind in ("token", "target"):
                bad = [
                    n
                    for n, labels in zip(numbers, ds[column], strict=True)
                    if all(v == -100 for v in flat_values(labels))
                ]
                if bad:
                    found[f"no token in the loss ({column})"] = bad
            elif kind == "position" and lengths is not None:
                bad = [
                    n
                    for n, pos, length in zip(numbers, ds[column], lengths, strict=True)
                    if not isinstance(pos, int) or not 0 <= pos < length
                ]
                if bad:
                    found[f"{column} outside the example's tokens"] = bad
            elif kind == "span" and lengths is not None:
                bad = [
                    n
                    for n, spans, length in zip(numbers, ds[column], lengths, strict=True)
                    if len(_spans(spans)) != len(spans or [])
                    or any(not 0 <= f <= e < length for _, f, e in _spans(spans))
                ]
                if bad:
                    found[f"a span of {column} outside the example's tokens (or not [class, first, last])"] = bad
        if found:
            problems[split] = found
    return problems
