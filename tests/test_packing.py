"""Attention per example inside packed rows (nlptasks.engine.model.packing, ``use_segment_attention``):
the same logits, loss and gradients as SDPA's block-diagonal mask, plain SDPA everywhere else, and
nothing of it saved with the model."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")


def decoder(arch: str = "qwen2", kv_heads: int = 4, attention: str = "sdpa", seed: int = 0):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(
        arch,
        vocab_size=97,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        intermediate_size=128,
        use_cache=False,
    )
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention)
    return model


def packed(lengths: list[int], seed: int = 1, flash_kwargs: bool = True) -> dict:
    from transformers import DataCollatorWithFlattening

    gen = torch.Generator().manual_seed(seed)
    examples = []
    for n in lengths:
        ids = torch.randint(3, 97, (n,), generator=gen).tolist()
        examples.append({"input_ids": ids, "labels": [-100] * (n // 3) + ids[n // 3 :]})
    return DataCollatorWithFlattening(
        return_position_ids=True, separator_id=-100, return_flash_attn_kwargs=flash_kwargs
    )(examples)


@pytest.mark.parametrize(("arch", "kv_heads"), [("qwen2", 4), ("llama", 2)], ids=["qwen2", "llama-gqa"])
def test_packed_logits_loss_and_gradients_equal_sdpa(arch, kv_heads):
    from nlptasks.plugin import use_segment_attention

    reference, ours = decoder(arch, kv_heads), decoder(arch, kv_heads)
    assert use_segment_attention(ours) and ours.config._attn_implementation == "nlptasks_segment_sdpa"
    batch = packed([7, 1, 12, 5, 30])
    assert batch["cu_seq_lens_q"].tolist() == [0, 7, 8, 20, 25, 55]
    out_ref, out = reference(**batch), ours(**batch)
    assert torch.allclose(out.logits, out_ref.logits, atol=1e-5)
    assert out.loss.item() == pytest.approx(out_ref.loss.item(), abs=1e-6)
    out_ref.loss.backward()
    out.loss.backward()
    for (name, a), (_, b) in zip(reference.named_parameters(), ours.named_parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-5), name
    # ... and each example's logits are those it has alone (no attention across examples).
    alone = reference(input_ids=batch["input_ids"][:, 8:20]).logits
    assert torch.allclose(out.logits[:, 8:20], alone, atol=1e-5)


def test_the_split_is_what_changes_the_work():
    """Not the same code under another name: a packed row whose boundaries are withheld from the
    attention (no ``cu_seq_lens_q``) gets SDPA's mask path, and a row whose boundaries are wrong
    gets different logits."""
    from nlptasks.plugin import use_segment_attention

    model = decoder()
    use_segment_attention(model)
    batch = packed([6, 9])
    good = model(**batch).logits
    without = {k: v for k, v in batch.items() if not k.startswith(("cu_seq", "max_length"))}
    assert torch.allclose(model(**without).logits, good, atol=1e-5)  # SDPA's own mask: same answer
    wrong = dict(batch, cu_seq_lens_q=torch.tensor([0, 9, 15], dtype=torch.int32))
    assert not torch.allclose(model(**wrong).logits, good, atol=1e-3)


def test_everything_else_is_plain_sdpa():
    from nlptasks.plugin import use_segment_attention

    reference, ours = decoder().eval(), decoder().eval()
    use_segment_attention(ours)
    ids = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.no_grad():
        assert torch.allclose(
            ours(input_ids=ids, attention_mask=mask).logits,
            reference(input_ids=ids, attention_mask=mask).logits,
            atol=1e-5,
        )
    for model in (reference, ours):
        model.generation_config.pad_token_id = 0
    args = dict(input_ids=ids[:1], max_new_tokens=6, do_sample=False, use_cache=True)
    assert ours.generate(**args).tolist() == reference.generate(**args).tolist()
    assert not use_segment_attention(decoder(attention="eager"))


def test_not_saved_with_the_model(tmp_path):
    from transformers import AutoModelForCausalLM

    from nlptasks.plugin import use_segment_attention

    model = decoder()
    use_segment_attention(model)
    model.save_pretrained(tmp_path)
    assert "segment" not in (tmp_path / "config.json").read_text(encoding="utf-8")
    again = AutoModelForCausalLM.from_pretrained(tmp_path)  # plain transformers, nothing registered needed
    assert again.config._attn_implementation in ("sdpa", "eager")
    json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))


def test_ner_packed_batch_has_the_padded_batch_loss_and_gradients():
    """An encoder (BERT, bidirectional) on one packed row of sentences: attention split per
    sentence, labels kept as they are; the same loss and gradients as the padded batch."""
    from transformers import AutoConfig, AutoModelForTokenClassification

    from nlptasks.plugin import keeps_examples_apart, use_segment_attention
    from nlptasks_plugins.ner.packing import pack

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(
        "bert",
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=5,
        hidden_dropout_prob=0,
        attention_probs_dropout_prob=0,
    )
    reference = AutoModelForTokenClassification.from_config(cfg)
    ours = AutoModelForTokenClassification.from_config(cfg)
    ours.load_state_dict(reference.state_dict())
    assert not keeps_examples_apart(ours, pack)  # plain SDPA, no mask: packed sentences would see each other
    assert use_segment_attention(ours) and keeps_examples_apart(ours, pack)
    sentences = [
        ([2, 5, 6, 7, 9, 3], [-100, 1, 2, 3, 0, -100], [0, 0, 0, 0, 1, 1]),
        ([2, 8, 9, 3], [-100, 1, 1, -100], [0] * 4),
    ]
    row = pack([{"input_ids": i, "labels": y, "token_type_ids": t} for i, y, t in sentences])
    assert row["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3]]
    assert row["labels"].tolist() == [[-100, 1, 2, 3, 0, -100, -100, 1, 1, -100]]  # no separator label
    width = 6
    padded = {
        "input_ids": torch.tensor([i + [0] * (width - len(i)) for i, _, _ in sentences]),
        "labels": torch.tensor([y + [-100] * (width - len(y)) for _, y, _ in sentences]),
        "token_type_ids": torch.tensor([t + [0] * (width - len(t)) for _, _, t in sentences]),
        "attention_mask": torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _, _ in sentences]),
    }
    loss, expected = ours(**row).loss, reference(**padded).loss
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    loss.backward()
    expected.backward()
    for (name, a), (_, b) in zip(reference.named_parameters(), ours.named_parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


def test_a_packed_row_with_a_key_value_prefix_is_refused_not_mixed():
    """Prefix tuning hands the attention more keys than the row has tokens: the row cannot be split
    per example, and plain SDPA would let the examples see each other, so it is an error."""
    from nlptasks import NlptasksError
    from nlptasks.engine.model.packing import segment_attention

    module = torch.nn.Module()
    module.is_causal = False
    q = torch.randn(1, 2, 9, 8)
    kv = torch.randn(1, 2, 13, 8)  # 4 prefix positions
    bounds = torch.tensor([0, 5, 9], dtype=torch.int32)
    with pytest.raises(NlptasksError, match="key/value prefix"):
        segment_attention(module, q, kv, kv, None, cu_seq_lens_q=bounds)
    out, _ = segment_attention(module, q, q, q, None, cu_seq_lens_q=bounds)
    alone = torch.nn.functional.scaled_dot_product_attention(q[:, :, 5:], q[:, :, 5:], q[:, :, 5:])
    assert torch.allclose(out[:, 5:].transpose(1, 2), alone, atol=1e-6)
