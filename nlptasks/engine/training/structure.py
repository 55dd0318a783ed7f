"""Checks that need the model's structure but no weights: the architecture's kind against the head
the task builds, ``peft.target_modules`` against the model's module names, and the freezing
options against what is left to train.

One set of functions for both commands: ``nlptasks validate`` (and ``nlptasks run`` before it makes
its run folder) builds the model from its config alone on the meta device (no memory, no
weights): a ``[model.scratch]`` config, or a local folder's ``config.json`` (a hub id when its
config is in the cache); ``nlptasks run`` checks the model step 5 built with the same
:func:`model_problems` (a hub model whose config was not at hand before).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nlptasks.errors import Problem, did_you_mean

if TYPE_CHECKING:
    from nlptasks.recipe import LoadedRecipe, Recipe

__all__ = ["HEAD_CLASSES", "head_problems", "model_config", "model_problems", "structure_problems"]

# The auto class of the model a task's step 5 builds, by the peft task type the task declares.
HEAD_CLASSES = {
    "SEQ_CLS": "AutoModelForSequenceClassification",
    "TOKEN_CLS": "AutoModelForTokenClassification",
    "QUESTION_ANS": "AutoModelForQuestionAnswering",
    "CAUSAL_LM": "AutoModelForCausalLM",
    "FEATURE_EXTRACTION": "AutoModel",
    "SEQ_2_SEQ_LM": "AutoModelForSeq2SeqLM",
}
# Heads of an encoder-decoder that feed its decoder the input shifted right: they need the
# config's decoder_start_token_id, which a from-scratch T5 config does not have.
_DECODER_FED = ("SEQ_CLS", "QUESTION_ANS")
_ENCODERS = "an encoder such as 'bert', 'roberta' or 'distilbert', or a decoder such as 'gpt2', 'llama', 'qwen2'"


def model_config(recipe: Recipe) -> Any | None:
    """The model's transformers config without its weights, or ``None`` when it is not at hand
    (a hub id not in the cache, a config transformers cannot read: the run reports those)."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    m = recipe.model
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a stand-in vocabulary: token ids outside it are no news here
    try:
        if m.scratch is not None:
            from nlptasks.recipe.scratch import config_values

            s = m.scratch
            return AutoConfig.for_model(s.architecture, **config_values(s, max(s.vocab_size, 16), 0, m.max_length))
        if m.trust_remote_code:
            return None  # its code is not run by a check
        return AutoConfig.from_pretrained(m.name_or_path, revision=m.revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - not at hand, or not readable: the preflight and the run say why
        return None
    finally:
        hf_logging.set_verbosity(level)


def head_problems(config: Any, task: str, task_type: str | None, scratch: bool) -> list[Problem]:
    """The architecture's kind against the head of the task's declared peft task type."""
    from transformers.models.auto import modeling_auto as auto

    if task_type is None:
        return []
    kind = getattr(config, "model_type", None)
    key = "model.scratch.architecture" if scratch else "model.name_or_path"
    head = HEAD_CLASSES.get(task_type)
    if task_type in _DECODER_FED and getattr(config, "is_encoder_decoder", False):
        if getattr(config, "decoder_start_token_id", None) is None:
            return [
                Problem(
                    key,
                    f"{kind!r} is an encoder-decoder (its config has no decoder_start_token_id); task {task!r} "
                    f"builds a {task_type} head ({head}) on an encoder: use {_ENCODERS}",
                )
            ]
    names = {
        "SEQ_CLS": auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
        "TOKEN_CLS": auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES,
        "QUESTION_ANS": auto.MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES,
        "CAUSAL_LM": auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        "SEQ_2_SEQ_LM": auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    }.get(task_type)
    if names is None or kind not in auto.MODEL_MAPPING_NAMES or kind in names:
        return []
    some = ", ".join(repr(n) for n in list(names)[:6])
    return [
        Problem(key, f"{kind!r} has no {task_type} head ({head}), which task {task!r} builds: use one of {some}...")
    ]


def model_problems(model: Any, recipe: Recipe) -> list[Problem]:
    """``peft.target_modules`` and the freezing options against a built model (meta or real);
    the model is left as it was."""
    return _target_problems(model, recipe) + _freeze_problems(model, recipe)


def _target_problems(model: Any, recipe: Recipe) -> list[Problem]:
    import re

    cfg = recipe.peft
    if cfg is None or cfg.method not in ("lora", "ia3") or not cfg.target_modules:
        return []
    targets = cfg.target_modules
    names = [n for n, _ in model.named_modules() if n]
    if isinstance(targets, str):
        if targets == "all-linear" or any(re.fullmatch(targets, n) for n in names):
            return []
        wanted = [targets]
    else:
        if any(n == t or n.endswith("." + t) for n in names for t in targets):
            return []
        wanted = list(targets)
    short = sorted({n.rsplit(".", 1)[-1] for n in names})
    hint = "".join(did_you_mean(t, short) for t in wanted[:1])
    return [
        Problem(
            "peft.target_modules",
            f"{', '.join(repr(t) for t in wanted)} names no module of {type(model).__name__}{hint} "
            f"(module names end in: {', '.join(short[:24])}{', ...' if len(short) > 24 else ''})",
        )
    ]


def _freeze_problems(model: Any, recipe: Recipe) -> list[Problem]:
    from nlptasks.engine.training.optimize import freeze, transformer_layers

    opt = recipe.optimize
    if not opt.freezes():
        return []
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    try:
        freeze(model, opt)
        left = any(p.requires_grad for p in model.parameters())
    except Exception as exc:  # noqa: BLE001 - freeze's own RecipeError names its key
        problems = getattr(exc, "problems", None)
        return list(problems) if problems else []
    finally:
        for n, p in model.named_parameters():
            p.requires_grad_(before.get(n, True))
    if left:
        return []
    count = len(transformer_layers(model)[1])
    key = "optimize.freeze_layers" if opt.freeze_layers else "optimize"
    return [
        Problem(
            key,
            f"the freezing options freeze every parameter of {type(model).__name__} ({count} layers, its head tied "
            f"to the frozen embeddings or frozen too): nothing is left to train; freeze fewer layers "
            f"(--set optimize.freeze_layers={max(count - 1, 0)}) or fewer patterns (optimize.freeze)",
        )
    ]


def structure_problems(loaded: LoadedRecipe) -> list[Problem]:
    """Every check of this module that the model's config allows before any data is read."""
    recipe = loaded.recipe
    config = model_config(recipe)
    if config is None:
        return []
    task_type = loaded.task.peft_task_type_for(loaded.options)
    problems = head_problems(config, loaded.task.name, task_type, recipe.model.scratch is not None)
    needs_model = (recipe.peft is not None and recipe.peft.target_modules) or recipe.optimize.freezes()
    if problems or not needs_model:
        return problems
    import torch
    import transformers

    auto = getattr(transformers, HEAD_CLASSES.get(task_type or "", "AutoModel"))
    try:
        with torch.device("meta"):
            model = auto.from_config(config)
    except Exception:  # noqa: BLE001 - a model this class cannot build: the run's own class decides
        return []
    return model_problems(model, recipe)
