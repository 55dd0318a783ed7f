"""The ``[optimize]`` table applied: freezing, attention, the optimizer for this machine, OOM fallback.

Everything here maps onto transformers' own features (docs/optimize.md); the ``TrainingArguments``
keys of ``[optimize]`` are rows of the one recipe → arguments mapping
(:mod:`nlptasks.recipe.arguments`):

- ``gradient_checkpointing`` → ``TrainingArguments.activation_checkpointing`` (the 5.x name of
  ``gradient_checkpointing``) with ``use_cache = False``;
- ``optimizer`` → ``TrainingArguments.optim`` (``auto``: :func:`resolve_optimizer`); ``tf32`` → ``tf32``; ``compile`` → ``torch_compile``;
- ``attention`` → the model's ``set_attn_implementation``;
- freezing sets ``requires_grad = False``; Trainer builds its optimizer from the parameters that
  still require gradients, so frozen ones never reach it;
- the OOM fallback (:func:`train_with_oom_fallback`) wraps step 9.

Nothing here names a task or an architecture: the transformer layers are found as the largest
``nn.ModuleList`` of identical blocks inside the model's base.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from nlptasks.errors import NlptasksError, Problem, RecipeError, first_line

if TYPE_CHECKING:
    from nlptasks.context import RunContext
    from nlptasks.recipe import OptimizeConfig

__all__ = [
    "body_of",
    "embedding_modules",
    "freeze",
    "is_oom",
    "prepare_model",
    "resolve_optimizer",
    "set_attention",
    "train_with_oom_fallback",
    "transformer_layers",
]


def resolve_optimizer(name: str, device: str | None = None) -> str:
    """``optimize.optimizer`` as TrainingArguments takes it: ``auto`` is ``adamw_torch_fused`` where
    torch runs its fused AdamW on ``device`` (``cuda``, or ``cpu`` since torch 2.4; default: this
    machine's training device), else ``adamw_torch``.  Both compute the same AdamW update (to
    rounding); the fused kernel trains MiniLM on SST-2 faster on our CPUs (docs/benchmarks.md,
    "Defaults vs defaults")."""
    if name != "auto":
        return name
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        return "adamw_torch_fused"
    try:  # torch builds without the CPU kernel refuse it here
        weight = torch.zeros(1, requires_grad=True)
        weight.grad = torch.zeros(1)
        torch.optim.AdamW([weight], fused=True).step()
    except (RuntimeError, TypeError, ValueError):
        return "adamw_torch"
    return "adamw_torch_fused"


# ---------------------------------------------------------------------------------------------
# The model: attention and freezing (right after step 5)
# ---------------------------------------------------------------------------------------------


def prepare_model(ctx: RunContext, model: Any, training: bool = True) -> Any:
    """Apply ``optimize.attention`` and (when ``training``) the freezing options to step 5's model;
    log and record the frozen and trainable parameter counts.  A model that is not a transformers
    model (an ONNX export evaluated by ``nlptasks eval``) has no attention to choose."""
    opt = ctx.recipe.optimize
    if opt.attention != "auto" and (training or hasattr(model, "set_attn_implementation")):
        set_attention(model, opt.attention)
    ctx.manifest["attention"] = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if training and opt.freezes():
        frozen = freeze(model, opt)
        total = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if trainable == 0:
            raise RecipeError(
                "recipe",
                [Problem("optimize", "the freezing options freeze every parameter: nothing is left to train")],
                hint="Freeze fewer layers (optimize.freeze_layers) or fewer patterns (optimize.freeze).",
            )
        ctx.log.info(
            "freezing: %s frozen, %s trainable of %s parameters (%s)",
            f"{total - trainable:,}",
            f"{trainable:,}",
            f"{total:,}",
            "; ".join(frozen),
        )
        ctx.manifest["freezing"] = {
            "frozen_parameters": total - trainable,
            "trainable_parameters": trainable,
            "total_parameters": total,
            "frozen": frozen,
        }
    return model


def set_attention(model: Any, implementation: str) -> None:
    """``model.set_attn_implementation``; an error naming ``optimize.attention`` when the model
    cannot switch (transformers only warns)."""
    try:
        model.set_attn_implementation(implementation)
    except (ValueError, ImportError, AttributeError) as exc:
        first = first_line(exc)
        raise RecipeError(
            "recipe", [Problem("optimize.attention", f"{type(model).__name__} cannot use {implementation!r}: {first}")]
        ) from None
    if model.config._attn_implementation != implementation:
        raise RecipeError(
            "recipe",
            [
                Problem(
                    "optimize.attention",
                    f"{type(model).__name__} cannot switch to {implementation!r} (it stays "
                    f"{model.config._attn_implementation!r}); use 'auto'",
                )
            ],
        )


def body_of(model: Any) -> tuple[str, Any]:
    """The model's base (``bert`` in a BERT classifier, ``model`` in a causal LM) and its name;
    the model itself when it is a bare base."""
    base = getattr(model, "base_model", model)
    for name, module in model.named_modules():
        if module is base:
            return name, module
    return "", model


def transformer_layers(model: Any) -> tuple[str, list[Any]]:
    """The model's stack of transformer layers, found generically: the ``nn.ModuleList`` inside
    the base whose identical blocks hold the most parameters.  ``("", [])`` when there is none."""
    import torch.nn as nn

    prefix, body = body_of(model)
    best: tuple[int, str, list[Any]] = (0, "", [])
    for name, module in body.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        if len({type(block) for block in module}) != 1:
            continue
        size = sum(p.numel() for p in module.parameters())
        if size > best[0]:
            full = f"{prefix}.{name}" if prefix and name else (prefix or name)
            best = (size, full, list(module))
    return best[1], best[2]


def embedding_modules(model: Any) -> list[tuple[str, Any]]:
    """The embedding layer(s), by name: the block that holds the input embeddings when its name
    says it is one (BERT's ``embeddings``, with its position embeddings and LayerNorm), and every
    other ``nn.Embedding`` of the base."""
    import torch.nn as nn

    _, body = body_of(model)
    names = {id(m): n for n, m in model.named_modules()}
    found: list[tuple[str, Any]] = []
    inputs = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if inputs is not None and id(inputs) in names and "." in names[id(inputs)]:
        parent = names[id(inputs)].rsplit(".", 1)[0]
        if "embed" in parent.rsplit(".", 1)[-1].lower():
            found.append((parent, model.get_submodule(parent)))
    for module in body.modules():
        if isinstance(module, nn.Embedding):
            name = names[id(module)]
            if not any(name.startswith(block + ".") for block, _ in found):
                found.append((name, module))
    return found


def freeze(model: Any, opt: OptimizeConfig) -> list[str]:
    """Set ``requires_grad = False`` as ``[optimize]`` says; return what was frozen, in words."""
    done: list[str] = []
    if opt.freeze_embeddings:
        modules = embedding_modules(model)
        if not modules:
            raise RecipeError(
                "recipe", [Problem("optimize.freeze_embeddings", f"{type(model).__name__} has no embedding layer")]
            )
        for _, module in modules:
            module.requires_grad_(False)
        done.append("embeddings " + ", ".join(n for n, _ in modules))
    if opt.freeze_layers:
        name, layers = transformer_layers(model)
        if not layers:
            raise RecipeError(
                "recipe",
                [Problem("optimize.freeze_layers", f"no stack of transformer layers found in {type(model).__name__}")],
            )
        if opt.freeze_layers >= len(layers):
            body_name, body = body_of(model)
            body.requires_grad_(False)
            done.append(f"the whole body {body_name or type(model).__name__} ({len(layers)} layers and embeddings)")
        else:
            for layer in layers[: opt.freeze_layers]:
                layer.requires_grad_(False)
            first = "layer 0" if opt.freeze_layers == 1 else f"layers 0-{opt.freeze_layers - 1}"
            done.append(f"{first} of {len(layers)} ({name})")
    for pattern in opt.freeze:
        regex = re.compile(pattern)
        hits = [(n, p) for n, p in model.named_parameters() if regex.search(n)]
        if not hits:
            sample = ", ".join(n for n, _ in list(model.named_parameters())[:3])
            raise RecipeError(
                "recipe",
                [Problem("optimize.freeze", f"{pattern!r} matches no parameter name (names look like: {sample}, ...)")],
            )
        for _, p in hits:
            p.requires_grad_(False)
        done.append(f"{pattern!r} ({len(hits)} tensors)")
    return done


# ---------------------------------------------------------------------------------------------
# OOM fallback (step 9)
# ---------------------------------------------------------------------------------------------


def is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError)


def train_with_oom_fallback(
    ctx: RunContext, build: Any, train: Any, kwargs: dict[str, Any], world_size: int = 1
) -> tuple[dict[str, Any], Any]:
    """Run step 9 (``train(trainer)``) on the trainer ``build(kwargs)`` makes; on CUDA out of
    memory during training halve the per-device batch, double the accumulation (the effective
    batch stays) and start again from the weights the model had before training.

    Each change is recorded in ``ctx.manifest["oom_fallback"]``.  Off with
    ``optimize.oom_fallback = false`` and in distributed runs (one rank cannot retry alone).
    The trainable weights are copied to the host before training when the model is on a GPU;
    without that copy a fallback is possible only before the first optimizer step (weights
    untouched).
    """
    import gc

    import torch

    enabled = ctx.recipe.optimize.oom_fallback and world_size == 1
    derived_eval_batch = ctx.recipe.train.eval_batch_size is None
    trainer = build(kwargs)
    model = trainer.model
    snapshot = None
    if enabled and any(p.is_cuda for p in model.parameters()):
        # only what training changes: the trainable parameters (frozen and quantized weights stay as they are)
        snapshot = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad}
    while True:
        phase = _Phase()
        trainer.add_callback(phase)
        failure = None
        try:
            return train(trainer), trainer
        except Exception as exc:  # noqa: BLE001 - only OOM is handled, the rest re-raised
            if not is_oom(exc):
                raise
            failure = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        step = trainer.state.global_step
        batch, accumulation = trainer.args.per_device_train_batch_size, trainer.args.gradient_accumulation_steps
        if not phase.training:
            raise NlptasksError(
                f"evaluation: out of GPU memory ({failure})",
                hint=f"Evaluate in smaller batches: --set train.eval_batch_size={max(1, trainer.args.per_device_eval_batch_size // 2)}",
            )
        if not enabled:
            why = "optimize.oom_fallback is off" if world_size == 1 else "no fallback in a distributed run"
            raise NlptasksError(
                f"train: out of GPU memory at step {step} with train.batch_size {batch} ({failure}; {why})",
                hint=f"Re-run with --set train.batch_size={max(1, batch // 2)} "
                f"--set train.gradient_accumulation_steps={accumulation * 2}, or see docs/optimize.md.",
            )
        if batch == 1:
            raise NlptasksError(
                f"train: out of GPU memory with train.batch_size 1 ({failure})",
                hint="Save memory with --set optimize.gradient_checkpointing=true, a shorter model.max_length, "
                "freezing or [peft] (see docs/optimize.md).",
            )
        if step > 0 and snapshot is None:
            raise NlptasksError(
                f"train: out of GPU memory at step {step}, after the weights changed ({failure}); "
                "cannot fall back without a copy of the initial weights (kept only for a model on a GPU)",
                hint=f"Re-run with --set train.batch_size={batch // 2} "
                f"--set train.gradient_accumulation_steps={accumulation * 2}.",
            )
        change = {
            "at_step": step,
            "error": failure,
            "batch_size": [batch, batch // 2],
            "gradient_accumulation_steps": [accumulation, accumulation * 2],
        }
        kwargs = {**kwargs, "per_device_train_batch_size": batch // 2, "gradient_accumulation_steps": accumulation * 2}
        if derived_eval_batch:  # train.eval_batch_size unset: it follows the training batch (2 x)
            eval_batch = trainer.args.per_device_eval_batch_size
            kwargs["per_device_eval_batch_size"] = max(1, eval_batch // 2)
            change["eval_batch_size"] = [eval_batch, kwargs["per_device_eval_batch_size"]]
        ctx.manifest.setdefault("oom_fallback", []).append(change)
        ctx.log.warning(
            "out of memory at step %d: train.batch_size %d → %d, gradient_accumulation_steps %d → %d "
            "(same effective batch %d); training starts again",
            step,
            batch,
            batch // 2,
            accumulation,
            accumulation * 2,
            batch * accumulation,
        )
        model.zero_grad(set_to_none=True)
        trainer.optimizer = trainer.lr_scheduler = None
        del trainer
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if snapshot is not None:
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if name in snapshot:
                        param.copy_(snapshot[name])
        trainer = build(kwargs)


def _Phase() -> Any:  # noqa: N802 - a TrainerCallback made on demand (transformers imported lazily)
    """A callback that knows whether ``trainer.train()`` is running (an OOM there is the training
    batch's; after it, evaluation's)."""
    from transformers import TrainerCallback

    class Phase(TrainerCallback):
        training = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.training = True

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.training = False

    return Phase()
