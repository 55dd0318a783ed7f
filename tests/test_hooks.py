"""Every hook of the ten-step contract: called in the documented order, and overridable.

One plugin overrides every step the engine has a default for (each leaving a mark), and one
cross-cutting wrapper records every call; a real tiny run goes through both.
"""

from __future__ import annotations

import inspect

import pytest

from conftest import RECIPES, TINY
from nlptasks import hookimpl, hookspecs
from nlptasks.engine import defaults
from nlptasks.pipeline import load_predictor, load_recipe, run
from nlptasks.testing import plugin_host

SPECS = [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(fn, "nlptasks_spec")]
PIPELINE_ORDER = [
    "nlptasks_setup",
    "nlptasks_load_data",
    "nlptasks_split",
    "nlptasks_preprocess",
    "nlptasks_build_model",
    "nlptasks_metrics",
    "nlptasks_training_arguments",
    "nlptasks_data_collator",
    "nlptasks_trainer",
    "nlptasks_train",
    "nlptasks_load_predictor",
]

TOOL_HOOKS = [
    "nlptasks_check",
    "nlptasks_evaluate",
    "nlptasks_errors",
]  # other commands than `run` (test_check.py, test_eval.py)
REPORT_HOOKS = ["nlptasks_report"]  # all run, after step 9 (tested in test_report.py)


def test_spec_module_lists_the_steps_in_pipeline_order():
    source = inspect.getsource(hookspecs)
    positions = [source.index(f"def {name}(") for name in PIPELINE_ORDER]
    assert positions == sorted(positions)
    assert set(SPECS) == {*PIPELINE_ORDER, *TOOL_HOOKS, *REPORT_HOOKS, "register_tasks", "register_backends"}


def test_firstresult_conventions_match_the_docstrings():
    for name in SPECS:
        fn = getattr(hookspecs, name)
        first = fn.nlptasks_spec.get("firstresult", False)
        doc = inspect.getdoc(fn)
        assert ("*first result wins*" in doc) == first, name
        if not first:
            assert "*all run*" in doc, name


def test_engine_defaults_are_trylast():
    for name in PIPELINE_ORDER:
        impl = getattr(defaults, name)
        assert impl.nlptasks_impl.get("trylast"), name


class Recorder:
    """Cross-cutting: wraps every step and records the call order."""

    def __init__(self):
        self.calls: list[str] = []

    def _wrap(name):  # noqa: N805 - builds methods
        def method(self, **kwargs):
            self.calls.append(name)
            return (yield)

        method.__name__ = name
        return hookimpl(wrapper=True)(method)

    for _name in PIPELINE_ORDER:
        locals()[_name] = _wrap(_name)
    del _name


class Overrider:
    """Overrides every generic step by delegating to the engine default and leaving a mark."""

    def __init__(self):
        self.marks: set[str] = set()

    @hookimpl
    def nlptasks_setup(self, ctx):
        ctx.state["setup"] = True  # all run: the default runs too
        self.marks.add("nlptasks_setup")

    @hookimpl
    def nlptasks_load_data(self, ctx):
        from datasets import Dataset, DatasetDict

        self.marks.add("nlptasks_load_data")
        rows = [("服务很好，很满意", "好"), ("房间太脏，很失望", "坏")] * 20
        ds = Dataset.from_dict({"text": [r[0] for r in rows], "label": [r[1] for r in rows]})
        ctx.sources["train"] = "<memory>"
        return DatasetDict({"train": ds})

    @hookimpl
    def nlptasks_split(self, ctx, data):
        self.marks.add("nlptasks_split")
        out = defaults.nlptasks_split(ctx=ctx, data=data)
        assert set(out) == {"train", "validation", "test"}
        return out

    @hookimpl(wrapper=True)
    def nlptasks_preprocess(self, ctx, data):
        out = yield
        self.marks.add("nlptasks_preprocess")
        assert ctx.labels == ["坏", "好"]
        return out

    @hookimpl(wrapper=True)
    def nlptasks_build_model(self, ctx):
        model = yield
        self.marks.add("nlptasks_build_model")
        assert model.config.id2label == {0: "坏", 1: "好"}
        return model

    @hookimpl(tryfirst=True)
    def nlptasks_metrics(self, ctx):
        self.marks.add("nlptasks_metrics")
        return lambda pred: {"accuracy": 0.5, "constant": 1.0}

    @hookimpl(wrapper=True)
    def nlptasks_training_arguments(self, ctx, kwargs):
        kwargs["logging_steps"] = 3
        args = yield
        self.marks.add("nlptasks_training_arguments")
        assert args.logging_steps == 3
        return args

    @hookimpl
    def nlptasks_data_collator(self, ctx):
        from transformers import DataCollatorWithPadding

        self.marks.add("nlptasks_data_collator")
        inner = DataCollatorWithPadding(ctx.tokenizer)

        def collate(features):
            ctx.state["batches"] = ctx.state.get("batches", 0) + 1
            return inner(features)

        return collate

    @hookimpl
    def nlptasks_trainer(self, ctx, model, args, data, data_collator, compute_metrics):
        from transformers import Trainer

        self.marks.add("nlptasks_trainer")

        class MyTrainer(Trainer):
            pass

        return MyTrainer(
            model=model,
            args=args,
            train_dataset=data["train"],
            eval_dataset=data["validation"],
            processing_class=ctx.tokenizer,
            data_collator=data_collator,
            compute_metrics=compute_metrics,
        )

    @hookimpl
    def nlptasks_train(self, ctx, trainer, data):
        self.marks.add("nlptasks_train")
        assert type(trainer).__name__ == "MyTrainer"
        metrics = defaults.nlptasks_train(ctx=ctx, trainer=trainer, data=data)
        metrics["extra"] = {"seen_batches": ctx.state["batches"]}
        return metrics

    @hookimpl(wrapper=True)
    def nlptasks_load_predictor(self, run_dir, manifest):
        predictor = yield
        self.marks.add("nlptasks_load_predictor")
        return predictor


@pytest.fixture
def host_with(tmp_path):
    def make(*plugins):
        host = plugin_host(builtins=True)
        for i, plugin in enumerate(plugins):
            host.register(plugin, name=f"test-{i}")
        return host

    return make


def test_every_hook_runs_in_order_and_can_be_overridden(tmp_path, host_with):
    recorder, overrider = Recorder(), Overrider()
    host = host_with(recorder, overrider)
    loaded = load_recipe(
        RECIPES / "cls.toml", [*TINY, f"output.dir={tmp_path}", "output.run_name=r", "train.epochs=1"], host=host
    )
    result = run(loaded, host=host, progress=False)
    predictor = load_predictor(result.output_dir, host=host)
    assert predictor(["服务很好"])[0]["label"] in {"好", "坏"}

    assert recorder.calls == PIPELINE_ORDER
    assert overrider.marks == set(PIPELINE_ORDER)
    # each override took effect
    assert result.metrics["validation"]["constant"] == 1.0
    assert result.metrics["extra"]["seen_batches"] > 0
    assert (result.output_dir / "COMPLETE").exists()


def test_steps_without_a_generic_default_say_so(tmp_path):
    from nlptasks import PluginError

    class Ctx:
        class task:  # noqa: N801
            name = "demo"
            plugin = "demo-plugin"

    for name in ("nlptasks_preprocess", "nlptasks_build_model"):
        with pytest.raises(PluginError, match="no plugin implements step"):
            kwargs = {"ctx": Ctx()}
            if name == "nlptasks_preprocess":
                kwargs["data"] = None
            getattr(defaults, name)(**kwargs)
    with pytest.raises(PluginError, match="no plugin can load task 'demo'"):
        defaults.nlptasks_load_predictor(run_dir=tmp_path, manifest={"task": "demo"}, options=None)
