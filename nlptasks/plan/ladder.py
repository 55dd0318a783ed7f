"""The memory ladder: the classic sequence of memory savings, each rung adding one to the one
before, as ``--set`` overrides of the recipe (so every rung is an ordinary run)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nlptasks.recipe import Recipe

__all__ = ["Rung", "ladder"]


@dataclass(frozen=True)
class Rung:
    """One rung of the ladder: the recipe overrides that make it, and what it saves.

    :param name: a short id (``baseline``, ``accumulation`` ...).
    :param label: how the table shows it, e.g. ``+ gradient checkpointing``.
    :param targets: the memory it goes after (``activations``, ``optimizer states`` ...).
    :param overrides: ``KEY=VALUE`` strings, as for ``--set``, applied after the user's own.
    :param micro_batch: ``train.batch_size`` of the rung.
    :param accumulation: ``train.gradient_accumulation_steps`` of the rung.
    :param changes: how the rung changes the experiment, beyond speed ("" when it does not).
    """

    name: str
    label: str
    targets: str
    overrides: tuple[str, ...]
    micro_batch: int
    accumulation: int
    changes: str = ""


def ladder(recipe: Recipe, layers: int, device: str = "cpu", bitsandbytes: bool = False) -> list[Rung]:
    """The rungs for ``recipe``, whose model has ``layers`` transformer layers.

    :param device: ``cuda`` or ``cpu``: on CUDA with bitsandbytes installed the optimizer rung
        uses 8-bit AdamW instead of Adafactor.
    """
    batch = recipe.train.batch_size
    effective = batch * recipe.train.gradient_accumulation_steps
    length = recipe.model.max_length
    short = max(16, length // 4)
    # Rungs before LoRA train the whole model: a recipe with [peft] has it switched off there.
    no_peft = ("peft.method=none",) if recipe.peft is not None else ()
    accumulate = (*no_peft, "train.batch_size=1", f"train.gradient_accumulation_steps={effective}")
    checkpoint = (*accumulate, "optimize.gradient_checkpointing=true")
    eight_bit = device == "cuda" and bitsandbytes
    optimizer = "adamw_8bit" if eight_bit else "adafactor"
    cheap_optimizer = (*checkpoint, f"optimize.optimizer={optimizer}")
    freeze = (*cheap_optimizer, "optimize.freeze_embeddings=true", f"optimize.freeze_layers={layers}")
    shorter = (*freeze, f"model.max_length={short}")
    lora = (
        *(o for o in cheap_optimizer if o != "peft.method=none"),
        f"model.max_length={short}",
        "peft.method=lora",
    )
    qlora = (*lora, "peft.quantization=4bit")
    acc = f"bs1, ga{effective}"
    frozen_note = "only the head trains"
    cut_note = f"inputs cut to {short} tokens"
    return [
        Rung(
            "baseline",
            f"baseline (bs{batch}, ga{recipe.train.gradient_accumulation_steps}, len {length})",
            "-",
            no_peft,
            batch,
            recipe.train.gradient_accumulation_steps,
        ),
        Rung("accumulation", f"+ gradient accumulation ({acc})", "activations", accumulate, 1, effective),
        Rung("checkpointing", "+ gradient checkpointing", "activations", checkpoint, 1, effective),
        Rung(
            optimizer,
            "+ 8-bit AdamW" if eight_bit else "+ Adafactor",
            "optimizer states",
            cheap_optimizer,
            1,
            effective,
        ),
        Rung(
            "freeze",
            f"+ freeze the body ({layers} layer{'s' if layers != 1 else ''}, embeddings)",
            "gradients, optimizer states",
            freeze,
            1,
            effective,
            frozen_note,
        ),
        Rung("max_length", f"+ max length {short}", "activations", shorter, 1, effective, f"{frozen_note}; {cut_note}"),
        Rung(
            "lora",
            "LoRA instead of freezing",
            "gradients, optimizer states",
            lora,
            1,
            effective,
            f"adapter only; {cut_note}",
        ),
        Rung("qlora", "+ 4-bit base (QLoRA)", "weights", qlora, 1, effective, f"adapter only; {cut_note}"),
    ]


# ---------------------------------------------------------------------------------------------
# What the estimate reads from the model
# ---------------------------------------------------------------------------------------------
