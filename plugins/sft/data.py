"""Rows → conversations: the alpaca shape and the chat shape, with errors that name the row.

* alpaca: ``{"instruction": ..., "input": ..., "output": ...}`` (``input`` optional) becomes
  ``[user: instruction + "\\n\\n" + input, assistant: output]``;
* chat: ``{"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}``: at least
  one user and one assistant turn, the last turn from the assistant, an optional system turn
  first.

``options.system`` adds a system turn to conversations that have none (and to prompts at
inference time: it is stored in the run).
"""

from __future__ import annotations

from typing import Any

from nlptasks.plugin import data_columns

ROLES = ("system", "user", "assistant")


class RowProblem(ValueError):
    """A row that is not a usable conversation; the message says why (the caller adds file/row)."""


def detect_shape(columns: list[str], opts: Any) -> str:
    """``alpaca``, ``chat``, or ``mixed`` (both kinds of columns: each row by what it has)."""
    if opts.shape != "auto":
        return opts.shape
    chat = opts.messages_column in columns
    alpaca = opts.instruction_column in columns
    if chat and alpaca:
        return "mixed"
    if chat:
        return "chat"
    if alpaca and opts.output_column in columns:
        return "alpaca"
    raise RowProblem(
        f"neither a {opts.messages_column!r} column (chat shape) nor {opts.instruction_column!r} and "
        f"{opts.output_column!r} columns (alpaca shape); the columns are: {', '.join(data_columns(columns))}"
    )


def text(value: Any, what: str) -> str:
    """A field's text: a string, or a number written as text; ``""`` for a missing one.  A list,
    an object or a boolean is a :class:`RowProblem` (its ``str()`` would be trained on)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    kind = {dict: "an object", list: "a list", bool: "a boolean"}.get(type(value), type(value).__name__)
    raise RowProblem(f"{what} must be text, got {kind}")


def prompt_text(instruction: Any, extra: Any, names: tuple[str, str] = ("instruction", "input")) -> str:
    instruction = text(instruction, repr(names[0])).strip()
    extra = text(extra, repr(names[1])).strip()
    return f"{instruction}\n\n{extra}" if extra else instruction


def to_messages(row: dict[str, Any], shape: str, opts: Any, need_answer: bool = True) -> list[dict[str, str]]:
    """One row as a list of ``{"role", "content"}`` turns (with ``options.system`` added)."""
    if shape == "mixed":
        shape = "chat" if row.get(opts.messages_column) is not None else "alpaca"
    if shape == "alpaca":
        instruction = text(row.get(opts.instruction_column), repr(opts.instruction_column))
        if not instruction.strip():
            raise RowProblem(f"empty {opts.instruction_column!r}")
        names = (opts.instruction_column, opts.input_column)
        messages = [{"role": "user", "content": prompt_text(instruction, row.get(opts.input_column), names)}]
        if need_answer:
            output = text(row.get(opts.output_column), repr(opts.output_column)).strip()
            if not output:
                raise RowProblem(f"empty {opts.output_column!r} (nothing to learn from)")
            messages.append({"role": "assistant", "content": output})
    else:
        raw = row.get(opts.messages_column)
        if not isinstance(raw, list) or not raw:
            raise RowProblem(f"{opts.messages_column!r} must be a non-empty list of {{role, content}} turns")
        messages = []
        for i, turn in enumerate(raw, 1):
            if not isinstance(turn, dict) or "role" not in turn or "content" not in turn:
                raise RowProblem(f"turn {i} must be an object with 'role' and 'content'")
            role = text(turn["role"], f"turn {i}: 'role'").strip().lower()
            if role not in ROLES:
                raise RowProblem(f"turn {i}: unknown role {turn['role']!r} (allowed: {', '.join(ROLES)})")
            if role == "system" and i != 1:
                raise RowProblem(f"turn {i}: a system turn may only come first")
            content = text(turn["content"], f"turn {i} ({role}): 'content'")
            if not content.strip():
                raise RowProblem(f"turn {i} ({role}) has empty content")
            messages.append({"role": role, "content": content})
        roles = [m["role"] for m in messages]
        if "user" not in roles:
            raise RowProblem("no user turn")
        if need_answer:
            if roles[-1] != "assistant":
                raise RowProblem("the last turn must be the assistant's (the response to learn)")
        elif roles[-1] == "assistant":
            messages = messages[:-1]  # at inference the final answer is what we generate
    if opts.system and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": opts.system})
    return messages


def reference(row: dict[str, Any], shape: str, opts: Any) -> str | None:
    """The final assistant answer of a row (for generation metrics), if it has one."""
    if shape == "mixed":
        shape = "chat" if row.get(opts.messages_column) is not None else "alpaca"
    if shape == "alpaca":
        value = row.get(opts.output_column)
        return None if value is None else str(value).strip()
    turns = row.get(opts.messages_column) or []
    if turns and isinstance(turns[-1], dict) and str(turns[-1].get("role", "")).lower() == "assistant":
        return str(turns[-1].get("content", "")).strip()
    return None
