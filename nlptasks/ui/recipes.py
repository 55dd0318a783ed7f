"""Recipes for the *New run* page: the list, a recipe's values and the JSON Schema its form is
generated from, validation (``nlptasks validate``'s own code: every problem at once, each at its
key path), and the ``nlptasks run`` command line a start runs.

The form sends only the keys it changed, each as the text ``--set KEY=VALUE`` takes.  Two keys
the page cannot switch on unless the dashboard was started with ``--allow-remote-code``:
``model.trust_remote_code`` (runs code from a model's repository) and ``model.allow_pickle``
(unpickles weights files, which can run code): a start with either on, from the form or the recipe
file, is refused naming the key.
"""

from __future__ import annotations

import shlex
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nlptasks.errors import NlptasksError, RecipeError
from nlptasks.serve.errors import ApiError
from nlptasks.ui.paths import Roots

__all__ = ["GUARDED_KEYS", "command_line", "flatten", "list_recipes", "overrides_of", "recipe_form", "validate"]

GUARDED_KEYS = ("model.trust_remote_code", "model.allow_pickle")
"""Keys that run code from elsewhere when true: the page may not switch them on (``--allow-remote-code``)."""

GUARDED = (
    "true runs code that is not in this machine's files; the dashboard starts such a run only when it "
    "was started with --allow-remote-code (or run the command in a terminal)"
)

KEPT_BY_DASHBOARD = ("output.dir",)
"""Keys the dashboard sets itself: a run it starts goes to its first runs folder."""


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"epochs": 1}}`` → ``{"train.epochs": 1}`` (lists and empty tables kept as values)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


def _summary(path: Path) -> dict[str, Any]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return {"task": None, "description": None, "problem": f"cannot be read: {exc}"}
    task = raw.get("task")
    if not isinstance(task, str):
        return {"task": None, "description": None, "problem": 'no task = "...": not a recipe'}
    return {"task": task, "description": raw.get("description")}


def list_recipes(roots: Roots, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recipes a run can start from: every ``*.toml`` with a ``task`` under the recipes folders
    (``--recipes``), then the resolved ``recipe.toml`` of each complete run."""
    found = []
    for k, folder in enumerate(roots.recipes):
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.toml")):
            relative = path.relative_to(folder)
            if any(part.startswith(".") for part in relative.parts) or not path.resolve().is_relative_to(folder):
                continue
            summary = _summary(path)
            if summary.get("task"):
                found.append({"id": f"r{k}/{relative.as_posix()}", "path": str(path), "source": "recipes", **summary})
    for row in runs:
        if row.get("status") == "complete":
            found.append(
                {
                    "id": f"run/{row['id']}",
                    "path": str(Path(row["path"]) / "recipe.toml"),
                    "source": "run",
                    "task": row["task"],
                    "description": f"the recipe of run {row['id']}",
                }
            )
    return found


_SCHEMA: dict[str, Any] = {}


def recipe_schema() -> dict[str, Any]:
    """``nlptasks schema``: the recipe JSON Schema with every installed task's ``[options]``."""
    if not _SCHEMA:
        from nlptasks.pipeline import get_host
        from nlptasks.recipe import recipe_json_schema

        _SCHEMA.update(recipe_json_schema(get_host().tasks))
    return _SCHEMA


def recipe_form(roots: Roots, recipe_id: str, allow_remote_code: bool = False) -> dict[str, Any]:
    """What the form needs: the recipe's path, task, its values by key path, the JSON Schema and
    the keys the page may not switch on (none with ``allow_remote_code``)."""
    from nlptasks.recipe import read_toml

    path = roots.recipe(recipe_id)
    try:
        raw = read_toml(path)
    except NlptasksError as exc:
        raise ApiError(400, f"recipe: {exc.message}", "recipe") from None
    return {
        "id": recipe_id,
        "path": str(path),
        "task": raw.get("task"),
        "values": flatten(raw),
        "schema": recipe_schema(),
        "guarded": [] if allow_remote_code else list(GUARDED_KEYS),
        "kept": list(KEPT_BY_DASHBOARD),
    }


def overrides_of(changes: Mapping[str, Any]) -> list[str]:
    """``{"train.epochs": "2"}`` → ``["train.epochs=2"]``: the ``--set`` texts of the form's changes
    (a value that is not text is written as TOML)."""
    from nlptasks.recipe import override_text

    out = []
    for key, value in changes.items():
        if not isinstance(key, str) or not key or key.strip() != key:
            raise ApiError(400, f"overrides: {key!r} is not a recipe key path (train.epochs)", "overrides")
        out.append(f"{key}={value}" if isinstance(value, str) else override_text(key, value))
    return out


def validate(path: Path, overrides: list[str], allow_remote_code: bool = False) -> dict[str, Any]:
    """``nlptasks validate RECIPE --set ...``: ``{"ok", "problems": [{"where", "message"}], "notes",
    "task", "hint"}``, every problem of the recipe at once (``where``: its key path); also what
    ``run`` checks before it reads data (libraries, ``config.json``).  The keys the dashboard sets
    itself, and the guarded keys unless ``allow_remote_code``, are problems too."""
    from nlptasks.pipeline import load_recipe
    from nlptasks.pipeline.validate import check_launch, machine_notes, preflight
    from nlptasks.recipe import parse_override

    problems: list[dict[str, str]] = []
    guarded = GUARDED if not allow_remote_code else ""
    for item in overrides:
        key = item.partition("=")[0]
        if key in GUARDED_KEYS and guarded:
            try:
                value = parse_override(item)[1]
            except RecipeError:
                value = None
            if value is not False:
                problems.append({"where": key, "message": f"the page cannot switch it on: {guarded}"})
        if key in KEPT_BY_DASHBOARD:
            problems.append(
                {"where": key, "message": "the dashboard sets it: a run started here goes to its runs folder (--runs)"}
            )
    hint = None
    notes: list[str] = []
    task = None
    try:
        loaded = load_recipe(str(path), overrides)
        task = loaded.task.name
        for key in GUARDED_KEYS:
            section, _, name = key.partition(".")
            said = any(p["where"] == key for p in problems)
            if getattr(getattr(loaded.recipe, section), name) and guarded and not said:
                problems.append({"where": key, "message": f"the recipe switches it on: {guarded}"})
        check_launch(loaded, None)
        preflight(loaded)
        notes = machine_notes(loaded)
    except RecipeError as exc:
        problems += [{"where": p.where, "message": p.message} for p in exc.problems]
        hint = exc.hint
    except NlptasksError as exc:
        problems += [{"where": p.where, "message": p.message} for p in exc.problems] or [
            {"where": "", "message": exc.message}
        ]
        hint = exc.hint
    return {"ok": not problems, "problems": problems, "notes": notes, "task": task, "hint": hint}


def command_line(path: Path, overrides: list[str], extra: Sequence[str] = ()) -> str:
    """``nlptasks run RECIPE --set KEY=VALUE ...``: what a terminal would run (quoted for a shell)."""
    parts = ["nlptasks", "run", str(path), *extra]
    for item in overrides:
        parts += ["--set", item]
    return shlex.join(parts)
