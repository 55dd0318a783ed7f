"""Packing for the sft task (``options.packing``): one padding-free row per micro-batch, the
check that the model keeps packed examples apart, and what ``auto`` decides."""

from __future__ import annotations

from typing import Any

from nlptasks.plugin import (
    VIRTUAL_TOKEN_METHODS,
    Problem,
    RecipeError,
    RunContext,
    keeps_examples_apart,
    use_segment_attention,
)


def resolve_packing(ctx: RunContext, model: Any) -> bool:
    """``options.packing`` for this model: false; true (an error when the model's attention
    crosses packed examples); ``auto``: on unless a reason says otherwise, logged.  With packing
    on, an SDPA model computes attention per example on the CPU (``use_segment_attention``)."""
    setting = ctx.options.packing
    if setting is False:
        return False
    if setting == "auto":
        method = ctx.recipe.peft.method if ctx.recipe.peft is not None else "none"
        reason = None
        if method in VIRTUAL_TOKEN_METHODS:
            reason = f"peft.method = {method!r} adds virtual tokens that packed examples would share"
        elif ctx.recipe.train.padding == "max_length":
            reason = 'train.padding = "max_length" asks for fixed shapes'
        if reason:
            ctx.log.info('packing off (options.packing = "auto"): %s', reason)
            return False
    # optimize.attention, when set, replaces the model's attention right after this step
    ctx.state["segment_attention"] = ctx.recipe.optimize.attention == "auto" and use_segment_attention(model)
    try:
        check_packing(model, packing_collator(ctx))
    except RecipeError as exc:
        if ctx.state.pop("segment_attention"):
            model.set_attn_implementation("sdpa")
        if setting is True:
            raise
        ctx.log.info('packing off (options.packing = "auto"): %s', exc.problems[0].message)
        return False
    return True


def packing_collator(ctx: RunContext) -> Any:
    """Each micro-batch as one padding-free row; with the example boundaries that
    ``use_segment_attention`` splits at when the model uses it."""
    from transformers import DataCollatorWithFlattening

    return DataCollatorWithFlattening(
        return_position_ids=True, separator_id=-100, return_flash_attn_kwargs=bool(ctx.state.get("segment_attention"))
    )


def check_packing(model: Any, collator: Any) -> None:
    """Fail unless the model keeps packed examples apart: the logits of an example packed after
    another by ``collator`` must equal its logits alone (same positions restart, no attention across)."""
    if not keeps_examples_apart(model, collator):
        attn = getattr(model.config, "_attn_implementation", "?")
        raise RecipeError(
            "recipe",
            [
                Problem(
                    "options.packing",
                    f"{type(model).__name__} (attention {attn!r}) lets packed examples attend to each other, "
                    "so packing would change what the model learns",
                )
            ],
            hint="Turn packing off (--set options.packing=false), or use a model whose attention honours "
            "restarting position ids (llama, qwen2, mistral...).",
        )
