"""The ONNX Runtime backend of step 10: a run folder exported by ``nlptasks export RUN --onnx OUT``
(manifest ``"backend": "onnx"``, weights in ``model.onnx``) loads as an :class:`OnnxModel`, which
a predictor calls exactly like the transformers model it replaces.

:func:`nlptasks.engine.load_trained_model` returns an :class:`OnnxModel` for such a folder, so every
task's predictor (windows, pairs, offsets, bi-encoder pooling) runs unchanged on it: it is called
with torch tensors (``input_ids``, ``attention_mask``, ``token_type_ids``) and returns an output
whose fields (``logits``, ``last_hidden_state`` ...) are torch tensors, reads ``.config`` (the
run's ``config.json``: ``id2label``, ``hidden_size``), and has the ``eval()``, ``to()``,
``parameters()`` and ``device`` a predictor may touch.

Which backend loads a folder: ``nlptasks infer --backend`` / ``nlptasks.load(backend=...)``
(:func:`set_inference_backend`, :func:`backend_for_loading`): ``auto`` (default) picks ONNX for an
exported folder and torch otherwise; ``onnx`` on a folder without ``model.onnx`` and ``torch`` on
an exported folder (it holds no torch weights) are errors that say what to use instead.

Threads: one inter-op thread, and intra-op threads from the environment (else
``torch.get_num_threads()``: what ``OMP_NUM_THREADS`` / ``torch.set_num_threads`` chose).
Sessions run on onnxruntime's CPU provider.  Environment variables:

``NLPTASKS_ONNX_THREADS``
    onnxruntime's intra-op threads for ONNX exports (default: torch's thread count).
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nlptasks.errors import NlptasksError

__all__ = [
    "BACKENDS",
    "ONNX_FILE",
    "OnnxModel",
    "OnnxOutput",
    "backend_for_loading",
    "chosen_backend",
    "load_onnx_model",
    "onnx_threads",
    "require_onnxruntime",
    "set_inference_backend",
]

BACKENDS = ("auto", "torch", "onnx")
ONNX_FILE = "model.onnx"
INSTALL_HINT = 'Install the extra: pip install "nlptasks[onnx]"   (onnx and onnxruntime)'
_backend = "auto"  # what `nlptasks infer --backend` / `nlptasks.load(backend=)` asked for


def set_inference_backend(backend: str) -> None:
    """Choose the backend of run folders loaded from now on: ``auto`` (ONNX for a folder made by
    ``nlptasks export --onnx``, torch otherwise), ``torch`` or ``onnx``."""
    global _backend
    if backend not in BACKENDS:
        raise NlptasksError(f"backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    _backend = backend


@contextlib.contextmanager
def backend_for_loading(backend: str) -> Iterator[None]:
    """``with backend_for_loading("onnx"): load_predictor(...)``: the backend for folders loaded
    inside the block, then back to what it was."""
    global _backend
    before = _backend
    set_inference_backend(backend)
    try:
        yield
    finally:
        _backend = before


def chosen_backend(run_dir: Path, manifest: dict[str, Any]) -> str:
    """``"torch"`` or ``"onnx"``: the backend that loads ``run_dir`` under the current setting; an
    impossible choice is an error naming what to do instead."""
    exported = manifest.get("backend") == "onnx"
    if _backend == "onnx" and not exported:
        raise NlptasksError(
            f"--backend onnx: {run_dir} has no {ONNX_FILE} (it is a torch run)",
            hint=f"Export it first: nlptasks export {run_dir} --onnx OUT   then: nlptasks infer --model OUT ...",
        )
    if _backend == "torch" and exported:
        source = (manifest.get("onnx") or {}).get("exported_from") or "the run it was exported from"
        raise NlptasksError(
            f"--backend torch: {run_dir} is an ONNX export ({ONNX_FILE}); it holds no torch weights",
            hint=f"Use the torch run it came from: nlptasks infer --model {source}   (or leave out --backend)",
        )
    return "onnx" if exported else "torch"


def require_onnxruntime() -> Any:
    """The ``onnxruntime`` module, or an error saying how to install it."""
    try:
        import onnxruntime
    except ImportError:
        raise NlptasksError("the ONNX backend needs onnxruntime, which is not installed", hint=INSTALL_HINT) from None
    return onnxruntime


def onnx_threads() -> int:
    """Intra-op threads for onnxruntime: ``NLPTASKS_ONNX_THREADS``, else ``torch.get_num_threads()``."""
    value = os.environ.get("NLPTASKS_ONNX_THREADS", "").strip()
    if value:
        try:
            threads = int(value)
        except ValueError:
            threads = 0
        if threads < 1:
            raise NlptasksError(f"NLPTASKS_ONNX_THREADS={value!r}: give a whole number of threads, 1 or more")
        return threads
    import torch

    return max(1, torch.get_num_threads())


class OnnxOutput(dict):
    """A model output read like transformers': ``out.logits`` and ``out["logits"]`` (torch tensors)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class OnnxModel:
    """An ONNX Runtime session that stands in for a transformers model at inference.

    :param path: the ``.onnx`` file.
    :param config: the run's transformers config (``id2label``, ``hidden_size`` ...).
    :param threads: intra-op threads (default :func:`onnx_threads`).
    """

    def __init__(self, path: Path, config: Any, threads: int | None = None) -> None:
        import torch

        ort = require_onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or onnx_threads()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.config = config
        self.path = Path(path)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._anchor = torch.zeros(0)  # what `parameters()` yields: inputs go to the CPU
        params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in self.input_names]

        def forward(**inputs: Any) -> OnnxOutput:
            return self(**inputs)

        forward.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        self.forward = forward  # `accepted_inputs(model)` reads the graph's inputs from it

    def __call__(self, **inputs: Any) -> OnnxOutput:
        import numpy as np
        import torch

        unknown = sorted(set(inputs) - set(self.input_names))
        if unknown:
            raise NlptasksError(f"the ONNX model takes {', '.join(self.input_names)}; not {', '.join(unknown)}")
        if "input_ids" not in inputs:
            raise NlptasksError("the ONNX model needs input_ids")
        ids = inputs["input_ids"]
        feed = {}
        for name in self.input_names:
            value = inputs.get(name)
            if value is None:  # transformers' defaults for the optional inputs
                if name == "attention_mask":
                    value = torch.ones_like(ids)
                elif name == "token_type_ids":
                    value = torch.zeros_like(ids)
                else:
                    raise NlptasksError(f"the ONNX model needs the input {name!r}")
            array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            feed[name] = array.astype(np.int64, copy=False)
        values = self.session.run(self.output_names, feed)
        return OnnxOutput({n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in zip(self.output_names, values, strict=True)})

    # -- what predictors touch on a torch model ------------------------------------------------

    @property
    def device(self) -> Any:
        """Always the CPU: inputs are handed to onnxruntime from there."""
        return self._anchor.device

    def parameters(self) -> Iterator[Any]:
        """One empty CPU tensor, so ``next(model.parameters()).device`` says where inputs go."""
        yield self._anchor

    def eval(self) -> OnnxModel:
        """No-op (an ONNX graph is exported in eval mode)."""
        return self

    def to(self, *args: Any, **kwargs: Any) -> OnnxModel:
        """No-op: the session runs where onnxruntime runs it."""
        return self

    def __repr__(self) -> str:
        return f"OnnxModel({self.path}, inputs={self.input_names}, outputs={self.output_names})"


def load_onnx_model(run_dir: Path, manifest: dict[str, Any], adapter: str | None = None, base_only: bool = False,
                    for_inference: bool = True) -> Any:
    """The :class:`OnnxModel` of an exported run folder (see :func:`chosen_backend`); without
    ``for_inference``, as the ``torch.nn.Module`` a Trainer evaluates (:func:`onnx_eval_module`)."""
    from transformers import AutoConfig

    from nlptasks.engine.inference import requested_precision

    if adapter is not None or base_only:
        raise NlptasksError(
            f"{run_dir}: an ONNX export holds one merged model; it has no adapters or base to choose",
            hint="Export another adapter on its own: nlptasks export RUN --adapter NAME --onnx OUT",
        )
    if requested_precision() == "bf16":
        raise NlptasksError(
            "--precision bf16 applies to the torch backend; an ONNX export runs the weights it was exported with "
            f"({(manifest.get('onnx') or {}).get('quantize', 'none')} quantization)",
            hint="Leave out --precision, or use the torch run with --backend torch.",
        )
    path = Path(run_dir) / ONNX_FILE
    if not path.exists():
        raise NlptasksError(f"{run_dir}: the manifest says backend onnx but there is no {ONNX_FILE}",
                            hint="Export the run again: nlptasks export RUN --onnx OUT")
    model = OnnxModel(path, AutoConfig.from_pretrained(run_dir))
    return model if for_inference else onnx_eval_module(model)


def onnx_eval_module(model: OnnxModel) -> Any:
    """``model`` as a ``torch.nn.Module`` for the Trainer's evaluation loop (``nlptasks eval`` on an
    export): its forward runs the session and, given ``labels``, adds the loss transformers' own
    head computes for the exported architecture (``*ForSequenceClassification``,
    ``*ForTokenClassification``); for other architectures the loss is NaN (reported as null)."""
    import torch
    from transformers.loss.loss_utils import ForSequenceClassificationLoss, ForTokenClassification

    architecture = next(iter(getattr(model.config, "architectures", None) or []), "")

    def loss_of(logits: Any, labels: Any) -> Any:
        labels = labels.to(logits.device)
        if architecture.endswith("ForSequenceClassification"):
            return ForSequenceClassificationLoss(labels, logits, model.config)
        if architecture.endswith("ForTokenClassification"):
            return ForTokenClassification(logits, labels, model.config)
        return torch.tensor(float("nan"))

    class OnnxEvalModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = model.config
            self.onnx = model
            self.anchor = torch.nn.Parameter(torch.zeros(0), requires_grad=False)  # where inputs go: the CPU

        def forward(self, **inputs: Any) -> OnnxOutput:
            labels = inputs.pop("labels", None)
            out = model(**{k: v for k, v in inputs.items() if k in model.input_names})
            if labels is not None and "logits" in out:
                out = OnnxOutput({"loss": loss_of(out["logits"], labels), **out})
            return out

        def __repr__(self) -> str:
            return f"OnnxEvalModule({model!r})"

    # The graph's inputs and ``labels``: what the Trainer reads to keep columns and find the labels.
    keyword = inspect.Parameter.KEYWORD_ONLY
    OnnxEvalModule.forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         *(inspect.Parameter(n, keyword, default=None) for n in [*model.input_names, "labels"])])
    return OnnxEvalModule()
