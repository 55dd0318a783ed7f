"""Generation: batched, length-sorted, left-padded.  Inference and the training-time generation
metric both use :func:`generate`, so they see exactly the same prompts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .templates import render


@dataclass
class GenerationSettings:
    """What ``nlptasks infer --max-new-tokens/--temperature/--top-p`` set; greedy by default."""

    max_new_tokens: int = 128
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0

    def kwargs(self) -> dict[str, Any]:
        if self.temperature <= 0:
            return {"do_sample": False, "max_new_tokens": self.max_new_tokens}
        return {
            "do_sample": True,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
        }


def generate(
    model: Any,
    tokenizer: Any,
    conversations: list[list[dict[str, str]]],
    stop_ids: list[int],
    settings: GenerationSettings,
    batch_size: int = 16,
    max_length: int | None = None,
    progress: Any = None,
) -> list[str]:
    """The assistant's reply to each conversation, in input order.

    Prompts are rendered with the tokenizer's (stored) chat template plus the generation prompt,
    sorted by length so each batch pads little, left-padded (a decoder continues from the right
    end), and cut from the left to ``max_length`` tokens (the training length) when longer.
    """
    import torch

    prompts = [render(tokenizer, messages, generation_prompt=True) for messages in conversations]
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    if max_length is not None:
        encoded = [ids[-max_length:] for ids in encoded]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    outputs: list[str] = [""] * len(encoded)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                width = max(len(encoded[i]) for i in batch)
                ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    seq = encoded[i]
                    ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
                    mask[row, width - len(seq) :] = 1
                generated = model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    eos_token_id=stop_ids,
                    pad_token_id=pad_id,
                    **settings.kwargs(),
                )
                for row, i in enumerate(batch):
                    new = generated[row, width:].tolist()
                    cut = next((k for k, t in enumerate(new) if t in stop_ids), len(new))
                    outputs[i] = tokenizer.decode(new[:cut], skip_special_tokens=True).strip()
                if progress is not None:
                    progress.update(len(batch))
    finally:
        if was_training:
            model.train()
    return outputs
