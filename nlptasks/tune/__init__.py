"""``nlptasks tune``: hyperparameter search with Optuna over recipe key paths.

The recipe's ``[tune]`` table names the search space (key paths such as ``train.learning_rate``
and their distributions), the objective, the sampler and the pruner.  Each trial is an ordinary
run of the recipe with the trial's values as ``--set`` overrides (:mod:`~nlptasks.tune.trial`);
the study lives in Optuna's RDB storage, so it resumes after a kill and several processes can
share it (:mod:`~nlptasks.tune.study`); a trial whose process died is found by its owner and
heartbeat, marked interrupted and its values run again (:mod:`~nlptasks.tune.owners`); the study folder gets a results table, ``best.toml`` and
plots (:mod:`~nlptasks.tune.results`).  docs/tune.md is the user's guide.

Above the pipeline (which runs each trial) and below the CLI; Optuna is imported only when a
study runs (``pip install "nlptasks[tune]"``).
"""

from __future__ import annotations

from nlptasks.tune.results import TrialRow, best_row, trial_rows, write_results
from nlptasks.tune.study import STORAGE_ENV, TuneResult, open_study, storage_for, study_dir_for, tune
from nlptasks.tune.trial import PruningPlugin, TrialSetup, run_trial, suggest

__all__ = [
    "STORAGE_ENV",
    "PruningPlugin",
    "TrialRow",
    "TrialSetup",
    "TuneResult",
    "best_row",
    "open_study",
    "run_trial",
    "storage_for",
    "study_dir_for",
    "suggest",
    "trial_rows",
    "tune",
    "write_results",
]
