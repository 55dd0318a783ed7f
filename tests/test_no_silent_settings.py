"""Settings that would be silently wrong are refused or said: two ``options.*_column`` keys
naming one column (a text column that is the label column trains on the label text) is a
problem ``nlptasks validate`` lists, for every task; ``train.eval_steps`` beyond the run's
optimizer steps is a warning with the numbers when the run starts."""

from __future__ import annotations

import pytest

from conftest import RECIPES, set_args, tiny_run


@pytest.mark.parametrize(
    ("recipe", "override", "named"),
    [
        ("cls.toml", "options.text_column=label", "options.label_column"),
        ("pair.toml", "options.text_b_column=label", "options.text_b_column"),
        ("pair.toml", "options.text_a_column=text_b", "options.text_b_column"),
        ("ner.toml", "options.tags_column=tokens", "options.tags_column"),
        ("sft.toml", "options.output_column=instruction", "options.output_column"),
    ],
)
def test_a_text_column_that_is_the_label_column_is_refused(cli, recipe, override, named):
    code, out, err = cli("validate", RECIPES / recipe, *set_args(override))
    assert code == 2, out + err
    assert named in err and "each column key names its own column" in err, err


def test_the_shipped_recipes_name_distinct_columns(cli):
    for recipe in ("cls.toml", "pair.toml", "ner.toml", "sft.toml"):
        code, out, err = cli("validate", RECIPES / recipe)
        assert code == 0, err


def test_eval_steps_beyond_the_run_warn_with_the_numbers(runs, caplog):
    run = tiny_run(
        runs,
        "cls.toml",
        "late",
        "data.max_train_rows=64",
        "data.max_eval_rows=8",
        "train.eval_strategy=steps",
        "train.eval_steps=100000",
    )
    said = run.err + caplog.text
    assert "train.eval_steps = 100000 is more than the" in said, said
    assert "no evaluation during training" in said


def test_the_warning_only_when_eval_steps_is_beyond():
    from types import SimpleNamespace

    from nlptasks.engine.training.trainer import eval_steps_warning

    args = SimpleNamespace(
        eval_strategy="steps",
        eval_steps=50,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        num_train_epochs=3.0,
    )
    assert eval_steps_warning(args, 50) is None
    assert "at most 40" in eval_steps_warning(args, 40)
    assert eval_steps_warning(SimpleNamespace(**{**vars(args), "eval_strategy": "epoch"}), 10) is None
