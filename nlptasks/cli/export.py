"""``nlptasks export RUN --merge OUT`` (a LoRA/IA3 adapter merged into a full model, checked) and
``nlptasks export RUN --onnx OUT`` (an ONNX Runtime model, fp32 or int8, measured)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nlptasks.cli._common import display, finite_float, int_in, non_negative_int

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "export",
        help="merge a run's LoRA/IA3 adapter, or export a run to ONNX (fp32 or int8)",
        description="--merge: merge a lora or ia3 adapter into the base weights and save a complete "
        "run that loads with plain transformers, after checking that it predicts exactly "
        "as the adapter did on inputs stored at training time.  --onnx: export an encoder "
        "run (adapter runs merged first) to ONNX with dynamic batch and sequence axes, "
        "optionally int8-quantized, as a run folder that `nlptasks infer` runs on ONNX "
        "Runtime; the export compares its predictions with the torch run's on the run's "
        "test file and writes the figures into the folder's card (docs/onnx.md).",
    )
    p.add_argument("run", type=Path, help="run folder")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--merge", type=Path, metavar="OUT", help="folder to write the merged run to")
    target.add_argument(
        "--onnx",
        type=Path,
        metavar="OUT",
        help='folder to write the ONNX export to (needs pip install "nlptasks[onnx]")',
    )
    p.add_argument("--adapter", metavar="NAME", help="the adapter to merge (default: the run's own)")
    p.add_argument(
        "--quantize",
        choices=("none", "int8", "int8-static", "int8-dynamic"),
        default="none",
        help="with --onnx: int8 = int8 weights per channel, each token's activations quantized with "
        "its own scale (smoothing calibrated on --calibration-rows rows of the run's training file), so "
        "a row's answer does not depend on its batch; int8-static = onnxruntime's static quantization "
        "(one calibrated scale per tensor: batch-independent, less accurate); int8-dynamic = "
        "onnxruntime's dynamic quantization (activation scales computed per batch: a row's scores and "
        "even labels change with the rows batched with it); default: none (fp32, same predictions as torch)",
    )
    p.add_argument(
        "--calibration-rows",
        type=int_in(1, 100_000),
        default=128,
        metavar="N",
        help="with --quantize int8 or int8-static: rows of the run's training file (else validation, "
        "else test) that calibrate the smoothing (int8) or the activation scales (int8-static) (default: 128)",
    )
    p.add_argument(
        "--int8-weights",
        choices=("auto", "QInt8", "QUInt8"),
        default="auto",
        help="with an int8 --quantize: the weight type; auto: QInt8 on a CPU with VNNI (faster there), "
        "else QUInt8 (QInt8 saturates without VNNI). Choose for the machine that will serve it",
    )
    p.add_argument(
        "--opset", type=int_in(14, 20), default=17, metavar="N", help="with --onnx: ONNX opset, 14 to 20 (default: 17)"
    )
    p.add_argument(
        "--check-rows",
        type=non_negative_int,
        default=2000,
        metavar="N",
        help="with --onnx: rows of the run's test file to compare torch and ONNX on (default: 2000; 0: none)",
    )
    p.add_argument(
        "--max-drop",
        type=finite_float(0, 100),
        default=1.0,
        metavar="POINTS",
        help="with --onnx: warn when an accuracy on the test file drops by more than this (default: 1.0)",
    )
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    if not args.run.is_dir():
        raise NlptasksError(f"{args.run}: no such folder")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if args.onnx is not None:
        return _onnx(args)
    if args.quantize != "none":
        raise NlptasksError("--quantize applies to --onnx")
    if args.calibration_rows != 128:
        raise NlptasksError("--calibration-rows applies to --onnx --quantize int8")
    from nlptasks.inference.merge import export_merged

    result = export_merged(args.run, args.merge, args.adapter)
    merged = result["merged_from"]
    check = merged["check"]
    print(
        f"merged {merged['method']} adapter {merged['adapter']!r} into {display(args.merge)}; "
        f"same predictions on {check['inputs']} stored inputs (largest difference {check['max_abs_diff']:.1e})"
    )
    from nlptasks.pipeline.onnx import try_command

    print(f"try: {try_command(Path(args.merge), display(args.merge))}")
    return 0


def _onnx(args: argparse.Namespace) -> int:
    import sys

    from nlptasks.inference.deployments import refusal, speedups
    from nlptasks.pipeline.onnx import export_and_measure, try_command, what_loads_use

    manifest, warnings = export_and_measure(
        args.run,
        args.onnx,
        quantize=args.quantize,
        opset=args.opset,
        adapter=args.adapter,
        rows=args.check_rows,
        max_drop=args.max_drop,
        int8_weights=args.int8_weights,
        calibration_rows=args.calibration_rows,
    )
    info = manifest["onnx"]
    size = info["sizes"].get("int8_bytes", info["sizes"]["fp32_bytes"])
    print(
        f"exported {display(args.run)} to {display(args.onnx)}: {info['quantize']}, opset {info['opset']}, "
        f"{size / 1e6:.2f} MB ({info['seconds']:.1f} s; graph check {info['check']['max_abs_diff']:.1e})"
    )
    measured = info.get("measured") or {}
    if measured.get("inputs"):
        gold = "; ".join(
            f"{k} accuracy {v['torch']:.4f} → {v['onnx']:.4f} ({v['change_points']:+.2f} points)"
            for k, v in measured["gold"].items()
        )
        print(
            f"on {measured['inputs']} inputs of {measured['file']}: {measured['changed']} predictions differ from "
            f"torch, scores by up to {measured['max_score_diff']:.1e}" + (f"; {gold}" if gold else "")
        )
    entry = info.get("deployment")
    if entry:
        ratio, single = speedups(entry) or (0.0, 0.0)
        print(
            f"against the run's fp32 weights on {entry['rows']} {entry['split']} rows: {entry['why']}; "
            f"{ratio:.2f}x its rows/s batched, {single:.2f}x one at a time"
        )
        why = refusal(entry)
        if why is not None:
            print(f"this export does not answer for {display(args.run)}: {why}")
    # what the next load does, asked of the code that decides it (the measurement alone is not the
    # whole rule: another recorded configuration, bf16 say, may be faster still)
    folder, backend, precision = what_loads_use(Path(args.run))
    if folder.resolve() == Path(args.onnx).resolve():
        answers = f"this export ({backend} {precision})"
    elif folder.resolve() == Path(args.run).resolve():
        answers = f"the run's own weights ({backend} {precision})"
    else:
        answers = f"{display(folder)} ({backend} {precision}), an export measured faster"
    print(
        f"nlptasks infer / serve / eval and nlptasks.load of {display(args.run)} answer on this machine with "
        f"{answers}; --backend torch --precision fp32 for the run's own weights in fp32"
    )
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"try: {try_command(Path(args.onnx), display(args.onnx))}")
    return 0
