"""SFT packing vs padding: same recipe, data, model and seed, with ``options.packing`` off and on.

Runs ``python -m nlptasks run recipes/sft.toml`` twice, each as a subprocess, on the first
``--train-rows`` rows of ``../shared/data/alpaca_zh`` (or ``--data-dir``), full fine-tuning by
default (``--peft lora`` keeps the recipe's LoRA), and prints for each side: training time, tokens
per second (the real, unpadded tokens of the training set times the epochs, over the Trainer's
training runtime), and the validation loss.  The target of the issue is packing ≥ 1.3× the
unpacked tokens/s (on a GPU).

Packing puts each micro-batch's examples into one sequence without padding; the examples and
their order are the same as with padding, and the loss averages over the same response tokens,
so both sides should reach the same validation loss (up to float rounding) — the script says
when they do not.  Timings on a machine shared with other work are noisy: run it alone.

With ``--docs`` the table goes into the block ``sft_packing-full`` (or ``sft_packing-lora`` with
``--peft lora``) of docs/benchmarks.md (``--docs-file`` for another file).

Example (a few minutes on 2 idle CPU cores):
    python benchmarks/sft_packing.py --docs --json sft-packing.json
Smoke check of the script itself (seconds; the figures mean little on so few rows):
    python benchmarks/sft_packing.py --train-rows 32 --eval-rows 16 --max-length 128 --docs --docs-file /tmp/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata as md
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sft.toml"
DATA = ROOT.parent / "shared" / "data" / "alpaca_zh"
TARGET = 1.3  # the target: packed tokens/s at least 1.3x padded (stated for a GPU)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=DATA, help="folder with train.jsonl and validation.jsonl")
    p.add_argument("--train-rows", type=int, default=600, help="first N training rows (default 600)")
    p.add_argument("--eval-rows", type=int, default=100, help="first N validation rows (default 100)")
    p.add_argument("--epochs", type=float, default=1.0, help="training epochs (default 1)")
    p.add_argument("--batch-size", type=int, default=16, help="micro-batch size (default 16)")
    p.add_argument("--max-length", type=int, default=512, help="model.max_length (default 512)")
    p.add_argument("--peft", choices=["none", "lora"], default="none", help="full fine-tuning or the recipe's LoRA")
    p.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="further recipe overrides for both sides, e.g. model.scratch.layers=4",
    )
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--work-dir", type=Path, help="where runs and logs go (default: a new temporary folder)")
    _docs.add_arguments(p)
    return p.parse_args(argv)


def run_side(args: argparse.Namespace, packing: bool, work: Path) -> dict[str, Any]:
    name = "packed" if packing else "padded"
    data = args.data_dir.resolve()
    sets = [
        f"data.train={data / 'train.jsonl'}",
        f"data.validation={data / 'validation.jsonl'}",
        "data.test=",
        f"data.max_train_rows={args.train_rows}",
        f"data.max_eval_rows={args.eval_rows}",
        f"model.max_length={args.max_length}",
        "model.scratch.vocab_size=4000",
        f"train.epochs={args.epochs}",
        f"train.batch_size={args.batch_size}",
        "train.eval_strategy=no",
        "train.logging_steps=1000",
        "options.no_response=drop",
        f"options.packing={str(packing).lower()}",
        *(["peft.method=none"] if args.peft == "none" else []),
        f"output.dir={work / 'runs'}",
        f"output.run_name={name}",
        "output.overwrite=true",
        *args.extra,
    ]
    cmd = [sys.executable, "-m", "nlptasks", "run", str(RECIPE), "--no-progress"]
    for s in sets:
        cmd += ["--set", s]
    print("$ " + " ".join(cmd), flush=True)
    log = work / f"{name}.log"
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.run(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        )
    wall = time.perf_counter() - started
    text = log.read_text(encoding="utf-8")
    if proc.returncode != 0:
        sys.exit(f"{name} run failed (exit {proc.returncode}); log: {log}\n{text[-3000:]}")
    tokens = re.search(r"train: (\d+) examples, ([\d,]+) tokens", text)
    assert tokens, f"no token count in {log}"
    metrics = json.loads((work / "runs" / "sft" / name / "metrics.json").read_text(encoding="utf-8"))
    runtime = metrics["train"]["runtime"]
    total = int(tokens.group(2).replace(",", "")) * args.epochs
    return {
        "side": name,
        "examples": int(tokens.group(1)),
        "train_tokens": total,
        "train_runtime_s": runtime,
        "tokens_per_second": total / runtime,
        "samples_per_second": metrics["train"]["samples_per_second"],
        "validation_loss": metrics["validation"]["loss"],
        "wall_s": round(wall, 1),
        "log": str(log),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = _docs.start(__file__, argv)
    if not (args.data_dir / "train.jsonl").exists():
        sys.exit(f"no {args.data_dir / 'train.jsonl'}: pass --data-dir")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="sft_packing_"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    padded = run_side(args, False, work)
    packed = run_side(args, True, work)
    ratio = packed["tokens_per_second"] / padded["tokens_per_second"]
    same_loss = abs(packed["validation_loss"] - padded["validation_loss"]) < 1e-3
    print(f"\n{'':<22}{'padded':>12}{'packed':>12}")
    for key, fmt in (
        ("train_runtime_s", "{:.1f}"),
        ("tokens_per_second", "{:.0f}"),
        ("samples_per_second", "{:.1f}"),
        ("validation_loss", "{:.4f}"),
        ("wall_s", "{:.1f}"),
    ):
        print(f"{key:<22}{fmt.format(padded[key]):>12}{fmt.format(packed[key]):>12}")
    print(f"\npacked/padded tokens/s: x{ratio:.2f} (issue target on GPU: >= x1.3)")
    print(
        f"validation loss {'equal' if same_loss else 'DIFFERENT'} "
        f"({padded['validation_loss']:.4f} vs {packed['validation_loss']:.4f})"
    )
    if not same_loss and args.peft == "lora":
        print(
            "  (LoRA dropout draws its masks over the batch's shape, which packing changes: compare with "
            "--set peft.dropout=0 to check that packing itself changes nothing)"
        )
    print(f"load average before: {load_before:.2f}, after: {os.getloadavg()[0]:.2f}")
    result = {
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "args": {k: str(v) for k, v in vars(args).items()},
        "padded": padded,
        "packed": packed,
        "tokens_per_second_ratio": round(ratio, 3),
        "same_validation_loss": same_loss,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    trained = "every weight trained" if args.peft == "none" else "the recipe's LoRA"
    intro = (
        f"`recipes/sft.toml`, {trained}; the first {args.train_rows} training and {args.eval_rows} validation rows "
        f"of `{args.data_dir.name}`, {args.epochs:g} epoch(s), batch {args.batch_size}, max length "
        f"{args.max_length}{'; ' + ', '.join(f'`{x}`' for x in args.extra) if args.extra else ''}; "
        f"transformers {md.version('transformers')}, peft {md.version('peft')}."
    )
    suffix = "full" if args.peft == "none" else args.peft
    _docs.publish(args, _docs.block_name(__file__, suffix), info, render_table(padded, packed, ratio, same_loss), intro)
    return 0 if same_loss else 1


def render_table(padded: dict[str, Any], packed: dict[str, Any], ratio: float, same_loss: bool) -> str:
    """The Markdown table: both sides, the ratio, the target and whether the losses agree."""
    lines = ["| | padded | packed | packed vs padded |", "|---|---:|---:|---:|"]
    for label, key, fmt in (
        ("train time (Trainer runtime)", "train_runtime_s", "{:.1f} s"),
        ("train tokens/s (real tokens)", "tokens_per_second", "{:,.0f}"),
        ("train samples/s", "samples_per_second", "{:.1f}"),
        ("validation loss", "validation_loss", "{:.4f}"),
        ("wall time (process)", "wall_s", "{:.1f} s"),
    ):
        extra = f" **x{ratio:.2f}** " if key == "tokens_per_second" else " "
        lines.append(f"| {label} | {fmt.format(padded[key])} | {fmt.format(packed[key])} |{extra}|")
    lines += [
        f"| target: tokens/s ≥ x{TARGET:g} (issue's target, stated for a GPU) | | | "
        f"{'met' if ratio >= TARGET else '**missed**'} |",
        f"| validation loss equal to 1e-3 (exit status) | | | {'yes' if same_loss else '**no**'} |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
