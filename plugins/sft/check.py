"""The data doctor for ``sft`` (``nlptasks check``): rows, prompts, and what max_length cuts."""

from __future__ import annotations

import json
from typing import Any

from nlptasks.plugin import Finding, RunContext, duplicates, row_numbers, split_overlap, truncation

from .data import RowProblem, detect_shape, to_messages


def check(ctx: RunContext, data: Any) -> list[Finding]:
    from . import tokenizer_and_template
    from .templates import loss_labels, supervised_spans

    opts = ctx.options
    findings: list[Finding] = []
    conversations: dict[str, list[tuple[int, list[dict[str, str]]]]] = {}
    for split, ds in data.items():
        try:
            shape = detect_shape(ds.column_names, opts)
        except RowProblem as exc:
            findings.append(Finding("error", "columns", f"{exc} (name the columns in [options])", split))
            continue
        kept, bad = [], {}
        for number, row in zip(row_numbers(ds), ds, strict=True):
            try:
                kept.append((number, to_messages(row, shape, opts)))
            except RowProblem as exc:
                bad.setdefault(str(exc), []).append(number)
        for problem, rows in bad.items():
            consequence = (
                "a run stops on them" if opts.bad_rows == "error" else "a run skips them (options.bad_rows = 'skip')"
            )
            level = "error" if opts.bad_rows == "error" else "warning"
            findings.append(Finding(level, "malformed", f"{len(rows)} row(s): {problem}; {consequence}", split, rows))
        conversations[split] = kept
    if findings and not conversations.get("train"):
        return findings

    def prompt(messages: list[dict[str, str]]) -> str:
        return json.dumps([[m["role"], " ".join(m["content"].split())] for m in messages[:-1]], ensure_ascii=False)

    as_rows = {split: _Rows(conv) for split, conv in conversations.items()}
    findings += duplicates(
        ctx,
        as_rows,
        lambda r: prompt(r["messages"]),
        label=lambda r: " ".join(r["messages"][-1]["content"].split()),
        what="prompt",
    )
    findings += split_overlap(ctx, as_rows, lambda r: prompt(r["messages"]), what="prompt")

    tokenizer, _, _ = tokenizer_and_template(ctx, conversations.get("train", []))
    max_length = ctx.recipe.model.max_length
    for split, items in conversations.items():
        long_rows, cut_away, gold, lost = [], [], 0, 0
        for number, messages in items:
            try:
                text, spans = supervised_spans(tokenizer, messages)
            except ValueError as exc:
                findings.append(
                    Finding(
                        "error",
                        "template",
                        f"{exc} (use a built-in template: options.template = 'chatml')",
                        split,
                        [number],
                    )
                )
                break
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            labels = loss_labels(enc["input_ids"], enc["offset_mapping"], spans)
            in_loss = [i for i, v in enumerate(labels) if v != -100]
            gold += len(in_loss)
            if len(enc["input_ids"]) > max_length:
                long_rows.append(number)
                beyond = sum(1 for i in in_loss if i >= max_length)
                lost += beyond
                if in_loss and beyond == len(in_loss):
                    cut_away.append(number)
        findings.append(
            truncation(
                split,
                long_rows,
                len(items),
                gold=gold,
                gold_cut=lost,
                max_length=max_length,
                what="example(s)",
                consequence="their responses are cut; raise model.max_length",
            )
        )
        findings[-1].message = findings[-1].message.replace("gold labels", "response tokens")
        if cut_away:
            if opts.no_response == "error":
                level, what = "error", "a run stops on them (or drops them with options.no_response = 'drop')"
            else:
                level, what = "warning", "a run drops them (options.no_response = 'drop')"
            findings.append(
                Finding(
                    level,
                    "response-cut-away",
                    f"{len(cut_away)} example(s) lose their whole "
                    f"response to model.max_length = {max_length}: the prompt fills it; {what}",
                    split,
                    cut_away,
                )
            )
    return findings


class _Rows:
    """A split's conversations where the doctor's helpers expect a dataset."""

    def __init__(self, items: list[tuple[int, list[dict[str, str]]]]) -> None:
        self.items = items
        self.column_names = ["__row__", "messages"]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):  # noqa: ANN204
        return ({"messages": m} for _, m in self.items)

    def __getitem__(self, column: str) -> list[Any]:
        assert column == "__row__"
        return [n for n, _ in self.items]
