"""Which PEFT methods work for which kind of model: the table behind recipe validation and
docs/peft.md.

Rows are peft's task types (a task declares its own with ``TaskSpec.peft_task_type``); a method
missing from :data:`UNSUPPORTED` for a task type works for it.  ``tests/test_peft.py`` trains
every built-in task with every method and checks the outcome against this table, so the table
(and the page generated from it) cannot drift from what actually runs.

No heavy imports here: recipe validation reads this module.
"""

from __future__ import annotations

METHODS = ("lora", "prefix", "p_tuning", "prompt", "ia3")
"""The values of ``peft.method``."""

MERGEABLE = ("lora", "ia3")
"""Methods whose adapter ``nlptasks export --merge`` folds into the base weights."""

TASK_TYPES = {
    "SEQ_CLS": "one label (or score) per sequence",
    "TOKEN_CLS": "one label per token",
    "FEATURE_EXTRACTION": "hidden states (embeddings), no head",
    "CAUSAL_LM": "next-token prediction",
}
"""The peft task types a ``TaskSpec.peft_task_type`` may name, with what their models output."""

_PROMPT_IN_SEQUENCE = (
    "peft prepends its virtual tokens to the sequence, so the token-classification model returns "
    "logits for them too and the loss cannot align them with the word labels (peft 0.21)"
)

UNSUPPORTED: dict[tuple[str, str], str] = {
    ("TOKEN_CLS", "p_tuning"): _PROMPT_IN_SEQUENCE,
    ("TOKEN_CLS", "prompt"): _PROMPT_IN_SEQUENCE,
}
"""``(task type, method)`` → why it does not work."""


def unsupported_reason(task_type: str, method: str) -> str | None:
    """Why ``method`` does not work for ``task_type``, or ``None`` when it does."""
    return UNSUPPORTED.get((task_type, method))
