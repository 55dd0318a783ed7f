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
pretrained model from its config.json alone, see :data:`nlptasks.engine.modeling.ON_META`), and
each rung's freezing and adapter are applied to a copy of it with the engine's own code
(:func:`nlptasks.engine.optimize.prepare_model`, peft).  The formulas are in docs/plan.md.

The engine knows no task by name: everything here reads the model, never the task.
"""

from __future__ import annotations

import copy
import importlib.util
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from nlptasks.errors import NlptasksError

if TYPE_CHECKING:
    from nlptasks.recipe import LoadedRecipe, Recipe

GIB = 1024**3
MIB = 1024**2

HALF = ("bf16", "fp16")
FUSED_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


# ---------------------------------------------------------------------------------------------
# The ladder
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rung:
    """One rung of the ladder: the recipe overrides that make it, and what it saves.

    :param name: a short id (``baseline``, ``accumulation`` ...).
    :param label: how the table shows it, e.g. ``+ gradient checkpointing``.
    :param targets: the memory it goes after (``activations``, ``optimizer states`` ...).
    :param overrides: ``KEY=VALUE`` strings, as for ``--set``, applied after the user's own.
    :param micro_batch: ``train.batch_size`` of the rung.
    :param accumulation: ``train.gradient_accumulation_steps`` of the rung.
    :param changes: how the rung changes the experiment, beyond speed ("" when it does not).
    """

    name: str
    label: str
    targets: str
    overrides: tuple[str, ...]
    micro_batch: int
    accumulation: int
    changes: str = ""


def ladder(recipe: Recipe, layers: int, device: str = "cpu", bitsandbytes: bool = False) -> list[Rung]:
    """The rungs for ``recipe``, whose model has ``layers`` transformer layers.

    :param device: ``cuda`` or ``cpu``: on CUDA with bitsandbytes installed the optimizer rung
        uses 8-bit AdamW instead of Adafactor.
    """
    batch = recipe.train.batch_size
    effective = batch * recipe.train.gradient_accumulation_steps
    length = recipe.model.max_length
    short = max(16, length // 4)
    # Rungs before LoRA train the whole model: a recipe with [peft] has it switched off there.
    no_peft = ("peft.method=none",) if recipe.peft is not None else ()
    accumulate = (*no_peft, "train.batch_size=1", f"train.gradient_accumulation_steps={effective}")
    checkpoint = (*accumulate, "optimize.gradient_checkpointing=true")
    eight_bit = device == "cuda" and bitsandbytes
    optimizer = "adamw_8bit" if eight_bit else "adafactor"
    cheap_optimizer = (*checkpoint, f"optimize.optimizer={optimizer}")
    freeze = (*cheap_optimizer, "optimize.freeze_embeddings=true", f"optimize.freeze_layers={layers}")
    shorter = (*freeze, f"model.max_length={short}")
    lora = (
        *(o for o in cheap_optimizer if o != "peft.method=none"),
        f"model.max_length={short}",
        "peft.method=lora",
    )
    qlora = (*lora, "peft.quantization=4bit")
    acc = f"bs1, ga{effective}"
    frozen_note = "only the head trains"
    cut_note = f"inputs cut to {short} tokens"
    return [
        Rung("baseline", f"baseline (bs{batch}, ga{recipe.train.gradient_accumulation_steps}, len {length})", "-",
             no_peft, batch, recipe.train.gradient_accumulation_steps),
        Rung("accumulation", f"+ gradient accumulation ({acc})", "activations", accumulate, 1, effective),
        Rung("checkpointing", "+ gradient checkpointing", "activations", checkpoint, 1, effective),
        Rung(optimizer, "+ 8-bit AdamW" if eight_bit else "+ Adafactor", "optimizer states",
             cheap_optimizer, 1, effective),
        Rung("freeze", f"+ freeze the body ({layers} layer{'s' if layers != 1 else ''}, embeddings)", "gradients, optimizer states",
             freeze, 1, effective, frozen_note),
        Rung("max_length", f"+ max length {short}", "activations", shorter, 1, effective,
             f"{frozen_note}; {cut_note}"),
        Rung("lora", "LoRA instead of freezing", "gradients, optimizer states", lora, 1, effective,
             f"adapter only; {cut_note}"),
        Rung("qlora", "+ 4-bit base (QLoRA)", "weights", qlora, 1, effective, f"adapter only; {cut_note}"),
    ]


# ---------------------------------------------------------------------------------------------
# What the estimate reads from the model
# ---------------------------------------------------------------------------------------------


@dataclass
class ParamInfo:
    name: str
    shape: tuple[int, ...]
    elem: int  # bytes per element
    trainable: bool
    where: int  # -1: below the layers (embeddings), k: layer k, layers: above (head)
    lora: bool

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class ModelShape:
    """The sizes of a model that the estimate uses, read from a (meta) model."""

    model_class: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    gated_mlp: bool
    lm_head: bool
    embedding_norm: bool
    attn_implementation: str
    hidden_dropout: float
    attention_dropout: float
    head_per_token: bool = True  # the task head reads every token (False: one pooled vector per sequence)
    params: list[ParamInfo] = field(default_factory=list)
    lora: list[tuple[int, int, int, bool]] = field(default_factory=list)  # (layer, in_features, r, dropout)

    @property
    def total(self) -> int:
        return sum(p.numel for p in self.params)

    @property
    def trainable(self) -> int:
        return sum(p.numel for p in self.params if p.trainable)


def _config_value(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def model_shape(model: Any, head_per_token: bool = True) -> ModelShape:
    """Read a :class:`ModelShape` from a model (meta or real, with or without a peft wrapper).

    :param head_per_token: whether the task head reads every token (token labels, language
        models) or one vector per sequence (the task's peft task type says which: SEQ_CLS).
    """
    from nlptasks.engine.optimize import transformer_layers

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    _, blocks = transformer_layers(model)
    n_layers = len(blocks) or int(_config_value(config, "num_hidden_layers", default=0))
    hidden = int(_config_value(config, "hidden_size", "d_model", "n_embd", default=0))
    heads = int(_config_value(config, "num_attention_heads", "n_head", default=1))
    where: dict[int, int] = {}
    for k, block in enumerate(blocks):
        for p in block.parameters():
            where[id(p)] = k
    names = {id(m): n for n, m in model.named_modules()}
    block_names = [names.get(id(b), "") for b in blocks]
    params: list[ParamInfo] = []
    seen_layer = False
    for name, p in model.named_parameters():
        k = where.get(id(p))
        if k is not None:
            seen_layer = True
        else:
            k = n_layers if seen_layer else -1
        params.append(ParamInfo(name, tuple(p.shape), p.element_size(), p.requires_grad, k, "lora_" in name))
    lora = []
    for name, module in model.named_modules():
        adapters = getattr(module, "lora_A", None)
        if not adapters or not hasattr(adapters, "keys"):
            continue
        layer = next((k for k, prefix in enumerate(block_names) if prefix and name.startswith(prefix + ".")), -1)
        for key in adapters.keys():
            dropout = module.lora_dropout[key] if hasattr(module, "lora_dropout") else None
            p = float(getattr(dropout, "p", 0.0) or 0.0)
            lora.append((layer, int(module.in_features), int(module.r[key]), p > 0))
    layer0 = [p for p in params if p.where == 0]
    gated = any(re.search(r"gate", p.name) for p in layer0)
    intermediate = _config_value(config, "intermediate_size", "n_inner", "ffn_dim", default=None) or 4 * hidden
    below = [p for p in params if p.where == -1]
    embeddings = base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None
    vocab = int(embeddings.weight.shape[0]) if embeddings is not None else int(_config_value(config, "vocab_size", default=0))
    outputs = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    hidden_dropout = float(_config_value(config, "hidden_dropout_prob", "hidden_dropout", "resid_pdrop", "dropout", default=0.0))
    attention_dropout = float(
        _config_value(config, "attention_probs_dropout_prob", "attention_dropout", "attn_pdrop", default=0.0)
    )
    return ModelShape(
        model_class=type(base).__name__,
        layers=n_layers,
        hidden=hidden,
        heads=heads,
        kv_heads=int(_config_value(config, "num_key_value_heads", default=heads)),
        intermediate=int(intermediate),
        vocab=vocab,
        gated_mlp=gated,
        lm_head=outputs is not None,
        embedding_norm=any(len(p.shape) == 1 for p in below),
        attn_implementation=str(getattr(config, "_attn_implementation", None) or "eager"),
        hidden_dropout=hidden_dropout,
        attention_dropout=attention_dropout,
        head_per_token=head_per_token,
        params=params,
        lora=lora,
    )


# ---------------------------------------------------------------------------------------------
# The estimate
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The training settings the estimate depends on (from a rung's recipe: :func:`settings_of`)."""

    micro_batch: int
    accumulation: int
    seq_len: int
    checkpointing: bool = False
    optimizer: str = "adamw_torch"
    precision: str = "fp32"  # resolved: fp32, bf16 or fp16
    quantization: str = "none"
    double_quant: bool = True
    attention: str = "auto"
    device: str = "cpu"


def resolved_precision(precision: str, device: str) -> str:
    """``train.precision`` as it would resolve on ``device`` (``auto``: bf16 on CUDA, fp32 on CPU)."""
    if precision != "auto":
        return precision
    if device != "cuda":
        return "fp32"
    import torch

    if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        return "fp16"
    return "bf16"


def settings_of(recipe: Recipe, device: str) -> Settings:
    opt = recipe.optimize
    peft = recipe.peft
    return Settings(
        micro_batch=recipe.train.batch_size,
        accumulation=recipe.train.gradient_accumulation_steps,
        seq_len=recipe.model.max_length,
        checkpointing=opt.gradient_checkpointing,
        optimizer=opt.optimizer,
        precision=resolved_precision(recipe.train.precision, device),
        quantization=peft.quantization if peft is not None else "none",
        double_quant=peft.double_quant if peft is not None else True,
        attention=opt.attention,
        device=device,
    )


@dataclass
class Estimate:
    """Estimated bytes at the peak of a training step, by kind (see docs/plan.md)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    step_temporaries: int
    total: int
    parameters: int
    trainable: int
    saved: int = 0  # of the activations: the tensors autograd keeps between forward and backward

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def _optimizer_bytes(p: ParamInfo, optimizer: str) -> int:
    n = p.numel
    if optimizer in ("adamw_torch", "adamw_torch_fused"):
        return 2 * n * p.elem  # exp_avg and exp_avg_sq, in the parameter's dtype
    if optimizer == "adafactor":
        if len(p.shape) >= 2:  # factored second moment: one value per row and per column
            return (n // p.shape[-1] + n // p.shape[-2]) * p.elem
        return n * p.elem
    if optimizer == "adamw_8bit":
        if n >= 4096:  # bitsandbytes keeps small tensors in 32 bits
            return 2 * n + 2 * 4 * (n // 256 + 1)  # two 8-bit states and their block scales
        return 2 * n * 4
    return 2 * n * p.elem


def _weight_bytes(p: ParamInfo, s: Settings, layers: int) -> float:
    quantized = s.quantization != "none" and 0 <= p.where < layers and len(p.shape) == 2 and not p.lora
    if not quantized:
        return p.numel * p.elem
    if s.quantization == "8bit":
        return p.numel * (1 + 4 / 64)
    return p.numel * (0.5 + (1 / 64 + 4 / (64 * 256) if s.double_quant else 4 / 64))  # nf4 and its scales


def estimate(shape: ModelShape, s: Settings) -> Estimate:
    """Peak training memory of ``shape`` trained with ``s`` (bytes; the formulas: docs/plan.md)."""
    b, t, L = s.micro_batch, s.seq_len, shape.layers
    tokens = b * t
    h, i, a = shape.hidden, shape.intermediate, shape.heads
    layer_elem = next((p.elem for p in shape.params if 0 <= p.where < L and len(p.shape) == 2), 4)
    half = s.precision in HALF
    E = 2 if half else layer_elem  # bytes of one activation element
    mask = 1 if s.device == "cuda" else E  # dropout masks: bool on CUDA, the input's dtype on CPU
    Mh = mask if shape.hidden_dropout > 0 else 0
    Ma = mask if shape.attention_dropout > 0 else 0
    fused = (
        s.attention != "eager"
        and shape.attn_implementation in FUSED_ATTENTION
        and (s.device == "cuda" or shape.attention_dropout == 0)
    )
    kv = h * shape.kv_heads // max(1, a)
    # Per token and layer: inputs of the linear layers (kept only for their weight gradients) ...
    linear_inputs = E * (3 * h + i)
    # ... and what the backward pass needs to reach the layer's input: q, k, v, the two norm
    # inputs, dropout masks, the MLP's activation input(s), the attention probabilities.
    mlp = (3 if shape.gated_mlp else 1) * E * i
    if fused:
        attention = 4 * a  # fused kernels keep the output (counted above) and a log-sum-exp per head
    else:
        attention = a * t * (E + (Ma + E if shape.attention_dropout > 0 else 0))
    through = E * (h + 2 * kv + 2 * h) + 2 * Mh * h + mlp + attention
    lora_per_layer = [0] * L
    for layer, in_features, r, dropout in shape.lora:
        if 0 <= layer < L:
            lora_per_layer[layer] += (E + (mask if dropout else 0)) * in_features + E * r

    trainable = [p for p in shape.params if p.trainable]
    lowest = min((p.where for p in trainable), default=L + 1)
    if shape.lora:
        lowest = min(lowest, 0)
    full = {p.where for p in trainable if not p.lora and len(p.shape) >= 2 and 0 <= p.where < L}
    per_layer = []
    for k in range(L):
        if k < lowest:
            per_layer.append(0)  # below every trainable parameter: no gradient passes, nothing kept
        else:
            per_layer.append(through + (linear_inputs if k in full else 0) + lora_per_layer[k])
    in_path = [k for k in range(L) if k >= lowest]
    if s.checkpointing:  # only each layer's input is kept; backward recomputes one layer at a time
        kept, recomputed = len(in_path) * E * h, max(per_layer, default=0)
    else:
        kept, recomputed = sum(per_layer), 0
    embeddings = ((E * h if shape.embedding_norm else 0) + Mh * h) if lowest < 0 else 0
    norm_input = E * h if lowest < L else 0  # the final norm's input, when a gradient passes it
    if shape.lm_head:  # the head's input, the fp32 log-softmax of the logits; their gradients
        head = tokens * (norm_input + E * h + 4 * shape.vocab)
        head_working = tokens * shape.vocab * (4 + E)
    else:
        head = (tokens if shape.head_per_token else b) * (E + Mh) * h
        head_working = 0
    working = max(2 * tokens * E * max(i, h, 0 if fused else a * t) if in_path else 0, head_working)
    copies = 0
    if half and layer_elem == 4:  # autocast keeps a half copy of each weight a kept matmul uses
        by_layer = [sum(p.numel for p in shape.params if p.where == k and len(p.shape) == 2) for k in in_path]
        copies = 2 * (max(by_layer, default=0) if s.checkpointing else sum(by_layer))
    saved = tokens * (kept + embeddings) + head
    activations = saved + tokens * recomputed + working + copies

    weights = int(sum(_weight_bytes(p, s, L) for p in shape.params))
    gradients = sum(p.numel * p.elem for p in trainable)
    optimizer = sum(_optimizer_bytes(p, s.optimizer) for p in trainable)
    largest = max((p.numel for p in trainable), default=0)
    if s.optimizer == "adamw_torch":
        temporaries = 4 * shape.trainable if s.device == "cuda" else 2 * 4 * largest  # foreach on CUDA
    elif s.optimizer == "adafactor":
        temporaries = 3 * 4 * largest
    elif s.optimizer == "adamw_8bit":
        temporaries = 4 * largest
    else:
        temporaries = 0
    # Gradients are set to None after each optimizer step: without accumulation they grow while
    # the activations are freed; with accumulation they are all there during the next forward.
    backward = activations + gradients if s.accumulation > 1 else max(activations, gradients)
    total = weights + optimizer + max(backward, gradients + temporaries)
    return Estimate(
        weights=weights, gradients=gradients, optimizer=optimizer, activations=int(activations),
        step_temporaries=temporaries, total=int(total), parameters=shape.total, trainable=shape.trainable,
        saved=int(saved),
    )


# ---------------------------------------------------------------------------------------------
# The plan of a recipe
# ---------------------------------------------------------------------------------------------


@dataclass
class PlanRow:
    rung: Rung
    estimate: Estimate | None
    settings: Settings | None
    needs: str = ""  # why the rung cannot run on the target device ("" when it can)
    shape: ModelShape | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self.rung),
            "overrides": list(self.rung.overrides),
            "estimate": self.estimate.to_json() if self.estimate else None,
            "needs": self.needs or None,
        }


@dataclass
class Plan:
    recipe: str
    device: str
    model_class: str
    rows: list[PlanRow]
    effective_batch: int
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "device": self.device,
            "model_class": self.model_class,
            "effective_batch": self.effective_batch,
            "rungs": [row.to_json() for row in self.rows],
            "notes": self.notes,
        }


def _needs(recipe: Recipe, cuda: bool, bitsandbytes: bool) -> str:
    """Why a rung cannot run on the target machine, shortly ("" when it can)."""
    from nlptasks.engine.adapters import machine_problems

    problems = machine_problems(recipe, cuda=cuda, bitsandbytes=bitsandbytes)
    reasons: list[str] = []
    for p in problems:
        text = p.message
        if "CUDA" in text and not cuda and "CUDA" not in reasons:
            reasons.append("CUDA")
        if "bitsandbytes" in text and not bitsandbytes and "bitsandbytes" not in reasons:
            reasons.append("bitsandbytes")
        if "pretrained base" in text:
            reasons.append("a pretrained base")
    if problems and not reasons:
        return f"cannot run here: {problems[0].where}: {problems[0].message}"
    return "needs " + ", ".join(reasons) if reasons else ""


def meta_model(loaded: LoadedRecipe) -> tuple[Any, Any, Any]:
    """Steps 1 to 4 of the recipe (throw-away folder), then step 5 on the meta device.

    Returns ``(ctx, data, model)``.  A plugin that builds its model without
    :func:`~nlptasks.engine.modeling.load_model` still builds it inside ``torch.device("meta")``.
    """
    import torch

    from nlptasks.engine.inspect import preprocessed
    from nlptasks.engine.modeling import ON_META
    from nlptasks.plugins import get_host

    host = get_host()
    ctx, data = preprocessed(loaded, host)
    ctx.state[ON_META] = True
    hooks = host.hooks_for(loaded.task)
    with torch.device("meta"):
        model = hooks.nlptasks_build_model(ctx=ctx)
    if model is None:
        raise NlptasksError(f"step 5 built no model for task {loaded.task.name!r}")
    return ctx, data, model


def rung_model(ctx: Any, base: Any, loaded: LoadedRecipe) -> Any:
    """A copy of the meta ``base`` model with the rung's freezing and adapter applied, by the
    engine's own code (``prepare_model``; peft's ``get_peft_model`` with the run's config)."""
    import logging

    from nlptasks.engine.optimize import prepare_model

    model = copy.deepcopy(base)
    ctx.recipe, ctx.options = loaded.recipe, loaded.options
    level = ctx.log.level
    ctx.log.setLevel(logging.WARNING)  # the freezing log line of every rung is noise here
    try:
        model = prepare_model(ctx, model)
    finally:
        ctx.log.setLevel(level)
    peft = loaded.recipe.peft
    if peft is not None:
        from peft import get_peft_model

        from nlptasks.engine.adapters import _quiet_peft, peft_config

        task_type = loaded.task.peft_task_type_for(loaded.options)
        with _quiet_peft():
            model = get_peft_model(model, peft_config(ctx, model, task_type))
    return model


def make_plan(
    path: str, overrides: list[str], device: str | None = None, rungs: list[str] | None = None
) -> Plan:
    """The ladder of the recipe at ``path`` (with ``overrides``) and an estimate for every rung.

    :param device: ``cuda`` or ``cpu`` (default: this machine's).
    :param rungs: only these rung names (default: all).
    """
    import torch

    from nlptasks.recipe import load_recipe

    here = "cuda" if torch.cuda.is_available() else "cpu"
    device = device or here
    bitsandbytes = importlib.util.find_spec("bitsandbytes") is not None
    loaded = load_recipe(path, overrides)
    ctx, _, base = meta_model(loaded)
    layers = model_shape(base).layers
    if not layers:
        raise NlptasksError(f"{type(base).__name__}: no stack of transformer layers found; the ladder needs one")
    task_type = loaded.task.peft_task_type_for(loaded.options)
    per_token = task_type not in ("SEQ_CLS", "FEATURE_EXTRACTION")  # the task's own word, no task names
    rows = []
    notes = list(loaded.notes)
    for rung in ladder(loaded.recipe, layers, device, bitsandbytes):
        if rungs and rung.name not in rungs:
            continue
        try:
            rung_loaded = load_recipe(path, [*overrides, *rung.overrides])
        except NlptasksError as exc:
            rows.append(PlanRow(rung, None, None, needs=exc.render().splitlines()[0]))
            continue
        needs = _needs(rung_loaded.recipe, cuda=device == "cuda", bitsandbytes=bitsandbytes)
        try:
            model = rung_model(ctx, base, rung_loaded)
        except NlptasksError as exc:
            rows.append(PlanRow(rung, None, None, needs=exc.render().splitlines()[0]))
            continue
        shape = model_shape(model, head_per_token=per_token)
        settings = settings_of(rung_loaded.recipe, device)
        rows.append(PlanRow(rung, estimate(shape, settings), settings, needs, shape))
    effective = loaded.recipe.train.batch_size * loaded.recipe.train.gradient_accumulation_steps
    return Plan(str(path), device, model_shape(base).model_class, rows, effective, notes)


# ---------------------------------------------------------------------------------------------
# Choosing a rung for a budget
# ---------------------------------------------------------------------------------------------


@dataclass
class Choice:
    row: PlanRow
    micro_batch: int
    accumulation: int
    estimate: Estimate

    def overrides(self) -> list[str]:
        sets = [o for o in self.row.rung.overrides if not o.startswith(("train.batch_size=", "train.gradient_accumulation_steps="))]
        if self.row.rung.name != "baseline" or self.micro_batch != self.row.rung.micro_batch:
            sets += [f"train.batch_size={self.micro_batch}", f"train.gradient_accumulation_steps={self.accumulation}"]
        return sets


def choose(plan: Plan, budget: int) -> Choice | None:
    """The first rung (ladder order: the fastest) whose estimate fits ``budget`` bytes and that can
    run on the plan's device; for rungs with accumulation, the largest micro-batch that still fits
    (a divisor of the effective batch, so the effective batch stays the same)."""
    import dataclasses

    for row in plan.rows:
        if row.estimate is None or row.needs or row.shape is None or row.settings is None:
            continue
        if row.estimate.total > budget:
            continue
        if row.rung.name == "baseline":
            return Choice(row, row.rung.micro_batch, row.rung.accumulation, row.estimate)
        effective = row.rung.micro_batch * row.rung.accumulation
        for micro in sorted((d for d in range(1, effective + 1) if effective % d == 0), reverse=True):
            s = dataclasses.replace(row.settings, micro_batch=micro, accumulation=effective // micro)
            est = estimate(row.shape, s)
            if est.total <= budget:
                return Choice(row, micro, effective // micro, est)
    return None


# ---------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """``24GiB``, ``24GB``, ``24G``, ``24``, ``800MiB``: bytes.  G, GB and a bare number are taken as
    GiB (the way GPU memory is quoted); K, M and T likewise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(?:([KMGT])i?B?|(B))?\s*", text, flags=re.IGNORECASE)
    if not m:
        raise NlptasksError(f"--gpu-mem {text!r}: expected a size such as 24GiB, 80GB or 512MiB")
    value = float(m.group(1))
    if m.group(3):
        return int(value)
    unit = (m.group(2) or "G").upper()
    return int(value * {"K": 1024, "M": MIB, "G": GIB, "T": 1024 * GIB}[unit])


def human(n: float | None) -> str:
    if n is None:
        return "-"
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.0f} KiB"
    return f"{n:.0f} B"


def table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[c]) for r in rows)) if rows else len(h) for c, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def plan_text(plan: Plan, measured: dict[str, dict[str, Any]] | None = None, measure_label: str = "") -> str:
    headers = ["rung", "targets", "batch", "params (trainable)", "weights", "grads", "optimizer", "activations", "total"]
    if measured is not None:
        headers.append(measure_label or "measured")
    headers.append("note")
    rows = []
    for row in plan.rows:
        r, e = row.rung, row.estimate
        cells = [
            r.label,
            r.targets,
            f"{r.micro_batch}x{r.accumulation}",
            f"{e.parameters:,} ({e.trainable:,})" if e else "-",
            human(e.weights if e else None),
            human(e.gradients if e else None),
            human(e.optimizer if e else None),
            human(e.activations if e else None),
            human(e.total if e else None),
        ]
        note = [row.needs, r.changes]
        if measured is not None:
            m = measured.get(r.name) or {}
            cells.append(human(m["peak"]) if m.get("peak") is not None else "skipped")
            if m.get("peak") is None and m.get("skipped") and m.get("skipped") != row.needs:
                note.insert(0, str(m["skipped"]))
        cells.append("; ".join(n for n in note if n))
        rows.append(cells)
    return table(headers, rows, right={2, 4, 5, 6, 7, 8} | ({9} if measured is not None else set()))
