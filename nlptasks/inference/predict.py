"""What ``nlptasks infer`` does with a loaded predictor, in one place: inputs from texts, a file or
stdin (in the task's own format when one is chosen), the output format, generation settings and
ranking, then :func:`~nlptasks.inference.streaming.stream_predictions` into the output.
``nlptasks.predict_file`` is the same call without the command line.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from nlptasks.errors import NlptasksError
from nlptasks.inference import streaming

__all__ = ["Request", "configure_generation", "predict_to", "task_format"]


@dataclass
class Request:
    """One ``nlptasks infer`` call after loading: where the inputs come from and where results go.

    :param texts: inputs given as arguments (else ``file``, else ``stdin``).
    :param file: a .txt/.csv/.tsv/.jsonl/.json file, or one in a format the task offers.
    :param output: a file for the results (``None``: ``stdout``).
    :param fmt: ``jsonl`` (default), ``csv``, or a format the task offers (``conll`` ...).
    :param candidates: with a ranking predictor: rank the rows of this file for each input.
    :param generation: ``max_new_tokens``, ``temperature``, ``top_p`` for a generating predictor.
    """

    texts: list[str] = field(default_factory=list)
    file: Path | None = None
    output: Path | None = None
    fmt: str | None = None
    chunk_rows: int = streaming.CHUNK_ROWS
    progress: bool = False
    candidates: Path | None = None
    top_k: int = 5
    generation: dict[str, Any] = field(default_factory=dict)
    task: str = "?"
    stdin: TextIO | None = None
    stdout: TextIO | None = None


def predict_to(predictor: Any, request: Request) -> int:
    """Predict what ``request`` names and write the results; returns the number of inputs."""
    if request.texts and request.file is not None:
        raise NlptasksError("give texts as arguments or --file, not both")
    configure_generation(predictor, request.task, request.generation)
    task_fmt, out_fmt = task_format(predictor, request)
    if task_fmt is not None and request.texts:
        raise NlptasksError(f"--format {task_fmt} reads --file or stdin, not texts given as arguments")
    if task_fmt is not None and request.candidates is not None:
        raise NlptasksError(f"--candidates ranks JSON lines; it does not go with --format {task_fmt}")
    if request.candidates is not None and request.top_k < 1:
        raise NlptasksError("--top-k must be at least 1")
    stdin = request.stdin or sys.stdin
    if request.output is None:
        return _write_all(predictor, request, task_fmt, out_fmt, request.stdout or sys.stdout, stdin)
    # written to a temporary file, renamed over --output once every result is in; an error on the
    # way leaves --output as it was
    out = streaming.open_output(request.output, {"--file": request.file, "--candidates": request.candidates})
    try:
        count = _write_all(predictor, request, task_fmt, out_fmt, out, stdin)
    except BaseException:
        out.discard()
        raise
    out.commit()
    return count


def _write_all(predictor: Any, request: Request, task_fmt: str | None, out_fmt: str, out: Any, stdin: TextIO) -> int:
    """The results of ``request`` written to ``out`` in the chosen format; the number of inputs."""
    writer: Any
    if task_fmt is not None:
        writer = streaming.TaskFormatWriter(predictor, task_fmt, out)
    elif out_fmt == "csv":
        writer = streaming.CsvWriter(out)
    else:
        writer = streaming.JsonlWriter(out)
    if request.candidates is not None:
        queries = list(request.texts) if request.texts else list(_inputs(request, None, predictor, stdin))
        writer.write(_rank(predictor, request, queries))
        return len(queries)
    if request.texts:  # one call: a task may read consecutive texts as the fields of one input
        writer.write(streaming.predict_chunk(predictor, list(request.texts)))
        return len(request.texts)
    total = None
    if request.progress and request.file is not None and task_fmt is None:
        total = streaming.count_rows(request.file)
    source = str(request.file) if request.file is not None else "<stdin>"
    return streaming.stream_predictions(
        predictor,
        _inputs(request, task_fmt, predictor, stdin),
        writer.write,
        chunk_rows=request.chunk_rows,
        total=total,
        progress=request.progress,
        source=source,
    )


def _inputs(request: Request, task_fmt: str | None, predictor: Any, stdin: TextIO) -> Any:
    """The inputs of the file or stdin, read lazily (in the task's format when one is chosen)."""
    if task_fmt is not None:
        return predictor.read_inputs(request.file, task_fmt, stdin)
    if request.file is not None:
        return streaming.iter_file(request.file)
    return streaming.iter_stdin(stdin)


def configure_generation(predictor: Any, task: str, given: dict[str, Any]) -> None:
    """``max_new_tokens`` / ``temperature`` / ``top_p`` for a predictor that generates; an error for
    one that does not, or for values out of range."""
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return
    configure = getattr(predictor, "configure_generation", None)
    if configure is None:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise NlptasksError(
            f"{flags}: the {task!r} task does not generate text",
            hint="Generation settings apply to generating tasks such as sft.",
        )
    if given.get("max_new_tokens", 1) < 1:
        raise NlptasksError("--max-new-tokens must be at least 1")
    for flag, value in given.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise NlptasksError(f"--{flag.replace('_', '-')} must be a finite number (got {value})")
    if given.get("temperature", 0) < 0:
        raise NlptasksError("--temperature must be 0 (greedy) or more")
    if not 0 < given.get("top_p", 1.0) <= 1:
        raise NlptasksError("--top-p must be in (0, 1]")
    configure(**given)


def task_format(predictor: Any, request: Request) -> tuple[str | None, str]:
    """``(task format, output format)``: the task format to read and write (``fmt`` the task
    offers, or a file extension it offers), else ``None`` and jsonl or csv."""
    formats = dict(getattr(predictor, "formats", None) or {})
    fmt = request.fmt
    if fmt is None and request.file is not None and request.file.suffix.lower().lstrip(".") in formats:
        fmt = request.file.suffix.lower().lstrip(".")  # e.g. --file dev.conll
    if fmt is None and request.output is not None and request.output.suffix.lower() == ".csv":
        fmt = "csv"
    if fmt is not None and fmt in formats:
        return fmt, fmt
    if fmt is None or fmt in streaming.OUTPUT_FORMATS:
        return None, fmt or "jsonl"
    offered = ", ".join([*streaming.OUTPUT_FORMATS, *sorted(formats)])
    raise NlptasksError(
        f"--format {fmt}: the {request.task!r} task does not read or write this format (formats: {offered})",
        hint="Leave out --format for JSON lines; `nlptasks infer --help` lists the options.",
    )


def _rank(predictor: Any, request: Request, queries: list[Any]) -> list[dict[str, Any]]:
    """``--candidates FILE --top-k K``: the predictor's ``rank()``, or an error naming the task."""
    rank = getattr(predictor, "rank", None)
    if rank is None:
        raise NlptasksError(
            f"--candidates: the {request.task!r} run cannot rank candidates",
            hint='Ranking needs a predictor with rank(), e.g. a pair run trained with options.mode = "bi".',
        )
    assert request.candidates is not None
    return list(rank(queries, list(streaming.iter_file(request.candidates)), request.top_k))
