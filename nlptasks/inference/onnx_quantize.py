"""int8 quantization of an exported graph (``nlptasks export RUN --onnx OUT --quantize ...``).

``int8`` (the default int8 since 2026-11-27): activations quantized one token at a time, with
SmoothQuant divisors calibrated on the run's rows (:mod:`nlptasks.inference.onnx_rowwise`).  It
changed 11 of 1,821 SST-2 MiniLM test labels against fp32, where ``int8-static`` changed 100.

``int8-static`` (the default int8 from 2026-11-26 to 2026-11-27): onnxruntime's static
quantization (``quantize_static``, QDQ format).
The inputs of every ``MatMul``/``Gemm`` with a constant weight are quantized to unsigned int8 with
one fixed scale and zero point each, calibrated before the export on up to
:data:`CALIBRATION_ROWS` rows of the run's own training file (else validation, else test), fed
through the task's own predictor one row at a time (:func:`calibration_feeds`): the model inputs
calibrated on are what inference makes of a row (windows, pairs, both sides of a bi-encoder).
Weights are int8 with one scale per output channel.  Nothing depends on the other rows of a
batch, so a row's labels and scores are the same in any batch; but one fixed scale per tensor
is coarse: on SST-2 MiniLM it changed 41 of 872 validation labels, so the export rarely agrees
with the run (docs/onnx.md).

``int8-dynamic``: onnxruntime's dynamic quantization (``quantize_dynamic``), the exporter's int8
before 2026-11-26: each batch's activations are quantized with a scale computed from that batch,
so a row's scores depend on the rows batched with it (SST-2 MiniLM: 36 of 1,821 labels differed
between batches of 32 and one at a time).  Kept for comparison, opt-in only.

Figures (2026-11-26; docs/onnx.md): see :mod:`nlptasks.inference.onnx_export`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nlptasks.errors import NlptasksError
from nlptasks.inference.onnx_backend import OnnxModel

__all__ = [
    "CALIBRATION_METHOD",
    "CALIBRATION_ROWS",
    "QUANTIZE",
    "calibration_feeds",
    "calibration_rows",
    "quantize_dynamic_int8",
    "quantize_static_int8",
]

QUANTIZE = ("none", "int8", "int8-static", "int8-dynamic")
"""``--quantize``: ``none`` (fp32), ``int8`` (activation scales per token, batch-independent),
``int8-static`` (one calibrated scale per tensor, batch-independent), ``int8-dynamic``
(activation scales per batch: a row's scores depend on its batch)."""

CALIBRATION_ROWS = 128
"""Rows of the run's data that calibrate ``--quantize int8`` (its smoothing) and ``int8-static``
(its activation scales)."""

_OPS = ("MatMul", "Gemm", "Gather")
"""What ``--quantize int8-static`` quantizes: the linear layers (inputs and weights) and the embedding
tables (weights only: 59.0 MB instead of 23.3 MB for MiniLM without them)."""

CALIBRATION_METHOD = "MinMax"
"""onnxruntime's calibration method for ``--quantize int8-static`` (see docs/onnx.md for MinMax vs Percentile)."""


def calibration_rows(manifest: dict[str, Any], limit: int) -> tuple[str | None, str | None, list[Any]]:
    """``(split, file, rows)``: up to ``limit`` rows of the run's training file (else validation,
    else test), as the dicts a predictor takes; ``(None, None, [])`` when none is a local file."""
    from nlptasks.inference.streaming import run_rows

    return run_rows(manifest, limit, ("train", "validation", "test"))


class _Recorder(OnnxModel):
    """The fp32 graph, keeping every feed it is called with (what calibration runs on)."""

    def __init__(self, path: Path, config: Any) -> None:
        super().__init__(path, config, threads=1)
        self.feeds: list[dict[str, Any]] = []

    def __call__(self, **inputs: Any) -> Any:
        self.feeds.append(self.feed(**inputs))
        return super().__call__(**inputs)


def calibration_feeds(
    run_dir: Path,
    fp32: Path,
    config: Any,
    manifest: dict[str, Any],
    rows: int,
    adapter: str | None = None,
    quantize: str = "int8",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(feeds, source)``: the graph's inputs for up to ``rows`` rows of the run's data, as the
    run's own predictor makes them (one row per call, so no padding), and where they came from
    (``{"split", "file", "rows", "feeds", "through"}``).  An error when the run has no local data."""
    from nlptasks.inference.loading import load_predictor
    from nlptasks.types import LoadOptions

    split, file, data = calibration_rows(manifest, rows)
    if not data:
        raise NlptasksError(
            f"--quantize {quantize}: {run_dir} has no local train, validation or test file to calibrate "
            "on (its recipe's data sources are not files here)",
            hint="Export fp32 (--quantize none), or run the export where the run's data files are.",
        )
    from nlptasks.engine.model.peft import DEFAULT_ADAPTER

    adapter = None if adapter == DEFAULT_ADAPTER else adapter  # the run's own, as load_for_export reads it
    predictor = load_predictor(run_dir, LoadOptions(precision="fp32", backend="torch", batch_size=1, adapter=adapter))
    recorder = _Recorder(fp32, config)
    predictor.model = recorder
    predictor.batch_size = 1
    for number, row in enumerate(data, start=1):
        try:
            predictor([row])
        except NlptasksError as exc:  # the task reads its inputs otherwise (an mlm run wants masks)
            raise NlptasksError(
                f"--quantize {quantize}: it is calibrated on the run's {split} rows fed through the "
                f"{manifest.get('task')!r} predictor, which refuses row {number} of {file}: {exc}",
                hint="Export fp32 (--quantize none): its graph is checked against the run's weights without them.",
            ) from None
    if not recorder.feeds:
        raise NlptasksError(
            f"--quantize {quantize}: the {manifest.get('task')!r} predictor made no model calls to calibrate"
        )
    source = {
        "split": split,
        "file": file,
        "rows": len(data),
        "feeds": len(recorder.feeds),
        "through": "the task's predictor, one row per call",
    }
    return recorder.feeds, source


class _Reader:
    """onnxruntime's ``CalibrationDataReader``: the recorded feeds, one per call."""

    def __init__(self, feeds: list[dict[str, Any]]) -> None:
        self.feeds: Iterator[dict[str, Any]] = iter(feeds)

    def get_next(self) -> dict[str, Any] | None:
        return next(self.feeds, None)

    def rewind(self) -> None:  # pragma: no cover - not called by quantize_static
        pass


class _Quiet:
    """onnxruntime's quantization logs and warns about pre-processing; nothing to act on here."""

    def __enter__(self) -> None:
        self.level = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)
        self.caught = warnings.catch_warnings()
        self.caught.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: Any) -> None:
        self.caught.__exit__(*exc)
        logging.getLogger().setLevel(self.level)


def _padded(feeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``feeds`` padded with zeros along their last axis to the longest (attention mask 0 there)."""
    import numpy as np

    longest = max(int(f["input_ids"].shape[-1]) for f in feeds)
    return [{k: np.pad(v, [(0, 0)] * (v.ndim - 1) + [(0, longest - v.shape[-1])]) for k, v in f.items()} for f in feeds]


def quantize_static_int8(
    fp32: Path, out: Path, feeds: list[dict[str, Any]], weight_type: str, method: str = CALIBRATION_METHOD
) -> dict[str, Any]:
    """Write ``out``: ``fp32`` statically quantized (QDQ) with activation ranges calibrated on
    ``feeds``; returns what the manifest records about it."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if method not in CalibrationMethod.__members__:
        raise NlptasksError(f"calibration method {method!r}: choose one of {', '.join(CalibrationMethod.__members__)}")
    if method != "MinMax":  # histogram methods stack each tensor over the feeds: one length for all
        feeds = _padded(feeds)
    with _Quiet():
        quantize_static(
            str(fp32),
            str(out),
            _Reader(feeds),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(_OPS),
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=getattr(QuantType, weight_type),
            calibrate_method=CalibrationMethod[method],
            extra_options={"MatMulConstBOnly": True},
        )
    return {
        "method": "static",
        "format": "QDQ",
        "activations": "QUInt8, one calibrated scale per tensor",
        "weights": f"{weight_type}, per channel",
        "ops": list(_OPS),
        "calibration_method": method,
        "batch_independent": True,
    }


def quantize_dynamic_int8(fp32: Path, out: Path, weight_type: str) -> dict[str, Any]:
    """Write ``out``: ``fp32`` dynamically quantized (activation scales computed per batch at run
    time: batch-dependent); returns what the manifest records about it."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _Quiet():
        quantize_dynamic(str(fp32), str(out), weight_type=getattr(QuantType, weight_type), per_channel=True)
    return {
        "method": "dynamic",
        "activations": "QUInt8, scale computed per batch at run time",
        "weights": f"{weight_type}, per channel",
        "batch_independent": False,
    }
