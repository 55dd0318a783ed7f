"""``nlptasks tune``: the study loop on Optuna's RDB storage.

The study lives in a database (an SQLite file ``study.db`` in the study folder by default, or any
URL Optuna's ``RDBStorage`` takes, e.g. PostgreSQL): every process that runs ``nlptasks tune`` on
the same storage and study name works on the same study, on one machine or many.  ``trials`` is
the study's total of finished trials (complete, pruned, failed); each process starts trials until
the study has them (finished plus running), then waits while the last ones run in other processes
(taking over one whose process dies), so every process ends with the study complete; running the
command again finishes what is missing.

A trial whose process was killed stays ``RUNNING`` in the database: before counting, each process
fails the trials whose owner is dead (:mod:`~nlptasks.tune.owners`: the process gone on this
machine, a silent heartbeat, no owner recorded); their values are queued again and they do not
count.  Before each trial draws its values the sampler is seeded from ``tune.seed``, the worker
index and the trial's number, so a resumed study does not draw its first values again and processes
on several machines running the same command do not draw the same ones.  On one machine a lock file in the study folder makes "count, then ask for a
trial" one step, so two processes never start more trials than the study needs.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlptasks.engine.io.outputs import make_folder, os_errors
from nlptasks.engine.io.rundir import runs_base
from nlptasks.errors import NlptasksError
from nlptasks.host import Host
from nlptasks.pipeline import get_host, load_recipe
from nlptasks.recipe import LoadedRecipe, objective_of
from nlptasks.tune.owners import HEARTBEAT_GRACE, HEARTBEAT_INTERVAL, fail_dead, kill_point, requeue
from nlptasks.tune.results import COUNTED, TrialRow, state_of, write_results
from nlptasks.tune.trial import TrialSetup, run_trial, trial_overrides

__all__ = [
    "STORAGE_ENV",
    "HEARTBEAT_GRACE",
    "HEARTBEAT_INTERVAL",
    "WAIT_POLL",
    "TuneResult",
    "database_url",
    "open_study",
    "sampler_for",
    "seed_of",
    "storage_for",
    "study_dir_for",
    "tune",
]


@dataclass
class TuneResult:
    """What :func:`tune` returns (the process that writes the results)."""

    study_dir: Path
    study_name: str
    storage: str
    metric: str
    greater: bool
    rows: list[TrialRow] = field(default_factory=list)
    best: TrialRow | None = None
    table: str = ""
    notes: list[str] = field(default_factory=list)


def study_dir_for(loaded: LoadedRecipe, name: str) -> Path:
    """``<output.dir>/<task>/tune-<name>/``."""
    return runs_base(loaded) / f"tune-{name}"


WAIT_POLL = 2.0
"""Seconds between looks at the study while its last trials run in other processes."""
_SCHEMA_ATTEMPTS = 5
"""How often :func:`storage_for` tries when creating Optuna's tables collides with another process."""
_POSTGRES_DRIVERS = ("psycopg", "psycopg2")
"""PostgreSQL drivers for SQLAlchemy, in order of preference: psycopg 3 (SQLAlchemy 2.1's default
for ``postgresql://``) and psycopg2 (its default before 2.1)."""


def database_url(url: str) -> str:
    """``url`` with a PostgreSQL driver that is installed: a plain ``postgresql://`` URL means
    whichever SQLAlchemy version's default driver, which may not be the one installed (2.1 moved
    the default from psycopg2 to psycopg 3); a URL that names its driver is left as it is."""
    import importlib.util

    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("postgresql", "postgres"):
        return url
    for driver in _POSTGRES_DRIVERS:
        if importlib.util.find_spec(driver) is not None:
            return f"postgresql+{driver}://{rest}"
    raise NlptasksError(
        f"--storage {url}: no PostgreSQL driver is installed",
        hint='Install one: pip install "nlptasks[tune-postgres]" (psycopg 3), or pip install psycopg2-binary.',
    )


def storage_for(url: str) -> Any:
    """Optuna's ``RDBStorage`` on ``url``, with heartbeats; a trial whose heartbeat stops is failed
    and its values queued again (:func:`~nlptasks.tune.owners.requeue`); SQLite waits up to a
    minute for a lock.  Processes that start together on a new database race to create Optuna's
    tables (PostgreSQL: a duplicate-key error for the loser): the loser tries again and finds them."""
    import optuna

    params = inspect.signature(optuna.storages.RDBStorage).parameters
    callback_key = (
        "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in params else "failed_trial_callback"
    )
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    for attempt in range(_SCHEMA_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats: "experimental"
                return optuna.storages.RDBStorage(
                    database_url(url),
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=HEARTBEAT_INTERVAL,
                    grace_period=HEARTBEAT_GRACE,
                    **{callback_key: requeue},
                )
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy's errors: a bad URL, a missing driver, no server
            if type(exc).__name__ in ("IntegrityError", "ProgrammingError") and attempt + 1 < _SCHEMA_ATTEMPTS:
                time.sleep(0.5 * (attempt + 1))  # another process is creating the tables: use them
                continue
            raise NlptasksError(
                f"--storage {url}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                hint="Give a database URL SQLAlchemy takes, e.g. sqlite:///study.db or "
                'postgresql://user:password@host/db (pip install "nlptasks[tune-postgres]"); see docs/tune.md.',
            ) from None
    raise AssertionError("unreachable")


def open_study(loaded: LoadedRecipe, storage: Any, name: str, worker_index: int = 0) -> tuple[Any, str, bool]:
    """Create or load the study: ``(study, objective metric, greater is better)``."""
    import optuna

    tune = loaded.recipe.tune
    assert tune is not None
    metric, greater = objective_of(loaded.recipe, loaded.task, loaded.options)
    seed = seed_of(loaded, worker_index)
    pruner = {
        "median": optuna.pruners.MedianPruner,
        "halving": optuna.pruners.SuccessiveHalvingPruner,
        "none": optuna.pruners.NopPruner,
    }[tune.pruner]()
    direction = "maximize" if greater else "minimize"
    study = optuna.create_study(
        storage=storage, study_name=name, direction=direction, pruner=pruner, load_if_exists=True
    )
    study.sampler = sampler_for(tune.sampler, seed, len(study.get_trials(deepcopy=False)))
    if study.direction.name.lower() != direction:
        raise NlptasksError(
            f"study {name!r} exists and {study.direction.name.lower()}s; this recipe would "
            f"{direction} validation {metric}",
            hint="Name another study: --study NAME.",
        )
    if "objective" not in study.user_attrs:
        study.set_user_attr("objective", metric)
    return study, metric, greater


def seed_of(loaded: LoadedRecipe, worker_index: int = 0) -> int:
    """The sampler seed of worker ``worker_index``: ``tune.seed`` (default: the recipe's seed) plus the index."""
    tune = loaded.recipe.tune
    assert tune is not None
    return (tune.seed if tune.seed is not None else loaded.recipe.seed) + worker_index


def sampler_for(kind: str, seed: int, existing: int) -> Any:
    """The study's sampler (``tpe`` or ``random``), seeded with ``seed`` on a new study, else from
    ``seed`` and the ``existing`` trials: a resumed study draws new values, not its first ones again."""
    import numpy as np
    import optuna

    if existing:
        seed = int(np.random.SeedSequence([seed, existing]).generate_state(1)[0])
    return optuna.samplers.TPESampler(seed=seed) if kind == "tpe" else optuna.samplers.RandomSampler(seed=seed)


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[Callable[[], None]]:
    """An exclusive lock on ``path`` (``fcntl.flock``); yields ``release`` (idempotent)."""
    with os_errors(path.parent, "output.dir"):  # a read-only study folder: named
        handle = path.open("a")
    held = [True]
    try:
        import fcntl

        fcntl.flock(handle, fcntl.LOCK_EX)
    except (ImportError, OSError):
        held[0] = False

    def release() -> None:
        if held[0]:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_UN)
            held[0] = False

    try:
        yield release
    finally:
        release()
        handle.close()


def _counts(study: Any) -> tuple[int, int]:
    """``(finished, running)`` trials of the study."""
    states = [state_of(t) for t in study.get_trials(deepcopy=False)]
    return sum(s in COUNTED for s in states), states.count("running")


def _is_counted(study: Any, trials: int) -> Callable[[Any], bool]:
    """Whether a trial just asked for is among the study's first ``trials`` live ones (processes
    on other machines may have asked at the same moment)."""

    def counted(trial: Any) -> bool:
        live = sorted(t.number for t in study.get_trials(deepcopy=False) if state_of(t) in (*COUNTED, "running"))
        return trial.number in live[:trials]

    return counted


STORAGE_ENV = "NLPTASKS_TUNE_STORAGE"
"""The variable ``nlptasks tune`` reads its storage URL from when ``--storage`` is not given: how it
hands the URL to its ``--workers`` processes (a password in a command line shows in ``ps``)."""


def _launch_workers(
    recipe: str | Path,
    overrides: list[str],
    trials: int,
    timeout: float | None,
    url: str,
    name: str,
    workers: int,
    threads: int,
) -> list[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "false",
        STORAGE_ENV: url,  # not in the command line: a password there shows in every process list
    }
    procs = []
    for index in range(1, workers):
        command = [
            sys.executable,
            "-m",
            "nlptasks",
            "tune",
            str(recipe),
            *(a for o in overrides for a in ("--set", o)),
            "--trials",
            str(trials),
            "--study",
            name,
            "--worker-index",
            str(index),
        ]
        if timeout is not None:
            command += ["--timeout", str(timeout)]
        procs.append(subprocess.Popen(command, env=env))
    return procs


def _progress(trials: int, metric: str, greater: bool, log: Callable[[str], None]) -> Callable[[Any, Any], None]:
    def progress(study: Any, frozen: Any) -> None:
        state = state_of(frozen)
        if state is None:
            return
        finished, _ = _counts(study)
        complete = [t for t in study.get_trials(deepcopy=False) if state_of(t) == "complete"]
        best = sorted(complete, key=lambda t: (-t.value if greater else t.value, t.number))[:1]
        best_text = f" (best {best[0].value:.4f}, trial {best[0].number})" if best else ""
        seconds = frozen.user_attrs.get("seconds")
        took = f" {seconds:.0f} s" if isinstance(seconds, (int, float)) else ""
        if state == "complete":
            what = f"complete {metric} {frozen.value:.4f}{best_text}"
        elif state == "pruned":
            what = f"pruned at step {frozen.user_attrs.get('pruned_step', '?')}{best_text}"
        elif state == "failed":
            what = f"failed: {str(frozen.user_attrs.get('error', '')).splitlines()[0]}"
        else:
            what = "interrupted (not counted)"
        log(f"trial {frozen.number} ({finished}/{trials}): {what}{took}")

    return progress


def tune(
    recipe: str | Path,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    trials: int | None = None,
    timeout: float | None = None,
    storage: str | None = None,
    study: str | None = None,
    workers: int = 1,
    worker_index: int = 0,
    host: Host | None = None,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> TuneResult:
    """Run the study of ``recipe`` (its ``[tune]`` table) until it has ``trials`` finished trials
    (default ``tune.trials``), or ``timeout`` seconds pass; then (worker 0) write the results.

    :param storage: an Optuna RDB storage URL (default: ``sqlite:///<study folder>/study.db``).
    :param study: the study name (default: the recipe file's stem); the folder is
        ``<output.dir>/<task>/tune-<study>/``.
    :param workers: start ``workers - 1`` more ``nlptasks tune`` processes on the same study, each
        (and this one) with ``cores // workers`` threads, and wait for them.
    :param worker_index: this process's index among the workers (0 writes the results).
    """
    host = host or get_host()
    overrides = list(overrides)
    loaded = load_recipe(recipe, overrides, host=host)
    tune_table = loaded.recipe.tune
    if tune_table is None:
        raise NlptasksError(
            f"{recipe}: no [tune] table: nothing to search",
            hint="Add [tune] and [tune.space] (docs/tune.md), e.g. "
            '[tune.space] "train.learning_rate" = { low = 1e-5, high = 1e-3, log = true }',
        )
    name = study or Path(recipe).stem
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise NlptasksError(f"--study {name!r}: a study name is letters, digits, '_', '.' and '-'")
    total = trials if trials is not None else tune_table.trials
    if total < 1 or workers < 1:
        raise NlptasksError("--trials and --workers must be at least 1")
    limit = timeout if timeout is not None else tune_table.timeout
    study_dir = make_folder(study_dir_for(loaded, name), "output.dir")  # a file in the way, a read-only disk: named
    url = storage or f"sqlite:///{study_dir / 'study.db'}"

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # our own line per trial instead
    rdb = storage_for(url)
    the_study, metric, greater = open_study(loaded, rdb, name, worker_index)
    procs: list[subprocess.Popen[bytes]] = []
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        import torch

        torch.set_num_threads(threads)
        procs = _launch_workers(recipe, overrides, total, limit, url, name, workers, threads)
        log(f"study {name}: {workers} processes, {threads} threads each")
    if worker_index == 0:
        finished, _ = _counts(the_study)
        log(f"study {name}: {finished}/{total} trials finished; {study_dir}")
    holder: list[Callable[[], None]] = []

    def before(trial: Any) -> None:
        if holder:
            holder[-1]()  # release the study folder's lock: the trial and its owner are recorded
        # before the trial draws its values, the sampler is seeded from the trial's number, which
        # the database gives each trial once: processes on other machines running the same command
        # (same seed) never draw the same values, even when they ask at the same moment (a count
        # of the study's trials, taken before asking, could be the same in both)
        the_study.sampler = sampler_for(tune_table.sampler, seed_of(loaded, worker_index), trial.number)

    setup = TrialSetup(
        recipe=recipe,
        overrides=overrides,
        space=dict(tune_table.space),
        study_dir=study_dir,
        metric=metric,
        prune=tune_table.pruner != "none",
        host=host,
        trials=total,
        before=before,
        counted=_is_counted(the_study, total),
    )
    locked = url.startswith("sqlite") and os.name == "posix"  # every process on it takes the lock (flock)
    deadline = time.monotonic() + limit if limit is not None else None
    progress = _progress(total, metric, greater, log)
    try:
        waiting = False
        while deadline is None or time.monotonic() < deadline:
            with _lock(study_dir / ".lock") as release:
                holder.append(release)
                fail_dead(the_study, rdb, locked, log)
                finished, running = _counts(the_study)
                if finished >= total:
                    break
                if finished + running >= total:  # the rest runs in other processes: wait for them, and
                    if not waiting:  # take over a trial whose process dies meanwhile
                        log(f"study {name}: waiting for {running} trial(s) running in other processes")
                    waiting = True
                    release()
                    time.sleep(WAIT_POLL)
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    the_study.optimize(
                        lambda trial: run_trial(trial, setup),
                        n_trials=1,
                        catch=(NlptasksError,),
                        callbacks=[progress],
                        gc_after_trial=False,
                    )
        else:
            log(f"study {name}: timeout ({limit:g} s): no new trial started")
    finally:
        for proc in procs:
            proc.wait()
    result = TuneResult(study_dir, name, url, metric, greater)
    if worker_index != 0:
        return result

    def recipe_of(best: TrialRow) -> dict[str, Any]:  # a best trial that another machine ran
        return load_recipe(recipe, trial_overrides(setup, best.number, best.params), host=host).resolved()

    title = f"Study {name}: {Path(recipe).name}"
    kill_point("study-results")
    with os_errors(study_dir, "output.dir"):
        result.rows, result.best, result.table, result.notes = write_results(
            the_study, study_dir, metric, greater, title, recipe_of
        )
    bad = [p for p in procs if p.returncode not in (0, None)]
    if bad:
        result.notes.append(
            f"{len(bad)} worker process(es) ended with an error (exit codes "
            f"{', '.join(str(p.returncode) for p in bad)})"
        )
    return result
