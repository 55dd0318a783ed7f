"""Which config fields of a from-scratch architecture ``[model.scratch]``'s sizes set: every field
of the encoder and of the decoder, whatever the architecture calls it.

transformers' configs name the same size differently (BERT ``num_hidden_layers``, T5 ``num_layers``
and ``num_decoder_layers``, BART ``encoder_layers`` and ``decoder_layers``, GPT-2 ``n_layer``) and
alias only the encoder's, through ``attribute_map``.  :data:`SIZE_FIELDS` lists, per recipe key,
the field names that mean that size in transformers' configs; :func:`scratch_values` reads the
architecture's own fields (its config class's dataclass fields and ``attribute_map``) and sets
every one of them, so that ``model.scratch.layers = 2`` gives a T5 two encoder *and* two decoder
blocks.  :data:`DERIVED_FIELDS` follow from the sizes (a head's size is ``hidden / heads``; as many
key/value heads as heads): defaults that ``model.scratch.extra`` may change.

A config field that looks like a size (:func:`unmapped_size_fields`: an integer field named like
layers, heads, a hidden or feed-forward size) but is none of these is one ``[model.scratch]``
cannot set: ``nlptasks validate`` names it with the architecture unless ``model.scratch.extra``
sets it (a mixture-of-experts feed-forward size, for example).

The tables are plain data (recipe validation reads them without importing transformers); the
functions import transformers when called.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

__all__ = [
    "ARCHITECTURE_FIELDS",
    "DERIVED_FIELDS",
    "NOT_SIZES",
    "SIZE_FIELDS",
    "config_fields",
    "config_values",
    "scratch_shadow",
    "scratch_values",
    "size_fields_of",
    "size_key",
    "unmapped_size_fields",
]

SIZE_FIELDS: dict[str, tuple[str, ...]] = {
    "layers": (
        "num_hidden_layers",
        "num_layers",
        "n_layer",
        "n_layers",
        "layers",
        "encoder_layers",
        "decoder_layers",
        "num_encoder_layers",
        "num_decoder_layers",
        "encoder_num_hidden_layers",
        "decoder_num_hidden_layers",
        "encoder_num_layers",
        "decoder_num_layers",
    ),
    "hidden": ("hidden_size", "d_model", "n_embd", "emb_dim"),
    "heads": (
        "num_attention_heads",
        "num_heads",
        "n_head",
        "n_heads",
        "attention_heads",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "num_encoder_attention_heads",
        "num_decoder_attention_heads",
        "encoder_num_attention_heads",
        "decoder_num_attention_heads",
        "encoder_num_heads",
        "decoder_num_heads",
    ),
    "intermediate": (
        "intermediate_size",
        "d_ff",
        "n_inner",
        "d_inner",
        "ffn_dim",
        "ffn_hidden_size",
        "dim_ff",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "encoder_intermediate_size",
        "decoder_intermediate_size",
    ),
}
"""``[model.scratch]`` key → the config fields (in any architecture that has them) it sets."""

ARCHITECTURE_FIELDS: dict[str, dict[str, str]] = {
    "distilbert": {"dim": "hidden", "hidden_dim": "intermediate"},
}
"""Field names whose meaning depends on the architecture (``hidden_dim`` is DistilBERT's
feed-forward size, a hidden size elsewhere): architecture → field → ``[model.scratch]`` key."""

DERIVED_FIELDS: dict[str, tuple[str, ...]] = {
    "head size (hidden / heads)": ("head_dim", "d_kv", "d_head", "dim_head", "attention_head_size"),
    "key/value heads (= heads)": (
        "num_key_value_heads",
        "num_kv_heads",
        "encoder_num_key_value_heads",
        "decoder_num_key_value_heads",
    ),
}
"""Fields that follow from the sizes; ``model.scratch.extra`` may set them otherwise (fewer
key/value heads for grouped-query attention, say)."""

NOT_SIZES = frozenset(
    {
        "max_window_layers",
        "num_mtp_layers",
        "num_nextn_predict_layers",
        "first_k_dense_replace",
        "num_dense_layers",
        "vision_feature_layer",
        "num_kv_shared_layers",
        "global_attn_every_n_layers",
        "mlp_only_layers",
        "no_rope_layers",
        "moe_layers",
        "cross_attention_layers",
        "full_attention_interval",
        "no_rope_layer_interval",
        "layer_norm_eps",
    }
)
"""Integer fields named like sizes that are not sizes of the model's layers (which layers do
something, a count of extra heads for speculative decoding...): never reported as unmapped."""

_SIZE_LIKE = re.compile(
    r"(^|_)(layers|heads|head|n_layer|n_head|hidden_size|intermediate_size|ffn_dim|ffn_hidden_size|d_model|d_ff|"
    r"d_kv|n_embd|n_inner|d_inner|head_dim|dim_head)($|_)"
)


def _recipe_key(field: str, architecture: str | None) -> str | None:
    own = ARCHITECTURE_FIELDS.get(architecture or "", {}).get(field)
    if own:
        return own
    return next((key for key, names in SIZE_FIELDS.items() if field in names), None)


def scratch_shadow(architecture: str | None, field: str) -> str | None:
    """The ``[model.scratch]`` key that sets config ``field`` of ``architecture`` (``model.scratch.
    layers`` for ``num_decoder_layers``), or ``None``: what ``model.scratch.extra`` may not set."""
    key = _recipe_key(field, architecture)
    return f"model.scratch.{key}" if key else None


def config_fields(architecture: str) -> dict[str, Any]:
    """The fields of ``architecture``'s config class with their defaults (``None`` for a field
    whose default is computed), read from the class: no model is built."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[architecture]
    if dataclasses.is_dataclass(cls):
        fields = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                fields[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                fields[f.name] = None
            else:
                fields[f.name] = None
        return fields
    return dict(cls().to_dict())  # a config class of the older kind: its defaults, as built


def _int_field(cls: Any, name: str, default: Any) -> bool:
    """Whether the config field holds one integer (its annotation, else its default)."""
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.name == name:
                kinds = {k.strip() for k in str(f.type).replace("typing.", "").split("|")}
                return "int" in kinds and not kinds & {"float", "list[int]", "tuple[int]"} and "list" not in str(f.type)
    return isinstance(default, int) and not isinstance(default, bool)


def size_fields_of(architecture: str) -> dict[str, list[str]]:
    """``[model.scratch]`` key (``layers``, ``hidden``, ``heads``, ``intermediate``, and each of
    :data:`DERIVED_FIELDS`) → the fields of ``architecture``'s config that it sets."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[architecture]
    fields = config_fields(architecture)
    aliases = dict(getattr(cls, "attribute_map", {}) or {})
    found: dict[str, list[str]] = {}
    for name in fields:
        key = _recipe_key(name, architecture) or next((d for d, names in DERIVED_FIELDS.items() if name in names), None)
        if key:
            found.setdefault(key, []).append(name)
    standard = {
        "layers": "num_hidden_layers",
        "hidden": "hidden_size",
        "heads": "num_attention_heads",
        "intermediate": "intermediate_size",
    }
    for key, name in standard.items():
        target = aliases.get(name)
        if target and target in fields and target not in found.get(key, []):
            found.setdefault(key, []).append(target)
        if not found.get(key):
            found[key] = [name]  # no field of its own: the standard name, as transformers' configs take it
    return found


def size_key(architecture: str, field: str) -> str | None:
    """The ``[model.scratch]`` key (``layers``, ``hidden``, ``heads``, ``intermediate``) that sets
    ``field`` of ``architecture``'s config, read from the config class (so a field its
    ``attribute_map`` aliases to a standard size counts too: DeepSeek-V4's ``moe_intermediate_size``
    is its ``intermediate_size``); ``None`` for any other field.  :func:`scratch_shadow` answers
    from the tables alone, for recipe validation without transformers."""
    return next(
        (key for key, names in size_fields_of(architecture).items() if key in SIZE_FIELDS and field in names), None
    )


def scratch_values(architecture: str, scratch: Any) -> dict[str, Any]:
    """Config values for ``architecture`` from a ``[model.scratch]`` table: every field of
    :func:`size_fields_of`, encoder's and decoder's (the extra table not applied)."""
    values = {
        "layers": scratch.layers,
        "hidden": scratch.hidden,
        "heads": scratch.heads,
        "intermediate": scratch.intermediate,
    }
    derived = dict(zip(DERIVED_FIELDS, (scratch.hidden // scratch.heads, scratch.heads), strict=True))
    out: dict[str, Any] = {}
    for key, names in size_fields_of(architecture).items():
        value = values.get(key, derived.get(key))
        for name in names:
            out[name] = value
    return out


def unmapped_size_fields(architecture: str) -> dict[str, Any]:
    """Integer fields of ``architecture``'s config named like a size of its layers (layers, heads,
    hidden, feed-forward) that ``[model.scratch]`` does not set, with their defaults: what a run
    would leave at the architecture's default whatever the recipe asks."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[architecture]
    mapped = {name for names in size_fields_of(architecture).values() for name in names}
    return {
        name: default
        for name, default in config_fields(architecture).items()
        if name not in mapped and name not in NOT_SIZES and _SIZE_LIKE.search(name) and _int_field(cls, name, default)
    }


def config_values(scratch: Any, vocab_size: int, pad_token_id: int | None, max_length: int) -> dict[str, Any]:
    """Everything a run passes to ``AutoConfig.for_model(scratch.architecture, ...)`` before the
    task's head settings: the vocabulary's size and padding id, :func:`scratch_values`, positions
    for ``max_length``, then ``scratch.extra``."""
    return {
        "vocab_size": vocab_size,
        **scratch_values(scratch.architecture, scratch),
        "max_position_embeddings": max(512, max_length + 2),
        "pad_token_id": pad_token_id,
        **scratch.extra,
    }
