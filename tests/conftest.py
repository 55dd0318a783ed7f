"""Shared fixtures: paths to our recipes and the shared real data, and a tiny-model CLI runner."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
SHARED_DATA = ROOT.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# A model small enough that a run takes seconds.
TINY = [
    "model.scratch.layers=1",
    "model.scratch.hidden=32",
    "model.scratch.heads=2",
    "model.scratch.intermediate=64",
    "model.max_length=64",
]


def shared(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"shared data {path} not present")
    return path


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: ``code, out, err = cli("run", ...)``."""
    from nlptasks.cli import main

    def call(*argv: str) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture
def run_recipe(cli, tmp_path):
    """Train a recipe with the tiny model into ``tmp_path``; return the run directory."""

    def call(recipe: Path | str, *overrides: str, tiny: bool = True) -> Path:
        sets = [*(TINY if tiny else []), f"output.dir={tmp_path / 'runs'}", "output.run_name=t", *overrides]
        argv = ["run", str(recipe), "--no-progress"]
        for s in sets:
            argv += ["--set", s]
        code, out, err = cli(*argv)
        assert code == 0, err
        run_dirs = list((tmp_path / "runs").glob("*/t"))
        assert len(run_dirs) == 1
        return run_dirs[0]

    return call


def read_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))


def write_csv(path: Path, rows: list[tuple[str, str]], header: str = "text,label") -> Path:
    import csv

    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header.split(","))
        writer.writerows(rows)
    return path
