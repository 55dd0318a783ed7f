"""``[model.scratch]`` sets every size field of the architecture it builds, the decoder's too,
whatever the architecture calls them (nlptasks/recipe/scratch.py); ``model.scratch.extra`` may set
none of them; a size field the keys cannot reach is named by ``validate``."""

from __future__ import annotations

import pytest

from nlptasks.errors import RecipeError
from nlptasks.recipe import ScratchConfig
from nlptasks.recipe.rules import SCRATCH_EXTRA_SHADOWS, extra_problems
from nlptasks.recipe.scratch import scratch_shadow, scratch_values, size_fields_of, size_key, unmapped_size_fields

SCRATCH = ScratchConfig(layers=3, hidden=48, heads=4, intermediate=80)


def built(architecture: str):
    from transformers import AutoConfig

    return AutoConfig.for_model(architecture, **scratch_values(architecture, SCRATCH))


@pytest.mark.parametrize(
    ("architecture", "fields"),
    [
        ("t5", {"num_layers": 3, "num_decoder_layers": 3, "d_model": 48, "num_heads": 4, "d_ff": 80, "d_kv": 12}),
        (
            "bart",
            {
                "encoder_layers": 3,
                "decoder_layers": 3,
                "d_model": 48,
                "encoder_attention_heads": 4,
                "decoder_attention_heads": 4,
                "encoder_ffn_dim": 80,
                "decoder_ffn_dim": 80,
            },
        ),
        ("marian", {"encoder_layers": 3, "decoder_layers": 3, "decoder_attention_heads": 4, "decoder_ffn_dim": 80}),
        ("gpt2", {"n_layer": 3, "n_embd": 48, "n_head": 4, "n_inner": 80}),
        ("distilbert", {"n_layers": 3, "dim": 48, "n_heads": 4, "hidden_dim": 80}),
        ("bert", {"num_hidden_layers": 3, "hidden_size": 48, "num_attention_heads": 4, "intermediate_size": 80}),
        (
            "llama",
            {
                "num_hidden_layers": 3,
                "hidden_size": 48,
                "num_attention_heads": 4,
                "intermediate_size": 80,
                "num_key_value_heads": 4,
                "head_dim": 12,
            },
        ),
        ("mistral", {"num_key_value_heads": 4}),  # its default, 8, would not divide 4 heads
        ("xlnet", {"n_layer": 3, "d_model": 48, "n_head": 4, "d_inner": 80, "d_head": 12}),
    ],
)
def test_every_size_field_of_the_architecture_is_set(architecture, fields):
    config = built(architecture)
    assert {k: getattr(config, k) for k in fields} == fields


def test_a_t5_decoder_gets_the_layers_too():
    """The bug this fixes: ``num_hidden_layers`` reached T5's encoder (``attribute_map``) and left
    its decoder at 6 blocks of d_ff 2048, so generation failed at the first evaluation."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    with torch.device("meta"):
        model = AutoModelForSeq2SeqLM.from_config(built("t5"))
    assert len(model.encoder.block) == len(model.decoder.block) == 3
    assert model.decoder.block[0].layer[-1].DenseReluDense.wi.weight.shape == (80, 48)


def _text_architectures() -> list[str]:
    from transformers.models.auto import modeling_auto

    names: set[str] = set()
    for mapping in (
        "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
        "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    ):
        names |= set(getattr(modeling_auto, mapping))
    return sorted(names)


def test_every_aliased_size_of_every_text_architecture_is_set_and_shadowed():
    """For every text architecture transformers has: the field its config aliases to each standard
    size name (``attribute_map``: T5's ``num_layers``, GPT-2's ``n_embd``...) is set by the recipe's
    key, and ``model.scratch.extra`` may not set it (refused by recipe validation's table, or by
    ``validate``'s look at the config class: :func:`size_key`)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from nlptasks.recipe.scratch import config_fields

    keys = {
        "num_hidden_layers": "layers",
        "hidden_size": "hidden",
        "num_attention_heads": "heads",
        "intermediate_size": "intermediate",
    }
    missed, checked = [], 0
    for architecture in _text_architectures():
        aliases = getattr(CONFIG_MAPPING[architecture], "attribute_map", {}) or {}
        fields = config_fields(architecture)
        found = size_fields_of(architecture)
        for standard, key in keys.items():
            field = aliases.get(standard, standard)
            if field not in fields:
                continue  # the architecture has no such size (RWKV's heads), or names it otherwise (BART's ffn)
            checked += 1
            if field not in found[key]:
                missed.append(f"{architecture}: {field} not set by model.scratch.{key}")
            elif size_key(architecture, field) != key:
                missed.append(f"{architecture}: model.scratch.extra.{field} is not refused")
    assert missed == []
    assert checked > 500  # some 200 architectures, most with all four


def test_unmapped_size_fields_are_real_sizes():
    assert unmapped_size_fields("t5") == unmapped_size_fields("bart") == unmapped_size_fields("gpt2") == {}
    assert "v_head_dim" in unmapped_size_fields("deepseek_v3")  # MLA's value head size: no recipe key
    assert "moe_intermediate_size" not in size_fields_of("qwen2_moe")["intermediate"]


@pytest.mark.parametrize(
    ("architecture", "key", "source"),
    [
        ("t5", "num_decoder_layers", "model.scratch.layers"),
        ("t5", "d_ff", "model.scratch.intermediate"),
        ("bart", "decoder_attention_heads", "model.scratch.heads"),
        ("gpt2", "n_embd", "model.scratch.hidden"),
        ("distilbert", "hidden_dim", "model.scratch.intermediate"),
    ],
)
def test_extra_may_not_set_a_mapped_field(architecture, key, source):
    problems = extra_problems({"model": {"scratch": {"architecture": architecture, "extra": {key: 1}}}})
    assert [(p.where, p.message.split(":")[0]) for p in problems] == [
        (f"model.scratch.extra.{key}", f"is set by {source}")
    ]


def test_extra_may_set_derived_and_other_fields():
    raw = {
        "model": {
            "scratch": {
                "architecture": "llama",
                "extra": {"num_key_value_heads": 1, "head_dim": 8, "rope_theta": 1e4, "hidden_dim": 3},
            }
        }
    }
    assert extra_problems(raw) == []  # hidden_dim is DistilBERT's feed-forward size only
    assert "num_decoder_layers" in SCRATCH_EXTRA_SHADOWS and "d_kv" not in SCRATCH_EXTRA_SHADOWS


def test_the_run_refuses_an_unmapped_size_field_too(tmp_path):
    """``nlptasks run`` checks before reading data, like validate."""
    from conftest import RECIPES
    from nlptasks.engine.training.preflight import check_preflight
    from nlptasks.pipeline import load_recipe

    loaded = load_recipe(RECIPES / "cls.toml", ["model.scratch.architecture=deepseek_v3"])
    with pytest.raises(RecipeError) as caught:
        check_preflight(loaded)
    assert any(p.where == "model.scratch.extra.v_head_dim" for p in caught.value.problems)


def test_validate_refuses_an_extra_key_the_architecture_aliases_to_a_size():
    """DeepSeek-V4 calls its feed-forward size ``moe_intermediate_size`` (``attribute_map``): not a
    name recipe validation's table knows, so validate's look at the config refuses it."""
    from conftest import RECIPES
    from nlptasks.engine.training.preflight import preflight_problems
    from nlptasks.pipeline import load_recipe

    assert scratch_shadow("deepseek_v4", "moe_intermediate_size") is None
    loaded = load_recipe(
        RECIPES / "cls.toml", ["model.scratch.architecture=deepseek_v4", "model.scratch.extra.moe_intermediate_size=8"]
    )
    problems = {p.where: p.message for p in preflight_problems(loaded)}
    assert problems["model.scratch.extra.moe_intermediate_size"].startswith("is set by model.scratch.intermediate")
