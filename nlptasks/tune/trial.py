"""One trial of a study: an ordinary run of the recipe, with the trial's values as ``--set``
overrides, in ``<study>/trials/trial-<number>/`` — and, for that run only, a cross-cutting
plugin (:class:`PruningPlugin`) that reports the objective to Optuna at every evaluation during
training and stops training when the pruner says so.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlptasks.errors import NlptasksError
from nlptasks.hookspecs import hookimpl
from nlptasks.host import Host
from nlptasks.pipeline import load_recipe, run
from nlptasks.recipe import TuneDistribution, override_text
from nlptasks.tune.owners import kill_point, record_owner
from nlptasks.version import __version__

__all__ = ["PruningPlugin", "Surplus", "TrialSetup", "run_trial", "suggest", "trial_overrides"]


class Surplus(NlptasksError):
    """A trial asked for after the study already had its trials (processes on other machines)."""


@dataclass
class TrialSetup:
    """What every trial of one ``nlptasks tune`` process shares."""

    recipe: str | Path
    overrides: list[str]
    space: dict[str, TuneDistribution]
    study_dir: Path
    metric: str
    prune: bool
    host: Host
    trials: int
    before: Callable[[Any], None] = field(default=lambda trial: None)
    """Called first in each trial, with the Optuna trial (the study loop releases its lock there)."""
    counted: Callable[[Any], bool] = field(default=lambda trial: True)
    """Whether the study still needs this trial (``False``: it is :class:`Surplus`)."""


class PruningPlugin:
    """A cross-cutting plugin registered for one trial's run: its ``nlptasks_trainer`` wrapper adds a
    ``TrainerCallback`` whose ``on_evaluate`` reports ``eval_<metric>`` at the global step to the
    Optuna trial and, when ``trial.should_prune()``, stops training (the run still finishes and
    saves; the trial is then marked pruned)."""

    def __init__(self, trial: Any, metric: str, prune: bool = True) -> None:
        self.trial = trial
        self.metric = metric
        self.prune = prune
        self.reported: list[tuple[int, float]] = []
        self.pruned_step: int | None = None

    @hookimpl(wrapper=True)
    def nlptasks_trainer(
        self, ctx: Any, model: Any, args: Any, data: Any, data_collator: Any, compute_metrics: Any
    ) -> Any:
        trainer = yield
        trainer.add_callback(_reporter(self))
        return trainer

    def report(self, step: int, value: float) -> bool:
        """Report ``value`` at ``step``; whether training should stop."""
        if any(s == step for s, _ in self.reported):
            return False
        self.reported.append((step, value))
        self.trial.report(value, step)
        if self.prune and self.trial.should_prune():
            self.pruned_step = step
            return True
        return False


def _reporter(plugin: PruningPlugin) -> Any:
    from transformers import TrainerCallback

    class Reporter(TrainerCallback):  # type: ignore[misc]
        training = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.training = True

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 2:
                kill_point("train-step")

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.training = False  # the evaluations after training are the run's own

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any) -> None:
            value = (metrics or {}).get(f"eval_{plugin.metric}")
            if self.training and isinstance(value, (int, float)) and plugin.report(state.global_step, float(value)):
                control.should_training_stop = True

    return Reporter()


def suggest(trial: Any, key: str, dist: TuneDistribution) -> Any:
    """The trial's value for ``key``, drawn from ``dist`` (categorical, integer or float)."""
    if dist.choices is not None:
        return trial.suggest_categorical(key, list(dist.choices))
    assert dist.low is not None and dist.high is not None
    if dist.is_int():
        return trial.suggest_int(key, int(dist.low), int(dist.high), step=int(dist.step or 1), log=dist.log)
    return trial.suggest_float(key, float(dist.low), float(dist.high), step=dist.step, log=dist.log)


def trial_overrides(setup: TrialSetup, number: int, params: dict[str, Any]) -> list[str]:
    """The ``--set`` overrides of a trial: the command's, the trial's values, its run folder's name."""
    return [
        *setup.overrides,
        *(override_text(k, v) for k, v in params.items()),
        f"output.dir={setup.study_dir / 'trials'}",
        f"output.run_name=trial-{number}",
    ]


def run_trial(trial: Any, setup: TrialSetup) -> float:
    """The Optuna objective: run the recipe with this trial's values; return the validation
    objective.  An :class:`NlptasksError` is recorded (user attribute ``error``) and raised (the
    study records the trial as failed and goes on); a pruned run raises ``optuna.TrialPruned``."""
    kill_point("trial-start")
    record_owner(trial)
    setup.before(trial)
    if not setup.counted(trial):
        trial.set_user_attr("surplus", True)
        raise Surplus(f"trial {trial.number}: the study already has its {setup.trials} trials")
    started = time.perf_counter()
    run_dir = setup.study_dir / "trials" / f"trial-{trial.number}"
    trial.set_user_attr("run_dir", str(run_dir))
    plugin = PruningPlugin(trial, setup.metric, setup.prune)
    try:
        params = {key: suggest(trial, key, dist) for key, dist in setup.space.items()}
        if run_dir.exists():  # left by an earlier study of the same name: the number is this trial's now
            shutil.rmtree(run_dir)
        loaded = load_recipe(setup.recipe, trial_overrides(setup, trial.number, params), host=setup.host)
        setup.host.register(plugin, name=f"nlptasks-tune-trial-{trial.number}", dist=("nlptasks", __version__))
        try:
            result = run(loaded, host=setup.host, progress=False, run_dir=run_dir)
        finally:
            setup.host.unregister(plugin)
        kill_point("trial-results")
        validation = result.metrics.get("validation") or {}
        value = validation.get(setup.metric)
        if not isinstance(value, (int, float)):
            raise NlptasksError(
                f"trial {trial.number}: no validation {setup.metric!r} in the run's metrics "
                f"({', '.join(sorted(validation)) or 'no validation split'})",
                hint="The objective is a validation metric: give data.validation or data.split.validation.",
            )
    except NlptasksError as exc:
        trial.set_user_attr("error", exc.render().strip())
        raise
    finally:
        trial.set_user_attr("seconds", round(time.perf_counter() - started, 1))
    if plugin.pruned_step is not None:
        import optuna

        trial.set_user_attr("pruned_step", plugin.pruned_step)
        raise optuna.TrialPruned(f"pruned at step {plugin.pruned_step}")
    return float(value)
