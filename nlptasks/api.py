"""The Python API: train a recipe and use a run, the same two things the CLI does.

::

    import nlptasks

    result = nlptasks.run("recipes/cls.toml", ["train.epochs=1"])     # like `nlptasks run`
    predict = nlptasks.load(result.output_dir)                       # like `nlptasks infer --model`
    predict(["这家酒店服务很好"])   # [{"text": ..., "label": "正面", "score": 0.97}]: what infer prints
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nlptasks.pipeline import RunResult
    from nlptasks.recipe import LoadedRecipe

__all__ = ["load", "load_recipe", "predict_file", "run"]


def load_recipe(path: str | Path, overrides: Iterable[str] = ()) -> LoadedRecipe:
    """Read and validate a recipe with ``--set``-style ``overrides``, as ``nlptasks validate``
    does: raises :class:`nlptasks.RecipeError` listing every problem with its key path."""
    from nlptasks.pipeline import load_recipe as load

    return load(path, list(overrides))


def run(
    recipe: str | Path, overrides: Iterable[str] = (), progress: bool = False, resume: bool | str | Path = False
) -> RunResult:
    """Validate ``recipe`` with ``--set``-style ``overrides`` (``"train.epochs=1"``), run the ten
    steps and save the run; returns its ``output_dir``, ``metrics``, ``seconds`` and ``manifest``.
    ``resume=True`` (or a run folder) continues an incomplete run, like ``nlptasks run --resume``."""
    from nlptasks.pipeline import load_recipe as load
    from nlptasks.pipeline import run as run_recipe

    return run_recipe(load(recipe, list(overrides)), progress=progress, resume=resume)


def load(run_dir: str | Path, adapter: str | None = None, base_only: bool = False, precision: str = "auto",
         backend: str = "auto") -> Any:
    """The predictor of a complete run (step 10): call it with a list of inputs (texts, or dicts
    as read from a csv/jsonl file) to get one dict per input, in order — exactly the JSON objects
    ``nlptasks infer --model RUN_DIR`` prints.  Set ``predictor.batch_size`` (and, for most tasks,
    ``predictor.max_length``) as ``infer --batch-size`` / ``--max-length`` do.  ``adapter`` /
    ``base_only`` as ``infer --adapter`` / ``--base-only`` for runs trained with ``[peft]``;
    ``precision`` as ``infer --precision`` (``auto``: bf16 on a CUDA GPU that supports it, else
    fp32); ``backend`` as ``infer --backend`` (``auto``: ONNX Runtime for a folder made by
    ``nlptasks export --onnx``, torch otherwise; docs/onnx.md)."""
    from nlptasks.engine.inference import precision_for_loading
    from nlptasks.engine.onnx_runtime import backend_for_loading
    from nlptasks.errors import NlptasksError
    from nlptasks.pipeline import load_predictor

    path = Path(run_dir)
    if not path.is_dir():
        raise NlptasksError(f"{path}: no such folder", hint="Pass the folder `nlptasks run` printed (runs/<task>/<name>).")
    with precision_for_loading(precision), backend_for_loading(backend):
        return load_predictor(path, adapter=adapter, base_only=base_only)


def predict_file(predict: Any, path: str | Path, output: str | Path, chunk_rows: int = 2048) -> int:
    """Stream the inputs of ``path`` (a .txt, .csv, .tsv, .jsonl or .json file of any size) through
    ``predict`` (from :func:`load`) into JSON lines at ``output``, ``chunk_rows`` at a time, as
    ``nlptasks infer --file PATH --output OUTPUT`` does; returns the number of inputs."""
    from nlptasks.engine.streaming import JsonlWriter, iter_file, stream_predictions

    with open(output, "w", encoding="utf-8") as out:
        return stream_predictions(predict, iter_file(Path(path)), JsonlWriter(out).write, chunk_rows=chunk_rows,
                                  source=str(path))
