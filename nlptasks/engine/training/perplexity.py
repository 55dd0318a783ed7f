"""The language-model tasks' metric: perplexity beside every evaluation loss (``sft``, ``mlm``)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["perplexity_trainer"]


def perplexity_trainer(base: Any = None) -> Any:
    """A subclass of ``base`` (default ``transformers.Trainer``) that adds ``eval_perplexity`` /
    ``test_perplexity`` (``exp`` of the mean loss, capped at ``exp(50)``) beside each evaluation
    loss it logs, and so to what ``evaluate`` returns: the language-model tasks' metric.
    ``build_trainer(perplexity_trainer(), ctx, ...)``."""
    from transformers import Trainer

    class PerplexityTrainer(base or Trainer):  # type: ignore[misc]
        def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
            for prefix in ("eval", "test"):
                loss = logs.get(f"{prefix}_loss")
                if isinstance(loss, float):
                    logs[f"{prefix}_perplexity"] = math.exp(min(loss, 50.0))
            super().log(logs, *args, **kwargs)

    return PerplexityTrainer
