"""The plan of a recipe: steps 1 to 4, the model on the meta device, every rung's estimate; and
the rung to choose for a memory budget."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from nlptasks.errors import NlptasksError
from nlptasks.plan.estimate import Estimate, ModelShape, Settings, estimate, model_shape, settings_of
from nlptasks.plan.ladder import Rung, ladder

if TYPE_CHECKING:
    from nlptasks.host import Host
    from nlptasks.recipe import LoadedRecipe, Recipe

__all__ = ["Choice", "Plan", "PlanRow", "choose", "make_plan", "meta_model", "rung_model"]


@dataclass
class PlanRow:
    rung: Rung
    estimate: Estimate | None
    settings: Settings | None
    needs: str = ""  # why the rung cannot run on the target device ("" when it can)
    shape: ModelShape | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self.rung),
            "overrides": list(self.rung.overrides),
            "estimate": self.estimate.to_json() if self.estimate else None,
            "needs": self.needs or None,
        }


@dataclass
class Plan:
    recipe: str
    device: str
    model_class: str
    rows: list[PlanRow]
    effective_batch: int
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "device": self.device,
            "model_class": self.model_class,
            "effective_batch": self.effective_batch,
            "rungs": [row.to_json() for row in self.rows],
            "notes": self.notes,
        }


def _needs(recipe: Recipe, cuda: bool, bitsandbytes: bool) -> str:
    """Why a rung cannot run on the target machine, shortly ("" when it can)."""
    from nlptasks.engine.system.machine import machine_problems

    problems = machine_problems(recipe, cuda=cuda, bitsandbytes=bitsandbytes)
    reasons: list[str] = []
    for p in problems:
        text = p.message
        if "CUDA" in text and not cuda and "CUDA" not in reasons:
            reasons.append("CUDA")
        if "bitsandbytes" in text and not bitsandbytes and "bitsandbytes" not in reasons:
            reasons.append("bitsandbytes")
        if "pretrained base" in text:
            reasons.append("a pretrained base")
    if problems and not reasons:
        return f"cannot run here: {problems[0].where}: {problems[0].message}"
    return "needs " + ", ".join(reasons) if reasons else ""


def meta_model(ctx: Any, host: Host, loaded: LoadedRecipe) -> Any:
    """Step 5 of the recipe on the meta device, after steps 1 to 4 prepared ``ctx``.

    A plugin that builds its model without :func:`~nlptasks.engine.model.modeling.load_model` still
    builds it inside ``torch.device("meta")``.
    """
    import torch

    from nlptasks.engine.model.modeling import ON_META

    ctx.state[ON_META] = True
    hooks = host.hooks_for(loaded.task)
    with torch.device("meta"):
        model = hooks.nlptasks_build_model(ctx=ctx)
    if model is None:
        raise NlptasksError(f"step 5 built no model for task {loaded.task.name!r}")
    return model


def rung_model(ctx: Any, base: Any, loaded: LoadedRecipe) -> Any:
    """A copy of the meta ``base`` model with the rung's freezing and adapter applied, by the
    engine's own code (``prepare_model``; peft's ``get_peft_model`` with the run's config)."""
    import logging

    from nlptasks.engine.training.optimize import prepare_model

    model = copy.deepcopy(base)
    ctx.recipe, ctx.options = loaded.recipe, loaded.options
    level = ctx.log.level
    ctx.log.setLevel(logging.WARNING)  # the freezing log line of every rung is noise here
    try:
        model = prepare_model(ctx, model)
    finally:
        ctx.log.setLevel(level)
    peft = loaded.recipe.peft
    if peft is not None:
        from peft import get_peft_model

        from nlptasks.engine.model.peft import peft_config, quiet_peft

        task_type = loaded.task.peft_task_type_for(loaded.options)
        with quiet_peft():
            model = get_peft_model(model, peft_config(ctx, model, task_type))
    return model


def make_plan(
    path: str, overrides: list[str], device: str | None = None, rungs: list[str] | None = None, nproc: int = 1
) -> Plan:
    """The ladder of the recipe at ``path`` (with ``overrides``) and an estimate for every rung.

    :param device: ``cuda`` or ``cpu`` (default: this machine's).
    :param rungs: only these rung names (default: all).
    :param nproc: processes of the run: with ``train.extra.fsdp``, the ranks FSDP shards over
        (the estimate is per rank).
    """
    import torch

    from nlptasks.pipeline import get_host, load_recipe, prepared

    here = "cuda" if torch.cuda.is_available() else "cpu"
    device = device or here
    bitsandbytes = importlib.util.find_spec("bitsandbytes") is not None
    host = get_host()
    loaded = load_recipe(path, overrides, host=host)
    with prepared(loaded, host) as (ctx, _):
        base = meta_model(ctx, host, loaded)
        layers = model_shape(base).layers
        if not layers:
            raise NlptasksError(f"{type(base).__name__}: no stack of transformer layers found; the ladder needs one")
        # a head with outputs per token (tags, answer positions, next tokens): the task's own word
        per_token = any(kind != "example" for kind in loaded.task.label_fields_for(loaded.options).values())
        rows = []
        notes = list(loaded.notes)
        for rung in ladder(loaded.recipe, layers, device, bitsandbytes):
            if rungs and rung.name not in rungs:
                continue
            try:
                rung_loaded = load_recipe(path, [*overrides, *rung.overrides], host=host)
            except NlptasksError as exc:
                rows.append(PlanRow(rung, None, None, needs=exc.render().splitlines()[0]))
                continue
            needs = _needs(rung_loaded.recipe, cuda=device == "cuda", bitsandbytes=bitsandbytes)
            try:
                model = rung_model(ctx, base, rung_loaded)
            except NlptasksError as exc:
                rows.append(PlanRow(rung, None, None, needs=exc.render().splitlines()[0]))
                continue
            shape = model_shape(model, head_per_token=per_token)
            settings = settings_of(rung_loaded.recipe, device, nproc)
            rows.append(PlanRow(rung, estimate(shape, settings), settings, needs, shape))
    effective = loaded.recipe.train.batch_size * loaded.recipe.train.gradient_accumulation_steps
    return Plan(str(path), device, model_shape(base).model_class, rows, effective, notes)


# ---------------------------------------------------------------------------------------------
# Choosing a rung for a budget
# ---------------------------------------------------------------------------------------------


@dataclass
class Choice:
    row: PlanRow
    micro_batch: int
    accumulation: int
    estimate: Estimate

    def overrides(self) -> list[str]:
        sets = [
            o
            for o in self.row.rung.overrides
            if not o.startswith(("train.batch_size=", "train.gradient_accumulation_steps="))
        ]
        if self.row.rung.name != "baseline" or self.micro_batch != self.row.rung.micro_batch:
            sets += [f"train.batch_size={self.micro_batch}", f"train.gradient_accumulation_steps={self.accumulation}"]
        return sets


def choose(plan: Plan, budget: int) -> Choice | None:
    """The first rung (ladder order: the fastest) whose estimate fits ``budget`` bytes and that can
    run on the plan's device; for rungs with accumulation, the largest micro-batch that still fits
    (a divisor of the effective batch, so the effective batch stays the same)."""
    for row in plan.rows:
        if row.estimate is None or row.needs or row.shape is None or row.settings is None:
            continue
        if row.estimate.total > budget:
            continue
        if row.rung.name == "baseline":
            return Choice(row, row.rung.micro_batch, row.rung.accumulation, row.estimate)
        effective = row.rung.micro_batch * row.rung.accumulation
        for micro in sorted((d for d in range(1, effective + 1) if effective % d == 0), reverse=True):
            s = dataclasses.replace(row.settings, micro_batch=micro, accumulation=effective // micro)
            est = estimate(row.shape, s)
            if est.total <= budget:
                return Choice(row, micro, effective // micro, est)
    return None
