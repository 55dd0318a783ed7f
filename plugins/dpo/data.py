"""Rows → preference pairs ``(prompt turns, chosen answer, rejected answer)``, with errors that
name the row.  Three shapes (``options.shape``, or ``auto`` by the columns present):

* ``conversational`` (TRL's): ``prompt`` a list of ``{role, content}`` turns ending with a user
  turn; ``chosen`` and ``rejected`` one assistant message each, as a list of one turn or a turn;
* ``text``: ``prompt``, ``chosen`` and ``rejected`` are plain strings (the prompt becomes one user
  turn; the chat template still frames it, as at inference);
* ``sharegpt`` (LLaMA-Factory's): ``conversations`` a list of ``{from, value}`` turns (``human``,
  ``gpt``, ``system``), ``chosen`` and ``rejected`` one ``{from: "gpt", value}`` each.

``options.system`` adds a system turn to prompts without one (stored; used at inference too).
"""

from __future__ import annotations

from typing import Any

from nlptasks.plugin import data_columns

__all__ = ["SHAPES", "Pair", "RowProblem", "detect_shape", "to_pair"]

SHAPES = ("conversational", "text", "sharegpt")
ROLES = ("system", "user", "assistant")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}

Pair = tuple[list[dict[str, str]], str, str]


class RowProblem(ValueError):
    """A row that is not a usable preference pair; the message says why (the caller adds file/row)."""


def detect_shape(columns: list[str], opts: Any, first: dict[str, Any] | None = None) -> str:
    """The shape of a split: ``options.shape``, else ``sharegpt`` with a conversations column,
    else ``conversational`` or ``text`` by the first row's prompt (a list of turns, or a string)."""
    if opts.shape != "auto":
        return str(opts.shape)
    need = [opts.chosen_column, opts.rejected_column]
    if opts.conversations_column in columns and all(c in columns for c in need):
        return "sharegpt"
    missing = [c for c in (opts.prompt_column, *need) if c not in columns]
    if missing:
        raise RowProblem(
            f"no {', '.join(repr(c) for c in missing)} column; a preference pair needs {opts.prompt_column!r}, "
            f"{opts.chosen_column!r} and {opts.rejected_column!r} (or {opts.conversations_column!r} with "
            f"{opts.chosen_column!r} and {opts.rejected_column!r}, ShareGPT); the columns are: {', '.join(data_columns(columns))}"
        )
    prompt = (first or {}).get(opts.prompt_column)
    return "conversational" if isinstance(prompt, list) else "text"


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    kind = {dict: "an object", list: "a list", bool: "a boolean", type(None): "missing"}.get(
        type(value), type(value).__name__
    )
    raise RowProblem(f"{what} must be text, got {kind}")


def _turns(raw: Any, what: str, role_key: str, content_key: str, roles: dict[str, str]) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise RowProblem(f"{what} must be a non-empty list of {{{role_key}, {content_key}}} turns")
    turns = []
    for i, turn in enumerate(raw, 1):
        if not isinstance(turn, dict) or role_key not in turn or content_key not in turn:
            raise RowProblem(f"{what}: turn {i} must be an object with {role_key!r} and {content_key!r}")
        name = _text(turn[role_key], f"{what}: turn {i}: {role_key!r}").strip().lower()
        if name not in roles:
            raise RowProblem(f"{what}: turn {i}: unknown role {turn[role_key]!r} (allowed: {', '.join(roles)})")
        role = roles[name]
        if role == "system" and i != 1:
            raise RowProblem(f"{what}: turn {i}: a system turn may only come first")
        content = _text(turn[content_key], f"{what}: turn {i} ({role}): {content_key!r}")
        if not content.strip():
            raise RowProblem(f"{what}: turn {i} ({role}) has empty content")
        turns.append({"role": role, "content": content})
    return turns


def _answer(raw: Any, column: str, shape: str) -> str:
    """One assistant answer: a string (text shape), or one assistant turn (alone or in a list)."""
    if shape == "text":
        answer = _text(raw, repr(column))
    else:
        role_key, content_key = ("from", "value") if shape == "sharegpt" else ("role", "content")
        roles = SHAREGPT_ROLES if shape == "sharegpt" else {r: r for r in ROLES}
        turns = _turns([raw] if isinstance(raw, dict) else raw, repr(column), role_key, content_key, roles)
        if len(turns) != 1 or turns[0]["role"] != "assistant":
            raise RowProblem(f"{column!r} must be one assistant turn (got {', '.join(t['role'] for t in turns)})")
        answer = turns[0]["content"]
    if not answer.strip():
        raise RowProblem(f"empty {column!r} answer")
    return answer.strip()


def to_pair(row: dict[str, Any], shape: str, opts: Any) -> Pair:
    """One row as ``(prompt turns, chosen, rejected)``, with ``options.system`` added."""
    if shape == "text":
        prompt_text = _text(row.get(opts.prompt_column), repr(opts.prompt_column))
        if not prompt_text.strip():
            raise RowProblem(f"empty {opts.prompt_column!r}")
        prompt = [{"role": "user", "content": prompt_text}]
    elif shape == "sharegpt":
        prompt = _turns(
            row.get(opts.conversations_column), repr(opts.conversations_column), "from", "value", SHAREGPT_ROLES
        )
    else:
        prompt = _turns(row.get(opts.prompt_column), repr(opts.prompt_column), "role", "content", {r: r for r in ROLES})
    if prompt[-1]["role"] != "user":
        raise RowProblem("the prompt must end with a user turn (the answers reply to it)")
    chosen = _answer(row.get(opts.chosen_column), opts.chosen_column, shape)
    rejected = _answer(row.get(opts.rejected_column), opts.rejected_column, shape)
    if chosen == rejected:
        raise RowProblem(f"{opts.chosen_column!r} and {opts.rejected_column!r} are the same answer (nothing to prefer)")
    if opts.system and prompt[0]["role"] != "system":
        prompt.insert(0, {"role": "system", "content": opts.system})
    return prompt, chosen, rejected
