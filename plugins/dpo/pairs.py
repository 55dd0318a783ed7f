"""Step 4 of ``dpo`` and its data doctor: rows → preference pairs → ``prompt_ids``, ``chosen_ids``,
``rejected_ids`` (each answer as the chat template continues the prompt at inference), with the
rows counted or named where they cannot be used."""

from __future__ import annotations

import json
from typing import Any

from nlptasks.plugin import ROW_COLUMN, DataError, Finding, Problem, RecipeError, RunContext, get_tokenizer

from .start import start_manifest

__all__ = ["check_pairs", "tokenize_pair", "tokenize_pairs"]


def _template(ctx: RunContext, tokenizer: Any) -> tuple[Any, list[int], str | None]:
    """The chat template (set on the tokenizer), the stop token ids and the system prompt: those of
    the starting run (or, for ``nlptasks eval``, of the run itself) unless the options name others."""
    from nlptasks_plugins.sft.templates import choose_template, stop_token_ids

    opts = ctx.options
    start = start_manifest(ctx.recipe.model.name_or_path) if ctx.trained_run is None else ctx.trained_manifest
    name, system, stops = opts.template, opts.system, None
    if start is not None:
        system = system if system is not None else start.get("system")
        if name == "auto" and start.get("template"):
            name, stops = start["template"], start.get("stop_tokens")
    template = choose_template(name, tokenizer, scratch=False)
    return template, stop_token_ids(tokenizer, stops or template.stop_tokens), system


def tokenize_pair(tokenizer: Any, prompt: list[dict[str, str]], answers: tuple[str, str]) -> tuple[list[int], ...]:
    """``prompt_ids`` (the prompt as inference renders it, generation prompt included) and each
    answer's ids: what the template adds after the prompt (the answer and its end-of-turn marker)."""
    from nlptasks_plugins.sft.templates import render

    prompt_text = render(tokenizer, prompt, generation_prompt=True)
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    out = [prompt_ids]
    for answer in answers:
        full = render(tokenizer, [*prompt, {"role": "assistant", "content": answer}]).rstrip()
        if not full.startswith(prompt_text):
            raise ValueError(
                "the chat template renders the prompt differently once an answer follows, so the answer's "
                "tokens cannot be told from the prompt's"
            )
        full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        if full_ids[: len(prompt_ids)] == prompt_ids:
            out.append(full_ids[len(prompt_ids) :])
        else:  # a token straddles the boundary: the answer as inference continues the prompt
            out.append(tokenizer(full[len(prompt_text) :], add_special_tokens=False)["input_ids"])
    return tuple(out)


def tokenize_pairs(ctx: RunContext, data: Any) -> Any:
    """Step 4 (see the module docstring)."""
    from datasets import Dataset, DatasetDict

    from .data import RowProblem, detect_shape, to_pair

    opts = ctx.options
    tokenizer = get_tokenizer(ctx)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    template, stops, system = _template(ctx, tokenizer)
    if not stops:
        raise RecipeError(
            "recipe",
            [Problem("options.template", "the tokenizer has no eos token and the template no end-of-turn token")],
        )
    ctx.state["stop_ids"] = stops
    opts = opts.model_copy(update={"system": system})
    max_length = ctx.recipe.model.max_length
    out, pairs = DatasetDict(), {}
    for split, ds in data.items():
        where = ctx.sources.get(split, split)
        try:
            shape = detect_shape(ds.column_names, opts, ds[0] if len(ds) else None)
        except RowProblem as exc:
            raise DataError(
                str(exc), path=where, hint="Name the columns in [options] (see `nlptasks schema`)."
            ) from None
        rows = ds[ROW_COLUMN] if ROW_COLUMN in ds.column_names else list(range(1, len(ds) + 1))
        columns: dict[str, list[Any]] = {"prompt_ids": [], "chosen_ids": [], "rejected_ids": [], ROW_COLUMN: []}
        kept, bad, dropped, cut = [], 0, 0, 0
        for row_number, row in zip(rows, ds, strict=True):
            try:
                prompt, chosen, rejected = to_pair(row, shape, opts)
                prompt_ids, chosen_ids, rejected_ids = tokenize_pair(tokenizer, prompt, (chosen, rejected))
            except (RowProblem, ValueError) as exc:
                if opts.bad_rows == "error":
                    raise DataError(
                        str(exc),
                        path=where,
                        row=row_number,
                        hint="Fix the row, or skip such rows with --set options.bad_rows=skip.",
                    ) from None
                bad += 1
                continue
            room = max_length - len(prompt_ids)
            if room < 1:
                if opts.no_response == "error":
                    raise DataError(
                        f"the prompt alone is {len(prompt_ids)} tokens: model.max_length ({max_length}) leaves no "
                        "room for the answers",
                        path=where,
                        row=row_number,
                        hint="Raise --set model.max_length=N, or drop such pairs with --set options.no_response=drop.",
                    )
                dropped += 1
                continue
            cut += len(chosen_ids) > room or len(rejected_ids) > room
            columns["prompt_ids"].append(prompt_ids)
            columns["chosen_ids"].append(chosen_ids[:room])
            columns["rejected_ids"].append(rejected_ids[:room])
            columns[ROW_COLUMN].append(row_number)
            kept.append((row_number, prompt, chosen, rejected))
        ctx.drop(split, "malformed", bad)
        ctx.drop(split, "prompt fills model.max_length", dropped)
        if not kept:
            raise DataError("no usable preference pairs", path=where)
        if cut:
            ctx.log.info(
                "%s: %d of %d pairs have an answer cut at model.max_length (%d)", split, cut, len(kept), max_length
            )
        out[split] = Dataset.from_dict(columns)
        pairs[split] = kept
        ctx.log.info("%s: %d preference pairs (%s)", split, len(kept), shape)
    ctx.state["pairs"] = pairs
    ctx.manifest["shape"] = shape
    for split in ("test", "validation", "train"):
        if pairs.get(split):
            ctx.manifest["example"] = pairs[split][0][1][-1]["content"]
            break
    ctx.manifest.update(
        template=template.name,
        template_sha256=template.sha256,
        stop_tokens=tokenizer.convert_ids_to_tokens(stops),
        system=system,
        reference=ctx.recipe.model.name_or_path,
    )
    return out


def check_pairs(ctx: RunContext, data: Any) -> list[Any]:
    """The data doctor: malformed pairs (every one, with its reason) and pairs repeated exactly
    (prompt and both answers: a repeated pair weighs twice)."""
    from .data import RowProblem, detect_shape, to_pair

    opts = ctx.options
    findings = []
    for split, ds in data.items():
        try:
            shape = detect_shape(ds.column_names, opts, ds[0] if len(ds) else None)
        except RowProblem as exc:
            findings.append(Finding("error", "columns", f"{exc}; name the columns in [options]", split))
            continue
        rows = ds[ROW_COLUMN] if ROW_COLUMN in ds.column_names else list(range(1, len(ds) + 1))
        reasons: dict[str, list[int]] = {}
        seen: dict[str, int] = {}
        repeated = []
        for row_number, row in zip(rows, ds, strict=True):
            try:
                prompt, chosen, rejected = to_pair(row, shape, opts)
            except RowProblem as exc:
                reasons.setdefault(str(exc), []).append(row_number)
                continue
            key = json.dumps([prompt, chosen, rejected], ensure_ascii=False)
            if key in seen:
                repeated.append(row_number)
            seen.setdefault(key, row_number)
        for reason, bad in reasons.items():
            findings.append(
                Finding(
                    "error",
                    "malformed-pair",
                    f"{len(bad)} pair(s): {reason} (fix them, or skip them: --set options.bad_rows=skip)",
                    split,
                    bad,
                )
            )
        if repeated:
            findings.append(
                Finding(
                    "warning",
                    "repeated-pair",
                    f"{len(repeated)} pair(s) repeat an earlier one exactly",
                    split,
                    repeated,
                )
            )
    return findings
