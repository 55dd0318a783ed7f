"""Which PEFT methods work for which kind of model: the table behind recipe validation and
docs/peft.md.

Rows are peft's task types, as many as the installed peft knows (:func:`peft_task_types`, read
from ``peft.TaskType``): a task declares its own with ``TaskSpec.peft_task_type``, and may refuse
more methods with ``TaskSpec.peft_unsupported``.  A method that :func:`unsupported_reason` does not
refuse for a task type works for it; :data:`UNSUPPORTED` gives the reason for each combination
known not to work.  ``tests/test_peft.py`` trains every built-in task and the question-answering
tutorial plugin with every method, and ``tests/test_seq2seq.py`` an encoder-decoder test plugin,
and check the outcome against this table, so the table (and the page generated from it) cannot
drift from what actually runs.

No heavy imports at module level: recipe validation reads this module.  The task types are read
from peft's enum module alone (``import peft`` takes seconds); only the prefix check imports
transformers, when asked about prefix tuning.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

__all__ = [
    "ENCODER_HEADS",
    "MERGEABLE",
    "METHODS",
    "POSITIONAL_KINDS",
    "SHIFTING_METHODS",
    "VIRTUAL_TOKEN_METHODS",
    "TASK_TYPES",
    "UNSUPPORTED",
    "encoder_prefix_problem",
    "method_reason",
    "peft_task_types",
    "positional_reason",
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
    "SEQ_2_SEQ_LM": "a generated target sequence (an encoder-decoder: the decoder predicts the next target token)",
}
"""What each peft task type's models output, for the table in docs/peft.md.  Not a closed list: a
``TaskSpec.peft_task_type`` may name any task type of the installed peft (:func:`peft_task_types`)."""


@functools.lru_cache(maxsize=1)
def peft_task_types() -> tuple[str, ...]:
    """The task types of the installed peft (the names of ``peft.TaskType``): what a
    ``TaskSpec.peft_task_type`` may declare.

    Read from the module that defines the enum alone (``peft/utils/peft_types.py``, which imports
    only the standard library), because ``import peft`` takes seconds and tasks are declared
    whenever plugins load; if that module moved, from ``peft.TaskType`` itself.  Without peft
    installed: the task types of :data:`TASK_TYPES`.
    """
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("peft")
    if spec is None or not spec.origin:
        return tuple(TASK_TYPES)
    try:
        module_spec = importlib.util.spec_from_file_location(
            "_nlptasks_peft_types", Path(spec.origin).parent / "utils" / "peft_types.py"
        )
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        enum = module.TaskType
    except Exception:  # noqa: BLE001 - another layout of peft: ask peft itself
        import peft

        enum = peft.TaskType
    return tuple(member.name for member in enum)


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

SHIFTING_METHODS = ("p_tuning", "prompt")
"""The methods that prepend virtual tokens to the input sequence, shifting every token's position."""

POSITIONAL_KINDS = ("token", "position", "span")
"""Label kinds (``TaskSpec.label_fields``) that index the model's outputs by token position."""


def positional_reason(kinds: list[str]) -> str:
    """Why a virtual-token method cannot train a task whose labels are of these position-indexed
    kinds, whatever its declared task type (a plugin's own head under ``FEATURE_EXTRACTION``)."""
    return (
        f"its labels are indexed by token position (label kind {', '.join(kinds)}), and peft prepends "
        "virtual tokens to the sequence, so the model's outputs no longer line up with those positions"
    )


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


def method_reason(
    task_type: str, method: str, label_kinds: Iterable[str] = (), own: Mapping[str, str] | None = None
) -> str | None:
    """Why a task of ``task_type`` whose label fields have ``label_kinds`` cannot train ``method``,
    or ``None`` when it can: the task type's limits (:func:`unsupported_reason`), the task's ``own``
    refusals (``TaskSpec.peft_unsupported``), then a virtual-token method against labels indexed by
    token position (causal and seq2seq LMs excepted: peft pads their labels for the virtual tokens)."""
    by_position = sorted({k for k in label_kinds if k in POSITIONAL_KINDS})
    shifts = method in SHIFTING_METHODS and task_type not in ("CAUSAL_LM", "SEQ_2_SEQ_LM")
    return (
        unsupported_reason(task_type, method)
        or (own or {}).get(method)
        or (positional_reason(by_position) if by_position and shifts else None)
    )


def unsupported_reason(task_type: str, method: str) -> str | None:
    """Why ``method`` does not work for ``task_type``, or ``None`` when it does."""
    known = peft_task_types()
    if task_type not in known:
        return f"task type {task_type!r} is not one the installed peft knows ({', '.join(known)})"
    if method == "prefix" and task_type in ENCODER_HEADS:
        return encoder_prefix_problem()
    return UNSUPPORTED.get((task_type, method))
