"""``nlptasks compare RUN_DIR ...``: complete runs side by side in one Markdown table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nlptasks.engine.io.rundir import COMPLETE, MANIFEST
from nlptasks.engine.reports.card import RATE_KEYS, num
from nlptasks.engine.training.provenance import COMPUTED_KEYS, computed_text, differences
from nlptasks.errors import NlptasksError, Problem

__all__ = ["compare"]

COMPUTED = " computed"
"""The key an eval's ``computed`` record is kept under beside its metrics (a space: never a metric name)."""


def compare(run_dirs: list[Path]) -> str:
    """One Markdown table of complete runs side by side: each split's metrics, wall time, training
    samples/s, peak memory, then the recipe keys whose values differ between the runs."""
    import tomllib

    problems = []
    for path in run_dirs:
        if not path.is_dir():
            problems.append(f"{path}: no such folder")
        elif not (path / COMPLETE).exists():
            problems.append(f"{path}: not a complete run (no {COMPLETE} marker: still training, or it failed)")
    if problems:
        raise NlptasksError(
            f"cannot compare {len(problems)} of the {len(run_dirs)} runs",
            [Problem("", p) for p in problems],
            hint="Compare finished runs: folders made by `nlptasks run` that hold a COMPLETE file.",
        )
    names = _short_names(run_dirs)
    metrics, manifests, recipes = [], [], []
    for path in run_dirs:
        metrics.append(json.loads((path / "metrics.json").read_text(encoding="utf-8")))
        manifests.append(json.loads((path / MANIFEST).read_text(encoding="utf-8")))
        recipes.append(_flatten(tomllib.loads((path / "recipe.toml").read_text(encoding="utf-8"))))

    header = "| | " + " | ".join(f"`{n}`" for n in names) + " |"
    lines = [header, "|---|" + "---:|" * len(names)]
    lines.append("| task | " + " | ".join(f"`{m.get('task')}`" for m in manifests) + " |")
    rows: list[str] = []
    for split in ("validation", "test"):
        for m in metrics:
            for k, v in (m.get(split) or {}).items():
                key = f"{split} {k}"
                if "/" not in k and k not in RATE_KEYS and isinstance(v, (int, float)) and key not in rows:
                    rows.append(key)
    for key in rows:
        split, k = key.split(" ", 1)
        lines.append(f"| {key} | " + " | ".join(num((m.get(split) or {}).get(k)) for m in metrics) + " |")
    evals = [_evaluations(path) for path in run_dirs]  # nlptasks eval results, beside the run's own
    for data_name in sorted({name for e in evals for name in e}):
        keys: list[str] = []
        for e in evals:
            keys += [
                k
                for k, v in (e.get(data_name) or {}).items()
                if "/" not in k and k not in RATE_KEYS and isinstance(v, (int, float)) and k not in keys
            ]
        for k in keys:
            lines.append(
                f"| eval `{data_name}` {k} | " + " | ".join(num((e.get(data_name) or {}).get(k)) for e in evals) + " |"
            )
    computed = [m.get("computed") for m in metrics]
    lines.append("| figures computed with | " + " | ".join(computed_text(c) for c in computed) + " |")
    for data_name in sorted({name for e in evals for name in e}):
        cells = []
        for c, e in zip(computed, evals, strict=True):
            record = (e.get(data_name) or {}).get(COMPUTED)
            moved = differences(c, record)
            cells.append(computed_text(record) + (f" **(≠ run: {'; '.join(moved)})**" if moved else ""))
        lines.append(f"| eval `{data_name}` computed with | " + " | ".join(cells) + " |")
    lines.append("| wall time (s) | " + " | ".join(_one(m.get("seconds")) for m in metrics) + " |")
    lines.append(
        "| train samples/s | "
        + " | ".join(_one((m.get("train") or {}).get("samples_per_second")) for m in metrics)
        + " |"
    )
    for label, key, digits in (
        ("train tokens/s", "tokens_per_second", 0),
        ("padding fraction", "padding_fraction", 3),
        ("MFU (estimate)", "mfu", 4),
    ):
        lines.append(
            f"| {label} | " + " | ".join(_one((m.get("train") or {}).get(key), digits) for m in metrics) + " |"
        )
    lines.append(
        "| peak RSS (MiB) | "
        + " | ".join(_one((m.get("resources") or {}).get("peak_rss_mb"), 0) for m in metrics)
        + " |"
    )
    if any("cuda_max_allocated_mb" in (m.get("resources") or {}) for m in metrics):
        lines.append(
            "| CUDA max allocated (MiB) | "
            + " | ".join(_one((m.get("resources") or {}).get("cuda_max_allocated_mb"), 0) for m in metrics)
            + " |"
        )
    ignore = {"output.run_name", "output.dir", "output.overwrite"}
    keys = sorted({k for r in recipes for k in r} - ignore)
    differ = [k for k in keys if len({json.dumps(r.get(k), sort_keys=True) for r in recipes}) > 1]
    if differ:
        lines += ["", "Recipe differences:", "", header, "|---|" + "---|" * len(names)]
        for k in differ:
            lines.append(f"| `{k}` | " + " | ".join(_recipe_value(r.get(k)) for r in recipes) + " |")
    else:
        lines += ["", "Recipes: identical (apart from output.*)."]
    known = [c for c in computed if c]
    apart = [
        f"{k} ({', '.join(str(c.get(k)) for c in known)})"
        for k in COMPUTED_KEYS
        if len({json.dumps(c.get(k)) for c in known}) > 1
    ]
    flagged = [
        f"eval `{name}` of `{n}`: {'; '.join(moved)}"
        for n, c, e in zip(names, computed, evals, strict=True)
        for name, record in sorted(e.items())
        if (moved := differences(c, record.get(COMPUTED)))
    ]
    if apart or flagged:
        lines += [
            "",
            "**Figures computed differently** (threads, precision, backend and device change the last digits and",
            "a near-tie's answer: compare like with like, e.g. `nlptasks eval --precision`, `OMP_NUM_THREADS`):",
            "",
        ]
        if apart:
            lines.append(f"- the runs differ in {', '.join(apart)}")
        lines += [f"- {f}" for f in flagged]
    return "\n".join(lines)


def _evaluations(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The run's ``nlptasks eval`` results under ``<run>/eval``: data file name → its latest
    metrics (folders are named by time, so the last in name order is the latest)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((run_dir / "eval").glob("**/metrics.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(record.get("test"), dict) and record.get("source"):
            found[Path(record["source"]).name] = {**record["test"], COMPUTED: record.get("computed")}
    return found


def _one(value: Any, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        elif not (isinstance(v, dict) and not v):
            out[f"{prefix}{k}"] = v
    return out


def _recipe_value(value: Any) -> str:
    return "-" if value is None else f"`{json.dumps(value, ensure_ascii=False)}`"


def _short_names(paths: list[Path]) -> list[str]:
    """The runs' folder names, with their parent (task) folder when names repeat."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]
