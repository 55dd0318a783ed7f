"""The recipe's ``[peft]`` table, and which of its keys belong to which method."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nlptasks.peft_support import VIRTUAL_TOKEN_METHODS
from nlptasks.recipe.section import Section

__all__ = ["PEFT_METHOD_KEYS", "PeftConfig", "PeftMethod"]

PeftMethod = Literal["lora", "prefix", "p_tuning", "prompt", "ia3", "none"]

# Which [peft] keys belong to which method (the rest apply to every method).
PEFT_METHOD_KEYS: dict[str, tuple[PeftMethod, ...]] = {
    "r": ("lora",),
    "alpha": ("lora",),
    "dropout": ("lora",),
    "bias": ("lora",),
    "target_modules": ("lora", "ia3"),
    "feedforward_modules": ("ia3",),
    "num_virtual_tokens": VIRTUAL_TOKEN_METHODS,
    "prefix_projection": ("prefix",),
    "encoder_hidden_size": ("prefix", "p_tuning"),
    "encoder_type": ("p_tuning",),
    "encoder_layers": ("p_tuning",),
    "encoder_dropout": ("p_tuning",),
    "prompt_init_text": ("prompt",),
}


class PeftConfig(Section):
    """Parameter-efficient fine-tuning: train a small adapter on a frozen base model.

    The engine wraps the model that step 5 builds with the chosen method (see docs/peft.md for
    what each method does and which tasks support it).  A run saves only the adapter (and, for a
    model built from scratch, the frozen random base under ``base/``).  A key that belongs to
    another method than ``method`` is an error naming the key.
    """

    method: PeftMethod = Field(
        description="'lora' (low-rank updates), 'ia3' (learned scaling vectors), 'prefix' (trained key/value "
        "prefixes in every layer), 'p_tuning' (virtual tokens from a small encoder), 'prompt' (virtual tokens); "
        "'none' switches the whole [peft] table off (e.g. --set peft.method=none trains every weight)."
    )
    r: int = Field(8, ge=1, le=4096, description="lora: rank of the update matrices.")
    alpha: float = Field(16.0, gt=0, le=65536, description="lora: scaling numerator; updates are scaled by alpha / r.")
    dropout: float = Field(0.05, ge=0, lt=1, description="lora: dropout on the adapter's input.")
    bias: Literal["none", "all", "lora_only"] = Field(
        "none", description="lora: which biases to train ('none' keeps every bias frozen)."
    )
    target_modules: list[str] | str | None = Field(
        None,
        description="lora, ia3: modules to adapt, as a list of name suffixes (['query', 'value']) or one regex "
        "matched against the full module name. Default: peft's choice for the architecture (BERT: query and "
        "value for lora; key, value and output.dense for ia3).",
    )
    feedforward_modules: list[str] | str | None = Field(
        None,
        description="ia3: which of target_modules are feed-forward layers (scaled on their input). Default: "
        "peft's choice for the architecture.",
    )
    modules_to_save: list[str] | None = Field(
        None,
        description="Further modules trained in full and saved with the adapter (the task head, e.g. "
        "'classifier', is added by peft for classification tasks).",
    )
    num_virtual_tokens: int = Field(
        20,
        ge=1,
        le=8192,
        description="prefix, p_tuning, prompt: number of virtual tokens (they count against model.max_length).",
    )
    prefix_projection: bool = Field(
        False, description="prefix: compute the prefixes with a two-layer MLP (more parameters, often more stable)."
    )
    encoder_hidden_size: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="prefix (with prefix_projection), p_tuning: hidden size of the prompt encoder. Default: the "
        "model's hidden size.",
    )
    encoder_type: Literal["MLP", "LSTM"] = Field("MLP", description="p_tuning: the prompt encoder.")
    encoder_layers: int = Field(2, ge=1, le=64, description="p_tuning: layers of the prompt encoder.")
    encoder_dropout: float = Field(0.0, ge=0, lt=1, description="p_tuning: dropout in the prompt encoder.")
    prompt_init_text: str | None = Field(
        None,
        description="prompt: initialise the virtual tokens from the embeddings of this text (repeated or cut to "
        "num_virtual_tokens) instead of random values.",
    )
    quantization: Literal["none", "8bit", "4bit"] = Field(
        "none",
        description="Load the frozen base quantized with bitsandbytes: '4bit' is QLoRA. Needs a CUDA GPU and "
        "the bitsandbytes package.",
    )
    quant_type: Literal["nf4", "fp4"] = Field("nf4", description="4bit: the 4-bit data type.")
    double_quant: bool = Field(True, description="4bit: quantize the quantization constants too (saves memory).")
    compute_dtype: Literal["bf16", "fp16", "fp32"] = Field(
        "bf16", description="4bit: dtype of the matrix products on the dequantized weights."
    )
