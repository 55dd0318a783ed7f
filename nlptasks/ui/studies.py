"""``nlptasks tune`` studies under the runs folders: ``<runs>/<task>/tune-<study>/`` (docs/tune.md).

A study's trials are read from its ``study.db`` through Optuna (the ``tune`` extra) with
``nlptasks tune``'s own rows (:func:`nlptasks.tune.trial_rows`): number, state, parameters,
objective value, seconds, note and the trial's run folder (a run of the runs list); the best
trial is :func:`nlptasks.tune.best_row`'s and its recipe the folder's ``best.toml``.  A study
kept elsewhere (``--storage postgresql://...``) shows its ``results.md`` (what the last
``nlptasks tune`` wrote).  Optuna's own dashboard draws more plots of the same database:
docs/ui.md says when to use it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from nlptasks.serve.errors import ApiError
from nlptasks.ui.paths import Roots, confine

__all__ = ["list_studies", "study_detail"]

STUDY_DB = "study.db"


def list_studies(roots: Roots) -> list[dict[str, Any]]:
    """Every study folder: ``{"id": "K/TASK/tune-NAME", "task", "name", "path", "has_db"}``."""
    found = []
    for k, root in enumerate(roots.runs):
        if not root.is_dir():
            continue
        for folder in sorted(root.glob("*/tune-*")):
            if folder.is_dir() and folder.resolve().is_relative_to(root):
                found.append(
                    {
                        "id": f"{k}/{folder.parent.name}/{folder.name}",
                        "task": folder.parent.name,
                        "name": folder.name.removeprefix("tune-"),
                        "path": str(folder),
                        "has_db": (folder / STUDY_DB).is_file(),
                        "has_best": (folder / "best.toml").is_file(),
                    }
                )
    return found


def _folder(roots: Roots, study_id: str) -> Path:
    head, _, rest = study_id.partition("/")
    if not head.isdigit() or rest.count("/") != 1 or not rest.split("/")[1].startswith("tune-"):
        raise ApiError(400, f"id: {study_id!r} is not a study id; they look like 0/cls/tune-NAME", "id")
    root = roots.runs_root(head, "id")
    folder = confine(root, rest, "id", f"the runs folder {root}")
    if not folder.is_dir():
        raise ApiError(404, f"id: no study {study_id!r}: {folder} is not there (deleted?)", "id")
    return folder


def _number(value: Any) -> Any:
    return value if not isinstance(value, float) or math.isfinite(value) else None


def study_detail(roots: Roots, study_id: str) -> dict[str, Any]:
    """The study's trials (from ``study.db``), its best trial and ``best.toml``, and ``results.md``."""
    folder = _folder(roots, study_id)
    out: dict[str, Any] = {"id": study_id, "path": str(folder), "trials": [], "best": None, "problem": None}
    for name, key in (("best.toml", "best_toml"), ("results.md", "results")):
        try:
            out[key] = (folder / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            out[key] = None
    db = folder / STUDY_DB
    if not db.is_file():
        out["problem"] = "no study.db here (a study kept in another database: --storage); results.md is what it wrote"
        return out
    try:
        import optuna
    except ImportError:
        out["problem"] = 'reading study.db needs Optuna: pip install "nlptasks[tune]"; results.md is shown instead'
        return out
    from nlptasks.tune import best_row, trial_rows

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{db}"
    try:
        names = optuna.study.get_all_study_names(storage=url)
        name = folder.name.removeprefix("tune-")
        study = optuna.load_study(study_name=name if name in names else names[0], storage=url)
        rows = trial_rows(study.get_trials(deepcopy=False))
        greater = study.direction.name == "MAXIMIZE"
        metric = study.user_attrs.get("objective", "objective")
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign database: say so, show results.md
        out["problem"] = f"study.db cannot be read: {type(exc).__name__}: {exc}"
        return out
    best = best_row(rows, greater)
    out.update(
        metric=metric,
        direction="maximize" if greater else "minimize",
        best=best.number if best else None,
        trials=[
            {
                "number": r.number,
                "state": r.state,
                "params": r.params,
                "value": _number(r.value),
                "seconds": _number(r.seconds),
                "note": r.note,
                "run": _run_of(roots, r.run_dir),
            }
            for r in rows
        ],
    )
    return out


def _run_of(roots: Roots, run_dir: Path | None) -> str | None:
    """The trial's run folder as a path the page shows (trial folders live inside the study folder)."""
    if run_dir is None:
        return None
    resolved = Path(run_dir).resolve()
    return str(resolved) if any(resolved.is_relative_to(r) for r in roots.runs) else None
