"""``train.report_to = ["mlflow"]``: the run in an MLflow tracking store, beside its run folder.

transformers' ``MLflowCallback`` logs the Trainer's parameters (every ``TrainingArguments`` field and
the model config: the learning rate among them) and its history (loss, learning rate, gradient
norm and each evaluation during training, by optimizer step) into the *active* MLflow run.  This
module owns that run's life:

- :func:`start_tracking`, before training, starts it (so the callback logs into it rather than
  starting one of its own that it would end before the final evaluation), records where it is in
  the manifest (``tracking.mlflow``: run id, experiment, tracking URI, artifact URI; the card shows
  it) and in the run state, so that ``nlptasks run --resume`` continues the same MLflow run;
- :func:`tracked` ends it: once the run folder is complete, the final figures of ``metrics.json``
  are logged as metrics (``train/<name>``, ``validation/<name>``, ``test/<name>``, ``seconds``, at the
  last optimizer step) and the run's small files (card, metrics, manifest, recipe, log history,
  curves: :data:`ARTIFACTS`) as artifacts, and the run ends FINISHED; a failed run ends FAILED, an
  interrupted one KILLED.

Where to: MLflow's own environment variables, as for any MLflow client: ``MLFLOW_TRACKING_URI``
(unset: MLflow's default, ``sqlite:///mlflow.db`` in the current folder with artifacts under
``./mlruns``; the log line says so), ``MLFLOW_EXPERIMENT_NAME`` or ``MLFLOW_EXPERIMENT_ID`` (unset:
the Default experiment), ``MLFLOW_RUN_ID`` (log into that run), and the callback's ``MLFLOW_TAGS``.
Only the main process (rank 0) talks to MLflow; the callback too logs on rank 0 only.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from nlptasks.errors import NlptasksError, Problem

if TYPE_CHECKING:
    from nlptasks.context import RunContext

__all__ = ["ARTIFACTS", "final_metrics", "server_problem", "start_tracking", "tracked"]

ARTIFACTS = ("README.md", "metrics.json", "nlptasks.json", "recipe.toml", "log_history.json", "training_curves.png")
"""The run folder's files logged to the MLflow run when it completes (the model's weights are not:
``HF_MLFLOW_LOG_ARTIFACTS=1`` makes the callback log each checkpoint)."""

_RUN = "nlptasks.mlflow_run"
"""``ctx.state`` key: the MLflow run id this process started (or continued)."""


def _shown_uri(uri: str) -> str:
    """``uri`` without a password (``https://user:secret@host`` → ``https://user@host``): it is
    written into the run folder and the log."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = f"{parts.username}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def server_problem(timeout: float = 5.0) -> Problem | None:
    """The problem with an ``http(s)`` ``MLFLOW_TRACKING_URI`` whose host and port take no connection
    (``nlptasks validate`` and ``run`` before it loads anything: MLflow itself retries a closed port
    for about four minutes), or ``None``; other stores (a SQLite file, a folder) are MLflow's to open."""
    import socket

    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    port: int | str = "PORT"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except (OSError, ValueError) as exc:  # ValueError: a port that is no number
        return Problem(
            "train.report_to",
            f"the MLflow tracking server of MLFLOW_TRACKING_URI={_shown_uri(uri)} does not answer "
            f"({getattr(exc, 'strerror', None) or exc}): start it (mlflow server --host {parts.hostname} "
            f"--port {port}), point MLFLOW_TRACKING_URI at one that answers, or leave 'mlflow' out of train.report_to",
        )
    return None


def start_tracking(ctx: RunContext) -> None:
    """Start (or, for a resumed run that was tracked, continue) the MLflow run of ``ctx`` when
    ``train.report_to`` names mlflow, on the main process; a store that cannot be reached is an
    error here, before training, not after it."""
    from nlptasks.engine.system.distributed import is_main

    if "mlflow" not in ctx.recipe.train.report_to or not is_main():
        return
    import mlflow

    from nlptasks.engine.io.rundir import RUN_STATE, read_run_state, write_json

    state = read_run_state(ctx.output_dir) or {}
    earlier = (state.get("tracking") or {}).get("mlflow") or {}
    uri = _shown_uri(mlflow.get_tracking_uri())
    outer = mlflow.active_run()  # a caller's own run (the Python API), never ended here
    try:
        run_id = _continued(mlflow, earlier, uri, ctx)
        if run_id is None:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
            experiment = mlflow.set_experiment(name) if name and "MLFLOW_EXPERIMENT_ID" not in os.environ else None
            run = mlflow.start_run(
                experiment_id=experiment.experiment_id if experiment else None,
                run_name=ctx.output_dir.name,
                nested=mlflow.active_run() is not None,  # inside a caller's own run (the Python API)
                tags={"nlptasks.task": ctx.task.name, "nlptasks.run_dir": str(ctx.output_dir)},
            )
        else:
            run = mlflow.active_run()
        info = run.info
        experiment_name = mlflow.get_experiment(info.experiment_id).name
    except Exception as exc:  # noqa: BLE001 - whatever the store says (unreachable, refused), said once
        with contextlib.suppress(Exception):
            active = mlflow.active_run()
            if active is not None and (outer is None or active.info.run_id != outer.info.run_id):
                mlflow.end_run("FAILED")  # ours, started before the error
        raise NlptasksError(
            f"train.report_to: MLflow could not start a run in the tracking store {uri}: {exc}",
            hint="Start the store or point MLFLOW_TRACKING_URI at one that answers (docs/tracking.md), "
            "or leave 'mlflow' out of train.report_to.",
        ) from None
    ctx.state[_RUN] = info.run_id
    where = {
        "run_id": info.run_id,
        "experiment": experiment_name,
        "experiment_id": info.experiment_id,
        "tracking_uri": uri,
        "artifact_uri": _shown_uri(info.artifact_uri),
    }
    ctx.manifest.setdefault("tracking", {})["mlflow"] = where
    state.setdefault("tracking", {})["mlflow"] = where
    write_json(ctx.output_dir / RUN_STATE, state)
    default = "" if "MLFLOW_TRACKING_URI" in os.environ else " (MLFLOW_TRACKING_URI is not set: MLflow's default)"
    ctx.log.info(
        "mlflow: run %s in experiment %r at %s%s%s; artifacts to %s",
        info.run_id,
        experiment_name,
        uri,
        default,
        " (continued)" if run_id else "",
        where["artifact_uri"],
    )


def _continued(mlflow: Any, earlier: dict[str, Any], uri: str, ctx: RunContext) -> str | None:
    """The MLflow run a resumed run continues: the one its first attempt started, when that is in
    this tracking store; else ``None`` (a new MLflow run starts, with a warning saying why)."""
    if not earlier.get("run_id") or "MLFLOW_RUN_ID" in os.environ:
        return None
    if earlier.get("tracking_uri") != uri:
        ctx.log.warning(
            "mlflow: this run was tracked in %s as run %s; MLFLOW_TRACKING_URI is %s now, so a new MLflow run starts",
            earlier.get("tracking_uri"),
            earlier["run_id"],
            uri,
        )
        return None
    try:
        mlflow.start_run(run_id=earlier["run_id"], nested=mlflow.active_run() is not None)
    except Exception as exc:  # noqa: BLE001 - deleted or not found in this store: start afresh
        ctx.log.warning("mlflow: run %s cannot be continued (%s), so a new MLflow run starts", earlier["run_id"], exc)
        return None
    return str(earlier["run_id"])


def final_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The figures of ``metrics.json`` as MLflow metrics: ``<split>/<name>`` for every finite number
    of the train, validation and test splits (per-class ``f1/<label>`` too, labels in any script),
    and ``seconds``; each part of a name cleaned of what MLflow refuses (characters beyond letters,
    digits, ``_-. :``; a part that is empty, ``.`` or ``..``)."""
    out: dict[str, float] = {}

    def put(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return
        parts = [re.sub(r"[^\w\-. :]", "_", part) for part in name.split("/")]
        out["/".join("_" if part.strip(".") == "" else part for part in parts)] = float(value)

    for split in ("train", "validation", "test"):
        for key, value in (metrics.get(split) or {}).items():
            put(f"{split}/{key}", value)
    put("seconds", metrics.get("seconds"))
    return out


@contextlib.contextmanager
def tracked(ctx: RunContext) -> Iterator[None]:
    """Around a run's steps and save: when the block ends normally, the MLflow run that
    :func:`start_tracking` started gets the final metrics and :data:`ARTIFACTS` and ends FINISHED;
    when it raises, the MLflow run ends FAILED (KILLED for an interrupt) and the error goes on.
    Nothing happens when no MLflow run was started.  A tracker that fails at the end is a warning:
    the run folder is complete by then."""
    try:
        yield
    except BaseException as exc:
        if ctx.state.get(_RUN):
            _end(ctx, "FAILED" if isinstance(exc, Exception) else "KILLED")
        raise
    if ctx.state.get(_RUN):
        _finish(ctx)


def _finish(ctx: RunContext) -> None:
    import json

    import mlflow

    out, run_id = ctx.output_dir, ctx.state[_RUN]
    try:
        metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        step = (metrics.get("train") or {}).get("steps")
        mlflow.log_metrics(final_metrics(metrics), step=step if isinstance(step, int) else None)
        for name in ARTIFACTS:
            if (out / name).is_file():
                mlflow.log_artifact(str(out / name))
    except Exception as exc:  # noqa: BLE001 - the run folder is complete; the tracker's copy is not
        ctx.log.warning("mlflow: the final metrics and files were not all logged to run %s: %s", run_id, exc)
        _end(ctx, "FAILED")
        return
    _end(ctx, "FINISHED")
    ctx.log.info("mlflow: run %s finished: metrics, card and files logged", run_id)


def _end(ctx: RunContext, status: str) -> None:
    import mlflow

    run_id = ctx.state.pop(_RUN)
    try:
        active = mlflow.active_run()
        if active is not None and active.info.run_id == run_id:
            mlflow.end_run(status)
        else:  # ended already (by the callback, or a nested run left open): set the status by id
            mlflow.MlflowClient().set_terminated(run_id, status)
    except Exception as exc:  # noqa: BLE001 - never hide the run's own outcome behind the tracker's
        ctx.log.warning("mlflow: run %s could not be ended %s: %s", run_id, status, exc)
