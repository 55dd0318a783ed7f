"""Step 10 of ``sft``: prompts (strings, alpaca rows or chat rows) → generated answers, and
``chat`` for the OpenAI-compatible routes of ``nlptasks serve``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.plugin import DataError, LoadOptions, input_text, load_run

from .generate import ChatMixin

__all__ = ["SftPredictor"]


class SftPredictor(ChatMixin):
    """Prompts (strings, alpaca rows or chat rows) → ``{"prompt", "response"}``, batched; ``chat``
    streams one conversation's reply (:class:`.generate.ChatMixin`)."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        from . import SftOptions
        from .generate import GenerationSettings
        from .templates import stop_token_ids

        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForCausalLM", options)
        if not getattr(self.tokenizer, "chat_template", None):
            raise DataError(f"{run_dir}: the run's tokenizer has no chat template (not an sft run?)")
        self.model.config.use_cache = True
        self.manifest = manifest
        self.options = SftOptions.model_validate(manifest.get("options", {}))
        self.stop_ids = stop_token_ids(self.tokenizer, manifest.get("stop_tokens", []))
        self.max_length = options.max_length or manifest.get("max_length")
        self.batch_size = options.batch_size or 16
        self.settings = GenerationSettings()

    def configure_generation(
        self, max_new_tokens: int | None = None, temperature: float | None = None, top_p: float | None = None
    ) -> None:
        """``nlptasks infer --max-new-tokens/--temperature/--top-p``."""
        if max_new_tokens is not None:
            self.settings.max_new_tokens = max_new_tokens
        if temperature is not None:
            self.settings.temperature = temperature
        if top_p is not None:
            self.settings.top_p = top_p

    def conversation(self, item: Any, index: int) -> tuple[str, list[dict[str, str]]]:
        from .data import RowProblem, detect_shape, to_messages

        opts = self.options
        if isinstance(item, str):
            row, shape = {opts.instruction_column: input_text(item, None, index)}, "alpaca"
        elif isinstance(item, dict):
            row = item
            try:
                shape = detect_shape(list(item), opts.model_copy(update={"shape": "auto"}))
            except RowProblem:
                shape = "alpaca" if opts.instruction_column in item else ""
                if not shape:
                    raise DataError(
                        f"no {opts.instruction_column!r} or {opts.messages_column!r} field; fields: {', '.join(item)}",
                        row=index + 1,
                    ) from None
        else:
            raise DataError(f"cannot read input of type {type(item).__name__}", row=index + 1)
        self._check_texts(row, shape, index)
        try:
            messages = to_messages(row, shape, opts, need_answer=False)
        except RowProblem as exc:
            raise DataError(str(exc), row=index + 1) from None
        prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        return prompt, messages

    def _check_texts(self, row: dict[str, Any], shape: str, index: int) -> None:
        """The texts of an input are texts: a number, true/false or null where a text goes is
        refused (:func:`nlptasks.plugin.input_text`), not written into the prompt as ``"5"``;
        a missing or null ``input`` (alpaca's optional second field) is no text, as in training."""
        opts = self.options
        turns = row.get(opts.messages_column)
        if shape == "chat" or (shape == "mixed" and turns is not None):
            if isinstance(turns, list):
                for j, turn in enumerate(turns):
                    if isinstance(turn, dict) and "content" in turn:
                        input_text(turn["content"], f"{opts.messages_column}[{j}].content", index)
            return
        input_text(row.get(opts.instruction_column), opts.instruction_column, index)
        if row.get(opts.input_column) is not None:
            input_text(row[opts.input_column], opts.input_column, index)

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        from .generate import generate

        pairs = [self.conversation(item, i) for i, item in enumerate(inputs)]
        responses = generate(
            self.model,
            self.tokenizer,
            [m for _, m in pairs],
            self.stop_ids,
            self.settings,
            batch_size=self.batch_size,
            max_length=self.max_length,
        )
        return [{"prompt": p, "response": r} for (p, _), r in zip(pairs, responses, strict=True)]
