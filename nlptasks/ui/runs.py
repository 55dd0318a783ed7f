"""The runs list and one run's records, read from the run folders as ``nlptasks run`` leaves them.

A run is ``<runs folder>/<task>/<name>/`` holding ``nlptasks-run.json`` (written when it starts);
``COMPLETE`` marks a finished one (docs/architecture.md, the run folder).  A folder whose files
cannot be read is listed as ``damaged`` with the reason, never left out silently and never an
error of the whole list.  Nothing here loads a model or imports torch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nlptasks.ui.paths import Roots

__all__ = [
    "MANIFEST",
    "RUNNING_WINDOW_S",
    "RUN_STATE",
    "evaluations",
    "list_runs",
    "main_metric",
    "read_json",
    "run_detail",
    "status_of",
]

# The run folder's files, as nlptasks.engine.io.rundir names them (the contract of a run folder).
MANIFEST = "nlptasks.json"
COMPLETE = "COMPLETE"
RUN_STATE = "nlptasks-run.json"
METRICS = "metrics.json"
CARD = "README.md"
FULL_STATE = ("optimizer.pt", "trainer_state.json")
"""What a checkpoint holds when ``--resume`` can continue from it (``output.checkpoint_steps``)."""

RUNNING_WINDOW_S = 120.0
"""An incomplete run none of whose files changed for this long is not running (a run started
outside the dashboard; one it started, it knows)."""


def read_json(path: Path) -> Any:
    """``path`` parsed, or ``None`` when it is absent; a damaged file raises ``ValueError`` naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path.name}: cannot be read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path.name}: not JSON ({exc.msg} at line {exc.lineno})") from None


def _is_run(folder: Path) -> bool:
    return (folder / RUN_STATE).is_file() or (folder / MANIFEST).is_file() or (folder / COMPLETE).exists()


def run_folders(roots: Roots) -> list[Path]:
    """Every run folder under the runs folders (``<root>/<task>/<name>``), tune studies and hidden
    folders left out; a folder whose symbolic link leads outside its runs folder is left out too."""
    found = []
    for root in roots.runs:
        if not root.is_dir():
            continue
        for task_dir in sorted(root.iterdir()):
            if task_dir.name.startswith(".") or not task_dir.is_dir():
                continue
            for folder in sorted(task_dir.iterdir()):
                if folder.name.startswith((".", "tune-")) or not folder.is_dir():
                    continue
                if folder.is_symlink() and not folder.resolve().is_relative_to(root):
                    continue
                if _is_run(folder):
                    found.append(folder)
    return found


def status_of(run_dir: Path, job: Mapping[str, Any] | None, now: float | None = None) -> tuple[str, str | None]:
    """``(status, note)``: ``complete``; ``queued``, ``running``, ``stopped`` or ``failed`` (a run the
    dashboard started: its job says, with the error it ended on); ``running`` (files changed in the
    last :data:`RUNNING_WINDOW_S`); ``resumable`` (stopped with a checkpoint ``--resume`` continues
    from); else ``incomplete``."""
    if (run_dir / COMPLETE).exists():
        return "complete", None
    if job is not None and job.get("state") in ("queued", "running"):
        return str(job["state"]), None
    resumable = any(
        all((c / name).is_file() for name in FULL_STATE) for c in (run_dir / "checkpoints").glob("checkpoint-*")
    )
    if job is not None and job.get("state") == "failed":
        return "failed", (job.get("error") or "the run failed") + (" (resumable)" if resumable else "")
    newest = _newest_change(run_dir)
    now = time.time() if now is None else now
    if job is None and newest is not None and now - newest < RUNNING_WINDOW_S:
        return "running", f"started outside this dashboard; its files changed {now - newest:.0f} s ago"
    if resumable:
        return "resumable", "stopped with a checkpoint: Resume continues it (nlptasks run RECIPE --resume RUN)"
    if job is not None and job.get("state") == "stopped":
        return "stopped", "stopped before its first checkpoint (output.checkpoint_steps): start it again"
    return "incomplete", "ended before it finished, without a checkpoint to resume from: start it again"


def _newest_change(run_dir: Path) -> float | None:
    times = []
    for path in (run_dir, run_dir / "checkpoints"):
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            pass
    return max(times) if times else None


def main_metric(task: str, recipe: Mapping[str, Any] | None, metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """The metric that picked the run's best checkpoint (``train.best_metric``, else the task's), on
    test when the run has a test split, else validation: ``{"name", "split", "value"}``."""
    name = ((recipe or {}).get("train") or {}).get("best_metric") or _task_metric(task, (recipe or {}).get("options"))
    for split in ("test", "validation"):
        values = metrics.get(split)
        if isinstance(values, dict) and isinstance(values.get(name), (int, float)):
            return {"name": name, "split": split, "value": values[name]}
    return None


_TASK_METRICS: dict[str, str] = {}


def _task_metric(task: str, options: Any) -> str:
    """The task's own best metric (its plugin says; ``loss`` for a task the host does not know)."""
    key = f"{task}:{json.dumps(options, sort_keys=True, default=str)}"
    if key not in _TASK_METRICS:
        try:
            from nlptasks.pipeline import get_host

            spec = get_host().tasks[task]
            _TASK_METRICS[key] = spec.best_metric_for(spec.options.model_validate(options or {}))
        except Exception:  # noqa: BLE001 - an unknown task or options its plugin refuses now: loss
            _TASK_METRICS[key] = "loss"
    return _TASK_METRICS[key]


def run_row(roots: Roots, run_dir: Path, job: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One line of the runs list: id, task, name, recipe, date, status (with a note or the error),
    the main metric, wall time and training tokens/s."""
    row: dict[str, Any] = {
        "id": roots.run_id(run_dir),
        "task": run_dir.parent.name,
        "name": run_dir.name,
        "path": str(run_dir),
        "recipe": None,
        "date": None,
        "metric": None,
        "seconds": None,
        "tokens_per_second": None,
        "job": job.get("id") if job else None,
    }
    try:
        state = read_json(run_dir / RUN_STATE) or {}
        manifest = read_json(run_dir / MANIFEST) or {}
        status, note = status_of(run_dir, job)
        metrics = read_json(run_dir / METRICS) if status == "complete" else None
        if status == "complete" and not isinstance(metrics, dict):
            raise ValueError(f"{METRICS}: missing from a complete run")
    except (ValueError, OSError) as exc:
        row.update(status="damaged", note=str(exc))
        return row
    recipe = state.get("recipe") if isinstance(state.get("recipe"), dict) else None
    row["task"] = str(manifest.get("task") or (recipe or {}).get("task") or row["task"])
    row["recipe"] = state.get("recipe_path")
    row["date"] = manifest.get("created") or state.get("started")
    row["status"], row["note"] = status, note
    if isinstance(metrics, dict):
        row["metric"] = main_metric(row["task"], recipe, metrics)
        row["seconds"] = metrics.get("seconds")
        row["tokens_per_second"] = (metrics.get("train") or {}).get("tokens_per_second")
    return row


def list_runs(roots: Roots, jobs: Mapping[Path, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every run's :func:`run_row`, newest first; ``jobs``: the dashboard's jobs by run folder."""
    folders = run_folders(roots)
    seen = {folder.resolve() for folder in folders}
    waiting = [Path(j["run_dir"]) for d, j in jobs.items() if d not in seen and j.get("state") in ("queued", "running")]
    rows = [run_row(roots, folder, jobs.get(folder.resolve())) for folder in folders + waiting]
    rows.sort(key=lambda r: (str(r.get("date") or "~"), r["id"]), reverse=True)  # starting runs first
    return rows


def split_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """``(by split, per class)``: each split's plain metrics, and its per-class (per-type) table
    from keys such as ``f1/正面`` (``{"columns": [...], "rows": {class: {column: value}}}``)."""
    plain: dict[str, dict[str, Any]] = {}
    per_class: dict[str, dict[str, Any]] = {}
    for split, values in metrics.items():
        if not isinstance(values, dict) or split in ("dropped", "resources", "computed"):
            continue
        plain[split] = {k: v for k, v in values.items() if "/" not in k and isinstance(v, (int, float, str))}
        table: dict[str, dict[str, Any]] = {}
        columns: list[str] = []
        for key, value in values.items():
            column, _, name = key.partition("/")
            if name and isinstance(value, (int, float)):
                table.setdefault(name, {})[column] = value
                if column not in columns:
                    columns.append(column)
        if table:
            per_class[split] = {"columns": columns, "rows": table}
    return plain, per_class


def evaluations(run_dir: Path) -> list[dict[str, Any]]:
    """The run's ``nlptasks eval`` results (``<run>/eval/*/metrics.json``), oldest first."""
    found: list[dict[str, Any]] = []
    for path in sorted((run_dir / "eval").glob("*/metrics.json")):
        try:
            record = read_json(path) or {}
        except ValueError as exc:
            found.append({"folder": path.parent.name, "error": str(exc)})
            continue
        test: dict[str, Any] = record["test"] if isinstance(record.get("test"), dict) else {}
        found.append(
            {
                "folder": path.parent.name,
                "source": record.get("source"),
                "metrics": {k: v for k, v in test.items() if "/" not in k and isinstance(v, (int, float))},
            }
        )
    return found


def _exports(run_dir: Path) -> list[dict[str, Any]]:
    """The exports measured against the run (``deployments.json``): folder, backend, whether it
    agrees with the run, its speed."""
    try:
        record = read_json(run_dir / "deployments.json") or {}
    except ValueError:
        return []
    out = []
    for entry in record.get("deployments") or []:
        if isinstance(entry, dict):
            out.append({k: entry.get(k) for k in ("folder", "backend", "label", "agrees", "why", "speed", "at")})
    return out


def commands(run_dir: Path, manifest: Mapping[str, Any], state: Mapping[str, Any], example: str) -> dict[str, str]:
    """The exact commands to reproduce, resume, infer with, evaluate, export and serve the run."""
    import shlex

    run = shlex.quote(str(run_dir))
    out = {"reproduce": f"nlptasks run {shlex.quote(str(run_dir / 'recipe.toml'))} --set output.run_name=NEW_NAME"}
    if (run_dir / COMPLETE).exists():
        out["infer"] = f"nlptasks infer --model {run} {shlex.quote(example or 'your text')}"
        out["evaluate"] = f"nlptasks eval {run} --data NEW_DATA.csv"
        out["export"] = f"nlptasks export {run} --onnx {shlex.quote(str(run_dir) + '-onnx')}"
        out["serve"] = f"nlptasks serve {run}"
    else:
        recipe = state.get("recipe_path") or str(run_dir / "recipe.toml")
        out["resume"] = f"nlptasks run {shlex.quote(str(recipe))} --resume {run}"
    return out


def _example(manifest: Mapping[str, Any]) -> str:
    raw = manifest.get("example")
    if isinstance(raw, list):
        return "\t".join(str(x) for x in raw)
    return str(raw) if raw else ""


def run_detail(roots: Roots, run_dir: Path, job: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the run page shows: its row, card (``README.md``), metrics by split, per-class tables,
    evals, exports, adapters, files and commands.  A file that cannot be read is named in
    ``problems``; the rest still shows."""
    row = run_row(roots, run_dir, job)
    problems: list[str] = [row["note"]] if row["status"] == "damaged" and row.get("note") else []

    def read(name: str) -> Any:
        try:
            return read_json(run_dir / name)
        except ValueError as exc:
            problems.append(str(exc))
            return None

    manifest = read(MANIFEST) or {}
    state = read(RUN_STATE) or {}
    metrics = read(METRICS) or {}
    try:
        card = (run_dir / CARD).read_text(encoding="utf-8")
    except FileNotFoundError:
        card = None
    except (OSError, UnicodeDecodeError) as exc:
        card = None
        problems.append(f"{CARD}: cannot be read ({exc})")
    plain, per_class = split_metrics(metrics if isinstance(metrics, dict) else {})
    peft: dict[str, Any] = manifest["peft"] if isinstance(manifest.get("peft"), dict) else {}
    adapters = sorted((peft.get("adapters") or {}).keys()) if isinstance(peft.get("adapters"), dict) else []
    files = (
        sorted(p.name for p in run_dir.iterdir() if p.is_file() and not p.name.startswith("."))
        if run_dir.is_dir()
        else []
    )
    return {
        **row,
        "card": card,
        "metrics": plain,
        "per_class": per_class,
        "resources": metrics.get("resources") if isinstance(metrics, dict) else None,
        "evals": evaluations(run_dir),
        "exports": _exports(run_dir),
        "adapters": adapters,
        "files": files,
        "commands": commands(run_dir, manifest, state, _example(manifest)),
        "problems": problems,
    }
