"""Chat templates, and the loss mask computed from character offsets of the formatted parts.

A template is a Jinja chat template (the format ``tokenizer.apply_chat_template`` uses), so the
one chosen for training is set on the tokenizer, saved with it (``chat_template.jinja``) and used
again by ``nlptasks infer`` *and* by plain ``transformers`` — a model is never prompted in a
format it was not trained on (the classic cause of endless repetition).

Built-ins, for tokenizers without a template of their own:

``chatml``  ``<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n...<|im_end|>``; the
            default for from-scratch models (their vocabulary has the two markers).
``alpaca``  ``### Instruction:\\n...\\n\\n### Response:\\n...</s>``, the Stanford Alpaca layout.

The supervised part of an example is found by rendering growing prefixes of the conversation:
the text that assistant turn *i* adds is ``render(messages[:i+1])`` minus
``render(messages[:i], add_generation_prompt=True)``.  Those character spans, and the token
offsets of the rendered text, say which tokens are in the loss; nothing searches token ids for a
response marker (that breaks when tokenization depends on context).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from nlptasks.plugin import NlptasksError

CHATML = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

ALPACA = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{ message['content'] + '\\n\\n' }}"
    "{%- elif message['role'] == 'user' -%}{{ '### Instruction:\\n' + message['content'] + '\\n\\n' }}"
    "{%- elif message['role'] == 'assistant' -%}{{ '### Response:\\n' + message['content'] + eos_token + '\\n\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '### Response:\\n' }}{%- endif -%}"
)

BUILTIN = {"chatml": CHATML, "alpaca": ALPACA}
# Tokens that end an assistant turn, besides the tokenizer's eos token.
STOP_TOKENS = {"chatml": ["<|im_end|>"], "alpaca": []}


@dataclass(frozen=True)
class Template:
    name: str  # "chatml", "alpaca", or "tokenizer" (the tokenizer's own)
    text: str  # the Jinja source
    stop_tokens: tuple[str, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16]


def choose_template(name: str, tokenizer: Any, scratch: bool) -> Template:
    """Resolve ``options.template`` and set it on the tokenizer (so it is saved with it).

    ``auto``: the tokenizer's own chat template when it has one, else ``chatml`` for from-scratch
    models and ``alpaca`` for pretrained ones.
    """
    own = getattr(tokenizer, "chat_template", None)
    if name == "auto":
        name = "tokenizer" if own else ("chatml" if scratch else "alpaca")
    if name == "tokenizer":
        if not own:
            raise NlptasksError(
                "options.template: the tokenizer has no chat template of its own",
                hint="Pick a built-in one: --set options.template=alpaca (or chatml).",
            )
        text, stops = own, ()
    else:
        text, stops = BUILTIN[name], tuple(STOP_TOKENS[name])
        missing = [t for t in stops if t not in tokenizer.get_vocab()]
        if missing:
            tokenizer.add_special_tokens({"additional_special_tokens": missing})
    tokenizer.chat_template = text
    return Template(name=name, text=text, stop_tokens=stops)


def stop_token_ids(tokenizer: Any, stop_tokens: list[str] | tuple[str, ...]) -> list[int]:
    """The eos token and the template's end-of-turn tokens, as ids (generation stops at any)."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    vocab = tokenizer.get_vocab()
    ids += [vocab[t] for t in stop_tokens if t in vocab and vocab[t] not in ids]
    return ids


def render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def supervised_spans(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its assistant turns.

    Each span covers what the assistant turn adds to the text (its content and the template's
    end-of-turn marker), without trailing whitespace.  Raises ``ValueError`` when the template is
    not prefix-stable (rendering more turns rewrites earlier text), since then no offset-based
    mask is possible.
    """
    full = render(tokenizer, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(tokenizer, messages[:i], generation_prompt=True) if i else ""
        through = render(tokenizer, messages[: i + 1])
        if not through.startswith(before) or not full.startswith(through):
            raise ValueError(
                "the chat template is not prefix-stable (rendering a later turn changes earlier text), "
                "so the response tokens cannot be located by offsets"
            )
        end = len(through.rstrip())
        if end > len(before):
            spans.append((len(before), end))
    return full, spans


def loss_labels(input_ids: list[int], offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """Labels for a causal LM: the token id where the token *starts* inside a supervised span,
    else -100."""
    labels = []
    for tok, (start, end) in zip(input_ids, offsets, strict=True):
        inside = end > start and any(s <= start < e for s, e in spans)
        labels.append(tok if inside else -100)
    return labels


def recipe_problems(recipe: Any, options: Any) -> list[tuple[str, str]]:
    """``options.template = "tokenizer"`` with a ``[model.scratch]`` model: a vocabulary built from
    the data has no chat template of its own."""
    if options.template == "tokenizer" and recipe.model.scratch is not None:
        return [
            (
                "options.template",
                "'tokenizer' (the tokenizer's own chat template), but a from-scratch tokenizer "
                f"({recipe.model.scratch.tokenizer!r}, built from the data) has none: use one of 'auto', 'chatml', "
                "'alpaca' (--set options.template=chatml)",
            )
        ]
    return []
