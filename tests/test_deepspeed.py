"""DeepSpeed ZeRO through the engine on 2 CPU processes (DeepSpeed's CPU accelerator on gloo):
``nlptasks run RECIPE --nproc 2 --set train.zero=N``.

The cls quickstart (tiny model, fp32) under ZeRO-1, 2 and 3 takes the same per-step losses as
DDP on the same rows and seed (within 1e-5) and ends with its metrics; the saved run is an
ordinary transformers model (ZeRO-3's shards gathered) with DDP's weights; a ZeRO-3 run killed
mid-epoch (``kill -9`` of the command: torchrun and the workers go with it) resumes from its ZeRO
checkpoint to the uninterrupted run's metrics.  The sft quickstart (LoRA on a from-scratch
decoder) under ZeRO-3 gives DDP's losses and a loadable adapter.  And what validation refuses.

Skips only where deepspeed is not installed (the dev extra installs it) or no C++ compiler is on
PATH (DeepSpeed's CPU backend compiles its shared-memory op at start-up, ~40 s the first time,
cached in ~/.cache/torch_extensions).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RECIPES, TINY, TINY_DECODER, communicate, wait_for

pytest.importorskip("deepspeed")
if shutil.which(os.environ.get("CXX", "c++")) is None:
    pytest.skip("no C++ compiler: DeepSpeed's CPU backend cannot build its op", allow_module_level=True)

CLS_SETS = [
    *TINY,
    "train.epochs=2",
    "data.max_train_rows=480",
    "data.max_eval_rows=40",
    "train.batch_size=8",
    "train.logging_steps=1",
    "output.checkpoint_steps=10",
]
SFT_SETS = [*TINY_DECODER, "train.epochs=1", "train.logging_steps=1", "data.max_train_rows=160"]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def start(recipe: Path, out: Path, name: str, *sets: str, resume: bool = False) -> subprocess.Popen:
    argv = [a for s in (*sets, f"output.dir={out}", f"output.run_name={name}") for a in ("--set", s)]
    command = [sys.executable, "-m", "nlptasks", "run", str(recipe), "--nproc", "2", "--no-progress", *argv]
    return subprocess.Popen(
        command + (["--resume"] if resume else []),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen) -> str:
    _, err = communicate(proc)
    assert proc.returncode == 0, err[-4000:]
    return err


def losses(run_dir: Path) -> list[float]:
    history = json.loads((run_dir / "log_history.json").read_text(encoding="utf-8"))
    return [h["loss"] for h in history if "loss" in h]


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cls_runs(tmp_path_factory) -> dict[str, Path]:
    """The cls quickstart under DDP and ZeRO-1, 2 and 3 (one after the other: 2 cores)."""
    out = tmp_path_factory.mktemp("zero")
    runs = {}
    sides = [("ddp", [])] + [(f"zero{n}", [f"train.zero={n}"]) for n in (1, 2, 3)]
    for name, extra in sides:
        err = finish(start(RECIPES / "cls.toml", out, name, *CLS_SETS, *extra))
        runs[name] = out / "cls" / name
        runs[f"{name}-log"] = err  # type: ignore[assignment]
    return runs


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_trains_as_ddp_and_saves_an_ordinary_model(cls_runs, stage):
    ddp, zero = cls_runs["ddp"], cls_runs[f"zero{stage}"]
    a, b = losses(ddp), losses(zero)
    assert len(a) == len(b) == 60  # 480 rows, 2 ranks of 8, 2 epochs, a loss every step
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5
    for split in ("validation", "test"):
        assert metrics(zero)[split]["loss"] == pytest.approx(metrics(ddp)[split]["loss"], abs=1e-5)
        assert metrics(zero)[split]["accuracy"] == metrics(ddp)[split]["accuracy"]
    manifest = json.loads((zero / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["distributed"] == {"world_size": 2, "backend": "gloo", "deepspeed_zero": stage}
    # an ordinary transformers model: ZeRO-3's shards gathered into model.safetensors
    import torch
    from transformers import AutoModelForSequenceClassification

    assert (zero / "model.safetensors").exists() and not list(zero.glob("global_step*"))
    theirs = AutoModelForSequenceClassification.from_pretrained(ddp).state_dict()
    ours = AutoModelForSequenceClassification.from_pretrained(zero).state_dict()
    assert ours.keys() == theirs.keys()
    assert all(ours[k].dtype == torch.float32 and torch.allclose(ours[k], theirs[k], atol=1e-4) for k in ours)
    from nlptasks import load

    assert load(zero)(["房间很干净，服务也好"])[0]["label"] in ("正面", "负面")


def test_a_killed_zero3_run_resumes_to_the_uninterrupted_metrics(cls_runs, tmp_path):
    import psutil

    proc = start(RECIPES / "cls.toml", tmp_path, "killed", *CLS_SETS, "train.zero=3")
    run_dir = tmp_path / "cls" / "killed"
    # 30 steps an epoch; killed in the second epoch, after the ZeRO checkpoint of step 40
    from nlptasks.engine.training.resume import checkpoint_problem

    forty = run_dir / "checkpoints" / "checkpoint-40"  # complete: DeepSpeed's `latest` comes before the state
    wait_for(lambda: forty.is_dir() and checkpoint_problem(forty) is None, proc, poll_s=0.02)
    family = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGKILL)  # the command and torchrun; the workers have their own session
    proc.wait()
    _, alive = psutil.wait_procs(family, timeout=60)
    assert not alive, alive  # the workers died with their launcher
    assert not (run_dir / "COMPLETE").exists()
    checkpoint = max((run_dir / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert list(checkpoint.glob("global_step*/*optim_states.pt"))  # ZeRO's own partitioned state

    err = finish(start(RECIPES / "cls.toml", tmp_path, "killed", *CLS_SETS, "train.zero=3", resume=True))
    step = re.search(r"resume \S+ from checkpoint-(\d+)", err)
    assert step and int(step.group(1)) >= 40, err[-3000:]
    whole, again = metrics(cls_runs["zero3"]), metrics(run_dir)
    for split in ("validation", "test"):
        for key in ("loss", "accuracy"):
            assert again[split][key] == pytest.approx(whole[split][key], abs=1e-6), (split, key)
    assert again["train"]["loss"] == pytest.approx(whole["train"]["loss"], abs=1e-6)


def test_sft_with_lora_under_zero3_trains_as_ddp(tmp_path):
    for name, extra in (("ddp", []), ("zero3", ["train.zero=3"])):
        finish(start(RECIPES / "sft.toml", tmp_path, name, *SFT_SETS, *extra))
    ddp, zero = tmp_path / "sft" / "ddp", tmp_path / "sft" / "zero3"
    a, b = losses(ddp), losses(zero)
    assert len(a) == len(b) > 0 and max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-4
    assert metrics(zero)["test"]["loss"] == pytest.approx(metrics(ddp)["test"]["loss"], abs=1e-4)
    from safetensors.torch import load_file

    theirs, ours = (load_file(str(d / "adapter_model.safetensors")) for d in (ddp, zero))
    assert ours.keys() == theirs.keys() and all(ours[k].numel() > 0 for k in ours)  # gathered, not empty shards
    assert all(torch_close(ours[k], theirs[k]) for k in ours)


def torch_close(a, b) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.allclose(a.float(), b.float(), atol=1e-4))


# -- what validation refuses -------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets,where,says",
    [
        (["train.zero=4"], "train.zero", "1, 2 or 3"),
        (["train.zero=2", "train.extra.deepspeed={zero_optimization={stage=2}}"], "train", "not both"),
        (["train.zero=2", "train.extra.fsdp=true"], "train", "keep one"),
        (
            ["train.extra.deepspeed={zero_optimization={stage=3, stage3_gather_16bit_weights_on_model_save=false}}"],
            "stage3_gather_16bit_weights_on_model_save",
            "without model.safetensors",
        ),
    ],
)
def test_bad_deepspeed_settings_name_their_key(cli, tmp_path, sets, where, says):
    argv = [a for s in (*TINY, *sets, f"output.dir={tmp_path}") for a in ("--set", s)]
    code, _, err = cli("validate", str(RECIPES / "cls.toml"), "--nproc", "2", *argv)  # what run --nproc 2 checks
    assert code == 2, err
    assert where in err and says in err, err
    assert "Traceback" not in err


def test_no_compiler_or_no_package_is_refused_with_the_reason(cli, monkeypatch, tmp_path):
    import importlib.util

    argv = ["--set", "train.zero=2", "--set", f"output.dir={tmp_path}"]
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    code, out, err = cli("validate", str(RECIPES / "cls.toml"), *argv, "--nproc", "2")
    assert code == 2 and "train.zero" in err and "build_shm_op" in err, out + err
    code, _, err = cli("run", str(RECIPES / "cls.toml"), *argv)
    assert code == 2 and "train.zero" in err and "C++ compiler" in err and "Traceback" not in err, err
    assert "distributed launch: run with --nproc N" in err  # and without --nproc: every problem at once
    monkeypatch.delenv("CXX")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    code, _, err = cli("run", str(RECIPES / "cls.toml"), *argv)
    assert code == 2 and "train.zero" in err and "pip install deepspeed" in err, err
    assert not list(tmp_path.rglob("*.safetensors"))  # refused before anything trained
    from nlptasks.pipeline import launch as launching

    monkeypatch.setattr(launching.subprocess, "call", lambda *a, **k: pytest.fail("torchrun was started"))
    code, _, err = cli("run", str(RECIPES / "cls.toml"), *argv, "--nproc", "2")
    assert code == 2 and "pip install deepspeed" in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "sets,nproc,says",
    [
        (["train.zero=2"], None, "train.zero: DeepSpeed trains in a distributed launch: run with --nproc N"),
        (["train.extra.deepspeed={zero_optimization={stage=2}}"], None, "train.extra.deepspeed: DeepSpeed trains"),
        (["train.zero=true"], "2", "train.zero: expected one of 1, 2, 3, got true"),
        (["train.zero=false"], "2", "train.zero: expected one of 1, 2, 3, got false"),
    ],
)
def test_validate_refuses_distributed_keys_a_plain_run_cannot_honour(cli, sets, nproc, says):
    """DeepSpeed's keys on a run without --nproc ended in a traceback (mpi4py) after validate said ok;
    train.zero = true was taken as stage 1."""
    argv = [a for s in sets for a in ("--set", s)] + (["--nproc", nproc] if nproc else [])
    code, out, err = cli("validate", str(RECIPES / "cls.toml"), *argv)
    assert code == 2 and says in err and "Traceback" not in err, out + err
    if nproc is None:
        code, out, err = cli("validate", str(RECIPES / "cls.toml"), *argv, "--nproc", "1")
        assert code == 0, err
