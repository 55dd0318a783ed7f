"""``nlptasks validate RECIPE`` beyond the recipe itself: what a run checks before it reads data
(libraries, ``config.json``, memory), and what this machine cannot run, as notes."""

from __future__ import annotations

from nlptasks.engine.system.machine import check_machine, machine_problems
from nlptasks.engine.training.preflight import check_preflight
from nlptasks.errors import RecipeError
from nlptasks.recipe import LoadedRecipe

__all__ = ["machine_notes", "preflight"]


def preflight(loaded: LoadedRecipe) -> None:
    """What ``nlptasks run`` checks before it reads any data; raises what it would raise."""
    check_preflight(loaded)


def machine_notes(loaded: LoadedRecipe) -> list[str]:
    """A valid recipe may still ask for what this machine lacks (a CUDA GPU, bitsandbytes): the
    lines saying so, with the settings that run here, as ``run`` would refuse it at start."""
    if not machine_problems(loaded.recipe, cuda=False, bitsandbytes=False):
        return []  # asks for nothing machine-specific: no need to load torch to find out
    try:
        check_machine(loaded.recipe, str(loaded.path))
    except RecipeError as exc:
        notes = ["valid, but `nlptasks run` refuses it on this machine:"]
        notes += [f"  {problem}" for problem in exc.problems]
        if exc.hint:
            notes.append(exc.hint)
        return notes
    return []
