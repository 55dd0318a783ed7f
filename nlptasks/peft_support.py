"""Which PEFT methods work for which kind of model: the table behind recipe validation and
docs/peft.md.

Rows are peft's task types (a task declares its own with ``TaskSpec.peft_task_type``, and may
refuse more methods with ``TaskSpec.peft_unsupported``); a method that :func:`unsupported_reason`
does not refuse for a task type works for it.  ``tests/test_peft.py`` trains every built-in task
and the question-answering tutorial plugin with every method and checks the outcome against this
table, so the table (and the page generated from it) cannot drift from what actually runs.

No heavy imports at module level: recipe validation reads this module.  Only the prefix check
imports transformers, when asked about prefix tuning.
"""

from __future__ import annotations

import functools

__all__ = [
    "ENCODER_HEADS",
    "MERGEABLE",
    "METHODS",
    "VIRTUAL_TOKEN_METHODS",
    "TASK_TYPES",
    "UNSUPPORTED",
    "encoder_prefix_problem",
    "unsupported_reason",
]

METHODS = ("lora", "prefix", "p_tuning", "prompt", "ia3")
"""The values of ``peft.method``."""

VIRTUAL_TOKEN_METHODS = ("prefix", "p_tuning", "prompt")
"""The methods that add virtual tokens (prompt, p_tuning) or a key/value prefix (prefix) to every
example: what examples packed into one row would share."""

MERGEABLE = ("lora", "ia3")
"""Methods whose adapter ``nlptasks export --merge`` folds into the base weights."""

TASK_TYPES = {
    "SEQ_CLS": "one label (or score) per sequence",
    "TOKEN_CLS": "one label per token",
    "QUESTION_ANS": "an answer span: start and end logits per token",
    "FEATURE_EXTRACTION": "hidden states (embeddings), no head",
    "CAUSAL_LM": "next-token prediction",
}
"""The peft task types a ``TaskSpec.peft_task_type`` may name, with what their models output."""

_PROMPT_IN_SEQUENCE = (
    "peft prepends its virtual tokens to the sequence, so the model returns outputs for them too and "
    "the per-token labels or answer positions no longer line up with the tokens (peft 0.21)"
)

UNSUPPORTED: dict[tuple[str, str], str] = {
    ("TOKEN_CLS", "p_tuning"): _PROMPT_IN_SEQUENCE,
    ("TOKEN_CLS", "prompt"): _PROMPT_IN_SEQUENCE,
    ("QUESTION_ANS", "p_tuning"): _PROMPT_IN_SEQUENCE,
    ("QUESTION_ANS", "prompt"): _PROMPT_IN_SEQUENCE,
}
"""``(task type, method)`` → why it does not work, whatever the versions installed."""

ENCODER_HEADS = ("SEQ_CLS", "TOKEN_CLS", "QUESTION_ANS")
"""Task types whose prefix tuning peft hands to the encoder as ``past_key_values``."""


@functools.lru_cache(maxsize=1)
def encoder_prefix_problem() -> str | None:
    """Why prefix tuning cannot train an encoder head with the transformers installed here, or
    ``None`` when it can.

    peft hands the trained prefixes to the encoder as ``past_key_values``; transformers 5.24 renamed
    that argument of its encoders (BERT, RoBERTa, ELECTRA...) to ``cache``, so peft 0.21's prefixes
    would be refused or silently dropped.  BERT's signature stands for the family.
    """
    import inspect

    import transformers

    if "past_key_values" in inspect.signature(transformers.BertModel.forward).parameters:
        return None
    return (
        f"peft passes the prefix as past_key_values, which the encoders of transformers "
        f"{transformers.__version__} no longer take (they call it 'cache')"
    )


def unsupported_reason(task_type: str, method: str) -> str | None:
    """Why ``method`` does not work for ``task_type``, or ``None`` when it does."""
    if task_type not in TASK_TYPES:
        return f"task type {task_type!r} is not one nlptasks knows ({', '.join(TASK_TYPES)})"
    if method == "prefix" and task_type in ENCODER_HEADS:
        return encoder_prefix_problem()
    return UNSUPPORTED.get((task_type, method))
