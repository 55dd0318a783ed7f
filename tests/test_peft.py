"""PEFT end to end: every method × every task trains, saves an adapter, moves, reloads through
``nlptasks infer`` and predicts, or is refused by recipe validation exactly where
``nlptasks.peft_support`` says it does not work; parameter counts, saved files, several adapters
on one base, ``nlptasks export --merge`` and its check, the GPU-only keys and the key errors.

Tiny from-scratch models (1 layer, hidden 32), 16 rows of the demo data, 2 steps.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import RECIPES, TINY, RunFolder, tiny_run
from nlptasks.peft_support import METHODS, unsupported_reason


@dataclass(frozen=True)
class Task:
    """One row of the matrix: a recipe, the peft task type its plugin must declare, an input for
    ``nlptasks infer`` and the key every prediction must have."""

    id: str
    recipe: Path
    task_type: str
    infer: tuple[str, ...]
    result_key: str
    sets: tuple[str, ...] = field(default=())


# Adding a task to the matrix is one entry (e.g. Task("sft", RECIPES / "sft.toml", "CAUSAL_LM", ...)).
TASKS = [
    Task("cls", RECIPES / "cls.toml", "SEQ_CLS", ("这家酒店服务很好",), "label"),
    Task("ner", RECIPES / "ner.toml", "TOKEN_CLS", ("小明在北京大学读书",), "entities"),
    Task(
        "pair-cross", RECIPES / "pair.toml", "SEQ_CLS", ("怎么退款", "如何申请退款"), "label", ("options.mode=cross",)
    ),
    Task(
        "pair-bi",
        RECIPES / "pair.toml",
        "FEATURE_EXTRACTION",
        ("怎么退款", "如何申请退款"),
        "similarity",
        ("options.mode=bi",),
    ),
    Task(
        "sft",
        RECIPES / "sft.toml",
        "CAUSAL_LM",
        ("湖畔酒店几点可以入住？",),
        "response",
        ("options.generation_eval.rows=1", "options.generation_eval.max_new_tokens=4", "model.scratch.min_frequency=1"),
    ),
]
BY_ID = {t.id: t for t in TASKS}

METHOD_SETS = {
    "lora": ("peft.r=4",),
    "prefix": ("peft.num_virtual_tokens=4",),
    "p_tuning": ("peft.num_virtual_tokens=4", "peft.encoder_hidden_size=16"),
    "prompt": ("peft.num_virtual_tokens=4",),
    "ia3": (),
}

STEPS = [
    "data.max_train_rows=16",
    "data.max_eval_rows=8",
    "train.max_steps=2",
    "train.batch_size=8",
    "train.eval_strategy=no",
    "train.learning_rate=0.05",
    "train.warmup=0",
]
FAST = [*TINY, *STEPS]


def argv(command: str, *args: object, sets: list[str] | tuple[str, ...] = ()) -> list[str]:
    out = [command, *(str(a) for a in args)]
    for s in sets:
        out += ["--set", s]
    return out


@pytest.fixture(scope="module")
def train(runs):
    """``train(task_id, method, *sets)`` → the run folder (its stderr: ``.err``); each distinct run
    once.  ``exit_code=2``: a run validation must refuse."""
    done: dict[tuple[str, ...], RunFolder] = {}

    def call(task_id: str, method: str, *sets: str, exit_code: int = 0) -> RunFolder:
        key = (task_id, method, *sets)
        if key not in done:
            task = BY_ID[task_id]
            done[key] = tiny_run(
                runs,
                task.recipe,
                f"{task_id}-{method}-{len(done)}",
                *STEPS,
                *task.sets,
                f"peft.method={method}",
                *METHOD_SETS[method],
                *sets,
                epochs=None,
                exit_code=exit_code,
            )
        return done[key]

    return call


def infer(cli, run_dir: Path, *inputs: str, extra: tuple[str, ...] = ()) -> list[dict]:
    code, out, err = cli("infer", "--model", run_dir, *extra, *inputs)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


# --- the matrix ------------------------------------------------------------------------------


def test_the_plugins_declare_the_task_types_of_the_matrix():
    from nlptasks.pipeline import load_recipe

    for task in TASKS:
        loaded = load_recipe(task.recipe, [*task.sets, "peft.method=lora"])
        assert loaded.task.peft_task_type_for(loaded.options) == task.task_type, task.id


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_matrix(task, method, train, cli, tmp_path):
    """Works where the support table says so (train, save, move, infer), else a recipe error."""
    from nlptasks.pipeline import load_recipe

    loaded = load_recipe(task.recipe, list(task.sets))  # the task and its options: the task's own word
    reason = loaded.task.peft_reason(loaded.options, method)
    assert reason == unsupported_reason(task.task_type, method)  # the built-ins refuse nothing of their own
    if reason is not None:
        run_dir = train(task.id, method, exit_code=2)
        assert f"peft.method: '{method}' does not work for task" in run_dir.err and task.task_type in run_dir.err
        assert not run_dir.exists()  # refused by validation, before anything ran
        return
    run_dir = train(task.id, method)
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["peft"]["method"] == method and manifest["peft"]["task_type"] == task.task_type
    assert (run_dir / "adapter_config.json").exists() and (run_dir / "adapter_model.safetensors").exists()
    assert not (run_dir / "model.safetensors").exists()  # no full model at the top: the adapter only
    assert (run_dir / "base" / "model.safetensors").exists()  # the frozen random base (from scratch)
    moved = tmp_path / "elsewhere"
    shutil.copytree(run_dir, moved)  # loads from the folder alone, wherever it is
    results = infer(cli, moved, *task.infer)
    assert results and all(task.result_key in r for r in results)


def test_prefix_is_refused_by_validate_exactly_when_the_encoders_drop_it(cli):
    """The refusal of prefix tuning for encoder heads follows the transformers installed: it is made
    by `validate` (no model built) when BERT's forward has no past_key_values, with the reason."""
    import inspect

    import transformers

    takes = "past_key_values" in inspect.signature(transformers.BertModel.forward).parameters
    code, err = validate(cli, "peft.method=prefix", "peft.num_virtual_tokens=4")
    if takes:
        assert code == 0, err
    else:
        assert code == 2
        assert (
            "peft.method: 'prefix' does not work for task 'cls' (SEQ_CLS): peft passes the prefix as past_key_values"
            in err
            and "use one of: lora, p_tuning, prompt, ia3" in err
        )


def test_prefix_problem_follows_the_forward_signature():
    """Refused exactly when neither the model nor its backbone takes past_key_values (the argument
    peft hands the prefix over in); causal LMs and plain encoders are never refused."""
    import inspect

    from transformers import BertConfig, BertForSequenceClassification

    from nlptasks.engine.model.peft import prefix_problem

    model = BertForSequenceClassification(
        BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    )
    takes = any("past_key_values" in inspect.signature(m.forward).parameters for m in (model, model.bert))
    assert (prefix_problem(model, "SEQ_CLS") is None) == takes
    assert prefix_problem(model, "CAUSAL_LM") is None and prefix_problem(model, "FEATURE_EXTRACTION") is None


# --- what is saved, and the parameter counts ------------------------------------------------


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_lora_counts_and_files(train):
    """hidden 32, 1 layer, r 4 on query and value: 2 × 4 × (32 + 32) = 512 LoRA weights, plus the
    classifier head (32 × 2 + 2 = 66) that peft trains in full for classification."""
    from safetensors import safe_open
    from transformers import AutoModelForSequenceClassification

    run_dir = train("cls", "lora")
    info = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["peft"]
    assert info["trainable_parameters"] == 512 + 66
    base = AutoModelForSequenceClassification.from_pretrained(run_dir / "base")
    # the PeftModel holds the base, the LoRA matrices and a trained copy of the head
    assert info["total_parameters"] == count(base) + 512 + 66
    share = 100 * 578 / info["total_parameters"]
    assert f"trainable 578 of {info['total_parameters']:,} parameters ({share:.1f}%)" in run_dir.err
    with safe_open(str(run_dir / "adapter_model.safetensors"), "pt") as fh:
        keys = list(fh.keys())
    assert sum(1 for k in keys if "lora_A" in k or "lora_B" in k) == 4
    assert {k for k in keys if "lora" not in k} == {
        "base_model.model.classifier.weight",
        "base_model.model.classifier.bias",
    }  # no frozen base weight in the adapter
    assert info["base"]["kind"] == "scratch" and info["adapters"] == {"default": {"path": ".", "method": "lora"}}


def test_prompt_method_trains_only_the_virtual_tokens_and_head(train):
    run_dir = train("cls", "prompt")
    info = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["peft"]
    assert info["trainable_parameters"] == 4 * 32 + 66  # 4 virtual tokens × hidden 32, and the head


def test_prompt_init_text(train, cli, tmp_path):
    run_dir = train("cls", "prompt", "peft.prompt_init_text='服务很好'", "train.learning_rate=1e-9")
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    moved = tmp_path / "moved"
    shutil.move(str(run_dir), moved)  # the tokenizer path peft recorded no longer exists
    assert infer(cli, moved, "服务很好")[0]["label"] in {"正面", "负面"}
    weights = load_file(str(moved / "adapter_model.safetensors"))
    (prompt,) = [v for k, v in weights.items() if "prompt_embeddings" in k or "embedding" in k]
    base = AutoModelForSequenceClassification.from_pretrained(moved / "base")
    # the 4 virtual tokens start as the embeddings of the text's first 4 tokens as the tokenizer
    # encodes it ([CLS] 服 务 很); a learning rate of 1e-9 leaves them there
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(moved)("服务很好")["input_ids"][:4]
    start = base.bert.embeddings.word_embeddings.weight[ids].detach()
    assert float((prompt - start).abs().max()) < 1e-6


def test_base_only_and_adapter_differ(train, cli):
    """The adapter matters: the check inputs give other logits without it (so the merge check
    below compares something)."""
    from nlptasks.inference.merge import model_outputs
    from nlptasks.plugin import load_trained_model

    run_dir = train("cls", "lora")
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    check = json.loads((run_dir / "examples.json").read_text(encoding="utf-8"))["inputs"]
    with_adapter = model_outputs(
        load_trained_model(run_dir, manifest, "AutoModelForSequenceClassification"), check, "SEQ_CLS"
    )
    bare = {**manifest, "peft": {**manifest["peft"], "base_only": True}}  # what --base-only hands step 10
    base = model_outputs(load_trained_model(run_dir, bare, "AutoModelForSequenceClassification"), check, "SEQ_CLS")
    assert max(float((a["logits"] - b["logits"]).abs().max()) for a, b in zip(with_adapter, base, strict=True)) > 1e-3
    ours = infer(cli, run_dir, "这家酒店服务很好")[0]
    bare = infer(cli, run_dir, "这家酒店服务很好", extra=("--base-only",))[0]
    assert ours["score"] != bare["score"]


# --- several adapters on one base -------------------------------------------------------------


def test_add_adapter_and_infer_with_it(train, cli, tmp_path):
    lora = train("cls", "lora")
    ia3 = train("cls", "ia3")
    target = tmp_path / "multi"
    shutil.copytree(lora, target)
    code, out, err = cli("add-adapter", target, ia3, "--name", "scaled")
    assert code == 0, err
    assert "added adapter 'scaled'" in out
    assert (target / "adapters" / "scaled" / "adapter_config.json").exists()
    text = "这家酒店服务很好"
    # fp32 pinned: with auto, a run answers in bf16 where its end-of-run measurement found bf16
    # faster on this machine, and the copied folder (its checksums changed) in fp32
    fp32 = ("--precision", "fp32")
    assert infer(cli, target, text, extra=("--adapter", "scaled", *fp32)) == infer(cli, ia3, text, extra=fp32)
    assert infer(cli, target, text, extra=fp32) == infer(cli, lora, text, extra=fp32)
    code, _, err = cli("infer", "--model", target, "--adapter", "scaed", text)
    assert code == 2 and "no adapter 'scaed' (did you mean 'scaled'?)" in err
    code, _, err = cli("add-adapter", target, ia3, "--name", "scaled")
    assert code == 2 and "already has an adapter 'scaled'" in err


def test_add_adapter_refuses_another_base(train, cli, tmp_path):
    lora = train("cls", "lora")
    other = train("cls", "ia3", "seed=7")  # another seed: other random base weights
    target = tmp_path / "multi"
    shutil.copytree(lora, target)
    code, _, err = cli("add-adapter", target, other, "--name", "x")
    assert code == 2
    assert "its adapter was not trained on the base of" in err and "base: 'scratch weights sha256" in err
    pair = train("pair-cross", "lora")
    code, _, err = cli("add-adapter", target, pair, "--name", "x")
    assert code == 2 and "task: 'cls' here, 'pair' in" in err


def test_adapter_flags_on_a_full_run(cli, tmp_path):
    run_dir = tiny_run(tmp_path / "runs", "cls.toml", "t", *STEPS, epochs=None)
    code, _, err = cli("infer", "--model", run_dir, "--base-only", "好")
    assert code == 2 and "trained the whole model; it has no adapters" in err
    code, _, err = cli("export", run_dir, "--merge", run_dir.parent / "m")
    assert code == 2 and "there is no adapter to merge" in err


# --- export --merge ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task_id,method", [("cls", "lora"), ("ner", "ia3"), ("pair-bi", "lora"), ("pair-cross", "ia3")]
)
def test_export_merge(task_id, method, train, cli, tmp_path):
    import transformers

    from nlptasks import LoadOptions
    from nlptasks.inference.merge import compare_outputs, model_outputs
    from nlptasks.plugin import load_trained_model

    task = BY_ID[task_id]
    run_dir = train(task_id, method)
    out = tmp_path / "merged"
    code, stdout, err = cli("export", run_dir, "--merge", out)
    assert code == 0, err
    check = json.loads((run_dir / "examples.json").read_text(encoding="utf-8"))["inputs"]
    assert len(check) == (16 if task_id == "pair-bi" else 8)  # 8 examples; the bi-encoder stores both sides
    assert f"same predictions on {len(check)} stored inputs" in stdout
    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    manifest = json.loads((out / "nlptasks.json").read_text(encoding="utf-8"))
    assert "peft" not in manifest and manifest["merged_from"]["method"] == method
    # a complete run of its own, loading with plain transformers ...
    plain = getattr(transformers, manifest["model_class"]).from_pretrained(out)
    adapter_manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    cpu_fp32 = LoadOptions(precision="fp32", device="cpu")  # as `plain` runs (the merge check runs so too)
    adapter = load_trained_model(run_dir, adapter_manifest, manifest["model_class"], cpu_fp32)
    differences, largest = compare_outputs(
        model_outputs(adapter, check, task.task_type), model_outputs(plain, check, task.task_type)
    )
    assert not differences and largest < 1e-4
    # ... and through nlptasks infer, with the adapter run's predictions (similarities equal up to
    # fp32 rounding; auto would be bf16 on a GPU, where they differed by 2e-4)
    fp32 = ("--precision", "fp32")
    merged, ours = infer(cli, out, *task.infer, extra=fp32), infer(cli, run_dir, *task.infer, extra=fp32)
    for a, b in zip(merged, ours, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == (pytest.approx(b[key], abs=1e-5) if key in ("similarity", "score") else b[key])


def test_compare_outputs_reports_a_mismatch():
    import torch

    from nlptasks.inference.merge import compare_outputs

    a = [{"logits": torch.tensor([[0.1, 0.9]])}]
    b = [{"logits": torch.tensor([[0.9, 0.1]])}]
    differences, largest = compare_outputs(a, b)
    assert differences == ["input 1: argmax of logits [1] → [0]"] and largest == pytest.approx(0.8)
    h = [{"last_hidden_state": torch.zeros(1, 3, 4)}]
    assert compare_outputs(h, [{"last_hidden_state": torch.full((1, 3, 4), 0.5)}])[0] == [
        "input 1: last_hidden_state differ by up to 5.00e-01"
    ]
    assert compare_outputs(h, h) == ([], 0.0)
    # any head's outputs, by name: a span head's start and end logits
    span = [{"start_logits": torch.tensor([[0.0, 2.0, 1.0]]), "end_logits": torch.tensor([[0.0, 1.0, 3.0]])}]
    moved = [{"start_logits": torch.tensor([[3.0, 2.0, 1.0]]), "end_logits": torch.tensor([[0.0, 1.0, 3.0]])}]
    assert compare_outputs(span, moved)[0] == ["input 1: argmax of start_logits [1] → [0]"]
    assert compare_outputs([{"tokens": [5, 6]}], [{"tokens": [5, 7]}])[0] == ["input 1: greedy tokens [5, 6] → [5, 7]"]


@pytest.mark.parametrize("task_id,method", [("sft", "prefix"), ("cls", "p_tuning"), ("cls", "prompt")])
def test_export_refuses_methods_that_cannot_merge(task_id, method, train, cli, tmp_path):
    run_dir = train(task_id, method)
    code, _, err = cli("export", run_dir, "--merge", tmp_path / "m")
    assert code == 2
    assert f"uses method '{method}', which cannot be merged" in err and "only lora and ia3 merge" in err
    assert not (tmp_path / "m").exists()


# --- recipe errors ----------------------------------------------------------------------------


def validate(cli, *sets: str) -> tuple[int, str]:
    code, _, err = cli(*argv("validate", RECIPES / "cls.toml", sets=sets))
    return code, err


def test_unknown_peft_key_gets_a_did_you_mean(cli):
    code, err = validate(cli, "peft.method=prompt", "peft.num_virtual_token=4")
    assert code == 2 and "peft.num_virtual_token: unknown key (did you mean 'num_virtual_tokens'?)" in err
    code, err = validate(cli, "peft.method=lora", "peft.rank=4")
    assert code == 2 and "peft.rank: unknown key; allowed keys: method, r, alpha, dropout" in err
    code, err = validate(cli, "peft.method=adapter")
    assert code == 2 and "peft.method: Input should be 'lora', 'prefix', 'p_tuning', 'prompt', 'ia3' or 'none'" in err
    code, err = validate(cli, "peft.r=4")
    assert code == 2 and "peft.method: required key is missing" in err


def test_an_option_of_another_method_names_the_key(cli):
    code, err = validate(cli, "peft.method=prefix", "peft.r=4", "peft.target_modules=['query']")
    assert code == 2
    assert "peft.r: is an option of 'lora', not of method 'prefix'" in err
    assert "peft.target_modules: is an option of 'lora' and 'ia3', not of method 'prefix'" in err
    assert "the prefix options: num_virtual_tokens, prefix_projection, encoder_hidden_size" in err
    code, err = validate(cli, "peft.method=lora", "peft.quant_type=fp4")
    assert code == 2 and 'peft.quant_type: applies only with peft.quantization = "4bit"' in err
    code, err = validate(cli, "peft.method=lora", "peft.target_modules='.*attention.*(query|value)'")
    assert code == 0, err  # a regex string is fine


def test_switching_the_method_with_set_leaves_out_the_old_methods_keys(cli):
    """sft.toml's [peft] is LoRA (r, alpha, target_modules): --set peft.method=prefix trains prefix
    tuning, says which keys it left out, and keys given with --set are still checked."""
    from nlptasks.pipeline import load_recipe

    code, err = cli(*argv("validate", RECIPES / "sft.toml", sets=["peft.method=prefix"]))[::2]
    assert code == 0, err
    assert "note: peft.method: 'lora' → 'prefix' (from --set); the recipe's lora keys r, alpha" in err
    loaded = load_recipe(RECIPES / "sft.toml", ["peft.method=prefix"])
    assert loaded.recipe.peft.method == "prefix" and "r" not in loaded.raw["peft"]
    assert loaded.raw["peft"]["modules_to_save"]  # common to every method: kept
    code, _, err = cli(*argv("validate", RECIPES / "sft.toml", sets=["peft.method=prefix", "peft.r=8"]))
    assert code == 2 and "peft.r: is an option of 'lora', not of method 'prefix'" in err


def test_a_task_without_a_peft_task_type_refuses_peft():
    from pydantic import BaseModel, ConfigDict

    from nlptasks import TaskSpec, hookimpl
    from nlptasks.errors import RecipeError
    from nlptasks.pipeline import load_recipe
    from nlptasks.testing import plugin_host

    class NoOpts(BaseModel):
        model_config = ConfigDict(extra="forbid")

    class Plain:
        @hookimpl
        def register_tasks(self, register):
            register(TaskSpec(name="plain", description="no PEFT", options=NoOpts))

    host = plugin_host(**{"plain-plugin": Plain()})
    raw = {"task": "plain", "data": {"train": "x.csv"}, "model": {"scratch": {}}, "peft": {"method": "lora"}}
    with pytest.raises(RecipeError) as info:
        load_recipe(None, host=host, raw=raw, check_files=False)
    assert "peft: task 'plain' does not support PEFT: its plugin (plain-plugin) declares no peft_task_type" in str(
        info.value
    )


# --- GPU-only keys on a machine without CUDA ----------------------------------------------------


def _no_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the CPU-only errors do not apply")


def test_half_precision_needs_cuda(cli, tmp_path):
    _no_cuda()
    sets = [*FAST, "model.dtype=bf16", f"output.dir={tmp_path}", "output.run_name=r"]
    code, _, err = cli(*argv("run", RECIPES / "cls.toml", "--no-progress", sets=sets))
    assert code == 2
    assert "model.dtype: 'bf16' (half precision) needs a CUDA GPU; this machine has none" in err
    assert "Traceback" not in err and not (tmp_path / "cls").exists()  # before anything was loaded or written


def test_qlora_needs_cuda_and_bitsandbytes(cli, tmp_path):
    _no_cuda()
    sets = [*FAST, "peft.method=lora", "peft.quantization=4bit", f"output.dir={tmp_path}", "output.run_name=r"]
    code, _, err = cli(*argv("run", RECIPES / "cls.toml", "--no-progress", sets=sets))
    assert code == 2
    assert (
        "peft.quantization: '4bit' loads the base with bitsandbytes, which needs a CUDA GPU (this machine has none)"
        in err
    )
    assert "the bitsandbytes package (not installed: pip install bitsandbytes)" in err
    assert "a pretrained base (model.name_or_path)" in err  # cls.toml builds its model from scratch
    assert not (tmp_path / "cls").exists()


def test_machine_problems_on_a_gpu_without_bitsandbytes():
    from nlptasks.engine.system.machine import machine_problems
    from nlptasks.pipeline import load_recipe

    loaded = load_recipe(RECIPES / "cls.toml", ["peft.method=lora", "peft.quantization=8bit", "model.dtype=bf16"])
    problems = [str(p) for p in machine_problems(loaded.recipe, cuda=True, bitsandbytes=False)]
    assert any(
        p.startswith("peft.quantization: '8bit'") and "bitsandbytes package" in p and "CUDA" not in p for p in problems
    )
    assert not any(p.startswith("model.dtype") for p in problems)
    assert [str(p) for p in machine_problems(loaded.recipe, cuda=True, bitsandbytes=True)] == [
        "peft.quantization: quantizes a pretrained base (model.name_or_path), not a model built from scratch"
    ]


# --- CAUSAL_LM (for the sft task): the model-level part of the table --------------------------


@pytest.mark.parametrize("method", METHODS)
def test_causal_lm_row_of_the_table(method):
    """Until a causal-LM task joins the matrix above, the CAUSAL_LM row is checked on a tiny Llama:
    every method trains (loss goes backward into the adapter), and for lora/ia3 merging keeps the
    greedy tokens that ``nlptasks export --merge`` compares."""
    import peft as p
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from nlptasks.inference.merge import compare_outputs, model_outputs

    assert unsupported_reason("CAUSAL_LM", method) is None
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    model = AutoModelForCausalLM.from_config(config)
    kinds = {  # lora and ia3 start away from the identity, so merging has something to fold in
        "lora": lambda: p.LoraConfig(r=4, init_lora_weights=False, task_type="CAUSAL_LM"),
        "prefix": lambda: p.PrefixTuningConfig(num_virtual_tokens=4, task_type="CAUSAL_LM"),
        "p_tuning": lambda: p.PromptEncoderConfig(num_virtual_tokens=4, encoder_hidden_size=16, task_type="CAUSAL_LM"),
        "prompt": lambda: p.PromptTuningConfig(num_virtual_tokens=4, task_type="CAUSAL_LM"),
        "ia3": lambda: p.IA3Config(init_ia3_weights=False, task_type="CAUSAL_LM"),
    }
    wrapped = p.get_peft_model(model, kinds[method]())
    ids = torch.randint(3, 64, (2, 7))
    out = wrapped(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
    out.loss.backward()
    trained = [prm.grad for prm in wrapped.parameters() if prm.requires_grad]
    assert trained and any(g is not None and float(g.abs().sum()) > 0 for g in trained)
    if method in ("lora", "ia3"):
        wrapped.eval()
        inputs = [{"input_ids": row.tolist(), "attention_mask": [1] * 7} for row in ids]
        before = model_outputs(wrapped, inputs, "CAUSAL_LM")
        assert len(before[0]["tokens"]) == 8  # 8 greedy tokens per input
        merged = wrapped.merge_and_unload()
        differences, _ = compare_outputs(before, model_outputs(merged, inputs, "CAUSAL_LM"))
        assert not differences


def test_ia3_feedforward_modules_must_be_among_the_targets(cli):
    """peft trains, then cannot load, an ia3 adapter whose feed-forward modules are not targets."""
    code, err = validate(
        cli, "peft.method=ia3", "peft.target_modules=['query', 'value']", "peft.feedforward_modules=['output.dense']"
    )
    assert code == 2
    assert "peft.feedforward_modules: 'output.dense' not among peft.target_modules ('query', 'value')" in err


def test_modules_to_save_must_name_modules_of_the_model(cli, tmp_path):
    """peft ignores a modules_to_save entry that matches nothing: the head would stay frozen at its
    random start and the run would "train" without a word.  Refused before training, named."""
    sets = [
        *FAST,
        "peft.method=lora",
        "peft.modules_to_save=['clasifier']",
        f"output.dir={tmp_path}",
        "output.run_name=r",
    ]
    code, _, err = cli(*argv("run", RECIPES / "cls.toml", "--no-progress", sets=sets))
    assert code == 2
    assert "peft.modules_to_save: 'clasifier' names no module of BertForSequenceClassification" in err
    assert "did you mean 'classifier'" in err and "Traceback" not in err
    assert not (tmp_path / "cls" / "r" / "COMPLETE").exists()
