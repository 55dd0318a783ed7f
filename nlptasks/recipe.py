"""Recipes: TOML files validated by pydantic.

A recipe says which task to run (``task = "cls"``), on which data, with which model and
training settings.  :func:`load_recipe` reads one, applies ``--set key=value`` overrides, and
reports **every** problem at once, each with its key path (``train.learning_rate: ...``).
Unknown keys get a did-you-mean; allowed values come from the field types; the task's
``[options]`` table is validated by the model the task plugin registered.

Relative data paths and a local ``model.name_or_path`` are relative to the recipe file;
``output.dir`` and paths given with ``--set`` are relative to the current directory.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nlptasks.errors import NlptasksError, Problem, RecipeError, did_you_mean

if TYPE_CHECKING:
    from nlptasks.context import TaskSpec
    from nlptasks.plugins import Host

__all__ = [
    "DataConfig",
    "LoadedRecipe",
    "ModelConfig",
    "OptimizeConfig",
    "OutputConfig",
    "PeftConfig",
    "Recipe",
    "ScratchConfig",
    "SplitConfig",
    "TrainConfig",
    "dump_toml",
    "load_recipe",
    "recipe_json_schema",
]


def _no_nul(value: Any) -> Any:
    """Paths reach the file system: a NUL character is refused here, not by ``open``."""
    if isinstance(value, str) and "\0" in value:
        raise ValueError(f"a path cannot contain a NUL character (got {value!r})")
    return value


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True)


class SplitConfig(Section):
    """How to carve validation/test splits out of ``train`` when they are not given as files."""

    validation: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Fraction of train held out for validation. Default: 0.1 when no "
        "data.validation file is given, otherwise none.",
    )
    test: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Fraction of train held out for test. Default: 0.1 when neither "
        "data.validation nor data.test is given, otherwise none.",
    )
    seed: int = Field(42, description="Seed of the random split.")
    stratify: bool = Field(
        True, description="Keep class proportions in every split (for tasks that declare a label column)."
    )


DataFormat = Literal["auto", "csv", "json", "jsonl", "disk"]


class DataConfig(Section):
    """Where the data comes from: local files, a ``save_to_disk`` folder, or a hub dataset."""

    train: str | None = Field(
        None, description="Training file (csv, json, jsonl) or a datasets save_to_disk folder."
    )
    validation: str | None = Field(None, description="Validation file (same format as train).")
    test: str | None = Field(None, description="Test file (same format as train).")
    hub: str | None = Field(
        None,
        description="Hugging Face hub dataset id (e.g. 'seamew/ChnSentiCorp'); needs internet. "
        "Use instead of train/validation/test.",
    )
    hub_config: str | None = Field(None, description="Configuration name of the hub dataset.")
    format: DataFormat = Field(
        "auto", description="File format; 'auto' goes by the file extension (a folder is 'disk')."
    )
    split: SplitConfig = Field(default_factory=SplitConfig, description="Random split settings.")
    max_train_rows: int | None = Field(
        None, ge=1, description="Use only the first N training rows (quick experiments)."
    )
    max_eval_rows: int | None = Field(
        None, ge=1, description="Use only the first N rows of validation and of test."
    )

    @field_validator("train", "validation", "test", "hub", "hub_config", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    _paths_without_nul = field_validator("train", "validation", "test")(lambda cls, v: _no_nul(v))

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        if self.hub and (self.train or self.validation or self.test):
            raise ValueError("give either data.hub or data.train/validation/test files, not both")
        if not self.hub and not self.train:
            raise ValueError("no training data: set data.train (a file) or data.hub (a dataset id)")
        if self.validation and self.split.validation is not None:
            raise ValueError("data.validation is a file, so data.split.validation cannot also be set")
        if self.test and self.split.test is not None:
            raise ValueError("data.test is a file, so data.split.test cannot also be set")
        return self


class ScratchConfig(Section):
    """A model built from a config, with a vocabulary built from the training data."""

    architecture: str = Field(
        "bert", description="transformers model type (config 'model_type'), e.g. 'bert', 'roberta'."
    )
    tokenizer: Literal["char", "wordpiece", "bpe"] = Field(
        "char",
        description="Vocabulary built from the training texts: 'char' (one token per character; "
        "Chinese), 'wordpiece' or 'bpe' (sub-words; English).",
    )
    vocab_size: int = Field(
        8000, ge=16, description="Largest vocabulary to build (special tokens included)."
    )
    min_frequency: int = Field(2, ge=1, description="Keep tokens seen at least this many times.")
    lowercase: bool = Field(False, description="Lower-case texts before building the vocabulary.")
    layers: int = Field(2, ge=1, description="Number of transformer layers.")
    hidden: int = Field(256, ge=8, description="Hidden size.")
    heads: int = Field(4, ge=1, description="Attention heads (must divide hidden).")
    intermediate: int = Field(1024, ge=8, description="Feed-forward size.")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Further config keys passed to transformers' AutoConfig."
    )

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ScratchConfig:
        if self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden ({self.hidden})")
        return self


class ModelConfig(Section):
    """The model: a pretrained one (hub id or folder) or one built from scratch."""

    name_or_path: str | None = Field(
        None, description="Hub model id (e.g. 'hfl/rbt3') or a local model folder."
    )
    scratch: ScratchConfig | None = Field(
        None, description="Build a model from a config instead (see [model.scratch])."
    )
    max_length: int = Field(128, ge=8, le=8192, description="Longest input in tokens; longer is truncated.")
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit).")
    trust_remote_code: bool = Field(
        False,
        description="Run the Python code that a hub repository or model folder ships with its model (a warning "
        "names it). Off: only model classes built into transformers load.",
    )
    allow_pickle: bool = Field(
        False,
        description="Also load weights from pickle-based files (pytorch_model.bin), which can run code when "
        "loaded. Off: safetensors files only.",
    )
    dtype: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32",
        description="Weights of the loaded model: 'fp32', or half precision 'bf16'/'fp16' (CUDA GPU only; "
        "with [peft] the frozen base is halved and the adapter trains in fp32).",
    )

    _path_without_nul = field_validator("name_or_path")(lambda cls, v: _no_nul(v))

    @model_validator(mode="after")
    def _one_model(self) -> ModelConfig:
        if (self.name_or_path is None) == (self.scratch is None):
            raise ValueError("set exactly one of model.name_or_path and [model.scratch]")
        return self


PeftMethod = Literal["lora", "prefix", "p_tuning", "prompt", "ia3", "none"]

# Which [peft] keys belong to which method (the rest apply to every method).
PEFT_METHOD_KEYS: dict[str, tuple[PeftMethod, ...]] = {
    "r": ("lora",),
    "alpha": ("lora",),
    "dropout": ("lora",),
    "bias": ("lora",),
    "target_modules": ("lora", "ia3"),
    "feedforward_modules": ("ia3",),
    "num_virtual_tokens": ("prefix", "p_tuning", "prompt"),
    "prefix_projection": ("prefix",),
    "encoder_hidden_size": ("prefix", "p_tuning"),
    "encoder_type": ("p_tuning",),
    "encoder_layers": ("p_tuning",),
    "encoder_dropout": ("p_tuning",),
    "prompt_init_text": ("prompt",),
}


class PeftConfig(Section):
    """Parameter-efficient fine-tuning: train a small adapter on a frozen base model.

    The engine wraps the model that step 5 builds with the chosen method (see docs/peft.md for
    what each method does and which tasks support it).  A run saves only the adapter (and, for a
    model built from scratch, the frozen random base under ``base/``).  A key that belongs to
    another method than ``method`` is an error naming the key.
    """

    method: PeftMethod = Field(
        description="'lora' (low-rank updates), 'ia3' (learned scaling vectors), 'prefix' (trained key/value "
        "prefixes in every layer), 'p_tuning' (virtual tokens from a small encoder), 'prompt' (virtual tokens); "
        "'none' switches the whole [peft] table off (e.g. --set peft.method=none trains every weight)."
    )
    r: int = Field(8, ge=1, description="lora: rank of the update matrices.")
    alpha: float = Field(16.0, gt=0, description="lora: scaling numerator; updates are scaled by alpha / r.")
    dropout: float = Field(0.05, ge=0, lt=1, description="lora: dropout on the adapter's input.")
    bias: Literal["none", "all", "lora_only"] = Field(
        "none", description="lora: which biases to train ('none' keeps every bias frozen)."
    )
    target_modules: list[str] | str | None = Field(
        None,
        description="lora, ia3: modules to adapt, as a list of name suffixes (['query', 'value']) or one regex "
        "matched against the full module name. Default: peft's choice for the architecture (BERT: query and "
        "value for lora; key, value and output.dense for ia3).",
    )
    feedforward_modules: list[str] | str | None = Field(
        None,
        description="ia3: which of target_modules are feed-forward layers (scaled on their input). Default: "
        "peft's choice for the architecture.",
    )
    modules_to_save: list[str] | None = Field(
        None,
        description="Further modules trained in full and saved with the adapter (the task head, e.g. "
        "'classifier', is added by peft for classification tasks).",
    )
    num_virtual_tokens: int = Field(
        20, ge=1, description="prefix, p_tuning, prompt: number of virtual tokens (they count against model.max_length)."
    )
    prefix_projection: bool = Field(
        False, description="prefix: compute the prefixes with a two-layer MLP (more parameters, often more stable)."
    )
    encoder_hidden_size: int | None = Field(
        None,
        ge=1,
        description="prefix (with prefix_projection), p_tuning: hidden size of the prompt encoder. Default: the "
        "model's hidden size.",
    )
    encoder_type: Literal["MLP", "LSTM"] = Field("MLP", description="p_tuning: the prompt encoder.")
    encoder_layers: int = Field(2, ge=1, description="p_tuning: layers of the prompt encoder.")
    encoder_dropout: float = Field(0.0, ge=0, lt=1, description="p_tuning: dropout in the prompt encoder.")
    prompt_init_text: str | None = Field(
        None,
        description="prompt: initialise the virtual tokens from the embeddings of this text (repeated or cut to "
        "num_virtual_tokens) instead of random values.",
    )
    quantization: Literal["none", "8bit", "4bit"] = Field(
        "none",
        description="Load the frozen base quantized with bitsandbytes: '4bit' is QLoRA. Needs a CUDA GPU and "
        "the bitsandbytes package.",
    )
    quant_type: Literal["nf4", "fp4"] = Field("nf4", description="4bit: the 4-bit data type.")
    double_quant: bool = Field(True, description="4bit: quantize the quantization constants too (saves memory).")
    compute_dtype: Literal["bf16", "fp16", "fp32"] = Field(
        "bf16", description="4bit: dtype of the matrix products on the dequantized weights."
    )


class TrainConfig(Section):
    """Training settings, mapped onto transformers' TrainingArguments."""

    epochs: float = Field(3.0, gt=0, description="Number of training epochs.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many optimizer steps (overrides epochs).")
    batch_size: int = Field(16, ge=1, description="Training batch size per device.")
    eval_batch_size: int | None = Field(None, ge=1, description="Evaluation batch size (default: 2 x batch_size).")
    learning_rate: float = Field(5e-5, gt=0, lt=1, description="Peak learning rate.")
    weight_decay: float = Field(0.0, ge=0, lt=1, description="AdamW weight decay.")
    warmup: float = Field(0.0, ge=0, lt=1, description="Fraction of steps with linear learning-rate warmup.")
    scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = Field(
        "linear", description="Learning-rate schedule after warmup."
    )
    gradient_accumulation_steps: int = Field(1, ge=1, description="Micro-batches per optimizer step.")
    eval_strategy: Literal["epoch", "steps", "no"] = Field(
        "epoch", description="When to evaluate on validation (and save a checkpoint)."
    )
    eval_steps: int | None = Field(None, ge=1, description="Evaluate every N steps (with eval_strategy = 'steps').")
    logging_steps: int = Field(50, ge=1, description="Log the training loss every N steps.")
    keep_best: bool = Field(
        True, description="Keep the checkpoint with the best validation metric, not the last one."
    )
    best_metric: str | None = Field(
        None, description="Metric that picks the best checkpoint (default: the task's, e.g. 'accuracy')."
    )
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="'auto': bf16 on GPUs that support it, fp16 on older GPUs, fp32 on CPU."
    )
    padding: Literal["dynamic", "max_length"] = Field(
        "dynamic", description="Pad each batch to its longest example ('dynamic') or to model.max_length."
    )
    group_by_length: bool = Field(
        False, description="Draw training batches of similar lengths (less padding, faster)."
    )
    sort_eval_by_length: bool = Field(
        True,
        description="Evaluate and predict in batches of similar length, longest first, with the results put "
        "back in the data's order (less padding; the same predictions). Off: the data's order.",
    )
    report_to: list[Literal["tensorboard"]] = Field(
        default_factory=list,
        description="Experiment trackers to log to: [\"tensorboard\"] writes event files to <run>/tensorboard "
        "(needs the tensorboard package). Default: none.",
    )
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Further transformers TrainingArguments, passed as they are (checked at run time).",
    )

    @field_validator("report_to")
    @classmethod
    def _tracker_installed(cls, value: list[str]) -> list[str]:
        import importlib.util

        if "tensorboard" in value and not any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX")):
            raise ValueError("the tensorboard package is not installed: pip install tensorboard "
                             "(or leave 'tensorboard' out of train.report_to)")
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _steps_need_eval_steps(self) -> TrainConfig:
        if self.eval_strategy == "steps" and self.eval_steps is None:
            raise ValueError("train.eval_strategy = 'steps' needs train.eval_steps")
        return self


OptimizerName = Literal["adamw_torch", "adamw_torch_fused", "adafactor", "adamw_8bit"]

# [optimize] values that need a CUDA GPU (checked at run start, see nlptasks.engine.optimize).
CUDA_ONLY_OPTIMIZERS = ("adamw_8bit",)


class OptimizeConfig(Section):
    """Memory and speed options, mapped onto transformers' own features (docs/optimize.md).

    The memory ladder also uses ``train.batch_size``, ``train.gradient_accumulation_steps``,
    ``model.max_length``, ``train.precision`` and ``[peft]`` (LoRA, QLoRA).
    """

    gradient_checkpointing: bool = Field(
        False,
        description="Recompute activations in the backward pass instead of keeping them (less memory, ~30% "
        "slower); TrainingArguments.gradient_checkpointing, with the model's use_cache turned off.",
    )
    optimizer: OptimizerName = Field(
        "adamw_torch",
        description="TrainingArguments.optim: 'adamw_torch', 'adamw_torch_fused' (one fused kernel), 'adafactor' "
        "(factored second moments, less memory), 'adamw_8bit' (bitsandbytes 8-bit states; CUDA GPU only).",
    )
    freeze_embeddings: bool = Field(
        False, description="Freeze the embedding layer(s): they get no gradients and are left out of the optimizer."
    )
    freeze_layers: int = Field(
        0,
        ge=0,
        description="Freeze the first N transformer layers (N >= the layer count freezes the whole body: only the "
        "head trains).",
    )
    freeze: list[str] = Field(
        default_factory=list,
        description="Regular expressions on parameter names (re.search) to freeze as well, e.g. ['pooler'].",
    )
    tf32: bool = Field(
        False, description="TensorFloat-32 matrix products on Ampere or newer GPUs (TrainingArguments.tf32; CUDA GPU only)."
    )
    attention: Literal["auto", "sdpa", "eager"] = Field(
        "auto",
        description="Attention implementation (the model's attn_implementation): 'auto' (transformers' choice, "
        "SDPA where the architecture has it), 'sdpa' (torch scaled_dot_product_attention), 'eager' (plain matmuls).",
    )
    compile: bool = Field(
        False, description="Compile the model with torch.compile (TrainingArguments.torch_compile); slow first steps."
    )
    oom_fallback: bool = Field(
        True,
        description="CUDA GPU only (no effect on CPU): on out-of-memory halve train.batch_size and double "
        "gradient_accumulation_steps (same effective batch), retry, and record it in the run's nlptasks.json.",
    )

    @field_validator("freeze")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        import re

        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return value

    def freezes(self) -> bool:
        """Whether any freezing option is set."""
        return self.freeze_embeddings or self.freeze_layers > 0 or bool(self.freeze)


class OutputConfig(Section):
    """Where the run goes: ``<dir>/<task>/<run_name>/``."""

    dir: str = Field(
        "runs", description="Folder that holds runs, as <dir>/<task>/<run_name>; relative to the current directory."
    )
    run_name: str | None = Field(None, description="Name of this run (default: date and time).")
    keep_checkpoints: bool = Field(False, description="Keep intermediate checkpoints after training.")
    overwrite: bool = Field(False, description="Replace an existing run of the same name.")

    _dir_without_nul = field_validator("dir")(lambda cls, v: _no_nul(v))

    @field_validator("run_name")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value in (".", "..") or any(c in value for c in "/\\\0")):
            raise ValueError(
                f"must be a plain folder name, without slashes or '..' (got {value!r}): "
                "runs go to <output.dir>/<task>/<run_name>"
            )
        return value
    checkpoint_steps: int | None = Field(
        None,
        ge=1,
        description="Save a resumable checkpoint (model, optimizer, scheduler, RNG and data position) every N "
        "optimizer steps, so that `nlptasks run RECIPE --resume` continues after a crash. Default: none (only "
        "the best-model checkpoints of train.keep_best, which hold the model alone).",
    )
    checkpoint_limit: int = Field(
        2,
        ge=1,
        description="Most checkpoints kept on disk while training (the oldest go first; the newest and, with "
        "train.keep_best, the best one are always kept).",
    )


class Recipe(Section):
    """An nlptasks recipe."""

    task: str = Field(description="The task to run, e.g. 'cls' (see `nlptasks plugins`).")
    description: str = Field("", description="Free text: what this recipe is for.")
    seed: int = Field(42, description="Seed for Python, NumPy, torch and the Trainer.")
    data: DataConfig = Field(description="Where the data comes from (see [data]).")
    model: ModelConfig = Field(description="The model: pretrained or from scratch (see [model]).")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Training settings (see [train]).")
    output: OutputConfig = Field(default_factory=OutputConfig, description="Where the run is saved (see [output]).")
    optimize: OptimizeConfig = Field(
        default_factory=OptimizeConfig,
        description="Memory and speed options: checkpointing, optimizer, freezing, attention (see [optimize], "
        "docs/optimize.md).",
    )
    peft: PeftConfig | None = Field(
        None, description="Train an adapter on a frozen base instead of the whole model (see [peft], docs/peft.md)."
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Task options, validated by the task's plugin."
    )


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


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
        return data


PATH_KEYS = ("data.train", "data.validation", "data.test")


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"train.learning_rate=3e-5"`` → ``(["train", "learning_rate"], 3e-05)``.

    The value is read as a TOML value (numbers, booleans, ``[lists]``, ``"quoted strings"``);
    anything that is not valid TOML is taken as a plain string.
    """
    if "=" not in item:
        raise RecipeError(
            "--set",
            [Problem(item, "expected KEY=VALUE, e.g. --set train.learning_rate=3e-5")],
        )
    key, _, text = item.partition("=")
    parts = [p.strip() for p in key.strip().split(".")]
    if not all(parts):
        raise RecipeError("--set", [Problem(item, "empty key part; keys look like train.learning_rate")])
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return parts, value


def _apply_override(raw: dict[str, Any], parts: list[str], value: Any) -> None:
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise RecipeError("--set", [Problem(where, "is a value, not a table; cannot set a key inside it")])
        node = child
    node[parts[-1]] = value


def read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NlptasksError(
            f"{path}: recipe not found", hint="Shipped recipes are in recipes/, e.g. `nlptasks run recipes/cls.toml`."
        ) from None
    except IsADirectoryError:
        raise NlptasksError(f"{path}: is a folder, not a recipe file") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(str(path), [Problem("", f"not valid TOML: {exc}")]) from None


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
    for err in error.errors(include_url=False):
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
            if kind not in {"value_error", "assertion_error"} and "input" in err and not isinstance(
                err["input"], dict
            ):
                message = f"{message} (got {err['input']!r})"
            problems.append(Problem(where, message))
    return problems


def load_recipe(
    path: str | Path | None,
    overrides: Iterable[str] = (),
    host: Host | None = None,
    raw: dict[str, Any] | None = None,
    check_files: bool = True,
) -> LoadedRecipe:
    """Read, override and validate a recipe; raise :class:`RecipeError` listing every problem.

    :param path: the TOML file (or ``None`` when ``raw`` is given).
    :param overrides: ``KEY=VALUE`` strings from ``--set``.
    :param host: the plugin host (for the task and its options model).
    :param check_files: report data files that do not exist.
    """
    from nlptasks.plugins import get_host

    host = host or get_host()
    source = str(path) if path is not None else "<recipe>"
    base = Path(path).resolve().parent if path is not None else Path.cwd()
    if raw is None:
        assert path is not None
        raw = read_toml(Path(path))
    raw = json.loads(json.dumps(raw, default=str))  # deep copy; TOML dates become strings

    file_peft = dict(raw["peft"]) if isinstance(raw.get("peft"), dict) else None
    overridden: set[str] = set()
    for item in overrides:
        parts, value = parse_override(item)
        _apply_override(raw, parts, value)
        overridden.add(".".join(parts))
    notes = _switch_peft_method(raw, file_peft, overridden)
    peft_section = raw.get("peft")
    if isinstance(peft_section, dict) and peft_section.get("method") == "none":
        del raw["peft"]  # [peft] switched off: train the whole model, ignore the table's other keys

    problems: list[Problem] = []
    recipe: Recipe | None = None
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as exc:
        problems += [p for p in problems_from(exc) if p.where != "options" and not p.where.startswith("options.")]

    # The task and its options, even when other sections have problems.
    task_name = raw.get("task")
    spec: TaskSpec | None = None
    options: BaseModel | None = None
    if isinstance(task_name, str):
        if task_name in host.tasks:
            spec = host.tasks[task_name]
        else:
            problems.append(Problem("task", host.unknown_task_message(task_name)))
    elif task_name is not None:
        problems = [p for p in problems if p.where != "task"]
        problems.append(
            Problem("task", f"must be a task name in quotes, e.g. task = \"cls\" (got {task_name!r}); "
                    f"tasks: {', '.join(sorted(host.tasks)) or 'none installed'}")
        )
    raw_options = raw.get("options", {})
    if spec is not None:
        if not isinstance(raw_options, dict):
            problems.append(Problem("options", "must be a table ([options])"))
        else:
            try:
                options = spec.options.model_validate(raw_options)
            except ValidationError as exc:
                problems += problems_from(exc, prefix="options", root=spec.options)

    problems += _peft_problems(raw, spec, options)
    problems += _optimize_problems(raw)

    problems += _nulls_in_lists(raw)
    if recipe is not None:
        problems += _combination_problems(recipe)
        _resolve_paths(recipe, base, overridden)
        if check_files:
            problems += _missing_files(recipe)

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


def _switch_peft_method(raw: dict[str, Any], file_peft: dict[str, Any] | None, overridden: set[str]) -> list[str]:
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


QUANT_4BIT_KEYS = ("quant_type", "double_quant", "compute_dtype")


def _peft_problems(raw: dict[str, Any], spec: TaskSpec | None, options: BaseModel | None) -> list[Problem]:
    """``[peft]`` checks pydantic cannot make alone: keys of another method, 4-bit keys without
    4-bit, and whether the task (and this method) can be adapted at all."""
    from nlptasks.peft_support import METHODS, unsupported_reason

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
            problems.append(Problem(f"peft.{key}", "applies only with peft.quantization = \"4bit\""))
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
    reason = unsupported_reason(task_type, method)
    if reason is not None:
        working = [m for m in METHODS if unsupported_reason(task_type, m) is None]
        problems.append(
            Problem(
                "peft.method",
                f"{method!r} does not work for task {spec.name!r} ({task_type}): {reason}; "
                f"use one of: {', '.join(working)}",
            )
        )
    return problems


FREEZE_KEYS = ("freeze_embeddings", "freeze_layers", "freeze")


def _optimize_problems(raw: dict[str, Any]) -> list[Problem]:
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


def _nulls_in_lists(node: Any, path: str = "") -> list[Problem]:
    """``None`` inside a list (possible from Python, not from TOML): a run could not save the recipe."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _nulls_in_lists(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        if any(v is None for v in node):
            return [Problem(path, "a list cannot hold null (None) values: TOML has no null")]
        return [p for v in node for p in _nulls_in_lists(v, path)]
    return []


def _combination_problems(recipe: Recipe) -> list[Problem]:
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
    return problems


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
        if value is not None and not Path(value).exists():
            problems.append(Problem(key, f"file not found: {value}"))
    name = recipe.model.name_or_path
    if name and Path(name).is_absolute() and not Path(name).exists():
        problems.append(Problem("model.name_or_path", f"folder not found: {name}"))
    return problems


# ---------------------------------------------------------------------------------------------
# Schema and TOML output
# ---------------------------------------------------------------------------------------------


def recipe_json_schema(tasks: dict[str, TaskSpec]) -> dict[str, Any]:
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


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + inner + " }" if inner else "{}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _toml_key(key: str) -> str:
    import re

    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def dump_toml(data: dict[str, Any], header: str = "") -> str:
    """Write nested dicts as TOML (enough for recipes: scalars, lists, tables)."""
    lines: list[str] = [f"# {line}" if line else "#" for line in header.splitlines()]

    def table(node: dict[str, Any], path: list[str]) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict) and v is not None}
        tables = {k: v for k, v in node.items() if isinstance(v, dict)}
        if path and (scalars or not tables):
            lines.append("")
            lines.append("[" + ".".join(_toml_key(p) for p in path) + "]")
        for k, v in scalars.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in tables.items():
            table(v, [*path, k])

    table(data, [])
    return "\n".join(lines).lstrip("\n") + "\n"
