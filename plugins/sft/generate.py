"""Generation: batched, length-sorted, left-padded.  Inference and the training-time generation
metric both use :func:`generate`, so they see exactly the same prompts; :class:`ChatMixin` gives the
predictor ``chat`` (one conversation's reply streamed in pieces, :func:`stream_reply`), built the
same way."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from nlptasks.plugin import exact_multiple, length_batches

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
    end), and cut from the left to ``max_length`` tokens (the training length) when longer.  In a
    reduced precision each prompt is padded to a multiple of ``exact_multiple(model)`` tokens and
    batched only with prompts of that padded length, so a greedy reply does not depend on its
    batch-mates (:func:`nlptasks.plugin.exact_multiple`).
    """
    import torch

    prompts = [render(tokenizer, messages, generation_prompt=True) for messages in conversations]
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    if max_length is not None:
        encoded = [ids[-max_length:] for ids in encoded]
    multiple = exact_multiple(model)
    lengths = [len(ids) for ids in encoded]
    batches = length_batches(lengths, batch_size, cpu=False, multiple=multiple)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    outputs: list[str] = [""] * len(encoded)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        with torch.inference_mode():
            for batch in batches:
                width = max(len(encoded[i]) for i in batch)
                if multiple:
                    width = -(-width // multiple) * multiple
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
        return stream_reply(
            self.model,
            self.tokenizer,
            self._conversation(messages),
            self.stop_ids,
            self._settings(max_new_tokens, temperature, top_p),
            max_length=self.max_length,
            stop=stop or (),
            info=info,
        )

    def chat_batch(self, calls: Sequence[dict[str, Any]]) -> Iterator[tuple[int, str, Any]]:
        """Several conversations' replies generated together, streamed as ``(index, kind, value)``
        events: ``error`` (an invalid conversation, before anything is generated for it),
        ``ready``, then ``piece`` (text, possibly empty) and ``end``; see :class:`nlptasks.types.
        Predictor`.  Each call holds ``chat``'s arguments (``messages`` and optionally
        ``max_new_tokens``, ``temperature``, ``top_p``, ``stop``, ``info``) and ``cancelled``, a
        callable asked between tokens.  Calls with the same sampling settings share one left-padded
        ``model.generate`` (:func:`stream_batch`; in bf16 only prompts of one padded length,
        :func:`nlptasks.plugin.exact_multiple`): a greedy reply is the one ``chat`` gives alone."""
        from nlptasks.plugin import NlptasksError

        groups: dict[tuple[float, float, int], list[tuple[int, list[int], Reply, GenerationSettings]]] = {}
        multiple = exact_multiple(self.model)  # in bf16, prompts of one padded length share a generate
        for index, call in enumerate(calls):
            try:
                conversation = self._conversation(call["messages"])
            except NlptasksError as exc:
                yield index, "error", exc
                continue
            settings = self._settings(call.get("max_new_tokens"), call.get("temperature"), call.get("top_p"))
            ids = prompt_ids(self.tokenizer, conversation, self.max_length)
            stops = [s for s in (call.get("stop") or ()) if s]
            reply = Reply(stops, settings.max_new_tokens, len(ids), call.get("info"), call.get("cancelled"))
            key = (
                settings.temperature if settings.temperature > 0 else 0.0,
                settings.top_p if settings.temperature > 0 else 1.0,
                -(-len(ids) // multiple) if multiple else 0,
            )
            groups.setdefault(key, []).append((index, ids, reply, settings))
        for rows in groups.values():
            for index, *_ in rows:
                yield index, "ready", None
            events = stream_batch(
                self.model,
                self.tokenizer,
                [ids for _, ids, _, _ in rows],
                self.stop_ids,
                rows[0][3],
                [reply for _, _, reply, _ in rows],
            )
            try:
                for row, kind, value in events:
                    yield rows[row][0], kind, value
            finally:
                events.close()

    def _conversation(self, messages: Any) -> list[dict[str, str]]:
        """``messages`` read as a chat row at inference; a ``DataError`` naming what is wrong."""
        from nlptasks.plugin import DataError

        from .data import RowProblem, to_messages

        if not isinstance(messages, list):
            raise DataError("messages must be a list of {role, content} turns")
        try:
            return to_messages(
                {"messages": messages},
                "chat",
                self.options.model_copy(update={"messages_column": "messages"}),
                need_answer=False,
            )
        except RowProblem as exc:
            raise DataError(f"messages: {exc}") from None

    def _settings(
        self, max_new_tokens: int | None, temperature: float | None, top_p: float | None
    ) -> GenerationSettings:
        own = self.settings
        return GenerationSettings(
            max_new_tokens=own.max_new_tokens if max_new_tokens is None else max_new_tokens,
            temperature=own.temperature if temperature is None else temperature,
            top_p=own.top_p if top_p is None else top_p,
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
    ids = prompt_ids(tokenizer, messages, max_length)
    row = Reply([s for s in stop if s], settings.max_new_tokens, len(ids), info)
    return _one(stream_batch(model, tokenizer, [ids], stop_ids, settings, [row]))


def _one(events: Iterator[tuple[int, str, Any]]) -> Iterator[str]:
    """The pieces of a one-row :func:`stream_batch`; its error raised; closing it stops the generation."""
    try:
        for _, kind, value in events:
            if kind == "piece":
                yield value
            elif kind == "error":
                raise value
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


def prompt_ids(tokenizer: Any, messages: list[dict[str, str]], max_length: int | None) -> list[int]:
    """The token ids of a conversation's generation prompt, as :func:`generate` builds them."""
    prompt = render(tokenizer, messages, generation_prompt=True)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return ids[-max_length:] if max_length is not None else ids


@dataclass
class Reply:
    """One row of a generation streamed in pieces: its own ``stop`` strings, ``max_new_tokens``, the
    number of its prompt's tokens and ``info`` (see :func:`stream_reply`), and ``cancelled`` (asked
    between tokens: true stops it)."""

    stop: list[str]
    max_new_tokens: int
    prompt_tokens: int
    info: dict[str, Any] | None = None
    cancelled: Any = None  # Callable[[], bool] | None
    generated: list[int] = field(default_factory=list)
    sent: str = ""
    finish: str | None = None  # "stop" or "length" once ended

    def __post_init__(self) -> None:
        self.info = {} if self.info is None else self.info
        self.info.update(prompt_tokens=self.prompt_tokens, completion_tokens=0, finish_reason=None)

    def done(self) -> bool:
        return self.finish is not None or bool(self.cancelled and self.cancelled())

    def take(self, token: int, tokenizer: Any, stop_ids: list[int]) -> str:
        """Add one generated token; the piece of text it makes certain (may be empty)."""
        info = self.info
        assert info is not None
        info["completion_tokens"] += 1
        if token in stop_ids:
            self.finish = "stop"
            return ""
        self.generated.append(token)
        text = tokenizer.decode(self.generated, skip_special_tokens=True).lstrip()
        hit = _first_stop(text, self.stop)
        if hit >= 0:
            self.finish = "stop"
            return ""
        if info["completion_tokens"] >= self.max_new_tokens:
            self.finish = "length"
        ready = _stable(text, self.stop)
        piece = ready[len(self.sent) :] if ready.startswith(self.sent) else ""
        self.sent += piece
        return piece

    def last(self, tokenizer: Any) -> str:
        """The rest of the reply once it has ended (``info``'s ``finish_reason`` set)."""
        assert self.info is not None
        text = tokenizer.decode(self.generated, skip_special_tokens=True).strip()
        hit = _first_stop(text, self.stop)
        if hit >= 0:
            text, self.finish = text[:hit].rstrip(), "stop"
        self.info["finish_reason"] = self.finish or "length"
        return text[len(self.sent) :] if text.startswith(self.sent) and len(text) > len(self.sent) else ""


def _first_stop(text: str, stop: list[str]) -> int:
    return min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)


def stream_batch(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    stop_ids: list[int],
    settings: GenerationSettings,
    replies: list[Reply],
) -> Iterator[tuple[int, str, Any]]:
    """One ``model.generate`` over ``prompts`` (left-padded, as :func:`generate` batches them),
    streamed: events ``(row, "piece", text)`` per generated token of each running row (possibly
    empty), ``(row, "end", None)`` when a row's reply has ended (its end-of-turn token, a stop
    string, its own ``max_new_tokens``, or ``cancelled``), and ``(row, "error", exc)`` for every
    unfinished row if generation fails.  ``settings`` give the sampling (shared by the batch) and
    ``max_new_tokens`` is the longest row's; a row that has ended stops being computed (transformers'
    per-row stopping), the others go on.  Closing the iterator stops the generation."""
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
            if not self.prompt_seen:  # generate() first hands over the prompts
                self.prompt_seen = True
                return
            tokens.put(value.reshape(-1).tolist())

        def end(self) -> None:
            tokens.put(None)

    class Halt(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            stopped = [halt.is_set() or reply.done() for reply in replies]
            return torch.tensor(stopped, dtype=torch.bool, device=input_ids.device)

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    multiple = exact_multiple(model)  # in bf16: prompts of one padded length (chat_batch groups them so)
    if multiple:
        width = -(-width // multiple) * multiple
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, seq in enumerate(prompts):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    kwargs = {**settings.kwargs(), "max_new_tokens": max(r.max_new_tokens for r in replies)}

    def run() -> None:
        try:
            with torch.inference_mode():
                model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    eos_token_id=stop_ids,
                    pad_token_id=pad_id,
                    streamer=Streamer(),
                    stopping_criteria=StoppingCriteriaList([Halt()]),
                    **kwargs,
                )
        except BaseException as exc:  # handed to the consumer
            failure.append(exc)
        finally:
            tokens.put(None)

    was_training = model.training
    model.eval()
    thread = threading.Thread(target=run, name="nlptasks-sft-chat", daemon=True)
    thread.start()
    running = set(range(len(replies)))
    try:
        while running:
            step = tokens.get()
            if step is None:
                break
            for row in sorted(running):
                reply = replies[row]
                if reply.done():  # cancelled by its consumer
                    running.discard(row)
                    yield row, "end", None
                    continue
                yield row, "piece", reply.take(step[row], tokenizer, stop_ids)
                if reply.finish is not None:
                    running.discard(row)
                    rest = reply.last(tokenizer)
                    if rest:
                        yield row, "piece", rest
                    yield row, "end", None
        halt.set()
        thread.join()
        for row in sorted(running):  # the generation ended first (every row's tokens given)
            if failure:
                yield row, "error", failure[0]
                continue
            rest = replies[row].last(tokenizer)
            if rest:
                yield row, "piece", rest
            yield row, "end", None
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
