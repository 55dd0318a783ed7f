"""What a ``[peft]`` adapter targets and saves besides its own weights: the modules LoRA and IA3
adapt when the recipe names none, IA3's feed-forward modules, and the head of a plugin's own
model class (which peft's task-type wrappers do not know to train)."""

from __future__ import annotations

from typing import Any

__all__ = ["backbone_targets", "ia3_modules", "own_head", "peft_model_type"]


def peft_model_type(model: Any) -> str | None:
    """The model type peft's default target modules are looked up by: the model's own, or for a
    plugin's own class (a model type peft does not know) its encoder's, under ``base_model_prefix``."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as KNOWN

    own = getattr(model.config, "model_type", None)
    if own in KNOWN:
        return own
    backbone = getattr(model, getattr(model, "base_model_prefix", "") or "", None)
    return getattr(getattr(backbone, "config", None), "model_type", None) or own


def backbone_targets(model: Any, method: str) -> list[str] | None:
    """peft's default target modules for a plugin's own class, from its encoder's model type (peft
    finds none for the class's own type and asks for ``target_modules``); ``None``: peft's own default."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING as IA3
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as LORA

    table = LORA if method == "lora" else IA3
    kind = peft_model_type(model)
    if getattr(model.config, "model_type", None) in table or kind not in table:
        return None
    return list(table[kind])


def ia3_modules(model: Any, target: Any, feedforward: Any) -> tuple[Any, Any]:
    """IA3's target and feed-forward modules, so that the adapter peft saves loads again.

    peft trains an adapter whose feed-forward modules are not among its target modules, then
    refuses to load it ("feedforward_modules should be a subset of target_modules"): with a list of
    targets and no feed-forward modules given, its defaults for the architecture are kept only where
    they are targets.  ``"all-linear"`` is spelled out in full module names, with the feed-forward
    layers among them (peft would take its defaults as short names, ``down_proj``, again not a
    subset).
    """
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING as FEEDFORWARD

    if isinstance(target, list) and feedforward is None:
        default = FEEDFORWARD.get(peft_model_type(model))
        default = [default] if isinstance(default, str) else list(default or [])
        return target, [f for f in default if f in target]
    if not (isinstance(target, str) and target.lower() == "all-linear"):
        return target, feedforward
    import peft as p
    from peft.tuners.tuners_utils import _maybe_include_all_linear_layers

    probe = p.LoraConfig(target_modules="all-linear")  # the same resolution peft does for every method
    names = sorted(_maybe_include_all_linear_layers(probe, model).target_modules)
    short = feedforward if feedforward is not None else FEEDFORWARD.get(peft_model_type(model))
    if short is None:
        return names, None  # peft names the missing feedforward_modules itself
    short = [short] if isinstance(short, str) else list(short)
    full = [n for n in names if any(n == f or n.endswith("." + f) for f in short)]
    return names, full


def own_head(model: Any) -> list[str]:
    """The head of a plugin's own model class (one transformers does not export): its top-level
    modules with weights other than the encoder its ``base_model_prefix`` names.  peft's task-type
    wrappers train and save the heads they know by name (``classifier``, ``score``...); a plugin's
    head would otherwise stay frozen at its random start.  ``[]`` for a transformers class, or a
    class without an encoder under ``base_model_prefix``."""
    from nlptasks.engine.model.classes import is_transformers_class

    if is_transformers_class(type(model)):
        return []
    prefix = getattr(model, "base_model_prefix", "") or ""
    children = dict(model.named_children())
    if prefix not in children:
        return []
    return [n for n, m in children.items() if n != prefix and any(True for _ in m.parameters())]
