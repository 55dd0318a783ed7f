"""[optimize] and the memory/speed keys of [train]: each option checked by its effect on a real
tiny run (the trainer and batches recorded by a plugin), not by the arguments alone."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import RECIPES, TINY, tiny_run
from nlptasks import hookimpl
from nlptasks.engine.training.trainer import resolve_precision
from nlptasks.errors import NlptasksError, RecipeError
from nlptasks.pipeline import load_recipe
from nlptasks.testing import plugin_host, run_recipe

QUICK = [
    "train.epochs=1",
    "data.max_train_rows=64",
    "data.max_eval_rows=16",
    "train.batch_size=8",
    "train.group_by_length=false",
    "train.eval_strategy=no",
    "model.scratch.layers=2",
]


class Probe:
    """Records the model step 5 built (and its first weights), the trainer, and every training
    micro-batch as the model received it."""

    def __init__(self, on_model=None):
        self.on_model = on_model
        self.model = None
        self.initial: dict[str, torch.Tensor] = {}
        self.trainer = None
        self.batches: list[dict[str, torch.Tensor]] = []

    @hookimpl(wrapper=True)
    def nlptasks_build_model(self, ctx):
        model = yield
        self.model = model
        self.initial = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}  # the model may move to a GPU
        if self.on_model is not None:
            self.on_model(model)
        return model

    @hookimpl(wrapper=True)
    def nlptasks_train(self, ctx, trainer, data):
        self.trainer = trainer
        step = trainer.training_step

        def recording_step(model, inputs, *args, **kwargs):
            self.batches.append({k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)})
            return step(model, inputs, *args, **kwargs)

        trainer.training_step = recording_step
        return (yield)


def train(tmp_path, *overrides, probe=None):
    """A tiny cls run into ``tmp_path/runs`` with ``probe`` (a new :class:`Probe` when not given)
    on a plugin host of its own: ``(probe, the run, its manifest)``."""
    probe = probe or Probe()
    host = plugin_host(builtins=True)
    host.register(probe, name="probe")
    result = run_recipe(RECIPES / "cls.toml", *TINY, *QUICK, *overrides, host=host, folder=tmp_path / "runs")
    manifest = json.loads((result.output_dir / "nlptasks.json").read_text(encoding="utf-8"))
    return probe, result, manifest


def optimizer_params(trainer) -> set[int]:
    return {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}


# ---------------------------------------------------------------------------------------------
# Freezing
# ---------------------------------------------------------------------------------------------


def test_freezing_embeddings_first_layer_and_a_pattern(tmp_path):
    probe, result, manifest = train(
        tmp_path, "optimize.freeze_embeddings=true", "optimize.freeze_layers=1", "optimize.freeze=['pooler']"
    )
    model = probe.model
    named = dict(model.named_parameters())
    expected_frozen = {n for n in named if n.startswith(("bert.embeddings.", "bert.encoder.layer.0.", "bert.pooler."))}
    frozen = {n for n, p in named.items() if not p.requires_grad}
    assert frozen == expected_frozen
    assert any(n.startswith("bert.encoder.layer.1.") for n in named if n not in frozen)

    counts = manifest["freezing"]
    n_frozen = sum(named[n].numel() for n in frozen)
    assert counts["frozen_parameters"] == n_frozen
    assert counts["trainable_parameters"] == sum(p.numel() for p in model.parameters()) - n_frozen
    assert counts["frozen"] == [
        "embeddings bert.embeddings",
        "layer 0 of 2 (bert.encoder.layer)",
        "'pooler' (2 tensors)",
    ]

    # frozen parameters never reach the optimizer, and every trainable one does
    in_optimizer = optimizer_params(probe.trainer)
    assert in_optimizer == {id(p) for p in model.parameters() if p.requires_grad}
    assert (
        sum(p.numel() for g in probe.trainer.optimizer.param_groups for p in g["params"])
        == counts["trainable_parameters"]
    )
    # and training left them as they were, while the rest moved
    assert all(torch.equal(named[n].detach().cpu(), probe.initial[n]) for n in frozen)
    assert not torch.equal(
        named["bert.encoder.layer.1.output.dense.weight"].detach().cpu(),
        probe.initial["bert.encoder.layer.1.output.dense.weight"],
    )


def test_freezing_every_layer_trains_only_the_head(tmp_path, caplog):
    probe, _, manifest = train(tmp_path, "optimize.freeze_layers=99")
    trainable = {n for n, p in probe.model.named_parameters() if p.requires_grad}
    assert trainable == {"classifier.weight", "classifier.bias"}
    assert manifest["freezing"]["trainable_parameters"] == 32 * 2 + 2  # hidden 32 x 2 labels + bias
    assert "the whole body bert (2 layers and embeddings)" in manifest["freezing"]["frozen"][0]


def test_freezing_logs_the_counts(tmp_path):
    run = tiny_run(tmp_path, "cls.toml", "t", *QUICK, "optimize.freeze_embeddings=true", epochs=None)
    line = next(x for x in run.err.splitlines() if "freezing:" in x)
    assert "frozen" in line and "trainable" in line and "embeddings bert.embeddings" in line


def test_freezing_mistakes_are_recipe_errors(tmp_path, cli):
    code, _, err = cli("validate", str(RECIPES / "cls.toml"), "--set", "optimize.freeze=['(']")
    assert code == 2 and "optimize.freeze" in err and "not a regular expression" in err
    code, _, err = cli(
        "validate", str(RECIPES / "cls.toml"), "--set", "peft.method=lora", "--set", "optimize.freeze_layers=2"
    )
    assert code == 2
    assert "optimize.freeze_layers: freezing does not combine with [peft]" in err
    with pytest.raises(RecipeError, match=r"optimize.freeze: 'no_such_weight' matches no parameter name"):
        train(tmp_path, "optimize.freeze=['no_such_weight']")
    with pytest.raises(RecipeError, match="freeze every parameter"):
        train(tmp_path, "optimize.freeze=['.']")


def test_layers_are_found_without_naming_the_architecture():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from nlptasks.engine.training.optimize import embedding_modules, transformer_layers

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=3, n_head=2, bos_token_id=0, eos_token_id=0))
    name, layers = transformer_layers(gpt2)
    assert (name, len(layers)) == ("transformer.h", 3)
    assert [n for n, _ in embedding_modules(gpt2)] == ["transformer.wte", "transformer.wpe"]
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    assert transformer_layers(llama)[0] == "model.layers"
    assert [n for n, _ in embedding_modules(llama)] == ["model.embed_tokens"]


# ---------------------------------------------------------------------------------------------
# Checkpointing, optimizer, attention, accumulation, padding, sampler, precision
# ---------------------------------------------------------------------------------------------


def _count_layer_calls(model):
    calls = {"n": 0}

    def hook(module, args):  # a pre-hook: torch stops a recomputation once it has what backward needs
        if module.training:
            calls["n"] += 1

    # inside the layer: transformers checkpoints the layer's forward, keeping the layer's own hooks outside
    model.bert.encoder.layer[0].attention.register_forward_pre_hook(hook)
    return calls


def test_gradient_checkpointing_recomputes_each_layer_in_backward(tmp_path):
    runs = {}
    for on in (False, True):
        calls: dict = {}
        probe = Probe(on_model=lambda m, calls=calls: calls.update(counter=_count_layer_calls(m)))
        probe, _, _ = train(tmp_path / str(on), f"optimize.gradient_checkpointing={str(on).lower()}", probe=probe)
        runs[on] = (probe, calls["counter"]["n"])
    plain, checkpointed = runs[False], runs[True]
    assert plain[0].model.is_activation_checkpointing is False
    assert checkpointed[0].model.is_activation_checkpointing is True
    assert checkpointed[0].model.config.use_cache is False
    micro_batches = len(plain[0].batches)
    assert plain[1] == micro_batches  # one forward of layer 0 per micro-batch
    assert checkpointed[1] == 2 * micro_batches  # and once more in each backward


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("adamw_torch", lambda o: isinstance(o, torch.optim.AdamW) and not o.defaults.get("fused")),
        ("adamw_torch_fused", lambda o: isinstance(o, torch.optim.AdamW) and o.defaults.get("fused")),
        ("adafactor", lambda o: type(o).__name__ == "Adafactor" and "exp_avg" not in next(iter(o.state.values()))),
    ],
)
def test_the_optimizer_in_use(tmp_path, name, check):
    probe, _, _ = train(tmp_path, f"optimize.optimizer={name}", "train.max_steps=2")
    optimizer = probe.trainer.optimizer
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper
    assert check(inner), type(inner)
    assert probe.trainer.args.optim == name


def test_auto_is_the_fused_adamw_where_torch_runs_it(tmp_path, monkeypatch):
    from nlptasks.engine.training.optimize import resolve_optimizer

    probe, _, _ = train(tmp_path, "train.max_steps=2")  # optimize.optimizer left at "auto"
    inner = getattr(probe.trainer.optimizer, "optimizer", probe.trainer.optimizer)
    assert isinstance(inner, torch.optim.AdamW) and inner.defaults.get("fused")
    assert resolve_optimizer("auto", "cuda") == "adamw_torch_fused"
    assert resolve_optimizer("adafactor") == "adafactor"

    def no_fused_kernel(params, **kwargs):  # a torch build without the CPU kernel
        if kwargs.get("fused"):
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return real(params, **kwargs)

    real = torch.optim.AdamW
    monkeypatch.setattr(torch.optim, "AdamW", no_fused_kernel)
    assert resolve_optimizer("auto", "cpu") == "adamw_torch"


def test_cuda_only_values_are_recipe_errors_on_this_machine(cli, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    argv = [
        "run",
        str(RECIPES / "cls.toml"),
        "--set",
        f"output.dir={tmp_path}",
        "--set",
        "optimize.optimizer=adamw_8bit",
        "--set",
        "optimize.tf32=true",
    ]
    code, _, err = cli(*argv)
    assert code == 2
    assert (
        "optimize.optimizer: 'adamw_8bit' keeps 8-bit optimizer states with bitsandbytes, which needs a CUDA GPU" in err
    )
    assert "use one of: 'adamw_torch', 'adamw_torch_fused', 'adafactor'" in err
    assert "optimize.tf32: true needs a CUDA GPU" in err
    assert "--set optimize.optimizer=adamw_torch --set optimize.tf32=false" in err
    assert not (tmp_path / "cls").exists()  # refused before anything was written


def test_a_gpu_with_bitsandbytes_accepts_them():
    from nlptasks.engine.system.machine import machine_problems

    recipe = load_recipe(RECIPES / "cls.toml", ["optimize.optimizer=adamw_8bit", "optimize.tf32=true"]).recipe
    assert machine_problems(recipe, cuda=True, bitsandbytes=True) == []
    assert [p.where for p in machine_problems(recipe, cuda=True, bitsandbytes=False)] == ["optimize.optimizer"]


def test_compile_tf32_and_checkpointing_reach_the_training_arguments():
    from nlptasks.context import RunContext
    from nlptasks.engine.training.trainer import make_training_arguments, training_kwargs

    loaded = load_recipe(RECIPES / "cls.toml", ["optimize.compile=true", "optimize.gradient_checkpointing=true"])
    ctx = RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=RECIPES / "x")
    args = make_training_arguments(training_kwargs(ctx, True, True, progress=False))
    assert args.torch_compile is True
    assert args.activation_checkpointing is True and args.use_cache is False
    assert args.optim == "adamw_torch_fused"  # optimize.optimizer = "auto" on a machine that runs the fused kernel


def test_train_extra_cannot_contradict_optimize():
    from nlptasks.context import RunContext
    from nlptasks.engine.training.trainer import training_kwargs

    both = ['train.extra={ optim = "sgd" }', "optimize.optimizer=adafactor"]
    with pytest.raises(RecipeError, match=r"train.extra.optim: is also set by optimize.optimizer = 'adafactor'"):
        load_recipe(RECIPES / "cls.toml", both)  # at validation, with every other problem
    loaded = load_recipe(RECIPES / "cls.toml", ['train.extra={ optim = "sgd" }'])
    changed = loaded.recipe.model_copy(
        update={"optimize": loaded.recipe.optimize.model_copy(update={"optimizer": "adafactor"})}
    )
    ctx = RunContext(recipe=changed, task=loaded.task, options=loaded.options, output_dir=RECIPES / "x")
    with pytest.raises(RecipeError, match=r"train.extra.optim: is also set by optimize.optimizer = 'adafactor'"):
        training_kwargs(ctx, True, True)  # and again where the arguments are built, for a recipe made in code
    # left at its default, [optimize] gives way to train.extra (any transformers optimizer name)
    loaded = load_recipe(RECIPES / "cls.toml", ['train.extra={ optim = "sgd" }'])
    ctx = RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=RECIPES / "x")
    assert training_kwargs(ctx, True, True)["optim"] == "sgd"


def test_attention_implementation(tmp_path):
    probe, _, manifest = train(tmp_path, "optimize.attention=eager", "train.max_steps=1")
    assert probe.model.config._attn_implementation == "eager"
    assert manifest["attention"] == "eager"
    probe, _, manifest = train(tmp_path, "train.max_steps=1")
    assert manifest["attention"] == "sdpa"  # 'auto': transformers' choice


def test_accumulation_makes_fewer_optimizer_steps(tmp_path):
    probe, result, _ = train(tmp_path, "train.batch_size=4", "train.gradient_accumulation_steps=4")
    assert len(probe.batches) == 64 // 4  # micro-batches of 4
    assert probe.trainer.state.global_step == 64 // 16  # one optimizer step per 4 micro-batches
    assert result.metrics["train"]["steps"] == 4


def _padding(batches):
    return sum(int((1 - b["attention_mask"]).sum()) for b in batches)


def test_padding_and_length_grouping(tmp_path):
    from transformers.trainer_pt_utils import LengthGroupedSampler

    long = "model.max_length=256"
    fixed, _, _ = train(tmp_path / "f", long, "train.padding=max_length")
    dynamic, _, _ = train(tmp_path / "d", long, "train.padding=dynamic")
    grouped, _, _ = train(tmp_path / "g", long, "train.padding=dynamic", "train.group_by_length=true")

    assert {tuple(b["input_ids"].shape) for b in fixed.batches} == {(8, 256)}  # model.max_length
    widths = [b["input_ids"].shape[1] for b in dynamic.batches]  # each batch padded to its longest row
    assert all(w == int(b["attention_mask"].sum(1).max()) for w, b in zip(widths, dynamic.batches, strict=True))
    assert max(widths) < 256

    assert not isinstance(dynamic.trainer._get_train_sampler(), LengthGroupedSampler)
    assert isinstance(grouped.trainer._get_train_sampler(), LengthGroupedSampler)
    assert _padding(grouped.batches) < _padding(dynamic.batches) < _padding(fixed.batches)
    # the same rows either way
    assert sum(len(b["input_ids"]) for b in grouped.batches) == sum(len(b["input_ids"]) for b in dynamic.batches) == 64


class EvalProbe(Probe):
    """Also records each evaluation/prediction batch's rows (tokens per row) and the data."""

    def __init__(self):
        super().__init__()
        self.eval_batches: list[list[int]] = []
        self.data = None

    @hookimpl(wrapper=True)
    def nlptasks_train(self, ctx, trainer, data):
        self.data, self.trainer = data, trainer
        step = trainer.prediction_step

        def recording_step(model, inputs, *args, **kwargs):
            self.eval_batches.append(inputs["attention_mask"].sum(1).tolist())
            return step(model, inputs, *args, **kwargs)

        trainer.prediction_step = recording_step
        return (yield)


def test_evaluation_batches_are_length_sorted_and_results_come_back_in_data_order(tmp_path):
    settings = ["model.max_length=256", "train.eval_batch_size=4", "data.max_eval_rows=24"]
    probe, result, _ = train(tmp_path / "sorted", *settings, probe=EvalProbe())
    plain, plain_result, _ = train(tmp_path / "plain", *settings, "train.sort_eval_by_length=false", probe=EvalProbe())

    validation = probe.data["validation"]
    lengths = [len(x) for x in validation["input_ids"]]
    rows = [n for batch in probe.eval_batches[:6] for n in batch]  # the validation pass: 24 rows in 6 batches
    assert rows == sorted(lengths, reverse=True)  # longest first
    assert [n for batch in plain.eval_batches[:6] for n in batch] == lengths  # off: the data's order
    assert sum(max(b) * len(b) for b in probe.eval_batches[:6]) < sum(max(b) * len(b) for b in plain.eval_batches[:6])

    # the same predictions either way, and in the data's order (labels line up with the rows)
    sorted_out = probe.trainer.predict(validation)
    plain_out = plain.trainer.predict(validation)
    assert sorted_out.label_ids.tolist() == validation["labels"]
    assert sorted_out.predictions.argmax(-1).tolist() == plain_out.predictions.argmax(-1).tolist()
    assert abs(sorted_out.predictions - plain_out.predictions).max() < 1e-4
    assert result.metrics["validation"]["accuracy"] == plain_result.metrics["validation"]["accuracy"]
    assert result.metrics["validation"]["loss"] == pytest.approx(plain_result.metrics["validation"]["loss"], abs=1e-5)


def test_length_grouped_training_keeps_evaluation_in_order(tmp_path):
    # transformers 5 would length-group the evaluation sampler too; the engine keeps it in order
    probe, _, _ = train(
        tmp_path,
        "train.group_by_length=true",
        "train.sort_eval_by_length=false",
        "train.eval_batch_size=4",
        probe=EvalProbe(),
    )
    lengths = [len(x) for x in probe.data["validation"]["input_ids"]]
    assert [n for batch in probe.eval_batches[:4] for n in batch] == lengths


# auto: fp32 for this from-scratch model on a CPU, bf16 on a GPU with bf16 (fp16 on an older one)
AUTO = resolve_precision("auto", pretrained=False)


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("auto", {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[AUTO]), ("bf16", torch.bfloat16)],
)
def test_precision_reaches_the_forward_pass(tmp_path, precision, dtype):
    seen: list = []

    def watch(model):
        model.classifier.register_forward_hook(lambda m, a, out: seen.append(out.dtype) if m.training else None)

    _, _, manifest = train(tmp_path, f"train.precision={precision}", "train.max_steps=2", probe=Probe(on_model=watch))
    assert manifest["precision"] == (AUTO if precision == "auto" else precision)
    assert seen and set(seen) == {dtype}


# ---------------------------------------------------------------------------------------------
# OOM fallback
# ---------------------------------------------------------------------------------------------


def oom_above(limit: int, after_steps: int = 0):
    """A model that runs out of "GPU" memory on training batches larger than ``limit`` (from its
    ``after_steps``-th training forward on), as CUDA does: torch.cuda.OutOfMemoryError from forward."""
    forwards = {"n": 0}

    def install(model):
        def pre_hook(module, args, kwargs):
            if not module.training:
                return None
            forwards["n"] += 1
            if forwards["n"] > after_steps and kwargs["input_ids"].shape[0] > limit:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
            return None

        model.register_forward_pre_hook(pre_hook, with_kwargs=True)

    return install


def test_oom_fallback_halves_the_batch_and_keeps_the_effective_batch(tmp_path):
    reference, ref_result, _ = train(tmp_path / "ref")
    probe, result, manifest = train(tmp_path / "oom", probe=Probe(on_model=oom_above(2)))
    assert manifest["oom_fallback"] == [
        {
            "at_step": 0,
            "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (simulated)",
            "batch_size": [8, 4],
            "gradient_accumulation_steps": [1, 2],
            "eval_batch_size": [16, 8],
        },
        {
            "at_step": 0,
            "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (simulated)",
            "batch_size": [4, 2],
            "gradient_accumulation_steps": [2, 4],
            "eval_batch_size": [8, 4],
        },
    ]
    args = probe.trainer.args
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (2, 4)
    # one batch of 8 failed, then one of 4, then the whole epoch ran in batches of 2
    assert [len(b["input_ids"]) for b in probe.batches] == [8, 4] + [2] * 32
    # same effective batch: as many optimizer steps as the run that fitted, over the same rows
    assert probe.trainer.state.global_step == reference.trainer.state.global_step == 8
    assert result.metrics["train"]["steps"] == ref_result.metrics["train"]["steps"]
    assert (result.output_dir / "COMPLETE").exists()


def test_oom_after_the_weights_changed_or_with_the_fallback_off_is_a_clear_error(tmp_path):
    if torch.cuda.is_available():  # a model on a GPU has its trainable weights copied first: it falls back
        _, result, manifest = train(tmp_path / "late", probe=Probe(on_model=oom_above(2, after_steps=2)))
        assert [c["at_step"] for c in manifest["oom_fallback"]] == [2, 0]
        assert (result.output_dir / "COMPLETE").exists()
    else:  # on the host there is no copy: after the first optimizer step, a clear error
        with pytest.raises(NlptasksError, match="out of GPU memory at step 2, after the weights changed") as info:
            train(tmp_path / "late", probe=Probe(on_model=oom_above(2, after_steps=2)))
        assert "--set train.batch_size=4 --set train.gradient_accumulation_steps=2" in info.value.render()
    with pytest.raises(NlptasksError, match="optimize.oom_fallback is off"):
        train(tmp_path / "off", "optimize.oom_fallback=false", probe=Probe(on_model=oom_above(2)))


def test_length_grouped_batches_come_in_random_order_with_transformers_padding(tmp_path):
    """The engine's length-grouped sampler keeps the batches transformers' grouping makes (the
    same padding) but not its long-to-short sweep through each mega-batch (which cost 1.2 points
    of SST-2 accuracy): the longest batch first, a short last batch last, the rest shuffled, a
    function of seed and epoch (exact resume)."""
    import random

    from transformers.trainer_pt_utils import get_length_grouped_indices

    probe, _, _ = train(tmp_path, "train.group_by_length=true", "train.max_steps=1")
    rng = random.Random(0)
    lengths = [rng.randint(1, 120) for _ in range(1000)]
    sampler = type(probe.trainer._get_train_sampler())(16, lengths=lengths)

    def batches(order):
        return [order[i : i + 16] for i in range(0, len(order), 16)]

    def width_sum(order):
        return sum(max(lengths[i] for i in b) * len(b) for b in batches(order))

    sampler.set_epoch(3)
    ours = list(sampler)
    generator = torch.Generator()
    generator.manual_seed(42 + 3)  # the recipe's seed + the epoch
    theirs = get_length_grouped_indices(lengths, 16, generator=generator)
    assert sorted(ours) == list(range(1000))
    assert sorted(map(sorted, batches(ours))) == sorted(map(sorted, batches(theirs)))  # the same batches
    assert width_sum(ours) == width_sum(theirs) < 0.6 * width_sum(list(range(1000)))
    assert max(lengths[i] for i in ours[:16]) == max(lengths)  # the longest first (an OOM shows at once)
    assert len(batches(ours)[-1]) == 1000 % 16 and batches(ours)[-1] == batches(theirs)[-1]
    firsts = [max(lengths[i] for i in b) for b in batches(ours)[1:-1]]
    descending_runs = sum(a >= b for a, b in zip(firsts, firsts[1:], strict=False))
    assert descending_runs < 0.75 * len(firsts)  # not transformers' long-to-short sweeps
    assert list(sampler) == ours  # the same epoch again: the same order (resume replays it)
    sampler.set_epoch(4)
    assert list(sampler) != ours


def test_length_grouped_batches_keep_the_class_mix(tmp_path):
    """Where length goes with the class (LCQMC: the pairs under 18 characters are all negatives;
    ChnSentiCorp: positive reviews are shorter), transformers' length-grouped batches come out of
    one class.  For a task with one class per row the engine's batches hold every class in the
    proportion of the data, still of similar lengths within each class; without classes they are
    transformers' own (the test above)."""
    import random

    from datasets import Dataset

    from nlptasks.engine.training.ordering import example_classes

    probe, _, _ = train(tmp_path, "train.group_by_length=true", "train.max_steps=1")
    sampler = probe.trainer._get_train_sampler()
    assert sampler.classes == list(probe.trainer.train_dataset["labels"])  # cls: the class of each row

    rng = random.Random(0)
    classes = [int(rng.random() < 0.4) for _ in range(1000)]  # 40% of class 1, which is the longer one
    lengths = [rng.randint(30, 120) if c else rng.randint(5, 45) for c in classes]
    grouped = type(sampler)(16, lengths=lengths)  # the sampler without classes: transformers' batches
    balanced = type(sampler)(16, lengths=lengths, classes=classes)

    def batches(order):
        return [order[i : i + 16] for i in range(0, len(order), 16)]

    def width_sum(order):
        return sum(max(lengths[i] for i in b) * len(b) for b in batches(order))

    def class_1(order):  # class-1 members of each full batch
        return [sum(classes[i] for i in b) for b in batches(order) if len(b) == 16]

    for epoch in range(3):
        grouped.set_epoch(epoch)
        balanced.set_epoch(epoch)
        ours = list(balanced)
        assert sorted(ours) == list(range(1000))
        assert sum(n in (0, 16) for n in class_1(list(grouped))) > 20  # one-class batches without classes
        assert all(5 <= n <= 8 for n in class_1(ours))  # 40% of 16 = 6.4 in every batch
        assert width_sum(ours) < 0.75 * width_sum(list(range(1000)))  # still far less padding than random
        assert max(lengths[i] for i in ours[:16]) == max(lengths)  # the longest first
        assert list(balanced) == ours  # a function of seed and epoch (resume replays it)

    # one scalar class per row, 2 to batch_size classes; else no classes (transformers' grouping)
    assert example_classes(Dataset.from_dict({"labels": [0, 1, 1]}), 16) == [0, 1, 1]
    assert example_classes(Dataset.from_dict({"labels": [1, 1, 1]}), 16) is None
    assert example_classes(Dataset.from_dict({"labels": [[0, 1], [1, 0]]}), 16) is None  # tags per token
    assert example_classes(Dataset.from_dict({"labels": list(range(40))}), 16) is None
    assert example_classes(Dataset.from_dict({"input_ids": [[1], [2]]}), 16) is None


def test_auto_precision_on_a_cpu(monkeypatch):
    """`train.precision = "auto"` on a CPU: bf16 autocast for a pretrained model where the CPU
    multiplies bf16 natively, fp32 for a model built from scratch or on a CPU without it."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from nlptasks.engine.system import machine
    from nlptasks.engine.training.trainer import resolve_precision
    from nlptasks.plan.estimate import resolved_precision

    for native in (True, False):
        monkeypatch.setattr(machine, "cpu_has_bf16", lambda native=native: native)
        assert (
            resolve_precision("auto", pretrained=True)
            == resolved_precision("auto", "cpu")
            == ("bf16" if native else "fp32")
        )
        assert resolve_precision("auto", pretrained=False) == resolved_precision("auto", "cpu", False) == "fp32"
        assert resolve_precision("fp32", pretrained=True) == "fp32"
