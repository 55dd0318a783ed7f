"""PEFT at training time: wrap step 5's model in the recipe's adapter, and save what loading and
``nlptasks export --merge`` need.

A recipe with a ``[peft]`` table trains an adapter on a frozen base.  The engine applies it right
after step 5 (:func:`apply_peft`), so task plugins build their model exactly as without PEFT and
declare only their peft task type (``TaskSpec.peft_task_type``).  An adapter run folder holds::

    adapter_config.json, adapter_model.safetensors   the adapter "default" (and the trained head)
    base/                                             the frozen base: config.json (head settings),
                                                      plus model.safetensors when it was built from
                                                      scratch (random weights nobody could rebuild)
                                                      or from a run that holds an adapter (kind
                                                      "saved": its base and adapter, merged)
    adapters/NAME/                                    further adapters on the same base (add-adapter)
    examples.json                                     a few tokenized examples (every run), to verify
                                                      `nlptasks export --merge`

and its manifest (``nlptasks.json``) a ``peft`` entry: method, task type, base, adapters,
parameter counts.  Paths in it are relative to the run folder, so the folder can be moved.
Loading such runs: :mod:`nlptasks.inference.runs`; merging: :mod:`nlptasks.inference.merge`.
"""

from __future__ import annotations

import contextlib
import hashlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.engine.model.examples import EXAMPLES_FILE, LEGACY_FILE
from nlptasks.engine.model.peft_targets import backbone_targets, ia3_modules, own_head
from nlptasks.errors import Problem, RecipeError, did_you_mean, first_line

if TYPE_CHECKING:
    from nlptasks.context import RunContext

__all__ = [
    "ADAPTERS_DIR",
    "ADAPTER_FILES",
    "BASE_DIR",
    "CHECK_FILE",
    "DEFAULT_ADAPTER",
    "apply_peft",
    "file_sha256",
    "holds_adapter",
    "parameter_line",
    "pass_every_input",
    "peft_config",
    "prefix_problem",
    "quiet_peft",
]

BASE_DIR = "base"
ADAPTERS_DIR = "adapters"
CHECK_FILE = LEGACY_FILE  # older adapter runs: their few tokenized inputs (now examples.json, every run)
DEFAULT_ADAPTER = "default"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
CHECK_ROWS = 4


def peft_config(ctx: RunContext, model: Any, task_type: str) -> Any:
    """The peft config object for the recipe's ``[peft]`` table."""
    import peft as p

    cfg = ctx.recipe.peft
    assert cfg is not None
    common: dict[str, Any] = {"task_type": task_type}
    head = list(cfg.modules_to_save or []) or own_head(model)
    if head:
        common["modules_to_save"] = head
        if not cfg.modules_to_save:
            ctx.log.info(
                "peft: %s is the plugin's own model class: its head (%s) trains in full and is saved with "
                "the adapter (peft.modules_to_save chooses otherwise)",
                type(model).__name__,
                ", ".join(head),
            )
    hidden = getattr(model.config, "hidden_size", None)
    if cfg.method == "lora":
        return p.LoraConfig(
            r=cfg.r,
            lora_alpha=cfg.alpha,
            lora_dropout=cfg.dropout,
            bias=cfg.bias,
            target_modules=cfg.target_modules or backbone_targets(model, "lora"),
            **common,
        )
    if cfg.method == "ia3":
        target, feedforward = ia3_modules(
            model, cfg.target_modules or backbone_targets(model, "ia3"), cfg.feedforward_modules
        )
        return p.IA3Config(target_modules=target, feedforward_modules=feedforward, **common)
    common["num_virtual_tokens"] = cfg.num_virtual_tokens
    if cfg.method == "prefix":
        return p.PrefixTuningConfig(
            prefix_projection=cfg.prefix_projection, encoder_hidden_size=cfg.encoder_hidden_size or hidden, **common
        )
    if cfg.method == "p_tuning":
        return p.PromptEncoderConfig(
            encoder_reparameterization_type=cfg.encoder_type,
            encoder_hidden_size=cfg.encoder_hidden_size or hidden,
            encoder_num_layers=cfg.encoder_layers,
            encoder_dropout=cfg.encoder_dropout,
            **common,
        )
    if cfg.prompt_init_text:
        # peft reads the init text's token ids with AutoTokenizer from a folder: the run folder,
        # where the run's tokenizer is written now (and again at the end of the run).
        ctx.tokenizer.save_pretrained(str(ctx.output_dir))
        return p.PromptTuningConfig(
            prompt_tuning_init=p.PromptTuningInit.TEXT,
            prompt_tuning_init_text=cfg.prompt_init_text,
            tokenizer_name_or_path=str(ctx.output_dir),
            **common,
        )
    return p.PromptTuningConfig(prompt_tuning_init=p.PromptTuningInit.RANDOM, **common)


def prefix_problem(model: Any, task_type: str) -> str | None:
    """Why peft's prefix tuning cannot run on ``model``, or ``None`` when it can.

    Prefix tuning hands its trained keys and values to the model as ``past_key_values``.  For
    sequence and token classification peft looks for that argument in the forward of the model or
    of its backbone and refuses the model without it; transformers 5.24 renamed the argument to
    ``cache`` in its encoders (BERT and others), so peft 0.21 refuses them there.  Causal LMs and
    plain encoders (feature extraction) go through other peft paths and are not affected.  A
    plugin's own model class must take ``past_key_values`` itself, whatever its task type (its
    ``**kwargs`` would swallow the prefix).
    """
    import inspect

    from nlptasks.engine.model.classes import is_transformers_class

    if not is_transformers_class(type(model)) and "past_key_values" not in inspect.signature(model.forward).parameters:
        return (
            f"peft hands the prefix to the model as past_key_values, which {type(model).__name__}.forward (the "
            "plugin's own class) does not take: it would be dropped and nothing would train"
        )
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


def holds_adapter(name_or_path: str) -> bool:
    """Whether ``name_or_path`` is a run folder of ours that holds an adapter (``nlptasks.json``
    with a ``peft`` entry): a step 5 that starts from such a run builds its model from the base and
    the adapter (merged), which ``from_pretrained(name_or_path)`` alone would not give back, so an
    adapter trained on it saves that base in its own run (``base/``, kind ``saved``)."""
    import json

    manifest = Path(name_or_path) / "nlptasks.json"
    try:
        return manifest.is_file() and bool(json.loads(manifest.read_text(encoding="utf-8")).get("peft"))
    except (OSError, ValueError, AttributeError):
        return False


def apply_peft(ctx: RunContext, model: Any, data: Any) -> Any:
    """Wrap step 5's ``model`` with the recipe's ``[peft]`` method; save what loading needs.

    Saves the frozen base (``base/``: its config, and its weights when built from scratch), logs
    and records the trainable and total parameter counts, and returns the ``PeftModel`` that steps
    6 to 9 train (the merge check reads the run's ``examples.json``).
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
            [
                Problem(
                    "peft.method",
                    f"'prefix' cannot train {type(model).__name__}: {reason}; "
                    "use 'lora', 'ia3', 'p_tuning' or 'prompt' (--set peft.method=lora)",
                )
            ],
        )
    out = ctx.output_dir
    base_dir = out / BASE_DIR
    model_cfg = ctx.recipe.model
    from nlptasks.engine.system.distributed import is_main

    main = is_main()  # in a distributed run only rank 0 writes the run folder
    rebuilt = model_cfg.name_or_path is not None and holds_adapter(model_cfg.name_or_path)
    if model_cfg.name_or_path is None or rebuilt:
        if main:
            model.save_pretrained(str(base_dir))
        base: dict[str, Any] = {
            "kind": "saved" if rebuilt else "scratch",
            "path": BASE_DIR,
            "sha256": file_sha256(base_dir / "model.safetensors") if main else None,
        }
        if rebuilt:  # from_pretrained(name_or_path) would not give the base these weights were built on
            base["from"] = model_cfg.name_or_path
    else:
        if main:
            model.config.save_pretrained(str(base_dir))
        base = {
            "kind": "pretrained",
            "name_or_path": model_cfg.name_or_path,
            "revision": model_cfg.revision,
            "config": BASE_DIR,
        }
        if model_cfg.allow_pickle:
            base["allow_pickle"] = True  # inference may load the base's pickle weights too
    base["dtype"] = model_cfg.dtype
    if cfg.quantization != "none":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model)
    names = [n for n, _ in model.named_modules()]
    missing = [m for m in cfg.modules_to_save or [] if not any(n == m or n.endswith("." + m) for n in names)]
    if missing:
        sample = ", ".join(n for n in names if n.count(".") <= 1 and n)[:200]
        short = {n.rsplit(".", 1)[-1] for n in names if n}
        raise RecipeError(
            "recipe",
            [
                Problem(
                    "peft.modules_to_save",
                    f"{m!r} names no module of {type(model).__name__}"
                    f"{did_you_mean(m, short)} (its modules: {sample}, ...)",
                )
                for m in missing
            ],
        )
    config = peft_config(ctx, model, task_type)
    try:
        with quiet_peft():
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
    from nlptasks.engine.model.examples import example_rows, probe_batch

    restored = pass_every_input(
        model, probe_batch(example_rows(data, model, ctx.task.label_fields_for(ctx.options), rows=1)["inputs"])
    )
    if restored:
        ctx.log.info(
            "peft's %s drops the model's %s: every input goes to the adapted model instead",
            type(model).__name__,
            ", ".join(restored),
        )
    trainable, total = model.get_nb_trainable_parameters()
    ctx.log.info("peft %s (%s): %s", cfg.method, task_type, parameter_line(trainable, total))
    ctx.manifest["peft"] = {
        "method": cfg.method,
        "task_type": task_type,
        "base": base,
        "quantization": cfg.quantization,
        "trainable_parameters": trainable,
        "total_parameters": total,
        "adapters": {DEFAULT_ADAPTER: {"path": ".", "method": cfg.method}},
        "check": EXAMPLES_FILE,
    }
    return model


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """peft 0.21 calls a transformers 5 method that warns it is deprecated on every wrap: hide that."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def _probe_inputs(model: Any, probe: dict[str, Any] | None) -> dict[str, Any]:
    """``probe`` (one of the task's own examples, as a batch of one) on the model's device; without
    one (a run older than ``examples.json``), a two-segment input of ids, mask and segment ids."""
    import torch

    from nlptasks.engine.model.introspect import accepted_inputs

    device = next(model.parameters()).device
    if probe:
        return {k: v.to(device) for k, v in probe.items()}
    accepted = accepted_inputs(model)
    ids = torch.tensor([[1, 2, 3, 4, 2, 3]], device=device)
    made = {"input_ids": ids}
    if "attention_mask" in accepted:
        made["attention_mask"] = torch.ones_like(ids)
    if "token_type_ids" in accepted:
        made["token_type_ids"] = torch.tensor([[0, 0, 0, 1, 1, 1]], device=ids.device)
    return made


def _same_outputs(a: Any, b: Any) -> bool:
    import torch

    def parts(out: Any) -> tuple[Any, ...]:
        return out.to_tuple() if hasattr(out, "to_tuple") else tuple(out) if isinstance(out, tuple) else (out,)

    tensors = [(x, y) for x, y in zip(parts(a), parts(b), strict=False) if isinstance(x, torch.Tensor)]
    return bool(tensors) and all(x.shape == y.shape and torch.allclose(x, y, atol=1e-6) for x, y in tensors)


def pass_every_input(model: Any, probe: dict[str, Any] | None = None) -> list[str]:
    """Make a ``PeftModel`` of a weight-changing method (lora, ia3) hand every input to the adapted
    model; returns the inputs its own forward dropped (``[]``: nothing to do).

    peft's task wrappers call the model with the inputs they name, and some name fewer than the
    model takes: peft 0.21's question-answering wrapper drops ``token_type_ids``, so the adapter
    would train and predict without segment ids while the merged model (``nlptasks export
    --merge``) uses them.  Found by a probe: with the adapter disabled the wrapper must give the
    base model's outputs; where it does not, its forward becomes the adapted model's own.  The
    probe is one of the task's own examples (``probe``: a batch of one, any rank), so a task whose
    inputs have more axes than (batch, sequence) is probed with what it really feeds the model.
    """
    import torch

    if getattr(model, "active_peft_config", None) is None or model.active_peft_config.is_prompt_learning:
        return []
    probe = _probe_inputs(model, probe)
    base = model.get_base_model()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), model.disable_adapter():
            wrapped, plain = model(**probe), base(**probe)
            if _same_outputs(wrapped, plain):
                return []
            dropped = [
                k
                for k in probe
                if k != "input_ids" and _same_outputs(wrapped, base(**{n: v for n, v in probe.items() if n != k}))
            ]
            special = set(getattr(model, "special_peft_forward_args", ()))

            def forward(*args: Any, **kwargs: Any) -> Any:
                return model.base_model(*args, **{k: v for k, v in kwargs.items() if k not in special})

            model.forward = forward
            if not _same_outputs(model(**probe), plain):
                raise RecipeError(
                    "recipe",
                    [
                        Problem(
                            "peft.method",
                            f"peft's {type(model).__name__} does not pass "
                            "the model its inputs, and nlptasks could not route them",
                        )
                    ],
                )
    finally:
        model.train(was_training)
    return dropped or ["inputs"]


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
