"""What ``nlptasks validate`` checks beyond the recipe's own rules, and ``nlptasks run`` before it
reads any data: the problems that need the libraries or a model's ``config.json``, but no data
pass and no weights.

- ``[model.scratch]``: an architecture transformers knows; a model that fits this machine's
  memory to train (a 10^8-layer model is refused here, not after minutes of allocation); no size
  field of the architecture that the recipe's sizes cannot reach (a mixture-of-experts
  feed-forward size: ``model.scratch.extra`` must set it);
- ``model.max_length`` within the positions the model has (a local model's ``config.json``;
  a scratch model's ``max_position_embeddings`` when ``model.scratch.extra`` sets it);
- the model's structure, built from its config on the meta device (:mod:`.structure`): the
  architecture's kind against the task's head, ``peft.target_modules``, the freezing options;
- ``train.extra``: built into ``TrainingArguments`` with the rest of ``[train]`` exactly as a run
  builds them, so a wrong type, a value out of range, an unknown key or an optimizer whose package
  is missing is an error naming the key; ``push_to_hub`` with the hub switched off;
- ``train.report_to = ["mlflow"]`` with an ``http(s)`` ``MLFLOW_TRACKING_URI``: a server that answers
  there (a closed port is said at once, not after MLflow's minutes of retries: :mod:`.tracking`).

Heavy imports happen only for the recipes that need them (``transformers`` for a scratch
architecture or a ``train.extra`` table).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.engine.model.introspect import usable_positions
from nlptasks.errors import NlptasksError, Problem, RecipeError, did_you_mean, first_line

if TYPE_CHECKING:
    from nlptasks.recipe import LoadedRecipe, Recipe

__all__ = ["check_preflight", "preflight_problems", "training_memory"]

_BYTES_PER_PARAMETER = 16  # fp32 weights, gradients and AdamW's two states


def preflight_problems(loaded: LoadedRecipe) -> list[Problem]:
    """Every problem of these checks (see the module docstring), each with its key path."""
    recipe = loaded.recipe
    problems: list[Problem] = []
    if recipe.model.scratch is not None:
        problems += _architecture_problems(recipe)
        problems += _size_problems(recipe)
        if not problems:
            problems += _alias_problems(recipe) + _unmapped_problems(recipe)
        if not problems:
            problems += _scratch_build_problems(recipe, loaded.task.peft_task_type_for(loaded.options))
    problems += _position_problems(recipe)
    if not problems:  # the model's structure, from its config on the meta device
        from nlptasks.engine.training.structure import structure_problems

        problems += structure_problems(loaded)
    if recipe.train.extra:
        problems += _training_argument_problems(loaded)
    if "mlflow" in recipe.train.report_to:
        from nlptasks.engine.training.tracking import server_problem

        problems += [p for p in (server_problem(),) if p is not None]
    return problems


def check_preflight(loaded: LoadedRecipe) -> None:
    """Raise a :class:`RecipeError` listing :func:`preflight_problems`, if any."""
    problems = preflight_problems(loaded)
    if problems:
        raise RecipeError(str(loaded.path or "<recipe>"), problems)


def _architecture_problems(recipe: Recipe) -> list[Problem]:
    from transformers.models.auto.auto_mappings import CONFIG_MAPPING_NAMES

    arch = recipe.model.scratch.architecture  # type: ignore[union-attr]
    if arch in CONFIG_MAPPING_NAMES:
        return []
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # the whole list, extras included

    if arch in CONFIG_MAPPING:
        return []
    return [
        Problem(
            "model.scratch.architecture",
            f"unknown model type {arch!r}{did_you_mean(arch, CONFIG_MAPPING.keys())} (transformers' "
            "config 'model_type' names, e.g. 'bert', 'roberta', 'qwen2')",
        )
    ]


def _alias_problems(recipe: Recipe) -> list[Problem]:
    """``model.scratch.extra`` keys that the architecture's config makes one of the sizes the
    ``[model.scratch]`` keys set (an ``attribute_map`` alias recipe validation's static table
    does not know): one place for each setting, as for the names it knows."""
    from nlptasks.recipe.scratch import size_key

    s = recipe.model.scratch
    assert s is not None
    return [
        Problem(
            f"model.scratch.extra.{name}",
            f"is set by model.scratch.{key} ({s.architecture!r} calls that "
            f"size {name!r}): set it there (model.scratch.extra is for the config values the recipe has no key for)",
        )
        for name in s.extra
        if (key := size_key(s.architecture, name))
    ]


def _unmapped_problems(recipe: Recipe) -> list[Problem]:
    """Size fields of the scratch architecture that ``[model.scratch]`` cannot set and
    ``model.scratch.extra`` does not (see :mod:`nlptasks.recipe.scratch`): the run would leave them
    at the architecture's defaults, whatever the recipe asks."""
    from nlptasks.recipe.scratch import unmapped_size_fields

    s = recipe.model.scratch
    assert s is not None
    left = {k: v for k, v in unmapped_size_fields(s.architecture).items() if k not in s.extra}
    return [
        Problem(
            f"model.scratch.extra.{name}",
            f"{s.architecture!r} has a size field {name!r} (default {default!r}) that [model.scratch] does "
            f"not set; set it here (--set model.scratch.extra.{name}=...) so that the model is the size you ask",
        )
        for name, default in left.items()
    ]


# The auto class of the model a task's step 5 builds, by the peft task type the task declares
# (the head's own values, e.g. ``classifier_dropout``, are read only by the head's code).
_HEAD_CLASSES = {
    "SEQ_CLS": "AutoModelForSequenceClassification",
    "TOKEN_CLS": "AutoModelForTokenClassification",
    "QUESTION_ANS": "AutoModelForQuestionAnswering",
    "CAUSAL_LM": "AutoModelForCausalLM",
    "FEATURE_EXTRACTION": "AutoModel",
    "SEQ_2_SEQ_LM": "AutoModelForSeq2SeqLM",
}


def _scratch_build_problems(recipe: Recipe, task_type: str | None) -> list[Problem]:
    """The scratch model's config and model built as a run builds them (the vocabulary's size a
    stand-in): the config checks every value's type; with an ``extra`` table, the model is built
    too, on the meta device (no memory), so that its own code checks the values only it reads
    (``hidden_act = "foo"``, ``classifier_dropout = -1``): with the head of the task's declared
    peft task type, else the base model."""
    import transformers
    from transformers import AutoConfig

    from nlptasks.recipe.scratch import config_values

    s = recipe.model.scratch
    assert s is not None
    values = config_values(s, max(s.vocab_size, 16), 0, recipe.model.max_length)
    try:
        config = AutoConfig.for_model(s.architecture, **values)
    except Exception as exc:  # noqa: BLE001 - a config class's own validation, whatever it raises
        return [_build_problem(exc, s, "config")]
    if not s.extra:
        return []  # the recipe's own keys, checked by the config: the model's code needs no check
    import torch

    auto = getattr(transformers, _HEAD_CLASSES.get(task_type or "", "AutoModel"))
    try:
        with torch.device("meta"):
            auto.from_config(config)
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            return []  # no such class for this architecture: the run's own class decides
        return [_build_problem(exc, s, "model")]
    except Exception as exc:  # noqa: BLE001 - the model's own code, whatever it raises
        return [_build_problem(exc, s, "model")]
    return []


def _build_problem(exc: Exception, scratch: Any, what: str) -> Problem:
    """The key a config or model build failed on (a field the error names, or the extra key whose
    value a lookup missed), and the reason in one line."""
    text = str(exc)
    field = re.search(r"field '(\w+)'", text)
    detail = re.search(r"expected (\w+), got (\w+)", text)
    key = field.group(1) if field else None
    reason = first_line(exc)
    if isinstance(exc, KeyError) and exc.args:
        missing = exc.args[0]
        key = next((k for k, v in scratch.extra.items() if v == missing), None)
        reason = f"{missing!r} is not a value {scratch.architecture!r} knows"
    elif detail:
        reason = f"expected {detail.group(1)}, got {detail.group(2)}"
    if key is None:  # the one extra key whose value the message quotes ("... but got -1")
        quoted = [k for k, v in scratch.extra.items() if re.search(rf"(?<![\w.-]){re.escape(str(v))}(?![\w.])", text)]
        key = quoted[0] if len(quoted) == 1 else None
    where = (
        f"model.scratch.extra.{key}"
        if key in scratch.extra
        else "model.scratch.extra"
        if scratch.extra
        else "model.scratch"
    )
    return Problem(where, f"transformers cannot build a {scratch.architecture!r} {what} from it: {reason}")


def training_memory(recipe: Recipe) -> int:
    """Bytes to train a ``[model.scratch]`` model in fp32 with AdamW, activations left out: 16 per
    parameter, the parameters counted from the sizes (the vocabulary at ``vocab_size``)."""
    s = recipe.model.scratch
    assert s is not None
    positions = max(512, recipe.model.max_length + 2)
    per_layer = 4 * s.hidden * s.hidden + 2 * s.hidden * s.intermediate + 9 * s.hidden + s.intermediate
    parameters = (s.vocab_size + positions + 2) * s.hidden + s.layers * per_layer
    return parameters * _BYTES_PER_PARAMETER


def _machine_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _size_problems(recipe: Recipe) -> list[Problem]:
    need, have = training_memory(recipe), _machine_memory()
    if have is None or need <= have:
        return []
    s = recipe.model.scratch
    assert s is not None
    return [
        Problem(
            "model.scratch",
            f"{s.layers} layers of hidden size {s.hidden} (feed-forward {s.intermediate}) "
            f"need about {need / 2**30:,.1f} GiB to train, before activations; this machine has "
            f"{have / 2**30:,.1f} GiB: use fewer or smaller layers",
        )
    ]


def _position_problems(recipe: Recipe) -> list[Problem]:
    length = recipe.model.max_length
    if recipe.model.scratch is not None:
        positions = recipe.model.scratch.extra.get("max_position_embeddings")
        arch = recipe.model.scratch.architecture
        where = "model.scratch.extra.max_position_embeddings"
    else:
        config = Path(recipe.model.name_or_path or "") / "config.json"
        if not config.is_file():
            return []  # a hub id: its config is read when the run starts
        try:
            values = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return [Problem("model.name_or_path", f"{config}: not a readable config.json ({first_line(exc)})")]
        positions, arch, where = values.get("max_position_embeddings"), values.get("model_type"), str(config)
    if not isinstance(positions, int) or isinstance(positions, bool):
        return []
    limit = usable_positions(positions, arch)
    if length <= limit:
        return []
    return [
        Problem(
            "model.max_length",
            f"{length} tokens, but the model has positions for {limit} "
            f"(max_position_embeddings {positions} in {where}): use --set model.max_length={limit} or less",
        )
    ]


def _training_argument_problems(loaded: LoadedRecipe) -> list[Problem]:
    """``train.extra`` with the rest of ``[train]``, built as a run builds them."""
    from nlptasks.context import RunContext
    from nlptasks.engine.training.trainer import make_training_arguments, training_kwargs

    extra = loaded.recipe.train.extra
    problems: list[Problem] = []
    if extra.get("push_to_hub") and os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        problems.append(Problem("train.extra.push_to_hub", "needs the hub, and HF_HUB_OFFLINE is set"))
    problems += _type_problems(extra)
    if problems:
        return problems
    with tempfile.TemporaryDirectory(prefix="nlptasks-validate-") as tmp:
        ctx = RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=Path(tmp) / "run")
        try:
            args = make_training_arguments(training_kwargs(ctx, has_validation=True, has_metrics=True, progress=False))
        except RecipeError as exc:
            return list(exc.problems)
        except NlptasksError as exc:
            return [Problem("train.extra", exc.message.removeprefix("train: "))]
        if set(extra) & _OPTIMIZER_KEYS:
            problems += _optimizer_problems(args, extra)
    return problems


_OPTIMIZER_KEYS = {
    "optim",
    "optim_args",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "optim_target_modules",
    "lr_scheduler_kwargs",
}


def _type_problems(extra: dict[str, Any]) -> list[Problem]:
    """``train.extra`` values of another type than the ``TrainingArguments`` field declares (a
    number, a flag, a text, a table, a list, an enum's names): the dataclass would take them and
    fail later, deep in training."""
    import typing

    from transformers import TrainingArguments

    hints = typing.get_type_hints(TrainingArguments)
    # a flag-like option (``--fsdp``, metadata ``nargs="?"`` and ``const=True``) also takes its const's type
    consts = {f.name: type(f.metadata["const"]) for f in dataclasses.fields(TrainingArguments) if "const" in f.metadata}
    problems = []
    for key, value in extra.items():
        hint = hints.get(key)
        if hint is None or value is None:
            continue
        kinds = {typing.get_origin(a) or a for a in (typing.get_args(hint) or (hint,)) if a is not type(None)}
        kinds |= {consts[key]} if key in consts else set()
        names = [m.value for k in kinds if isinstance(k, type) and issubclass(k, enum.Enum) for m in k]
        if names and isinstance(value, str) and value not in names:  # optim, lr_scheduler_type, save_strategy...
            shown = ", ".join(names) if len(names) <= 12 else f"{len(names)} names, e.g. {', '.join(names[:6])}"
            problems.append(
                Problem(
                    f"train.extra.{key}",
                    f"unknown value {value!r}{did_you_mean(value, names)}; TrainingArguments.{key} takes: {shown}",
                )
            )
            continue
        kinds = {str if isinstance(k, type) and issubclass(k, enum.Enum) else k for k in kinds}
        kinds = {type(k.__args__[0]) if typing.get_origin(k) is typing.Literal else k for k in kinds}
        if kinds and kinds <= set(_ACCEPTS) and not any(_ACCEPTS[k](value) for k in kinds):
            wanted = " or ".join(sorted({_WORDS[k] for k in kinds}))
            problems.append(
                Problem(f"train.extra.{key}", f"expected {wanted} (TrainingArguments.{key}), got {value!r}")
            )
    return problems


_ACCEPTS: dict[Any, Any] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    dict: lambda v: isinstance(v, dict),
    list: lambda v: isinstance(v, list),
}
_WORDS = {bool: "true/false", int: "an integer", float: "a number", str: "a text", dict: "a table", list: "a list"}


def _optimizer_problems(args: Any, extra: dict[str, Any]) -> list[Problem]:
    """The optimizer and scheduler ``train.extra`` asks for, built on one dummy parameter: the
    optimizer's package is there, its settings are in range (betas, epsilon...), the scheduler
    takes ``lr_scheduler_kwargs``."""
    import torch
    from transformers import Trainer, get_scheduler

    name = getattr(args.optim, "value", args.optim)
    keys = sorted(set(extra) & (_OPTIMIZER_KEYS - {"lr_scheduler_kwargs"}))
    key = "train.extra." + ("optim" if "optim" in extra else keys[0] if keys else "optim")
    try:
        cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
        optimizer = cls([torch.nn.Parameter(torch.zeros(2))], **kwargs)
    except (ImportError, ValueError, TypeError, RuntimeError) as exc:
        return [Problem(key, f"optimizer {name!r}: {first_line(exc)}")]
    scheduler = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    where = "train.extra.lr_scheduler_kwargs" if "lr_scheduler_kwargs" in extra else "train.scheduler"
    try:
        get_scheduler(
            args.lr_scheduler_type,
            optimizer,
            num_warmup_steps=1,
            num_training_steps=10,
            scheduler_specific_kwargs=args.lr_scheduler_kwargs or {},
        )
    except (ImportError, ValueError, TypeError, RuntimeError) as exc:
        return [Problem(where, f"scheduler {scheduler!r}: {first_line(exc)}")]
    return []
