"""The tutorial plugins (docs/plugin-tutorial/) work as docs/plugin-guide.md says.

The first tests do what a plugin user does: install the packages with pip (into a folder of their
own, never into the environment running the tests), then drive ``nlptasks`` in fresh processes
that see them as installed distributions (``PYTHONPATH``): ``plugins --json`` lists the tasks,
``run`` trains the multilabel recipe, ``infer`` labels texts (the qa tutorial's own test drives
its commands in-process).

The other tests load a plugin in-process the way the guide's "Testing your plugin" section
shows: ``nlptasks.testing.plugin_host`` (no entry points) and ``run_recipe``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, TINY, read_metrics, run_process, write_csv
from nlptasks.errors import DataError, RecipeError

TUTORIALS = ROOT / "docs" / "plugin-tutorial"
PACKAGE = TUTORIALS / "nlptasks-multilabel"
QA_PACKAGE = TUTORIALS / "nlptasks-qa"
RECIPE = PACKAGE / "recipe.toml"
DIST = "nlptasks-multilabel"
LABELS = ["价格", "位置", "卫生", "早餐", "服务"]


def _env(site: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("NLPTASKS_PLUGINS", "NLPTASKS_BLOCK_PLUGINS", "NLPTASKS_TRACE"):
        env.pop(var, None)  # these tests are about finding installed plugins: no selection
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    # One torch thread: a tiny model gains nothing from more, and when other processes share the
    # cores, oversubscribed threads make training many times slower.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _python(
    *args: str, cwd: Path | None = None, check: bool = True, site: Path | None = None
) -> subprocess.CompletedProcess[str]:
    proc = run_process([sys.executable, *args], cwd=cwd, env=_env(site), encoding="utf-8")
    if check:
        assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Both tutorial packages installed by pip into a folder of their own (a wheel is built from
    each, as for any user), which the subprocesses below put on their path."""
    if _python("-m", "pip", "--version", check=False).returncode != 0:
        pytest.skip(f"no pip in {sys.executable}'s environment: cannot install the tutorial packages")
    target = tmp_path_factory.mktemp("site")
    for package in (PACKAGE, QA_PACKAGE):
        _python(
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(package),
        )
    assert (target / "nlptasks_multilabel").is_dir() and (target / "nlptasks_qa").is_dir()
    return target


def _nlptasks(*args: str, cwd: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return _python("-m", "nlptasks", *args, cwd=cwd, site=site)


def test_the_installed_plugins_are_found_through_their_entry_points(site, tmp_path):
    listing = json.loads(_nlptasks("plugins", "--json", cwd=tmp_path, site=site).stdout)
    assert not listing["failures"]
    assert listing["tasks"]["multilabel"]["plugin"] == "multilabel"
    assert listing["tasks"]["multilabel"]["best_metric"] == "f1_micro"
    qa = listing["tasks"]["qa"]
    assert (qa["plugin"], qa["best_metric"], qa["peft_task_type"]) == ("qa", "f1", "QUESTION_ANS")
    assert qa["label_fields"] == "start_positions (position), end_positions (position)"
    assert qa["metrics"].startswith("f1, exact_match")
    info = {p["name"]: p for p in listing["plugins"]}
    assert info["multilabel"]["dist"] == DIST and info["qa"]["dist"] == "nlptasks-qa"
    assert {"nlptasks_preprocess", "nlptasks_build_model", "nlptasks_metrics", "nlptasks_load_predictor"} <= set(
        info["multilabel"]["hooks"]
    )
    assert "nlptasks_train" not in info["qa"]["hooks"]  # windows merged in step 6, no step 9 of its own
    # the environment running these tests does not have them
    assert _python("-c", "import nlptasks_qa", check=False).returncode != 0


def test_installed_multilabel_trains_and_infers(site, tmp_path):
    """The installed package through the CLI (its learning is measured in-process, by the guide's
    example test below)."""
    runs = tmp_path / "runs"
    proc = _nlptasks(
        "run",
        str(RECIPE),
        "--no-progress",
        "--set",
        "train.epochs=1",
        "--set",
        f"output.dir={runs}",
        "--set",
        "output.run_name=t",
        cwd=tmp_path,
        site=site,
    )
    assert "f1_micro" in proc.stdout
    run_dir = runs / "multilabel" / "t"
    assert (run_dir / "COMPLETE").exists()
    metrics = read_metrics(run_dir)
    for split in ("validation", "test"):
        assert {"f1_macro", "exact_match", "precision_micro", "recall_micro"} <= set(metrics[split])
        assert {f"f1/{label}" for label in LABELS} <= set(metrics[split])
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["task"] == "multilabel"
    assert manifest["labels"] == LABELS
    assert manifest["threshold"] == 0.5
    assert any(p["dist"] == DIST for p in manifest["plugins"])
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    assert config["problem_type"] == "multi_label_classification"

    # nlptasks infer: one JSON line per text, with labels and a probability for every label.
    texts = ["早餐非常丰富，鸡蛋是现煎的", "价格很实惠，服务也很热情", "还可以"]
    out = _nlptasks("infer", "--model", str(run_dir), *texts, cwd=tmp_path, site=site).stdout
    results = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [r["text"] for r in results] == texts
    for r in results:
        assert isinstance(r["labels"], list)
        assert sorted(r["scores"]) == sorted(LABELS)
        assert all(r["scores"][label] >= 0.5 for label in r["labels"])
        assert all(0.0 <= p <= 1.0 for p in r["scores"].values())

    # nlptasks eval: a third-party task scored on its test file gives back the run's test metrics,
    # and its own errors hook lists the wrong rows.
    out_dir = tmp_path / "eval"
    _nlptasks(
        "eval",
        str(run_dir),
        "--data",
        str(PACKAGE / "data" / "test.jsonl"),
        "--output",
        str(out_dir),
        "--backend",
        "torch",  # the run's own weights as it scored them, not a bf16 its end-of-run timing chose
        cwd=tmp_path,
        site=site,
    )
    scored = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
    assert scored["computed"] == metrics["computed"]  # computed alike: the figures' condition
    for key in ("f1_macro", "exact_match", "loss"):
        assert scored["test"][key] == pytest.approx(metrics["test"][key], rel=1e-5), key
    errors = [json.loads(line) for line in (out_dir / "errors.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(errors) == round((1 - metrics["test"]["exact_match"]) * scored["examples"])
    assert all(e["gold"] != e["predicted"] and e["row"] >= 1 for e in errors)


# ---------------------------------------------------------------------------------------------
# In-process: the plugin module registered on a host of its own (no installation needed)
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def host(monkeypatch):
    from nlptasks.testing import plugin_host

    monkeypatch.syspath_prepend(str(PACKAGE / "src"))
    import nlptasks_multilabel

    h = plugin_host(multilabel=nlptasks_multilabel)  # only this plugin: no installed copy, no entry points
    assert h.task("multilabel").plugin == "multilabel"
    return h


def _recipe(tmp_path: Path, validation: list[tuple[str, str]], options: str = "") -> Path:
    train = [("早餐好吃", "早餐"), ("服务热情", "服务"), ("早餐丰富，服务周到", "早餐|服务"), ("还行", "")]
    write_csv(tmp_path / "train.csv", train, header="text,labels")
    write_csv(tmp_path / "validation.csv", validation, header="text,labels")
    path = tmp_path / "r.toml"
    path.write_text(
        'task = "multilabel"\n[data]\ntrain = "train.csv"\nvalidation = "validation.csv"\n'
        "[model.scratch]\nlayers = 1\nhidden = 32\nheads = 2\nintermediate = 64\nmin_frequency = 1\n"
        f"[options]\n{options}",
        encoding="utf-8",
    )
    return path


def test_unseen_label_in_validation_names_file_and_row(host, tmp_path):
    from nlptasks.pipeline import load_recipe, run

    recipe = _recipe(tmp_path, [("早餐难吃", "早餐"), ("离地铁近", "位置")])
    loaded = load_recipe(recipe, [f"output.dir={tmp_path / 'runs'}"], host=host)
    with pytest.raises(DataError) as info:
        run(loaded, host=host, progress=False)
    assert info.value.row == 2
    assert info.value.path == str(tmp_path / "validation.csv")
    assert "'位置'" in str(info.value)


def test_options_are_validated(host, tmp_path):
    from nlptasks.pipeline import load_recipe

    recipe = _recipe(tmp_path, [("早餐难吃", "早餐")], options="threshold = 1.5\nseperator = ','\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(recipe, host=host)
    text = str(info.value)
    assert "options.threshold" in text
    assert "options.seperator: unknown key (did you mean 'separator'?)" in text


def test_label_parsing_and_metrics(host):
    import nlptasks_multilabel as ml
    import numpy as np

    assert ml.parse_labels("服务| 位置 ||服务", "|") == ["服务", "位置"]
    assert ml.parse_labels(["服务", "位置"], "|") == ["服务", "位置"]
    assert ml.parse_labels(None, "|") == ml.parse_labels("", "|") == ml.parse_labels([], "|") == []

    reference = np.array([[1, 0], [1, 1], [0, 0], [0, 1]])
    predicted = np.array([[1, 0], [1, 0], [0, 0], [1, 1]])
    m = ml.multilabel_report(predicted, reference, ["a", "b"])
    # a: tp 2, fp 1, fn 0 → p 2/3, r 1, f1 0.8;  b: tp 1, fp 0, fn 1 → p 1, r 1/2, f1 2/3
    # micro: tp 3, fp 1, fn 1 → p = r = f1 = 0.75;  exact matches: rows 1 and 3
    assert m["f1/a"] == pytest.approx(0.8)
    assert m["f1/b"] == pytest.approx(2 / 3)
    assert m["f1_macro"] == pytest.approx((0.8 + 2 / 3) / 2)
    assert m["f1_micro"] == pytest.approx(0.75)
    assert m["exact_match"] == pytest.approx(0.5)
    assert m["support/a"] == 2.0


# ---------------------------------------------------------------------------------------------
# docs/plugin-guide.md: its code blocks are real code
# ---------------------------------------------------------------------------------------------

GUIDE = ROOT / "docs" / "plugin-guide.md"


def guide_block(marker: str) -> str:
    import re

    for block in re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S):
        if block.startswith(marker):
            return block
    raise AssertionError(f"no python block starting with {marker!r} in {GUIDE}")


def test_guide_timer_plugin_wraps_a_run(host, tmp_path, monkeypatch, caplog):
    from nlptasks.pipeline import load_recipe, run

    (tmp_path / "nlptasks_timer.py").write_text(guide_block("# nlptasks_timer.py"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import nlptasks_timer

    host.register(nlptasks_timer, name="timer")
    info = next(i for i in host.infos() if i.name == "timer")
    assert info.tasks == [] and set(info.hooks) == {
        "nlptasks_preprocess",
        "nlptasks_training_arguments",
        "nlptasks_train",
    }
    loaded = load_recipe(RECIPE, [*TINY, "train.epochs=1", f"output.dir={tmp_path / 'runs'}"], host=host)
    with caplog.at_level("INFO", logger="nlptasks"):
        result = run(loaded, host=host, progress=False)
    manifest = json.loads((result.output_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert 0 < manifest["train_seconds"] < result.seconds
    assert any("timer: preprocess took" in r.getMessage() for r in caplog.records)
    import torch

    args = torch.load(result.output_dir / "training_args.bin", weights_only=False)
    assert args.logging_first_step is True  # the wrapper edited step 7's kwargs


def test_guide_in_process_test_example_passes(tmp_path, monkeypatch):
    source = guide_block("from nlptasks.testing import TINY, plugin_host, run_cli, run_recipe")
    source = source.replace('"path/to/src"', repr(str(PACKAGE / "src")))
    source = source.replace('"path/to/recipe.toml"', repr(str(RECIPE)))
    namespace: dict = {}
    exec(compile(source, str(GUIDE), "exec"), namespace)
    namespace["test_my_task_learns"](tmp_path / "a", monkeypatch)
    namespace["test_a_missing_column_names_the_option"](tmp_path / "b", monkeypatch)


@pytest.mark.parametrize("method", ["lora", "ia3", "prompt", "p_tuning", "prefix"])
def test_multilabel_peft_methods_train_or_are_refused_by_validate(method, host, tmp_path):
    """The tutorial declares SEQ_CLS: every method trains and predicts through load_run (the
    adapter on its base), or is refused by validate with the reason; lora merges."""
    from nlptasks.testing import run_cli

    sets = [
        *TINY,
        f"peft.method={method}",
        "train.max_steps=2",
        "peft.num_virtual_tokens=4"
        if method in ("prompt", "p_tuning", "prefix")
        else "peft.target_modules=['query', 'value']",
    ]  # ia3: no default feed-forward among them
    if method == "prefix":
        code, _, err = run_cli("validate", RECIPE, *[a for s in sets for a in ("--set", s)], host=host)
        assert code == 2 and "peft.method: 'prefix' does not work for task 'multilabel' (SEQ_CLS)" in err
        return
    args = [a for s in [*sets, f"output.dir={tmp_path}", "output.run_name=r"] for a in ("--set", s)]
    code, _, err = run_cli("run", RECIPE, "--no-progress", *args, host=host)
    assert code == 0, err
    run_dir = tmp_path / "multilabel" / "r"
    assert (run_dir / "adapter_config.json").exists() and not (run_dir / "model.safetensors").exists()
    code, out, err = run_cli("infer", "--model", run_dir, "早餐很好吃", host=host)
    assert code == 0, err
    assert sorted(json.loads(out)["scores"]) == LABELS
    if method == "lora":
        code, out, err = run_cli("export", run_dir, "--merge", tmp_path / "merged", host=host)
        assert code == 0 and "same predictions on 8 stored inputs" in out, err  # examples.json: 8 examples
