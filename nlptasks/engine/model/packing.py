"""Attention computed example by example inside packed rows, for SDPA models on the CPU.

A packed micro-batch is one row holding several examples back to back (position ids restart at
each; transformers' ``DataCollatorWithFlattening``).  With ``sdpa`` attention transformers keeps
the examples apart with a dense block-diagonal mask over the whole row, so each layer computes
attention between every pair of tokens of the row and throws most of it away: a row of 16
examples costs about 16 times the attention the examples need.  On a GPU, flash-attention's
variable-length kernel avoids that; on the CPU there is none (torch's ``varlen_attn`` is
CUDA-only), so :func:`use_segment_attention` switches the model to an SDPA variant that splits
the row at the example boundaries the collator gives (``cu_seq_lens_q``, which
``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` adds) and runs SDPA (causal for a decoder) on each
example.  Measured (docs/benchmarks.md, "sft vs TRL"): a 4-layer decoder on alpaca_zh trains
about 1.3x faster per step on 2 CPU cores, with the same logits to 1e-6.

Everything else is plain SDPA, mask included: batches that are not packed, generation with a
cache, sliding windows and soft-capping, and causal models on CUDA (where transformers derives
the block mask from the position ids; not measured here).  Encoders (bidirectional attention,
``ner``'s packed training batches) are split on every device: their mask has no such derivation.  The choice
is not saved with the model: its config.json names no attention, so the trained model loads
with transformers' default.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SEGMENT_ATTENTION", "keeps_examples_apart", "use_segment_attention"]

SEGMENT_ATTENTION = "nlptasks_segment_sdpa"
"""The attention implementation's name in transformers' ``AttentionInterface``."""

_registered = False


def use_segment_attention(model: Any) -> bool:
    """Switch an SDPA ``model`` to attention computed per packed example (this module's
    docstring); any other attention is left as it is.  Returns whether the model now uses it.
    Batches must then carry ``cu_seq_lens_q`` for the split to happen: build the collator with
    ``DataCollatorWithFlattening(return_position_ids=True, return_flash_attn_kwargs=True)``."""
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current == SEGMENT_ATTENTION:
        return True
    if current != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    _register()
    model.set_attn_implementation(SEGMENT_ATTENTION)
    return True


def keeps_examples_apart(model: Any, collate: Any) -> bool:
    """Whether ``model`` keeps the examples of a packed row apart: the logits of an example that
    ``collate`` packs after another equal its logits alone.  ``collate`` turns a list of
    ``{"input_ids": [...]}`` into the model's keyword arguments (a packing collator); ``labels``
    it adds are dropped.  Run it on the model as it will train (its attention chosen).  A model on
    the meta device (``nlptasks plan`` builds step 5 without data) cannot run and trains nothing:
    True."""
    import torch

    if any(p.is_meta for p in model.parameters()):
        return True
    vocab = model.get_input_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(0, vocab, (5,), generator=gen).tolist()
    b = torch.randint(0, vocab, (4,), generator=gen).tolist()
    row = dict(collate([{"input_ids": a}, {"input_ids": b}]))
    row.pop("labels", None)
    # no KV cache: with one, transformers does not derive a packed row's mask from its positions
    cache = {"use_cache": False} if getattr(getattr(model, "config", None), "use_cache", None) is not None else {}
    was_training = model.training
    model.eval()
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([b]), **cache).logits[0]
        together = model(**row, **cache).logits[0, 5:]
    model.train(was_training)
    return bool(torch.allclose(alone, together, atol=1e-4, rtol=1e-3))


def _register() -> None:
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(SEGMENT_ATTENTION, segment_attention)
    AttentionMaskInterface.register(SEGMENT_ATTENTION, sdpa_mask)  # unpacked batches need SDPA's own mask
    _registered = True


def segment_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function signature (``query``: batch, heads, tokens, head size).
    One packed row on the CPU with ``cu_seq_lens_q``: SDPA per example; otherwise SDPA as usual."""
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    bounds = kwargs.get("cu_seq_lens_q")
    tokens = query.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    packed_row = bounds is not None and query.shape[0] == 1 and int(bounds[-1]) == tokens
    if packed_row and key.shape[2] != tokens:
        from nlptasks.errors import NlptasksError

        raise NlptasksError(
            "a packed row met attention keys beyond its tokens (a key/value prefix, as prefix tuning adds): "
            "its examples would attend to one another",
            hint="Turn packing off (--set options.packing=false) or use another PEFT method.",
        )
    plain = (
        not packed_row
        # causal on a GPU: SDPA with the block mask transformers derives from the position ids
        # (an encoder's mask has no such derivation: its packed rows are split on any device)
        or (causal and query.device.type != "cpu")
        or kwargs.get("sliding_window") is not None
        or kwargs.get("softcap") is not None
        or kwargs.get("position_bias") is not None
    )
    if plain:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    sizes = torch.diff(bounds.to("cpu", torch.long)).tolist()
    parts = [
        torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling, is_causal=causal)
        for q, k, v in zip(query.split(sizes, 2), key.split(sizes, 2), value.split(sizes, 2), strict=True)
    ]
    return torch.cat(parts, 2).transpose(1, 2).contiguous(), None
