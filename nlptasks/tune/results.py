"""What a study leaves in its folder: ``results.md`` (one row per trial), ``best.toml`` (the best
trial's resolved recipe, runnable with ``nlptasks run best.toml``), ``history.png`` and
``importance.png`` (Optuna's matplotlib plots) and ``best-run``, a link to the best trial's run
folder."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlptasks.engine.io.outputs import atomic_file, write_text
from nlptasks.recipe import OutputConfig, dump_toml, read_toml

__all__ = [
    "BEST_LINK",
    "BEST_TOML",
    "COUNTED",
    "HISTORY_PNG",
    "IMPORTANCE_PNG",
    "RESULTS_MD",
    "TrialRow",
    "best_row",
    "best_toml_text",
    "state_of",
    "trial_rows",
    "write_plots",
    "write_results",
]

RESULTS_MD = "results.md"
BEST_TOML = "best.toml"
HISTORY_PNG = "history.png"
IMPORTANCE_PNG = "importance.png"
BEST_LINK = "best-run"

COUNTED = ("complete", "pruned", "failed")
"""The states that count towards a study's trials: a trial whose process was killed
(``interrupted``) does not, and another is run."""


def state_of(trial: Any) -> str | None:
    """``complete``, ``pruned``, ``failed`` (an error the run reported), ``interrupted`` (its
    process was killed or raised something unexpected), ``running``, or ``None`` (waiting, or a
    surplus trial that was never run)."""
    name = trial.state.name
    attrs = trial.user_attrs
    if name == "COMPLETE":
        return "complete"
    if name == "PRUNED":
        return "pruned"
    if name == "RUNNING":
        return "running"
    if name == "FAIL":
        if attrs.get("surplus"):
            return None
        return "failed" if "error" in attrs else "interrupted"
    return None


@dataclass
class TrialRow:
    """One trial as the results table shows it."""

    number: int
    state: str
    params: dict[str, Any]
    value: float | None
    seconds: float | None
    note: str = ""
    run_dir: Path | None = None
    attrs: dict[str, Any] = field(default_factory=dict, repr=False)


def trial_rows(trials: Iterable[Any]) -> list[TrialRow]:
    """The rows of ``study.get_trials()`` that a table shows, by trial number."""
    rows = []
    for t in trials:
        state = state_of(t)
        if state is None:
            continue
        attrs = dict(t.user_attrs)
        if state == "failed":
            note = str(attrs.get("error", "")).splitlines()[0] if attrs.get("error") else ""
        elif state == "pruned":
            note = f"pruned at step {attrs.get('pruned_step', '?')}"
        elif state == "interrupted":
            retry = t.system_attrs.get("failed_trial")
            note = "process killed or interrupted; not counted" + (f" (retry of #{retry})" if retry is not None else "")
        else:
            note = ""
        value = t.value if state in ("complete", "pruned") and t.value is not None else None
        if value is None and state == "pruned" and t.intermediate_values:
            value = t.intermediate_values[max(t.intermediate_values)]
        run_dir = Path(attrs["run_dir"]) if attrs.get("run_dir") else None
        rows.append(TrialRow(t.number, state, dict(t.params), value, attrs.get("seconds"), note, run_dir, attrs))
    return sorted(rows, key=lambda r: r.number)


def best_row(rows: list[TrialRow], greater: bool) -> TrialRow | None:
    """The complete trial with the best objective (the earliest among equals)."""
    complete = [r for r in rows if r.state == "complete" and r.value is not None and math.isfinite(r.value)]
    if not complete:
        return None
    return sorted(complete, key=lambda r: (-r.value if greater else r.value, r.number))[0]  # type: ignore[operator]


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[TrialRow], metric: str, best: TrialRow | None) -> str:
    """The trials as a Markdown table: trial, params, objective, state, seconds, note."""
    lines = [f"| trial | params | {metric} | state | seconds | note |", "| ---: | --- | ---: | --- | ---: | --- |"]
    for r in rows:
        params = ", ".join(f"{k}={_value(v)}" for k, v in r.params.items())
        value = f"{r.value:.4f}" if r.value is not None else "-"
        mark = " (best)" if best is not None and r.number == best.number else ""
        seconds = f"{r.seconds:.0f}" if isinstance(r.seconds, (int, float)) else "-"
        lines.append(f"| {r.number}{mark} | {_cell(params)} | {value} | {r.state} | {seconds} | {_cell(r.note)} |")
    return "\n".join(lines)


def best_toml_text(recipe: dict[str, Any], best: TrialRow, metric: str, study_dir: Path) -> str:
    """``best.toml``: the best trial's resolved recipe without ``[tune]``, with ``[output]`` back to
    its defaults (data paths are absolute in a resolved recipe, so it runs from anywhere)."""
    data = {k: v for k, v in recipe.items() if k != "tune"}
    data["output"] = OutputConfig().model_dump(mode="json")
    value = f"{best.value:.6g}" if best.value is not None else "?"
    header = (
        f"The best trial (#{best.number}, validation {metric} {value}) of the study in {study_dir}.\n"
        f"Its values: {', '.join(f'{k} = {_value(v)}' for k, v in best.params.items())}.\n"
        "Run it: nlptasks run best.toml"
    )
    return dump_toml(data, header=header)


def write_plots(study: Any, study_dir: Path, metric: str, rows: list[TrialRow]) -> list[str]:
    """``history.png`` and (with at least 2 complete trials) ``importance.png``; returns notes on
    what was not drawn and why."""
    notes = []
    complete = sum(r.state == "complete" for r in rows)
    if complete == 0:
        return [f"{HISTORY_PNG} and {IMPORTANCE_PNG} not drawn: no complete trial yet"]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from optuna.visualization.matplotlib import plot_optimization_history, plot_param_importances
    except ImportError as exc:
        return [f"no plots: {exc}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna's ExperimentalWarning on its matplotlib plots
        ax = plot_optimization_history(study, target_name=metric)
        _save_figure(ax.figure, study_dir / HISTORY_PNG)
        plt.close(ax.figure)
        if complete < 2:
            notes.append(
                f"{IMPORTANCE_PNG} not drawn: parameter importances need at least 2 complete trials "
                f"(the study has {complete})"
            )
            return notes
        try:
            ax = plot_param_importances(study, target_name=metric)
            _save_figure(ax.figure, study_dir / IMPORTANCE_PNG)
            plt.close(ax.figure)
        except (RuntimeError, ValueError, ZeroDivisionError) as exc:
            notes.append(f"{IMPORTANCE_PNG} not drawn: {exc}")
    return notes


def _save_figure(figure: Any, path: Path) -> None:
    """``figure`` as a PNG, written atomically (write errors named)."""
    with atomic_file(path, "output.dir", binary=True) as fh:
        figure.savefig(fh, format="png", dpi=100, bbox_inches="tight")


def write_results(
    study: Any, study_dir: Path, metric: str, greater: bool, title: str, fallback_recipe: Any = None
) -> tuple[list[TrialRow], TrialRow | None, str, list[str]]:
    """Write the study folder's results; return ``(rows, best, the Markdown table, notes)``.

    :param fallback_recipe: ``f(best row) -> resolved recipe dict`` for a best trial whose run
        folder is not on this machine (another machine ran it).
    """
    rows = trial_rows(study.get_trials(deepcopy=False))
    best = best_row(rows, greater)
    table = markdown_table(rows, metric, best)
    finished = sum(r.state in COUNTED for r in rows)
    lines = [
        f"# {title}",
        "",
        f"{finished} finished trials (complete, pruned or failed); objective: validation "
        f"{metric} ({'maximize' if greater else 'minimize'}).",
        "",
        table,
        "",
    ]
    notes = []
    running = sum(r.state == "running" for r in rows)
    if running:  # another process (machine) is still in a trial: these results are not its last
        notes.append(
            f"{running} trial(s) still running in another process: the last process to end writes the "
            "complete results (or run the same command again then)"
        )
    for name in (BEST_TOML, BEST_LINK):
        path = study_dir / name
        if path.is_symlink() or path.exists():
            path.unlink()
    if best is not None:
        recipe_file = best.run_dir / "recipe.toml" if best.run_dir is not None else None
        if recipe_file is not None and recipe_file.is_file():
            recipe = read_toml(recipe_file)
        elif fallback_recipe is not None:
            recipe = fallback_recipe(best)
        else:
            recipe = None
        if recipe is not None:
            write_text(study_dir / BEST_TOML, best_toml_text(recipe, best, metric, study_dir), "output.dir")
        if best.run_dir is not None and best.run_dir.is_dir():
            try:
                (study_dir / BEST_LINK).symlink_to(
                    best.run_dir.relative_to(study_dir) if best.run_dir.is_relative_to(study_dir) else best.run_dir
                )
            except OSError as exc:
                notes.append(f"no {BEST_LINK} link: {exc}")
        lines += [
            f"Best: trial {best.number}, validation {metric} {best.value:.4f}; run folder "
            f"{best.run_dir}; its recipe: {BEST_TOML} (`nlptasks run {BEST_TOML}`).",
            "",
        ]
    else:
        lines += ["No complete trial yet: no best.toml.", ""]
    notes += write_plots(study, study_dir, metric, rows)
    lines += [f"- {n}" for n in notes]
    write_text(study_dir / RESULTS_MD, "\n".join(lines).rstrip() + "\n", "output.dir")
    return rows, best, table, notes
