"""The model a ``dpo`` run starts from: an ``sft`` (or ``dpo``) run of ours, its adapter merged
into its base, or any causal LM by name; and, for an adapter-less run, its frozen reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nlptasks.plugin import DataError, Problem, RecipeError, RunContext, load_model, load_trained_model

__all__ = ["load_start", "reference_of_run", "start_manifest"]


def start_manifest(name_or_path: str | None) -> dict[str, Any] | None:
    """The ``nlptasks.json`` of ``model.name_or_path`` when it is a run folder of ours."""
    if not name_or_path:
        return None
    path = Path(name_or_path) / "nlptasks.json"
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the starting run's manifest: {exc}", path=str(path)) from None
    if manifest.get("task") not in ("sft", "dpo"):
        raise RecipeError(
            "recipe",
            [
                Problem(
                    "model.name_or_path",
                    f"{name_or_path} is a {manifest.get('task')!r} run; dpo starts from an sft or dpo run (a chat "
                    "model), or from any causal LM",
                )
            ],
        )
    return manifest


def load_start(ctx: RunContext) -> Any:
    """The starting model: a run's model (an adapter merged into its base), else
    ``model.name_or_path`` as a causal LM."""
    name = ctx.recipe.model.name_or_path
    manifest = start_manifest(name)
    if manifest is None:
        return load_model(ctx, "AutoModelForCausalLM")
    model = _run_model(name, manifest)
    ctx.log.info("starting from run %s (%s)", name, type(model).__name__)
    return model


def _run_model(name: str, manifest: dict[str, Any]) -> Any:
    """A run's model as dpo uses it, for training and for ``eval`` alike: an adapter merged into its
    base, and a packed sft run's segment attention replaced by sdpa (pairs are padded, not packed)."""
    model = load_trained_model(name, manifest, "AutoModelForCausalLM")
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    if getattr(model.config, "_attn_implementation", "") not in ("eager", "sdpa"):
        model.set_attn_implementation("sdpa")
    return model


def reference_of_run(ctx: RunContext) -> Any:
    """nlptasks eval of a full (adapter-less) dpo run: its starting model, as the run recorded it."""
    name = (ctx.trained_manifest or {}).get("reference")
    if not name:
        raise DataError("the run does not record the model it started from (its 'reference')")
    manifest = start_manifest(name)
    if manifest is None:
        from transformers import AutoModelForCausalLM

        try:
            return AutoModelForCausalLM.from_pretrained(name)
        except OSError as exc:
            raise DataError(
                f"the run's reference, the model it started from ({name}), cannot be loaded: {str(exc).splitlines()[0]}",
                hint="A full (adapter-less) dpo run is scored against its start: keep that folder where it was.",
            ) from None
    return _run_model(name, manifest)  # as the run loaded it: the same attention, the same merge
