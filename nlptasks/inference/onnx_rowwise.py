"""``--quantize int8``: int8 linear layers whose activations are quantized one token at a time.

Every ``MatMul`` of the fp32 graph with a constant 2-D float weight ``W`` (``K x N``) becomes an
integer matrix product:

* **weights**: int8 with one scale per output column (``QInt8``: symmetric; ``QUInt8``: the same
  values shifted by a zero point of 128, for CPUs without VNNI, where onnxruntime's u8 x s8
  kernels saturate);
* **activations**: each row of the input (one token) is quantized to uint8 with its own scale and
  zero point, computed at run time from that row alone: ``lo = min(0, min x)``, ``hi = max(0,
  max x)``, ``scale = (hi - lo) / 255``.  Nothing depends on the other rows of a batch or on how
  far a row is padded, so a row's answer is the same in any batch;
* **smoothing** (SmoothQuant, Xiao et al. 2023): a few channels of a transformer's activations are
  far larger than the rest, and one scale per token would spend its 256 levels on them.  Each input
  channel ``j`` is divided by ``s_j = amax_j ** alpha / wmax_j ** (1 - alpha)`` and row ``j`` of the
  weight multiplied by it (the product is unchanged), where ``amax_j`` is the channel's largest
  magnitude over the calibration rows (the run's own training rows, fed through its predictor as
  for static int8) and ``wmax_j`` the weight row's.  The divisors are constants of the graph.

The product is ``y = scale_row * (scale_col * (q . Wq) - zero_row * scale_col * colsum(Wq))``:
onnxruntime's ``MatMulIntegerToFloat`` (a contrib op: the graph is for onnxruntime) computes
``scale_col * (q . Wq)`` in one kernel; it takes one scale and zero point for the whole of ``q``,
so each row's zero point is taken out through the weight's column sums and its scale applied
after.  (With ``MatMulInteger`` and separate ``Cast``/``Mul`` nodes the same graph ran 25% slower.)  Layers that read the same input (a
layer's query, key and value) share one quantization of it.  Embedding tables (a ``Gather`` from
a constant 2-D float table) are stored as int8 with one scale per row and turned back into floats
after the lookup: the file is about 1/4 of fp32's for MiniLM (it is mostly its 30,522-word table).
``Gemm`` (the pooler and classifier heads) and weights computed in the graph stay fp32.

Measured 2026-11-27 (docs/onnx.md, ``benchmarks/onnx_int8.py``): MiniLM-L6 fine-tuned on 4,000
SST-2 rows, against its fp32 graph (test accuracy 0.8248), 1 thread, rows per CPU second:

=======================================  ===========================  ========  ==================
int8                                     labels changed (1,821 test)  accuracy  batched / one by one
=======================================  ===========================  ========  ==================
per token, smoothed (``int8``)           11                           0.8276    376 / 235
static, one scale per tensor             100                          0.8127    365 / 249
(``int8-static``)
=======================================  ===========================  ========  ==================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.errors import NlptasksError

__all__ = ["SMOOTHING_ALPHA", "quantize_rowwise_int8"]

SMOOTHING_ALPHA = 0.5
"""SmoothQuant's migration strength: how much of each channel's range moves into the weights (0:
none, 1: all).  0.5 is the paper's default for encoders; on SST-2 MiniLM (prototype with fp32
embedding tables) 0.3 changed 2 of 872 validation labels against fp32, 0.5 none, 0.8 eight, and
no smoothing seven."""

_EPS = 1e-8
"""The smallest activation scale (a row of zeros quantizes to zeros instead of dividing by 0)."""


def _linear_layers(graph: Any, weights: dict[str, Any]) -> dict[str, list[tuple[int, Any]]]:
    """``{input name: [(position, MatMul node)]}``: the graph's MatMuls with a constant 2-D float32
    weight (one of ``weights``, the graph's initializers by name), grouped by the tensor they
    multiply (in graph order)."""
    from onnx import TensorProto

    groups: dict[str, list[tuple[int, Any]]] = {}
    for position, node in enumerate(graph.node):
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        if weight is not None and len(weight.dims) == 2 and weight.data_type == TensorProto.FLOAT:
            groups.setdefault(node.input[0], []).append((position, node))
    return groups


def _embeddings(graph: Any, tables: dict[str, Any], b: _Builder) -> dict[int, list[Any]]:
    """``{position of the node: its replacement}`` for every lookup in a constant 2-D float32 table
    (one of ``tables``, the graph's initializers by name; ``Gather`` on axis 0): the table stored as
    int8 with one scale per row, the looked-up rows scaled back."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    replaced: dict[int, list[Any]] = {}
    for position, node in enumerate(graph.node):
        table = tables.get(node.input[0]) if node.op_type == "Gather" else None
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if table is None or len(table.dims) != 2 or table.data_type != TensorProto.FLOAT or axis != 0:
            continue
        p = f"emb{len(replaced)}"
        values = numpy_helper.to_array(table).astype(np.float64)
        scale = np.maximum(np.abs(values).max(axis=1), 1e-12) / 127.0
        b.const(f"{p}.q", np.clip(np.round(values / scale[:, None]), -127, 127).astype(np.int8))
        b.const(f"{p}.scale", scale.astype(np.float32)[:, None])
        replaced[position] = [
            b.node("Gather", [f"{p}.q", node.input[1]], f"{p}.rows"),
            b.node("Cast", [f"{p}.rows"], f"{p}.float", to=TensorProto.FLOAT),
            b.node("Gather", [f"{p}.scale", node.input[1]], f"{p}.rowscale"),
            b.node("Mul", [f"{p}.float", f"{p}.rowscale"], node.output[0]),
        ]
    return replaced


def _channel_maxima(model: Any, names: list[str], feeds: list[dict[str, Any]]) -> dict[str, Any]:
    """``{name: largest |value| of each channel}`` of the graph's tensors ``names`` over ``feeds``."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in names:
        probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    maxima: dict[str, Any] = {}
    for feed in feeds:
        for name, value in zip(names, session.run(names, feed), strict=True):
            largest = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
            maxima[name] = largest if name not in maxima else np.maximum(maxima[name], largest)
    return maxima


class _Builder:
    """New nodes and constants for the rewritten graph, named under one prefix."""

    def __init__(self) -> None:
        self.constants: list[Any] = []

    def const(self, name: str, value: Any) -> str:
        from onnx import numpy_helper

        self.constants.append(numpy_helper.from_array(value, name))
        return name

    @staticmethod
    def node(op: str, inputs: list[str], output: str, **attributes: Any) -> Any:
        from onnx import helper

        return helper.make_node(op, inputs, [output], **attributes)


def _quantize_rows(b: _Builder, x: str, width: int, p: str, opset: int) -> tuple[list[Any], str, str, str]:
    """Nodes quantizing ``x`` (``[..., width]``) one row at a time; returns ``(nodes, q, scale,
    zero)``: the uint8 rows, their scales and their zero points (as floats), both ``[..., 1]``."""
    import numpy as np
    from onnx import TensorProto

    n = b.node
    # opset 18 made the reductions' axes an input
    axes: dict[str, Any] = {"keepdims": 0, **({"axes": [-1]} if opset < 18 else {})}
    rows = [f"{p}.rows", *(["rw.last"] if opset >= 18 else [])]
    return (
        [
            n("Shape", [x], f"{p}.shape"),
            n("Slice", [f"{p}.shape", "rw.first", "rw.last"], f"{p}.lead"),
            n("Concat", [f"{p}.lead", "rw.single"], f"{p}.column", axis=0),
            n("Reshape", [x, b.const(f"{p}.flat", np.array([-1, width], np.int64))], f"{p}.rows"),
            n("ReduceMax", rows, f"{p}.hi0", **axes),
            n("ReduceMin", rows, f"{p}.lo0", **axes),
            n("Max", [f"{p}.hi0", "rw.zero"], f"{p}.hi"),
            n("Min", [f"{p}.lo0", "rw.zero"], f"{p}.lo"),
            n("Sub", [f"{p}.hi", f"{p}.lo"], f"{p}.range"),
            n("Div", [f"{p}.range", "rw.levels"], f"{p}.scale0"),
            n("Max", [f"{p}.scale0", "rw.eps"], f"{p}.scale1"),
            n("Div", [f"{p}.lo", f"{p}.scale1"], f"{p}.zlo"),
            n("Neg", [f"{p}.zlo"], f"{p}.zneg"),
            n("Round", [f"{p}.zneg"], f"{p}.zero1"),
            n("Cast", [f"{p}.zero1"], f"{p}.zero8", to=TensorProto.UINT8),
            n("QuantizeLinear", [f"{p}.rows", f"{p}.scale1", f"{p}.zero8"], f"{p}.q2", axis=0),
            n("Reshape", [f"{p}.q2", f"{p}.shape"], f"{p}.q"),
            n("Reshape", [f"{p}.scale1", f"{p}.column"], f"{p}.scale"),
            n("Reshape", [f"{p}.zero1", f"{p}.column"], f"{p}.zero"),
        ],
        f"{p}.q",
        f"{p}.scale",
        f"{p}.zero",
    )


def _integer_product(
    b: _Builder, node: Any, weight: Any, q: str, scale: str, zero: str, p: str, signed: bool
) -> list[Any]:
    """Nodes computing ``node``'s output from the quantized rows ``q`` and ``weight`` (float64,
    smoothed): the weight quantized per column; onnxruntime's ``MatMulIntegerToFloat`` multiplies
    and applies the column scales in one kernel; the rows' zero points are taken out through the
    weight's (scaled) column sums, then each row is scaled by its own scale."""
    import numpy as np

    col_scale = np.maximum(np.abs(weight).max(axis=0), 1e-12) / 127.0
    wq = np.clip(np.round(weight / col_scale), -127, 127)
    b.const(f"{p}.colscale", col_scale.astype(np.float32))
    b.const(f"{p}.colsum", (wq.sum(axis=0) * col_scale).astype(np.float32))
    if signed:
        inputs = [q, b.const(f"{p}.w", wq.astype(np.int8)), "rw.one", f"{p}.colscale"]
    else:  # uint8 weights, zero point 128: the same products
        inputs = [q, b.const(f"{p}.w", (wq + 128).astype(np.uint8)), "rw.one", f"{p}.colscale", "", "rw.u128"]
    n = b.node
    return [
        n("MatMulIntegerToFloat", inputs, f"{p}.float", domain="com.microsoft"),
        n("Mul", [zero, f"{p}.colsum"], f"{p}.zcs"),
        n("Sub", [f"{p}.float", f"{p}.zcs"], f"{p}.centred"),
        n("Mul", [f"{p}.centred", scale], node.output[0]),
    ]


def quantize_rowwise_int8(
    fp32: Path, out: Path, feeds: list[dict[str, Any]], weight_type: str, alpha: float = SMOOTHING_ALPHA
) -> dict[str, Any]:
    """Write ``out``: ``fp32`` with every linear layer an int8 product whose activations are
    quantized per token (smoothing calibrated on ``feeds``); returns what the manifest records."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    if not 0.0 <= alpha <= 1.0:
        raise NlptasksError(f"smoothing alpha {alpha}: give a number from 0 to 1 (default {SMOOTHING_ALPHA})")
    model = onnx.load(str(fp32))
    graph = model.graph
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 13:
        raise NlptasksError(
            f"--quantize int8 needs opset 13 or later (per-axis QuantizeLinear); {fp32.name} has {opset}"
        )
    weights = {i.name: i for i in graph.initializer}
    groups = _linear_layers(graph, weights)
    if not groups:
        raise NlptasksError(
            f"--quantize int8: {fp32.name} has no linear layer with a constant weight (MatMul) to quantize",
            hint="Export fp32 (--quantize none).",
        )
    if alpha > 0 and not feeds:
        raise NlptasksError("--quantize int8: no calibration inputs to measure the activations' channels on")
    maxima = _channel_maxima(model, list(groups), feeds) if alpha > 0 else {}
    b = _Builder()
    for name, number in (("rw.zero", 0.0), ("rw.levels", 255.0), ("rw.eps", _EPS), ("rw.one", 1.0)):
        b.const(name, np.array(number, np.float32))
    for name, axis in (("rw.first", 0), ("rw.last", -1), ("rw.single", 1)):
        b.const(name, np.array([axis], np.int64))
    b.const("rw.u128", np.array(128, np.uint8))
    embeddings = _embeddings(graph, weights, b)
    replaced = dict(embeddings)
    for g, (x, nodes) in enumerate(groups.items()):
        p = f"rw{g}"
        matrices = [numpy_helper.to_array(weights[node.input[1]]).astype(np.float64) for _, node in nodes]
        new: list[Any] = []
        source = x
        if alpha > 0:
            wmax = np.max([np.abs(m).max(axis=1) for m in matrices], axis=0)
            smooth = np.maximum(maxima[x], 1e-5) ** alpha / np.maximum(wmax, 1e-5) ** (1 - alpha)
            matrices = [m * smooth[:, None] for m in matrices]
            new.append(b.node("Mul", [x, b.const(f"{p}.unsmooth", (1.0 / smooth).astype(np.float32))], f"{p}.x"))
            source = f"{p}.x"
        nodes_q, q, scale, zero = _quantize_rows(b, source, matrices[0].shape[0], p, opset)
        replaced[nodes[0][0]] = new + nodes_q
        for j, ((position, node), matrix) in enumerate(zip(nodes, matrices, strict=True)):
            product = _integer_product(b, node, matrix, q, scale, zero, f"{p}.{j}", weight_type == "QInt8")
            replaced.setdefault(position, []).extend(product)
    rewritten = [new for position, node in enumerate(graph.node) for new in replaced.get(position, [node])]
    used = {name for node in rewritten for name in node.input}
    kept = [i for i in [*graph.initializer, *b.constants] if i.name in used]
    del graph.node[:]
    graph.node.extend(rewritten)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(out))
    layers = sum(len(nodes) for nodes in groups.values())
    return {
        "method": "per-token",
        "activations": "QUInt8, scale and zero point of each token computed from that token at run time",
        "weights": f"{weight_type}, per channel",
        "ops": ["MatMul", "Gather"],
        "layers": layers,
        "embeddings": len(embeddings),
        "smoothing": {"method": "SmoothQuant", "alpha": alpha} if alpha > 0 else None,
        "batch_independent": True,
    }
