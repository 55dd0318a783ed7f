"""Step 10 through the plugin host: the predictor of a complete run, from the plugin that owns
its task (what ``nlptasks infer`` and ``nlptasks.load`` use)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.engine.rundir import latest_run, read_manifest
from nlptasks.engine.trained import choose
from nlptasks.host import Host, get_host

__all__ = ["latest_run", "load_predictor"]


def load_predictor(
    run_dir: Path, host: Host | None = None, adapter: str | None = None, base_only: bool = False
) -> Any:
    """Step 10: the predictor of a complete run, from the plugin that owns its task.

    :param adapter: for an adapter run, the adapter to use (``nlptasks infer --adapter NAME``).
    :param base_only: for an adapter run, the frozen base alone (``--base-only``).
    """
    host = host or get_host()
    run_dir = Path(run_dir)
    manifest = choose(read_manifest(run_dir), run_dir, adapter, base_only)
    task = host.task(manifest.get("task", "?"))
    return host.hooks_for(task).nlptasks_load_predictor(run_dir=run_dir, manifest=manifest)
