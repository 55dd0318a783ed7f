"""GPU facts (docs/gpu.md): train the cls quickstart on the GPU (auto precision, and fp32), then
compare each run's answers across batch sizes, precisions and devices on ChnSentiCorp test reviews.
Prints one JSON object per fact.  Usage: python tools/gpu/smoke.py OUT_FOLDER (run by check.sh).
Without a GPU it runs the CPU rows only (SMOKE_ROWS=20 SMOKE_SETS="train.epochs=1" for a dry run)."""

import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

import nlptasks

GPU = torch.cuda.is_available()
EXTRA = os.environ.get("SMOKE_SETS", "").split()
ROWS = int(os.environ.get("SMOKE_ROWS", 512))
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "chnsenticorp" / "test.csv"


def say(**facts: Any) -> None:
    print(json.dumps(facts, ensure_ascii=False), flush=True)


def find(obj: Any, key: str) -> Any:
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = v if k == key else find(v, key)
            if found is not None:
                return found
    return None


def compare(a: list[dict], b: list[dict]) -> tuple[int, float]:
    """(labels that differ, largest score difference)."""
    pairs = list(zip(a, b, strict=True))
    return sum(x["label"] != y["label"] for x, y in pairs), max(abs(x["score"] - y["score"]) for x, y in pairs)


def main(out: Path) -> None:
    say(
        torch=torch.__version__,
        gpu=torch.cuda.get_device_name() if GPU else None,
        bf16=GPU and torch.cuda.is_bf16_supported(),
    )
    with DATA.open(encoding="utf-8") as f:
        texts = [row["text"] for row in csv.DictReader(f)][:ROWS]
    trainings = [("cls", []), ("cls-fp32", ["train.precision=fp32"])] if GPU else [("cls", [])]
    settings = ([("cuda", "bf16"), ("cuda", "fp32")] if GPU else []) + [("cpu", "fp32")]
    for name, sets in trainings:
        start = time.time()
        res = nlptasks.run(
            "recipes/cls.toml",
            ["output.dir=/tmp/gpuruns", f"output.run_name={name}", "output.overwrite=true", *sets, *EXTRA],
        )
        say(
            run=name,
            seconds=round(time.time() - start, 1),
            test=res.metrics.get("test"),
            precision=find(res.manifest, "precision"),
        )
        run = res.output_dir
        base = {}
        for device, precision in settings:
            per_batch = {
                b: nlptasks.load(run, device=device, precision=precision, batch_size=b)(texts) for b in (1, 7, 32, 64)
            }
            for b in (7, 32, 64):
                labels, score = compare(per_batch[1], per_batch[b])
                say(
                    run=name,
                    device=device,
                    precision=precision,
                    batch=b,
                    vs="batch 1",
                    label_diffs=labels,
                    max_score_diff=score,
                )
            base[(device, precision)] = per_batch[32]
        if GPU:
            for key in (("cuda", "bf16"), ("cuda", "fp32")):
                labels, score = compare(base[("cpu", "fp32")], base[key])
                say(run=name, compare=f"{key} vs cpu fp32", label_diffs=labels, max_score_diff=score)
            labels, score = compare(nlptasks.load(run)(texts), base[("cuda", "bf16")])
            say(run=name, compare="auto vs cuda bf16", label_diffs=labels, max_score_diff=score)
            # two loads side by side in one process answer as each does alone
            a = nlptasks.load(run, device="cuda", precision="bf16", batch_size=32)
            b = nlptasks.load(run, device="cpu", precision="fp32", batch_size=32)
            say(
                run=name,
                side_by_side_bf16=compare(a(texts), base[("cuda", "bf16")]),
                side_by_side_fp32=compare(b(texts), base[("cpu", "fp32")]),
            )
        (out / f"{name}-manifest.json").write_text(
            Path(run, "nlptasks.json").read_text(encoding="utf-8"), encoding="utf-8"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
