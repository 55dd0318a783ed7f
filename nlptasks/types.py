"""What a task plugin declares and returns: :class:`TaskSpec`, :class:`Predictor`, :class:`Finding`,
:class:`Evaluation` and :class:`Usage`; what step 10 receives and dispatches through:
:class:`LoadOptions` and :class:`Backend`.

The ground floor of the package above the errors: plain data types and protocols, importing only
the standard library, pydantic and :mod:`nlptasks.peft_support` (a table).  Plugins import them
from :mod:`nlptasks.plugin` (or ``nlptasks``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from nlptasks.errors import NlptasksError, PluginError
from nlptasks.peft_support import METHODS, method_reason, peft_task_types

__all__ = [
    "DEVICES",
    "LABEL_KINDS",
    "PRECISIONS",
    "Backend",
    "Evaluation",
    "Finding",
    "Level",
    "LoadOptions",
    "NoOptions",
    "Predictor",
    "TaskSpec",
    "Usage",
]

LABEL_KINDS = ("example", "token", "position", "target", "span")
"""How a label field of the tokenized data is read (``TaskSpec.label_fields``):

``example``   one value per example (a class id, a score, a multi-hot vector);
``token``     one value per input token (of an input of any rank: one per token of each of its
              sequences), ``-100`` where the token is not in the loss;
``position``  one token index per example: the loss is on the token at that position (an answer's
              start or end);
``target``    the token ids of a target sequence the model generates (an encoder-decoder's labels:
              the decoder's side, not the input's), ``-100`` where a token is not in the loss;
``span``      a list per example of ``[class id, first token, last token]`` (positions inclusive):
              labels over token pairs, nested or overlapping spans allowed (a span head's entities;
              its collator turns them into the head's ``(types, tokens, tokens)`` targets)."""

_NAME = re.compile(r"[a-z][a-z0-9_-]*")


class NoOptions(BaseModel):
    """Options model for a task that takes none: any key in ``[options]`` is an error."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Usage:
    """How to call a run's predictor, in the words of its task: what ``nlptasks run`` prints as the
    command to try, and the model card's usage example and labels row.

    :param example: the arguments of one ``nlptasks infer --model RUN ...`` call, e.g. one text,
        or the two texts of a pair (several strings form one input, see :class:`Predictor`).
    :param labels: what the card's *labels* row says; ``None``: the run's label list.
    """

    example: tuple[str, ...] = ("your text",)
    labels: str | None = None


def _default_usage(manifest: Mapping[str, Any]) -> Usage:
    example = manifest.get("example")
    if isinstance(example, str) and example.strip():
        return Usage(example=(example,))
    if isinstance(example, (list, tuple)) and example and all(isinstance(x, str) for x in example):
        return Usage(example=tuple(example))
    return Usage()


@dataclass(frozen=True)
class TaskSpec:
    """What a task plugin declares through ``register_tasks``.

    A field that depends on the recipe's ``[options]`` may instead be a function of the validated
    options that returns the value; its docstring's first line describes it in listings.

    :param name: the name a recipe uses (``task = "cls"``); lower case letters, digits, ``_``, ``-``.
    :param description: one line, shown by ``nlptasks plugins``.
    :param options: pydantic model that validates the recipe's ``[options]`` table (forbid
        unknown keys and describe every field: the messages and ``nlptasks schema`` come from it).
    :param best_metric: the metric (a key of step 6's result, or ``"loss"``) that picks the best
        checkpoint.
    :param greater_is_better: whether a higher ``best_metric`` is better.
    :param stratify_by: given the validated options, the column to stratify random splits on
        (``None``: plain random splits).
    :param peft_task_type: the peft task type of the model step 5 builds, which lets a recipe add
        a ``[peft]`` table: any task type the installed peft knows (``peft.TaskType``: ``"SEQ_CLS"``,
        ``"TOKEN_CLS"``, ``"QUESTION_ANS"``, ``"FEATURE_EXTRACTION"``, ``"CAUSAL_LM"``,
        ``"SEQ_2_SEQ_LM"`` in peft 0.21; see :func:`nlptasks.peft_support.peft_task_types`).
        ``None``: the task does not support PEFT, and a ``[peft]`` table is a recipe error.
    :param peft_unsupported: PEFT methods the task refuses, each with the reason (``{"prompt":
        "..."}``), beyond those :mod:`nlptasks.peft_support` refuses for its task type.
        ``nlptasks validate`` reports a refused method with its reason.
    :param metrics: the metric names step 6 returns (besides ``loss``); per-class families as
        patterns such as ``"f1/<class>"``.  ``nlptasks validate`` checks ``train.best_metric``
        against them, and the engine checks each evaluation returns the plain names.
    :param label_fields: the columns of step 4's data that carry labels, each with its kind (see
        :data:`LABEL_KINDS`); ``nlptasks inspect-batch`` shows from them which tokens are in the loss.
    :param recipe_problems: a function of the validated recipe and options that yields ``(key path,
        message)`` for every option that the rest of the recipe makes unusable (``options.stride``
        against ``model.max_length``); ``nlptasks validate`` and ``run`` report them with the others.
    :param usage: a function of a run's manifest that returns its :class:`Usage`; ``None``: one
        text (``manifest["example"]`` when step 4 recorded one) and the run's labels.
    """

    name: str
    description: str
    options: type[BaseModel] = NoOptions
    best_metric: str | Callable[[Any], str] = "loss"
    greater_is_better: bool = False
    stratify_by: Callable[[Any], str | None] | None = None
    peft_task_type: str | Callable[[Any], str | None] | None = None
    peft_unsupported: Mapping[str, str] | Callable[[Any], Mapping[str, str]] = field(default_factory=dict)
    metrics: Sequence[str] | Callable[[Any], Sequence[str]] = ()
    label_fields: Mapping[str, str] | Callable[[Any], Mapping[str, str]] = field(
        default_factory=lambda: {"labels": "example"}
    )
    usage: Callable[[Mapping[str, Any]], Usage] | None = None
    recipe_problems: Callable[[Any, Any], Iterable[tuple[str, str]]] | None = None
    plugin: str = ""  # filled in by the host: the plugin that registered the task

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            problems.append(f"name {self.name!r}: use lower-case letters, digits, '_' and '-'")
        if isinstance(self.peft_task_type, str) and self.peft_task_type not in peft_task_types():
            problems.append(
                f"peft_task_type {self.peft_task_type!r}: not a task type of the installed peft "
                f"({', '.join(peft_task_types())})"
            )
        if isinstance(self.peft_unsupported, Mapping):
            problems += [
                f"peft_unsupported: {m!r} is not a method ({', '.join(METHODS)})"
                for m in self.peft_unsupported
                if m not in METHODS
            ]
        if isinstance(self.label_fields, Mapping):
            problems += [
                f"label_fields: {column!r} has kind {kind!r}, not one of {', '.join(LABEL_KINDS)}"
                for column, kind in self.label_fields.items()
                if kind not in LABEL_KINDS
            ]
        if isinstance(self.best_metric, str) and isinstance(self.metrics, (list, tuple)) and self.metrics:
            if not _matches(self.best_metric, [*self.metrics, "loss"]):
                problems.append(f"best_metric {self.best_metric!r} is not among metrics ({', '.join(self.metrics)})")
        if problems:
            raise PluginError(f"TaskSpec {self.name!r}: " + "; ".join(problems))

    # -- values for a run with these validated options ----------------------------------------

    def best_metric_for(self, options: Any) -> str:
        """The checkpoint-picking metric for a run with these validated ``options``."""
        return self.best_metric(options) if callable(self.best_metric) else self.best_metric

    def peft_task_type_for(self, options: Any) -> str | None:
        """The peft task type for a run with these validated ``options`` (``None``: no PEFT)."""
        return self.peft_task_type(options) if callable(self.peft_task_type) else self.peft_task_type

    def metrics_for(self, options: Any) -> list[str]:
        """The declared metric names, ``loss`` and the best metric included."""
        declared = list(self.metrics(options) if callable(self.metrics) else self.metrics)
        return list(dict.fromkeys(["loss", *declared, self.best_metric_for(options)]))

    def knows_metric(self, name: str, options: Any) -> bool:
        """Whether ``name`` is one of :meth:`metrics_for` (a per-class pattern such as
        ``f1/<class>`` matches ``f1/PER``)."""
        return _matches(name, self.metrics_for(options))

    def label_fields_for(self, options: Any) -> dict[str, str]:
        """``{column: kind}`` of the label columns of step 4's data."""
        return dict(self.label_fields(options) if callable(self.label_fields) else self.label_fields)

    def peft_support_for(self, options: Any) -> dict[str, str | None]:
        """Every PEFT method → ``None`` when this task trains it, else why not (the task type's
        limits from :mod:`nlptasks.peft_support`, then the task's own ``peft_unsupported``)."""
        return {method: self.peft_reason(options, method) for method in METHODS}

    def peft_reason(self, options: Any, method: str) -> str | None:
        """Why this task cannot train ``method`` with these ``options``, or ``None`` when it can."""
        task_type = self.peft_task_type_for(options)
        if task_type is None:
            return f"task {self.name!r} does not support PEFT (its plugin declares no peft_task_type)"
        own = self.peft_unsupported(options) if callable(self.peft_unsupported) else self.peft_unsupported
        return method_reason(task_type, method, self.label_fields_for(options).values(), own)

    def usage_for(self, manifest: Mapping[str, Any]) -> Usage:
        """How to call a run of this task (see :class:`Usage`)."""
        return self.usage(manifest) if self.usage is not None else _default_usage(manifest)

    # -- listings ------------------------------------------------------------------------------

    def peft_task_type_text(self) -> str:
        """``peft_task_type`` for listings: the type, ``-``, or the function's description."""
        return _text(self.peft_task_type, "-")

    def best_metric_text(self) -> str:
        """``best_metric`` for listings: the name, or a note that the options decide it."""
        return _text(self.best_metric, "loss")

    def metrics_text(self) -> str:
        """``metrics`` for listings: the names, or the function's description."""
        return _text(self.metrics, "-") if callable(self.metrics) else ", ".join(self.metrics) or "- (not declared)"

    def label_fields_text(self) -> str:
        """``label_fields`` for listings: ``column (kind)``, or the function's description."""
        if callable(self.label_fields):
            return _text(self.label_fields, "-")
        return ", ".join(f"{column} ({kind})" for column, kind in self.label_fields.items()) or "-"


def _text(value: Any, empty: str) -> str:
    if callable(value):
        doc = (value.__doc__ or "").strip().splitlines()
        return doc[0] if doc else "depends on the task options"
    return value or empty


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, re.sub(r"<[^>]*>", "*", p)) for p in patterns)


@runtime_checkable
class Predictor(Protocol):
    """What step 10 returns: call it with inputs, get one dict per input, in order.

    **What a predictor receives** (the same for ``nlptasks infer``, ``nlptasks.load`` and every
    task): a list whose items are

    * **dicts**, one per row of a ``--file`` csv/tsv/jsonl/json (keys: the columns), or per line of
      a stdin whose first non-empty line is a JSON object (then stdin is read as JSON lines);
    * **strings**: texts given as arguments, the lines of a ``.txt`` file or of plain stdin.

    A task whose input has several fields (a pair's two texts, a question and its context) reads
    them with :func:`nlptasks.plugin.input_fields`: from a dict by column name; from a string
    holding the fields separated by TABs; or, when no string holds a TAB, from consecutive strings
    (``nlptasks infer --model RUN "text a" "text b"``: one input).  A predictor never parses JSON or
    splits lines itself, so every task accepts the same shapes.  Nothing is turned into a text: a
    field that holds ``null``, a number, true/false, a list or an object, or a string with a lone
    surrogate, is refused with a ``DataError`` naming the input and the field
    (:func:`nlptasks.plugin.input_text`; ``input_words`` for a list of words), never read as
    ``"5"`` or ``""``.

    Optional, for file formats of the task's own (``nlptasks infer --format NAME``): a predictor
    may declare ``formats``, a dict ``{name: one-line description}``, and implement
    ``read_inputs(path, fmt, stream) -> Iterable`` (``path`` is ``None`` when reading ``stream``,
    i.e. stdin; return a generator so that big files stream) and ``write_outputs(results, fmt,
    stream)``, which the CLI calls once per chunk of results, in order.  The CLI checks
    ``--format`` against ``formats`` and lists them when a format is not offered; a ``--file``
    whose extension is one of the names uses that format without ``--format``.  Without a task
    format the CLI reads txt/csv/tsv/jsonl and writes JSON lines (or ``--format csv``).

    ``nlptasks infer`` calls the predictor on chunks of ``--chunk-rows`` inputs and sets its
    ``batch_size`` and ``max_length`` attributes, where it has them, from ``--batch-size`` and
    ``--max-length``; a predictor must give each input the same result whatever else is in the
    same call (tests/test_parity.py holds the built-in tasks to it).

    Optional, for ranking (``nlptasks infer --candidates FILE --top-k K``): a predictor may
    implement ``rank(queries, candidates, top_k) -> list[dict]``, one dict per query with its
    ``top_k`` best candidates; the CLI says plainly when a run's predictor cannot rank.

    Optional, for tasks that embed texts (``nlptasks serve``'s OpenAI-compatible
    ``/v1/embeddings`` serves exactly the runs whose predictor has it): ``embed(texts) ->
    array (len(texts), dim)`` of float vectors, one row per text in input order, each the same
    whatever else is in the call.

    Optional, for tasks that decide by probability thresholds (a multi-label classifier):
    ``takes_threshold = True``, and the predictor applies ``LoadOptions.threshold`` when it is set
    (``nlptasks infer --threshold T``); step 10 refuses a threshold for a predictor without it.

    Optional, for tasks that generate text (``nlptasks infer --max-new-tokens N --temperature T
    --top-p P``): ``configure_generation(max_new_tokens=None, temperature=None, top_p=None)``;
    the CLI passes only the settings given and says plainly when a task does not generate.

    Optional, for tasks that chat (``nlptasks serve``'s OpenAI-compatible ``/v1/chat/completions``
    and ``/v1/completions`` serve exactly the runs whose predictor has it): ``chat(messages, *,
    max_new_tokens=None, temperature=None, top_p=None, stop=None, info=None) -> Iterator[str]``.
    ``messages`` are ``{"role", "content"}`` turns (``system``, ``user``, ``assistant``); the
    iterator yields the assistant's reply in pieces as it is generated (pieces may be empty: one
    per generated token lets a consumer stop between tokens; closing the iterator stops the
    generation), rendered and stopped exactly as ``__call__`` would for the same conversation, so
    the joined pieces of a greedy reply equal ``__call__``'s answer.  ``None`` settings are the
    predictor's own (greedy for a temperature of 0 or ``None``); ``stop`` strings end the reply
    before them.  Invalid messages raise :class:`~nlptasks.errors.NlptasksError` when ``chat`` is
    called, before any generation.  ``info``, a dict, receives ``prompt_tokens`` (at the call),
    then ``completion_tokens`` and ``finish_reason`` (``"stop"`` or ``"length"``) when the reply
    ends: the server's ``usage`` and ``finish_reason``.

    Optional beside ``chat``, for replies generated together (the server batches the chat
    requests that waited while the model was busy): ``chat_batch(calls) -> Iterator[(index, kind,
    value)]``, each call a dict of ``chat``'s arguments (``messages`` and optionally the settings,
    ``stop``, ``info``) plus ``cancelled``, a callable asked between tokens.  Events per call:
    ``("error", exc)`` for an invalid conversation (nothing else follows for it), else ``("ready",
    None)``, ``("piece", text)`` (possibly empty) and one ``("end", None)``.  A greedy reply and its
    ``info`` must be exactly those ``chat`` gives the same call alone.
    """

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]: ...


@dataclass
class Evaluation:
    """What step 6's ``compute_metrics`` receives: the predictions of one split, with the split's
    name and the side data step 4 kept for it.

    It reads like ``transformers.EvalPrediction`` (``predictions``, ``label_ids``, ``inputs``,
    ``losses``; ``predictions, label_ids = evaluation`` unpacks), in the order of the split's
    tokenized examples whatever order the batches ran in.

    :param split: ``"validation"`` or ``"test"`` (or another split's name): which data this is.
    :param side: ``ctx.side[split]``, what step 4 kept for scoring this split per original example
        (window → example maps, offsets, raw rows); ``{}`` when it kept nothing.
    """

    predictions: Any
    label_ids: Any
    split: str
    side: dict[str, Any] = field(default_factory=dict)
    inputs: Any = None
    losses: Any = None

    def __iter__(self) -> Iterator[Any]:
        yield self.predictions
        yield self.label_ids


Level = Literal["error", "warning", "info"]
SHOWN_ROWS = 8  # row numbers listed per finding line (the JSON output has them all)


@dataclass
class Finding:
    """One thing the data doctor (``nlptasks check``) noticed.

    :param level: ``error``, ``warning`` or ``info``.
    :param check: a short stable id (``empty-text``, ``overlap``, ``truncation`` ...).
    :param message: one line, saying what to do where it is not obvious.
    :param split: the split it is about (``None``: the whole data).
    :param rows: the row numbers concerned (file lines for jsonl/CoNLL, rows for csv).
    """

    level: Level
    check: str
    message: str
    split: str | None = None
    rows: list[int] = field(default_factory=list)

    def line(self, sources: dict[str, str]) -> str:
        where = f"{sources.get(self.split, self.split)}: " if self.split else ""
        rows = ""
        if self.rows:
            shown = ", ".join(map(str, self.rows[:SHOWN_ROWS]))
            more = f" and {len(self.rows) - SHOWN_ROWS} more" if len(self.rows) > SHOWN_ROWS else ""
            rows = f" (rows {shown}{more})"
        return f"{self.level}: [{self.check}] {where}{self.message}{rows}"


# --------------------------------------------------------------------------------------------
# Step 10: how a run is loaded, and the backends that load it
# --------------------------------------------------------------------------------------------

PRECISIONS = ("auto", "fp32", "bf16")
"""The values of :attr:`LoadOptions.precision`."""

DEVICES = ("auto", "cpu", "cuda")
"""The values of :attr:`LoadOptions.device` (``cuda:N`` names one GPU)."""


@dataclass(frozen=True)
class LoadOptions:
    """How step 10 loads and runs a trained run: what ``nlptasks infer``'s flags, ``nlptasks.load``'s
    arguments and ``nlptasks serve``'s flags say, handed to ``nlptasks_load_predictor`` and from
    there to :func:`nlptasks.plugin.load_run`.  Nothing else decides how a model is loaded: two
    loads with different options in one process are independent.

    :param precision: ``auto`` (what the run measured at its end on this machine's CPU, recorded in
        its ``deployments.json``: bf16 where it agreed with fp32, did not depend on the batch and was
        faster, else fp32; a run not measured here: the precision it was trained and evaluated in,
        where the device computes in it: bf16 for a bf16 run on a GPU or CPU with bf16; else fp32),
        ``fp32``, or ``bf16`` (a CUDA GPU with bf16, or a CPU that computes in bf16 natively).
    :param backend: the runtime that loads the folder: ``auto`` (the backend whose export the folder
        is, e.g. ``onnx`` for ``nlptasks export --onnx``; for a run loaded with ``precision``,
        ``device`` and the adapter left to their defaults, the fastest export of it that ``nlptasks
        export`` measured agreeing with its fp32 weights on this machine's CPU, recorded in the run's
        ``deployments.json``: :mod:`nlptasks.inference.deployments`; else ``torch``), ``torch``, ``onnx``, or a
        backend a plugin registers (``nlptasks plugins`` lists them).  The predictor receives the
        options with the backend chosen for its folder.
    :param device: ``auto`` (a CUDA GPU when there is one, else the CPU), ``cpu``, ``cuda`` or
        ``cuda:N``.
    :param batch_size: inputs per forward pass (``None``: the predictor's own default).
    :param max_length: longest input in tokens (``None``: the run's ``model.max_length``).
    :param adapter: for a run trained with ``[peft]``: the adapter to use (``None``: the run's own).
    :param base_only: for a run trained with ``[peft]``: the frozen base without any adapter.
    :param threads: intra-op threads of a backend that has its own thread pool (ONNX Runtime;
        ``None``: ``NLPTASKS_ONNX_THREADS``, else torch's thread count).  torch's own threads belong
        to the process (``torch.set_num_threads``), not to one load.
    :param threshold: for a predictor that decides by probability thresholds (``cls`` with
        ``options.multi_label``): one threshold, above 0 and below 1, for every label instead of
        the thresholds the run chose on its validation split (``None``: the run's).
    """

    precision: str = "auto"
    backend: str = "auto"
    device: str = "auto"
    batch_size: int | None = None
    max_length: int | None = None
    adapter: str | None = None
    base_only: bool = False
    threads: int | None = None
    threshold: float | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.threshold is not None and (
            isinstance(self.threshold, bool)
            or not isinstance(self.threshold, (int, float))
            or not 0 < self.threshold < 1
        ):
            problems.append(f"threshold {self.threshold!r}: a number above 0 and below 1")
        if self.precision not in PRECISIONS:
            problems.append(f"precision {self.precision!r}: choose one of {', '.join(PRECISIONS)}")
        if not isinstance(self.backend, str) or not self.backend:
            problems.append(f"backend {self.backend!r}: give a backend name (auto, torch, onnx, ...)")
        if not isinstance(self.device, str) or not (self.device in DEVICES or re.fullmatch(r"cuda:\d+", self.device)):
            problems.append(f"device {self.device!r}: choose one of {', '.join(DEVICES)} or cuda:N")
        for name, least in (("batch_size", 1), ("max_length", 8), ("threads", 1)):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
                problems.append(f"{name} {value!r}: a whole number, {least} or more")
        if self.adapter is not None and self.base_only:
            problems.append("adapter and base_only: give one of them, not both")
        if problems:
            raise NlptasksError("load options: " + "; ".join(problems))

    def but(self, **changes: Any) -> LoadOptions:
        """A copy with ``changes`` (``options.but(backend="torch")``), validated again."""
        return replace(self, **changes)


@dataclass(frozen=True)
class Backend:
    """A runtime that step 10 loads run folders with.  ``torch`` and ``onnx`` (ONNX Runtime) are
    built in; a plugin adds one by calling ``register(Backend(...))`` in its ``register_backends``
    hook, and ``nlptasks infer --backend NAME``, ``nlptasks.load(..., backend=NAME)``, ``eval`` and
    ``serve`` then load through it.

    :param name: what ``--backend`` names (lower case letters, digits, ``_``, ``-``).
    :param description: one line for ``nlptasks plugins`` and ``--help``.
    :param load_model: ``load_model(run_dir, manifest, auto_class, options)`` (``auto_class``: a
        transformers class name, or a plugin's own model class): the run's model for
        inference, a callable that takes the tokenizer's tensors as keyword arguments and returns an
        output with the fields of ``auto_class``'s (``logits`` ...), ready in eval mode.
        ``manifest`` has the adapter chosen; ``options`` are the caller's :class:`LoadOptions`.
        Reuse another backend with :func:`nlptasks.plugin.load_trained_model` and
        ``options.but(backend="torch")``.
    :param owns: ``owns(run_dir, manifest)``: whether the folder is an export only this backend
        loads (``backend = "auto"`` then picks it; other backends refuse it).  Default: no folder.
    :param refuses: ``refuses(run_dir, manifest, options)``: why this backend cannot load the folder
        with these options, or ``None`` when it can (checked before anything is loaded).
    :param eval_module: ``eval_module(run_dir, manifest, auto_class, label_fields)``: the model as a
        ``torch.nn.Module`` that a ``transformers.Trainer`` evaluates (``nlptasks eval`` through this
        backend), taking the task's label fields as keyword arguments; ``None``: eval refuses it.
    """

    name: str
    description: str
    load_model: Callable[[Path, Mapping[str, Any], str | type, LoadOptions], Any]
    owns: Callable[[Path, Mapping[str, Any]], bool] | None = None
    refuses: Callable[[Path, Mapping[str, Any], LoadOptions], str | None] | None = None
    eval_module: Callable[[Path, Mapping[str, Any], str | type, Sequence[str]], Any] | None = None
    plugin: str = ""  # filled in by the host: the plugin that registered it

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name) or self.name == "auto":
            raise PluginError(f"Backend {self.name!r}: use lower-case letters, digits, '_' and '-' (not 'auto')")
        if not callable(self.load_model):
            raise PluginError(f"Backend {self.name!r}: load_model must be a function")

    def owns_folder(self, run_dir: Path, manifest: Mapping[str, Any]) -> bool:
        """Whether ``run_dir`` is this backend's own export (see ``owns``)."""
        return bool(self.owns(run_dir, manifest)) if self.owns is not None else False

    def refusal(self, run_dir: Path, manifest: Mapping[str, Any], options: LoadOptions) -> str | None:
        """Why this backend cannot load ``run_dir`` with ``options`` (``None``: it can)."""
        return self.refuses(run_dir, manifest, options) if self.refuses is not None else None
