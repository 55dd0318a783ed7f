"""The public API for plugin authors: everything a task plugin needs, in one module.

::

    from nlptasks.plugin import TaskSpec, RunContext, hookimpl, get_tokenizer, load_model, ...

Our own plugins (``cls``, ``ner``, ``pair``, ``sft``) and the tutorial plugins import only this
module and ``nlptasks``, so a third-party plugin can do everything they do.  The hooks themselves
(the ten-step contract) are :mod:`nlptasks.hookspecs`; the signatures and docstrings of the names
below are their reference (docs/plugin-api.md is generated from them).  Everything else in the
package is private and may change.

Importing this module is cheap: torch, transformers and datasets load inside the helpers, when
called.
"""

from __future__ import annotations

from nlptasks.context import RunContext
from nlptasks.engine.data.doctor import (
    balance,
    blank_texts,
    duplicates,
    is_blank,
    label_sets,
    split_overlap,
    truncation,
)
from nlptasks.engine.data.inputs import input_fields, input_text, input_texts, input_words
from nlptasks.engine.data.reading import ROW_COLUMN, load_file, numbered_jsonl
from nlptasks.engine.data.rows import (
    UNKNOWN_LABEL,
    data_columns,
    filter_rows,
    require_columns,
    row_numbers,
    with_row_numbers,
)
from nlptasks.engine.data.tokenization import get_tokenizer
from nlptasks.engine.io.files import text_lines
from nlptasks.engine.model.modeling import label_config, load_model
from nlptasks.engine.model.packing import keeps_examples_apart, use_segment_attention
from nlptasks.engine.reports.figures import classification_sections, per_class_table, write_confusion_matrix
from nlptasks.engine.training.evaluation import classification_errors
from nlptasks.engine.training.perplexity import perplexity_trainer
from nlptasks.engine.training.trainer import (
    build_trainer,
    evaluate_split,
    make_training_arguments,
    train_and_evaluate,
)
from nlptasks.errors import DataError, NlptasksError, PluginError, Problem, RecipeError
from nlptasks.hookspecs import hookimpl
from nlptasks.inference.forward import (
    exact_multiple,
    length_batches,
    predict_logits,
    predict_per_token,
    sigmoid,
    softmax,
)
from nlptasks.inference.runs import load_run, load_trained_model
from nlptasks.labels import label_text, sort_labels, unique_labels
from nlptasks.metrics import choose_thresholds, classification_report, correlations, multilabel_report
from nlptasks.peft_support import VIRTUAL_TOKEN_METHODS
from nlptasks.types import LABEL_KINDS, Backend, Evaluation, Finding, LoadOptions, NoOptions, Predictor, TaskSpec, Usage

API_GROUPS: dict[str, list[str]] = {
    "Declaring a task": ["hookimpl", "TaskSpec", "NoOptions", "Usage", "LABEL_KINDS"],
    "The run": ["RunContext", "Evaluation"],
    "Errors": ["NlptasksError", "DataError", "RecipeError", "PluginError", "Problem"],
    "Step 2 and 4: rows and columns": [
        "ROW_COLUMN",
        "data_columns",
        "row_numbers",
        "with_row_numbers",
        "require_columns",
        "filter_rows",
        "load_file",
        "numbered_jsonl",
        "text_lines",
        "label_text",
        "sort_labels",
        "unique_labels",
        "UNKNOWN_LABEL",
    ],
    "Steps 4 and 5: tokenizer and model": [
        "get_tokenizer",
        "load_model",
        "label_config",
        "use_segment_attention",
        "keeps_examples_apart",
        "VIRTUAL_TOKEN_METHODS",
    ],
    "Step 6: metrics": ["classification_report", "multilabel_report", "choose_thresholds", "correlations"],
    "Steps 7 to 9: training": [
        "make_training_arguments",
        "build_trainer",
        "train_and_evaluate",
        "evaluate_split",
        "perplexity_trainer",
    ],
    "Step 10: predictors": [
        "Predictor",
        "LoadOptions",
        "Backend",
        "load_run",
        "load_trained_model",
        "input_fields",
        "input_texts",
        "input_text",
        "input_words",
        "predict_logits",
        "predict_per_token",
        "length_batches",
        "exact_multiple",
        "softmax",
        "sigmoid",
    ],
    "The data doctor (nlptasks check)": [
        "Finding",
        "blank_texts",
        "duplicates",
        "split_overlap",
        "label_sets",
        "balance",
        "truncation",
        "is_blank",
    ],
    "The run report (model card)": ["classification_sections", "per_class_table", "write_confusion_matrix"],
    "Evaluating a trained run (nlptasks eval)": ["classification_errors"],
}
"""The names of this module by what they are for (the order of docs/plugin-api.md)."""

__all__ = [
    "API_GROUPS",
    "LABEL_KINDS",
    "ROW_COLUMN",
    "UNKNOWN_LABEL",
    "VIRTUAL_TOKEN_METHODS",
    "Backend",
    "DataError",
    "Evaluation",
    "Finding",
    "LoadOptions",
    "NlptasksError",
    "NoOptions",
    "PluginError",
    "Predictor",
    "Problem",
    "RecipeError",
    "RunContext",
    "TaskSpec",
    "Usage",
    "balance",
    "blank_texts",
    "build_trainer",
    "choose_thresholds",
    "classification_errors",
    "classification_report",
    "classification_sections",
    "data_columns",
    "correlations",
    "duplicates",
    "evaluate_split",
    "exact_multiple",
    "filter_rows",
    "get_tokenizer",
    "hookimpl",
    "input_fields",
    "input_text",
    "input_texts",
    "input_words",
    "is_blank",
    "keeps_examples_apart",
    "label_config",
    "label_sets",
    "label_text",
    "load_file",
    "load_model",
    "load_run",
    "load_trained_model",
    "length_batches",
    "make_training_arguments",
    "multilabel_report",
    "numbered_jsonl",
    "per_class_table",
    "perplexity_trainer",
    "predict_logits",
    "predict_per_token",
    "require_columns",
    "row_numbers",
    "sigmoid",
    "softmax",
    "sort_labels",
    "split_overlap",
    "text_lines",
    "train_and_evaluate",
    "truncation",
    "unique_labels",
    "use_segment_attention",
    "with_row_numbers",
    "write_confusion_matrix",
]
