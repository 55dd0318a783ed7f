"""PEFT: wrap step 5's model in an adapter, save and load adapter runs, add adapters, merge.

A recipe with a ``[peft]`` table trains an adapter on a frozen base.  The engine applies it right
after step 5 (:func:`apply_peft`), so task plugins build their model exactly as without PEFT and
declare only their peft task type (``TaskSpec.peft_task_type``).  An adapter run folder holds::

    adapter_config.json, adapter_model.safetensors   the adapter "default" (and the trained head)
    base/                                             the frozen base: config.json (head settings),
                                                      plus model.safetensors when it was built from
                                                      scratch (random weights nobody could rebuild)
    adapters/NAME/                                    further adapters on the same base (add-adapter)
    peft_check.json                                   a few tokenized validation inputs, to verify
                                                      `nlptasks export --merge`

and its manifest (``nlptasks.json``) a ``peft`` entry: method, task type, base, adapters,
parameter counts.  Paths in it are relative to the run folder, so the folder can be moved.

Every predictor loads a run's model with :func:`load_trained_model`, which gives the plain model
of a full fine-tuning run, or the base with the chosen adapter (or the base alone).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.errors import NlptasksError, Problem, RecipeError, did_you_mean, first_line
from nlptasks.peft_support import MERGEABLE

if TYPE_CHECKING:
    from nlptasks.context import RunContext
    from nlptasks.recipe import Recipe

BASE_DIR = "base"
ADAPTERS_DIR = "adapters"
CHECK_FILE = "peft_check.json"
DEFAULT_ADAPTER = "default"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
CHECK_ROWS = 4

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


# ---------------------------------------------------------------------------------------------
# Run start: what this machine can do
# ---------------------------------------------------------------------------------------------


def machine_problems(recipe: Recipe, cuda: bool | None = None, bitsandbytes: bool | None = None) -> list[Problem]:
    """Recipe keys this machine cannot honour: half precision, quantization, the 8-bit optimizer
    and tf32 need CUDA, and quantization and the 8-bit optimizer need bitsandbytes.  Checked at run start, before any model is loaded.

    :param cuda: whether a CUDA GPU is present (default: ask torch).
    :param bitsandbytes: whether bitsandbytes is installed (default: look for it).
    """
    import importlib.util

    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if bitsandbytes is None:
        bitsandbytes = importlib.util.find_spec("bitsandbytes") is not None
    problems = []
    dtype = recipe.model.dtype
    if dtype != "fp32" and not cuda:
        problems.append(
            Problem("model.dtype", f"{dtype!r} (half precision) needs a CUDA GPU; this machine has none (use \"fp32\")")
        )
    opt = recipe.optimize
    if opt.optimizer == "adamw_8bit" and not (cuda and bitsandbytes):
        need = [w for w, ok in (("a CUDA GPU (this machine has none)", cuda), (
            "the bitsandbytes package (not installed: pip install bitsandbytes)", bitsandbytes)) if not ok]
        problems.append(
            Problem(
                "optimize.optimizer",
                f"'adamw_8bit' keeps 8-bit optimizer states with bitsandbytes, which needs {' and '.join(need)}; "
                "on this machine use one of: 'adamw_torch', 'adamw_torch_fused', 'adafactor'",
            )
        )
    if recipe.train.extra.get("fsdp") and not cuda:
        problems.append(
            Problem(
                "train.extra.fsdp",
                "FSDP needs CUDA GPUs: on CPU processes accelerate leaves it out and trains with plain DDP; "
                "remove fsdp here (and run with --nproc N for DDP)",
            )
        )
    if opt.tf32 and not cuda:
        problems.append(
            Problem("optimize.tf32", "true needs a CUDA GPU (Ampere or newer); this machine has none (use false)")
        )
    if recipe.train.precision == "fp16" and not cuda:
        problems.append(
            Problem("train.precision", "fp16 needs a CUDA GPU; this machine has none (use 'auto' or 'fp32')")
        )
    peft = recipe.peft
    if peft is not None and peft.quantization != "none":
        need = []
        if not cuda:
            need.append("a CUDA GPU (this machine has none)")
        if not bitsandbytes:
            need.append("the bitsandbytes package (not installed: pip install bitsandbytes)")
        if need:
            problems.append(
                Problem(
                    "peft.quantization",
                    f"{peft.quantization!r} loads the base with bitsandbytes, which needs {' and '.join(need)}; "
                    "use \"none\" on this machine",
                )
            )
        if recipe.model.name_or_path is None:
            problems.append(
                Problem("peft.quantization", "quantizes a pretrained base (model.name_or_path), not a model built from scratch")
            )
    return problems


_CPU_VALUES = {
    "model.dtype": "fp32",
    "peft.quantization": "none",
    "optimize.optimizer": "adamw_torch",
    "optimize.tf32": "false",
    "train.extra.fsdp": "false",
    "train.precision": "auto",
}


def check_machine(recipe: Recipe, source: str = "recipe") -> None:
    """Raise a :class:`RecipeError` naming the keys this machine cannot honour (see :func:`machine_problems`)."""
    problems = machine_problems(recipe)
    if problems:
        raise RecipeError(
            source,
            problems,
            hint="Half precision, 4/8-bit loading, 8-bit optimizers and tf32 run on a CUDA GPU only (docs/peft.md, "
            "docs/optimize.md); on this machine: "
            + " ".join(dict.fromkeys(f"--set {p.where}={_CPU_VALUES[p.where]}" for p in problems if p.where in _CPU_VALUES)),
        )


def from_pretrained_kwargs(recipe: Recipe) -> dict[str, Any]:
    """Extra ``from_pretrained`` arguments for ``model.dtype`` and ``peft.quantization`` (CUDA only;
    :func:`check_machine` has already refused them elsewhere)."""
    import torch

    kwargs: dict[str, Any] = {}
    if recipe.model.dtype != "fp32":
        kwargs["dtype"] = getattr(torch, _DTYPES[recipe.model.dtype])
    peft = recipe.peft
    if peft is not None and peft.quantization != "none":
        from transformers import BitsAndBytesConfig

        if peft.quantization == "4bit":
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type=peft.quant_type,
                bnb_4bit_use_double_quant=peft.double_quant,
                bnb_4bit_compute_dtype=getattr(torch, _DTYPES[peft.compute_dtype]),
            )
        else:
            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
        kwargs["device_map"] = {"": torch.cuda.current_device()}
    return kwargs


# ---------------------------------------------------------------------------------------------
# Training: wrap step 5's model
# ---------------------------------------------------------------------------------------------


def _ia3_modules(model: Any, target: Any, feedforward: Any) -> tuple[Any, Any]:
    """IA3's ``target_modules = "all-linear"`` spelled out, with the feed-forward layers among them.

    peft resolves "all-linear" to full module names but takes its default feed-forward layers as
    short names (``down_proj``), then refuses to load the adapter it saved because the second set
    is not a subset of the first. Naming both in full here gives an adapter that loads again.
    """
    if not (isinstance(target, str) and target.lower() == "all-linear"):
        return target, feedforward
    import peft as p
    from peft.tuners.tuners_utils import _maybe_include_all_linear_layers
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING as FEEDFORWARD

    probe = p.LoraConfig(target_modules="all-linear")  # the same resolution peft does for every method
    names = sorted(_maybe_include_all_linear_layers(probe, model).target_modules)
    short = feedforward if feedforward is not None else FEEDFORWARD.get(model.config.model_type)
    if short is None:
        return names, None  # peft names the missing feedforward_modules itself
    short = [short] if isinstance(short, str) else list(short)
    full = [n for n in names if any(n == f or n.endswith("." + f) for f in short)]
    return names, full


def peft_config(ctx: RunContext, model: Any, task_type: str) -> Any:
    """The peft config object for the recipe's ``[peft]`` table."""
    import peft as p

    cfg = ctx.recipe.peft
    assert cfg is not None
    common: dict[str, Any] = {"task_type": task_type}
    if cfg.modules_to_save:
        common["modules_to_save"] = list(cfg.modules_to_save)
    hidden = getattr(model.config, "hidden_size", None)
    if cfg.method == "lora":
        return p.LoraConfig(
            r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, bias=cfg.bias,
            target_modules=cfg.target_modules, **common,
        )
    if cfg.method == "ia3":
        target, feedforward = _ia3_modules(model, cfg.target_modules, cfg.feedforward_modules)
        return p.IA3Config(target_modules=target, feedforward_modules=feedforward, **common)
    common["num_virtual_tokens"] = cfg.num_virtual_tokens
    if cfg.method == "prefix":
        return p.PrefixTuningConfig(
            prefix_projection=cfg.prefix_projection, encoder_hidden_size=cfg.encoder_hidden_size or hidden, **common
        )
    if cfg.method == "p_tuning":
        return p.PromptEncoderConfig(
            encoder_reparameterization_type=cfg.encoder_type, encoder_hidden_size=cfg.encoder_hidden_size or hidden,
            encoder_num_layers=cfg.encoder_layers, encoder_dropout=cfg.encoder_dropout, **common,
        )
    if cfg.prompt_init_text:
        # peft reads the init text's token ids with AutoTokenizer from a folder: the run folder,
        # where the run's tokenizer is written now (and again at the end of the run).
        ctx.tokenizer.save_pretrained(str(ctx.output_dir))
        return p.PromptTuningConfig(
            prompt_tuning_init=p.PromptTuningInit.TEXT, prompt_tuning_init_text=cfg.prompt_init_text,
            tokenizer_name_or_path=str(ctx.output_dir), **common,
        )
    return p.PromptTuningConfig(prompt_tuning_init=p.PromptTuningInit.RANDOM, **common)


def prefix_problem(model: Any, task_type: str) -> str | None:
    """Why peft's prefix tuning cannot run on ``model``, or ``None`` when it can.

    Prefix tuning hands its trained keys and values to the model as ``past_key_values``.  For
    sequence and token classification peft looks for that argument in the forward of the model or
    of its backbone and refuses the model without it; transformers 5.24 renamed the argument to
    ``cache`` in its encoders (BERT and others), so peft 0.21 refuses them there.  Causal LMs and
    plain encoders (feature extraction) go through other peft paths and are not affected.
    """
    import inspect

    if task_type not in ("SEQ_CLS", "TOKEN_CLS"):
        return None

    def takes_past(module: Any) -> bool:
        return "past_key_values" in inspect.signature(module.forward).parameters

    backbone = getattr(model, getattr(model, "base_model_prefix", ""), None)
    if takes_past(model) or (backbone is not None and takes_past(backbone)):
        return None
    import transformers

    return (
        f"peft passes the prefix as past_key_values, which neither {type(model).__name__}.forward nor its "
        f"backbone takes in transformers {transformers.__version__} (peft 0.21 predates its rename to 'cache')"
    )


def apply_peft(ctx: RunContext, model: Any, data: Any) -> Any:
    """Wrap step 5's ``model`` with the recipe's ``[peft]`` method; save what loading needs.

    Saves the frozen base (``base/``: its config, and its weights when built from scratch) and a
    few tokenized inputs (``peft_check.json``), logs and records the trainable and total parameter
    counts, and returns the ``PeftModel`` that steps 6 to 9 train.
    """
    from peft import get_peft_model

    cfg = ctx.recipe.peft
    assert cfg is not None
    task_type = ctx.task.peft_task_type_for(ctx.options)
    if task_type is None:  # load_recipe refuses this; a plugin may have changed its mind since
        raise RecipeError("recipe", [Problem("peft", f"task {ctx.task.name!r} does not support PEFT")])
    reason = prefix_problem(model, task_type) if cfg.method == "prefix" else None
    if reason:
        raise RecipeError(
            "recipe",
            [Problem("peft.method", f"'prefix' cannot train {type(model).__name__}: {reason}; "
                     "use 'lora', 'ia3', 'p_tuning' or 'prompt' (--set peft.method=lora)")],
        )
    out = ctx.output_dir
    base_dir = out / BASE_DIR
    model_cfg = ctx.recipe.model
    from nlptasks.engine.distributed import is_main

    main = is_main()  # in a distributed run only rank 0 writes the run folder
    if model_cfg.name_or_path is None:
        if main:
            model.save_pretrained(str(base_dir))
        base: dict[str, Any] = {
            "kind": "scratch",
            "path": BASE_DIR,
            "sha256": file_sha256(base_dir / "model.safetensors") if main else None,
        }
    else:
        if main:
            model.config.save_pretrained(str(base_dir))
        base = {"kind": "pretrained", "name_or_path": model_cfg.name_or_path, "revision": model_cfg.revision, "config": BASE_DIR}
        if model_cfg.allow_pickle:
            base["allow_pickle"] = True  # inference may load the base's pickle weights too
    base["dtype"] = model_cfg.dtype
    if cfg.quantization != "none":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model)
    config = peft_config(ctx, model, task_type)
    try:
        with _quiet_peft():
            model = get_peft_model(model, config)
    except (ValueError, TypeError, KeyError) as exc:
        first = first_line(exc)
        key = "peft.target_modules" if cfg.method in ("lora", "ia3") else "peft.method"
        raise RecipeError(
            "recipe",
            [Problem(key, f"peft cannot apply {cfg.method!r} to {type(model).__name__}: {first}")],
            hint="List the model's module names with: python -c \"import transformers; "
            "print([n for n, _ in transformers.AutoModel.from_pretrained('MODEL').named_modules()])\"",
        ) from None
    trainable, total = model.get_nb_trainable_parameters()
    ctx.log.info("peft %s (%s): %s", cfg.method, task_type, parameter_line(trainable, total))
    if main:
        write_check_inputs(out / CHECK_FILE, data)
    ctx.manifest["peft"] = {
        "method": cfg.method,
        "task_type": task_type,
        "base": base,
        "quantization": cfg.quantization,
        "trainable_parameters": trainable,
        "total_parameters": total,
        "adapters": {DEFAULT_ADAPTER: {"path": ".", "method": cfg.method}},
        "check": CHECK_FILE,
    }
    return model


@contextlib.contextmanager
def _quiet_peft() -> Iterator[None]:
    """peft 0.21 calls a transformers 5 method that warns it is deprecated on every wrap: hide that."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def parameter_line(trainable: int, total: int) -> str:
    """``trainable 12,345 of 1,234,567 parameters (1.0%)``."""
    share = 100 * trainable / total if total else 0.0
    return f"trainable {trainable:,} of {total:,} parameters ({share:.1f}%)"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_check_inputs(path: Path, data: Any, rows: int = CHECK_ROWS) -> None:
    """Store up to ``rows`` tokenized rows of validation (else train) for the merge check.

    Every ``input_ids*`` column is one input (``input_ids``, or ``input_ids_a`` and
    ``input_ids_b`` for tasks that encode two sides apart), with its ``attention_mask`` and
    ``token_type_ids`` of the same suffix.
    """
    split = "validation" if "validation" in data and len(data["validation"]) else "train"
    ds = data[split]
    columns = ds.column_names
    inputs = []
    for column in sorted(c for c in columns if c.startswith("input_ids")):
        suffix = column[len("input_ids") :]
        for i in range(min(rows, len(ds))):
            row = ds[i]
            sample = {"input_ids": [int(t) for t in row[column]]}
            for name in ("attention_mask", "token_type_ids"):
                if name + suffix in columns:
                    sample[name] = [int(t) for t in row[name + suffix]]
            inputs.append(sample)
    path.write_text(json.dumps({"split": split, "inputs": inputs}) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Step 10: load a run's model
# ---------------------------------------------------------------------------------------------


def load_trained_model(
    run_dir: str | Path,
    manifest: dict[str, Any],
    auto_class: str,
    adapter: str | None = None,
    base_only: bool = False,
    for_inference: bool = True,
) -> Any:
    """The model of a complete run, ready for inference (``eval()`` mode).

    :param run_dir: the run folder.
    :param manifest: its parsed ``nlptasks.json``.  ``manifest["peft"]["active"]`` (set by
        ``nlptasks infer --adapter NAME``) and ``manifest["peft"]["base_only"]`` (``--base-only``)
        choose what to load when the arguments below do not.
    :param auto_class: a transformers class name, e.g. ``"AutoModelForSequenceClassification"``
        (or a concrete class such as ``"BertForTokenClassification"``).
    :param adapter: the adapter to put on the base (default: the active one, else ``"default"``).
    :param base_only: the frozen base without any adapter.
    With ``for_inference`` (the default) the model is put on the inference device and dtype
    (:func:`nlptasks.engine.inference.prepare_for_inference`: a CUDA GPU when there is one, bf16
    where it supports it); without, it stays as saved, on the CPU.

    :returns: a run without ``[peft]``: ``auto_class.from_pretrained(run_dir)``.  An adapter run:
        the base (from ``base/``, or ``model.name_or_path`` with the head settings saved in
        ``base/``) with the adapter loaded as a ``peft.PeftModel``, or the base alone.
    """
    import transformers

    run_dir = Path(run_dir)
    cls = getattr(transformers, auto_class, None)
    if cls is None:
        raise NlptasksError(f"internal error: transformers has no class {auto_class!r}")
    info = manifest.get("peft")
    if not info:
        if adapter is not None or base_only:
            raise NlptasksError(
                f"{run_dir}: this run trained the whole model; it has no adapters or base to choose",
                hint="--adapter and --base-only apply to runs trained with a [peft] table (docs/peft.md).",
            )
        return _ready(cls.from_pretrained(run_dir, use_safetensors=True), for_inference)  # runs save safetensors; never unpickle
    adapter = adapter if adapter is not None else info.get("active")
    base_only = base_only or bool(info.get("base_only"))
    model = load_base(run_dir, info, cls)
    if base_only:
        return _ready(model, for_inference)
    name = adapter or DEFAULT_ADAPTER
    path = adapter_path(run_dir, info, name)
    from peft import PeftConfig, PeftModel

    config = PeftConfig.from_pretrained(str(path))
    if getattr(config, "prompt_tuning_init", None) in ("TEXT", "SAMPLE_VOCAB"):
        # The trained embeddings are in the adapter; do not look for the tokenizer peft used to
        # initialise them (an absolute path that may not exist wherever the run is now).
        config.prompt_tuning_init = "RANDOM"
        config.tokenizer_name_or_path = None
    config.inference_mode = True
    with _quiet_peft():
        model = PeftModel.from_pretrained(model, str(path), adapter_name=name, config=config)
    return _ready(model, for_inference)


def _ready(model: Any, for_inference: bool) -> Any:
    if for_inference:
        from nlptasks.engine.inference import prepare_for_inference

        return prepare_for_inference(model)
    model.eval()
    return model


def load_base(run_dir: Path, info: dict[str, Any], cls: Any) -> Any:
    """The frozen base of an adapter run, as ``cls``."""
    base = info["base"]
    try:
        if base["kind"] == "scratch":
            return cls.from_pretrained(run_dir / base["path"], use_safetensors=True)
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(run_dir / base["config"])
        return cls.from_pretrained(
            base["name_or_path"], config=config, revision=base.get("revision"),
            use_safetensors=None if base.get("allow_pickle") else True,  # as the recipe allowed at training
        )
    except OSError as exc:
        where = run_dir / base["path"] if base["kind"] == "scratch" else base["name_or_path"]
        first = first_line(exc)
        raise NlptasksError(
            f"{run_dir}: cannot load the run's frozen base from {where}: {first}",
            hint="A pretrained base loads from the hub (needs internet or a filled cache) or its local folder.",
        ) from None


def adapter_path(run_dir: Path, info: dict[str, Any], name: str) -> Path:
    adapters = info.get("adapters", {})
    if name not in adapters:
        raise NlptasksError(
            f"--adapter {name}: run {run_dir} has no adapter {name!r}{did_you_mean(name, adapters)}; "
            f"its adapters: {', '.join(adapters)}",
            hint=f"Add one trained on the same base: nlptasks add-adapter {run_dir} OTHER_RUN --name {name}",
        )
    return run_dir / adapters[name]["path"]


def choose(manifest: dict[str, Any], run_dir: Path, adapter: str | None, base_only: bool) -> dict[str, Any]:
    """The manifest a predictor sees for ``--adapter NAME`` / ``--base-only``.

    An added adapter brings the task settings of the run it was trained in (a bi-encoder's
    threshold, for example); ``peft.active`` / ``peft.base_only`` tell :func:`load_trained_model`.
    """
    if adapter is None and not base_only:
        return manifest
    info = manifest.get("peft")
    if not info:
        flag = "--adapter" if adapter is not None else "--base-only"
        raise NlptasksError(
            f"{flag}: the run {run_dir} trained the whole model; it has no adapters",
            hint="--adapter and --base-only apply to runs trained with a [peft] table (docs/peft.md).",
        )
    if adapter is not None and base_only:
        raise NlptasksError("give --adapter NAME or --base-only, not both")
    chosen = dict(manifest)
    if adapter is not None:
        adapter_path(run_dir, info, adapter)  # unknown name → error listing the adapters
        chosen.update(info["adapters"][adapter].get("manifest", {}))
    chosen["peft"] = {**info, "active": adapter, "base_only": base_only}
    return chosen


# ---------------------------------------------------------------------------------------------
# Several adapters on one base
# ---------------------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TASK_KEYS_SKIPPED = ("peft", "created", "plugins", "versions", "COMPLETE")


def add_adapter(run_dir: Path, other_dir: Path, name: str) -> dict[str, Any]:
    """Copy ``other_dir``'s adapter into ``run_dir/adapters/NAME`` after checking that both runs
    share their base (same task, task type, model class, labels, base weights or hub model, and
    tokenizer).  Returns the updated manifest."""
    from nlptasks.engine.runner import MANIFEST, read_manifest, write_json

    manifest, other = read_manifest(run_dir), read_manifest(other_dir)
    info, other_info = manifest.get("peft"), other.get("peft")
    for path, m in ((run_dir, info), (other_dir, other_info)):
        if not m:
            raise NlptasksError(
                f"{path}: this run trained the whole model, not an adapter",
                hint="Both runs must be trained with a [peft] table on the same base (docs/peft.md).",
            )
    assert info is not None and other_info is not None
    if not _NAME.fullmatch(name) or name == DEFAULT_ADAPTER:
        raise NlptasksError(
            f"--name {name!r}: use letters, digits, '_', '.' or '-' (not {DEFAULT_ADAPTER!r}, the run's own adapter)"
        )
    if name in info["adapters"]:
        raise NlptasksError(f"--name {name}: run {run_dir} already has an adapter {name!r}; pick another name")
    mismatches = []
    for label, a, b in (
        ("task", manifest.get("task"), other.get("task")),
        ("peft task type", info.get("task_type"), other_info.get("task_type")),
        ("model class", manifest.get("model_class"), other.get("model_class")),
        ("labels", manifest.get("labels"), other.get("labels")),
        ("base", _base_identity(info["base"]), _base_identity(other_info["base"])),
        ("tokenizer", _tokenizer_identity(run_dir), _tokenizer_identity(other_dir)),
    ):
        if a != b:
            mismatches.append(f"{label}: {a!r} here, {b!r} in {other_dir}")
    if mismatches:
        raise NlptasksError(
            f"{other_dir}: its adapter was not trained on the base of {run_dir}",
            [Problem("", m) for m in mismatches],
            hint="Train the other adapter with the same recipe sections [data], [model] and seed (only [peft] "
            "and [train] may differ), then add it.",
        )
    source = other_dir / other_info["adapters"][DEFAULT_ADAPTER]["path"]
    target = run_dir / ADAPTERS_DIR / name
    target.mkdir(parents=True)
    for file in ADAPTER_FILES:
        if (source / file).exists():
            shutil.copy2(source / file, target / file)
    task_settings = {k: v for k, v in other.items() if k not in _TASK_KEYS_SKIPPED}
    info["adapters"][name] = {
        "path": f"{ADAPTERS_DIR}/{name}",
        "method": other_info["method"],
        "from": str(other_dir.resolve()),
        "manifest": task_settings,
    }
    write_json(run_dir / MANIFEST, manifest)
    return manifest


def _base_identity(base: dict[str, Any]) -> Any:
    if base["kind"] == "scratch":
        return f"scratch weights sha256 {base['sha256'][:12]}"
    return f"{base['name_or_path']}@{base.get('revision') or 'main'}"


def _tokenizer_identity(run_dir: Path) -> str | None:
    path = run_dir / "tokenizer.json"
    return f"sha256 {file_sha256(path)[:12]}" if path.exists() else None


# ---------------------------------------------------------------------------------------------
# Export: merge into a full model, and check it predicts the same
# ---------------------------------------------------------------------------------------------


def model_outputs(model: Any, inputs: list[dict[str, list[int]]], task_type: str) -> list[Any]:
    """One output per stored input: greedy continuation tokens (causal LM), the argmax of the logits
    and the logits (heads), or the last hidden states (feature extraction)."""
    import torch

    from nlptasks.engine.inference import accepted_inputs

    accepted = accepted_inputs(model)
    outputs = []
    with torch.inference_mode():
        for sample in inputs:
            tensors = {k: torch.tensor([v]) for k, v in sample.items() if k in accepted}
            if task_type == "CAUSAL_LM":
                generated = model.generate(**tensors, max_new_tokens=8, do_sample=False)
                outputs.append(("tokens", generated[0, tensors["input_ids"].shape[1] :].tolist(), None))
                continue
            out = model(**tensors)
            logits = getattr(out, "logits", None)
            if logits is not None:
                outputs.append(("argmax", logits.argmax(-1).tolist(), logits.float()))
            else:
                outputs.append(("hidden", None, out.last_hidden_state.float()))
    return outputs


def compare_outputs(before: list[Any], after: list[Any], atol: float = 1e-4) -> tuple[list[str], float]:
    """``(differences, largest absolute difference of the logits or states)``."""
    differences, largest = [], 0.0
    for i, ((kind, a, x), (_, b, y)) in enumerate(zip(before, after, strict=True), start=1):
        if x is not None and y is not None:
            largest = max(largest, float((x - y).abs().max()))
        if kind == "hidden":
            if not bool((x - y).abs().max() <= atol + 1e-3 * y.abs().max()):
                differences.append(f"input {i}: hidden states differ by up to {float((x - y).abs().max()):.2e}")
        elif a != b:
            differences.append(f"input {i}: {'greedy tokens' if kind == 'tokens' else 'argmax of the logits'} {a} → {b}")
    return differences, largest


def export_merged(run_dir: Path, out: Path, adapter: str | None = None) -> dict[str, Any]:
    """``nlptasks export RUN --merge OUT``: fold a lora/ia3 adapter into the base weights and save
    a complete run that loads with plain transformers; verify that it predicts as the adapter did.

    Returns the new run's manifest.  A mismatch on the stored inputs is an error (and ``OUT`` is
    left without its ``COMPLETE`` marker).
    """
    from transformers import AutoTokenizer

    from nlptasks.engine.runner import MANIFEST, mark_complete, read_manifest, write_json

    manifest = read_manifest(run_dir)
    info = manifest.get("peft")
    if not info:
        raise NlptasksError(
            f"{run_dir}: this run trained the whole model; there is no adapter to merge",
            hint=f"It already loads with plain transformers: AutoModel...from_pretrained({str(run_dir)!r}).",
        )
    name = adapter or DEFAULT_ADAPTER
    adapter_path(run_dir, info, name)
    method = info["adapters"][name]["method"]
    if method not in MERGEABLE:
        raise NlptasksError(
            f"--merge: the adapter {name!r} of {run_dir} uses method {method!r}, which cannot be merged: its "
            "virtual tokens or prefixes are extra inputs, not changes to weights (only "
            f"{' and '.join(MERGEABLE)} merge)",
            hint=f"Use the run as it is: nlptasks infer --model {run_dir}",
        )
    if info.get("quantization", "none") != "none":
        raise NlptasksError(
            f"--merge: {run_dir} has a {info['quantization']} quantized base; merging into quantized weights "
            "loses precision, so export does not do it",
            hint="Retrain with peft.quantization = \"none\" (and model.dtype = \"bf16\" on a GPU) to export a merged model.",
        )
    if out.exists() and any(out.iterdir()):
        raise NlptasksError(f"--merge {out}: the folder exists and is not empty", hint="Pick a new folder.")
    check = json.loads((run_dir / info.get("check", CHECK_FILE)).read_text(encoding="utf-8"))["inputs"]
    model_class = manifest.get("model_class")
    if not model_class:
        raise NlptasksError(f"{run_dir}: the manifest does not record model_class; cannot export")
    chosen = choose(manifest, run_dir, name if name != DEFAULT_ADAPTER else None, False)
    model = load_trained_model(run_dir, chosen, model_class, adapter=name, for_inference=False)  # fp32, CPU
    task_type = info["task_type"]
    before = model_outputs(model, check, task_type)
    merged = model.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(run_dir).save_pretrained(str(out))
    for extra in ("labels.json", "recipe.toml", "metrics.json"):
        if (run_dir / extra).exists():
            shutil.copy2(run_dir / extra, out / extra)
    import transformers

    reloaded = getattr(transformers, model_class).from_pretrained(out)  # plain transformers, no peft
    reloaded.eval()
    after = model_outputs(reloaded, check, task_type)
    differences, largest = compare_outputs(before, after)
    if differences:
        raise NlptasksError(
            f"--merge: the merged model in {out} does not predict like the adapter on {len(check)} stored inputs",
            [Problem("", d) for d in differences],
            hint="This is a bug worth reporting; the adapter run itself is unchanged and still usable.",
        )
    result = {k: v for k, v in chosen.items() if k != "peft"}
    result["merged_from"] = {
        "run": str(run_dir.resolve()),
        "adapter": name,
        "method": method,
        "base": info["base"],
        "check": {"inputs": len(check), "equal": True, "max_abs_diff": largest},
    }
    write_json(out / MANIFEST, result)
    mark_complete(out)
    return result
