"""Recipe rules that one field's type cannot express: keys that belong to another PEFT method,
what the task supports (its PEFT methods, its metric names), freezing with ``[peft]``, settings
that cannot go together.  Each rule returns :class:`~nlptasks.errors.Problem` s with key paths, so
that :func:`nlptasks.recipe.load_recipe` reports every problem at once.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any

from pydantic import BaseModel

from nlptasks.deprecations import deprecated
from nlptasks.errors import Problem
from nlptasks.peft_support import METHODS
from nlptasks.recipe.arguments import optimize_conflicts, shadowed_by
from nlptasks.recipe.schema import PEFT_METHOD_KEYS, PeftConfig, Recipe
from nlptasks.recipe.scratch import SIZE_FIELDS, scratch_shadow
from nlptasks.types import TaskSpec

__all__ = [
    "FREEZE_KEYS",
    "QUANT_4BIT_KEYS",
    "SCRATCH_EXTRA_SHADOWS",
    "column_problems",
    "combination_problems",
    "extra_problems",
    "metric_problems",
    "migrate_scratch_extra",
    "nulls_in_lists",
    "optimize_problems",
    "peft_problems",
    "switch_model_source",
    "switch_peft_method",
    "value_problems",
]

QUANT_4BIT_KEYS = ("quant_type", "double_quant", "compute_dtype")
FREEZE_KEYS = ("freeze_embeddings", "freeze_layers", "freeze")


def switch_peft_method(raw: dict[str, Any], file_peft: dict[str, Any] | None, overridden: set[str]) -> list[str]:
    """``--set peft.method=X`` on a recipe whose ``[peft]`` uses another method: drop the file's
    keys that belong only to the old method (``r`` when switching lora → prefix) and say so.

    Keys given with ``--set`` are never dropped: a mismatch there is the user's and stays an error.
    """
    section = raw.get("peft")
    if file_peft is None or not isinstance(section, dict) or "peft.method" not in overridden:
        return []
    old, new = file_peft.get("method"), section.get("method")
    if old == new or new == "none":
        return []
    dropped = [
        key
        for key in file_peft
        if key in PEFT_METHOD_KEYS and new not in PEFT_METHOD_KEYS[key] and f"peft.{key}" not in overridden
    ]
    for key in dropped:
        del section[key]
    if not dropped:
        return []
    return [
        f"peft.method: {old!r} → {new!r} (from --set); the recipe's {old} keys "
        f"{', '.join(dropped)} do not apply to {new!r} and were left out"
    ]


def switch_model_source(raw: dict[str, Any], file_model: dict[str, Any] | None, overridden: set[str]) -> list[str]:
    """``--set model.name_or_path=X`` on a recipe whose file builds ``[model.scratch]`` (or ``--set
    model.scratch.KEY=...`` on one that names ``model.name_or_path``): the command line picks the
    model's source, so the file's other source is left out, and said.  Both given with ``--set`` stay
    an error (the user's own mismatch)."""
    model = raw.get("model")
    if file_model is None or not isinstance(model, dict):
        return []
    to_path = "model.name_or_path" in overridden and model.get("name_or_path") not in (None, "")
    to_scratch = any(k == "model.scratch" or k.startswith("model.scratch.") for k in overridden)
    if to_path and not to_scratch and "scratch" in file_model and "scratch" in model:
        del model["scratch"]
        return ["model.name_or_path (from --set) replaces the recipe's [model.scratch], which was left out"]
    if to_scratch and not to_path and "name_or_path" in file_model and "name_or_path" in model:
        del model["name_or_path"]
        return ["model.scratch (from --set) replaces the recipe's model.name_or_path, which was left out"]
    return []


def peft_problems(raw: dict[str, Any], spec: TaskSpec | None, options: BaseModel | None) -> list[Problem]:
    """``[peft]`` checks pydantic cannot make alone: keys of another method, 4-bit keys without
    4-bit, and whether the task (and this method) can be adapted at all: the task type's limits
    (:mod:`nlptasks.peft_support`) and the task's own (``TaskSpec.peft_unsupported``)."""
    section = raw.get("peft")
    if not isinstance(section, dict):
        return []
    method = section.get("method")
    if method not in METHODS:
        return []  # pydantic reports a missing or unknown method
    problems = []
    for key in section:
        owners = PEFT_METHOD_KEYS.get(key)
        if owners is not None and method not in owners:
            own = [k for k, m in PEFT_METHOD_KEYS.items() if method in m]
            problems.append(
                Problem(
                    f"peft.{key}",
                    f"is an option of {' and '.join(repr(m) for m in owners)}, not of method {method!r} "
                    f"(the {method} options: {', '.join(own) or 'none'}; common to every method: "
                    f"{', '.join(k for k in PeftConfig.model_fields if k not in PEFT_METHOD_KEYS and k != 'method')})",
                )
            )
        if key in QUANT_4BIT_KEYS and section.get("quantization") != "4bit":
            problems.append(Problem(f"peft.{key}", 'applies only with peft.quantization = "4bit"'))
    target, feedforward = section.get("target_modules"), section.get("feedforward_modules")
    if method == "ia3" and isinstance(target, list) and isinstance(feedforward, list):
        outside = [m for m in feedforward if m not in target]
        if outside:
            problems.append(
                Problem(
                    "peft.feedforward_modules",
                    f"{', '.join(map(repr, outside))} not among "
                    f"peft.target_modules ({', '.join(map(repr, target))}): ia3 scales feed-forward "
                    "modules only among its targets (peft could not load the adapter back)",
                )
            )
    if spec is None or options is None:
        return problems
    task_type = spec.peft_task_type_for(options)
    if task_type is None:
        problems.append(
            Problem(
                "peft",
                f"task {spec.name!r} does not support PEFT: its plugin ({spec.plugin}) declares no "
                "peft_task_type; remove the [peft] table to train the whole model",
            )
        )
        return problems
    reason = spec.peft_reason(options, method)
    if reason is not None:
        support = spec.peft_support_for(options)
        working = [m for m, why in support.items() if why is None]
        problems.append(
            Problem(
                "peft.method",
                f"{method!r} does not work for task {spec.name!r} ({task_type}): {reason}; "
                + (f"use one of: {', '.join(working)}" if working else "no PEFT method does: remove [peft]"),
            )
        )
    return problems


def metric_problems(recipe: Recipe, spec: TaskSpec, options: BaseModel) -> list[Problem]:
    """``train.best_metric`` must be a metric the task computes (when the task declares its
    metric names, see ``TaskSpec.metrics``)."""
    best = recipe.train.best_metric
    declared = spec.metrics(options) if callable(spec.metrics) else spec.metrics
    if best is None or not declared or spec.knows_metric(best, options):
        return []
    return [
        Problem(
            "train.best_metric",
            f"{best!r} is not a metric of task {spec.name!r}; its metrics: {', '.join(spec.metrics_for(options))}",
        )
    ]


def column_problems(options: BaseModel) -> list[Problem]:
    """Two ``options.*_column`` keys naming one column (a task's options name the columns they
    read ``<what>_column``): a text column that is the label column would train on the labels."""
    taken: dict[str, str] = {}
    problems = []
    for name in type(options).model_fields:
        value = getattr(options, name)
        if not name.endswith("_column") or not isinstance(value, str) or not value:
            continue
        if value in taken:
            problems.append(
                Problem(
                    f"options.{name}",
                    f"names the column {value!r}, as options.{taken[value]} does; each column key names its "
                    f"own column (set one of them to another: --set options.{name}=NAME)",
                )
            )
        else:
            taken[value] = name
    return problems


def optimize_problems(raw: dict[str, Any]) -> list[Problem]:
    """``[optimize]`` checks across tables: freezing and ``[peft]`` do not mix (PEFT freezes the
    whole base already; which weights an adapter touches is ``peft.target_modules``)."""
    section = raw.get("optimize")
    if not isinstance(section, dict) or not isinstance(raw.get("peft"), dict):
        return []
    return [
        Problem(
            f"optimize.{key}",
            "freezing does not combine with [peft]: PEFT already freezes the whole base and trains only the "
            "adapter (choose the adapted modules with peft.target_modules); remove this key, or train the whole model "
            "with --set peft.method=none",
        )
        for key in FREEZE_KEYS
        if section.get(key) not in (None, False, 0, [])
    ]


def nulls_in_lists(node: Any, path: str = "") -> list[Problem]:
    """``None`` inside a list (possible from Python, not from TOML): a run could not save the recipe."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in nulls_in_lists(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        if any(v is None for v in node):
            return [Problem(path, "a list cannot hold null (None) values: TOML has no null")]
        return [p for v in node for p in nulls_in_lists(v, path)]
    return []


def combination_problems(recipe: Recipe) -> list[Problem]:
    """Settings that are each valid but cannot go together."""
    problems = []
    dtype, precision = recipe.model.dtype, recipe.train.precision
    if {dtype, precision} == {"bf16", "fp16"}:
        problems.append(
            Problem(
                "train.precision",
                f"{precision!r} cannot train weights loaded as model.dtype = {dtype!r} (the other half precision); "
                f"set train.precision = {dtype!r} or 'auto'",
            )
        )
    extra = recipe.train.extra
    if extra.get("fp16") is True and extra.get("bf16") is True:
        problems.append(Problem("train.extra", "sets both fp16 and bf16; choose one with train.precision instead"))
    problems += optimize_conflicts(recipe.optimize, extra)
    return problems


SCRATCH_EXTRA_SHADOWS: dict[str, str] = {
    **{name: f"model.scratch.{key}" for key, names in SIZE_FIELDS.items() for name in names},
    "vocab_size": "the vocabulary built from the data (its size is capped by model.scratch.vocab_size)",
    "pad_token_id": "the tokenizer built from the data",
}
"""``model.scratch.extra`` keys (config values) that the ``[model.scratch]`` keys or the built
vocabulary set: every size field of every architecture, the encoder's and the decoder's
(``num_decoder_layers``, ``decoder_ffn_dim``...; :data:`nlptasks.recipe.scratch.SIZE_FIELDS`).
Fields whose meaning depends on the architecture (DistilBERT's ``hidden_dim``) are shadowed for
that architecture only (:func:`nlptasks.recipe.scratch.scratch_shadow`)."""


def migrate_scratch_extra(raw: dict[str, Any]) -> None:
    """``model.scratch.extra`` size fields (``d_ff``, ``num_layers``...) from recipes written before
    ``[model.scratch]`` had a key for them: deprecated, not refused (docs/plugin-guide.md#deprecations).
    A value the ``[model.scratch]`` key does not set is moved there; one equal to what it sets is
    dropped; each with one ``nlptasks: deprecated:`` line.  A value that differs from the key's stays
    an error (:func:`extra_problems`): two sizes for one setting."""
    model = raw.get("model")
    scratch = model.get("scratch") if isinstance(model, dict) else None
    extra = scratch.get("extra") if isinstance(scratch, dict) else None
    if not isinstance(extra, dict):
        return
    assert isinstance(scratch, dict)
    for name in list(extra):
        key = next((k for k, names in SIZE_FIELDS.items() if name in names), None)
        if key is None or isinstance(extra[name], bool) or not isinstance(extra[name], int):
            continue
        if key in scratch and scratch[key] != extra[name]:
            continue  # two sizes for one setting: extra_problems says so
        value = extra.pop(name)
        moved = key not in scratch
        scratch[key] = value
        deprecated(
            f"recipe:model.scratch.extra.{name}",
            f"recipe key model.scratch.extra.{name} = {value}",
            f"write model.scratch.{key} = {value} instead ([model.scratch] sets it"
            + (", and now does from this value)" if moved else "; the values agree)"),
        )


def _scratch_shadow(scratch: Any) -> Any:
    architecture = scratch.get("architecture", "bert") if isinstance(scratch, dict) else "bert"

    def shadow(key: str) -> str | None:
        return SCRATCH_EXTRA_SHADOWS.get(key) or scratch_shadow(str(architecture), key)

    return shadow


def extra_problems(raw: dict[str, Any]) -> list[Problem]:
    """``train.extra`` and ``model.scratch.extra`` keys that the recipe's own keys set: one place
    for each setting (a shadowed key would be overwritten, or would overwrite without a word)."""
    train = raw.get("train")
    model = raw.get("model")
    scratch = model.get("scratch") if isinstance(model, dict) else None
    tables = [
        (
            "train.extra",
            train.get("extra") if isinstance(train, dict) else None,
            shadowed_by,
            "train.extra is for the TrainingArguments the recipe has no key for",
        ),
        (
            "model.scratch.extra",
            scratch.get("extra") if isinstance(scratch, dict) else None,
            _scratch_shadow(scratch),
            "model.scratch.extra is for the config values the recipe has no key for",
        ),
    ]
    size = scratch if isinstance(scratch, dict) else {}
    return [
        Problem(
            f"{where}.{key}",
            f"is set by {source}: set it there ({purpose})"
            + (
                f"; the recipe gives {source} = {size[source.rsplit('.', 1)[1]]} and {where}.{key} = {extra[key]}"
                if where == "model.scratch.extra" and source.rsplit(".", 1)[-1] in size
                else ""
            ),
        )
        for where, extra, shadow, purpose in tables
        if isinstance(extra, dict)
        for key in extra
        if (source := shadow(key))
    ]


def _numbers_only(annotation: Any) -> bool:
    """Whether a field takes numbers and not booleans (``int``, ``float``, ``int | None``...)."""
    args = (
        typing.get_args(annotation)
        if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
        else (annotation,)
    )
    kinds = set()
    for a in args:
        if a is type(None):
            continue
        if typing.get_origin(a) is typing.Literal:  # Literal[1, 2, 3]: numbers too (train.zero = true is 1)
            values = typing.get_args(a)
            if values and all(type(v) in (int, float) for v in values):
                kinds.add(int)
                continue
        kinds.add(a)
    return bool(kinds) and kinds <= {int, float}


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def value_problems(node: Any, model: type[BaseModel] | None, path: str = "") -> list[Problem]:
    """Values pydantic would coerce without a word: ``true``/``false`` where a number belongs
    (``batch_size = true`` read as 1), and ``nan``/``inf`` anywhere (TOML writes them; no setting
    takes them).  Walks the raw recipe beside its model (``None``: free-form tables)."""
    problems: list[Problem] = []
    if isinstance(node, float) and not math.isfinite(node):
        return [Problem(path, f"must be a finite number (got {node})")]
    if isinstance(node, list):
        for value in node:
            problems += value_problems(value, None, path)
        return problems
    if not isinstance(node, dict):
        return problems
    fields = model.model_fields if model is not None else {}
    for key, value in node.items():
        where = f"{path}.{key}" if path else str(key)
        field = fields.get(key)
        if field is not None and isinstance(value, bool) and _numbers_only(field.annotation):
            allowed = [
                str(v)
                for a in (field.annotation, *typing.get_args(field.annotation))
                if typing.get_origin(a) is typing.Literal
                for v in typing.get_args(a)
            ]
            expected = f"one of {', '.join(allowed)}" if allowed else "a number"
            problems.append(Problem(where, f"expected {expected}, got {str(value).lower()}"))
            continue
        problems += value_problems(value, _model_in(field.annotation) if field is not None else None, where)
    return problems
