"""``nlptasks export RUN --merge OUT``: fold a LoRA/IA3 adapter into the base weights, save a run
that loads with plain transformers, and check that it predicts as the adapter did."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from nlptasks.engine.io.outputs import atomic_folder
from nlptasks.engine.io.rundir import MANIFEST, mark_complete, read_manifest, write_json
from nlptasks.engine.model.classes import resolve as resolve_class
from nlptasks.engine.model.examples import read_examples
from nlptasks.engine.model.peft import DEFAULT_ADAPTER
from nlptasks.errors import NlptasksError, Problem
from nlptasks.inference.runs import choose
from nlptasks.inference.torch_backend import adapter_path, torch_module
from nlptasks.peft_support import MERGEABLE

__all__ = ["compare_outputs", "export_merged", "model_outputs"]


def model_outputs(model: Any, inputs: list[dict[str, list[int]]], task_type: str) -> list[dict[str, Any]]:
    """One record per stored input: for a causal LM (and an encoder-decoder given no decoder
    inputs) the greedy continuation tokens; for any other model (an encoder-decoder given its
    stored decoder inputs included) every floating-point tensor of its output, by name
    (``logits``, ``start_logits`` and ``end_logits``, ``last_hidden_state`` ...), whatever head or
    output class it has, computed on the model's device and kept on the host.  An output
    with no tensor to compare is an error naming its class."""
    import torch

    from nlptasks.engine.model.introspect import accepted_inputs

    accepted = accepted_inputs(model)
    device = next(model.parameters()).device  # wherever the model is: the inputs go there, the outputs to the host
    outputs = []
    with torch.inference_mode():
        for sample in inputs:
            tensors = {k: torch.tensor([v], device=device) for k, v in sample.items() if k in accepted}
            two_sided = getattr(model.config, "is_encoder_decoder", False)
            if task_type == "CAUSAL_LM" or (two_sided and "decoder_input_ids" not in tensors):
                generated = model.generate(**tensors, max_new_tokens=8, do_sample=False)
                start = 0 if two_sided else tensors["input_ids"].shape[1]  # a decoder-only model repeats its input
                outputs.append({"tokens": generated[0, start:].tolist()})
                continue
            out = model(**tensors)
            items = out.items() if hasattr(out, "items") else enumerate(out if isinstance(out, tuple) else (out,))
            record = {
                str(k): v.detach().float().cpu()
                for k, v in items
                if isinstance(v, torch.Tensor) and v.is_floating_point() and k != "loss"
            }
            if not record:
                raise NlptasksError(
                    f"--merge: {type(model).__name__} returns {type(out).__name__}, which holds no tensor to compare "
                    "before and after merging"
                )
            outputs.append(record)
    return outputs


def compare_outputs(
    before: list[dict[str, Any]], after: list[dict[str, Any]], atol: float = 1e-4
) -> tuple[list[str], float]:
    """``(differences, largest absolute difference of any output tensor)`` between two lists of
    :func:`model_outputs` records.  Outputs named ``*logits`` must keep their argmax; every tensor
    must agree within ``atol`` plus 0.1% of its largest value; generated tokens must be equal."""
    differences, largest = [], 0.0
    for i, (a, b) in enumerate(zip(before, after, strict=True), start=1):
        if a.keys() != b.keys():
            differences.append(f"input {i}: outputs {sorted(a)} → {sorted(b)}")
            continue
        for name, x in a.items():
            y = b[name]
            if name == "tokens":
                if x != y:
                    differences.append(f"input {i}: greedy tokens {x} → {y}")
                continue
            if x.shape != y.shape:
                differences.append(f"input {i}: {name} of shape {tuple(x.shape)} → {tuple(y.shape)}")
                continue
            gap = float((x - y).abs().max()) if x.numel() else 0.0
            largest = max(largest, gap)
            if name.endswith("logits") and x.argmax(-1).tolist() != y.argmax(-1).tolist():
                differences.append(f"input {i}: argmax of {name} {x.argmax(-1).tolist()} → {y.argmax(-1).tolist()}")
            elif gap > atol + 1e-3 * float(y.abs().max()):
                differences.append(f"input {i}: {name} differ by up to {gap:.2e}")
    return differences, largest


def export_merged(run_dir: Path, out: Path, adapter: str | None = None) -> dict[str, Any]:
    """``nlptasks export RUN --merge OUT``: fold a lora/ia3 adapter into the base weights and save
    a complete run that loads with plain transformers; verify that it predicts as the adapter did.

    Returns the new run's manifest.  ``OUT`` is built as a temporary sibling and renamed into place
    once complete (:func:`~nlptasks.engine.io.outputs.atomic_folder`): a mismatch on the stored
    inputs, or a failed write, is an error that leaves no ``OUT``.
    """
    with atomic_folder(out, "--merge", {"RUN": run_dir}) as work:
        return _merge_into(run_dir, work, adapter)


def _merge_into(run_dir: Path, out: Path, adapter: str | None) -> dict[str, Any]:
    from transformers import AutoTokenizer

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
            hint='Retrain with peft.quantization = "none" (and model.dtype = "bf16" on a GPU) to export a merged model.',
        )
    if out.exists() and any(out.iterdir()):
        raise NlptasksError(f"--merge {out}: the folder exists and is not empty", hint="Pick a new folder.")
    check = read_examples(run_dir, info.get("check"))
    if not check:
        raise NlptasksError(
            f"--merge: {run_dir} keeps no examples to check the merge with ({info.get('check')} is "
            "missing or unreadable)",
            hint="Train the adapter again with this version of nlptasks.",
        )
    model_class = manifest.get("model_class")
    if not model_class:
        raise NlptasksError(f"{run_dir}: the manifest does not record model_class; cannot export")
    chosen = choose(manifest, run_dir, name if name != DEFAULT_ADAPTER else None, False)
    model = torch_module(run_dir, chosen, model_class)  # fp32, CPU
    task_type = info["task_type"]
    before = model_outputs(model, check, task_type)
    merged = model.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(run_dir).save_pretrained(str(out))
    for extra in ("labels.json", "recipe.toml", "metrics.json"):
        if (run_dir / extra).exists():
            shutil.copy2(run_dir / extra, out / extra)
    reloaded = resolve_class(manifest).from_pretrained(out)  # plain transformers (or the plugin's class), no peft
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
