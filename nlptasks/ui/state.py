"""What every route of the dashboard shares: its folders, settings, jobs, loaded models and the
reader of live logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nlptasks.ui.curves import LogReader
from nlptasks.ui.jobs import Jobs
from nlptasks.ui.models import ModelPool
from nlptasks.ui.paths import Roots

__all__ = ["UiSettings", "UiState"]


@dataclass
class UiSettings:
    """The dashboard's options (``nlptasks ui --help`` documents each)."""

    api_key: str | None = None
    allow_remote_code: bool = False
    max_parallel: int = 1
    max_loaded: int = 2
    unload_after_s: float = 300.0
    max_body_bytes: int = 1_000_000


@dataclass
class UiState:
    """The folders, the settings, the jobs (runs started from the page), the loaded models."""

    roots: Roots
    settings: UiSettings = field(default_factory=UiSettings)
    jobs: Jobs = field(init=False)
    pool: ModelPool = field(init=False)
    reader: LogReader = field(default_factory=LogReader)

    def __post_init__(self) -> None:
        self.jobs = Jobs(list(self.roots.runs), self.settings.max_parallel)
        self.pool = ModelPool(self.settings.max_loaded, self.settings.unload_after_s)

    @classmethod
    def of(cls, runs: list[Path], recipes: list[Path], settings: UiSettings | None = None) -> UiState:
        """The state of a dashboard on the runs folders ``runs`` and recipes folders ``recipes``."""
        return cls(Roots.of(runs, recipes), settings or UiSettings())

    def close(self) -> None:
        """Stop the runs it started (SIGINT: resumable where they have a checkpoint) and unload models."""
        self.jobs.close()
        self.pool.close()
