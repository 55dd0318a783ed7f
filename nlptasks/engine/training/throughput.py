"""What training did with the machine: non-padding tokens/s, the padding fraction, and an estimate
of model FLOPs utilisation, recorded in ``metrics.json["train"]`` of every run.

``tokens``
    the tokens the model learned from: the ones of the attention masks (every ``*attention_mask``
    of a batch: a bi-encoder's two sides count both), or every token of a batch without a mask
    (packed sft batches); counted in every training step of the run, summed over the ranks of a
    distributed run.  A resumed run counts the whole run: each checkpoint records the totals so
    far (``trainer_state.json``, ``stateful_callbacks.TrainingTotals``) and the resumed run
    starts from them.
``loss``
    (replacing the Trainer's ``train_loss``, which after a resume is the mean of the resumed part
    only) the mean training loss per optimizer step over the whole run: the sum of every
    micro-batch's loss, from the checkpoint's totals on, over the run's optimizer steps.
``tokens_per_second``
    ``tokens`` over the Trainer's ``train_runtime`` (which includes the evaluations during training).
``padding_fraction``
    the share of the batches' token slots (``input_ids`` elements) that were padding.
``mfu``
    6 x non-embedding parameters x tokens / runtime / the device's peak FLOP/s: the usual
    estimate (forward 2, backward 4 FLOPs per parameter and token; attention's own FLOPs and the
    embedding lookups left out).  A LoRA run spends less on the frozen weights' gradients, so its
    figure overstates the work a little.
``peak_tflops`` and ``peak_source``
    the peak it divides by: a table of dense bf16/fp16 and tf32 peaks for known CUDA GPUs
    (``"table"``), else a 2048 x 2048 matrix multiply in the run's precision timed on this
    machine with the run's thread count and cached in ``~/.cache/nlptasks/peak_flops.json`` (``"measured"``:
    the best of the first three runs' measurements, as a busy machine measures low; an achievable
    peak, so the figure is higher than one against the datasheet's), or the environment's
    (``"environment"``).

Environment variables:

``NLPTASKS_PEAK_TFLOPS``
    the training device's peak in TFLOP/s for the MFU estimate of runs (instead of the table of
    GPUs or the measured one).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from nlptasks.engine.system.distributed import rank, world_size
from nlptasks.engine.system.machine import cpu_name

__all__ = [
    "TOTALS",
    "count_training_tokens",
    "device_peak_flops",
    "nonembedding_parameters",
    "rank_totals_file",
    "restored_totals",
    "throughput_figures",
    "whole_run_loss",
]

TOTALS = "TrainingTotals"
"""The name under which each checkpoint's ``trainer_state.json`` records the run's totals so far."""

# Dense peaks (FLOP/s) of CUDA GPUs by a substring of their name: (bf16/fp16 tensor cores, tf32/fp32).
_GPU_PEAKS = {
    "H200": (989e12, 494e12),
    "H100": (989e12, 494e12),
    "A100": (312e12, 156e12),
    "A10G": (70e12, 35e12),
    "L40S": (362e12, 183e12),
    "L4": (121e12, 60e12),
    "A10": (125e12, 62.5e12),
    "V100": (125e12, 15.7e12),
    "T4": (65e12, 8.1e12),
    "RTX 4090": (165e12, 82.6e12),
    "RTX 3090": (71e12, 35.6e12),
}


def rank_totals_file(checkpoint: str | Path, rank: int) -> Path:
    """Where rank ``rank`` of a distributed run records its own totals in a checkpoint (the
    checkpoint's ``trainer_state.json`` is rank 0's alone)."""
    return Path(checkpoint) / f"nlptasks_totals_{rank}.json"


def restored_totals(checkpoint: str | Path | None) -> dict[str, Any]:
    """The totals (``tokens``, ``slots``, ``loss_sum``) of this process that ``checkpoint``
    recorded: its rank's file in a distributed run, else ``trainer_state.json``'s; ``{}`` when
    there is no checkpoint, or it recorded none (a checkpoint of an older nlptasks)."""
    if checkpoint is None:
        return {}
    try:
        if world_size() > 1:
            saved = json.loads(rank_totals_file(checkpoint, rank()).read_text(encoding="utf-8"))
        else:
            state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
            saved = state["stateful_callbacks"][TOTALS]["attributes"]
        return {"tokens": int(saved["tokens"]), "slots": int(saved["slots"]), "loss_sum": float(saved["loss_sum"])}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def count_training_tokens(trainer: Any, resume_from: str | Path | None = None) -> dict[str, Any]:
    """Count the tokens and sum the loss of every training micro-batch ``trainer`` takes from now
    on (wraps its ``training_step``), from the totals of ``resume_from`` (the checkpoint a resumed
    run starts from), and record the totals in every checkpoint (each rank of a distributed run in
    its own file: rank 0's alone would be restored on every rank and counted once per rank); the
    returned dict fills as it trains: ``tokens``, ``slots``, ``loss_sum`` and ``whole`` (whether
    they cover the whole run)."""
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    restored = restored_totals(resume_from)
    counts: dict[str, Any] = {"tokens": 0, "slots": 0, "loss_sum": 0.0, **restored}
    counts.update(whole=resume_from is None or bool(restored), tokens_before=counts["tokens"])
    original = trainer.training_step
    keys = ("tokens", "slots", "loss_sum")

    def training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        tokens, slots = batch_tokens(inputs)
        counts["tokens"] += tokens
        counts["slots"] += slots
        loss = original(model, inputs, *args, **kwargs)
        if hasattr(loss, "detach"):
            counts["loss_sum"] += float(loss.detach().float().mean())
        return loss

    class TrainingTotals(TrainerCallback, ExportableState):  # type: ignore[misc]
        def state(self) -> dict[str, Any]:
            return {"args": {}, "attributes": {k: counts[k] for k in keys}}

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if world_size() > 1:
                folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
                folder.mkdir(parents=True, exist_ok=True)
                rank_totals_file(folder, rank()).write_text(json.dumps({k: counts[k] for k in keys}), encoding="utf-8")

    trainer.training_step = training_step
    trainer.add_callback(TrainingTotals())
    return counts


def whole_run_loss(counts: dict[str, Any], steps: int) -> dict[str, float]:
    """``{"loss": mean loss per optimizer step over the whole run}`` (averaged over the ranks of a
    distributed run), or ``{}`` when the counts do not cover the whole run."""
    if not counts.get("whole") or steps <= 0:
        return {}
    total = float(counts["loss_sum"])
    import torch

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        value = torch.tensor([total], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            value = value.cuda()
        dist.all_reduce(value)
        total = float(value[0]) / dist.get_world_size()
    return {"loss": total / steps}


def batch_tokens(inputs: Any) -> tuple[int, int]:
    """(non-padding tokens, token slots) of one collated batch: each ``*input_ids`` tensor with its
    ``*attention_mask`` (no mask: every slot is a token)."""
    if not hasattr(inputs, "items") or not hasattr(inputs, "get"):  # a dict or a BatchEncoding
        return 0, 0
    tokens = slots = 0
    for key, ids in inputs.items():
        if not key.endswith("input_ids") or not hasattr(ids, "numel"):
            continue
        mask = inputs.get(key[: -len("input_ids")] + "attention_mask")
        n = int(ids.numel())
        slots += n
        tokens += int(mask.sum()) if hasattr(mask, "sum") and getattr(mask, "shape", None) == ids.shape else n
    return tokens, slots


def nonembedding_parameters(model: Any) -> int:
    """Parameters of ``model`` outside its embedding tables (which cost a lookup, not FLOPs)."""
    import torch

    embedding = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in embedding or id(p) in seen:  # tied weights count once
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def throughput_figures(counts: dict[str, Any], runtime: float | None, model: Any, precision: str) -> dict[str, Any]:
    """The figures above, from the counts of :func:`count_training_tokens` (summed over ranks
    here, when the run is distributed) and the Trainer's ``train_runtime`` (of this process: the
    rates count the tokens this process trained on, a resumed run's since its checkpoint)."""
    tokens, slots = _all_ranks(counts["tokens"], counts["slots"])
    if not slots:
        return {}
    out: dict[str, Any] = {"tokens": tokens, "padding_fraction": round(1 - tokens / slots, 4)}
    if not runtime or runtime <= 0:
        return out
    tokens -= _all_ranks(counts.get("tokens_before", 0), 0)[0]
    out["tokens_per_second"] = round(tokens / runtime, 1)
    peak, source = device_peak_flops(precision)
    if peak:
        flops = 6 * nonembedding_parameters(model) * tokens / runtime
        if flops > peak and source == "measured":  # the timed matmul ran slow (a busy machine): the run did more
            peak = raise_measured_peak(precision, flops)
            source = "measured (raised to this run's own rate: the timed matrix multiply had run slow)"
        out.update(mfu=round(flops / peak, 4), peak_tflops=round(peak / 1e12, 3), peak_source=source)
    return out


def _all_ranks(tokens: int, slots: int) -> tuple[int, int]:
    import torch

    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tokens, slots
    both = torch.tensor([tokens, slots], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        both = both.cuda()
    dist.all_reduce(both)
    return int(both[0]), int(both[1])


def _machine_and_dtype(precision: str) -> tuple[str, Any, str]:
    """``(cache key's machine part, dtype, device)`` of the measured peak for ``precision``."""
    import torch

    half = precision in ("bf16", "fp16")
    if torch.cuda.is_available():
        return f"cuda {torch.cuda.get_device_name()}", torch.bfloat16 if half else torch.float32, "cuda"
    machine = f"cpu {cpu_name()} threads={torch.get_num_threads()}"
    return machine, torch.bfloat16 if precision == "bf16" else torch.float32, "cpu"


def raise_measured_peak(precision: str, flops: float) -> float:
    """A run computed ``flops`` FLOP/s, more than the cached measured peak: the measurement ran
    slow (a busy machine).  The cache keeps the higher figure (with when and why); returns it."""
    machine, dtype, _ = _machine_and_dtype(precision)
    key = _cache_key(machine, dtype)
    cached = _read_cache()
    entry = cached.get(key) if isinstance(cached.get(key), dict) else {}
    best = max(flops, float(entry.get("flops") or 0.0))
    cached[key] = {**entry, "flops": best, "raised_by_a_run": _stamp()}
    _write_cache(cached)
    return best


def device_peak_flops(precision: str) -> tuple[float | None, str]:
    """The peak FLOP/s of the device a run trains on, and where the figure comes from."""
    env = os.environ.get("NLPTASKS_PEAK_TFLOPS")
    if env:
        try:
            return float(env) * 1e12, "environment"
        except ValueError:
            return None, "environment (not a number)"
    import torch

    half = precision in ("bf16", "fp16")
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        for key, (fast, full) in _GPU_PEAKS.items():
            if key in name:
                return (fast if half else full), "table"
    return _measured(*_machine_and_dtype(precision))


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nlptasks" / "peak_flops.json"


_MEASUREMENTS = 3  # a busy machine measures low: the best of the first few runs' measurements is kept


def _read_cache() -> dict[str, Any]:
    try:
        cached = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def _write_cache(cached: dict[str, Any]) -> None:
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, indent=1))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: measured again next time


def _stamp() -> dict[str, Any]:
    """When, and how busy the machine was (1-minute load average; ``None`` where unknown)."""
    import datetime as dt

    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "load_average": load}


def _cache_key(machine: str, dtype: Any) -> str:
    """A measured peak's entry in the cache: the machine, then the dtype (``... float32``)."""
    return f"{machine} {str(dtype).removeprefix('torch.')}"


def _measured(machine: str, dtype: Any, device: str) -> tuple[float | None, str]:
    key = _cache_key(machine, dtype)
    cached = _read_cache()
    entry = cached.get(key) if isinstance(cached.get(key), dict) else {}
    best, times = entry.get("flops"), entry.get("measurements", 0)
    best = float(best) if isinstance(best, (int, float)) and best > 0 else None
    if best and isinstance(times, int) and times >= _MEASUREMENTS:
        return best, "measured"
    peak = _time_matmul(dtype, device, n=_MATMUL_SIZE.get((device, str(dtype)), 2048))
    if peak is None:
        return best, "measured" if best else "unknown"
    history = [m for m in entry.get("history", []) if isinstance(m, dict)]
    cached[key] = {
        **entry,
        "flops": max(peak, best or 0.0),
        "measurements": (times if isinstance(times, int) else 0) + 1,
        "history": [*history, {"flops": peak, **_stamp()}],
    }
    _write_cache(cached)
    return cached[key]["flops"], "measured"


_MATMUL_SIZE = {("cpu", "torch.bfloat16"): 1024}
"""A smaller product where the device computes it slowly: bf16 on a CPU without native bf16 took
minutes at 2048 on a busy machine (8x the work of 1024, for the same estimate of the rate)."""


def _time_matmul(dtype: Any, device: str, n: int = 2048) -> float | None:
    """The best FLOP/s of an n x n matrix multiply over a few repeats (about a second on a CPU)."""
    import torch

    try:
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        a @ b  # warm-up: the first call picks kernels
        best = float("inf")
        for _ in range(4):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(2):
                a @ b
            if device == "cuda":
                torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - start) / 2)
        return 2 * n**3 / best if best > 0 else None
    except RuntimeError:  # a dtype the device cannot multiply in
        return None
