"""Step 10's loading, whatever the backend: the manifest a predictor sees for the chosen adapter
(:func:`choose`), the model of a run through the backend the load's options choose
(:func:`load_trained_model`), and ``(tokenizer, model)`` for a predictor (:func:`load_run`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nlptasks.engine.io.rundir import remake_command
from nlptasks.engine.model.introspect import position_limit
from nlptasks.errors import NlptasksError, first_line
from nlptasks.inference.backends import backend_for
from nlptasks.inference.onnx_backend import ONNX_FILE
from nlptasks.inference.torch_backend import adapter_path
from nlptasks.types import LoadOptions

__all__ = ["LEGACY_OPTIONS", "choose", "damaged_files", "load_run", "load_trained_model", "options_of"]

LEGACY_OPTIONS = "__load_options__"
"""Where the manifest handed to a two-argument ``nlptasks_load_predictor`` carries the options
(deprecated form: its ``load_run`` call has none to pass)."""


def options_of(manifest: Mapping[str, Any], options: LoadOptions | None) -> LoadOptions:
    """``options``, else those the manifest carries for an implementation of the old hook form,
    else the defaults."""
    if options is not None:
        return options
    carried = manifest.get(LEGACY_OPTIONS)
    return carried if isinstance(carried, LoadOptions) else LoadOptions()


def load_trained_model(
    run_dir: str | Path, manifest: Mapping[str, Any], auto_class: str | type, options: LoadOptions | None = None
) -> Any:
    """The model of a complete run, ready for inference, loaded by the backend ``options.backend``
    names (``auto``: the backend whose export the folder is, else ``torch``).

    :param run_dir: the run folder.
    :param manifest: its parsed ``nlptasks.json`` as step 10 received it (the adapter chosen by
        ``options.adapter`` / ``options.base_only`` is recorded in ``manifest["peft"]``).
    :param auto_class: a transformers class name, e.g. ``"AutoModelForSequenceClassification"``
        (or a concrete class such as ``"BertForTokenClassification"``), or the plugin's own
        ``PreTrainedModel`` subclass that step 5 returned.
    :param options: the load's :class:`~nlptasks.types.LoadOptions` (precision, backend, device).
    :returns: the torch backend: the plain fine-tuned model, or the base with the adapter as a
        ``peft.PeftModel``, on the options' device and dtype.  The ONNX backend: an
        ``OnnxModel`` that predictors call like the transformers model.  A plugin's backend: what its
        ``load_model`` returns.
    """
    run_dir = Path(run_dir)
    options = options_of(manifest, options)
    backend = backend_for(run_dir, manifest, options)
    with damaged_files(run_dir, manifest):
        return backend.load_model(run_dir, manifest, auto_class, options.but(backend=backend.name))


_LOADERS = ("safetensors", "onnxruntime", "google.protobuf", "onnx")
"""Modules whose exceptions, raised while a model loads, mean its files cannot be read."""


@contextlib.contextmanager
def damaged_files(run_dir: Path, manifest: Mapping[str, Any]) -> Iterator[None]:
    """A model file that cannot be read (missing, empty, truncated, not a model) while the block loads
    the model of ``run_dir``: an error naming the folder's model file and the library's reason, with
    the command that makes the folder again, instead of the library's traceback.  (A folder with
    ``SHA256SUMS`` is checked before it loads; this covers older folders and damage the checksums
    cannot see, such as a file changed while it loads.)"""
    try:
        yield
    except NlptasksError:
        raise
    except Exception as exc:
        module = type(exc).__module__ or ""
        if not isinstance(exc, OSError) and not module.startswith(_LOADERS):
            raise
        weights = ONNX_FILE if manifest.get("backend") == "onnx" else "model.safetensors"
        raise NlptasksError(
            f"{run_dir}: cannot load the model ({weights} and the files beside it): {first_line(exc)}",
            hint=f"A file of the folder is missing or damaged: make it again: {remake_command(run_dir, dict(manifest))}"
            "   (or restore the folder from a copy)",
        ) from None


def load_run(
    run_dir: str | Path, manifest: Mapping[str, Any], auto_class: str | type, options: LoadOptions | None = None
) -> tuple[Any, Any]:
    """``(tokenizer, model)`` of a complete run, ready for inference: the run's tokenizer and
    :func:`load_trained_model`.  What a step-10 predictor needs, for full and adapter runs and every
    backend alike.  ``options.max_length`` beyond the positions the model has is an error."""
    from transformers import AutoTokenizer

    options = options_of(manifest, options)
    model = load_trained_model(run_dir, manifest, auto_class, options)
    if options.max_length is not None:
        limit = position_limit(model)
        if limit is not None and options.max_length > limit:
            raise NlptasksError(
                f"--max-length {options.max_length}: the run's model has positions for {limit} tokens",
                hint=f"Use --max-length {limit} or less (or leave it out: the run's own).",
            )
    with damaged_files(Path(run_dir), manifest):
        return AutoTokenizer.from_pretrained(run_dir), model


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
