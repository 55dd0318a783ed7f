"""The runs a server serves: their names, checked, and their predictors, loaded.

A run's name in URLs is its folder's name unless ``--name`` gives one (one per run, in order).
Every run is checked (a complete run, a unique URL-safe name) before any model is loaded, so a
mistake in the last of several runs is reported at once, not after minutes of loading.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nlptasks.errors import NlptasksError
from nlptasks.serve.state import ServedModel
from nlptasks.types import LoadOptions

__all__ = ["NAME", "check_models", "check_runs", "load_models", "model_names"]

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A served model's name: letters, digits, ``.``, ``_`` and ``-`` (it is part of URLs)."""


def model_names(run_dirs: Sequence[Path], names: Sequence[str] | None = None) -> list[str]:
    """The name of each run: ``names`` (one per run) or the run folders' names.

    :raises NlptasksError: a count of names that is not the count of runs, a name that is not
        URL-safe, or two runs with the same name (naming both folders).
    """
    if names:
        if len(names) != len(run_dirs):
            raise NlptasksError(
                f"{len(names)} --name for {len(run_dirs)} runs: give one --name per run, in order, "
                "or none (each run is then named after its folder)"
            )
        chosen = list(names)
    else:
        chosen = [Path(r).resolve().name for r in run_dirs]
    seen: dict[str, Path] = {}
    for name, run_dir in zip(chosen, run_dirs, strict=True):
        flag = "--name " if names else f"the folder name of {run_dir}: "
        if not NAME.fullmatch(name):
            raise NlptasksError(
                f"{flag}{name!r} cannot be a model name (it is part of URLs): use letters, digits, '.', '_' and '-'",
                hint="Give each run a name: --name NAME (one per run, in order).",
            )
        if name in seen:
            raise NlptasksError(
                f"two runs would be served as {name!r}: {seen[name]} and {run_dir}",
                hint="Name them: --name NAME once per run, in order (e.g. --name a --name b).",
            )
        seen[name] = Path(run_dir)
    return chosen


def check_runs(run_dirs: Sequence[Path]) -> list[dict[str, Any]]:
    """Each run's manifest, after checking it is a complete run (what ``nlptasks infer`` requires)."""
    from nlptasks.inference.loading import read_manifest

    manifests = []
    for run_dir in run_dirs:
        if not Path(run_dir).is_dir():
            raise NlptasksError(
                f"{run_dir}: no such folder", hint="Pass run folders that `nlptasks run` printed (runs/<task>/<name>)."
            )
        manifests.append(read_manifest(Path(run_dir)))
    return manifests


def check_models(
    run_dirs: Sequence[Path], names: Sequence[str] | None = None, options: LoadOptions | None = None
) -> tuple[list[str], list[dict[str, Any]]]:
    """What :func:`load_models` checks before any weights load: the names, that every run is
    complete, and every run against the options (adapter, backend, precision).  Returns the names
    and the manifests; raises the first problem's error."""
    from nlptasks.inference.loading import prepare_load

    options = options or LoadOptions()
    run_dirs = [Path(r) for r in run_dirs]
    chosen = model_names(run_dirs, names)
    manifests = check_runs(run_dirs)
    for run_dir in run_dirs:
        prepare_load(run_dir, options)
    return chosen, manifests


def load_models(
    run_dirs: Sequence[Path], names: Sequence[str] | None = None, options: LoadOptions | None = None
) -> dict[str, ServedModel]:
    """Check, then load every run's predictor (step 10, as ``nlptasks infer`` does), each with the
    same :class:`~nlptasks.types.LoadOptions` (``options.batch_size``: the server's largest batch,
    so a gathered batch is one forward pass).  Every run is checked against the options (adapter,
    backend, precision) before any weights load."""
    from nlptasks.inference.loading import load_predictor

    options = options or LoadOptions()
    run_dirs = [Path(r) for r in run_dirs]
    chosen, manifests = check_models(run_dirs, names, options)
    models: dict[str, ServedModel] = {}
    for name, run_dir, manifest in zip(chosen, run_dirs, manifests, strict=True):
        predictor = load_predictor(run_dir, options)
        models[name] = ServedModel(name=name, run_dir=run_dir, manifest=manifest, predictor=predictor)
    return models
