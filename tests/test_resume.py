"""Resume after a crash, atomic runs, the NaN stop and write errors: real runs of tiny models.

The kill test starts ``python -m nlptasks run`` as a subprocess, SIGKILLs it in the middle of an
epoch once a checkpoint exists, resumes it, and compares the metrics with an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RECIPES, TINY, communicate, crashed_copy, read_metrics, tiny_run, wait_for

CLS = RECIPES / "cls.toml"
ROOT = Path(__file__).resolve().parents[1]


def sets(*items: str) -> list[str]:
    argv: list[str] = []
    for item in items:
        argv += ["--set", item]
    return argv


def nlptasks(*argv: str, cwd: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "nlptasks", "run", str(CLS), "--no-progress", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = communicate(proc)
    return proc.returncode, err


def assert_one_line_error(err: str, *fragments: str) -> None:
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def test_kill_and_resume_gives_the_uninterrupted_metrics(tmp_path):
    # 2 epochs of 75 steps (600 rows, batch 8, length-grouped batches as cls.toml has them,
    # evaluation and the best checkpoint every epoch); a full checkpoint every 10 steps; killed in
    # the second epoch
    common = sets(
        *TINY,
        "train.epochs=2",
        "data.max_train_rows=600",
        "train.batch_size=8",
        "output.checkpoint_steps=10",
        "data.max_eval_rows=60",
        f"output.dir={tmp_path / 'runs'}",
    )
    whole_proc = nlptasks(*common, *sets("output.run_name=whole"), cwd=tmp_path)  # alongside, for time
    proc = nlptasks(*common, *sets("output.run_name=killed"), cwd=tmp_path)
    run_dir = tmp_path / "runs" / "cls" / "killed"
    wait_for((run_dir / "checkpoints" / "checkpoint-90" / "trainer_state.json").exists, proc, poll_s=0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "COMPLETE").exists()
    steps = sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert 90 <= steps[-1] < 150, steps  # killed in the middle of the second epoch

    code, err = finish(whole_proc)
    assert code == 0, err
    code, err = finish(nlptasks(*common, *sets("output.run_name=killed"), "--resume", cwd=tmp_path))
    assert code == 0, err
    resumed = [line for line in err.splitlines() if "resume" in line]
    assert resumed and "checkpoint-" in resumed[0], err
    assert int(resumed[0].rsplit("checkpoint-", 1)[1]) >= 90
    assert (run_dir / "COMPLETE").exists() and not (run_dir / "checkpoints").exists()

    whole, again = read_metrics(tmp_path / "runs" / "cls" / "whole"), read_metrics(run_dir)
    for split in ("validation", "test"):
        for key in ("loss", "accuracy", "f1_macro"):
            assert again[split][key] == pytest.approx(whole[split][key], abs=1e-6), (split, key)
    assert again["train"]["best_step"] == whole["train"]["best_step"]
    # the totals cover the whole run, not the part after the resume (issue 28)
    assert again["train"]["loss"] == pytest.approx(whole["train"]["loss"], abs=1e-6)
    assert again["train"]["tokens"] == whole["train"]["tokens"]


def _losses(run_dir: Path) -> list[float]:
    """The training losses the run logged, in order."""
    return [h["loss"] for h in json.loads((run_dir / "log_history.json").read_text(encoding="utf-8")) if "loss" in h]


RESUME_RUN = [
    "train.batch_size=8",
    "data.max_train_rows=240",
    "data.max_eval_rows=40",
    "train.logging_steps=5",
    "output.checkpoint_steps=10",
    "output.checkpoint_limit=20",
    "output.keep_checkpoints=true",
]
EVALUATION = {
    # evaluated at every epoch's end, after the checkpoint of its last step was written
    "epoch": ("train.eval_strategy=epoch", "train.keep_best=false"),
    # evaluated every 15 steps, the best checkpoint kept
    "steps": ("train.eval_strategy=steps", "train.eval_steps=15", "train.keep_best=true"),
}


@pytest.fixture(scope="module", params=list(EVALUATION))
def uninterrupted(request, tmp_path_factory):
    """A run of 3 epochs of 30 steps with length-grouped batches (cls.toml), a resumable checkpoint
    every 10 steps, all checkpoints kept; evaluated as EVALUATION says."""
    root = tmp_path_factory.mktemp("resume")
    return tiny_run(root, CLS, "r", *RESUME_RUN, *EVALUATION[request.param], epochs=3)


@pytest.mark.parametrize("step", [20, 30, 50, 60, 80])
def test_resume_in_any_epoch_replays_the_uninterrupted_run(uninterrupted, tmp_path, step):
    """The state kill -9 leaves right after checkpoint-STEP (the folder without its final files and
    later checkpoints), resumed: the same training losses, step by step, the same best checkpoint
    and metrics, whether STEP is inside the first epoch (20), at an epoch's end (30, 60: an
    evaluation follows) or inside a later epoch (50, 80)."""

    from nlptasks.testing import run_cli

    crashed = tmp_path / "cls" / "r"
    crashed_copy(uninterrupted, step, crashed)
    code, _, err = run_cli(*uninterrupted.argv, "--resume", crashed)  # the command of the run, resuming
    assert code == 0, err
    assert f"from checkpoint-{step}" in err
    whole, again = read_metrics(uninterrupted), read_metrics(crashed)
    assert again["train"].get("best_step") == whole["train"].get("best_step")
    assert again["train"]["loss"] == pytest.approx(whole["train"]["loss"], abs=1e-6)  # the whole run's
    assert again["train"]["tokens"] == whole["train"]["tokens"]
    for split in ("validation", "test"):
        assert again[split] == {
            k: pytest.approx(v, abs=1e-6) for k, v in whole[split].items() if not k.endswith(("runtime", "per_second"))
        } | {k: again[split][k] for k in again[split] if k.endswith(("runtime", "per_second"))}
    # every logged loss, the resumed part included (logged every 5 steps: a checkpoint starts a window)
    assert _losses(crashed) == _losses(uninterrupted)


@pytest.fixture
def broken_run(tmp_path):
    """A run that finished, then made to look crashed: no final files, checkpoints 10, 20, 30."""
    run_dir = tiny_run(
        tmp_path / "runs",
        CLS,
        "r",
        "train.max_steps=30",
        "output.checkpoint_steps=10",
        "output.checkpoint_limit=3",
        "output.keep_checkpoints=true",
        "data.max_eval_rows=60",
        epochs=None,
    )
    metrics = read_metrics(run_dir)
    for name in ("COMPLETE", "model.safetensors", "metrics.json", "nlptasks.json"):
        (run_dir / name).unlink()
    return run_dir.argv, run_dir, metrics


def test_consumers_refuse_an_incomplete_run(cli, broken_run):
    _, run_dir, _ = broken_run
    for argv in (
        ["infer", "--model", run_dir, "好"],
        ["export", run_dir, "--merge", run_dir.parent / "m"],
        ["add-adapter", run_dir, run_dir, "--name", "x"],
    ):
        code, out, err = cli(*argv)
        assert code == 2 and out == ""
        assert_one_line_error(err, str(run_dir), "incomplete run", "--resume", str(CLS))
    import nlptasks
    from nlptasks.errors import NlptasksError

    with pytest.raises(NlptasksError, match="incomplete run"):
        nlptasks.load(run_dir)
    code, _, err = cli("infer", "--task", "cls", "--runs-dir", run_dir.parents[1], "好")
    assert code == 2 and "no complete 'cls' run" in err  # the latest-run lookup never picks it


def test_partial_checkpoints_are_skipped_and_a_changed_recipe_is_refused(cli, broken_run):
    argv, run_dir, metrics = broken_run
    ckpt = run_dir / "checkpoints"
    weights = ckpt / "checkpoint-30" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    (ckpt / "checkpoint-20" / "trainer_state.json").unlink()  # the save never finished

    code, _, err = cli(*argv, "--resume", "--set", "train.learning_rate=1e-3")
    assert code == 2
    assert_one_line_error(err, "another recipe", "train.learning_rate: 0.0005 in the run, 0.001 now")

    code, _, err = cli(*argv, "--resume", run_dir)
    assert code == 0, err
    assert "skipped checkpoint" in err and "checkpoint-30: model.safetensors is truncated" in err
    assert "checkpoint-20: no trainer_state.json" in err
    assert "from checkpoint-10" in err
    assert (ckpt / "broken-checkpoint-30").is_dir() and (ckpt / "broken-checkpoint-20").is_dir()
    again = read_metrics(run_dir)
    for split in ("validation", "test"):
        assert again[split]["loss"] == pytest.approx(metrics[split]["loss"], abs=1e-5)
        assert again[split]["accuracy"] == metrics[split]["accuracy"]

    code, _, err = cli(*argv, "--resume", run_dir)  # now complete
    assert code == 2 and "nothing to resume" in err
    code, _, err = cli(*argv[:3], "--resume", "--set", f"output.dir={run_dir.parents[1] / 'none'}")
    assert code == 2
    assert_one_line_error(err, "no incomplete run of task 'cls'", f"Start one: nlptasks run {CLS}")


def test_a_nan_loss_stops_the_run_at_its_step_and_keeps_the_last_good_checkpoint(tmp_path):
    # learning rate 1e4 (a plugin's step-7 wrapper sets it past the recipe's bounds): finite for 3
    # steps, NaN at step 4
    from nlptasks import hookimpl
    from nlptasks.testing import plugin_host, run_cli

    class Reckless:
        @hookimpl(wrapper=True)
        def nlptasks_training_arguments(self, ctx, kwargs):
            kwargs["learning_rate"] = 1e4
            return (yield)

    code, out, err = run_cli(
        "run",
        CLS,
        "--no-progress",
        *sets(
            *TINY,
            "train.max_steps=10",
            "train.warmup=0",
            "output.checkpoint_steps=1",
            f"output.dir={tmp_path}",
            "output.run_name=n",
        ),
        host=plugin_host(builtins=True, reckless=Reckless()),
    )
    assert code == 2, err
    assert_one_line_error(err, "the training loss became nan at step ")
    step = int(err.split("at step ")[1].split(";")[0])  # 4 on our CPUs
    assert 3 <= step < 10
    run_dir = tmp_path / "cls" / "n"
    # the loss of step N came from the weights saved at step N - 1: that checkpoint is not good
    assert f"the last good checkpoint is {run_dir / 'checkpoints' / f'checkpoint-{step - 2}'}" in err
    assert f"checkpoint-{step - 1}, holding the weights that gave that loss, was removed" in err
    assert not (run_dir / "COMPLETE").exists() and not (run_dir / "model.safetensors").exists()
    steps = sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert steps[-1] == step - 2  # the newest left: --resume starts from the last good one
    from safetensors.torch import load_file

    weights = load_file(run_dir / "checkpoints" / f"checkpoint-{step - 2}" / "model.safetensors")
    assert all(bool(t.isfinite().all()) for t in weights.values())


def test_a_run_that_trained_nothing_is_not_saved_as_a_model(tmp_path):
    """A step 9 that evaluates and returns without training (a plugin's bug) leaves the run
    incomplete instead of saving the untrained model as the result."""
    from nlptasks import hookimpl
    from nlptasks.testing import plugin_host, run_cli

    class EvaluateOnly:
        @hookimpl(tryfirst=True)
        def nlptasks_train(self, ctx, trainer, data):
            return {"validation": trainer.evaluate(eval_dataset=data["validation"])}

    code, _, err = run_cli(
        "run",
        CLS,
        "--no-progress",
        *sets(*TINY, "train.max_steps=3", f"output.dir={tmp_path}", "output.run_name=z"),
        host=plugin_host(builtins=True, lazy=EvaluateOnly()),
    )
    assert code == 2, err
    assert_one_line_error(err, "train: no optimizer step was taken", "max_steps 3", "left incomplete")
    run_dir = tmp_path / "cls" / "z"
    assert not (run_dir / "COMPLETE").exists() and not (run_dir / "model.safetensors").exists()


def test_a_trainer_that_saves_no_weights_leaves_the_run_incomplete(tmp_path):
    """A trainer whose ``save_model`` writes no weights (ZeRO-3 or FSDP shards not gathered, a
    plugin's trainer saving elsewhere) never makes a COMPLETE run without a model."""
    from nlptasks import hookimpl
    from nlptasks.testing import plugin_host, run_cli

    class SavesNothing:
        @hookimpl(hookwrapper=True)
        def nlptasks_train(self, ctx, trainer, data):
            yield  # trained (checkpoints saved as usual); then the run's own save writes nothing
            trainer.save_model = lambda *args, **kwargs: None

    code, _, err = run_cli(
        "run",
        CLS,
        "--no-progress",
        *sets(*TINY, "train.max_steps=3", f"output.dir={tmp_path}", "output.run_name=z"),
        host=plugin_host(builtins=True, lazy=SavesNothing()),
    )
    assert code == 2, err
    assert_one_line_error(err, "saved no model weights", "not marked complete", "--resume")
    assert not (tmp_path / "cls" / "z" / "COMPLETE").exists()


def test_an_unwritable_output_dir_is_named(cli, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    code, _, err = cli("run", CLS, "--no-progress", *sets(*TINY, "train.max_steps=2", f"output.dir={blocker / 'runs'}"))
    assert code == 2
    assert_one_line_error(err, str(blocker), "Not a directory", "--set output.dir=DIR")


@pytest.mark.parametrize(
    ("limit", "reason"),
    [(100_000, "File too large"), (250_000, "a write was cut short")],
    ids=["safetensors", "torch-save"],
)
def test_a_full_disk_is_named(tmp_path, limit, reason):
    """A file-size limit makes every write past ``limit`` fail (EFBIG) as a full disk does (ENOSPC).
    At 100 kB the model's safetensors fails (safetensors reports it as its own exception); at
    250 kB the model is written and the checkpoint's optimizer.pt is cut short (torch.save reports
    "unexpected pos"): either must still name the folder and say the disk is full."""

    def limiter() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = nlptasks(
        *sets(*TINY, "train.max_steps=3", "output.checkpoint_steps=2", f"output.dir={tmp_path}", "output.run_name=f"),
        cwd=tmp_path,
        preexec_fn=limiter,
    )
    code, err = finish(proc)
    assert code == 2, err
    assert_one_line_error(err, str(tmp_path / "cls" / "f"), reason, "free space")
    assert not (tmp_path / "cls" / "f" / "COMPLETE").exists()
    assert json.loads((tmp_path / "cls" / "f" / "nlptasks-run.json").read_text())["recipe_sha256"]


def test_an_adapter_run_resumes_to_the_same_result(tmp_path, capsys):
    """sft with LoRA (adapter checkpoints, LoRA dropout): resumed from the checkpoint before the last."""
    steps = [
        "train.max_steps=12",
        "output.checkpoint_steps=4",
        "output.checkpoint_limit=3",
        "output.keep_checkpoints=true",
    ]
    run_dir = tiny_run(tmp_path, "sft.toml", "s", *steps, epochs=None)
    metrics = read_metrics(run_dir)
    for name in ("COMPLETE", "metrics.json", "adapter_model.safetensors"):
        (run_dir / name).unlink()
    import shutil

    shutil.rmtree(run_dir / "checkpoints" / "checkpoint-12")
    import nlptasks

    overrides = [*TINY, *steps, f"output.dir={tmp_path}", "output.run_name=s"]  # the run's
    result = nlptasks.run(RECIPES / "sft.toml", overrides, resume=True)  # the Python API
    assert result.output_dir == run_dir and (run_dir / "COMPLETE").exists()
    assert "from checkpoint-8" in capsys.readouterr().err
    again = read_metrics(run_dir)
    for split in ("validation", "test"):
        assert again[split]["loss"] == pytest.approx(metrics[split]["loss"], abs=1e-5)
