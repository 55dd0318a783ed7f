"""Bad inputs, tested: a corpus of malformed recipes and dirty data files through the CLI.

``tests/bad_inputs/recipes/*.toml``: each starts with ``# expect: FRAGMENT`` lines.  ``validate``
and ``run`` must both refuse the recipe with those fragments: validate checks everything run checks
before it loads data.  A recipe that is valid but that this machine cannot run (fp16 without a GPU)
says ``# command: run``: run refuses it, validate passes with a note giving the fragments.
``# args: ...`` are passed after the recipe (``--resume``, which only run takes).
``tests/bad_inputs/data/``: dirty files written for these tests, described in ``manifest.toml``.

Every case must give a non-zero exit (or, for a defect the run repairs, a finding of the data
doctor), one ``error:`` line naming the key path or the file and line, and no traceback.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "bad_inputs"
RECIPES = sorted((HERE / "recipes").glob("*.toml"))
DATA = HERE / "data"
MANIFEST = tomllib.loads((DATA / "manifest.toml").read_text(encoding="utf-8"))["file"]


def header(path: Path, key: str) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")  # a recipe may be non-UTF-8 on purpose
    return re.findall(rf"^# {key}: (.*)$", text, flags=re.M)


def assert_clean_error(err: str) -> list[str]:
    """One ``error:`` line, no traceback; returns the lines of the message (log lines left out)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if not line.startswith(("nlptasks: ", "note: "))]
    assert lines and lines[0].startswith("error: "), err
    assert sum(line.startswith("error: ") for line in lines) == 1, err
    return lines


def test_the_corpus_is_big_enough():
    assert len(RECIPES) >= 30
    assert len(MANIFEST) >= 15
    assert all((DATA / entry["name"]).exists() for entry in MANIFEST)
    assert all(header(path, "expect") for path in RECIPES), [p.name for p in RECIPES if not header(p, "expect")]


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_malformed_recipe(cli, tmp_path, path):
    machine = header(path, "command") == ["run"]
    args = " ".join(header(path, "args")).split()
    run = ["run", str(path), *args, "--no-progress", "--set", f"output.dir={tmp_path}"]
    commands = [run] if machine else [["validate", str(path), *args], run]
    for argv in commands:
        code, out, err = cli(*argv)
        assert code != 0, (argv[0], out, err)
        lines = assert_clean_error(err)
        assert len(lines) <= 4, err  # the error, its problem line(s), the hint
        for fragment in header(path, "expect"):
            assert fragment in err, (argv[0], fragment, err)
    if machine and "--resume" not in args:  # validate passes, with a note saying what run refuses
        code, out, err = cli("validate", str(path), *args)
        assert code == 0, err
        notes = "\n".join(line for line in err.splitlines() if line.startswith("note: "))
        for fragment in header(path, "expect"):
            assert fragment in notes, (fragment, err)


def dirty_recipe(tmp_path: Path, entry: dict) -> Path:
    task = entry.get("task", "cls")
    good = DATA / entry.get("good", "good_ner.jsonl" if task == "ner" else "good.csv")
    split = entry.get("split", "train")
    files = {"train": good, "validation": good, "test": good}  # given as files: nothing to split
    files[split] = DATA / entry["name"]
    lines = [f'task = "{task}"', "", "[data]"]
    lines += [f'{name} = "{file.as_posix()}"' for name, file in files.items()]
    lines += [
        "",
        "[model]",
        "max_length = 32",
        "",
        "[model.scratch]",
        "layers = 1",
        "hidden = 32",
        "heads = 2",
        "intermediate = 64",
        "min_frequency = 1",
        "",
        "[train]",
        "max_steps = 1",
    ]
    if task == "ner":
        lines += ["", "[options]", 'tokens_column = "tokens"', 'tags_column = "tags"']
    elif entry.get("options"):
        lines += ["", "[options]"] + [f"{key} = {json.dumps(value)}" for key, value in entry["options"].items()]
    recipe = tmp_path / "recipe.toml"
    recipe.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return recipe


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["name"] for e in MANIFEST])
def test_dirty_data_file(cli, tmp_path, entry):
    recipe = dirty_recipe(tmp_path, entry)
    command = entry.get("command", "run")
    argv = [command, recipe]
    if command == "run":
        argv += ["--no-progress", "--set", f"output.dir={tmp_path / 'runs'}"]
    code, out, err = cli(*argv)
    assert code == entry.get("exit", 2), (out, err)
    text = out + err
    if code != 0:
        assert_clean_error(err)
        if command == "run":  # refused before training: no incomplete run folder is left behind
            assert not list((tmp_path / "runs").glob("*/*")), list((tmp_path / "runs").glob("*/*"))
    for fragment in entry["expect"]:
        assert fragment in text, (fragment, text)

    # The data doctor reports every seeded defect, naming the file.
    code, out, err = cli("check", recipe)
    assert "Traceback" not in err
    if code == 2:  # the recipe itself cannot be checked (e.g. a file with no format): the error says so
        assert entry["name"] in err
        return
    problems = [line for line in out.splitlines() if line.startswith(("error: ", "warning: "))]
    assert any(entry["name"] in line for line in problems), out
