"""The torch backend of step 10: a run folder's transformers weights, a plain fine-tuned model or a
frozen base with one of its adapters, on the device and dtype of the load's options."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nlptasks.engine.model.classes import config_class
from nlptasks.engine.model.classes import resolve as resolve_class
from nlptasks.engine.model.examples import probe_batch, read_examples
from nlptasks.engine.model.peft import DEFAULT_ADAPTER, pass_every_input, quiet_peft
from nlptasks.errors import NlptasksError, did_you_mean, first_line
from nlptasks.inference.precision import inference_precision, prepare_for_inference
from nlptasks.types import Backend, LoadOptions

__all__ = ["TORCH", "adapter_path", "load_base", "load_torch_model", "torch_module"]


def load_torch_model(run_dir: Path, manifest: Mapping[str, Any], auto_class: str | type, options: LoadOptions) -> Any:
    """The run's model for inference: :func:`torch_module`, then on the device and dtype of ``options``
    (``auto`` precision: the run's own training precision where the device has it)."""
    return prepare_for_inference(torch_module(run_dir, manifest, auto_class), options, manifest.get("precision"))


def torch_module(run_dir: Path, manifest: Mapping[str, Any], auto_class: str | type, label_fields: Any = None) -> Any:
    """The run's model as saved (CPU, fp32, eval mode): ``auto_class.from_pretrained(run_dir)`` for a
    run without ``[peft]``; for an adapter run the base (from ``base/``, or ``model.name_or_path``
    with the head settings saved in ``base/``) with the adapter ``manifest["peft"]["active"]`` (else
    ``default``) as a ``peft.PeftModel``, or the base alone (``manifest["peft"]["base_only"]``).
    What ``nlptasks eval``, the merge and the ONNX export start from.  ``auto_class``: a
    transformers class name, or a class (a plugin's own head; the run's recorded class is found by
    :func:`nlptasks.engine.model.classes.resolve`)."""
    run_dir = Path(run_dir)
    cls = resolve_class(manifest, auto_class)
    info = manifest.get("peft")
    if not info:
        model = cls.from_pretrained(run_dir, use_safetensors=True)  # runs save safetensors; never unpickle
        model.eval()
        return model
    model = load_base(run_dir, info, cls)
    if info.get("base_only"):
        model.eval()
        return model
    name = info.get("active") or DEFAULT_ADAPTER
    path = adapter_path(run_dir, info, name)
    from peft import PeftConfig, PeftModel

    config = PeftConfig.from_pretrained(str(path))
    if getattr(config, "prompt_tuning_init", None) in ("TEXT", "SAMPLE_VOCAB"):
        # The trained embeddings are in the adapter; do not look for the tokenizer peft used to
        # initialise them (an absolute path that may not exist wherever the run is now).
        config.prompt_tuning_init = "RANDOM"
        config.tokenizer_name_or_path = None
    config.inference_mode = True
    with quiet_peft():
        model = PeftModel.from_pretrained(model, str(path), adapter_name=name, config=config)
    pass_every_input(
        model, probe_batch(read_examples(run_dir))
    )  # as in training: every input reaches the adapted model
    model.eval()
    return model


def _refuses(run_dir: Path, manifest: Mapping[str, Any], options: LoadOptions) -> str | None:
    inference_precision(options)  # an impossible device or precision is an error naming what to use
    return None


def load_base(run_dir: Path, info: dict[str, Any], cls: Any) -> Any:
    """The frozen base of an adapter run, as ``cls``."""
    base = info["base"]
    try:
        if "path" in base:
            return cls.from_pretrained(run_dir / base["path"], use_safetensors=True)
        config = config_class(cls).from_pretrained(run_dir / base["config"])
        return cls.from_pretrained(
            base["name_or_path"],
            config=config,
            revision=base.get("revision"),
            use_safetensors=None if base.get("allow_pickle") else True,  # as the recipe allowed at training
        )
    except OSError as exc:
        where = run_dir / base["path"] if "path" in base else base["name_or_path"]
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
    return Path(run_dir) / str(adapters[name]["path"])


TORCH = Backend(
    name="torch",
    description="the run's transformers weights with PyTorch (adapters included), on a CUDA GPU when there is one",
    load_model=load_torch_model,
    refuses=_refuses,
    eval_module=torch_module,
)
"""The built-in torch backend."""
