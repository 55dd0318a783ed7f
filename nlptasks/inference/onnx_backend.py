"""The ONNX Runtime backend of step 10: a run folder exported by ``nlptasks export RUN --onnx OUT``
(manifest ``"backend": "onnx"``, weights in ``model.onnx``) loads as an :class:`OnnxModel`, which
a predictor calls exactly like the transformers model it replaces.

Loading such a folder through :func:`nlptasks.plugin.load_run` gives an :class:`OnnxModel`, so every
task's predictor (windows, pairs, offsets, bi-encoder pooling) runs unchanged on it: it is called
with torch tensors (``input_ids``, ``attention_mask``, ``token_type_ids``, of any rank the export
took) and returns an output whose fields (``logits``, ``last_hidden_state`` ...) are torch tensors,
reads ``.config`` (the run's ``config.json``: ``id2label``, ``hidden_size``), and has the
``eval()``, ``to()``, ``parameters()`` and ``device`` a predictor may touch.

The backend owns exported folders: ``LoadOptions(backend="auto")`` picks it for them, ``torch``
refuses them (they hold no torch weights), and it refuses a folder without ``model.onnx``, bf16,
a GPU device and adapters, each with what to do instead.

Threads: one inter-op thread, and intra-op threads from ``LoadOptions.threads``, else the
environment, else ``torch.get_num_threads()`` (what ``OMP_NUM_THREADS`` / ``torch.set_num_threads``
chose); idle intra-op threads sleep rather than spin (a server's HTTP work needs the CPU between
batches).  Sessions run on onnxruntime's CPU provider.  Environment variables:

``NLPTASKS_ONNX_THREADS``
    onnxruntime's intra-op threads for ONNX exports (default: torch's thread count).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from nlptasks.errors import NlptasksError
from nlptasks.types import Backend, LoadOptions

__all__ = [
    "INSTALL_HINT",
    "ONNX",
    "ONNX_FILE",
    "OnnxModel",
    "OnnxOutput",
    "load_onnx_model",
    "onnx_eval_module",
    "onnx_threads",
    "require_onnxruntime",
]

ONNX_FILE = "model.onnx"
INSTALL_HINT = 'Install the extra: pip install "nlptasks[onnx]"   (onnx and onnxruntime)'


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


class OnnxOutput(dict[str, Any]):
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
        # Idle intra-op threads sleep instead of spinning: spinning kept both cores busy between a
        # server's batches, taking the CPU its HTTP work needed (serve at 32 clients: 16-17 ms of
        # CPU per request spinning, 9-13 ms without, 87-93 -> 109-139 requests/s), and gained
        # nothing in `infer` (SST-2 MiniLM int8, 2 threads: 218-240 texts/s either way).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.config = config
        self.path = Path(path)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.own_loss: Any = None  # a plugin class's loss_from_outputs(outputs, labels), for nlptasks eval
        self._anchor = torch.zeros(0)  # what `parameters()` yields: inputs go to the CPU
        params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in self.input_names]

        def forward(**inputs: Any) -> OnnxOutput:
            return self(**inputs)

        forward.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        self.forward = forward  # `accepted_inputs(model)` reads the graph's inputs from it

    def __call__(self, **inputs: Any) -> OnnxOutput:
        import numpy as np
        import torch

        values = self.session.run(self.output_names, self.feed(**inputs))
        # outputs on the inputs' device: a Trainer on a GPU (export's and eval's own measurement) moves the
        # batch there, and a task's pooling or loss then meets the session's CPU outputs (docs/gpu.md, H200)
        device = next((v.device for v in inputs.values() if isinstance(v, torch.Tensor)), None)
        outputs = {n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in zip(self.output_names, values, strict=True)}
        if device is not None and device.type != "cpu":
            outputs = {n: t.to(device) for n, t in outputs.items()}
        return OnnxOutput(outputs)

    def feed(self, **inputs: Any) -> dict[str, Any]:
        """What the session is given for ``inputs`` (torch tensors, arrays or lists): each graph
        input as an int64 NumPy array, the optional ones filled as transformers fills them."""
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
        return feed

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


def _owns(run_dir: Path, manifest: Mapping[str, Any]) -> bool:
    return manifest.get("backend") == "onnx"


def _refuses(run_dir: Path, manifest: Mapping[str, Any], options: LoadOptions) -> str | None:
    if not _owns(run_dir, manifest):
        raise NlptasksError(
            f"--backend onnx: {run_dir} has no {ONNX_FILE} (it is a torch run)",
            hint=f"Export it first: nlptasks export {run_dir} --onnx OUT   then: nlptasks infer --model OUT ...",
        )
    if options.adapter is not None or options.base_only:
        raise NlptasksError(
            f"{run_dir}: an ONNX export holds one merged model; it has no adapters or base to choose",
            hint="Export another adapter on its own: nlptasks export RUN --adapter NAME --onnx OUT",
        )
    if options.precision == "bf16":
        raise NlptasksError(
            "--precision bf16 applies to the torch backend; an ONNX export runs the weights it was exported with "
            f"({(manifest.get('onnx') or {}).get('quantize', 'none')} quantization)",
            hint="Leave out --precision, or use the torch run with --backend torch.",
        )
    if options.device.startswith("cuda"):
        raise NlptasksError(
            f"--device {options.device}: ONNX exports run on onnxruntime's CPU provider here",
            hint="Use --device cpu (or auto), or the torch run on the GPU.",
        )
    if not (Path(run_dir) / ONNX_FILE).exists():
        raise NlptasksError(
            f"{run_dir}: the manifest says backend onnx but there is no {ONNX_FILE}",
            hint="Export the run again: nlptasks export RUN --onnx OUT",
        )
    return None


def load_onnx_model(
    run_dir: Path, manifest: Mapping[str, Any], auto_class: str | type, options: LoadOptions
) -> OnnxModel:
    """The :class:`OnnxModel` of an exported run folder (``auto_class`` is not needed: the export
    recorded the model's outputs; a plugin's own class gives the config class of its model type)."""
    from transformers import AutoConfig

    from nlptasks.engine.model.classes import config_class, resolve

    _refuses(run_dir, manifest, options)
    loader = config_class(resolve(manifest)) if manifest.get("model_module") else AutoConfig
    model = OnnxModel(Path(run_dir) / ONNX_FILE, loader.from_pretrained(run_dir), threads=options.threads)
    if manifest.get("model_module"):
        model.own_loss = getattr(resolve(manifest), "loss_from_outputs", None)
    return model


def _eval_module(
    run_dir: Path, manifest: Mapping[str, Any], auto_class: str | type, label_fields: Sequence[str]
) -> Any:
    return onnx_eval_module(load_onnx_model(run_dir, manifest, auto_class, LoadOptions(backend="onnx")), label_fields)


NO_LOSS = (
    "the exported graph has no loss, and nlptasks knows the loss of transformers' own heads only: a "
    "plugin's model class gives it with a static method loss_from_outputs(outputs, labels) "
    "(docs/plugin-guide.md#custom-heads)"
)
"""Why ``nlptasks eval`` of an export reports no loss for a head it does not know."""


def _loss(architecture: str, out: Mapping[str, Any], labels: Mapping[str, Any], config: Any, own: Any = None) -> Any:
    """The loss transformers' own head computes for ``architecture`` from the graph's outputs and the
    batch's label fields, or the plugin class's ``loss_from_outputs(outputs, labels)`` (``own``);
    NaN (reported as null, with :data:`NO_LOSS`) for a head neither covers."""
    import torch
    from transformers.loss import loss_utils as losses

    def get(name: str) -> Any:
        return out.get(name) if name in out else labels.get(name)

    if own is not None:
        return own(dict(out), dict(labels))
    try:
        if architecture.endswith("ForSequenceClassification") and "labels" in labels:
            return losses.ForSequenceClassificationLoss(labels["labels"], out["logits"], config)
        if architecture.endswith("ForTokenClassification") and "labels" in labels:
            return losses.ForTokenClassification(out["logits"], labels["labels"], config)
        if architecture.endswith("ForMultipleChoice") and "labels" in labels:
            return torch.nn.functional.cross_entropy(out["logits"].float(), labels["labels"].long())
        if architecture.endswith("ForQuestionAnswering") and {"start_positions", "end_positions"} <= set(labels):
            return losses.ForQuestionAnsweringLoss(  # type: ignore[no-untyped-call]
                get("start_logits"), get("end_logits"), labels["start_positions"], labels["end_positions"]
            )
        if architecture.endswith(("ForCausalLM", "ForMaskedLM")) and "labels" in labels:
            loss = losses.ForCausalLMLoss if architecture.endswith("ForCausalLM") else losses.ForMaskedLMLoss
            return loss(out["logits"], labels["labels"], vocab_size=config.vocab_size)
    except (KeyError, RuntimeError, ValueError):
        pass
    return torch.tensor(float("nan"))


def onnx_eval_module(model: OnnxModel, label_fields: Sequence[str] = ("labels",)) -> Any:
    """``model`` as a ``torch.nn.Module`` for the Trainer's evaluation loop (``nlptasks eval`` on an
    export).  Its forward takes the graph's inputs and every label field the task declares
    (``labels``; ``start_positions`` and ``end_positions`` for answer spans ...), runs the session,
    and adds the loss transformers' head computes for the exported architecture (:func:`_loss`)."""
    import torch

    architecture = next(iter(getattr(model.config, "architectures", None) or []), "")
    fields = list(dict.fromkeys(label_fields))
    own = getattr(model, "own_loss", None)

    class OnnxEvalModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = model.config
            self.onnx = model
            self.anchor = torch.nn.Parameter(torch.zeros(0), requires_grad=False)  # where inputs go: the CPU
            self.loss_reason: str | None = None  # why the loss is NaN, once a batch had no loss

        def forward(self, **inputs: Any) -> OnnxOutput:
            labels = {k: inputs.pop(k) for k in fields if inputs.get(k) is not None}
            out = model(**{k: v for k, v in inputs.items() if k in model.input_names})
            if labels:
                loss = _loss(architecture, out, labels, model.config, own)
                if bool(torch.isnan(loss).all()):
                    self.loss_reason = NO_LOSS
                out = OnnxOutput({"loss": loss, **out})
            return out

        def __repr__(self) -> str:
            return f"OnnxEvalModule({model!r})"

    # The graph's inputs and the label fields: what the Trainer reads to keep columns and find the labels.
    keyword = inspect.Parameter.KEYWORD_ONLY
    OnnxEvalModule.forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            *(inspect.Parameter(n, keyword, default=None) for n in [*model.input_names, *fields]),
        ]
    )
    return OnnxEvalModule()


ONNX = Backend(
    name="onnx",
    description="a folder made by `nlptasks export --onnx`, run by ONNX Runtime on the CPU (fp32 or int8)",
    load_model=load_onnx_model,
    owns=_owns,
    refuses=_refuses,
    eval_module=_eval_module,
)
"""The built-in ONNX Runtime backend."""
