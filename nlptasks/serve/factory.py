"""``nlptasks serve --workers N``: the app built in each of uvicorn's worker processes.

With one worker, ``nlptasks serve`` builds the app in its own process.  With several, uvicorn
starts N processes that share the listening socket (the kernel hands each new connection to one of
them); each imports :func:`app_from_environment`, which rebuilds what the command line said from
the variable :data:`CONFIG_ENV` (the runs, names, load options and server settings, as JSON), loads
its own copy of every model, and serves it.  Each worker batches its own requests, counts its own
``/metrics`` and answers ``/health`` with its process id.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from nlptasks.serve.state import ServerState, ServeSettings
from nlptasks.types import LoadOptions

__all__ = ["CONFIG_ENV", "app_from_environment", "config_for_workers", "use_threads"]

CONFIG_ENV = "NLPTASKS_SERVE_CONFIG"
"""The variable that carries a server's configuration to its worker processes."""


def use_threads(threads: int | None) -> None:
    """torch's intra-op threads for this server process (``--threads``; ``None``: torch's own)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def config_for_workers(
    runs: list[Path], names: list[str] | None, options: LoadOptions, settings: ServeSettings, threads: int | None
) -> str:
    """The JSON :func:`app_from_environment` rebuilds the server from."""
    return json.dumps(
        {
            "runs": [str(Path(r).resolve()) for r in runs],
            "names": names,
            "options": dataclasses.asdict(options),
            "settings": dataclasses.asdict(settings),
            "threads": threads,
        }
    )


def app_from_environment() -> Any:
    """The app of one worker process (uvicorn calls it: ``factory=True``)."""
    from nlptasks.pipeline.launch import end_with_parent
    from nlptasks.serve.app import create_app
    from nlptasks.serve.models import load_models

    end_with_parent()  # a supervisor killed with -9 takes its workers with it (they finish what is in flight)
    config = json.loads(os.environ[CONFIG_ENV])
    use_threads(config["threads"])
    models = load_models([Path(r) for r in config["runs"]], config["names"], LoadOptions(**config["options"]))
    return create_app(ServerState(models=models, settings=ServeSettings(**config["settings"])))
