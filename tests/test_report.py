"""Run reports: the self-describing manifest, the model card README.md and its PNGs, the task
sections of the ``nlptasks_report`` hook, ``train.report_to``, and ``nlptasks compare``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import RECIPES, TINY, read_metrics, tiny_run

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cls_run(runs):
    return tiny_run(runs, "cls.toml", "a", "data.max_train_rows=300", epochs=2)


def card_of(run_dir: Path) -> str:
    return (run_dir / "README.md").read_text(encoding="utf-8")


def test_manifest_describes_the_run(cls_run):
    from nlptasks.pipeline import load_recipe

    manifest = json.loads((cls_run / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["task"] == "cls" and manifest["labels"] == ["正面", "负面"]
    tok = manifest["tokenizer"]
    assert tok["padding_side"] == "right" and tok["special_tokens"]["pad_token"] == "[PAD]"
    assert tok["vocab_size"] == json.loads((cls_run / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    assert manifest["data"]["rows"] == {"train": 300, "validation": 200, "test": 200}
    assert manifest["data"]["sources"]["train"].endswith("recipes/data/cls/train.csv")
    assert {p["name"] for p in manifest["plugins"]} == {"nlptasks.engine", "cls"}
    # the hash is the resolved recipe's: re-resolving the saved recipe.toml gives it again
    again = load_recipe(cls_run / "recipe.toml")
    assert manifest["recipe_sha256"] == again.sha256()
    # one hash: the run state --resume reads holds the same value
    assert manifest["recipe_sha256"] == json.loads((cls_run / "nlptasks-run.json").read_text())["recipe_sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", manifest["recipe_sha256"])
    metrics = read_metrics(cls_run)
    assert 100 < metrics["resources"]["peak_rss_mb"] < 100_000


def test_model_card_and_pngs(cls_run):
    card = card_of(cls_run)
    metrics = read_metrics(cls_run)
    assert card.startswith("# cls run `a`")
    assert "| base model | `scratch:bert` |" in card
    assert re.search(r"\| train \| `[^`]*train\.csv` \| 300 \| 300 \|", card)
    assert f"| accuracy | {metrics['validation']['accuracy']:.4f} | {metrics['test']['accuracy']:.4f} |" in card
    assert "## Per class (test)" in card and "| 正面 |" in card
    assert "![confusion matrix](confusion_matrix.png)" in card and "![training curves](training_curves.png)" in card
    assert 'task = "cls"' in card  # the recipe
    for png in ("confusion_matrix.png", "training_curves.png"):
        assert (cls_run / png).read_bytes()[:8] == PNG, png
    history = json.loads((cls_run / "log_history.json").read_text(encoding="utf-8"))
    assert any("eval_accuracy" in h for h in history) and any("loss" in h for h in history)


def test_model_card_code_loads_the_run(cls_run):
    """The card's plain-transformers block is exact: run it, and it predicts what nlptasks does."""
    import torch

    from nlptasks import LoadOptions
    from nlptasks.pipeline import load_predictor

    card = card_of(cls_run)
    block = card.split("With plain transformers (no nlptasks needed):", 1)[1].split("```python\n", 1)[1].split("```")[0]
    scope: dict = {}
    exec(block, scope)  # noqa: S102 - our own generated code
    tokenizer, model = scope["tokenizer"], scope["model"]
    text = "这家酒店服务很好"
    with torch.inference_mode():
        probs = model(**tokenizer([text], return_tensors="pt")).logits.softmax(-1)[0]
    ours = load_predictor(cls_run, LoadOptions(precision="fp32"))([text])[0]  # as the card's code: fp32
    assert model.config.id2label[int(probs.argmax())] == ours["label"]
    assert float(probs.max()) == pytest.approx(ours["score"], abs=1e-4)
    # the nlptasks block predicts the run's own example, as `nlptasks infer` does
    nlptasks_block = card.split("```python\n", 1)[1].split("```")[0]
    example = json.loads((cls_run / "nlptasks.json").read_text(encoding="utf-8"))["example"]
    assert f'print(predict(["{example}"]))' in nlptasks_block
    scope = {}
    exec(nlptasks_block.replace("print(predict(", "out = (predict("), scope)  # noqa: S102
    assert scope["out"] == load_predictor(cls_run)([example])


def test_ner_card_has_a_per_entity_type_table(runs):
    run_dir = tiny_run(runs, "ner.toml", "n", "data.max_train_rows=300")
    card = card_of(run_dir)
    metrics = read_metrics(run_dir)
    types = sorted({k.split("/", 1)[1] for k in metrics["test"] if k.startswith("f1/")})
    assert types and "## Per entity type (test)" in card
    assert "| type | f1 | precision | recall | support |" in card
    for kind in types:
        assert re.search(rf"\| {kind} \| {metrics['test'][f'f1/{kind}']:.4f} \|", card), kind
    assert not (run_dir / "confusion_matrix.png").exists()  # a classification section only


def test_hook_nlptasks_report(tmp_path):
    """A plugin's sections go into the card, after the engine's parts; the hook sees the metrics."""
    from nlptasks import hookimpl
    from nlptasks.testing import plugin_host, run_recipe

    seen = {}

    class Reporter:
        @hookimpl
        def nlptasks_report(self, ctx, trainer, data, metrics):
            seen["splits"] = sorted(k for k in ("validation", "test") if k in metrics)
            (ctx.output_dir / "extra.txt").write_text("x", encoding="utf-8")
            return [f"## Extra\n\n{len(data['train'])} training examples."]

    host = plugin_host(builtins=True)
    host.register(Reporter(), name="reporter")
    run_dir = run_recipe(
        RECIPES / "cls.toml", *TINY, "train.epochs=1", "data.max_train_rows=300", host=host, folder=tmp_path, name="h"
    ).output_dir
    card = card_of(run_dir)
    assert seen["splits"] == ["test", "validation"]
    assert "## Extra\n\n300 training examples." in card
    assert card.index("## Metrics") < card.index("## Extra") < card.index("## Recipe")
    assert (run_dir / "extra.txt").exists() and (run_dir / "COMPLETE").exists()


def test_report_to_tensorboard_needs_the_package(cli):
    import importlib.util

    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        pytest.skip("tensorboard is installed here")
    code, _, err = cli("validate", RECIPES / "cls.toml", "--set", 'train.report_to=["tensorboard"]')
    assert code == 2
    assert "train.report_to: the tensorboard package is not installed: pip install tensorboard" in err
    code, _, err = cli("validate", RECIPES / "cls.toml", "--set", 'train.report_to=["wandb"]')
    assert code == 2 and "train.report_to" in err and "tensorboard" in err


def test_compare_runs(cls_run, runs, cli, tmp_path):
    other = tiny_run(runs, "cls.toml", "b", "data.max_train_rows=300", "train.learning_rate=1e-3")
    code, out, err = cli("compare", cls_run, other)
    assert code == 0, err
    a, b = read_metrics(cls_run), read_metrics(other)
    assert out.startswith("| | `a` | `b` |")
    assert f"| test accuracy | {a['test']['accuracy']:.4f} | {b['test']['accuracy']:.4f} |" in out
    assert f"| wall time (s) | {a['seconds']:.1f} | {b['seconds']:.1f} |" in out
    assert "| peak RSS (MiB) |" in out and "| train samples/s |" in out
    differences = out.split("Recipe differences:", 1)[1]
    assert "| `train.learning_rate` | `0.0005` | `0.001` |" in differences
    assert "| `train.epochs` | `2.0` | `1.0` |" in differences
    assert "batch_size" not in differences and "run_name" not in differences  # equal keys, output.*
    # an unfinished run is refused, by name
    unfinished = tmp_path / "half"
    unfinished.mkdir()
    code, _, err = cli("compare", cls_run, unfinished)
    assert code == 2
    assert f"{unfinished}: not a complete run (no COMPLETE marker" in err
