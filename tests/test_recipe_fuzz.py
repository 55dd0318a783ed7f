"""Generated recipes: the validator returns a recipe or raises a recipe error, never anything else.

Dictionaries mix the real keys (at their real places and elsewhere) with unknown ones, and give
them values of every TOML type, nested at random.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nlptasks.errors import NlptasksError
from nlptasks.host import get_host
from nlptasks.pipeline import load_recipe
from nlptasks.recipe import PeftConfig, Recipe, dump_toml

GOOD = Path(__file__).resolve().parent / "bad_inputs" / "data" / "good.csv"

KEYS = sorted(
    {
        *Recipe.model_fields,
        *PeftConfig.model_fields,
        "train",
        "validation",
        "test",
        "hub",
        "scratch",
        "name_or_path",
        "epochs",
        "batch_size",
        "learning_rate",
        "max_length",
        "layers",
        "hidden",
        "heads",
        "extra",
        "split",
        "dir",
        "run_name",
        "checkpoint_steps",
        "text_column",
        "label_column",
        "labels",
        "precision",
        "dtype",
        "tokenizer",
        "allow_pickle",
        "unknown",
        "",
        "über",
        "a.b",
    }
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "cls",
            "ner",
            "pair",
            "sft",
            "lora",
            "4bit",
            "fp16",
            "bf16",
            "char",
            "bert",
            "steps",
            "epoch",
            str(GOOD),
            "../x",
            "",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=12,
)
sections = st.fixed_dictionaries(
    {},
    optional={
        "task": st.one_of(st.sampled_from(["cls", "ner", "pair", "sft", "nope"]), scalars),
        "data": st.one_of(
            st.fixed_dictionaries(
                {"train": st.just(str(GOOD))},
                optional={"validation": values, "split": values, "hub": values, "max_train_rows": values},
            ),
            values,
        ),
        "model": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "scratch": st.one_of(
                        st.fixed_dictionaries({}, optional={"layers": values, "hidden": values, "heads": values}),
                        values,
                    ),
                    "name_or_path": values,
                    "max_length": values,
                    "dtype": values,
                    "allow_pickle": values,
                },
            ),
            values,
        ),
        "train": st.dictionaries(st.sampled_from(KEYS), values, max_size=4),
        "output": st.dictionaries(st.sampled_from(KEYS), values, max_size=3),
        "peft": st.dictionaries(st.sampled_from(KEYS), values, max_size=4),
        "options": values,
        "seed": values,
    },
).flatmap(
    lambda known: st.dictionaries(st.sampled_from(KEYS), values, max_size=2).map(lambda extra: {**extra, **known})
)

PATHS = [
    "task",
    "seed",
    "data.train",
    "data.validation",
    "data.split.validation",
    "data.split.test",
    "data.hub",
    "data.max_train_rows",
    "model.max_length",
    "model.dtype",
    "model.allow_pickle",
    "model.name_or_path",
    "model.scratch.hidden",
    "model.scratch.heads",
    "model.scratch.layers",
    "model.scratch.tokenizer",
    "train.epochs",
    "train.batch_size",
    "train.learning_rate",
    "train.precision",
    "train.eval_strategy",
    "train.extra.fp16",
    "train.extra.bf16",
    "output.run_name",
    "output.checkpoint_steps",
    "output.checkpoint_limit",
    "peft.method",
    "peft.r",
    "peft.quantization",
    "peft.quant_type",
    "options.text_column",
    "options.labels",
    "options",
    "unknown.key",
    "train.unknown",
]


def mutate(changes: list[tuple[str, object]]) -> dict:
    """A valid recipe with some keys set to generated values."""
    raw: dict = {"task": "cls", "data": {"train": str(GOOD)}, "model": {"scratch": {}}}
    for path, value in changes:
        node = raw
        *parents, last = path.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = value
    return raw


mutated = st.lists(st.tuples(st.sampled_from(PATHS), st.one_of(scalars, values)), max_size=3).map(mutate)
HOST = get_host()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.one_of(sections, mutated), check_files=st.booleans())
def test_generated_recipes_validate_or_fail_with_a_recipe_error(raw, check_files):
    try:
        loaded = load_recipe(None, raw=raw, host=HOST, check_files=check_files)
    except NlptasksError as exc:
        assert exc.render().strip()
        return
    assert loaded.recipe.task in HOST.tasks
    # a valid recipe can always be saved with its run, and that file loads again as the same recipe
    # (what `nlptasks eval` and `nlptasks run RUN/recipe.toml` read)
    again = load_recipe(None, raw=tomllib.loads(dump_toml(loaded.resolved())), host=HOST, check_files=False)
    assert again.sha256() == loaded.sha256()


# --- validate and run agree ---------------------------------------------------------------------
#
# A tiny valid recipe with one or two keys set to generated values, the keys being those that
# reach training (TrainingArguments through train.extra, the scratch config through
# model.scratch.extra, sizes and strategies).  Whatever validate accepts must train; whatever it
# refuses, run must refuse with the same problems, before reading data.

AGREE_PATHS = [
    "train.extra.max_grad_norm",
    "train.extra.label_smoothing_factor",
    "train.extra.adam_beta1",
    "train.extra.adam_epsilon",
    "train.extra.optim",
    "train.extra.lr_scheduler_kwargs",
    "train.extra.eval_delay",
    "train.extra.dataloader_num_workers",
    "train.extra.neftune_noise_alpha",
    "train.extra.torch_compile",
    "train.extra.hub_strategy",
    "train.extra.include_num_input_tokens_seen",
    "model.scratch.extra.hidden_act",
    "model.scratch.extra.hidden_dropout_prob",
    "model.scratch.extra.layer_norm_eps",
    "model.scratch.extra.type_vocab_size",
    "model.scratch.extra.max_position_embeddings",
    "model.scratch.extra.initializer_range",
    "model.scratch.extra.classifier_dropout",
    "train.batch_size",
    "train.gradient_accumulation_steps",
    "train.eval_strategy",
    "train.eval_steps",
    "train.logging_steps",
    "train.warmup",
    "train.keep_best",
    "train.scheduler",
    "model.max_length",
    "model.scratch.heads",
    "model.scratch.hidden",
    "model.scratch.intermediate",
    "model.scratch.architecture",
    "seed",
    "data.split.seed",
]
agree_values = st.one_of(
    st.booleans(),
    st.integers(-3, 80),
    st.floats(-1.5, 2.5),
    st.just(float("nan")),
    st.just(float("inf")),
    st.sampled_from(
        [
            "gelu",
            "relu",
            "swishy",
            "adamw_torch",
            "sgd",
            "adafactor",
            "adamw_bnb_8bit",
            "steps",
            "epoch",
            "no",
            "cosine",
            "linear",
            "every_save",
            "roberta",
            "bert",
            "distilbert",
            "qwen2",
            "",
        ]
    ),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["a", "num_cycles"]), st.integers(0, 2), max_size=1),
)
TINY_RECIPE = {
    "task": "cls",
    "data": {"train": str(GOOD)},
    "model": {"max_length": 32, "scratch": {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64}},
    "train": {"max_steps": 2, "batch_size": 8},
}


def _problem_lines(err: str) -> list[str]:
    return sorted(line.strip() for line in err.splitlines() if line.startswith("  "))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(changes=st.lists(st.tuples(st.sampled_from(AGREE_PATHS), agree_values), min_size=1, max_size=2))
def test_validate_and_run_agree(changes, tmp_path_factory):
    import copy

    from nlptasks.testing import run_cli

    raw = copy.deepcopy(TINY_RECIPE)
    for path, value in changes:
        node = raw
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    folder = tmp_path_factory.mktemp("agree")
    recipe = folder / "recipe.toml"
    recipe.write_text(dump_toml(raw), encoding="utf-8")
    code, _, v_err = run_cli("validate", recipe)
    r_code, _, r_err = run_cli("run", recipe, "--no-progress", "--set", f"output.dir={folder / 'runs'}")
    assert "Traceback" not in v_err + r_err, (changes, v_err, r_err)
    if code == 0:
        assert r_code == 0, (changes, "validate passed, run failed", r_err)
    else:
        assert r_code != 0, (changes, "validate refused, run trained", v_err)
        assert _problem_lines(v_err) == _problem_lines(r_err), (changes, v_err, r_err)
        assert not (folder / "runs").exists() or not any((folder / "runs").rglob("model.safetensors")), changes
