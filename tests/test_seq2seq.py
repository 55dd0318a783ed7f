"""An encoder-decoder task from a third party (tests/plugins/nlptasks_s2s: a char-level T5 built
from scratch reverses words, ``Seq2SeqTrainer`` through ``build_trainer``) gets what the built-in
tasks get: the model has every size the recipe asks for, in its decoder too (``[model.scratch]``
reaches ``num_decoder_layers`` and ``d_ff``), evaluation generates, ``eval``, ``infer`` and
``inspect-batch`` (the decoder's target tokens, not the source's) work, every PEFT method of the
``SEQ_2_SEQ_LM`` row trains and infers, LoRA merges; ``validate`` refuses a shadowed
``model.scratch.extra`` key and a size field ``[model.scratch]`` cannot set.

The plugin is loaded in-process (``nlptasks.testing.plugin_host``); runs are tiny (a few steps).
"""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT
from nlptasks.peft_support import METHODS, unsupported_reason

PACKAGE = ROOT / "tests" / "plugins" / "nlptasks_s2s"
RECIPE = PACKAGE / "recipe.toml"
sys.path.insert(0, str(PACKAGE.parent))

import nlptasks_s2s  # noqa: E402

from nlptasks.plugin import hookimpl  # noqa: E402
from nlptasks.testing import plugin_host, run_cli, run_recipe  # noqa: E402

LAYERS, HIDDEN, HEADS, INTERMEDIATE = 2, 32, 4, 48  # T5's defaults: 6 layers (encoder and decoder), d_ff 2048
SIZES = (
    f"model.scratch.layers={LAYERS}",
    f"model.scratch.hidden={HIDDEN}",
    f"model.scratch.heads={HEADS}",
    f"model.scratch.intermediate={INTERMEDIATE}",
)
FAST = (
    *SIZES,
    "data.max_train_rows=32",
    "data.max_eval_rows=8",
    "train.batch_size=16",
    "train.warmup=0",
    "train.learning_rate=0.01",
)
METHOD_SETS = {
    "lora": ("peft.r=4",),
    "prefix": ("peft.num_virtual_tokens=4",),
    "p_tuning": ("peft.num_virtual_tokens=4", "peft.encoder_hidden_size=16"),
    "prompt": ("peft.num_virtual_tokens=4",),
    "ia3": (),
}


@pytest.fixture(scope="module")
def host():
    return plugin_host(s2s=nlptasks_s2s)


@pytest.fixture(scope="module")
def full(host, runs):
    """A run that evaluates (and so generates) after each of its two epochs."""
    return run_recipe(RECIPE, *FAST, "train.epochs=2", "train.eval_strategy=epoch", host=host, folder=runs)


@pytest.fixture(scope="module")
def adapter(host, runs):
    """``adapter(method)``: a run that trains that PEFT method for two steps (each once)."""
    done = {}

    def call(method: str):
        if method not in done:
            done[method] = run_recipe(
                RECIPE,
                *FAST,
                "train.max_steps=2",
                "train.eval_strategy=no",
                f"peft.method={method}",
                *METHOD_SETS[method],
                host=host,
                folder=runs,
                name=method,
            )
        return done[method]

    return call


FP32 = ("--precision", "fp32")
"""Exact comparisons of two folders pin fp32: with ``auto``, a run answers in bf16 where its end-of-run
measurement found bf16 faster on this machine (timing: it may on one CI run and not the next)."""


def infer(host, run_dir, *texts, flags=()):
    code, out, err = run_cli("infer", "--model", run_dir, *flags, *texts, host=host)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


# --- run: every size, in the decoder too; evaluation generates ----------------------------------------


def test_the_run_builds_the_decoder_with_the_sizes_the_recipe_asks(full):
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(full.output_dir)
    config = model.config
    assert type(model).__name__ == "T5ForConditionalGeneration"
    assert (config.num_layers, config.num_decoder_layers) == (LAYERS, LAYERS)
    assert len(model.encoder.block) == len(model.decoder.block) == LAYERS
    assert (config.d_model, config.num_heads, config.d_ff, config.d_kv) == (
        HIDDEN,
        HEADS,
        INTERMEDIATE,
        HIDDEN // HEADS,
    )
    for stack in (model.encoder, model.decoder):
        feed_forward = stack.block[0].layer[-1].DenseReluDense
        assert tuple(feed_forward.wi.weight.shape) == (INTERMEDIATE, HIDDEN)
        assert tuple(stack.block[0].layer[0].SelfAttention.q.weight.shape) == (HIDDEN, HIDDEN)


def test_evaluation_generates_during_training_and_after(full):
    history = json.loads((full.output_dir / "log_history.json").read_text(encoding="utf-8"))
    during = [entry for entry in history if "eval_exact_match" in entry]
    assert {entry["epoch"] for entry in during} == {1.0, 2.0}  # generation at evaluation works while training
    for split in ("validation", "test"):
        metrics = full.metrics[split]
        assert 0.0 <= metrics["exact_match"] <= 1.0 and 0.0 <= metrics["char_accuracy"] <= 1.0
        assert metrics["loss"] > 0


def test_eval_scores_the_run_as_the_run_did(full, host, tmp_path):
    code, _, err = run_cli(
        "eval",
        full.output_dir,
        "--data",
        PACKAGE / "data" / "test.jsonl",
        "-o",
        tmp_path / "ev",
        "--no-progress",
        host=host,
    )
    assert code == 0, err
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text(encoding="utf-8"))
    scored = metrics.get("test", metrics)
    assert scored["exact_match"] == pytest.approx(full.metrics["test"]["exact_match"], abs=1e-6)
    assert scored["char_accuracy"] == pytest.approx(full.metrics["test"]["char_accuracy"], abs=1e-6)


def test_infer_generates_a_target_per_source(full, host):
    results = infer(host, full.output_dir, "abcde", "kjihg", "abc")
    assert [r["source"] for r in results] == ["abcde", "kjihg", "abc"]
    assert all(isinstance(r["target"], str) for r in results)
    assert results == full.predict(["abcde", "kjihg", "abc"])  # nlptasks.load gives the same


# --- inspect-batch: the decoder's target tokens ------------------------------------------------------


def test_inspect_batch_shows_the_target_tokens_on_the_decoders_side(host):
    code, out, err = run_cli("inspect-batch", RECIPE, "--rows", "1", host=host)
    assert code == 0, err
    first = json.loads((PACKAGE / "data" / "train.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert f"text: [CLS]{first['source']}[SEP]" in out  # the source, as the encoder reads it
    assert "labels (target, the decoder's side)" in out
    assert f"target text: {first['target']}[SEP]" in out  # the target's tokens and the end token
    target_rows = out.split("labels (target, the decoder's side)")[1].splitlines()[3:]
    assert [line.split()[-1].strip("'") for line in target_rows if line.strip()][: len(first["target"])] == list(
        first["target"]
    )
    assert "ok: every example of train, validation, test has labels for the loss: labels (target)" in out


class NoTargetInTheLoss:
    """Leaves the first training example without any target token in the loss (as a task that
    masks its targets wrongly would)."""

    @hookimpl(wrapper=True)
    def nlptasks_preprocess(self, ctx, data):
        out = yield
        out["train"] = out["train"].map(
            lambda row, i: {"labels": [-100] * len(row["labels"])} if i == 0 else {}, with_indices=True
        )
        return out


def test_inspect_batch_refuses_an_example_with_no_target_token_in_the_loss():
    code, out, err = run_cli(
        "inspect-batch", RECIPE, "--rows", "1", host=plugin_host(s2s=nlptasks_s2s, broken=NoTargetInTheLoss())
    )
    assert code != 0
    assert "no token in the loss (labels)" in out + err
    assert "0 in the loss" in out


# --- PEFT: the SEQ_2_SEQ_LM row -------------------------------------------------------------------------


def test_the_task_declares_seq_2_seq_lm(host):
    from nlptasks.pipeline import load_recipe

    loaded = load_recipe(RECIPE, ["peft.method=lora"], host=host)
    assert loaded.task.peft_task_type_for(loaded.options) == "SEQ_2_SEQ_LM"


@pytest.mark.parametrize("method", METHODS)
def test_every_method_of_the_seq_2_seq_lm_row(method, adapter, host):
    """Trains, saves and infers where the support table says it works (it refuses none for
    SEQ_2_SEQ_LM today); a method it refused would be a recipe error at validation."""
    reason = unsupported_reason("SEQ_2_SEQ_LM", method)
    if reason is not None:
        code, _, err = run_cli("validate", RECIPE, "--set", f"peft.method={method}", host=host)
        assert code == 2 and reason in err
        return
    run = adapter(method)
    info = run.manifest["peft"]
    assert (info["method"], info["task_type"]) == (method, "SEQ_2_SEQ_LM")
    assert (run.output_dir / "adapter_config.json").exists()
    assert 0 < info["trainable_parameters"] < info["total_parameters"]
    results = infer(host, run.output_dir, "abcde", "fed")
    assert [r["source"] for r in results] == ["abcde", "fed"] and all(isinstance(r["target"], str) for r in results)


@pytest.mark.parametrize("method", ["prefix", "p_tuning", "prompt"])
def test_the_virtual_tokens_reach_an_encoder_decoder(method):
    """peft hands a T5 its prefix as ``past_key_values``, a name transformers 5.24 still takes
    (deprecated for ``cache``): were it dropped, the adapter would train nothing.  The adapted
    model's logits must differ from the base's."""
    import peft
    import torch
    from transformers import AutoModelForSeq2SeqLM

    config = _tiny_t5_config()
    make = {"prefix": peft.PrefixTuningConfig, "p_tuning": peft.PromptEncoderConfig, "prompt": peft.PromptTuningConfig}
    extra = {"encoder_hidden_size": 16} if method == "p_tuning" else {}
    torch.manual_seed(0)
    model = peft.get_peft_model(
        AutoModelForSeq2SeqLM.from_config(config), make[method](task_type="SEQ_2_SEQ_LM", num_virtual_tokens=4, **extra)
    ).eval()
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 1]]),
        "attention_mask": torch.ones(1, 4, dtype=torch.long),
        "labels": torch.tensor([[7, 6, 5, 1]]),
    }
    with torch.no_grad():
        adapted = model(**batch).logits
        with model.disable_adapter():
            base = model(**batch).logits
    assert adapted.shape == base.shape and not torch.allclose(adapted, base)


def test_the_lora_adapter_merges_and_the_merged_run_predicts_the_same(adapter, host, tmp_path):
    run = adapter("lora")
    texts = ["abcde", "kjihg", "abcdefg", "lk"]
    with_adapter = infer(host, run.output_dir, *texts, flags=FP32)
    code, out, err = run_cli("export", run.output_dir, "--merge", tmp_path / "merged", host=host)
    assert code == 0, err
    examples = json.loads((run.output_dir / "examples.json").read_text(encoding="utf-8"))["inputs"]
    assert examples and all("decoder_input_ids" in e for e in examples)  # the merge check runs the decoder too
    assert f"same predictions on {len(examples)} stored inputs" in out
    manifest = json.loads((tmp_path / "merged" / "nlptasks.json").read_text(encoding="utf-8"))
    assert "peft" not in manifest and manifest["merged_from"]["check"]["equal"] is True
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    assert infer(host, tmp_path / "merged", *texts, flags=FP32) == with_adapter


def test_merge_check_compares_the_decoders_logits():
    """For an encoder-decoder the merge check compares the logits the decoder gives for the stored
    decoder inputs (and falls back to greedy tokens without them)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from nlptasks.inference.merge import compare_outputs, model_outputs

    config = _tiny_t5_config()
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    with_decoder = [{"input_ids": [5, 6, 7, 1], "attention_mask": [1, 1, 1, 1], "decoder_input_ids": [0, 7, 6]}]
    (record,) = model_outputs(model, with_decoder, "SEQ_2_SEQ_LM")
    assert tuple(record["logits"].shape) == (1, 3, 20)
    (tokens,) = model_outputs(model, [{"input_ids": [5, 6, 7, 1], "attention_mask": [1, 1, 1, 1]}], "SEQ_2_SEQ_LM")
    assert set(tokens) == {"tokens"} and tokens["tokens"][0] == 0  # generated, from the decoder's start token
    with torch.no_grad():
        model.lm_head.weight[3] += 5.0
    differences, _ = compare_outputs([record], model_outputs(model, with_decoder, "SEQ_2_SEQ_LM"))
    assert differences


# --- validate: the scratch sizes it cannot map, and the extra keys they shadow ----------------------------


def test_validate_refuses_an_extra_key_that_a_scratch_size_sets(host):
    code, _, err = run_cli(
        "validate",
        RECIPE,
        "--set",
        "model.scratch.extra.num_decoder_layers=3",
        "--set",
        "model.scratch.extra.decoder_ffn_dim=8",
        host=host,
    )
    assert code == 2
    assert "model.scratch.extra.num_decoder_layers: is set by model.scratch.layers" in err
    assert "model.scratch.extra.decoder_ffn_dim: is set by model.scratch.intermediate" in err


def test_validate_names_a_size_field_the_scratch_keys_cannot_set(host):
    code, _, err = run_cli("validate", RECIPE, "--set", "model.scratch.architecture=deepseek_v3", host=host)
    assert code == 2
    assert "model.scratch.extra.v_head_dim: 'deepseek_v3' has a size field 'v_head_dim'" in err
    assert "that [model.scratch] does not set" in err
    code, _, err = run_cli(
        "validate",
        RECIPE,
        "--set",
        "model.scratch.architecture=deepseek_v3",
        "--set",
        "model.scratch.extra.v_head_dim=8",
        host=host,
    )
    assert "v_head_dim" not in err  # set by the recipe: nothing left at the architecture's default


def _tiny_t5_config():
    """A one-layer T5 config (vocabulary 20, d_model 16) for the tests that build the model directly."""
    from transformers import AutoConfig

    return AutoConfig.for_model(
        "t5",
        vocab_size=20,
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        decoder_start_token_id=0,
        eos_token_id=1,
        pad_token_id=0,
    )


def test_a_t5_recipe_written_for_the_earlier_docs_still_validates_with_a_deprecation(host, tmp_path, monkeypatch):
    """``[model.scratch.extra] d_ff`` from before ``intermediate`` mapped it: equal to the mapped value
    (or with no ``intermediate`` in the recipe) it is accepted with one ``nlptasks: deprecated:`` line
    naming the key and what to write; a different value is two sizes for one setting (an error that
    gives both)."""
    from nlptasks import deprecations
    from nlptasks.recipe import dump_toml, read_toml

    monkeypatch.setattr(deprecations, "_said", set())  # as in a fresh process
    code, out, err = run_cli("validate", RECIPE, "--set", "model.scratch.extra.d_ff=128", host=host)
    assert code == 0, err
    said = [line for line in err.splitlines() if line.startswith("nlptasks: deprecated:")]
    assert said == [
        "nlptasks: deprecated: recipe key model.scratch.extra.d_ff = 128: write model.scratch.intermediate = 128 "
        "instead ([model.scratch] sets it; the values agree); the old form stops working in nlptasks 0.3.0"
    ], err

    raw = read_toml(RECIPE)
    del raw["model"]["scratch"]["intermediate"]
    raw["model"]["scratch"]["extra"] = {"d_ff": 96}
    for split in ("train", "validation", "test"):
        if split in raw.get("data", {}):
            raw["data"][split] = str((RECIPE.parent / raw["data"][split]).resolve())
    old = tmp_path / "old.toml"
    old.write_text(dump_toml(raw), encoding="utf-8")
    from nlptasks.pipeline import load_recipe

    loaded = load_recipe(old, [], host=host, check_files=False)
    assert loaded.recipe.model.scratch.intermediate == 96 and "d_ff" not in loaded.recipe.model.scratch.extra

    code, _, err = run_cli("validate", RECIPE, "--set", "model.scratch.extra.d_ff=64", host=host)
    assert code == 2
    assert (
        "model.scratch.extra.d_ff: is set by model.scratch.intermediate: set it there (model.scratch.extra is for "
        "the config values the recipe has no key for); the recipe gives model.scratch.intermediate = 128 and "
        "model.scratch.extra.d_ff = 64"
    ) in err, err
