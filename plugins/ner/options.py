"""The ``ner`` task's options (the recipe's ``[options]`` table)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from nlptasks.plugin import unique_labels


class NerOptions(BaseModel):
    """Options of the ``ner`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    tokens_column: str = Field(
        "tokens", description="Column (or JSON key) holding the list of words (Chinese: characters)."
    )
    tags_column: str = Field(
        "tags", description="Column (or JSON key) holding one tag per word: strings, or ints of a ClassLabel sequence."
    )
    scheme: Literal["BIO", "IOB1", "BIOES"] = Field(
        "BIO", description="Tag scheme of the data: BIO (IOB2: every entity starts with B-), IOB1, or BIOES."
    )
    labels: Annotated[list[str], AfterValidator(unique_labels)] | None = Field(
        None,
        min_length=2,
        description="Every tag, 'O' included, in class-id order. Default: 'O', then for each entity type found "
        "in the training data (sorted) one tag per prefix of the scheme.",
    )
    subword_labels: Literal["first", "all"] = Field(
        "first",
        description="Which sub-tokens of a word carry its tag in training: the first (others get -100) or all "
        "(a B-X word's later sub-tokens get I-X). Predictions always come from the first sub-token.",
    )
    stride: int = Field(
        16,
        ge=0,
        le=8192,
        description="Words shared by consecutive windows when a sentence is longer than model.max_length "
        "(must leave room for new words in each window).",
    )
    overflow: Literal["window", "truncate"] = Field(
        "window",
        description="Sentences longer than model.max_length: 'window' covers every word with overlapping "
        "windows; 'truncate' keeps only the first window and scores only its words (the classic scripts' "
        "behaviour, for comparison).",
    )
    invalid_transition: Literal["repair", "error"] = Field(
        "repair",
        description="An I-X that does not continue an X entity (BIO, BIOES): 'repair' makes it B-X (BIOES: "
        "I-X→B-X, E-X→S-X) and counts it in metrics.json (repaired_tags); 'error' stops with file and line.",
    )
    mode: Literal["default", "strict"] = Field(
        "default",
        description="seqeval mode: 'default' (conlleval-compatible) or 'strict' (entities must be well-formed "
        "in the scheme).",
    )
    skip_invalid_rows: bool = Field(
        False,
        description="Skip (and count in metrics.json) rows whose tokens and tags differ in length or are not "
        "lists, and invalid JSON lines, instead of stopping with the file and line.",
    )
    input_split: Literal["auto", "char", "whitespace"] = Field(
        "auto",
        description="How `nlptasks infer` splits a text into words: 'char' (every non-space character: Chinese), "
        "'whitespace' (English), or 'auto' (char when 90%+ of the training words are one character).",
    )
    packing: bool | Literal["auto"] = Field(
        "auto",
        description="Training batches as one padding-free row each, attention per sentence (same loss); "
        "'auto': on for SDPA encoders on the CPU with dynamic padding (the log says why not); true: required.",
    )


def recipe_problems(recipe: Any, options: NerOptions) -> list[tuple[str, str]]:
    """``options.stride`` against ``model.max_length``: each word is at least one sub-token, so a
    stride of max_length words leaves no room for a new word in any window."""
    if options.overflow == "window" and options.stride >= recipe.model.max_length:
        return [
            (
                "options.stride",
                f"{options.stride} words of overlap leave no room for new words in a window of at most "
                f"{recipe.model.max_length} sub-tokens (model.max_length): use a smaller stride, e.g. "
                f"--set options.stride={recipe.model.max_length // 4}",
            )
        ]
    return []
