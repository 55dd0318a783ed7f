"""The estimate of peak training memory: what it reads from the (meta) model, and the formulas
(docs/plan.md): weights, gradients, optimizer states and activations per rung."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nlptasks.recipe import Recipe

__all__ = ["GIB", "MIB", "Estimate", "ModelShape", "ParamInfo", "Settings", "estimate", "model_shape", "settings_of"]

GIB = 1024**3
MIB = 1024**2

HALF = ("bf16", "fp16")
FUSED_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


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
    from nlptasks.engine.training.optimize import transformer_layers

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
    vocab = (
        int(embeddings.weight.shape[0])
        if embeddings is not None
        else int(_config_value(config, "vocab_size", default=0))
    )
    outputs = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    hidden_dropout = float(
        _config_value(config, "hidden_dropout_prob", "hidden_dropout", "resid_pdrop", "dropout", default=0.0)
    )
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
    shards: int = 1  # FSDP (train.extra.fsdp): the ranks weights, gradients and optimizer states are sharded over
    zero: int = 0  # DeepSpeed ZeRO stage (train.zero or train.extra.deepspeed), over ``ranks`` processes
    ranks: int = 1


def resolved_precision(precision: str, device: str, pretrained: bool = True) -> str:
    """``train.precision`` as it would resolve on ``device`` (``auto``: the engine's
    :func:`nlptasks.engine.training.trainer.auto_precision`)."""
    if precision != "auto":
        return precision
    from nlptasks.engine.training.trainer import auto_precision

    return auto_precision(device, pretrained)


def settings_of(recipe: Recipe, device: str, nproc: int = 1) -> Settings:
    """The estimate's settings of ``recipe`` on ``device``, run on ``nproc`` processes (with
    ``train.extra.fsdp`` FSDP shards over them; plain DDP keeps a full copy on every rank)."""
    from nlptasks.engine.training.optimize import resolve_optimizer

    opt = recipe.optimize
    peft = recipe.peft
    return Settings(
        micro_batch=recipe.train.batch_size,
        accumulation=recipe.train.gradient_accumulation_steps,
        seq_len=recipe.model.max_length,
        checkpointing=opt.gradient_checkpointing,
        optimizer=resolve_optimizer(opt.optimizer, device),
        precision=resolved_precision(recipe.train.precision, device, recipe.model.name_or_path is not None),
        quantization=peft.quantization if peft is not None else "none",
        double_quant=peft.double_quant if peft is not None else True,
        attention=opt.attention,
        device=device,
        shards=max(1, nproc) if recipe.train.extra.get("fsdp") else 1,
        zero=zero_stage(recipe),
        ranks=max(1, nproc),
    )


def zero_stage(recipe: Recipe) -> int:
    """The DeepSpeed ZeRO stage of ``recipe``: ``train.zero``, or ``zero_optimization.stage`` of
    ``train.extra.deepspeed`` (a table or a readable JSON file); 0 without DeepSpeed."""
    if recipe.train.zero is not None:
        return int(recipe.train.zero)
    config = recipe.train.extra.get("deepspeed")
    if isinstance(config, str):
        import json
        from pathlib import Path

        try:
            config = json.loads(Path(config).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return 0
    stage = (config.get("zero_optimization") or {}).get("stage", 0) if isinstance(config, dict) else 0
    return int(stage) if isinstance(stage, int) and 0 <= stage <= 3 else 0


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


ZERO_BUCKET = 500_000_000
"""DeepSpeed's default ``reduce_bucket_size`` (elements): gradients are reduced through a buffer of
up to this size (ZeRO-2 and 3)."""
ZERO_PERSISTENCE = 100_000
"""DeepSpeed's default ``stage3_param_persistence_threshold`` (elements): under ZeRO-3 a parameter
smaller than this stays whole on every rank."""


def _zero(
    shape: ModelShape, s: Settings, weights: int, gradients: int, optimizer: int, temporaries: int
) -> tuple[int, int, int, int]:
    """One rank's weights, gradients, optimizer states and step temporaries under DeepSpeed ZeRO
    stage ``s.zero`` over ``s.ranks`` processes (DeepSpeed's defaults).  Every stage keeps an fp32
    copy of the rank's partition of the trainable weights (its optimizer's master weights, a copy
    even when the model is fp32) and 1/N of the optimizer states; stage 1 keeps the full gradients,
    stages 2 and 3 1/N of them plus the reduce buffer (the gradients' size at most); stage 3 also
    keeps 1/N of the weights, plus the parameters under the persistence threshold whole and one
    transformer layer gathered (two: the next is prefetched), but never less than the whole model,
    which every rank builds before ZeRO partitions it (no ``zero.Init``)."""
    n = s.ranks
    trainable = [p for p in shape.params if p.trainable]
    master = sum(p.numel for p in trainable) * 4 // n
    optimizer //= n
    temporaries //= n
    if s.zero >= 2:
        largest_bucket = ZERO_BUCKET * max((p.elem for p in trainable), default=4)
        gradients = gradients // n + min(gradients, largest_bucket)
    if s.zero == 3:
        layers = shape.layers
        large = [p for p in shape.params if p.numel >= ZERO_PERSISTENCE]
        unit = max((sum(_weight_bytes(p, s, layers) for p in large if p.where == k) for k in range(layers)), default=0)
        small = weights - sum(_weight_bytes(p, s, layers) for p in large)  # kept whole on every rank
        # the engine builds the whole model on every rank (step 5) before ZeRO partitions it
        # (DeepSpeed's zero.Init does not apply): the full weights are there once, at the start
        weights = max(weights, int((weights - small) / n + small + 2 * unit))
    return weights + master, gradients, optimizer, temporaries


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
    if s.shards > 1:
        # FSDP (full shard): each rank keeps 1/shards of the weights, gradients and optimizer states;
        # a unit (one transformer layer; the embeddings and head together) is gathered whole for its
        # forward and backward, with the next one prefetched, and its full gradient exists until it
        # is reduce-scattered.
        units: dict[int, list[ParamInfo]] = {}
        for p in shape.params:
            units.setdefault(p.where if 0 <= p.where < L else -1, []).append(p)
        unit_weights = max((sum(_weight_bytes(p, s, L) for p in ps) for ps in units.values()), default=0)
        unit_grads = max((sum(p.numel * p.elem for p in ps if p.trainable) for ps in units.values()), default=0)
        weights = int(weights / s.shards + 2 * unit_weights)
        gradients = gradients // s.shards + unit_grads
        optimizer //= s.shards
        temporaries //= s.shards
    if s.zero and s.ranks > 1:
        weights, gradients, optimizer, temporaries = _zero(shape, s, weights, gradients, optimizer, temporaries)
    # Gradients are set to None after each optimizer step: without accumulation they grow while
    # the activations are freed; with accumulation they are all there during the next forward.
    backward = activations + gradients if s.accumulation > 1 else max(activations, gradients)
    total = weights + optimizer + max(backward, gradients + temporaries)
    return Estimate(
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        activations=int(activations),
        step_temporaries=temporaries,
        total=int(total),
        parameters=shape.total,
        trainable=shape.trainable,
        saved=int(saved),
    )
