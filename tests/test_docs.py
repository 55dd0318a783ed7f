"""The reference docs are generated from the code (tools/gen_docs.py) and must be current; the
docstrings and field descriptions they are generated from must be complete."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from conftest import run_process
from nlptasks import hookspecs
from nlptasks.recipe import Recipe

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "tools" / "gen_docs.py"


def test_generated_docs_are_current():
    proc = run_process([sys.executable, str(GENERATOR), "--check"], cwd=ROOT)
    assert proc.returncode == 0, (
        f"{(proc.stderr or proc.stdout).strip()}\n"
        "docs/hooks.md, docs/recipes.md and docs/cli.md are generated from the code: "
        "run `python tools/gen_docs.py` and commit the result."
    )


def _hooks() -> list[tuple[str, object]]:
    marker = f"{hookspecs.PROJECT}_spec"
    return [(n, f) for n, f in vars(hookspecs).items() if inspect.isfunction(f) and hasattr(f, marker)]


def test_hookspecs_found():
    names = [name for name, _ in _hooks()]
    assert "register_tasks" in names and "nlptasks_load_predictor" in names
    assert len(names) >= 12


@pytest.mark.parametrize("name,fn", _hooks(), ids=[name for name, _ in _hooks()])
def test_hook_docstring_is_complete(name, fn):
    doc = inspect.getdoc(fn) or ""
    assert doc, f"hook {name} has no docstring"
    assert "**When:**" in doc, f"hook {name}: docstring lacks a '**When:**' line"
    assert ":returns:" in doc, f"hook {name}: docstring lacks ':returns:'"
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"hook {name}: docstring lacks ':param {param}:'"


def _models() -> list[tuple[str, type[BaseModel]]]:
    """Every recipe model reachable from Recipe, plus the built-in tasks' options models."""
    from nlptasks_plugins.cls import ClsOptions

    found: dict[type[BaseModel], str] = {}

    def walk(path: str, model: type[BaseModel]) -> None:
        found.setdefault(model, path)
        for key, field in model.model_fields.items():
            for sub in _models_in(field.annotation):
                walk(f"{path}.{key}" if path else key, sub)

    walk("", Recipe)
    found.setdefault(ClsOptions, "options (cls)")
    return [(path or "top level", model) for model, path in found.items()]


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) or () for m in _models_in(arg)]


def test_recipe_models_found():
    names = {model.__name__ for _, model in _models()}
    assert {
        "Recipe",
        "DataConfig",
        "SplitConfig",
        "ModelConfig",
        "ScratchConfig",
        "TrainConfig",
        "OutputConfig",
        "ClsOptions",
    } <= names


@pytest.mark.parametrize("where,model", _models(), ids=[m.__name__ for _, m in _models()])
def test_every_field_has_a_description(where, model):
    missing = [key for key, field in model.model_fields.items() if not (field.description or "").strip()]
    assert not missing, f"{model.__name__} ([{where}]): no description for {', '.join(missing)}"
