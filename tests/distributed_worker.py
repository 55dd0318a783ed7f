"""One process of the DDP test (tests/test_distributed.py), started by torchrun or alone.

``python distributed_worker.py RECIPE OUT_DIR [--set K=V ...]`` runs the recipe through the
engine with one extra plugin that records, per rank, which training examples each batch held
(their token ids), how many validation examples the metrics saw and their labels in the order the
metrics saw them (the data's order, also with length-sorted evaluation batches).  It writes
``OUT_DIR/rank<R>.json``; the run itself goes where the recipe's ``output.dir`` says.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from nlptasks import hookimpl
from nlptasks.pipeline import load_recipe, run
from nlptasks.testing import plugin_host


class Witness:
    def __init__(self) -> None:
        self.trained: list[list[int]] = []
        self.eval_counts: list[int] = []
        self.eval_labels: list[list[int]] = []
        self.validation_labels: list[int] = []

    @hookimpl(wrapper=True)
    def nlptasks_metrics(self, ctx):
        inner = yield

        def metrics(prediction):
            self.eval_counts.append(len(prediction.label_ids))
            self.eval_labels.append(prediction.label_ids.tolist())
            return {**inner(prediction), "examples": float(len(prediction.label_ids))}

        return metrics

    @hookimpl(wrapper=True)
    def nlptasks_train(self, ctx, trainer, data):
        self.validation_labels = list(data["validation"]["labels"])
        step = trainer.training_step

        def recording_step(model, inputs, *args, **kwargs):  # what this rank trains on, unpadded
            for ids, mask in zip(inputs["input_ids"].tolist(), inputs["attention_mask"].tolist(), strict=True):
                self.trained.append([i for i, m in zip(ids, mask, strict=True) if m])
            return step(model, inputs, *args, **kwargs)

        trainer.training_step = recording_step
        metrics = yield
        self.global_step = trainer.state.global_step
        self.wrapped = type(trainer.model_wrapped).__name__
        return metrics


def main() -> None:
    recipe, out = sys.argv[1], Path(sys.argv[2])
    overrides = [a.split("=", 1)[1] if a.startswith("--set=") else a for a in sys.argv[3:] if a != "--set"]
    witness = Witness()
    host = plugin_host(builtins=True)
    host.register(witness, name="witness")
    loaded = load_recipe(recipe, overrides, host=host)
    result = run(loaded, host=host, progress=False)
    rank = int(os.environ.get("RANK", "0"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "rank": rank,
                "world_size": int(os.environ.get("WORLD_SIZE", "1")),
                "run_dir": str(result.output_dir),
                "trained": witness.trained,
                "eval_counts": witness.eval_counts,
                "eval_labels": witness.eval_labels,
                "validation_labels": witness.validation_labels,
                "global_step": witness.global_step,
                "wrapped": witness.wrapped,
                "metrics": result.metrics,
            }
        ),
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
