"""Generation: batched, length-sorted, left-padded.  Inference and the training-time generation
metric both use :func:`generate`, so they see exactly the same prompts; :class:`ChatMixin` gives the
predictor ``chat`` (one conversation's reply streamed in pieces, :func:`stream_reply`), built the
same way."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .templates import render


@dataclass
class GenerationSettings:
    """What ``nlptasks infer --max-new-tokens/--temperature/--top-p`` set; greedy by default."""

    max_new_tokens: int = 128
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0

    def kwargs(self) -> dict[str, Any]:
        if self.temperature <= 0:
            return {"do_sample": False, "max_new_tokens": self.max_new_tokens}
        return {
            "do_sample": True,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
        }


def generate(
    model: Any,
    tokenizer: Any,
    conversations: list[list[dict[str, str]]],
    stop_ids: list[int],
    settings: GenerationSettings,
    batch_size: int = 16,
    max_length: int | None = None,
    progress: Any = None,
) -> list[str]:
    """The assistant's reply to each conversation, in input order.

    Prompts are rendered with the tokenizer's (stored) chat template plus the generation prompt,
    sorted by length so each batch pads little, left-padded (a decoder continues from the right
    end), and cut from the left to ``max_length`` tokens (the training length) when longer.
    """
    import torch

    prompts = [render(tokenizer, messages, generation_prompt=True) for messages in conversations]
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    if max_length is not None:
        encoded = [ids[-max_length:] for ids in encoded]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    outputs: list[str] = [""] * len(encoded)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                width = max(len(encoded[i]) for i in batch)
                ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    seq = encoded[i]
                    ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
                    mask[row, width - len(seq) :] = 1
                generated = model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    eos_token_id=stop_ids,
                    pad_token_id=pad_id,
                    **settings.kwargs(),
                )
                for row, i in enumerate(batch):
                    new = generated[row, width:].tolist()
                    cut = next((k for k, t in enumerate(new) if t in stop_ids), len(new))
                    outputs[i] = tokenizer.decode(new[:cut], skip_special_tokens=True).strip()
                if progress is not None:
                    progress.update(len(batch))
    finally:
        if was_training:
            model.train()
    return outputs


class ChatMixin:
    """``Predictor.chat`` for :class:`~nlptasks_plugins.sft.predict.SftPredictor` (its ``model``,
    ``tokenizer``, ``stop_ids``, ``settings``, ``max_length`` and ``options``)."""

    model: Any
    tokenizer: Any
    stop_ids: list[int]
    settings: GenerationSettings
    max_length: int | None
    options: Any

    def chat(
        self,
        messages: list[dict[str, str]],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: list[str] | None = None,
        info: dict[str, Any] | None = None,
    ) -> Iterator[str]:
        """The assistant's reply to ``messages`` (``{"role", "content"}`` turns), in pieces.

        The conversation is read as a chat row at inference (roles system/user/assistant, a
        trailing assistant turn dropped, ``options.system`` added when there is no system turn),
        rendered exactly as ``__call__`` renders it, and generated with the run's stop tokens.
        ``None`` settings are the predictor's own (greedy unless configured); ``stop`` strings end
        the reply before them.  Invalid messages raise ``DataError`` here, before any generation.
        See :func:`stream_reply` for the pieces and for what ``info`` receives.
        """
        from nlptasks.plugin import DataError

        from .data import RowProblem, to_messages

        if not isinstance(messages, list):
            raise DataError("messages must be a list of {role, content} turns")
        try:
            conversation = to_messages(
                {"messages": messages},
                "chat",
                self.options.model_copy(update={"messages_column": "messages"}),
                need_answer=False,
            )
        except RowProblem as exc:
            raise DataError(f"messages: {exc}") from None
        own = self.settings
        settings = GenerationSettings(
            max_new_tokens=own.max_new_tokens if max_new_tokens is None else max_new_tokens,
            temperature=own.temperature if temperature is None else temperature,
            top_p=own.top_p if top_p is None else top_p,
        )
        return stream_reply(
            self.model,
            self.tokenizer,
            conversation,
            self.stop_ids,
            settings,
            max_length=self.max_length,
            stop=stop or (),
            info=info,
        )


def stream_reply(
    model: Any,
    tokenizer: Any,
    messages: list[dict[str, str]],
    stop_ids: list[int],
    settings: GenerationSettings,
    max_length: int | None = None,
    stop: Sequence[str] = (),
    info: dict[str, Any] | None = None,
) -> Iterator[str]:
    """Generate the reply to one conversation and yield it in pieces as the tokens come.

    The prompt is what :func:`generate` builds (same template, generation prompt, left cut to
    ``max_length``, eos = ``stop_ids``), and ``model.generate`` runs with the same settings on a
    helper thread, so the joined pieces of a greedy reply equal :func:`generate`'s answer.  One
    piece per generated token, possibly empty: text is held back while it may still change
    (trailing whitespace, which the final answer strips; an incomplete character; a possible
    start of a ``stop`` string).  Closing the generator stops the generation at the next token.

    ``info``, when given, receives ``prompt_tokens`` now, then ``completion_tokens`` (the tokens
    generated, an end-of-turn token included) and ``finish_reason`` (``"stop"``: an end-of-turn
    token or a ``stop`` string; ``"length"``: ``max_new_tokens`` reached) when the reply ends.
    """
    prompt = render(tokenizer, messages, generation_prompt=True)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if max_length is not None:
        ids = ids[-max_length:]
    info = {} if info is None else info
    info.update(prompt_tokens=len(ids), completion_tokens=0, finish_reason=None)
    return _pieces(model, tokenizer, ids, stop_ids, settings, [s for s in stop if s], info)


def _pieces(
    model: Any,
    tokenizer: Any,
    ids: list[int],
    stop_ids: list[int],
    settings: GenerationSettings,
    stop: list[str],
    info: dict[str, Any],
) -> Iterator[str]:
    import queue
    import threading

    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList
    from transformers.generation.streamers import BaseStreamer

    tokens: queue.Queue[list[int] | None] = queue.Queue()
    halt = threading.Event()
    failure: list[BaseException] = []

    class Streamer(BaseStreamer):
        prompt_seen = False

        def put(self, value: Any) -> None:
            if not self.prompt_seen:  # generate() first hands over the prompt
                self.prompt_seen = True
                return
            tokens.put(value.reshape(-1).tolist())

        def end(self) -> None:
            tokens.put(None)

    class Halt(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), halt.is_set(), dtype=torch.bool, device=input_ids.device)

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    device = next(model.parameters()).device

    def run() -> None:
        try:
            with torch.inference_mode():
                model.generate(
                    input_ids=torch.tensor([ids], dtype=torch.long, device=device),
                    attention_mask=torch.ones((1, len(ids)), dtype=torch.long, device=device),
                    eos_token_id=stop_ids,
                    pad_token_id=pad_id,
                    streamer=Streamer(),
                    stopping_criteria=StoppingCriteriaList([Halt()]),
                    **settings.kwargs(),
                )
        except BaseException as exc:  # handed to the consumer
            failure.append(exc)
        finally:
            tokens.put(None)

    was_training = model.training
    model.eval()
    thread = threading.Thread(target=run, name="nlptasks-sft-chat", daemon=True)
    thread.start()
    generated: list[int] = []
    sent = ""
    finish = "length"
    try:
        while finish == "length":
            step = tokens.get()
            if step is None:
                break
            info["completion_tokens"] += len(step)
            for token in step:
                if token in stop_ids:
                    finish = "stop"
                    break
                generated.append(token)
            text = tokenizer.decode(generated, skip_special_tokens=True).lstrip()
            hit = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if hit >= 0:
                text, finish = text[:hit], "stop"
            if finish == "stop":
                break
            ready = _stable(text, stop)
            piece = ready[len(sent) :] if ready.startswith(sent) else ""
            sent += piece
            yield piece
        halt.set()
        thread.join()
        if failure:
            raise failure[0]
        text = tokenizer.decode(generated, skip_special_tokens=True).strip()
        hit = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
        if hit >= 0:
            text, finish = text[:hit].rstrip(), "stop"
        info["finish_reason"] = finish
        if text.startswith(sent) and len(text) > len(sent):
            yield text[len(sent) :]
    finally:
        halt.set()
        thread.join()
        if was_training:
            model.train()


def _stable(text: str, stop: list[str]) -> str:
    """The part of a growing reply that more tokens cannot change: without trailing whitespace,
    an incomplete character (U+FFFD) or a suffix that may begin a stop string."""
    text = text.rstrip().rstrip("\ufffd").rstrip()
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                text = text[:-k].rstrip()
                break
    return text
