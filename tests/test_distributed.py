"""DDP with 2 CPU processes (gloo): `nlptasks run` under torchrun, and `run --nproc 2`.

The worker (tests/distributed_worker.py) runs the engine with a plugin that records, per rank,
the training rows each micro-batch held and how many validation rows the metrics saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import RECIPES, ROOT, TINY, communicate, free_port, run_process

WORKER = Path(__file__).with_name("distributed_worker.py")
SETS = [
    *TINY,
    "train.epochs=1",
    "data.max_train_rows=96",
    "data.max_eval_rows=40",
    "train.batch_size=8",
    "train.group_by_length=false",
]


def _env() -> dict[str, str]:
    # CPU processes with gloo, as the module says: on a machine with one GPU two ranks would share it and
    # NCCL refuses (docs/gpu.md, H200)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / ".pp"), env.get("PYTHONPATH", "")])
    return env


def _sets(*extra: str) -> list[str]:
    out: list[str] = []
    for s in [*SETS, *extra]:
        out += ["--set", s]
    return out


def _worker(nproc: int, out: Path, runs: Path, name: str, *extra: str, accelerate: bool = False) -> list[dict]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    if accelerate:  # accelerate's torchrun-based launcher; on CPU processes the engine asks for gloo
        launcher = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(nproc),
            "--main_process_port",
            str(free_port()),
        ]
    command = [
        *(launcher if nproc > 1 else [sys.executable]),
        str(WORKER),
        str(RECIPES / "cls.toml"),
        str(out),
        *_sets(f"output.dir={runs}", f"output.run_name={name}", *extra),
    ]
    done = run_process(command, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text(encoding="utf-8")) for r in range(nproc)]


def test_two_ranks_train_on_disjoint_shards_and_evaluate_everything(tmp_path):
    single = _worker(1, tmp_path / "w1", tmp_path / "runs", "single")[0]
    ranks = _worker(2, tmp_path / "w2", tmp_path / "runs", "ddp")

    # one run directory for both ranks, written once
    assert ranks[0]["run_dir"] == ranks[1]["run_dir"] == str(tmp_path / "runs" / "cls" / "ddp")
    assert sorted(p.name for p in (tmp_path / "runs" / "cls").iterdir()) == ["ddp", "single"]
    run_dir = Path(ranks[0]["run_dir"])
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["distributed"] == {"world_size": 2, "backend": "gloo"}
    assert ranks[0]["wrapped"] == "DistributedDataParallel"
    assert (run_dir / "COMPLETE").exists()

    # each rank trained on half of the rows, the two halves together are the whole training set
    rows = Counter(map(tuple, single["trained"]))
    assert sum(rows.values()) == 96
    shard0, shard1 = Counter(map(tuple, ranks[0]["trained"])), Counter(map(tuple, ranks[1]["trained"]))
    assert sum(shard0.values()) == sum(shard1.values()) == 48
    assert shard0 + shard1 == rows
    assert shard0 != shard1
    # so half the optimizer steps of batch 8 (the effective batch is 2 x 8)
    assert single["global_step"] == 12 and ranks[0]["global_step"] == ranks[1]["global_step"] == 6

    # evaluation gathered both ranks' predictions: every validation row, once
    assert ranks[0]["eval_counts"] == ranks[1]["eval_counts"] == single["eval_counts"]
    assert set(single["eval_counts"]) == {40}
    # in the data's order although evaluation batches are length-sorted and split over two ranks
    assert ranks[0]["eval_labels"] == single["eval_labels"]  # validation (each epoch, final), then test
    assert single["eval_labels"][0] == single["eval_labels"][-2] == single["validation_labels"]
    saved = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    assert saved["validation"]["examples"] == 40
    # a per-rank mean loss, not the world-size multiple transformers reports for plain-mean losses
    assert saved["validation"]["loss"] == pytest.approx(single["metrics"]["validation"]["loss"], abs=0.1)


def test_accelerate_launch_runs_the_same_ddp(tmp_path):
    ranks = _worker(2, tmp_path / "w", tmp_path / "runs", "acc", accelerate=True)
    assert ranks[0]["world_size"] == ranks[1]["world_size"] == 2
    assert ranks[0]["run_dir"] == ranks[1]["run_dir"]
    run_dir = Path(ranks[0]["run_dir"])
    assert json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["distributed"] == {
        "world_size": 2,
        "backend": "gloo",
    }
    assert (run_dir / "COMPLETE").exists()
    shard0, shard1 = Counter(map(tuple, ranks[0]["trained"])), Counter(map(tuple, ranks[1]["trained"]))
    assert sum(shard0.values()) == sum(shard1.values()) == 48 and shard0 != shard1
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 6
    assert ranks[0]["eval_labels"][0] == ranks[0]["eval_labels"][-2] == ranks[0]["validation_labels"]


def test_run_nproc_starts_torchrun_and_only_rank_0_prints(tmp_path):
    command = [
        sys.executable,
        "-m",
        "nlptasks",
        "run",
        str(RECIPES / "cls.toml"),
        "--nproc",
        "2",
        "--no-progress",
        *_sets(f"output.dir={tmp_path}", "data.max_train_rows=32", "data.max_eval_rows=16"),
    ]
    done = run_process(command, env=_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "launch: -m torch.distributed.run --standalone --nproc_per_node=2 -m nlptasks run" in done.stderr
    assert "--nproc" not in done.stderr.split("launch:", 1)[1].splitlines()[0].replace("--nproc_per_node", "")
    assert done.stdout.count("model saved to") == 1  # the table once, from rank 0
    assert done.stderr.count("distributed: 2 processes (gloo); rank 0 writes the run") == 1
    (run_dir,) = (tmp_path / "cls").iterdir()
    assert (run_dir / "COMPLETE").exists()
    assert json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["distributed"]["world_size"] == 2


def test_fsdp_config_passes_through_train_extra_and_needs_cuda(cli, tmp_path):
    """FSDP through ``train.extra`` (transformers' own keys) reaches the Trainer's accelerate plugin;
    on CPU processes accelerate would drop it silently (plain DDP), so there it is a recipe error."""
    from nlptasks.context import RunContext
    from nlptasks.engine.training.trainer import make_training_arguments, training_kwargs
    from nlptasks.pipeline import load_recipe

    fsdp = "train.extra={ fsdp = true, fsdp_config = { version = 2, reshard_after_forward = true } }"
    loaded = load_recipe(RECIPES / "cls.toml", [fsdp])
    ctx = RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=tmp_path)
    args = make_training_arguments(training_kwargs(ctx, True, True, progress=False))
    assert args.fsdp_plugin_args["fsdp_version"] == 2
    assert args.fsdp_plugin_args["reshard_after_forward"] is True
    # Trainer refuses save_only_model with FSDP when it restores the best model (found on an H100)
    assert args.load_best_model_at_end and not args.save_only_model

    import torch

    if torch.cuda.is_available():
        return
    code, _, err = cli("run", str(RECIPES / "cls.toml"), "--set", fsdp, "--set", f"output.dir={tmp_path}")
    assert code == 2
    assert "train.extra.fsdp: FSDP needs CUDA GPUs" in err
    assert "expected a text" not in err  # `fsdp = true`, as docs/optimize.md writes it, has the right type


def test_flag_like_training_arguments_take_true_in_train_extra():
    """TrainingArguments fields that are flags on the command line (``--fsdp``: ``nargs="?"`` with a
    ``const``) take that const in ``train.extra`` (``fsdp = true``), besides their declared type
    (a GPU run found `fsdp = true` refused as "expected a text")."""
    import dataclasses

    from transformers import TrainingArguments

    from nlptasks.engine.training.preflight import _type_problems

    consts = {f.name: f.metadata["const"] for f in dataclasses.fields(TrainingArguments) if "const" in f.metadata}
    assert "fsdp" in consts
    for name, const in consts.items():
        assert _type_problems({name: const}) == [], name
    assert _type_problems({"fsdp": 3}), "a value of neither type is still refused"


def test_deepspeed_without_the_package_is_a_recipe_error(cli, tmp_path):
    import importlib.util

    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    argv = [
        "run",
        str(RECIPES / "cls.toml"),
        "--no-progress",
        *_sets(f"output.dir={tmp_path}", "data.max_train_rows=16", 'train.extra={ deepspeed = "ds_config.json" }'),
    ]
    code, _, err = cli(*argv)
    assert code == 2
    assert "train.extra.deepspeed: needs the deepspeed package (not installed: pip install deepspeed)" in err


def test_torchrun_command():
    from nlptasks.engine.system.distributed import torchrun_command

    command = torchrun_command(4, ["--debug", "run", "r.toml", "--nproc", "4", "--set", "a=1", "--nproc=4"])
    assert command[1:] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=4",
        "-m",
        "nlptasks",
        "--debug",
        "run",
        "r.toml",
        "--set",
        "a=1",
    ]


def test_nproc_inside_a_launcher_is_an_error(cli, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, _, err = cli("run", str(RECIPES / "cls.toml"), "--nproc", "2")
    assert code == 2 and "already inside a distributed launcher" in err


def _two_nodes(command_for_node) -> list[subprocess.CompletedProcess]:
    """Start ``command_for_node(0)`` and ``command_for_node(1)`` at once (two "machines" on
    localhost) and wait for both."""
    procs = [
        subprocess.Popen(command_for_node(r), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]
    done = []
    for proc in procs:
        out, err = communicate(proc)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    for d in done:
        assert d.returncode == 0, d.stderr[-3000:]
    return done


def test_two_nodes_train_exactly_as_two_processes_on_one(tmp_path):
    """Two "machines" of one process each (torchrun's static rendezvous on localhost, gloo): the
    same shards, steps, gathered evaluation and final metrics as one machine with two processes."""
    from nlptasks.engine.system.distributed import launcher_args

    one_node = _worker(2, tmp_path / "w1", tmp_path / "runs", "one")
    endpoint = f"127.0.0.1:{free_port()}"

    def node(r: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            *launcher_args(1, 2, endpoint, node_rank=r),
            str(WORKER),
            str(RECIPES / "cls.toml"),
            str(tmp_path / "w2"),
            *_sets(f"output.dir={tmp_path / 'runs'}", "output.run_name=two"),
        ]

    _two_nodes(node)
    two_nodes = [json.loads((tmp_path / "w2" / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]
    for a, b in zip(one_node, two_nodes, strict=True):
        assert a["world_size"] == b["world_size"] == 2
        assert a["trained"] == b["trained"]  # each rank's micro-batches, token for token
        assert a["global_step"] == b["global_step"] == 6
        assert a["eval_labels"] == b["eval_labels"] and a["eval_counts"] == b["eval_counts"]
    run_dir = tmp_path / "runs" / "cls" / "two"
    assert (run_dir / "COMPLETE").exists()
    assert json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["distributed"] == {
        "world_size": 2,
        "backend": "gloo",
    }
    metrics = [
        json.loads((tmp_path / "runs" / "cls" / n / "metrics.json").read_text(encoding="utf-8")) for n in ("one", "two")
    ]
    for split in ("validation", "test"):
        assert metrics[1][split]["accuracy"] == metrics[0][split]["accuracy"]
        assert metrics[1][split]["loss"] == pytest.approx(metrics[0][split]["loss"], abs=1e-5)


def test_launcher_args_and_their_errors(cli):
    from nlptasks.engine.system.distributed import launcher_args, torchrun_command
    from nlptasks.errors import NlptasksError

    assert launcher_args(2) == ["--standalone", "--nproc_per_node=2"]
    assert launcher_args(4, 3, "n0:29400") == [
        "--nnodes=3",
        "--nproc_per_node=4",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=n0:29400",
        "--rdzv_id=nlptasks",
    ]
    assert launcher_args(1, 2, "n0:29400", node_rank=1) == [
        "--nnodes=2",
        "--nproc_per_node=1",
        "--rdzv_backend=static",
        "--node_rank=1",
        "--master_addr=n0",
        "--master_port=29400",
    ]
    argv = [
        "run",
        "r.toml",
        "--nproc",
        "1",
        "--nnodes",
        "2",
        "--rdzv-endpoint=n0:1",
        "--node-rank",
        "0",
        "--set",
        "a=1",
    ]
    assert torchrun_command(1, argv, ["--x"])[3:] == ["--x", "-m", "nlptasks", "run", "r.toml", "--set", "a=1"]
    for bad, message in (
        ((1, 2), "give --rdzv-endpoint HOST:PORT"),
        ((1, 2, "n0"), "give HOST:PORT"),
        ((1, 2, "n0:1", 2), "--node-rank 2: give 0 to 1"),
        ((1, 0), "--nnodes: 0 machines"),
        ((1, 1, "n0:1"), "add --nnodes N"),
    ):
        with pytest.raises(NlptasksError, match=message):
            launcher_args(*bad)
    code, _, err = cli("run", str(RECIPES / "cls.toml"), "--nnodes", "2")
    assert code != 0 and "add --nproc N" in err
    code, _, err = cli("run", str(RECIPES / "cls.toml"), "--nproc", "1", "--nnodes", "2")
    assert code != 0 and "--rdzv-endpoint HOST:PORT" in err


def test_two_nodes_killed_on_one_mid_epoch_resume_to_the_uninterrupted_metrics(tmp_path):
    """``nlptasks run --nproc 1 --nnodes 2 --rdzv-endpoint HOST:PORT`` on two "machines" (c10d
    rendezvous on localhost, one shared run folder as on a shared filesystem): node 1 is SIGKILLed, launcher and worker, in the middle of an epoch once
    a checkpoint exists; node 0 must stop by itself (its peer gone), not hang; both started again
    with ``--resume`` end with the metrics of an uninterrupted two-process run."""
    import signal

    from conftest import wait_for

    common = [
        "--no-progress",
        *_sets(
            f"output.dir={tmp_path}",
            "data.max_train_rows=1200",
            "data.max_eval_rows=40",
            "train.epochs=2",
            "output.checkpoint_steps=10",
            "train.group_by_length=true",  # the quickstart's length-grouped batches, seeded per epoch
        ),
    ]
    whole = subprocess.Popen(
        [sys.executable, "-m", "nlptasks", "run", str(RECIPES / "cls.toml"), "--nproc", "2", *common],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = communicate(whole)
    assert whole.returncode == 0, err[-3000:]
    (whole_dir,) = (tmp_path / "cls").iterdir()

    def node(r: int, rdzv: str, *extra: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "nlptasks", "run", str(RECIPES / "cls.toml"), "--nproc", "1"]
        command += ["--nnodes", "2", "--rdzv-endpoint", rdzv, "--rdzv-id", "resume", *common]
        command += ["--set", "output.run_name=nodes", *extra]
        return subprocess.Popen(
            command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )

    rdzv = f"127.0.0.1:{free_port()}"
    nodes = [node(r, rdzv) for r in (0, 1)]
    run_dir = tmp_path / "cls" / "nodes"
    # 75 steps an epoch (1,200 rows, 2 ranks of batch 8); killed in the second epoch
    wait_for((run_dir / "checkpoints" / "checkpoint-110" / "trainer_state.json").exists, nodes[1], poll_s=0.02)
    import psutil

    left = psutil.Process(nodes[1].pid).children(recursive=True)  # torchrun's agent, its worker
    assert len(left) >= 2
    os.killpg(nodes[1].pid, signal.SIGKILL)  # the command on "machine" 1 (the worker has its own session)
    nodes[1].wait()
    _, still = psutil.wait_procs(left, timeout=60)
    assert not still, still  # the worker dies with its launcher instead of training on alone
    _, err0 = communicate(nodes[0])  # guarded against a hang: fails if it stops making progress
    assert nodes[0].returncode != 0, err0[-3000:]
    assert "another machine left the run" in err0 and "with --resume" in err0
    assert not (run_dir / "COMPLETE").exists()
    steps = sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert 110 <= steps[-1] < 150, steps

    rdzv = f"127.0.0.1:{free_port()}"
    again = [node(r, rdzv, "--resume") for r in (0, 1)]
    outputs = [communicate(p) for p in again]
    for proc, (_, err) in zip(again, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
        assert "--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d" in err  # torchrun's c10d rendezvous
    assert sum(out.count("model saved to") for out, _ in outputs) == 1  # global rank 0 prints
    assert json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["distributed"]["world_size"] == 2
    import re

    resumed = [int(m) for _, err in outputs for m in re.findall(r"resume \S+ from checkpoint-(\d+)", err)]
    assert resumed and resumed[0] >= 110, outputs[0][1][-3000:]  # from the last checkpoint, not from scratch
    assert not any("skipped checkpoint" in err for _, err in outputs)  # rng_state_<rank>.pth: resumable
    assert (run_dir / "COMPLETE").exists()
    a, b = (json.loads((d / "metrics.json").read_text(encoding="utf-8")) for d in (whole_dir, run_dir))
    for split in ("validation", "test"):
        for key in ("loss", "accuracy"):
            assert b[split][key] == pytest.approx(a[split][key], abs=1e-5), (split, key)
    # the whole run's totals: each rank restores its own (rank 0's alone would count twice)
    assert b["train"]["loss"] == pytest.approx(a["train"]["loss"], abs=1e-5)
    assert b["train"]["tokens"] == a["train"]["tokens"]


def test_more_processes_than_gpus_are_refused_before_the_launch(monkeypatch):
    import torch

    from nlptasks.errors import NlptasksError
    from nlptasks.pipeline import launch as launching

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(launching.subprocess, "call", lambda *a, **k: pytest.fail("torchrun was started"))
    with pytest.raises(NlptasksError) as info:
        launching.launch(2, ["run", "recipes/cls.toml"])
    assert "shows 1 CUDA GPU(s)" in str(info.value) and "CUDA_VISIBLE_DEVICES= " in info.value.hint
