"""The masked-LM loss on the hidden tokens only: the vocabulary projection is computed for the
~15% of positions in the loss instead of every position.

A transformers masked-LM model (``BertForMaskedLM``...) projects every position's hidden state
onto the vocabulary and then ignores 85% of them in its loss.  On a small model with a character
vocabulary that projection is most of the work (2 layers of hidden 128 against a 6,000-token
vocabulary: two thirds of the multiply-adds per token).  :func:`masked_only_loss` runs the model's
encoder on the batch, then its head on the hidden tokens' states alone, and takes the same mean
cross-entropy.

It is used where it is exactly the model's own loss: a model made of its encoder
(``base_model_prefix``) and one head module, checked once on the first training batch in eval mode
(the loss of both ways within 1e-4; otherwise the run says so and keeps the model's own forward).
Not under a distributed wrapper (DDP syncs gradients in its own forward): ``--nproc`` runs use the
model's forward.
"""

from __future__ import annotations

from typing import Any

__all__ = ["encoder_and_head", "masked_only_loss", "matching_loss"]


def encoder_and_head(model: Any) -> tuple[Any, Any] | None:
    """``(encoder, head)`` of a masked-LM model made of exactly these two modules, else ``None``."""
    prefix = getattr(model, "base_model_prefix", "")
    encoder = getattr(model, prefix, None) if prefix else None
    heads = [module for name, module in model.named_children() if name != prefix]
    if encoder is None or len(heads) != 1:
        return None
    return encoder, heads[0]


def masked_only_loss(parts: tuple[Any, Any], inputs: dict[str, Any], divide_by: Any = None) -> Any:
    """The cross-entropy over the hidden tokens (``labels != -100``), the head applied to them
    alone: their mean, or with ``divide_by`` (the Trainer's ``num_items_in_batch`` under gradient
    accumulation) their sum divided by it."""
    import torch.nn.functional as F  # noqa: N812

    encoder, head = parts
    labels = inputs["labels"]
    hidden = encoder(**{k: v for k, v in inputs.items() if k != "labels"})[0]
    chosen = labels != -100
    logits = head(hidden[chosen]).float()
    if divide_by is None:
        return F.cross_entropy(logits, labels[chosen])
    return F.cross_entropy(logits, labels[chosen], reduction="sum") / divide_by


def matching_loss(
    model: Any, parts: tuple[Any, Any], inputs: dict[str, Any], kwargs: dict[str, Any]
) -> tuple[str | None, str]:
    """Which masked-only loss equals ``model(**inputs, **kwargs).loss`` (what the Trainer computes):
    ``("mean", why)``, ``("items", why)`` (the sum over ``kwargs["num_items_in_batch"]``) or
    ``(None, why)``.  Compared in eval mode (no dropout) without gradients, within 1e-4; the model's
    mode is restored."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            full = float(model(**inputs, **kwargs).loss)
            candidates = {"mean": float(masked_only_loss(parts, inputs))}
            if kwargs.get("num_items_in_batch") is not None:
                candidates["items"] = float(masked_only_loss(parts, inputs, kwargs["num_items_in_batch"]))
    finally:
        model.train(was_training)
    for name, value in candidates.items():
        if abs(full - value) <= 1e-4 * max(1.0, abs(full)):
            return name, f"{value:.6f} = the model's {full:.6f}"
    return None, f"the model's loss {full:.6f}, on the hidden tokens only {candidates['mean']:.6f}"
