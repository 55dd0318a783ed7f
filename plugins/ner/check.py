"""The data doctor for ``ner`` (``nlptasks check``): tags, entity types, sentences, windows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nlptasks.plugin import (
    Finding,
    RunContext,
    balance,
    blank_texts,
    duplicates,
    get_tokenizer,
    label_sets,
    row_numbers,
    split_overlap,
    truncation,
)

from .data import PREFIXES, class_label_names, repair_sentence, split_tag


def entities(tags: list[str]) -> Iterator[str]:
    """The type of each entity in a sentence (a new one starts at B/S, after E/S, or on a type change)."""
    prev_prefix, prev_type = "O", None
    for tag in tags:
        prefix, kind = split_tag(tag)
        if kind is not None and (prefix in ("B", "S") or kind != prev_type or prev_prefix in ("E", "S", "O")):
            yield kind
        prev_prefix, prev_type = prefix, kind


def check(ctx: RunContext, data: Any) -> list[Finding]:
    opts = ctx.options
    findings: list[Finding] = []
    tags_of: dict[str, list[list[str]]] = {}
    for split, ds in data.items():
        missing = [c for c in (opts.tokens_column, opts.tags_column) if c not in ds.column_names]
        if missing:
            findings.append(
                Finding(
                    "error",
                    "columns",
                    f"no column {missing[0]!r} (name the right one in options.tokens_column / options.tags_column)",
                    split,
                )
            )
            continue
        names = class_label_names(ds, opts.tags_column)
        tags_of[split] = [
            [names[t] if names and isinstance(t, int) else str(t) for t in row or []] for row in ds[opts.tags_column]
        ]
    if findings:
        return findings

    allowed = "/".join(PREFIXES[opts.scheme])
    for split, ds in data.items():
        rows = row_numbers(ds)
        bad_tag, invalid = [], []
        for number, tags in zip(rows, tags_of[split], strict=True):
            if any(split_tag(t.strip())[0] not in ("O", *PREFIXES[opts.scheme]) for t in tags):
                bad_tag.append(number)
            elif repair_sentence([t.strip() for t in tags], opts.scheme)[1] is not None:
                invalid.append(number)
        if bad_tag:
            findings.append(
                Finding(
                    "error",
                    "bad-tags",
                    f"{len(bad_tag)} sentence(s) have tags outside the "
                    f"{opts.scheme} scheme (O or {allowed}-TYPE); set options.scheme to your "
                    "data's scheme or fix the tags",
                    split,
                    bad_tag,
                )
            )
        if invalid:
            if opts.invalid_transition == "error":
                level, what = "error", "a run stops on them (or repairs them with options.invalid_transition=repair)"
            else:
                level, what = "warning", "a run repairs them (I-X → B-X), as options.invalid_transition says"
            findings.append(
                Finding(
                    level,
                    "invalid-transitions",
                    f"{len(invalid)} sentence(s) have a tag that "
                    f"does not continue an entity (e.g. I-X after O); {what}",
                    split,
                    invalid,
                )
            )

    per_row_types = {split: [list(entities([t.strip() for t in tags])) for tags in tags_of[split]] for split in data}
    typed = {split: _with_types(ds, per_row_types[split]) for split, ds in data.items()}
    known = None
    if opts.labels is not None:
        known = {split_tag(t)[1] for t in opts.labels} - {None}
    findings += label_sets(
        ctx,
        typed,
        lambda row: row["__types__"],
        known=known,
        known_from="options.labels" if known is not None else "train",
        hint="; a run stops on such tags (fix them, or list every tag in options.labels)",
    )
    findings += balance(ctx, typed, lambda row: row["__types__"], what="entities")
    findings += blank_texts(ctx, data, [opts.tokens_column])
    words = lambda row: tuple(row[opts.tokens_column] or ())  # noqa: E731
    findings += duplicates(
        ctx, data, words, label=lambda row: tuple(map(str, row[opts.tags_column] or ())), what="sentence"
    )
    findings += split_overlap(ctx, data, words, what="sentence")
    findings += _truncation(ctx, data, tags_of)
    return findings


def _with_types(ds: Any, types: list[list[str]]) -> Any:
    return ds.add_column("__types__", types)


def _truncation(ctx: RunContext, data: Any, tags_of: dict[str, list[list[str]]]) -> list[Finding]:
    from .align import plan_windows, word_counts

    opts = ctx.options
    train = [list(map(str, t)) for t in data["train"][opts.tokens_column] if t] if "train" in data else []
    tokenizer = get_tokenizer(ctx, corpus=(" ".join(t) for t in train))
    max_length = ctx.recipe.model.max_length
    budget = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    out = []
    for split, ds in data.items():
        sentences = [list(map(str, t or [])) for t in ds[opts.tokens_column]]
        keep = [i for i, s in enumerate(sentences) if s]
        _, counts = word_counts(tokenizer, [sentences[i] for i in keep]) if keep else ([], [])
        rows = row_numbers(ds)
        long_rows, gold, lost = [], 0, 0
        for i, c in zip(keep, counts, strict=True):
            tags = tags_of[split][i]
            gold += sum(t != "O" for t in tags)
            if sum(c) > budget:
                long_rows.append(rows[i])
                if opts.overflow == "truncate":
                    end = plan_windows(c, budget, opts.stride, "truncate")[0][1]
                    lost += sum(t != "O" for t in tags[end:])
        consequence = (
            f"cut into windows overlapping by options.stride = {opts.stride} words: every word is trained and scored"
            if opts.overflow == "window"
            else "options.overflow = 'truncate' drops their words past the cut from training and scoring"
        )
        out.append(
            truncation(
                split,
                long_rows,
                len(ds),
                gold=gold,
                gold_cut=lost,
                max_length=max_length,
                consequence=consequence,
                what="sentence(s)",
            )
        )
    return out
