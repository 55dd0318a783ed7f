"""``nlptasks plan``: the memory ladder of a recipe and an estimate of peak training memory per rung.

The ladder is the classic sequence of memory savings, each rung adding one to the one before
(as ``--set`` overrides of the recipe, so every rung is an ordinary run)::

    baseline            the recipe as it is
    accumulation        micro-batch 1, accumulation = the effective batch     (activations)
    checkpointing       + optimize.gradient_checkpointing                     (activations)
    adafactor           + optimize.optimizer = adafactor (adamw_8bit on CUDA)  (optimizer states)
    freeze body         + freeze_embeddings, freeze_layers = the layer count  (gradients, optimizer)
    max length          + model.max_length a quarter (at least 16)            (activations)
    lora                LoRA instead of freezing (peft.method = lora)          (gradients, optimizer)
    qlora               + peft.quantization = 4bit (CUDA, pretrained base)    (weights)

The estimate needs the exact parameters of the model the recipe trains, without its weights:
steps 1 to 4 run as in ``nlptasks inspect-batch`` (the task plugin decides the head, e.g. the
number of labels), then step 5 builds the model on PyTorch's ``meta`` device (shapes only; a
pretrained model from its config.json alone, see :data:`nlptasks.engine.model.modeling.ON_META`), and
each rung's freezing and adapter are applied to a copy of it with the engine's own code
(:func:`nlptasks.engine.training.optimize.prepare_model`, peft).  The formulas are in docs/plan.md.

The engine knows no task by name: everything here reads the model, never the task.

The package: :mod:`~nlptasks.plan.ladder` (the rungs), :mod:`~nlptasks.plan.estimate` (the
formulas), :mod:`~nlptasks.plan.make` (the plan of a recipe, choosing a rung for a budget),
:mod:`~nlptasks.plan.text` (tables), :mod:`~nlptasks.plan.probe` (measuring rungs in fresh
processes, for ``--probe`` and ``nlptasks bench ladder``).
"""

from __future__ import annotations

from nlptasks.plan.estimate import GIB, MIB, Estimate, ModelShape, ParamInfo, Settings, estimate, model_shape
from nlptasks.plan.ladder import Rung, ladder
from nlptasks.plan.make import Choice, Plan, PlanRow, choose, make_plan
from nlptasks.plan.text import human, parse_size, plan_text, table

__all__ = [
    "GIB",
    "MIB",
    "Choice",
    "Estimate",
    "ModelShape",
    "ParamInfo",
    "Plan",
    "PlanRow",
    "Rung",
    "Settings",
    "choose",
    "estimate",
    "human",
    "ladder",
    "make_plan",
    "model_shape",
    "parse_size",
    "plan_text",
    "table",
]
