"""``nlptasks check RECIPE``: the data doctor.

Steps 1 to 3 of the recipe run (setup, load, split: the tokenizer at most, never model weights) in
a throw-away folder, then every plugin's :func:`~nlptasks.hookspecs.nlptasks_check` reports
*findings* about the data before anything is trained: label sets that differ between splits,
class balance, empty and duplicate rows, rows shared by train and validation/test, and how much
``model.max_length`` would cut.  Errors make the command exit non-zero.  The task-independent
helpers the plugins call are in :mod:`nlptasks.engine.data.doctor`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from nlptasks.errors import NlptasksError
from nlptasks.host import Host, get_host
from nlptasks.pipeline.steps import library_progress_bars, scratch_context, steps_1_to_4
from nlptasks.recipe import LoadedRecipe
from nlptasks.types import Finding, Level

__all__ = ["LEVELS", "Report", "check"]

LEVELS: tuple[Level, ...] = ("error", "warning", "info")


@dataclass
class Report:
    """What ``nlptasks check`` prints: the findings, most serious first."""

    recipe: str
    task: str
    sizes: dict[str, int]
    sources: dict[str, str]
    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "task": self.task,
            "ok": not self.errors,
            "sizes": self.sizes,
            "sources": self.sources,
            "findings": [asdict(f) for f in self.findings],
        }

    def text(self) -> str:
        sizes = ", ".join(f"{split} {n:,}" for split, n in self.sizes.items()) or "no data"
        lines = [f"check {self.recipe}: task {self.task!r}, {sizes} rows"]
        lines += [f.line(self.sources) for f in self.findings]
        n_err, n_warn = len(self.errors), len(self.warnings)
        if n_err:
            lines.append(f"{n_err} error(s), {n_warn} warning(s): fix the errors before `nlptasks run {self.recipe}`")
        else:
            lines.append(f"ok: no errors, {n_warn} warning(s); next: nlptasks run {self.recipe}")
        return "\n".join(lines)


def check(loaded: LoadedRecipe, host: Host | None = None) -> Report:
    """Run steps 1 to 3 of ``loaded`` in a throw-away folder, then every ``nlptasks_check``."""
    host = host or get_host()
    source = str(loaded.path or "<recipe>")
    hooks = host.hooks_for(loaded.task)
    findings: list[Finding] = []
    sizes: dict[str, int] = {}
    with scratch_context(loaded, prefix="nlptasks-check-") as ctx, library_progress_bars(False):
        try:
            data = steps_1_to_4(ctx, hooks, until=3)
        except NlptasksError as exc:  # the data cannot even be read: that is the one finding
            findings.append(Finding("error", "load", exc.render().replace("\n", " ")))
            return Report(source, loaded.task.name, sizes, dict(ctx.sources), findings)
        sizes = {split: len(ds) for split, ds in data.items()}
        for split, n in sizes.items():
            if n == 0:
                findings.append(Finding("error", "empty-split", "no rows", split))
        for split, reasons in ctx.dropped.items():  # counted skips the recipe allowed while loading
            for reason, n in reasons.items():
                findings.append(Finding("warning", "skipped", f"{n} row(s) skipped while loading ({reason})", split))
        with _no_length_warning():  # checks measure lengths untruncated; the truncation finding says it
            for result in hooks.nlptasks_check(ctx=ctx, data=data):
                findings += result or []
        sources = dict(ctx.sources)
    if not any(True for _ in _implementations(host, loaded)):
        findings.append(Finding("info", "no-checks", f"the {loaded.task.plugin} plugin contributes no data checks"))
    order = {level: i for i, level in enumerate(LEVELS)}
    findings.sort(key=lambda f: order[f.level])
    return Report(source, loaded.task.name, sizes, sources, findings)


class _LengthWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token indices sequence length is longer")


@contextmanager
def _no_length_warning() -> Iterator[None]:
    """Without transformers' warning that an input is longer than the model takes: the data
    doctor tokenizes whole texts on purpose, to count what ``model.max_length`` cuts."""
    logger = logging.getLogger("transformers.tokenization_utils_base")
    quiet = _LengthWarning()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _implementations(host: Host, loaded: LoadedRecipe) -> Iterable[Any]:
    """The check implementations of the task's plugin."""
    for impl in host.pm.hook.nlptasks_check.get_hookimpls():
        if impl.plugin_name == loaded.task.plugin:
            yield impl
