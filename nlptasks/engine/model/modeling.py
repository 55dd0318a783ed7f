"""Step 5, generic part: load a pretrained model or build one from a config ("from scratch").

With ``ctx.state[ON_META]`` set (``nlptasks plan`` does this), :func:`load_model` builds the same
model on PyTorch's ``meta`` device instead: every parameter has its exact shape and dtype but no
storage, and a pretrained model is built from its ``config.json`` alone (no weights are read).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.errors import NlptasksError, Problem, RecipeError, first_line

if TYPE_CHECKING:
    from nlptasks.context import RunContext

__all__ = [
    "ON_META",
    "PICKLE_SUFFIXES",
    "build_from_scratch",
    "check_weight_files",
    "label_config",
    "load_model",
    "warn_remote_code",
]

ON_META = "nlptasks.build_on_meta"
"""``ctx.state`` key: when true, step 5 builds the model on the meta device (shapes, no weights)."""


def label_config(labels: list[str]) -> dict[str, Any]:
    """``num_labels``, ``id2label`` and ``label2id`` for a model config, from the class names in
    class-id order: ``load_model(ctx, "AutoModelFor...", **label_config(ctx.labels))``.  The saved
    run then loads with plain transformers and gives the same label names."""
    return {
        "num_labels": len(labels),
        "id2label": dict(enumerate(labels)),
        "label2id": {name: i for i, name in enumerate(labels)},
    }


def load_model(ctx: RunContext, auto_class: str | type, **config: Any) -> Any:
    """Load ``model.name_or_path`` or build ``[model.scratch]`` with a task head (when
    ``ctx.trained_run`` is set, by ``nlptasks eval``: that run's trained model).

    :param auto_class: a transformers auto class name, e.g. ``"AutoModelForSequenceClassification"``,
        or a ``PreTrainedModel`` subclass (a plugin's own head: under ``nlptasks eval``,
        ``load_model(ctx, MyHead)`` gives the run's trained ``MyHead``).
    :param config: config entries for the head (``num_labels``, ``id2label``, ``label2id``...).
    """
    import transformers

    cls = auto_class if isinstance(auto_class, type) else getattr(transformers, auto_class, None)
    if cls is None:
        raise NlptasksError(f"internal error: transformers has no class {auto_class!r}")
    requested, auto_class = auto_class, auto_class if isinstance(auto_class, str) else auto_class.__name__
    from nlptasks.engine.system.machine import from_pretrained_kwargs

    model_cfg = ctx.recipe.model
    if ctx.trained_run is not None:  # nlptasks eval: the run's trained weights, its adapter included
        if ctx.trained_model is None:
            raise NlptasksError("internal error: ctx.trained_run is set without ctx.trained_model")
        return ctx.trained_model(requested)
    if ctx.state.get(ON_META):
        model = _build_on_meta(ctx, cls, auto_class, **config)
    elif model_cfg.name_or_path:
        try:
            with _quiet_load_report():
                model, info = cls.from_pretrained(
                    model_cfg.name_or_path,
                    revision=model_cfg.revision,
                    trust_remote_code=model_cfg.trust_remote_code,
                    # safetensors only, unless the recipe allows pickle files (which can run code on load)
                    use_safetensors=None if model_cfg.allow_pickle else True,
                    output_loading_info=True,
                    **from_pretrained_kwargs(ctx.recipe),
                    **config,
                )
        except Exception as exc:  # noqa: BLE001 - offline, typo, wrong architecture
            first = first_line(exc)
            raise NlptasksError(
                f"model.name_or_path: cannot load {model_cfg.name_or_path!r} as {auto_class}: {first}",
                hint="A hub id needs internet (or a filled cache). Offline, use [model.scratch] (see recipes/cls.toml).",
            ) from None
        ctx.log.info("%s", loading_summary(model_cfg.name_or_path, info))
    else:
        model = build_from_scratch(ctx, cls, **config)
        if model_cfg.dtype != "fp32":  # half precision (CUDA only: checked at run start)
            import torch

            model = model.to({"bf16": torch.bfloat16, "fp16": torch.float16}[model_cfg.dtype])
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    ctx.log.info("model: %s, %s parameters (%s trainable)", type(model).__name__, f"{total:,}", f"{trainable:,}")
    return model


def _quiet_load_report() -> Any:
    """transformers' load report (a table of every missing and unused key) held back while a
    model loads: :func:`loading_summary` says the same in one line.  A filter, not a higher level:
    transformers 5 checks a tensor-parallel plan and warns about it when its logger's level is
    WARNING or above."""
    import contextlib
    import logging

    def drop_report(record: logging.LogRecord) -> bool:
        return "LOAD REPORT" not in str(record.msg)

    @contextlib.contextmanager
    def quiet() -> Any:
        logger = logging.getLogger("transformers.modeling_utils")
        logger.addFilter(drop_report)
        try:
            yield
        finally:
            logger.removeFilter(drop_report)

    return quiet()


def loading_summary(name_or_path: str, info: dict[str, Any]) -> str:
    """One line on what loading ``name_or_path`` kept: the weights it had that the task's model
    does not use (a masked-LM head under a classifier) and the task's weights it did not have
    (the new head, randomly initialised), grouped by module.  A folder of an nlptasks run says
    which task trained it."""
    from nlptasks.engine.io.rundir import read_manifest

    def groups(keys: list[str]) -> str:
        heads: dict[str, int] = {}
        for key in keys:
            parts = key.split(".")
            head = ".".join(parts[:2] if len(parts) > 2 else parts[:1])
            heads[head] = heads.get(head, 0) + 1
        return ", ".join(f"{h}.* ({n})" if n > 1 else h for h, n in heads.items())

    source = repr(name_or_path)
    try:
        manifest = read_manifest(Path(name_or_path), check=False)
        source = f"the {manifest.get('task', '?')} run {name_or_path}"
    except Exception:  # noqa: BLE001, S110 - a hub id or a plain model folder
        pass
    parts = [f"loaded {source}"]
    new, unused = list(info.get("missing_keys") or []), list(info.get("unexpected_keys") or [])
    parts.append(f"new (randomly initialised): {groups(new)}" if new else "every weight found")
    if unused:
        parts.append(f"not used: {groups(unused)}")
    return "; ".join(parts)


def _build_on_meta(ctx: RunContext, cls: Any, auto_class: str, **config: Any) -> Any:
    """The model :func:`load_model` would give, on the meta device: a pretrained model from its
    config alone (a local folder's config.json, or the hub's when online), no weights loaded."""
    import torch

    model_cfg = ctx.recipe.model
    with torch.device("meta"):
        if model_cfg.scratch is not None:
            model = build_from_scratch(ctx, cls, **config)
        else:
            from transformers import AutoConfig

            try:
                cfg = AutoConfig.from_pretrained(
                    model_cfg.name_or_path,
                    revision=model_cfg.revision,
                    trust_remote_code=model_cfg.trust_remote_code,
                    **config,
                )
                model = cls.from_config(cfg, trust_remote_code=model_cfg.trust_remote_code)
            except Exception as exc:  # noqa: BLE001 - offline, typo, wrong architecture
                first = first_line(exc)
                raise NlptasksError(
                    f"model.name_or_path: cannot read the config of {model_cfg.name_or_path!r} for {auto_class}: {first}",
                    hint="A hub id needs internet (or a filled cache); a local folder needs its config.json.",
                ) from None
    if model_cfg.dtype != "fp32":
        model = model.to({"bf16": torch.bfloat16, "fp16": torch.float16}[model_cfg.dtype])
    return model


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def check_weight_files(name_or_path: str, allow_pickle: bool) -> None:
    """A local model folder whose weights are only pickle files needs ``model.allow_pickle``."""
    from pathlib import Path

    folder = Path(name_or_path)
    if allow_pickle or not folder.is_dir():
        return  # a hub id: from_pretrained(use_safetensors=True) refuses a repository without safetensors
    if any(folder.glob("*.safetensors")):
        return
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES and p.name != "training_args.bin")
    if pickled:
        raise RecipeError(
            "recipe",
            [
                Problem(
                    "model.allow_pickle",
                    f"{folder} holds weights only as pickle files ({', '.join(pickled)}), which can run code when "
                    "loaded; nlptasks loads safetensors only. Convert them to safetensors, or allow pickle files "
                    "for a source you trust: --set model.allow_pickle=true",
                )
            ],
        )


def warn_remote_code(log: Any, name_or_path: str, trust: bool) -> None:
    """With ``model.trust_remote_code`` on, say which code transformers will import and run."""
    if not trust:
        return
    from pathlib import Path

    folder = Path(name_or_path)
    files = sorted(p.name for p in folder.glob("*.py")) if folder.is_dir() else []
    if files:
        what = f"the Python files in {folder}: {', '.join(files)}"
    else:
        what = f"the Python code of {name_or_path!r} (from the hub, at model.revision)"
    log.warning(
        "model.trust_remote_code = true: transformers will import and run %s; "
        "only do this for a source you trust (pin model.revision for hub models)",
        what,
    )


def build_from_scratch(ctx: RunContext, cls: Any, **config: Any) -> Any:
    """``cls`` (a transformers auto class) from ``[model.scratch]``'s config: the architecture
    with every size field set from the recipe (:mod:`nlptasks.recipe.scratch`), sized to the
    run's tokenizer, ``model.scratch.extra`` and then the head's ``config`` applied."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    scratch = ctx.recipe.model.scratch
    assert scratch is not None
    if scratch.architecture not in CONFIG_MAPPING:
        from nlptasks.errors import did_you_mean

        raise RecipeError(
            "recipe",
            [
                Problem(
                    "model.scratch.architecture",
                    f"unknown model type {scratch.architecture!r}{did_you_mean(scratch.architecture, CONFIG_MAPPING.keys())}",
                )
            ],
        )
    tokenizer = ctx.tokenizer
    if tokenizer is None:
        raise NlptasksError("internal error: build the tokenizer (step 4) before a from-scratch model")
    from nlptasks.recipe.scratch import config_values

    # every size field of the architecture, its decoder's too (T5 num_decoder_layers, BART decoder_ffn_dim...)
    values = config_values(scratch, len(tokenizer), tokenizer.pad_token_id, ctx.recipe.model.max_length)
    values.update(config)
    try:
        cfg = AutoConfig.for_model(scratch.architecture, **values)
        return cls.from_config(cfg)
    except Exception as exc:  # noqa: BLE001 - e.g. a head this architecture does not have
        first = first_line(exc)
        raise RecipeError(
            "recipe", [Problem("model.scratch", f"cannot build {scratch.architecture!r} with this head: {first}")]
        ) from None
