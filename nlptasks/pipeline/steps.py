"""Steps 1 to 4, once for everyone: ``nlptasks run``, ``check``, ``inspect-batch`` and ``plan``
all go through :func:`steps_1_to_4`; the commands that do not train run it in a throw-away folder
that is removed afterwards (:func:`prepared`, :func:`scratch_context`).  Also the recipe loader
with the process's plugin host.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from nlptasks.context import RunContext
from nlptasks.host import Host, get_host
from nlptasks.recipe import LoadedRecipe
from nlptasks.recipe import load_recipe as _load_with

__all__ = ["get_host", "library_progress_bars", "load_recipe", "prepared", "scratch_context", "steps_1_to_4"]


def load_recipe(
    path: str | Path | None,
    overrides: Iterable[str] = (),
    host: Host | None = None,
    raw: dict[str, Any] | None = None,
    check_files: bool = True,
) -> LoadedRecipe:
    """:func:`nlptasks.recipe.load_recipe` with the process's plugin host (or ``host``): read,
    override and validate a recipe, raising a :class:`~nlptasks.errors.RecipeError` that lists
    every problem."""
    return _load_with(path, overrides, host=host or get_host(), raw=raw, check_files=check_files)


@contextlib.contextmanager
def library_progress_bars(enabled: bool) -> Iterator[None]:
    """Show or hide the library bars (datasets' tokenizing, transformers' saving) for a while."""
    import datasets
    from transformers.utils import logging as hf_logging

    switches = [
        (datasets.is_progress_bar_enabled(), datasets.enable_progress_bars, datasets.disable_progress_bars),
        (hf_logging.is_progress_bar_enabled(), hf_logging.enable_progress_bar, hf_logging.disable_progress_bar),
    ]
    for _, enable, disable in switches:
        (enable if enabled else disable)()
    try:
        yield
    finally:
        for was, enable, disable in switches:
            (enable if was else disable)()


def steps_1_to_4(ctx: RunContext, hooks: Any, until: int = 4, after_setup: Callable[[], None] | None = None) -> Any:
    """Setup, load, split and (with ``until=4``) preprocess; the data after the last step.

    Records the sources, row counts and (after step 4) example counts in ``ctx.manifest["data"]``.
    ``after_setup`` runs right after step 1 (``nlptasks run`` writes its run state there).
    """
    hooks.nlptasks_setup(ctx=ctx)  # 1
    if after_setup is not None:
        after_setup()
    raw = hooks.nlptasks_load_data(ctx=ctx)  # 2
    data = hooks.nlptasks_split(ctx=ctx, data=raw)  # 3
    ctx.manifest["data"] = {"sources": dict(ctx.sources), "rows": {split: len(ds) for split, ds in data.items()}}
    if until < 4:
        return data
    data = hooks.nlptasks_preprocess(ctx=ctx, data=data)  # 4
    ctx.manifest["data"]["examples"] = {split: len(ds) for split, ds in data.items()}
    return data


@contextlib.contextmanager
def scratch_context(loaded: LoadedRecipe, prefix: str = "nlptasks-") -> Iterator[RunContext]:
    """A :class:`RunContext` whose output folder is a temporary one, removed on leaving."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=Path(tmp) / "run")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def prepared(loaded: LoadedRecipe, host: Host | None = None, until: int = 4) -> Iterator[tuple[RunContext, Any]]:
    """``with prepared(loaded) as (ctx, data):`` steps 1 to ``until`` in a throw-away folder (no
    model, no training), removed when the block ends."""
    host = host or get_host()
    model = loaded.recipe.model
    if model.name_or_path and model.trust_remote_code:  # the tokenizer runs remote code too, when allowed
        from nlptasks.engine.model.modeling import warn_remote_code

        warn_remote_code(logging.getLogger("nlptasks"), model.name_or_path, True)
    with scratch_context(loaded) as ctx, library_progress_bars(False):
        yield ctx, steps_1_to_4(ctx, host.hooks_for(loaded.task), until)
