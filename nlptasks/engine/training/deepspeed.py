"""DeepSpeed's config as the engine passes it to the Trainer (``train.zero`` or
``train.extra.deepspeed``): completed with what the TrainingArguments decide."""

from __future__ import annotations

from typing import Any

from nlptasks.errors import Problem, RecipeError

__all__ = ["deepspeed_config"]

# transformers fills these from the TrainingArguments only where the config says "auto": a missing
# batch size stops deepspeed.initialize, a missing gradient_clipping turns clipping off, a missing
# precision section trains in fp32 whatever train.precision says
_DEEPSPEED_AUTO = {
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "fp16": {"enabled": "auto"},
}
_GATHER = "stage3_gather_16bit_weights_on_model_save"


def deepspeed_config(value: Any) -> dict[str, Any]:
    """A DeepSpeed config (a table, or a JSON file's path) with what the TrainingArguments decide set
    to ``"auto"`` where it is missing, and under ZeRO-3 the weights gathered for the run's
    ``model.safetensors`` (transformers otherwise saves only ZeRO's shards, and the run would hold
    no model that loads)."""
    import json
    from pathlib import Path

    if isinstance(value, (str, Path)):
        try:
            config = json.loads(Path(value).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RecipeError(
                "recipe", [Problem("train.extra.deepspeed", f"{value}: not a readable JSON file ({exc})")]
            ) from None
    else:
        config = json.loads(json.dumps(value))  # a deep copy of the recipe's table
    if not isinstance(config, dict):
        raise RecipeError("recipe", [Problem("train.extra.deepspeed", "a DeepSpeed config is a table (JSON object)")])
    for key, default in _DEEPSPEED_AUTO.items():
        config.setdefault(key, default)
    zero = config.get("zero_optimization") or {}
    if zero.get("stage") == 3:
        if zero.get(_GATHER) is False:
            raise RecipeError(
                "recipe",
                [
                    Problem(
                        f"train.extra.deepspeed.zero_optimization.{_GATHER}",
                        "false leaves the run without model.safetensors (only ZeRO's shards); remove it",
                    )
                ],
            )
        config["zero_optimization"] = {**zero, _GATHER: True}
    return config
