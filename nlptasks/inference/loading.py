"""Step 10 through the plugin host: the predictor of a complete run, from the plugin that owns its
task, loaded with explicit :class:`~nlptasks.types.LoadOptions` (what ``nlptasks infer``,
``serve``, ``export`` and ``nlptasks.load`` use)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

from nlptasks.deprecations import deprecated
from nlptasks.engine.io.rundir import latest_run, read_manifest
from nlptasks.errors import NlptasksError
from nlptasks.host import Host, get_host
from nlptasks.inference.backends import backend_for
from nlptasks.inference.deployments import Choice, choose_deployment
from nlptasks.inference.runs import LEGACY_OPTIONS, choose
from nlptasks.types import LoadOptions

__all__ = ["Prepared", "latest_run", "load_predictor", "prepare_load", "read_manifest"]


class Prepared(NamedTuple):
    """What a load of a run reads: ``folder`` (the run, or the recorded deployment that answers for
    it: :mod:`nlptasks.inference.deployments`), its manifest with the adapter chosen, and the
    options with the backend chosen for the folder."""

    folder: Path
    manifest: dict[str, Any]
    options: LoadOptions


def prepare_load(run_dir: Path, options: LoadOptions, host: Host | None = None) -> Prepared:
    """What loading ``run_dir`` with ``options`` reads (:class:`Prepared`).  With every choice left to
    ``auto``, a faster export this run has shown to agree with it on this machine answers for it
    (:func:`~nlptasks.inference.deployments.choose_deployment`).  Every refusal (an unknown
    adapter, a backend that cannot load the folder, bf16 where there is none) comes from here,
    before any weights load."""
    run_dir = Path(run_dir)
    manifest = choose(read_manifest(run_dir), run_dir, options.adapter, options.base_only)
    chosen = choose_deployment(run_dir, manifest, options)
    if chosen.folder != run_dir:
        try:
            run_dir, manifest = chosen.folder, read_manifest(chosen.folder)
        except NlptasksError as exc:  # damaged since it was measured: named, not trusted, not fatal
            logging.getLogger("nlptasks").warning(
                "%s, recorded to answer for %s, cannot be used: %s; answering with the run's own weights",
                chosen.folder,
                run_dir,
                exc,
            )
            chosen = Choice(run_dir, options)
    backend = backend_for(run_dir, manifest, chosen.options, host)
    return Prepared(run_dir, manifest, chosen.options.but(backend=backend.name))


def load_predictor(run_dir: Path, options: LoadOptions | None = None, host: Host | None = None) -> Any:
    """Step 10: the predictor of a complete run, from the plugin that owns its task.

    :param options: how to load and run it (default: ``LoadOptions()``, everything ``auto``).
    An implementation of the older hook form ``nlptasks_load_predictor(run_dir, manifest)`` still
    works, with a ``DeprecationWarning``: its ``load_run`` finds the options in the manifest, and
    ``batch_size`` / ``max_length`` are set as attributes of its predictor.
    """
    host = host or get_host()
    run_dir = Path(run_dir)
    options = options or LoadOptions()
    run_dir, manifest, options = prepare_load(run_dir, options, host)
    task = host.task(manifest.get("task", "?"))
    hook = host.hooks_for(task).nlptasks_load_predictor
    legacy = _legacy_implementations(hook, host)
    if legacy:
        deprecated(
            f"hook:nlptasks_load_predictor:{','.join(legacy)}",
            f"plugin {', '.join(legacy)} implements nlptasks_load_predictor(run_dir, manifest)",
            "the hook now takes (run_dir, manifest, options): add the options argument and pass it on to "
            "load_run(run_dir, manifest, auto_class, options)",
        )
        manifest = {**manifest, LEGACY_OPTIONS: options}
    predictor = hook(run_dir=run_dir, manifest=manifest, options=options)
    if options.threshold is not None and not getattr(predictor, "takes_threshold", False):
        raise NlptasksError(
            f"threshold {options.threshold}: {run_dir} is a {task.name!r} run, whose answers do not "
            "depend on a probability threshold (a multi-label cls run's do)",
            hint="Leave out --threshold (threshold=) for this run.",
        )
    if legacy:
        for name in ("batch_size", "max_length"):
            value = getattr(options, name)
            if value is not None and hasattr(predictor, name):
                setattr(predictor, name, value)
    return predictor


def _legacy_implementations(hook: Any, host: Host) -> list[str]:
    """Plugins whose ``nlptasks_load_predictor`` is the older form (:meth:`Host.old_forms`: without
    ``options``; a wrapper around the step sees what it asks for and needs none)."""
    impls = hook.get_hookimpls() if hasattr(hook, "get_hookimpls") else []
    return [impl.plugin_name for impl in impls if "nlptasks_load_predictor" in host.old_forms(impl.plugin)]
