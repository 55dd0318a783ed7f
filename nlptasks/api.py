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
    from nlptasks.types import LoadOptions

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


def load(
    run_dir: str | Path,
    adapter: str | None = None,
    base_only: bool = False,
    precision: str = "auto",
    backend: str = "auto",
    *,
    device: str = "auto",
    batch_size: int | None = None,
    max_length: int | None = None,
    threads: int | None = None,
    threshold: float | None = None,
    options: LoadOptions | None = None,
) -> Any:
    """The predictor of a complete run (step 10): call it with a list of inputs (texts, or dicts
    as read from a csv/jsonl file) to get one dict per input, in order — exactly the JSON objects
    ``nlptasks infer --model RUN_DIR`` prints.

    The keyword arguments are the :class:`nlptasks.LoadOptions` of this load (or pass ``options``
    whole), as ``nlptasks infer``'s flags: ``adapter`` / ``base_only`` for runs trained with
    ``[peft]``; ``precision`` (``auto``: what the run measured on this CPU at its end, bf16 or
    fp32; unmeasured here, the run's own training precision where the device has it, else fp32);
    ``backend`` (``auto``: ONNX Runtime for a folder made by ``nlptasks export --onnx``; for a run,
    the fastest export of it measured agreeing with its fp32 weights on this machine, when there is
    one; torch otherwise; or a plugin's backend); ``device``; ``batch_size`` and ``max_length``; ``threads``
    (ONNX Runtime's); ``threshold`` (a multi-label cls run: one threshold for every label instead
    of the run's own).  They apply to this predictor only: loading the same run again with other
    options gives an independent predictor."""
    from nlptasks.errors import NlptasksError
    from nlptasks.inference.loading import load_predictor
    from nlptasks.types import LoadOptions

    path = Path(run_dir)
    if not path.is_dir():
        raise NlptasksError(
            f"{path}: no such folder", hint="Pass the folder `nlptasks run` printed (runs/<task>/<name>)."
        )
    if options is None:
        options = LoadOptions(
            precision=precision,
            backend=backend,
            device=device,
            batch_size=batch_size,
            max_length=max_length,
            adapter=adapter,
            base_only=base_only,
            threads=threads,
            threshold=threshold,
        )
    return load_predictor(path, options)


def predict_file(predict: Any, path: str | Path, output: str | Path, chunk_rows: int = 2048) -> int:
    """Stream the inputs of ``path`` (a .txt, .csv, .tsv, .jsonl or .json file of any size) through
    ``predict`` (from :func:`load`) into JSON lines at ``output``, ``chunk_rows`` at a time, as
    ``nlptasks infer --file PATH --output OUTPUT`` does; returns the number of inputs."""
    from nlptasks.inference.predict import Request, predict_to

    return predict_to(predict, Request(file=Path(path), output=Path(output), chunk_rows=chunk_rows))
