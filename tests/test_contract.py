"""The plugin contract beyond the hooks' order (tests/test_hooks.py): step 6 knows which split it
scores and gets step 4's side data for it, whoever asks for the evaluation; a task declares its
metric names (validate checks train.best_metric), its label fields (inspect-batch), its PEFT
limits and its usage (the run's closing command, the card); TaskSpecs are validated."""

from __future__ import annotations

import json

import pytest

from conftest import RECIPES, TINY, tiny_run, write_csv
from nlptasks import hookimpl
from nlptasks.pipeline import load_recipe
from nlptasks.testing import plugin_host, run_cli, run_recipe

SMALL = ["data.max_train_rows=64", "data.max_eval_rows=24"]
QUICK = [*TINY, "train.epochs=1", *SMALL]


class Witness:
    """A cross-cutting plugin: keeps side data per split in step 4 (as a windowed task would) and
    records what every compute_metrics call was told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int, int]] = []

    @hookimpl(wrapper=True)
    def nlptasks_preprocess(self, ctx, data):
        data = yield
        for split, ds in data.items():
            ctx.side[split] = {"name": split, "rows": len(ds)}
        ctx.record("train", "witness_rows", len(data["train"]))
        return data

    @hookimpl(wrapper=True)
    def nlptasks_metrics(self, ctx):
        fn = yield

        def metrics(evaluation):
            self.seen.append(
                (evaluation.split, evaluation.side["name"], evaluation.side["rows"], len(evaluation.label_ids))
            )
            assert ctx.evaluating == evaluation.split
            return fn(evaluation)

        return metrics


def test_step_6_is_told_the_split_and_gets_its_side_data(tmp_path):
    witness = Witness()
    host = plugin_host(builtins=True, witness=witness)
    result = run_recipe(RECIPES / "cls.toml", *QUICK, host=host, folder=tmp_path)
    splits = [s[0] for s in witness.seen]
    assert splits[0] == "validation" and splits[-1] == "test" and "test" not in splits[:-1]
    for split, side_name, side_rows, predictions in witness.seen:
        assert side_name == split and side_rows == predictions  # that split's own side data and rows
    assert result.metrics["train"]["witness_rows"] == 64  # ctx.record reaches metrics.json
    assert json.loads((result.output_dir / "metrics.json").read_text())["train"]["witness_rows"] == 64


def test_a_plugins_own_step_9_gets_the_split_named_too(tmp_path):
    """Whoever calls trainer.evaluate / predict on a split, compute_metrics is told which."""
    witness = Witness()

    class OwnLoop:
        @hookimpl
        def nlptasks_train(self, ctx, trainer, data):
            trainer.train()
            test = trainer.evaluate(eval_dataset=data["test"], metric_key_prefix="final")
            predicted = trainer.predict(data["validation"])
            return {
                "test": {k.removeprefix("final_"): v for k, v in test.items()},
                "validation": {k.removeprefix("test_"): v for k, v in predicted.metrics.items()},
            }

    host = plugin_host(builtins=True, witness=witness, loop=OwnLoop())
    run_recipe(RECIPES / "cls.toml", *QUICK, "train.eval_strategy=no", host=host, folder=tmp_path)
    assert [s[0] for s in witness.seen] == ["test", "validation"]
    assert all(s[0] == s[1] for s in witness.seen)


def test_a_compute_metrics_without_the_best_metric_is_a_plugin_error(tmp_path):
    class Forgetful:
        @hookimpl(tryfirst=True)
        def nlptasks_metrics(self, ctx):
            return lambda evaluation: {"something_else": 1.0}

    host = plugin_host(builtins=True, forgetful=Forgetful())
    code, _, err = run_cli(
        "run",
        RECIPES / "cls.toml",
        "--no-progress",
        *[a for s in QUICK for a in ("--set", s)],
        "--set",
        f"output.dir={tmp_path}",
        host=host,
    )
    assert code == 2
    assert (
        "task 'cls' picks checkpoints by 'accuracy', but step 6's compute_metrics returned only: "
        "something_else (on validation)" in err
    )


# --- what a task declares ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "recipe,best,ok",
    [
        ("cls.toml", "f1_macro", True),
        ("cls.toml", "f1/正面", True),  # a per-class key: matches the declared f1/<class>
        ("cls.toml", "loss", True),
        ("cls.toml", "f1_micro", False),
        ("ner.toml", "f1/LOC", True),
        ("ner.toml", "accuracy", True),
        ("ner.toml", "spearman", False),
        ("sft.toml", "perplexity", True),
        ("sft.toml", "gen_char_f1", False),  # scored after training: it cannot pick checkpoints
        ("sft.toml", "accuracy", False),
    ],
)
def test_validate_checks_best_metric_against_the_tasks_metrics(cli, recipe, best, ok):
    code, out, err = cli("validate", RECIPES / recipe, "--set", f"train.best_metric={best}")
    if ok:
        assert code == 0, err
    else:
        assert (
            code == 2 and f"train.best_metric: {best!r} is not a metric of task" in err and "its metrics: loss" in err
        )


def test_the_metric_names_follow_the_options(cli):
    code, _, err = cli(
        "validate",
        RECIPES / "pair.toml",
        "--set",
        "options.mode=bi",
        "--set",
        "options.label_type=score",
        "--set",
        "train.best_metric=accuracy",
    )
    assert code == 2 and "its metrics: loss, spearman, pearson" in err
    code, _, err = cli(
        "validate", RECIPES / "pair.toml", "--set", "options.mode=bi", "--set", "train.best_metric=accuracy"
    )
    # a binary bi-encoder's accuracy comes from its threshold, found after training: no checkpoint can be picked by it
    assert code == 2 and "its metrics: loss, spearman, pearson" in err
    code, _, err = cli("validate", RECIPES / "pair.toml", "--set", "train.best_metric=f1")
    assert code == 0, err  # the cross-encoder's positive-class F1


@pytest.mark.parametrize(
    "bad,message",
    [
        ({"name": "Has Space"}, "use lower-case letters"),
        (
            {"peft_task_type": "SEQ2SEQ"},
            "peft_task_type 'SEQ2SEQ': not a task type of the installed peft (SEQ_CLS, SEQ_2_SEQ_LM",
        ),
        ({"label_fields": {"labels": "word"}}, "'labels' has kind 'word'"),
        ({"metrics": ("f1",), "best_metric": "accuracy"}, "best_metric 'accuracy' is not among metrics"),
        ({"peft_unsupported": {"lorra": "x"}}, "'lorra' is not a method"),
    ],
)
def test_a_bad_taskspec_makes_its_plugin_fail_to_load_not_the_host(bad, message):
    from nlptasks.types import TaskSpec

    class Bad:
        @hookimpl
        def register_tasks(self, register):
            register(TaskSpec(**{"name": "bad", "description": "x", **bad}))

    host = plugin_host(builtins=True, bad=Bad())
    assert "bad" not in host.tasks and "cls" in host.tasks
    assert any(message in f.error for f in host.failures), host.failures


def test_the_closing_command_is_the_tasks_own(tmp_path):
    """pair: two texts; its command runs as printed and predicts one pair."""
    import shlex

    run = tiny_run(tmp_path, "pair.toml", "p", *SMALL)
    line = run.out.strip().splitlines()[-1]
    argv = shlex.split(line.removeprefix("try: nlptasks "))
    manifest = json.loads((run / "nlptasks.json").read_text(encoding="utf-8"))
    assert argv[-2:] == manifest["example"] and len(argv) == 5  # infer --model RUN "text a" "text b"
    code, out, err = run_cli(*argv)
    assert code == 0, err
    assert [set(json.loads(x)) for x in out.splitlines()] == [{"text_a", "text_b", "label", "score", "scores"}]


@pytest.mark.parametrize(
    "recipe,labels_row",
    [
        ("ner.toml", "(entity types; BIO tags)"),
        ("sft.toml", "- (generates text)"),
    ],
)
def test_the_cards_labels_row_is_the_tasks_own(tmp_path, recipe, labels_row):
    if recipe == "sft.toml":
        run = tiny_run(
            tmp_path,
            recipe,
            "run",
            "model.scratch.min_frequency=1",
            "data.max_train_rows=16",
            "data.max_eval_rows=4",
            "train.max_steps=2",
            "options.generation_eval.rows=1",
            "options.generation_eval.max_new_tokens=2",
            tiny=(),
            epochs=None,
        )
    else:
        run = tiny_run(tmp_path, recipe, "run", *SMALL, "train.max_steps=2")
    card = (run / "README.md").read_text(encoding="utf-8")
    row = next(line for line in card.splitlines() if line.startswith("| labels |"))
    assert labels_row in row
    if recipe == "ner.toml":
        assert "`LOC`" in row and "B-LOC" not in row


# --- inspect-batch reads the declared label fields ----------------------------------------------


def test_inspect_batch_of_a_one_label_task_shows_the_label_and_says_what_it_found(cli):
    code, out, err = cli("inspect-batch", RECIPES / "cls.toml", "--rows", "1")
    assert code == 0, err
    assert "labels: labels (example)" in out and ", labels '" in out
    assert "ok: every example of train, validation, test has labels for the loss: labels (example)" in out


def test_inspect_batch_never_says_ok_without_the_declared_label_columns():
    from nlptasks import NlptasksError
    from nlptasks.pipeline import inspect_batch

    class Unlabelled:
        @hookimpl(wrapper=True)
        def nlptasks_preprocess(self, ctx, data):
            data = yield
            return data.remove_columns("labels")

    host = plugin_host(builtins=True, unlabelled=Unlabelled())
    loaded = load_recipe(RECIPES / "cls.toml", ["data.max_train_rows=8"], host=host)
    lines: list[str] = []
    with pytest.raises(NlptasksError, match="none of the label fields of task 'cls' \\(labels\\)"):
        inspect_batch(loaded, rows=1, host=host, out=lines.append)
    assert not any("ok:" in line for line in lines)


def test_a_position_outside_the_input_is_named(tmp_path):
    """A task whose answer positions fall outside its tokens: inspect-batch names the rows."""
    from nlptasks import NlptasksError, TaskSpec
    from nlptasks.pipeline import inspect_batch
    from nlptasks.plugin import get_tokenizer

    class Spans:
        @hookimpl
        def register_tasks(self, register):
            register(TaskSpec(name="spans", description="x", label_fields={"start": "position", "end": "position"}))

        @hookimpl
        def nlptasks_preprocess(self, ctx, data):
            tok = get_tokenizer(ctx, corpus=data["train"]["text"])

            def encode(batch):
                enc = tok(batch["text"], truncation=True, max_length=32)
                n = [len(x) for x in enc["input_ids"]]
                return {**enc, "start": [1] * len(n), "end": [m + 5 if i == 0 else m - 1 for i, m in enumerate(n)]}

            return data.map(encode, batched=True, remove_columns=data["train"].column_names)

    rows = [(f"文本{i}很好", "a") for i in range(6)]
    train = write_csv(tmp_path / "t.csv", rows)
    host = plugin_host(builtins=True, spans=Spans())
    loaded = load_recipe(
        RECIPES / "cls.toml",
        [
            "task=spans",
            "options={}",
            f"data.train={train}",
            "data.validation=''",
            "data.test=''",
            "data.split.validation=0.5",
        ],
        host=host,
    )
    with pytest.raises(NlptasksError, match=r"end outside the example's tokens: rows 1"):
        inspect_batch(loaded, rows=1, host=host, out=lambda line: None)


def test_run_merges_recorded_figures_only_into_splits_it_has(tmp_path):
    class Recorder:
        @hookimpl(wrapper=True)
        def nlptasks_preprocess(self, ctx, data):
            data = yield
            ctx.record("validation", "checked", 1)
            ctx.record("nowhere", "checked", 1)
            return data

    host = plugin_host(builtins=True, recorder=Recorder())
    result = run_recipe(RECIPES / "cls.toml", *QUICK, host=host, folder=tmp_path)
    assert result.metrics["validation"]["checked"] == 1 and "nowhere" not in result.metrics


def test_a_task_may_declare_any_task_type_of_the_installed_peft():
    """The task types are peft's (``peft.TaskType``), read without importing peft: an
    encoder-decoder task declares ``SEQ_2_SEQ_LM``, and so would a task of a type a later peft adds."""
    import subprocess
    import sys

    import peft

    from nlptasks.peft_support import peft_task_types
    from nlptasks.types import TaskSpec

    assert peft_task_types() == tuple(t.name for t in peft.TaskType)
    for task_type in peft_task_types():
        TaskSpec(name="t", description="x", peft_task_type=task_type)  # no error
    cheap = "import sys; from nlptasks.peft_support import peft_task_types as t; t(); print('peft' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", cheap], capture_output=True, text=True).stdout.strip() == "False"
