"""Where and in which dtype a torch model runs at inference, from the :class:`~nlptasks.types.LoadOptions`
of its load (never from process-wide state) and the run's own training precision: a CUDA GPU when
there is one (``device = "auto"``); with ``precision = "auto"``, the precision the run was trained
and evaluated in (its manifest's ``precision``) where the device computes in it, else fp32 — so
``nlptasks infer`` answers in the precision of the metrics ``nlptasks run`` and ``nlptasks eval``
report.  (On an H100, loading an fp32-trained run in bf16 moved its scores by up to 1e-2 and a
bf16-trained one's label on 1 of 512 reviews: docs/gpu.md.)
"""

from __future__ import annotations

from typing import Any

from nlptasks.engine.system.machine import cpu_has_bf16
from nlptasks.errors import NlptasksError
from nlptasks.types import LoadOptions

__all__ = ["auto_precision", "inference_precision", "prepare_for_inference"]


def auto_precision(trained: str | None, bf16_here: bool) -> str:
    """What ``precision = "auto"`` loads a run in: ``bf16`` for a run trained in bf16 (or fp16, its
    half-precision sibling on older GPUs) where the device computes in bf16, else ``fp32`` (a run
    trained in fp32, or a device without bf16)."""
    return "bf16" if trained in ("bf16", "fp16") and bf16_here else "fp32"


def inference_precision(options: LoadOptions, trained: str | None = None) -> tuple[str, str]:
    """``(device, dtype)`` for a torch model loaded with ``options``, of a run trained in ``trained``
    (its manifest's ``precision``; ``None``: unknown, as fp32): the device is ``cuda`` when there is
    a GPU (``auto``), else ``cpu``; ``auto`` precision is :func:`auto_precision`; ``bf16`` asked for
    needs a GPU with bf16 or a CPU with native bf16.  An impossible choice is an error saying what
    to use instead."""
    import torch

    cuda = torch.cuda.is_available()
    device = options.device
    if device == "auto":
        device = "cuda" if cuda else "cpu"
    elif device.startswith("cuda") and not cuda:
        raise NlptasksError(f"device {device}: this machine has no CUDA GPU", hint="Use --device cpu (or auto).")
    on_gpu = device.startswith("cuda")
    bf16 = torch.cuda.is_bf16_supported() if on_gpu else cpu_has_bf16()
    precision = options.precision
    if precision == "bf16":
        if not bf16:
            where = "a GPU without it" if on_gpu else "a CPU without native bf16"
            raise NlptasksError(
                f"--precision bf16: needs a CUDA GPU with bf16 support or a CPU with native bf16 (AVX-512 BF16 "
                f"or AMX); the chosen device is {where}",
                hint="Leave out --precision (auto: fp32 here) or use --precision fp32.",
            )
    elif precision == "auto":
        precision = auto_precision(trained, bf16)
    return device, precision


def prepare_for_inference(model: Any, options: LoadOptions, trained: str | None = None) -> Any:
    """``model`` (of a run trained in ``trained``) in eval mode on the device and dtype ``options``
    choose (:func:`inference_precision`)."""
    import torch

    device, precision = inference_precision(options, trained)
    model = model.to(device)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.eval()
    return model
