"""Step 10's model loading: the model of a complete run, a plain fine-tuned model or a frozen
base with one of its adapters; choosing an adapter (``--adapter`` / ``--base-only``); adding
another run's adapter to a run with the same base (``nlptasks add-adapter``)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from nlptasks.engine.peft import ADAPTER_FILES, ADAPTERS_DIR, DEFAULT_ADAPTER, file_sha256, pass_every_input, quiet_peft
from nlptasks.engine.rundir import MANIFEST, read_manifest, write_json
from nlptasks.errors import NlptasksError, Problem, did_you_mean, first_line

__all__ = ["adapter_path", "add_adapter", "choose", "load_base", "load_run", "load_trained_model"]


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

    A folder exported by ``nlptasks export --onnx`` (manifest ``"backend": "onnx"``) loads as an
    :class:`nlptasks.engine.onnx_runtime.OnnxModel` that predictors call like the transformers
    model (``auto_class`` is then not needed: the export recorded the model's outputs); the
    backend setting (``infer --backend``) is checked by
    :func:`nlptasks.engine.onnx_runtime.chosen_backend`; without ``for_inference`` it is a
    ``torch.nn.Module`` a Trainer evaluates (``nlptasks eval`` on an export).

    :returns: a run without ``[peft]``: ``auto_class.from_pretrained(run_dir)``.  An adapter run:
        the base (from ``base/``, or ``model.name_or_path`` with the head settings saved in
        ``base/``) with the adapter loaded as a ``peft.PeftModel``, or the base alone.
    """
    from nlptasks.engine.onnx_runtime import chosen_backend, load_onnx_model

    run_dir = Path(run_dir)
    if chosen_backend(run_dir, manifest) == "onnx":
        return load_onnx_model(run_dir, manifest, adapter, base_only, for_inference)
    import transformers

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
    with quiet_peft():
        model = PeftModel.from_pretrained(model, str(path), adapter_name=name, config=config)
    pass_every_input(model)  # as in training: every input reaches the adapted model
    return _ready(model, for_inference)


def load_run(run_dir: str | Path, manifest: dict[str, Any], auto_class: str) -> tuple[Any, Any]:
    """``(tokenizer, model)`` of a complete run, ready for inference: the run's tokenizer and
    :func:`load_trained_model` (a plain fine-tuned model, or the base with the adapter chosen by
    ``--adapter`` / ``--base-only``).  What a step-10 predictor needs, for full and PEFT runs alike."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(run_dir), load_trained_model(run_dir, manifest, auto_class)


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

