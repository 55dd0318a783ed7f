"""What a model says about itself: the inputs its forward takes, the longest input it has
positions for, where its weights are.  Read by training (the PEFT probe), inference and export."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["accepted_inputs", "model_device", "position_limit", "usable_positions"]

_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "data2vec-text", "longformer"}


def accepted_inputs(model: Any) -> set[str]:
    """The input names ``model.forward`` takes; for a PEFT model (whose forward takes ``**kwargs``),
    those of the base model it passes them to."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return set(inspect.signature(base.forward).parameters)


def model_device(model: Any) -> Any:
    """Where ``model``'s weights are (inputs must go there)."""
    return next(model.parameters()).device


def position_limit(model: Any) -> int | None:
    """The longest input ``model`` has positions for (``max_position_embeddings``, less the padding
    offset of RoBERTa's family), or ``None`` when its config does not say."""
    config = getattr(model, "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or isinstance(positions, bool):
        return None
    return usable_positions(positions, getattr(config, "model_type", None))


def usable_positions(positions: int, model_type: str | None) -> int:
    """Tokens a model with ``max_position_embeddings == positions`` can read: RoBERTa's family
    spends two positions on its padding offset."""
    return positions - (2 if model_type in _OFFSET_POSITIONS else 0)
