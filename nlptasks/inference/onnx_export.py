"""``nlptasks export RUN --onnx OUT``, the engine's part: the run's model (an adapter run merged
first) to ``OUT/model.onnx`` with dynamic batch and sequence axes, optionally int8-quantized, and
``OUT`` made a complete run folder (tokenizer, ``config.json``, labels, recipe, the manifest with
``"backend": "onnx"``) that ``nlptasks infer`` loads through onnxruntime
(:mod:`nlptasks.inference.onnx_backend`).

Which model is exported needs no task knowledge: the manifest's ``model_class`` (recorded by step
5 for every run, e.g. ``BertForSequenceClassification`` or ``BertModel`` for a bi-encoder), and
every floating-point output it returns (``logits``; ``last_hidden_state`` and ``pooler_output``;
``start_logits`` and ``end_logits`` ...) becomes an output of the graph under the same name.
Models that generate (``model.can_generate()``, e.g. sft's causal LMs) are refused: generation
with a KV cache is a loop around the graph that this exporter path does not produce.

The exporter is PyTorch's TorchScript-based ``torch.onnx.export(..., dynamo=False)``: it needs no
extra package, and on BERT-style encoders its graph equals the torch model to about 1e-7 at every
batch size and length.  The newer ``dynamo=True`` exporter needs ``onnxscript`` besides.

``int8`` quantizes the linear layers' inputs one token at a time (scale and zero point from the
token alone) with SmoothQuant divisors calibrated on 128 training rows fed through the task's
predictor (:mod:`nlptasks.inference.onnx_rowwise`), so a row's answer does not depend on its batch.
``int8-static`` is onnxruntime's static quantization (QDQ, one calibrated scale per tensor;
:mod:`nlptasks.inference.onnx_quantize`), also batch-independent; ``int8-dynamic`` is onnxruntime's
dynamic quantization (activation scales computed per batch), opt-in.  The weight type is
:data:`INT8_WEIGHTS`.  Measured 2026-11-27 (docs/onnx.md, ``benchmarks/onnx_int8.py``): MiniLM-L6
fine-tuned on 4,000 SST-2 rows against its fp32 graph (test accuracy 0.8248): ``int8`` changed 11 of
1,821 test labels (0.8276), ``int8-static`` 100 (0.8127).
"""

from __future__ import annotations

import shutil
import time
import warnings
from pathlib import Path
from typing import Any

from nlptasks.engine.io.rundir import MANIFEST, mark_complete, read_manifest, write_json
from nlptasks.errors import NlptasksError, Problem, first_line
from nlptasks.inference.onnx_backend import INSTALL_HINT, ONNX_FILE, OnnxModel
from nlptasks.inference.onnx_quantize import (
    CALIBRATION_METHOD,
    CALIBRATION_ROWS,
    QUANTIZE,
    calibration_feeds,
    quantize_dynamic_int8,
    quantize_static_int8,
)
from nlptasks.inference.onnx_rowwise import quantize_rowwise_int8

__all__ = [
    "DEFAULT_OPSET",
    "INT8_WEIGHTS",
    "QUANTIZE",
    "Samples",
    "check_graph",
    "export_onnx",
    "float_outputs",
    "load_for_export",
]

DEFAULT_OPSET = 17
_COPIED = ("labels.json", "recipe.toml", "metrics.json", "examples.json")


def load_for_export(run_dir: Path, adapter: str | None = None) -> tuple[Any, dict[str, Any]]:
    """``(torch model on the CPU in fp32, eval mode; manifest without peft)`` of a run, an adapter
    run's adapter merged into its base (lora and ia3; other methods are refused)."""
    from nlptasks.engine.model.peft import DEFAULT_ADAPTER
    from nlptasks.inference.runs import choose
    from nlptasks.inference.torch_backend import torch_module
    from nlptasks.peft_support import MERGEABLE

    manifest = read_manifest(run_dir)
    if manifest.get("backend") == "onnx":
        raise NlptasksError(
            f"{run_dir}: already an ONNX export",
            hint=f"Export the torch run it came from: {manifest.get('onnx', {}).get('exported_from')}",
        )
    model_class = manifest.get("model_class")
    if not model_class:
        raise NlptasksError(f"{run_dir}: the manifest does not record model_class; cannot export")
    info = manifest.get("peft")
    if not info:
        if adapter is not None:
            raise NlptasksError(f"--adapter {adapter}: {run_dir} trained the whole model; it has no adapters")
        return torch_module(run_dir, manifest, model_class), dict(manifest)
    name = adapter or DEFAULT_ADAPTER
    chosen = choose(manifest, run_dir, None if name == DEFAULT_ADAPTER else name, False)
    method = info["adapters"].get(name, {}).get("method")
    if method not in MERGEABLE:
        raise NlptasksError(
            f"--onnx: the adapter {name!r} of {run_dir} uses method {method!r}, which cannot be merged into the "
            f"weights (only {' and '.join(MERGEABLE)} merge); an ONNX export needs one plain model",
            hint=f"Use the run as it is with torch: nlptasks infer --model {run_dir}",
        )
    if info.get("quantization", "none") != "none":
        raise NlptasksError(
            f"--onnx: {run_dir} has a {info['quantization']} quantized base; it cannot be merged for export",
            hint='Retrain with peft.quantization = "none" to export it.',
        )
    model = torch_module(run_dir, chosen, model_class)
    merged = model.merge_and_unload()
    merged.eval()
    result = {k: v for k, v in chosen.items() if k != "peft"}
    result["merged_from"] = {"run": str(run_dir.resolve()), "adapter": name, "method": method}
    return merged, result


def float_outputs(out: Any) -> dict[str, Any]:
    """The floating-point tensors of a model output, by name (``loss`` and ``None`` fields left out)."""
    import torch

    items = out.items() if hasattr(out, "items") else enumerate(out if isinstance(out, tuple) else (out,))
    return {str(k): v for k, v in items if isinstance(v, torch.Tensor) and v.is_floating_point() and k != "loss"}


class Samples:
    """The inputs the graph is traced and checked with: the run's own preprocessed examples
    (``examples.json``, any rank: a candidates axis, a task's own input), padded along their last
    axis; for a run made before that file existed, random ids of shape (batch, sequence) for the
    inputs the tokenizer names."""

    def __init__(self, run_dir: Path, model: Any, tokenizer: Any) -> None:
        from nlptasks.engine.model.examples import pad_batch, read_examples
        from nlptasks.engine.model.introspect import accepted_inputs

        accepted = accepted_inputs(model)
        examples = [{k: v for k, v in e.items() if k in accepted} for e in read_examples(run_dir)]
        groups: dict[str, list[dict[str, Any]]] = {}
        for e in examples:  # the largest group of examples that share their inputs and shapes
            one = pad_batch([e]) if "input_ids" in e else None
            if one is not None:
                groups.setdefault(repr({k: tuple(v.shape[:-1]) for k, v in one.items()}), []).append(e)
        self.examples = max(groups.values(), key=len) if groups else []
        self.pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
        self.vocab = int(getattr(model.config, "vocab_size", 100) or 100)
        if self.examples:
            names = list(self.examples[0])
        else:
            names = [
                n
                for n in getattr(tokenizer, "model_input_names", ["input_ids", "attention_mask"])
                if n in ("input_ids", "attention_mask", "token_type_ids") and n in accepted
            ]
            if "attention_mask" in accepted and "attention_mask" not in names:
                names.append("attention_mask")
        self.names = ["input_ids", *sorted(n for n in names if n != "input_ids")]
        self.source = "the run's examples.json" if self.examples else "random ids (the run has no examples.json)"

    def longest(self) -> int:
        """The longest example's length (0 without examples)."""
        from nlptasks.engine.model.examples import pad_batch

        batch = pad_batch(self.examples, self.pad_id) if self.examples else None
        return int(batch["input_ids"].shape[-1]) if batch is not None else 0

    def batch(self, size: int, length: int | None = None, seed: int = 0, unpadded: bool = False) -> dict[str, Any]:
        """``size`` inputs in one batch, padded to ``length`` (at least their longest); with
        ``unpadded`` and ``size`` 1, the first example as it is (no attention mask to hide padding)."""
        import torch

        if self.examples:
            from nlptasks.engine.model.examples import pad_batch

            rows = [self.examples[(seed + i) % len(self.examples)] for i in range(size)]
            batch = pad_batch(rows, self.pad_id, None if unpadded else length)
            assert batch is not None
            return {n: batch[n] for n in self.names}
        length = length or 8
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(5, max(self.vocab, 6), (size, length), generator=generator)
        mask = torch.ones_like(ids)
        if not unpadded:
            mask[-1, max(1, length // 2) :] = 0  # padding in the last row: the traced graph keeps the mask
        values = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        return {n: values[n] for n in self.names}


def _export_graph(model: Any, samples: Samples, path: Path, opset: int) -> dict[str, list[Any]]:
    """Trace ``model`` into ``path`` on the run's own inputs; returns each output's dimensions
    (``"batch"``, ``"sequence"`` or a fixed size), in the graph's output order.  Inputs have a
    dynamic batch (first) and sequence (last) axis; the axes between keep the examples' sizes."""
    import torch

    names = samples.names
    longest = samples.longest() or 8
    small, large = samples.batch(2, longest + 2, seed=0), samples.batch(3, longest + 5, seed=1)
    with torch.inference_mode():
        a, b = float_outputs(model(**small)), float_outputs(model(**large))
    if not a:
        raise NlptasksError(f"--onnx: {type(model).__name__} returns no floating-point output to export")
    outputs = list(a)
    axes: dict[str, dict[int, str]] = {n: {0: "batch", small[n].dim() - 1: "sequence"} for n in names}
    for name in outputs:
        axes[name] = {}
        for dim, (x, y) in enumerate(zip(a[name].shape, b[name].shape, strict=True)):
            if x != y:
                axes[name][dim] = "batch" if (x, y) == (2, 3) else "sequence"

    class Wrapper(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> tuple[Any, ...]:
            out = float_outputs(self.inner(**dict(zip(names, args, strict=True))))
            return tuple(out[n] for n in outputs)

    wrapper = Wrapper(model).eval()  # eval: a module in training mode would export its dropout
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracing notices
        torch.onnx.export(
            wrapper,
            tuple(small[n] for n in names),
            str(path),
            input_names=names,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
            do_constant_folding=True,
        )
    return {n: [axes[n].get(d, size) for d, size in enumerate(a[n].shape)] for n in outputs}


def check_graph(model: Any, onnx_model: OnnxModel, samples: Samples, limit: int) -> dict[str, Any]:
    """Compare torch and ONNX outputs at several shapes of the run's own inputs (one example
    unpadded, 7 padded together, 2 and 1 padded to the longest input the model takes):
    ``{"shapes", "max_abs_diff", "inputs"}`` (the shapes are ``input_ids``')."""
    import torch

    longest = max(samples.longest(), 3)
    batches = [
        samples.batch(1, None if samples.examples else 3, seed=10, unpadded=True),
        samples.batch(7, min(limit, max(longest, 64)), seed=11),
        samples.batch(2, max(limit, longest), seed=12),
        samples.batch(1, max(limit, longest), seed=13),
    ]
    largest = 0.0
    with torch.inference_mode():
        for inputs in batches:
            want = float_outputs(model(**inputs))
            try:
                got = onnx_model(**inputs)
            except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
                raise NlptasksError(
                    f"--onnx: the exported graph of {type(model).__name__} fails on inputs of shape "
                    f"{list(inputs['input_ids'].shape)} (it was traced at another): {first_line(exc)}",
                    hint="The TorchScript exporter keeps a size fixed when the model computes it in Python or with "
                    "an operation it cannot trace (repeat_interleave, a loop over tokens); write that step with "
                    "tensor operations on the input's shape (docs/onnx.md). The run itself is unchanged.",
                ) from None
            mask = inputs.get("attention_mask")
            for name, value in want.items():
                diff = (value.float() - got[name]).abs()
                if mask is not None and diff.dim() >= mask.dim() and diff.shape[: mask.dim()] == mask.shape:
                    diff = diff[mask.bool()]  # padded positions are nobody's output
                largest = max(largest, float(diff.max()) if diff.numel() else 0.0)
    return {"shapes": [list(b["input_ids"].shape) for b in batches], "max_abs_diff": largest, "inputs": samples.source}


INT8_WEIGHTS = ("auto", "QInt8", "QUInt8")
"""``--int8-weights``: onnxruntime's weight types for int8 (``auto``: :func:`int8_weight_type`)."""


def int8_weight_type() -> str:
    """The int8 weight type for this machine: ``QInt8`` (signed weights, onnxruntime's u8×s8
    kernels) on a CPU with VNNI (AVX-512 VNNI, AVX-VNNI or AMX), where those kernels do not
    saturate: measured 744 vs 435 SST-2 sentences/s for QUInt8 with MiniLM on our CPUs
    (docs/onnx.md); ``QUInt8`` elsewhere (without VNNI the u8×s8 kernels saturate: QInt8 changed
    16 of 200 tiny-NER sentences' tags there, QUInt8 3).  Weights are quantized per output
    channel (one scale per row): with per-tensor scales QInt8 cost 1.0 F1 point on CoNLL-2003 and
    0.8 accuracy points on MRPC, per channel +0.3 and -0.4 (and ran faster: 785 vs 504 sentences/s).
    These figures were measured with dynamic quantization (``int8-dynamic`` today)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "QUInt8"
    return "QInt8" if any(f in flags for f in (" avx512_vnni", " avx_vnni", " amx_int8")) else "QUInt8"


def export_onnx(
    run_dir: Path,
    out: Path,
    quantize: str = "none",
    opset: int = DEFAULT_OPSET,
    adapter: str | None = None,
    int8_weights: str = "auto",
    calibration_rows: int = CALIBRATION_ROWS,
    calibration_method: str = CALIBRATION_METHOD,
) -> dict[str, Any]:
    """Export ``run_dir`` to ``out`` (a new folder) as ONNX; returns the new folder's manifest.

    ``out/model.onnx`` is the model (``quantize="int8"``: per token, smoothed on ``calibration_rows``
    rows; ``"int8-static"``: static, calibrated on them with ``calibration_method``;
    ``"int8-dynamic"``: dynamic); ``out``
    becomes a complete run folder whose manifest records ``"backend": "onnx"`` and ``"onnx": {opset,
    quantize, weight_type, quantization, exported_from, exporter, inputs, outputs, sizes, check,
    seconds}`` (``quantization``: how, and for a calibrated int8 the calibration rows and their source).  The fp32 graph
    is checked against the torch model at several shapes (an error when an output differs by more
    than 1e-3: ``out`` then has no ``COMPLETE`` marker).
    """
    from transformers import AutoTokenizer

    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
        import onnxruntime  # noqa: F401
    except ImportError:
        raise NlptasksError(
            "--onnx needs the packages onnx and onnxruntime, which are not installed", hint=INSTALL_HINT
        ) from None
    if quantize not in QUANTIZE:
        raise NlptasksError(f"--quantize {quantize}: choose one of {', '.join(QUANTIZE)}")
    if calibration_rows < 1:
        raise NlptasksError(f"--calibration-rows {calibration_rows}: give 1 or more rows (default {CALIBRATION_ROWS})")
    if int8_weights not in INT8_WEIGHTS:
        raise NlptasksError(f"--int8-weights {int8_weights}: choose one of {', '.join(INT8_WEIGHTS)}")
    weight_type = int8_weight_type() if int8_weights == "auto" else int8_weights
    if not 14 <= opset <= 20:
        raise NlptasksError(f"--opset {opset}: this exporter writes opsets 14 to 20", hint=f"Default: {DEFAULT_OPSET}.")
    if out.exists() and any(out.iterdir()):
        raise NlptasksError(f"--onnx {out}: the folder exists and is not empty", hint="Pick a new folder.")
    started = time.perf_counter()
    model, manifest = load_for_export(run_dir, adapter)
    if getattr(model, "can_generate", lambda: False)():
        raise NlptasksError(
            f"--onnx: {run_dir} holds a {type(model).__name__}, a model that generates text; exporting generation "
            "(a decoding loop with a KV cache) is not supported by this exporter, and an export of one forward "
            "pass would not be a model `infer` can use",
            hint=f"Serve it with torch: nlptasks infer --model {run_dir}   (ONNX export covers encoder tasks)",
        )
    from nlptasks.engine.model.introspect import accepted_inputs

    if "input_ids" not in accepted_inputs(model):
        raise NlptasksError(
            f"--onnx: {run_dir} holds a {type(model).__name__}, which takes no input_ids; this "
            f"exporter traces text models (the {manifest.get('task')!r} task's is not one)",
            hint=f"Use the run with torch: nlptasks infer --model {run_dir}",
        )
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    samples = Samples(run_dir, model, tokenizer)
    names = samples.names
    out.mkdir(parents=True, exist_ok=True)
    fp32_path = out / ("model-fp32.onnx" if quantize != "none" else ONNX_FILE)
    outputs = _export_graph(model, samples, fp32_path, opset)
    from nlptasks.engine.model.introspect import position_limit

    limit = position_limit(model) or int(manifest.get("max_length") or 128)
    check = check_graph(model, OnnxModel(fp32_path, model.config), samples, limit)
    if check["max_abs_diff"] > 1e-3:
        raise NlptasksError(
            f"--onnx: the exported graph in {out} does not compute what the torch model computes",
            [Problem("", f"largest difference {check['max_abs_diff']:.2e} at shapes {check['shapes']}")],
            hint="This is a bug worth reporting (name the model class); the run itself is unchanged.",
        )
    sizes = {"fp32_bytes": fp32_path.stat().st_size}
    quantization: dict[str, Any] = {"method": "none"}
    if quantize in ("int8", "int8-static"):
        feeds, source = calibration_feeds(
            run_dir, fp32_path, model.config, read_manifest(run_dir), calibration_rows, adapter, quantize
        )
        if quantize == "int8":
            quantization = quantize_rowwise_int8(fp32_path, out / ONNX_FILE, feeds, weight_type)
        else:
            quantization = quantize_static_int8(fp32_path, out / ONNX_FILE, feeds, weight_type, calibration_method)
        quantization["calibration"] = source
    elif quantize == "int8-dynamic":
        quantization = quantize_dynamic_int8(fp32_path, out / ONNX_FILE, weight_type)
    if quantize != "none":
        sizes["int8_bytes"] = (out / ONNX_FILE).stat().st_size
        fp32_path.unlink()  # OUT is one model; the fp32 graph is an export without --quantize
    tokenizer.save_pretrained(str(out))
    model.config.save_pretrained(str(out))
    for extra in _COPIED:
        if (run_dir / extra).exists():
            shutil.copy2(run_dir / extra, out / extra)
    import torch

    manifest["backend"] = "onnx"
    manifest["onnx"] = {
        "opset": opset,
        "quantize": quantize,
        "weight_type": weight_type if quantize != "none" else "float32",
        "per_channel": quantize != "none",
        "quantization": quantization,
        "exported_from": str(run_dir.resolve()),
        "exporter": f"torch.onnx.export (TorchScript, dynamo=False), torch {torch.__version__}",
        "model_class": type(model).__name__,
        "inputs": names,
        "outputs": outputs,
        "sizes": sizes,
        "check": check,
        "seconds": round(time.perf_counter() - started, 2),
    }
    write_json(out / MANIFEST, manifest)
    mark_complete(out)
    return manifest
