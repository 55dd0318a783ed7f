"""The recipe's tables as pydantic models: every key, its type, default and description.

Models forbid unknown keys and describe every field: ``nlptasks schema``, docs/recipes.md and the
error messages come from here.  Cross-key rules that need the task live in
:mod:`nlptasks.recipe.rules`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from nlptasks.recipe.peft_table import PEFT_METHOD_KEYS, PeftConfig
from nlptasks.recipe.section import Section
from nlptasks.recipe.tuning import TuneConfig, TuneDistribution

__all__ = [
    "CUDA_ONLY_OPTIMIZERS",
    "PATH_KEYS",
    "PEFT_METHOD_KEYS",
    "DataConfig",
    "ModelConfig",
    "OptimizeConfig",
    "OutputConfig",
    "PeftConfig",
    "Recipe",
    "ScratchConfig",
    "SplitConfig",
    "TrainConfig",
    "TuneConfig",
    "TuneDistribution",
]

PATH_KEYS = ("data.train", "data.validation", "data.test")


def _no_nul(value: Any) -> Any:
    """Paths reach the file system: a NUL character is refused here, not by ``open``."""
    if isinstance(value, str) and "\0" in value:
        raise ValueError(f"a path cannot contain a NUL character (got {value!r})")
    return value


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
    seed: int = Field(42, ge=0, lt=2**32, description="Seed of the random split.")
    stratify: bool = Field(
        True, description="Keep class proportions in every split (for tasks that declare a label column)."
    )


DataFormat = Literal["auto", "csv", "json", "jsonl", "txt", "disk"]


class DataConfig(Section):
    """Where the data comes from: local files, a ``save_to_disk`` folder, or a hub dataset."""

    train: str | None = Field(None, description="Training file (csv, json, jsonl) or a datasets save_to_disk folder.")
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
        None, ge=1, le=10**12, description="Use only the first N training rows (quick experiments)."
    )
    max_eval_rows: int | None = Field(
        None, ge=1, le=10**12, description="Use only the first N rows of validation and of test."
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
        "Chinese), 'wordpiece' or 'bpe' (sub-words; English). Each gives the same vocabulary from the same "
        "texts every time.",
    )
    vocab_size: int = Field(8000, ge=16, le=2**20, description="Largest vocabulary to build (special tokens included).")
    min_frequency: int = Field(2, ge=1, le=10**9, description="Keep tokens seen at least this many times.")
    lowercase: bool = Field(False, description="Lower-case texts before building the vocabulary.")
    layers: int = Field(
        2,
        ge=1,
        le=512,
        description="Number of transformer layers, in the encoder and in the decoder (every layer count "
        "the architecture has: T5's num_layers and num_decoder_layers, BART's encoder_layers and decoder_layers...).",
    )
    hidden: int = Field(
        256,
        ge=8,
        le=65536,
        description="Hidden size (hidden_size, d_model, n_embd..., whatever the "
        "architecture calls it); each head's size is hidden / heads.",
    )
    heads: int = Field(
        4, ge=1, le=1024, description="Attention heads (must divide hidden), in the encoder and the decoder."
    )
    intermediate: int = Field(
        1024,
        ge=8,
        le=262144,
        description="Feed-forward size, in the encoder and the decoder "
        "(intermediate_size, d_ff, encoder_ffn_dim and decoder_ffn_dim, n_inner...).",
    )
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Further config keys passed to transformers' AutoConfig (not the sizes the "
        "keys above set, under any of their names; a size field they cannot set must be given here).",
    )

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ScratchConfig:
        if self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden ({self.hidden})")
        return self


class ModelConfig(Section):
    """The model: a pretrained one (hub id or folder) or one built from scratch."""

    name_or_path: str | None = Field(None, description="Hub model id (e.g. 'hfl/rbt3') or a local model folder.")
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


_TRACKER_PACKAGES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("tensorboard", ("tensorboard", "tensorboardX"), "pip install tensorboard"),
    ("mlflow", ("mlflow",), "pip install mlflow"),
)
"""``train.report_to``'s trackers: the modules one of which must import, and the command that installs it."""


class TrainConfig(Section):
    """Training settings, mapped onto transformers' TrainingArguments."""

    epochs: float = Field(3.0, gt=0, le=10000, description="Number of training epochs.")
    max_steps: int | None = Field(
        None, ge=1, le=10**9, description="Stop after this many optimizer steps (overrides epochs)."
    )
    batch_size: int = Field(16, ge=1, le=65536, description="Training batch size per device.")
    eval_batch_size: int | None = Field(
        None, ge=1, le=65536, description="Evaluation batch size (default: 2 x batch_size)."
    )
    learning_rate: float = Field(5e-5, gt=0, lt=1, description="Peak learning rate.")
    weight_decay: float = Field(0.0, ge=0, lt=1, description="AdamW weight decay.")
    warmup: float = Field(0.0, ge=0, lt=1, description="Fraction of steps with linear learning-rate warmup.")
    scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = Field(
        "linear", description="Learning-rate schedule after warmup."
    )
    gradient_accumulation_steps: int = Field(1, ge=1, le=65536, description="Micro-batches per optimizer step.")
    eval_strategy: Literal["epoch", "steps", "no"] = Field(
        "epoch", description="When to evaluate on validation (and save a checkpoint)."
    )
    eval_steps: int | None = Field(
        None, ge=1, le=10**9, description="Evaluate every N steps (with eval_strategy = 'steps')."
    )
    logging_steps: int = Field(50, ge=1, le=10**9, description="Log the training loss every N steps.")
    keep_best: bool = Field(True, description="Keep the checkpoint with the best validation metric, not the last one.")
    best_metric: str | None = Field(
        None, description="Metric that picks the best checkpoint (default: the task's, e.g. 'accuracy')."
    )
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto",
        description="'auto': bf16 on GPUs that support it, fp16 on older GPUs; on a CPU, bf16 autocast for a "
        "pretrained model (model.name_or_path) where the CPU computes in bf16 natively (AVX-512 BF16 or AMX), else "
        "fp32 (models built from scratch stay fp32: measured no faster and less accurate in bf16).",
    )
    padding: Literal["dynamic", "max_length"] = Field(
        "dynamic", description="Pad each batch to its longest example ('dynamic') or to model.max_length."
    )
    group_by_length: bool = Field(
        False,
        description="Draw training batches of similar lengths, in random order (less padding, faster: 2.1x "
        "the samples/s of random batches on SST-2 here, where our recipes turn it on); for tasks with one class per "
        "row (cls, pair classes) each batch keeps the data's mix of classes; off by default: on tasks whose "
        "examples have nearly one length (windowed QA) it gains little and can cost accuracy.",
    )
    sort_eval_by_length: bool = Field(
        True,
        description="Evaluate and predict in batches of similar length, longest first, with the results put "
        "back in the data's order (less padding; the same predictions). Off: the data's order.",
    )
    report_to: list[Literal["tensorboard", "mlflow"]] = Field(
        default_factory=list,
        description='Experiment trackers to log to: ["tensorboard"] writes event files to <run>/tensorboard '
        '(needs the tensorboard package); ["mlflow"] logs the training history, parameters, final metrics and the '
        "run's card, metrics.json and recipe to the MLflow tracking store named by MLFLOW_TRACKING_URI (and "
        "MLFLOW_EXPERIMENT_NAME), MLflow's default ./mlflow.db when unset (needs the mlflow package: "
        "docs/tracking.md; trackio and the others are not accepted yet: docs/tracking.md says why). Default: none.",
    )
    zero: Literal[1, 2, 3] | None = Field(
        None,
        description="DeepSpeed ZeRO stage across the run's processes (nlptasks run RECIPE --nproc N): 1 shards "
        "the optimizer states, 2 also the gradients, 3 also the weights (gathered whole into the saved "
        "model). The DeepSpeed config is generated from this recipe; for your own, set "
        "train.extra.deepspeed instead (a JSON file or a table). Needs pip install deepspeed "
        "(docs/optimize.md#deepspeed-zero).",
    )
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Further transformers TrainingArguments, passed as they are (checked at run time).",
    )

    @field_validator("report_to")
    @classmethod
    def _tracker_installed(cls, value: list[str]) -> list[str]:
        import importlib.util

        for tracker, modules, install in _TRACKER_PACKAGES:
            if tracker in value and not any(importlib.util.find_spec(m) for m in modules):
                raise ValueError(
                    f"the {modules[0]} package is not installed: {install} (or leave '{tracker}' out of train.report_to)"
                )
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _one_way_to_shard(self) -> TrainConfig:
        if self.zero is not None and self.extra.get("deepspeed"):
            raise ValueError(
                "train.zero and train.extra.deepspeed both set DeepSpeed: keep train.zero (a config generated "
                "from the recipe) or train.extra.deepspeed (your own config), not both"
            )
        if self.zero is not None and self.extra.get("fsdp"):
            raise ValueError("train.zero (DeepSpeed) and train.extra.fsdp (FSDP) both shard the model: keep one")
        return self

    @model_validator(mode="after")
    def _steps_need_eval_steps(self) -> TrainConfig:
        if self.eval_strategy == "steps" and self.eval_steps is None:
            raise ValueError("train.eval_strategy = 'steps' needs train.eval_steps")
        if self.eval_steps is not None and self.eval_strategy != "steps":
            raise ValueError(
                f"train.eval_steps applies only with eval_strategy = 'steps' (it is {self.eval_strategy!r}): "
                "set train.eval_strategy = 'steps', or remove eval_steps"
            )
        if self.keep_best and self.eval_strategy == "no" and "keep_best" in self.model_fields_set:
            raise ValueError(
                "train.keep_best = true needs evaluations, but eval_strategy = 'no': the last weights "
                "would be kept; set train.eval_strategy, or keep_best = false"
            )
        return self


OptimizerName = Literal["auto", "adamw_torch", "adamw_torch_fused", "adafactor", "adamw_8bit"]

# [optimize] values that need a CUDA GPU (checked at run start, see nlptasks.engine.training.optimize).
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
        "auto",
        description="TrainingArguments.optim: 'auto' (the default: 'adamw_torch_fused' where torch runs the fused "
        "kernel on this device, else 'adamw_torch'), 'adamw_torch', 'adamw_torch_fused' (one fused kernel, the same "
        "update), 'adafactor' (factored second moments, less memory), 'adamw_8bit' (bitsandbytes 8-bit states; CUDA "
        "GPU only).",
    )
    freeze_embeddings: bool = Field(
        False, description="Freeze the embedding layer(s): they get no gradients and are left out of the optimizer."
    )
    freeze_layers: int = Field(
        0,
        ge=0,
        le=10**6,
        description="Freeze the first N transformer layers (N >= the layer count freezes the whole body: only the "
        "head trains).",
    )
    freeze: list[str] = Field(
        default_factory=list,
        description="Regular expressions on parameter names (re.search) to freeze as well, e.g. ['pooler'].",
    )
    tf32: bool = Field(
        False,
        description="TensorFloat-32 matrix products on Ampere or newer GPUs (TrainingArguments.tf32; CUDA GPU only).",
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
        le=10**9,
        description="Save a resumable checkpoint (model, optimizer, scheduler, RNG and data position) every N "
        "optimizer steps, so that `nlptasks run RECIPE --resume` continues after a crash. Default: none (only "
        "the best-model checkpoints of train.keep_best, which hold the model alone).",
    )
    checkpoint_limit: int = Field(
        2,
        ge=1,
        le=10000,
        description="Most checkpoints kept on disk while training (the oldest go first; the newest and, with "
        "train.keep_best, the best one are always kept).",
    )


class Recipe(Section):
    """An nlptasks recipe."""

    task: str = Field(description="The task to run, e.g. 'cls' (see `nlptasks plugins`).")
    description: str = Field("", description="Free text: what this recipe is for.")
    seed: int = Field(42, ge=0, lt=2**32, description="Seed for Python, NumPy, torch and the Trainer (0 to 2^32 - 1).")
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
    options: dict[str, Any] = Field(default_factory=dict, description="Task options, validated by the task's plugin.")
    tune: TuneConfig | None = Field(
        None,
        description="Hyperparameter search for `nlptasks tune` (see [tune], docs/tune.md); `nlptasks run` ignores it.",
    )
