"""The requests of the OpenAI-compatible routes (:mod:`nlptasks.serve.openai`), read and checked:
``POST /v1/chat/completions`` and ``POST /v1/completions`` bodies become a :class:`ChatRequest`;
an error names its field, in the server's error shape (:mod:`nlptasks.serve.errors`), which
OpenAI's clients read.  Fields nlptasks cannot honour are refused, never silently changed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from nlptasks.serve.errors import ApiError

__all__ = ["MAX_NEW_TOKENS", "ROLES", "ChatRequest", "parse_chat", "parse_completion"]


MAX_NEW_TOKENS = 4096
"""The most tokens one request may ask to generate (``max_tokens``)."""

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
"""OpenAI's message roles we take, and the role each becomes (``developer`` is a system turn)."""

_REFUSED = {  # fields we cannot honour: a request that sets them is refused, not silently changed
    "tools": "tools are not supported (the model has none)",
    "tool_choice": "tools are not supported (the model has none)",
    "functions": "function calling is not supported",
    "function_call": "function calling is not supported",
    "logprobs": "logprobs are not supported",
    "top_logprobs": "logprobs are not supported",
    "logit_bias": "logit_bias is not supported",
    "echo": "echo is not supported",
    "suffix": "suffix is not supported",
    "audio": "audio output is not supported",
}


@dataclass
class ChatRequest:
    """A checked request of either endpoint: the conversation and the generation settings."""

    kind: str  # "chat" or "completion"
    model: str
    messages: list[dict[str, str]]
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    seed: int | None = None  # sampling with it gives the same reply every time (greedy needs none)

    @property
    def conversation_field(self) -> str:
        """The field that holds the conversation (named by errors the predictor raises)."""
        return "messages" if self.kind == "chat" else "prompt"


# -- reading requests --------------------------------------------------------------------------


def _common(body: dict[str, Any], kind: str, messages: list[dict[str, str]]) -> ChatRequest:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model: required, the name of a served model (GET /v1/models lists them)", "model")
    for name, why in _REFUSED.items():
        value = body.get(name)
        if value not in (None, False, 0, [], {}):
            raise ApiError(400, f"{name}: {why}", name)
    for name in ("frequency_penalty", "presence_penalty"):
        if _number(body, name, -2.0, 2.0) not in (None, 0):
            raise ApiError(400, f"{name}: not supported (only 0)", name)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise ApiError(400, 'response_format: only {"type": "text"} is supported', "response_format")
    for name in ("n", "best_of"):
        n = _number(body, name, 1, 128, integer=True)
        if n not in (None, 1):
            raise ApiError(400, f"{name}: only {name}=1 is supported (got {n})", name)
    tokens = _number(body, "max_completion_tokens", 1, MAX_NEW_TOKENS, integer=True)
    if tokens is None:
        tokens = _number(body, "max_tokens", 1, MAX_NEW_TOKENS, integer=True)
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ApiError(400, "stream: must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "stream_options: must be an object", "stream_options")
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p is not None and top_p <= 0:
        raise ApiError(400, "top_p: must be greater than 0 and at most 1", "top_p")
    return ChatRequest(
        kind=kind,
        model=model,
        messages=messages,
        max_new_tokens=tokens,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=top_p,
        stop=_stop(body.get("stop")),
        stream=stream,
        include_usage=bool(options and options.get("include_usage")),
        seed=_number(body, "seed", -(2**63), 2**64 - 1, integer=True),
    )


def parse_chat(body: Any) -> ChatRequest:
    """A ``/v1/chat/completions`` body, checked (:class:`~nlptasks.serve.errors.ApiError` naming the field if not)."""
    body = _object(body)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "messages: required, a non-empty list of {role, content} objects", "messages")
    messages = []
    for i, turn in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(turn, dict):
            raise ApiError(400, f"{where}: must be an object with role and content", "messages")
        role = turn.get("role")
        if role not in ROLES:
            raise ApiError(400, f"{where}.role: {role!r} is not supported (use one of: {', '.join(ROLES)})", "messages")
        messages.append({"role": ROLES[role], "content": _content(turn.get("content"), f"{where}.content")})
    return _common(body, "chat", messages)


def parse_completion(body: Any) -> ChatRequest:
    """A ``/v1/completions`` body: its ``prompt`` becomes one user message."""
    body = _object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(
            400, "prompt: required, one string (a list of prompts or of token ids is not supported)", "prompt"
        )
    if not prompt.strip():
        raise ApiError(400, "prompt: empty", "prompt")
    return _common(body, "completion", [{"role": "user", "content": prompt}])


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "request body: must be a JSON object", "body")
    return body


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(
                    400, f'{where}[{j}]: only {{"type": "text", "text": ...}} parts are supported', "messages"
                )
            parts.append(part["text"])
        return "".join(parts)
    raise ApiError(400, f"{where}: must be a string or a list of text parts", "messages")


def _number(body: dict[str, Any], name: str, low: float, high: float, integer: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        return None
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise ApiError(400, f"{name}: must be {kind} (got {json.dumps(value)})", name)
    if not low <= value <= high:
        raise ApiError(400, f"{name}: must be {kind} from {low:g} to {high:g} (got {value})", name)
    return value


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > 4:
        raise ApiError(400, "stop: must be a string or a list of at most 4 strings", "stop")
    return [s for s in stops if s]


# -- generating ----------------------------------------------------------------------------------
