"""Packed training batches for ``ner`` (``options.packing``): each micro-batch of sentences as one
padding-free row, attention per sentence (``use_segment_attention``); evaluation stays padded.

A token classifier's loss is the mean over the labelled tokens of the batch, and an encoder sees
each sentence alone when the attention is split at the sentence boundaries, so a packed batch has
the loss and gradients of the padded one: the same training, without the padding's work.
"""

from __future__ import annotations

from typing import Any

from nlptasks.plugin import (
    VIRTUAL_TOKEN_METHODS,
    NlptasksError,
    Problem,
    RecipeError,
    RunContext,
    keeps_examples_apart,
    use_segment_attention,
)


def resolve_packing(ctx: RunContext, model: Any) -> bool:
    """``options.packing`` for this run: ``auto`` packs on the CPU with dynamic padding when the
    model keeps packed sentences apart (the log says why not otherwise); ``true`` packs wherever
    the model keeps packed sentences apart (an error naming the key otherwise)."""
    import torch

    setting = ctx.options.packing
    if setting is False:
        return False
    reason, switched = None, False
    fixed = ctx.recipe.train.padding == "max_length"
    if setting == "auto" and fixed:
        reason = 'train.padding = "max_length" asks for fixed shapes'
    elif setting == "auto" and torch.cuda.is_available():
        reason = "packing is measured on the CPU only (no GPU was lent to measure it)"
    elif ctx.recipe.peft is not None and ctx.recipe.peft.method in VIRTUAL_TOKEN_METHODS:
        reason = f"peft.method = {ctx.recipe.peft.method!r} adds virtual tokens that packed sentences would share"
    elif ctx.recipe.optimize.attention != "auto":
        reason = (
            f"optimize.attention = {ctx.recipe.optimize.attention!r} replaces the attention that splits a "
            "packed row per sentence"
        )
    elif not (switched := use_segment_attention(model)):
        attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
        reason = (
            f"{type(model).__name__} does not use SDPA attention ({attention!r}), which packing splits per sentence"
        )
    elif not keeps_examples_apart(model, pack):
        reason = f"{type(model).__name__} lets packed sentences attend to each other"
    if reason is None:
        if fixed:
            ctx.log.warning(
                'options.packing = true: training batches are packed; train.padding = "max_length" '
                "pads the evaluation batches only"
            )
        return True
    if switched:
        model.set_attn_implementation("sdpa")
    if setting is True:
        raise RecipeError("recipe", [Problem("options.packing", reason)], hint='Set options.packing = "auto" or false.')
    ctx.log.info('packing off (options.packing = "auto"): %s', reason)
    return False


def pack(features: list[dict[str, Any]]) -> dict[str, Any]:
    """Sentences (``input_ids``, ``labels``, optional ``token_type_ids``; padding-free) as one row
    with restarting ``position_ids`` and the boundaries ``cu_seq_lens_q/k``; labels kept as they are."""
    import torch

    if not features:
        raise NlptasksError("an empty training batch")
    lengths = [len(f["input_ids"]) for f in features]
    row: dict[str, Any] = {}
    for key in ("input_ids", "labels", "token_type_ids"):
        if key in features[0]:
            row[key] = torch.tensor([[x for f in features for x in f[key]]], dtype=torch.long)
    row["position_ids"] = torch.tensor([[i for n in lengths for i in range(n)]], dtype=torch.long)
    bounds = torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    row["cu_seq_lens_q"] = row["cu_seq_lens_k"] = bounds
    row["max_length_q"] = row["max_length_k"] = max(lengths)
    return row


def packed_trainer(trainer_class: Any) -> Any:
    """``trainer_class`` whose training batches are packed (:func:`pack`); evaluation and
    prediction batches keep the run's padding collator."""

    class PackedTrainer(trainer_class):
        def get_train_dataloader(self) -> Any:
            padded = self.data_collator
            self.data_collator = pack
            try:
                return super().get_train_dataloader()
            finally:
                self.data_collator = padded

    return PackedTrainer
