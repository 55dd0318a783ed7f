"""What this machine can do: recipe keys that need a CUDA GPU or bitsandbytes, checked at run start
(and noted by ``nlptasks validate``) before any model is loaded; and the ``from_pretrained``
arguments of those keys where they can run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nlptasks.errors import Problem, RecipeError

if TYPE_CHECKING:
    from nlptasks.recipe import Recipe

__all__ = [
    "check_machine",
    "cpu_has_bf16",
    "cpu_name",
    "deepspeed_problems",
    "from_pretrained_kwargs",
    "machine_problems",
]

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AVX-512 BF16 or AMX, as oneDNN sees it):
    then bf16 there is about twice as fast as fp32; emulated, it is slower."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows: what machine-bound
    measurements (the MFU peak, a deployment's speed) are keyed on."""
    from pathlib import Path

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def machine_problems(
    recipe: Recipe, cuda: bool | None = None, bitsandbytes: bool | None = None, launched: bool | None = None
) -> list[Problem]:
    """Recipe keys this machine cannot honour: half precision, quantization, the 8-bit optimizer
    and tf32 need CUDA, and quantization and the 8-bit optimizer need bitsandbytes.  Checked at run start, before any model is loaded.

    :param cuda: whether a CUDA GPU is present (default: ask torch).
    :param bitsandbytes: whether bitsandbytes is installed (default: look for it).
    :param launched: whether the run is a distributed launch's (default: ``WORLD_SIZE`` is set).
    """
    import importlib.util

    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if bitsandbytes is None:
        bitsandbytes = importlib.util.find_spec("bitsandbytes") is not None
    problems = []
    dtype = recipe.model.dtype
    if dtype != "fp32" and not cuda:
        problems.append(
            Problem("model.dtype", f'{dtype!r} (half precision) needs a CUDA GPU; this machine has none (use "fp32")')
        )
    opt = recipe.optimize
    if opt.optimizer == "adamw_8bit" and not (cuda and bitsandbytes):
        need = [
            w
            for w, ok in (
                ("a CUDA GPU (this machine has none)", cuda),
                ("the bitsandbytes package (not installed: pip install bitsandbytes)", bitsandbytes),
            )
            if not ok
        ]
        problems.append(
            Problem(
                "optimize.optimizer",
                f"'adamw_8bit' keeps 8-bit optimizer states with bitsandbytes, which needs {' and '.join(need)}; "
                "on this machine use one of: 'adamw_torch', 'adamw_torch_fused', 'adafactor'",
            )
        )
    if recipe.train.extra.get("fsdp") and not cuda:
        problems.append(
            Problem(
                "train.extra.fsdp",
                "FSDP needs CUDA GPUs: on CPU processes accelerate leaves it out and trains with plain DDP; "
                "remove fsdp here (and run with --nproc N for DDP)",
            )
        )
    problems += deepspeed_problems(recipe, cuda, launched)
    if opt.tf32 and not cuda:
        problems.append(
            Problem("optimize.tf32", "true needs a CUDA GPU (Ampere or newer); this machine has none (use false)")
        )
    if recipe.train.precision == "fp16" and not cuda:
        problems.append(
            Problem("train.precision", "fp16 needs a CUDA GPU; this machine has none (use 'auto' or 'fp32')")
        )
    peft = recipe.peft
    if peft is not None and peft.quantization != "none":
        need = []
        if not cuda:
            need.append("a CUDA GPU (this machine has none)")
        if not bitsandbytes:
            need.append("the bitsandbytes package (not installed: pip install bitsandbytes)")
        if need:
            problems.append(
                Problem(
                    "peft.quantization",
                    f"{peft.quantization!r} loads the base with bitsandbytes, which needs {' and '.join(need)}; "
                    'use "none" on this machine',
                )
            )
        if recipe.model.name_or_path is None:
            problems.append(
                Problem(
                    "peft.quantization",
                    "quantizes a pretrained base (model.name_or_path), not a model built from scratch",
                )
            )
    return problems


def deepspeed_problems(recipe: Recipe, cuda: bool, launched: bool | None = None) -> list[Problem]:
    """What stops DeepSpeed (``train.zero`` or ``train.extra.deepspeed``) on this machine: the
    package, and on CPU processes a C++ compiler: DeepSpeed's CPU communication backend compiles
    its shared-memory op when it starts (``deepspeed/comm/torch.py``: ``TorchBackend.__init__`` calls
    ``build_shm_op``, with no setting to leave it out), with torch's C++ extension builder
    (``$CXX``, default ``c++``)."""
    import importlib.util
    import os
    import shutil

    key = "train.zero" if recipe.train.zero is not None else "train.extra.deepspeed"
    if recipe.train.zero is None and not recipe.train.extra.get("deepspeed"):
        return []
    problems = []
    if not (launched if launched is not None else "WORLD_SIZE" in os.environ):
        problems.append(
            Problem(
                key,
                "DeepSpeed trains in a distributed launch: run with --nproc N (N processes, 1 is fine; "
                "validate with --nproc N too), or under torchrun or accelerate launch",
            )
        )
    if importlib.util.find_spec("deepspeed") is None:
        return [*problems, Problem(key, "needs the deepspeed package (not installed: pip install deepspeed)")]
    compiler = os.environ.get("CXX", "c++")
    if not cuda and shutil.which(compiler) is None:
        return [
            *problems,
            Problem(
                key,
                f"DeepSpeed on CPU processes compiles its shared-memory communication op at start-up "
                f"(deepspeed/comm/torch.py, build_shm_op) and needs a C++ compiler; {compiler!r} is not on PATH "
                "(install g++, or set CXX), or train without DeepSpeed (--nproc N alone is DDP)",
            ),
        ]
    return problems


_CPU_VALUES = {
    "model.dtype": "fp32",
    "peft.quantization": "none",
    "optimize.optimizer": "adamw_torch",
    "optimize.tf32": "false",
    "train.extra.fsdp": "false",
    "train.precision": "auto",
}


def check_machine(recipe: Recipe, source: str = "recipe", launched: bool | None = None) -> None:
    """Raise a :class:`RecipeError` naming the keys this machine cannot honour (see :func:`machine_problems`)."""
    problems = machine_problems(recipe, launched=launched)
    if problems:
        here = " ".join(
            dict.fromkeys(f"--set {p.where}={_CPU_VALUES[p.where]}" for p in problems if p.where in _CPU_VALUES)
        )
        raise RecipeError(
            source,
            problems,
            hint="Half precision, 4/8-bit loading, 8-bit optimizers and tf32 run on a CUDA GPU only (docs/peft.md, "
            f"docs/optimize.md); on this machine: {here}"
            if here
            else "docs/optimize.md",
        )


def from_pretrained_kwargs(recipe: Recipe) -> dict[str, Any]:
    """Extra ``from_pretrained`` arguments for ``model.dtype`` and ``peft.quantization`` (CUDA only;
    :func:`check_machine` has already refused them elsewhere)."""
    import torch

    kwargs: dict[str, Any] = {}
    if recipe.model.dtype != "fp32":
        kwargs["dtype"] = getattr(torch, _DTYPES[recipe.model.dtype])
    peft = recipe.peft
    if peft is not None and peft.quantization != "none":
        from transformers import BitsAndBytesConfig

        if peft.quantization == "4bit":
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type=peft.quant_type,
                bnb_4bit_use_double_quant=peft.double_quant,
                bnb_4bit_compute_dtype=getattr(torch, _DTYPES[peft.compute_dtype]),
            )
        else:
            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
        kwargs["device_map"] = {"": torch.cuda.current_device()}
    return kwargs
