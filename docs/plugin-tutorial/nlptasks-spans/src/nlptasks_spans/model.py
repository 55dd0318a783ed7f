"""The plugin's own model class: a GlobalPointer span head on any encoder transformers builds.

Every (start, end) token pair of a text gets one score per entity type: the head projects each
token to a query and a key per type (with rotary positions, so a score knows how far apart the
two tokens are), and a pair's score is their dot product.  Spans may nest or overlap: "杭州西湖酒店"
is an ORG and "杭州" inside it a LOC, two cells of one matrix.  The logits are ``(batch, types,
tokens, tokens)``; pairs with ``start > end`` or a padding token are masked.

``SpanModel`` is a ``PreTrainedModel``: ``save_pretrained`` writes ``config.json`` (model type
``nlptasks-spans``, the encoder's config inside) and the weights, and ``SpanModel.from_pretrained``
loads them back in any process that imports this module.  nlptasks records the class and this
module in the run's manifest (``model_class``, ``model_module``), so ``nlptasks export``,
``nlptasks eval`` and ``nlptasks.load`` find it in a fresh process.  The encoder sits under
``base_model_prefix`` (``encoder``): what a ``[peft]`` adapter adapts, while ``head`` trains in full.

Imports torch and transformers: the plugin imports this module only in steps 5 and 10.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

MASKED = -1e4
"""The logit of a pair that cannot be a span (start after end, or a padding token)."""


class SpanConfig(PretrainedConfig):
    """The head's settings and the encoder's config (``encoder``: its ``to_dict()``)."""

    model_type = "nlptasks-spans"

    def __init__(
        self, encoder: dict[str, Any] | None = None, head_size: int = 64, initializer_range: float = 0.02, **kwargs: Any
    ) -> None:
        self.encoder = dict(encoder or {})
        self.head_size = head_size
        self.initializer_range = initializer_range
        super().__init__(**kwargs)


@dataclass
class SpanOutput(ModelOutput):
    """``loss`` (with labels) and ``logits`` of shape ``(batch, types, tokens, tokens)``."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x`` (batch, tokens, types, size) along its token axis, in the
    half-split layout (the first half of each vector rotates with the second): concatenations
    only, which the ONNX exporter keeps dynamic (``repeat_interleave`` bakes the traced length in)."""
    half = x.shape[-1] // 2
    position = torch.arange(x.shape[1], dtype=torch.float32, device=x.device)
    inverse = 10000.0 ** (-torch.arange(0, half, dtype=torch.float32, device=x.device) / half)
    angle = position[:, None] * inverse[None, :]  # (tokens, size / 2)
    angle = torch.cat([angle, angle], dim=-1)[None, :, None, :]
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * torch.cos(angle).to(x.dtype) + rotated * torch.sin(angle).to(x.dtype)


def span_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Multi-label categorical cross-entropy over each type's token pairs (Su Jianlin's loss for
    GlobalPointer): every gold pair above 0, every other pair below, without a threshold to tune."""
    batch, types = logits.shape[:2]
    scores = logits.reshape(batch * types, -1).float()
    gold = labels.reshape(batch * types, -1).float().clamp(min=0)  # -100 (gathered padding) is no span
    scores = (1 - 2 * gold) * scores
    zeros = torch.zeros_like(scores[..., :1])
    negative = torch.logsumexp(torch.cat([scores - gold * 1e4, zeros], dim=-1), dim=-1)
    positive = torch.logsumexp(torch.cat([scores - (1 - gold) * 1e4, zeros], dim=-1), dim=-1)
    return (negative + positive).mean()


class SpanModel(PreTrainedModel):
    """An encoder with a GlobalPointer head: ``logits[b, t, i, j]`` scores tokens ``i..j`` of text
    ``b`` as an entity of type ``t``."""

    config_class = SpanConfig
    base_model_prefix = "encoder"
    main_input_name = "input_ids"

    def __init__(self, config: SpanConfig) -> None:
        super().__init__(config)
        self.encoder = AutoModel.from_config(AutoConfig.for_model(**config.encoder))
        hidden = self.encoder.config.hidden_size
        self.head = torch.nn.Linear(hidden, config.num_labels * config.head_size * 2)
        self.post_init()

    @classmethod
    def around(cls, encoder: Any, labels: list[str], head_size: int = 64) -> SpanModel:
        """A new head around a loaded (pretrained or from-scratch) ``encoder``, one type per label."""
        config = SpanConfig(
            encoder=encoder.config.to_dict(),
            head_size=head_size,
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={name: i for i, name in enumerate(labels)},
        )
        model = cls(config)
        model.encoder = encoder  # the loaded weights, not the random ones __init__ built
        return model.to(next(encoder.parameters()).dtype)

    def _init_weights(self, module: Any) -> None:
        if isinstance(module, torch.nn.Linear) and module is self.head:
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            if module.bias is not None:
                module.bias.data.zero_()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> SpanOutput:
        inputs = {"attention_mask": attention_mask, "token_type_ids": token_type_ids}
        hidden = self.encoder(input_ids=input_ids, **{k: v for k, v in inputs.items() if v is not None})[0]
        batch, tokens, _ = hidden.shape
        types, size = self.config.num_labels, self.config.head_size
        qk = self.head(hidden).reshape(batch, tokens, types, 2, size)
        query, key = rotary(qk[..., 0, :]), rotary(qk[..., 1, :])
        logits = torch.einsum("bmtd,bntd->btmn", query, key) / size**0.5
        position = torch.arange(tokens, device=hidden.device)
        invalid = position[:, None] > position[None, :]  # start after end
        if attention_mask is not None:
            present = attention_mask.bool()
            invalid = invalid[None, None] | ~(present[:, None, :, None] & present[:, None, None, :])
        logits = logits.masked_fill(invalid, MASKED)
        loss = span_loss(logits, labels) if labels is not None else None
        return SpanOutput(loss=loss, logits=logits)

    @staticmethod
    def loss_from_outputs(outputs: dict[str, Any], labels: dict[str, Any]) -> torch.Tensor:
        """The training loss from a graph's outputs and a batch's labels: what ``nlptasks eval``
        of an ONNX export (whose graph has no loss) reports."""
        return span_loss(outputs["logits"], labels["labels"])


# transformers' Auto classes know the model type once this module is imported: AutoConfig (and
# AutoTokenizer, which reads config.json) load a run folder without a warning, AutoModel gives a SpanModel
AutoConfig.register(SpanConfig.model_type, SpanConfig, exist_ok=True)
AutoModel.register(SpanConfig, SpanModel, exist_ok=True)
