"""The bi-encoder: one shared encoder embeds each text; training pulls similar pairs together.

The model the Trainer holds (and saves) is the plain encoder (``AutoModel``), so a run folder
loads with ``AutoModel.from_pretrained`` and embeds texts with the pooling stored in the run.
What makes it a bi-encoder lives here: a collator that pads each side on its own, a Trainer whose
loss and evaluation work on the cosine similarity of the two pooled embeddings, and the threshold
search for binary labels.

Losses (``options.loss``):

``cosent``
    CoSENT: ``log(1 + Σ exp(scale · (cos_j − cos_i)))`` over the pairs of examples with
    ``label_i > label_j``. It only needs the labels' order, so it trains on 0/1 classes and on
    0–5 similarity scores alike.
``contrastive``
    For binary labels: ``y · (1 − cos)² + (1 − y) · max(0, cos − margin)²``, averaged.
"""

from __future__ import annotations

from typing import Any

SIDES = ("a", "b")


def pool(hidden: Any, attention_mask: Any, pooling: str) -> Any:
    """Sentence embeddings from token states: the mean over real tokens, or the first token.

    States for positions before the input (the virtual tokens that PEFT prompt methods prepend)
    are left out, so pooling sees the input's tokens only.
    """
    extra = hidden.shape[1] - attention_mask.shape[1]
    if extra > 0:
        hidden = hidden[:, extra:]
    if pooling == "cls":
        return hidden[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def embed(model: Any, input_ids: Any, attention_mask: Any, pooling: str) -> Any:
    out = model(input_ids=input_ids, attention_mask=attention_mask)
    return pool(out.last_hidden_state, attention_mask, pooling)


def cosent_loss(cosine: Any, labels: Any, scale: float) -> Any:
    import torch

    scores = cosine * scale
    diff = scores[None, :] - scores[:, None]  # diff[i, j] = s_j - s_i
    wanted = labels[:, None] > labels[None, :]  # pairs where i should score above j
    diff = diff[wanted]
    zero = torch.zeros(1, dtype=diff.dtype, device=diff.device)
    return torch.logsumexp(torch.cat([zero, diff]), dim=0)


def contrastive_loss(cosine: Any, labels: Any, margin: float) -> Any:
    positive = labels * (1 - cosine).pow(2)
    negative = (1 - labels) * (cosine - margin).clamp(min=0).pow(2)
    return (positive + negative).mean()


class PairCollator:
    """Pads side ``a`` and side ``b`` of a batch separately; labels as floats."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        batch: dict[str, Any] = {}
        for side in SIDES:
            padded = self.tokenizer.pad(
                {
                    "input_ids": [f[f"input_ids_{side}"] for f in features],
                    "attention_mask": [f[f"attention_mask_{side}"] for f in features],
                },
                return_tensors="pt",
            )
            batch[f"input_ids_{side}"] = padded["input_ids"]
            batch[f"attention_mask_{side}"] = padded["attention_mask"]
        batch["labels"] = torch.tensor([float(f["labels"]) for f in features], dtype=torch.float32)
        return batch


def make_trainer_class() -> type:
    """A ``transformers.Trainer`` whose loss and predictions are cosine similarities of pairs."""
    import torch
    from transformers import Trainer

    class BiEncoderTrainer(Trainer):
        pooling: str = "mean"
        loss_name: str = "cosent"
        scale: float = 20.0
        margin: float = 0.5

        def cosine(self, model: Any, inputs: dict[str, Any]) -> Any:
            a = embed(model, inputs["input_ids_a"], inputs["attention_mask_a"], self.pooling)
            b = embed(model, inputs["input_ids_b"], inputs["attention_mask_b"], self.pooling)
            return torch.nn.functional.cosine_similarity(a, b, dim=-1)

        def pair_loss(self, cosine: Any, labels: Any) -> Any:
            if self.loss_name == "contrastive":
                return contrastive_loss(cosine, labels, self.margin)
            return cosent_loss(cosine, labels, self.scale)

        def compute_loss(
            self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
        ) -> Any:
            cosine = self.cosine(model, inputs)
            loss = self.pair_loss(cosine, inputs["labels"])
            return (loss, {"cosine": cosine}) if return_outputs else loss

        def prediction_step(
            self, model: Any, inputs: dict[str, Any], prediction_loss_only: bool, ignore_keys: Any = None
        ) -> tuple[Any, Any, Any]:
            inputs = self._prepare_inputs(inputs)
            with torch.no_grad():
                cosine = self.cosine(model, inputs)
                loss = self.pair_loss(cosine, inputs["labels"]).detach()
            if prediction_loss_only:
                return loss, None, None
            return loss, cosine.detach(), inputs["labels"].detach()

    return BiEncoderTrainer


def best_threshold(similarity: Any, gold: Any) -> tuple[float, float]:
    """The cosine threshold with the highest accuracy on (similarity, 0/1 gold): ``(threshold, accuracy)``.

    Candidates are the midpoints between consecutive sorted similarities (and the ends), so the
    threshold found separates the given set as well as any threshold can.
    """
    import numpy as np

    sim = np.asarray(similarity, dtype=np.float64).reshape(-1)
    y = np.asarray(gold, dtype=np.float64).reshape(-1) > 0.5
    if len(sim) == 0:
        return 0.5, 0.0
    values = np.unique(sim)
    candidates = np.concatenate([[values[0] - 1e-6], (values[:-1] + values[1:]) / 2, [values[-1] + 1e-6]])
    accuracies = [float(((sim >= t) == y).mean()) for t in candidates]
    best = int(np.argmax(accuracies))
    return float(candidates[best]), accuracies[best]
