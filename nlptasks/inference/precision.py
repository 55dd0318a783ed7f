"""Where and in which dtype a torch model runs at inference, from the :class:`~nlptasks.types.LoadOptions`
of its load (never from process-wide state): a CUDA GPU when there is one (``device = "auto"``),
in bf16 where it supports it (``precision = "auto"``); on a CPU, fp32 unless bf16 is asked for and
the CPU computes in bf16 natively (AVX-512 BF16 or AMX).
"""

from __future__ import annotations

from typing import Any

from nlptasks.engine.system.machine import cpu_has_bf16
from nlptasks.errors import NlptasksError
from nlptasks.types import LoadOptions

__all__ = ["inference_precision", "prepare_for_inference"]


def inference_precision(options: LoadOptions) -> tuple[str, str]:
    """``(device, dtype)`` for a torch model loaded with ``options``: ``("cuda", "bf16")`` on a GPU
    with bf16, ``("cuda", "fp32")`` on an older one (or when fp32 is asked for), ``("cpu", "fp32")``
    without a GPU, and ``("cpu", "bf16")`` when bf16 is asked for on a CPU with native bf16 (never
    by ``auto``: the scores then differ from training's fp32 in the fourth decimal).  An impossible
    choice is an error saying what to use instead."""
    import torch

    cuda = torch.cuda.is_available()
    device = options.device
    if device == "auto":
        device = "cuda" if cuda else "cpu"
    elif device.startswith("cuda") and not cuda:
        raise NlptasksError(f"device {device}: this machine has no CUDA GPU", hint="Use --device cpu (or auto).")
    on_gpu = device.startswith("cuda")
    bf16 = on_gpu and torch.cuda.is_bf16_supported()
    precision = options.precision
    if precision == "bf16":
        if not (bf16 or (not on_gpu and cpu_has_bf16())):
            where = "a GPU without it" if on_gpu else "a CPU without native bf16"
            raise NlptasksError(
                f"--precision bf16: needs a CUDA GPU with bf16 support or a CPU with native bf16 (AVX-512 BF16 "
                f"or AMX); the chosen device is {where}",
                hint="Leave out --precision (auto: fp32 here) or use --precision fp32.",
            )
    elif precision == "auto":
        precision = "bf16" if bf16 else "fp32"
    return device, precision


def prepare_for_inference(model: Any, options: LoadOptions) -> Any:
    """``model`` in eval mode on the device and dtype ``options`` choose (:func:`inference_precision`)."""
    import torch

    device, precision = inference_precision(options)
    model = model.to(device)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.eval()
    return model
