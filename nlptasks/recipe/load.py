"""Loading a recipe: read the TOML, apply ``--set`` overrides, validate every table and the task's
``[options]``, run the rules, resolve paths, and report **every** problem at once.

The task registry is passed in (the plugin host, or anything with a ``tasks`` mapping): this
module knows no plugin host.  ``nlptasks.pipeline.load_recipe`` passes the process's host.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from nlptasks.errors import Problem, RecipeError, did_you_mean
from nlptasks.recipe.rules import (
    QUANT_4BIT_KEYS,
    column_problems,
    combination_problems,
    extra_problems,
    metric_problems,
    migrate_scratch_extra,
    nulls_in_lists,
    optimize_problems,
    peft_problems,
    switch_model_source,
    switch_peft_method,
    value_problems,
)
from nlptasks.recipe.schema import PATH_KEYS, PEFT_METHOD_KEYS, Recipe
from nlptasks.recipe.space import quote_space_keys, space_problems, tune_metric_problems
from nlptasks.recipe.toml import apply_override, parse_override, read_toml
from nlptasks.types import TaskSpec

__all__ = ["LoadedRecipe", "TaskRegistry", "load_recipe", "problems_from", "recipe_json_schema"]

_NOT_HASHED = ("overwrite",)  # [output] keys that do not change what a run computes


class TaskRegistry(Protocol):
    """Where recipes find their task: the plugin host, or anything with a ``tasks`` mapping."""

    @property
    def tasks(self) -> Mapping[str, TaskSpec]: ...


@dataclass
class LoadedRecipe:
    """A validated recipe, its task and the task's validated options."""

    recipe: Recipe
    task: TaskSpec
    options: BaseModel
    path: Path | None
    raw: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    """What loading changed beyond the file and the overrides (the CLI prints each as ``note:``)."""

    def resolved(self) -> dict[str, Any]:
        """The recipe with every default filled in (what a run saves as ``recipe.toml``)."""
        data = self.recipe.model_dump(mode="json")
        data["options"] = self.options.model_dump(mode="json")
        train = data.get("train")
        if isinstance(train, dict) and train.get("eval_strategy") == "no":
            train["keep_best"] = False  # what such a run does; spelt out as true it is refused
        peft = data.get("peft")
        if isinstance(peft, dict):  # only the keys of its method: the file must validate again as it is
            method = peft.get("method")
            for key in list(peft):
                owners = PEFT_METHOD_KEYS.get(key)
                if (owners is not None and method not in owners) or (
                    key in QUANT_4BIT_KEYS and peft.get("quantization") != "4bit"
                ):
                    del peft[key]
        return data

    def fingerprint(self) -> tuple[dict[str, Any], str]:
        """``(the resolved recipe as hashed, its SHA-256)``: sorted-key canonical JSON, without
        the keys that do not change what a run computes (``output.overwrite``).  Equal recipes,
        however written (key order, defaults left out or spelt out), hash the same.  The one
        ``recipe_sha256`` of a run: its manifest and ``--resume`` both use it."""
        resolved = json.loads(json.dumps(self.resolved(), default=str))
        for key in _NOT_HASHED:
            resolved.get("output", {}).pop(key, None)
        text = json.dumps(resolved, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return resolved, hashlib.sha256(text.encode("utf-8")).hexdigest()

    def sha256(self) -> str:
        """The recipe's SHA-256 (see :meth:`fingerprint`)."""
        return self.fingerprint()[1]


def _model_at(loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model that holds the field at ``loc`` (for did-you-mean on unknown keys)."""
    model: type[BaseModel] | None = Recipe
    for part in loc[:-1]:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = _pydantic_model_in(annotation)
    return model


def _pydantic_model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _pydantic_model_in(arg)
        if found is not None:
            return found
    return None


def problems_from(error: ValidationError, prefix: str = "", root: type[BaseModel] | None = None) -> list[Problem]:
    """Turn a pydantic ``ValidationError`` into one :class:`Problem` per error, with key paths."""
    problems = []
    for err in _merge_union_members(error.errors(include_url=False)):
        loc = [str(p) for p in err["loc"]]
        where = ".".join([prefix, *loc] if prefix else loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            holder = root if (root is not None and len(loc) == 1) else _model_at(loc)
            if root is not None and len(loc) > 1:
                holder = None
            known = list(holder.model_fields) if holder is not None else []
            hint = did_you_mean(loc[-1], known)
            allowed = f"; allowed keys: {', '.join(known)}" if known and not hint else ""
            problems.append(Problem(where, f"unknown key{hint}{allowed}"))
        elif kind == "missing":
            problems.append(Problem(where, "required key is missing"))
        else:
            message = err["msg"]
            if message.startswith("Value error, "):
                message = message[len("Value error, ") :]
            if kind not in {"value_error", "assertion_error"} and "input" in err and not isinstance(err["input"], dict):
                message = f"{message} (got {err['input']!r})"
            problems.append(Problem(where, message))
    return problems


_SCALAR_TAGS = {"bool", "int", "float", "str", "none", "dict", "list"}


def _union_tag(part: Any) -> bool:
    """Whether a pydantic location element names a member of a union (``bool``,
    ``literal['auto']``, ``list[str]``...) rather than a key."""
    return isinstance(part, str) and (part in _SCALAR_TAGS or "[" in part)


def _merge_union_members(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """pydantic reports a value that fits no member of a union once per member, each under the
    member's tag (``options.packing.bool``, ``options.packing.literal['auto']``); merge them into
    one error at the key itself that lists what each member accepts."""
    out: list[dict[str, Any]] = []
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if not loc or not _union_tag(loc[-1]) or err["type"] in {"extra_forbidden", "missing"}:
            out.append(err)
            continue
        key = loc[:-1]
        wanted = err["msg"].removeprefix("Input should be ").split(", unable to")[0]
        if key in groups:
            groups[key]["wanted"].append(wanted)
            continue
        merged = {**err, "loc": key, "wanted": [wanted]}
        groups[key] = merged
        out.append(merged)
    for merged in groups.values():
        merged["msg"] = "Input should be " + " or ".join(dict.fromkeys(merged.pop("wanted")))
    return out


def load_recipe(
    path: str | Path | None,
    overrides: Iterable[str] = (),
    host: TaskRegistry | None = None,
    raw: dict[str, Any] | None = None,
    check_files: bool = True,
) -> LoadedRecipe:
    """Read, override and validate a recipe; raise :class:`RecipeError` listing every problem.

    :param path: the TOML file (or ``None`` when ``raw`` is given).
    :param overrides: ``KEY=VALUE`` strings from ``--set``.
    :param host: the task registry (the plugin host): the task and its options model.
    :param check_files: report data files that do not exist.
    """
    if host is None:
        raise TypeError("load_recipe needs the task registry (host=...); nlptasks.load_recipe passes the plugin host")
    tasks = host.tasks
    source = str(path) if path is not None else "<recipe>"
    base = Path(path).resolve().parent if path is not None else Path.cwd()
    if raw is None:
        assert path is not None
        raw = read_toml(Path(path))
    raw = json.loads(json.dumps(raw, default=str))  # deep copy; TOML dates become strings

    file_peft = dict(raw["peft"]) if isinstance(raw.get("peft"), dict) else None
    file_model = dict(raw["model"]) if isinstance(raw.get("model"), dict) else None
    overridden: set[str] = set()
    for item in overrides:
        parts, value = parse_override(item)
        apply_override(raw, parts, value)
        overridden.add(".".join(parts))
    notes = switch_peft_method(raw, file_peft, overridden) + switch_model_source(raw, file_model, overridden)
    migrate_scratch_extra(raw)
    peft_section = raw.get("peft")
    if isinstance(peft_section, dict) and peft_section.get("method") == "none":
        del raw["peft"]  # [peft] switched off: train the whole model, ignore the table's other keys

    # Values pydantic would coerce or word poorly (true for a number, nan) are said first; pydantic's
    # message for the same key is dropped.
    problems: list[Problem] = value_problems({k: v for k, v in raw.items() if k != "options"}, Recipe)
    recipe: Recipe | None = None
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as exc:
        reported = {p.where for p in problems}
        problems += [
            p
            for p in problems_from(exc)
            if p.where != "options" and not p.where.startswith("options.") and p.where not in reported
        ]
    problems += extra_problems(raw)

    # The task and its options, even when other sections have problems.
    task_name = raw.get("task")
    spec: TaskSpec | None = None
    options: BaseModel | None = None
    if isinstance(task_name, str):
        if task_name in tasks:
            spec = tasks[task_name]
        else:
            available = ", ".join(sorted(tasks)) or "none"
            problems.append(
                Problem(
                    "task",
                    f"no plugin provides task {task_name!r}{did_you_mean(task_name, tasks)}; available: {available}",
                )
            )
    elif task_name is not None:
        problems = [p for p in problems if p.where != "task"]
        problems.append(
            Problem(
                "task",
                f'must be a task name in quotes, e.g. task = "cls" (got {task_name!r}); '
                f"tasks: {', '.join(sorted(tasks)) or 'none installed'}",
            )
        )
    raw_options = raw.get("options", {})
    if spec is not None:
        if not isinstance(raw_options, dict):
            problems.append(Problem("options", "must be a table ([options])"))
        else:
            values = value_problems(raw_options, spec.options, "options")
            problems += values
            try:
                options = spec.options.model_validate(raw_options)
            except ValidationError as exc:
                reported = {p.where for p in values}
                problems += [
                    p for p in problems_from(exc, prefix="options", root=spec.options) if p.where not in reported
                ]

    problems += peft_problems(raw, spec, options)
    problems += optimize_problems(raw)
    problems += nulls_in_lists(raw)
    if recipe is not None:
        problems += combination_problems(recipe)
        if spec is not None and options is not None:
            problems += metric_problems(recipe, spec, options)
            problems += column_problems(options)
            problems += tune_metric_problems(recipe, spec, options)
            if spec.recipe_problems is not None:  # the task's own checks across its options and the recipe
                problems += [Problem(key, message) for key, message in spec.recipe_problems(recipe, options)]
            if not problems and recipe.tune is not None:  # each searched key, as a trial would set it
                problems += space_problems(recipe, _checker(path, raw, host))
        _resolve_paths(recipe, base, overridden)
        if check_files:
            problems += _missing_files(recipe)
    problems = quote_space_keys(problems, raw)

    if problems:
        hint = None
        if any(p.message.startswith("unknown key") for p in problems):
            hint = "Every key is listed in docs/recipes.md and by `nlptasks schema`."
        raise RecipeError(source, problems, hint=hint)
    if recipe is None or spec is None or options is None:  # every branch above reports its problem
        raise RecipeError(source, [Problem("", "the recipe is not valid")])
    return LoadedRecipe(
        recipe=recipe, task=spec, options=options, path=Path(path) if path else None, raw=raw, notes=notes
    )


def _checker(path: str | Path | None, raw: dict[str, Any], host: TaskRegistry) -> Any:
    """``check(key parts, value)`` for :func:`space_problems`: the problems of this recipe, without
    its ``[tune]`` table, with one override applied."""

    def check(parts: list[str], value: Any) -> list[Problem]:
        trial = json.loads(json.dumps(raw, default=str))
        trial.pop("tune", None)
        try:
            apply_override(trial, parts, value)
            load_recipe(path, (), host=host, raw=trial, check_files=False)
        except RecipeError as exc:
            return exc.problems or [Problem("", exc.message)]
        return []

    return check


def _resolve_paths(recipe: Recipe, base: Path, overridden: set[str]) -> None:
    data = recipe.data
    for key in PATH_KEYS:
        name = key.split(".")[1]
        value = getattr(data, name)
        if value is None:
            continue
        p = Path(value).expanduser()
        if not p.is_absolute():
            p = (Path.cwd() if key in overridden else base) / p
        setattr(data, name, str(p.resolve()))
    out = Path(recipe.output.dir).expanduser()
    if not out.is_absolute() and "output.dir" in overridden:
        recipe.output.dir = str(out.resolve())
    model = recipe.model
    if model.name_or_path:
        p = Path(model.name_or_path).expanduser()
        root = Path.cwd() if "model.name_or_path" in overridden else base
        looks_local = model.name_or_path.startswith((".", "/", "~")) or (root / p).exists()
        if looks_local:
            model.name_or_path = str((p if p.is_absolute() else root / p).resolve())


def _missing_files(recipe: Recipe) -> list[Problem]:
    problems = []
    for key in PATH_KEYS:
        value = getattr(recipe.data, key.split(".")[1])
        if value is None:
            continue
        path = Path(value)
        if not path.exists():
            problems.append(Problem(key, f"file not found: {value}"))
        elif path.is_dir():
            if not any((path / name).is_file() for name in ("state.json", "dataset_dict.json")):
                problems.append(
                    Problem(
                        key,
                        f"{value} is a folder, and not one Dataset.save_to_disk wrote; "
                        "give a data file (.csv, .tsv, .json, .jsonl)",
                    )
                )
        elif not path.is_file():
            problems.append(Problem(key, f"{value} is not a regular file (a device, a pipe or a socket)"))
    name = recipe.model.name_or_path
    if name and Path(name).is_absolute() and not Path(name).exists():
        folder = Path(name)
        run = folder.parent.parent.name == recipe.output.dir.rstrip("/").rsplit("/", 1)[-1]
        more = (
            f" (a run folder <output.dir>/{folder.parent.name}/{folder.name}: train it first, with "
            f"--set output.run_name={folder.name})"
            if run
            else ""
        )
        problems.append(Problem("model.name_or_path", f"folder not found: {name}{more}"))
    elif name and Path(name).is_dir():
        folder = Path(name)
        # an nlptasks run (its start record or manifest) without the COMPLETE marker a run writes last:
        # still training, killed, or failed; its weights are a checkpoint's at best, or none
        started = (folder / "nlptasks-run.json").is_file() or (folder / "nlptasks.json").is_file()
        if started and not (folder / "COMPLETE").exists():
            problems.append(
                Problem(
                    "model.name_or_path",
                    f"{name} is an nlptasks run that did not complete (no COMPLETE marker: still training, "
                    f"stopped or failed): finish it first (nlptasks run {folder / 'recipe.toml'} --resume {name}), "
                    "or start from a complete run",
                )
            )
    return problems


# ---------------------------------------------------------------------------------------------
# Schema and TOML output
# ---------------------------------------------------------------------------------------------


def recipe_json_schema(tasks: Mapping[str, TaskSpec]) -> dict[str, Any]:
    """JSON Schema of a recipe, with each task's ``[options]`` schema chosen by ``task``."""
    schema = Recipe.model_json_schema()
    defs = schema.setdefault("$defs", {})
    branches = []
    for name, spec in sorted(tasks.items()):
        sub = spec.options.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(sub.pop("$defs", {}))
        key = f"options_{name}"
        defs[key] = sub
        branches.append(
            {
                "if": {"properties": {"task": {"const": name}}, "required": ["task"]},
                "then": {"properties": {"options": {"$ref": f"#/$defs/{key}"}}},
            }
        )
    schema["properties"]["task"]["enum"] = sorted(tasks)
    if branches:
        schema["allOf"] = branches
    schema["title"] = "nlptasks recipe"
    return schema
