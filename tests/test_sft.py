"""The ``sft`` task: templates and offset-based loss masks, data shapes and dirty rows, packing,
inspect-batch, generation at inference, a memorization run, and real data (alpaca_zh/en)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from conftest import RECIPES, TINY_DECODER, read_metrics, shared, tiny_run

QUICKSTART = RECIPES / "sft.toml"
DEMO_TRAIN = RECIPES / "data" / "sft" / "train.jsonl"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def demo_rows(n: int) -> list[dict]:
    lines = DEMO_TRAIN.read_text(encoding="utf-8").splitlines()[:n]
    return [json.loads(line) for line in lines]


def without_peft_table(folder: Path) -> Path:
    """The quickstart recipe without its [peft] table (its LoRA keys belong to no other method),
    with absolute data paths, written into ``folder``."""
    text = QUICKSTART.read_text(encoding="utf-8")
    start = text.index("[peft]")
    end = text.index("[options]", start)
    text = text[:start] + text[end:]
    for split in ("train", "validation", "test"):
        text = text.replace(f'"data/sft/{split}.jsonl"', json.dumps(str(RECIPES / "data" / "sft" / f"{split}.jsonl")))
    path = folder / "sft-no-peft.toml"
    path.write_text(text, encoding="utf-8")
    return path


def sets(*items: str) -> list[str]:
    argv: list[str] = []
    for item in items:
        argv += ["--set", item]
    return argv


@pytest.fixture(scope="module")
def tokenizer():
    from nlptasks.engine.data.tokenization import build_tokenizer
    from nlptasks.recipe import ScratchConfig

    texts = [r["instruction"] + r["output"] for r in demo_rows(200)] + [
        "user assistant system ### Instruction: ### Response:"
    ] * 3
    return build_tokenizer(texts, ScratchConfig(tokenizer="bpe", vocab_size=600, min_frequency=1), 128, style="decoder")


def in_loss(tok, messages):
    """The text of the tokens in the loss, per contiguous run."""
    from nlptasks_plugins.sft.templates import loss_labels, supervised_spans

    text, spans = supervised_spans(tok, messages)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    labels = loss_labels(enc["input_ids"], enc["offset_mapping"], spans)
    runs, current = [], []
    for tid, label in zip(enc["input_ids"], labels, strict=True):
        if label != -100:
            assert label == tid
            current.append(tid)
        elif current:
            runs.append(tok.decode(current)), current.clear()
    if current:
        runs.append(tok.decode(current))
    return runs


CHAT = [
    {"role": "system", "content": "你是酒店客服。"},
    {"role": "user", "content": "湖畔酒店几点可以入住？"},
    {"role": "assistant", "content": "下午两点以后。"},
    {"role": "user", "content": "有早餐吗？"},
    {"role": "assistant", "content": "含双人早餐。"},
]


# --- templates and masks -----------------------------------------------------------------------


def test_chatml_mask_covers_exactly_the_assistant_turns(tokenizer):
    import copy

    from nlptasks_plugins.sft.templates import choose_template

    tok = copy.deepcopy(tokenizer)
    template = choose_template("auto", tok, scratch=True)
    assert template.name == "chatml" and template.stop_tokens == ("<|im_end|>",)
    assert in_loss(tok, CHAT) == ["下午两点以后。<|im_end|>", "含双人早餐。<|im_end|>"]


def test_alpaca_mask_includes_the_eos_token(tokenizer):
    import copy

    from nlptasks_plugins.sft.templates import choose_template, render

    tok = copy.deepcopy(tokenizer)
    choose_template("alpaca", tok, scratch=True)
    messages = [
        {"role": "user", "content": "重复下面这句话。\n\n早餐在二楼餐厅。"},
        {"role": "assistant", "content": "早餐在二楼餐厅。"},
    ]
    assert in_loss(tok, messages) == ["早餐在二楼餐厅。<|endoftext|>"]
    assert render(tok, messages[:1], generation_prompt=True).endswith("### Response:\n")


def test_a_template_that_rewrites_earlier_turns_is_refused(tokenizer):
    import copy

    from nlptasks_plugins.sft.templates import supervised_spans

    tok = copy.deepcopy(tokenizer)
    # Puts the number of turns first: every longer rendering changes the beginning.
    tok.chat_template = "{{ messages|length }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="prefix-stable"):
        supervised_spans(tok, CHAT)


def test_template_tokenizer_without_one_is_a_recipe_error(tokenizer):
    import copy

    from nlptasks import NlptasksError
    from nlptasks_plugins.sft.templates import choose_template

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = None
    with pytest.raises(NlptasksError, match="options.template"):
        choose_template("tokenizer", tok, scratch=False)


def test_generation_metrics():
    from nlptasks_plugins.sft.metrics import char_f1, exact_match, rouge_l

    assert exact_match(" 杭州 ", "杭州") == 1.0 and exact_match("杭州市", "杭州") == 0.0
    assert char_f1("杭州", "杭州") == 1.0 and char_f1("南京", "杭州") == 0.0
    assert rouge_l("the cat sat", "the cat sat down") == pytest.approx(2 * 1 * 0.75 / 1.75)
    assert rouge_l("下午两点", "下午三点") == pytest.approx(0.75)


# --- packing -----------------------------------------------------------------------------------


def test_packed_batch_has_the_same_loss_as_the_padded_batch():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, DataCollatorWithFlattening

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(
        "qwen2",
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        use_cache=False,
    )
    model = AutoModelForCausalLM.from_config(cfg).eval()
    examples = [
        {"input_ids": [5, 6, 7, 8, 9, 10], "labels": [-100, -100, -100, 8, 9, 10]},
        {"input_ids": [11, 12, 13], "labels": [-100, 12, 13]},
    ]
    packed = DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)(examples)
    assert packed["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2]]
    width = 6
    padded = {
        "input_ids": torch.tensor([e["input_ids"] + [0] * (width - len(e["input_ids"])) for e in examples]),
        "attention_mask": torch.tensor(
            [[1] * len(e["input_ids"]) + [0] * (width - len(e["input_ids"])) for e in examples]
        ),
        "labels": torch.tensor([e["labels"] + [-100] * (width - len(e["labels"])) for e in examples]),
    }
    with torch.no_grad():
        loss_packed = model(**packed).loss
        loss_padded = model(**padded).loss
    assert loss_packed.item() == pytest.approx(loss_padded.item(), abs=1e-5)


def test_packing_refuses_a_model_whose_attention_crosses_examples():
    from transformers import AutoConfig, AutoModelForCausalLM, DataCollatorWithFlattening

    from nlptasks import RecipeError
    from nlptasks.plugin import use_segment_attention
    from nlptasks_plugins.sft.packing import check_packing

    plain = DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)
    split = DataCollatorWithFlattening(return_position_ids=True, separator_id=-100, return_flash_attn_kwargs=True)
    ok = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(
            "llama",
            vocab_size=50,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=64,
        )
    )
    check_packing(ok, plain)
    assert use_segment_attention(ok)
    check_packing(ok, split)
    bloom = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(  # ALiBi: no position ids to restart
            "bloom", vocab_size=50, hidden_size=32, n_layer=1, n_head=2
        )
    )
    assert not use_segment_attention(bloom)  # not an SDPA model of the attention interface: left alone
    for collator in (plain, split):
        with pytest.raises(RecipeError, match="options.packing"):
            check_packing(bloom, collator)


# --- dirty data and truncation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"instruction": "问题", "input": "", "output": ""}, "empty 'output'"),
        ({"instruction": "", "input": "x", "output": "答"}, "empty 'instruction'"),
        ({"messages": [{"role": "user", "content": "你好"}]}, "last turn must be the assistant"),
        (
            {"messages": [{"role": "robot", "content": "你好"}, {"role": "assistant", "content": "好"}]},
            "unknown role 'robot'",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "system", "content": "b"},
                    {"role": "assistant", "content": "c"},
                ]
            },
            "system turn may only come first",
        ),
    ],
)
def test_malformed_rows_name_the_file_and_row(tmp_path, cli, row, message):
    good = demo_rows(5)
    if "messages" in row:
        good = [
            {"messages": [{"role": "user", "content": r["instruction"]}, {"role": "assistant", "content": r["output"]}]}
            for r in good
        ]
    train = write_jsonl(tmp_path / "train.jsonl", [*good[:3], row, *good[3:]])
    code, out, err = cli("inspect-batch", QUICKSTART, *sets(f"data.train={train}", "data.validation=", "data.test="))
    assert code == 2
    assert re.search(rf"{re.escape(str(train))}[^:]*:4: ", err), err  # file (and how it was split), row 4
    assert message in err and "options.bad_rows=skip" in err and "Traceback" not in err


def test_skip_bad_rows_counts_them(tmp_path, cli):
    rows = demo_rows(20)
    rows[3]["output"] = ""
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    code, out, err = cli(
        "inspect-batch",
        QUICKSTART,
        *sets(
            f"data.train={train}",
            "data.validation=",
            "data.test=",
            "options.bad_rows=skip",
            "data.split.validation=0.2",
        ),
    )
    assert code == 0, err
    assert "1 malformed" in out


def test_a_value_of_the_wrong_kind_is_named_or_skipped(tmp_path, cli):
    """A list or an object where text belongs: among text rows, step 2 names the row (and
    options.bad_rows=skip leaves it out, counted); in every row, the row is named by the plugin:
    its repr is never trained on."""
    rows = demo_rows(20)
    rows[3]["instruction"] = ["问", "题"]
    rows[5]["output"] = {"text": "答"}
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    base = sets(f"data.train={train}", "data.validation=", "data.test=", "data.split.validation=0.2")
    code, out, err = cli("inspect-batch", QUICKSTART, *base)
    assert code == 2 and f"{train}:4: column 'instruction': a list" in err, err
    code, out, err = cli("inspect-batch", QUICKSTART, *base, "--set", "options.bad_rows=skip")
    assert code == 0, err
    assert "2 malformed" in out
    every = write_jsonl(tmp_path / "every.jsonl", [{**r, "output": {"text": r["output"]}} for r in demo_rows(20)])
    code, out, err = cli("inspect-batch", QUICKSTART, *sets(f"data.train={every}", "data.validation=", "data.test="))
    assert code == 2 and re.search(rf"{re.escape(str(every))}[^:]*:\d+: 'output' must be text, got an object", err), err
    turns = [
        [{"role": "user", "content": r["instruction"]}, {"role": "assistant", "content": r["output"]}]
        for r in demo_rows(20)
    ]
    listed = [[{**t, "content": [t["content"]]} for t in pair] for pair in turns]
    chat = write_jsonl(tmp_path / "chat.jsonl", [{"messages": m} for m in listed])
    code, out, err = cli("inspect-batch", QUICKSTART, *sets(f"data.train={chat}", "data.validation=", "data.test="))
    assert code == 2 and "turn 1 (user): 'content' must be text, got a list" in err, err
    turns[6][0]["content"] = ["问"]  # one turn of one row: pyarrow cannot table it with the others
    chat = write_jsonl(tmp_path / "mixed.jsonl", [{"messages": m} for m in turns])
    base = sets(f"data.train={chat}", "data.validation=", "data.test=", "data.split.validation=0.2")
    code, out, err = cli("inspect-batch", QUICKSTART, *base)
    assert code == 2 and f"{chat}:7: column 'messages': its value mixes kinds" in err, err
    code, out, err = cli("inspect-batch", QUICKSTART, *base, "--set", "options.bad_rows=skip")
    assert code == 0 and "1 malformed" in out, err


def test_a_response_cut_away_by_max_length_is_an_error_or_a_counted_drop(tmp_path, cli):
    rows = demo_rows(20)
    rows[5]["instruction"] = "请仔细阅读下面这段很长的说明。" * 30
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    base = sets(
        f"data.train={train}", "data.validation=", "data.test=", "data.split.validation=0.2", "data.split.seed=1"
    )
    code, out, err = cli("inspect-batch", QUICKSTART, *base)
    assert code == 2
    assert (
        "response is cut away entirely" in err
        and re.search(rf"{re.escape(str(train))}[^:]*:6: ", err)
        and "options.no_response=drop" in err
    )
    code, out, err = cli("inspect-batch", QUICKSTART, *base, "--set", "options.no_response=drop")
    assert code == 0, err
    assert "1 response cut away by max_length" in out


def test_inspect_batch_shows_tokens_and_loss_flags(cli):
    code, out, err = cli("inspect-batch", QUICKSTART, "--rows", "2")
    assert code == 0, err
    assert out.count("\nexample ") == 2
    first = json.loads(DEMO_TRAIN.read_text(encoding="utf-8").splitlines()[0])
    assert f"«{first['output']}<|im_end|>»" in out  # exactly the answer and its end-of-turn marker
    assert "<|im_start|>" in out
    assert "ok: every example of train, validation, test has labels for the loss: labels (token)" in out


def test_inspect_batch_fails_when_an_example_has_no_token_in_the_loss():
    """A plugin (here a wrapper around step 4) that leaves train examples without any token in the
    loss: inspect-batch names them and never says ok."""
    from nlptasks import NlptasksError, hookimpl
    from nlptasks.pipeline import inspect_batch, load_recipe
    from nlptasks.testing import plugin_host

    class NoLoss:
        @hookimpl(wrapper=True)
        def nlptasks_preprocess(self, ctx, data):
            data = yield
            data["train"] = data["train"].map(lambda e: {"labels": [-100] * len(e["labels"])})
            return data

    host = plugin_host(builtins=True, noloss=NoLoss())
    loaded = load_recipe(QUICKSTART, ["data.max_train_rows=10", "data.max_eval_rows=4"], host=host)
    lines: list[str] = []
    with pytest.raises(NlptasksError, match=r"10 example\(s\) give the loss nothing") as info:
        inspect_batch(loaded, rows=1, host=host, out=lines.append)
    assert "train.jsonl: 10 example(s) with no token in the loss (labels): rows 1, 2, 3" in str(info.value)
    assert not any(line.startswith("\nok") for line in lines)


# --- runs: memorization, inference, packing ------------------------------------------------------


@pytest.fixture(scope="module")
def memorized(runs):
    """~32 examples, many epochs, every weight trained: greedy generation must give back the
    trained answers."""
    data = write_jsonl(runs / "mem.jsonl", demo_rows(32))
    return tiny_run(
        runs,
        QUICKSTART,
        "mem",
        f"data.train={data}",
        f"data.validation={data}",
        "data.test=",
        "peft.method=none",
        "model.scratch.hidden=64",
        "model.scratch.intermediate=256",
        "model.scratch.min_frequency=1",
        "train.batch_size=8",
        "train.eval_strategy=no",
        "options.generation_eval.rows=32",
        "options.generation_eval.metric=exact_match",
        tiny=(),
        epochs=40,
    )


def test_memorization_greedy_generation_reproduces_the_answers(memorized, cli, tmp_path):
    rows = demo_rows(32)
    metrics = read_metrics(memorized)
    assert metrics["validation"]["gen_exact_match"] >= 0.95
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{k: r[k] for k in ("instruction", "input")} for r in rows])
    code, out, err = cli("infer", "--model", memorized, "--file", prompts, "--batch-size", "7")
    assert code == 0, err
    results = [json.loads(line) for line in out.splitlines()]
    assert len(results) == 32
    exact = sum(res["response"] == r["output"] for res, r in zip(results, rows, strict=True))
    assert exact >= 30, [
        (res["response"], r["output"]) for res, r in zip(results, rows, strict=True) if res["response"] != r["output"]
    ]
    # Batched (length-sorted, left-padded) generation gives what one prompt at a time gives.
    one = rows[0]["instruction"] if not rows[0]["input"] else None
    if one:
        code, out1, _ = cli("infer", "--model", memorized, "--batch-size", "1", one)
        assert json.loads(out1)["response"] == results[0]["response"]


def test_eval_lists_only_the_answers_that_differ_from_their_reference(memorized, cli, tmp_path):
    """`nlptasks eval`'s errors are the generations that are not the reference (whitespace
    collapsed, as exact_match compares): none of the answers the run reproduces is listed."""
    data = memorized.parent.parent / "mem.jsonl"
    out = tmp_path / "eval"
    code, stdout, err = cli("eval", memorized, "--data", data, "--output", out)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()]
    generated = 32
    assert metrics["test"]["gen_exact_match"] >= 0.9
    assert len(errors) == metrics["errors"] == round((1 - metrics["test"]["gen_exact_match"]) * generated)
    assert all(" ".join(e["generation"].split()) != " ".join(e["reference"].split()) for e in errors)
    assert f"errors: {len(errors)} wrong prediction(s)" in stdout


def test_run_directory_stores_the_template_and_loads_in_plain_transformers(memorized):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest = json.loads((memorized / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["task"] == "sft" and manifest["template"] == "chatml"
    assert manifest["stop_tokens"] == ["<|endoftext|>", "<|im_end|>"]
    tok = AutoTokenizer.from_pretrained(memorized)
    model = AutoModelForCausalLM.from_pretrained(memorized)
    row = demo_rows(32)[1]
    content = row["instruction"] + (f"\n\n{row['input']}" if row["input"] else "")
    inputs = tok.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**inputs, max_new_tokens=40, do_sample=False)  # stops by generation_config
    assert tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip() == row["output"]


def test_infer_generation_flags(memorized, cli):
    code, out, err = cli("infer", "--model", memorized, "--max-new-tokens", "1", "湖畔酒店几点可以入住？")
    assert code == 0, err
    short = json.loads(out)["response"]
    code, out, err = cli("infer", "--model", memorized, "湖畔酒店几点可以入住？")
    assert len(short) < len(json.loads(out)["response"])
    code, out, err = cli(
        "infer", "--model", memorized, "--temperature", "0.8", "--top-p", "0.9", "湖畔酒店几点可以入住？"
    )
    assert code == 0 and json.loads(out)["response"]
    with pytest.raises(SystemExit) as info:  # argparse: --top-p is in (0, 1] (tests/test_cli_numbers.py)
        cli("infer", "--model", memorized, "--top-p", "1.5", "x")
    assert info.value.code == 2


def test_infer_names_inputs_that_are_not_prompts(memorized, cli, tmp_path):
    """Rows that hold no prompt (null, a list, an object where text belongs) are errors naming the
    row: a predictor never generates from a value's repr."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"instruction": "湖畔酒店几点可以入住？"}\n{"instruction": ["a", "b"]}\n', encoding="utf-8")
    code, out, err = cli("infer", "--model", memorized, "--file", src)
    assert code == 2 and f"{src}:2: field 'instruction' holds a list" in err, err
    src.write_text('{"instruction": null}\n', encoding="utf-8")
    code, out, err = cli("infer", "--model", memorized, "--file", src)
    assert code == 2 and f"{src}:1: field 'instruction' is null" in err, err
    src.write_text('{"instruction": 5}\n', encoding="utf-8")
    code, out, err = cli("infer", "--model", memorized, "--file", src)
    assert code == 2 and f"{src}:1: field 'instruction' holds a number" in err, err
    src.write_text('{"messages": [{"role": "user", "content": {"text": "hi"}}]}\n', encoding="utf-8")
    code, out, err = cli("infer", "--model", memorized, "--file", src)
    assert code == 2 and "field 'messages[0].content' holds an object" in err and "{'text'" not in out, err


def test_infer_reads_chat_rows(memorized, cli, tmp_path):
    row = demo_rows(32)[2]
    content = row["instruction"] + (f"\n\n{row['input']}" if row["input"] else "")
    chat = write_jsonl(
        tmp_path / "chat.jsonl",
        [{"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "(reference)"}]}],
    )
    code, out, err = cli("infer", "--model", memorized, "--file", chat)
    assert code == 0, err
    assert json.loads(out) == {"prompt": content, "response": row["output"]}


def test_generation_flags_on_a_task_that_does_not_generate(cli, tmp_path):
    run = tiny_run(tmp_path / "runs", "cls.toml", "t", "data.max_train_rows=64", "data.max_eval_rows=16")
    code, out, err = cli("infer", "--model", run, "--max-new-tokens", "5", "服务很好")
    assert code == 2 and "does not generate" in err


def test_quickstart_with_packing_trains_and_says_how(tmp_path):
    run = tiny_run(
        tmp_path,
        QUICKSTART,
        "p",
        "options.packing=true",
        "data.max_train_rows=96",
        "data.max_eval_rows=16",
        "options.generation_eval.rows=4",
        "options.generation_eval.every_steps=5",
        "train.batch_size=16",
        tiny=TINY_DECODER,
        epochs=2,
    )
    # The generation metric is logged during training (every 5 of the 12 steps) beside the loss.
    assert len(re.findall(r"validation \(epoch [\d.]+\): gen_char_f1 [\d.]+", run.err)) == 2, run.err
    metrics = read_metrics(run)
    assert metrics["validation"]["perplexity"] == pytest.approx(2.718281828 ** metrics["validation"]["loss"], rel=1e-6)
    assert "gen_rouge_l" not in metrics["validation"] and "gen_char_f1" in metrics["validation"]


def test_packed_runs_split_attention_per_example_with_the_same_result(tmp_path):
    """On the CPU a packed run computes attention example by example (recorded in nlptasks.json);
    forcing SDPA's block-diagonal mask instead (optimize.attention = "sdpa") trains to the same
    validation loss: the split changes the work, not the result."""
    losses = {}
    for name, attention in (("split", "auto"), ("mask", "sdpa")):
        run = tiny_run(
            tmp_path,
            QUICKSTART,
            name,
            "options.packing=true",
            "data.max_train_rows=64",
            "data.max_eval_rows=16",
            "options.generation_eval.rows=2",
            "options.generation_eval.max_new_tokens=4",
            "peft.dropout=0",
            f"optimize.attention={attention}",
            tiny=TINY_DECODER,
        )
        manifest = json.loads((run / "nlptasks.json").read_text(encoding="utf-8"))
        assert manifest["attention"] == ("nlptasks_segment_sdpa" if attention == "auto" else "sdpa")
        configs = list(run.rglob("config.json"))
        assert configs and not any("segment" in c.read_text(encoding="utf-8") for c in configs)
        losses[name] = read_metrics(run)["validation"]["loss"]
    assert losses["split"] == pytest.approx(losses["mask"], abs=1e-4)


def test_packing_with_bloom_is_a_recipe_error(tmp_path, cli):
    code, out, err = cli(
        "run",
        QUICKSTART,
        "--no-progress",
        *sets(
            *TINY_DECODER,
            "model.scratch.architecture=bloom",
            "options.packing=true",
            "data.max_train_rows=32",
            f"output.dir={tmp_path}",
        ),
    )
    assert code == 2 and "options.packing" in err and "Traceback" not in err


def test_a_word_level_vocabulary_is_refused_for_generation(tmp_path, cli):
    code, out, err = cli(
        "run", QUICKSTART, "--no-progress", *sets("model.scratch.tokenizer=char", f"output.dir={tmp_path}")
    )
    assert code == 2 and "model.scratch.tokenizer" in err and "'bpe'" in err


# --- real data ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alpaca_zh", "alpaca_en"])
def test_real_alpaca_loss_falls_and_masks_are_right(name, tmp_path, cli):
    folder = shared(name)
    data = [
        f"data.train={folder / 'train.jsonl'}",
        f"data.validation={folder / 'validation.jsonl'}",
        "data.test=",
        "data.max_train_rows=240",
        "data.max_eval_rows=40",
        "model.max_length=256",
        "options.no_response=drop",
    ]
    code, out, err = cli("inspect-batch", QUICKSTART, *sets(*data), "--rows", "1")
    assert code == 0, err
    first = json.loads((folder / "train.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert "«" + first["output"].strip()[:10] in out
    run = tiny_run(
        tmp_path,
        QUICKSTART,
        "r",
        *data,
        "model.scratch.vocab_size=3000",
        "train.batch_size=8",
        "train.learning_rate=2e-3",
        "train.logging_steps=5",
        "options.generation_eval.rows=4",
        tiny=(),
        epochs=2,
    )
    metrics = read_metrics(run)
    config = run / "base" / "config.json"  # a LoRA run (the quickstart's): the frozen base's config
    vocab = json.loads(config.read_text(encoding="utf-8"))["vocab_size"]
    first_loss = _first_logged_loss(run.err)
    # Below the loss of the first logged steps, and well below guessing (log of the vocabulary).
    assert metrics["validation"]["loss"] < first_loss - 0.5, (first_loss, metrics["validation"])
    assert metrics["validation"]["loss"] < math.log(vocab) - 0.8, (vocab, metrics["validation"])


def _first_logged_loss(stderr: str) -> float:
    import re

    match = re.search(r"step \d+/\d+ \(epoch [\d.]+\): loss ([\d.]+)", stderr)
    assert match, stderr[-2000:]
    return float(match.group(1))


@pytest.mark.parametrize("method", ["prefix", "prompt"])
def test_packing_with_a_virtual_token_peft_method_is_a_recipe_error(tmp_path, cli, method):
    recipe = without_peft_table(tmp_path)
    code, out, err = cli(
        "run",
        recipe,
        "--no-progress",
        *sets(
            *TINY_DECODER,
            "options.packing=true",
            f"peft.method={method}",
            "peft.num_virtual_tokens=4",
            "data.max_train_rows=16",
            f"output.dir={tmp_path}",
        ),
    )
    assert code == 2 and "options.packing" in err and method in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (["model.scratch.architecture=bloom"], "lets packed examples attend to each other"),
        (["peft.method=prefix", "peft.num_virtual_tokens=4"], "adds virtual tokens"),
        (["train.padding=max_length"], "asks for fixed shapes"),
    ],
    ids=["alibi-attention", "virtual-tokens", "fixed-padding"],
)
def test_packing_auto_turns_itself_off_and_says_why(tmp_path, settings, reason):
    """options.packing defaults to "auto": where packing cannot keep examples apart, or the recipe
    asks for something packing cannot give, the run trains unpacked and the log names the reason."""
    recipe = without_peft_table(tmp_path)
    run = tiny_run(
        tmp_path,
        recipe,
        "r",
        *settings,
        "data.max_train_rows=16",
        "data.max_eval_rows=8",
        "options.generation_eval.rows=1",
        tiny=TINY_DECODER,
    )
    assert re.search(r'packing off \(options.packing = "auto"\): .*' + re.escape(reason), run.err), run.err
    manifest = json.loads((run / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["packing"] is False
    assert read_metrics(run)["train"]["padding_fraction"] > 0


def test_packing_is_on_by_default_and_unpacked_training_gives_the_same_loss(tmp_path):
    """The default packs (no padding in the token count) and trains to the loss of the same run
    unpacked: same examples, same order, same updates (every weight trained: no dropout masks)."""
    recipe = without_peft_table(tmp_path)
    losses = {}
    for name, packing in (("default", None), ("unpacked", "false")):
        run = tiny_run(
            tmp_path,
            recipe,
            name,
            "data.max_train_rows=48",
            "data.max_eval_rows=16",
            "options.generation_eval.rows=1",
            *([f"options.packing={packing}"] if packing else []),
            tiny=TINY_DECODER,
        )
        manifest = json.loads((run / "nlptasks.json").read_text(encoding="utf-8"))
        assert manifest["packing"] is (packing is None)
        metrics = read_metrics(run)
        assert (metrics["train"]["padding_fraction"] == 0) is (packing is None)
        losses[name] = metrics["train"]["loss"]
    assert losses["default"] == pytest.approx(losses["unpacked"], rel=1e-4)


def test_peft_method_none_switches_the_quickstarts_lora_off(cli):
    code, out, err = cli("validate", QUICKSTART, "--show")
    assert code == 0 and "[peft]" in out and 'method = "lora"' in out
    code, out, err = cli("validate", QUICKSTART, "--show", "--set", "peft.method=none")
    assert code == 0, err
    assert "[peft]" not in out and "r = 32" not in out


def test_the_qlora_hub_recipe_stops_at_once_without_cuda(cli, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, out, err = cli("run", RECIPES / "hub" / "sft-qwen-qlora.toml", "--set", f"output.dir={tmp_path}")
    assert code == 2 and "peft.quantization" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # refused before anything was loaded or written


def test_quickstart_lora_run_loads_in_plain_peft_and_exports_a_checked_merge(tmp_path, cli):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tiny_run(
        tmp_path,
        QUICKSTART,
        "lora",
        "data.max_train_rows=128",
        "data.max_eval_rows=16",
        "options.generation_eval.rows=4",
        tiny=(),
        epochs=6,
    )
    assert "trainable" in run.err and (run / "adapter_model.safetensors").exists() and (run / "base").is_dir()
    prompts = [r["instruction"] for r in demo_rows(128) if not r["input"]][:6]
    code, out, err = cli("infer", "--model", run, "--precision", "fp32", *prompts)  # as plain peft: fp32
    assert code == 0, err
    adapter_answers = [json.loads(line)["response"] for line in out.splitlines()]

    # Plain peft: the frozen base from base/, the adapter from the run folder.
    tok = AutoTokenizer.from_pretrained(run)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run / "base"), run).eval()
    inputs = tok.apply_chat_template(
        [{"role": "user", "content": prompts[0]}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    generated = model.generate(**inputs, max_new_tokens=40, do_sample=False)
    assert (
        tok.decode(generated[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip() == adapter_answers[0]
    )

    code, out, err = cli("export", run, "--merge", tmp_path / "merged")
    assert code == 0, err
    assert "same predictions" in out
    code, out, err = cli("infer", "--model", tmp_path / "merged", "--precision", "fp32", *prompts)
    assert code == 0, err
    assert [json.loads(line)["response"] for line in out.splitlines()] == adapter_answers


def test_chat_rows_with_a_system_prompt_mask_every_assistant_turn(tmp_path, cli):
    rows = [
        {
            "messages": [
                {"role": "user", "content": r["instruction"]},
                {"role": "assistant", "content": "好的。"},
                {"role": "user", "content": "再说一遍"},
                {"role": "assistant", "content": r["output"]},
            ]
        }
        for r in demo_rows(12)
    ]
    train = write_jsonl(tmp_path / "chat.jsonl", rows)
    code, out, err = cli(
        "inspect-batch",
        QUICKSTART,
        "--rows",
        "1",
        *sets(
            f"data.train={train}",
            "data.validation=",
            "data.test=",
            "data.split.validation=0.25",
            "data.split.seed=3",
            "options.system=你是酒店客服。",
        ),
    )
    assert code == 0, err
    text = next(line for line in out.splitlines() if line.startswith("  text: "))
    assert text.startswith("  text: <|im_start|>system⏎你是酒店客服。<|im_end|>")
    assert text.count("«") == 2 and "«好的。<|im_end|>»" in text  # both assistant turns, nothing else
    first = next(r for r in rows if r["messages"][0]["content"] in text)
    assert f"«{first['messages'][-1]['content']}<|im_end|>»" in text


def test_python_api_load_gives_what_infer_prints(memorized, cli):
    import nlptasks

    prompts = ["湖畔酒店几点可以入住？", {"instruction": "重复下面这句话。", "input": "早餐在二楼餐厅。"}]
    code, out, err = cli("infer", "--model", memorized, prompts[0])
    assert code == 0, err
    predict = nlptasks.load(memorized)
    results = predict(prompts)
    assert results[0] == json.loads(out)
    assert results[1]["prompt"] == "重复下面这句话。\n\n早餐在二楼餐厅。"
    with pytest.raises(nlptasks.NlptasksError, match="no such folder"):
        nlptasks.load(memorized / "missing")
