"""The shared engine: generic step implementations and helpers that every task uses.

The engine knows no task by name.  Plugins use these helpers inside their hooks::

    from nlptasks.engine import get_tokenizer, load_model, load_trained_model, predict_logits
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_tokenizer", "load_model", "load_trained_model", "predict_logits"]


def __getattr__(name: str) -> Any:  # lazy: keep `import nlptasks.engine` cheap
    if name == "get_tokenizer":
        from nlptasks.engine.tokenization import get_tokenizer

        return get_tokenizer
    if name == "load_model":
        from nlptasks.engine.modeling import load_model

        return load_model
    if name == "load_trained_model":
        from nlptasks.engine.adapters import load_trained_model

        return load_trained_model
    if name == "predict_logits":
        from nlptasks.engine.inference import predict_logits

        return predict_logits
    raise AttributeError(name)
