"""``nlptasks validate RECIPE`` beyond the recipe itself: what a run checks before it reads data
(libraries, ``config.json``, memory), and what this machine cannot run, as notes."""

from __future__ import annotations

from nlptasks.engine.system.machine import check_machine, deepspeed_problems, machine_problems
from nlptasks.engine.training.preflight import check_preflight
from nlptasks.errors import RecipeError
from nlptasks.recipe import LoadedRecipe

__all__ = ["check_launch", "machine_notes", "preflight"]


def preflight(loaded: LoadedRecipe) -> None:
    """What ``nlptasks run`` checks before it reads any data; raises what it would raise."""
    check_preflight(loaded)


def check_launch(loaded: LoadedRecipe, nproc: int | None) -> None:
    """Refuse what the distributed keys need and the command does not give: DeepSpeed (``train.zero``,
    ``train.extra.deepspeed``) without ``--nproc`` (its processes are a distributed launch's), or
    without its package (and, on CPU processes, a C++ compiler).  ``validate`` and ``run --nproc``
    (before torchrun starts N processes that would each fail) call it."""
    recipe = loaded.recipe
    if recipe.train.zero is None and not recipe.train.extra.get("deepspeed"):
        return
    import torch

    problems = deepspeed_problems(recipe, cuda=torch.cuda.is_available(), launched=nproc is not None)
    if problems:
        raise RecipeError(str(loaded.path or "<recipe>"), problems, hint="docs/optimize.md#deepspeed-zero")


def machine_notes(loaded: LoadedRecipe, launched: bool | None = None) -> list[str]:
    """A valid recipe may still ask for what this machine lacks (a CUDA GPU, bitsandbytes): the
    lines saying so, with the settings that run here, as ``run`` would refuse it at start."""
    if not machine_problems(loaded.recipe, cuda=False, bitsandbytes=False, launched=True):
        return []  # asks for nothing machine-specific: no need to load torch to find out
    try:
        check_machine(loaded.recipe, str(loaded.path), launched=launched)
    except RecipeError as exc:
        notes = ["valid, but `nlptasks run` refuses it on this machine:"]
        notes += [f"  {problem}" for problem in exc.problems]
        if exc.hint:
            notes.append(exc.hint)
        return notes
    return []
