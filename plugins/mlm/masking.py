"""Which tokens the ``mlm`` task hides, and with what; and the blocks it hides them in.

**Span masking** (``options.masking = "span"``, the default; SpanBERT, Joshi et al. 2020): spans
of consecutive tokens whose lengths follow a geometric distribution (p = 0.2, cut at
``options.span_max``, 10 by default: 3.8 tokens on average), each starting at a random maskable
token and never crossing ``[CLS]``/``[SEP]``, until ``options.mask_probability`` of the block's
tokens are hidden.  On a character vocabulary (the usual one for Chinese here) a span covers a
word or a phrase, so the model cannot guess a character from the rest of its word: what
whole-word masking gives BERT-wwm, without a word segmenter (none is needed, or shipped).
**Token masking** (``"token"``): each token on its own (BERT).  Of the hidden tokens 80% become
the mask token, 10% a random token, 10% stay as they are (BERT), so the encoder cannot learn that
only ``[MASK]`` positions matter.  Which of the two is better for Chinese is measured in
docs/tasks/mlm.md.

Training blocks are masked anew in every epoch: a block's masks are drawn from the recipe's seed,
the epoch and the block's tokens, so they do not depend on the order of batches, on which process
of ``--nproc N`` collates the block, or on where a run was stopped and resumed (``--resume``
replays the uninterrupted run's masks).  Validation and test blocks are masked once, with the
recipe's seed, so their loss and accuracy compare across epochs and runs.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

__all__ = ["GEOMETRIC_P", "MaskingCollator", "blocks", "mask_block"]

GEOMETRIC_P = 0.2
"""SpanBERT's span-length distribution: ``P(length = k) = p (1 - p)^(k - 1)``."""


def blocks(texts: Iterable[list[int]], start: int, end: int, max_length: int, concatenate: bool) -> list[list[int]]:
    """Token blocks of at most ``max_length`` ids, each beginning with ``start`` (``[CLS]``).

    ``concatenate``: the texts are written one after the other, each followed by ``end``
    (``[SEP]``), and cut into full blocks (short texts fill a block instead of padding it; a long
    text continues in the next block).  Otherwise each text is a block ``[CLS] text [SEP]`` of its
    own, a text longer than a block cut into several.  Nothing is dropped."""
    out: list[list[int]] = []
    if concatenate:
        room = max_length - 1
        current: list[int] = []
        for ids in texts:
            for token in [*ids, end]:
                current.append(token)
                if len(current) == room:
                    out.append([start, *current])
                    current = []
        if current:
            out.append([start, *current])
        return out
    room = max_length - 2
    for ids in texts:
        for i in range(0, max(len(ids), 1), room):
            out.append([start, *ids[i : i + room], end])
    return out


def mask_block(
    ids: list[int],
    special: set[int],
    rng: Any,
    probability: float,
    spans: bool,
    span_max: int,
    mask_id: int,
    vocab_size: int,
) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)``: ``ids`` with about ``probability`` of its non-special tokens
    hidden (at least one), and the labels (the hidden tokens' ids, ``-100`` elsewhere).

    :param rng: a ``numpy.random.Generator``."""
    import numpy as np

    tokens = np.asarray(ids, dtype=np.int64)
    maskable = ~np.isin(tokens, list(special))
    candidates = np.flatnonzero(maskable)
    chosen = np.zeros(len(tokens), dtype=bool)
    if len(candidates):
        budget = max(1, round(probability * len(candidates)))
        if not spans:
            chosen[rng.choice(candidates, budget, replace=False)] = True
        else:
            count, tries = 0, 0
            while count < budget and tries < 20 * budget:
                tries += 1
                length = min(int(rng.geometric(GEOMETRIC_P)), span_max, budget - count)
                pos = int(candidates[rng.integers(len(candidates))])
                while length > 0 and pos < len(tokens) and maskable[pos]:
                    if not chosen[pos]:
                        chosen[pos] = True
                        count += 1
                        length -= 1
                    pos += 1
    labels = np.where(chosen, tokens, -100)
    draw = rng.random(len(tokens))
    inputs = tokens.copy()
    inputs[chosen & (draw < 0.8)] = mask_id
    swap = chosen & (draw >= 0.8) & (draw < 0.9)
    inputs[swap] = rng.integers(0, vocab_size, int(swap.sum()))
    return inputs.tolist(), labels.tolist()


def _fingerprint(ids: Any) -> int:
    """A number that identifies a block by its tokens (its masks' seed, with the epoch's)."""
    import numpy as np

    return zlib.crc32(np.asarray(ids, dtype=np.int64).tobytes())


class MaskingCollator:
    """Pads a batch of blocks (``input_ids``; ``labels`` when masked already; an attention mask and
    segment ids, which it makes from the lengths) and masks the training blocks (those without
    ``labels``) anew.

    :param tokenizer: the run's tokenizer (its pad, mask and special tokens).
    :param options: the task's options (``masking``, ``mask_probability``, ``span_max``).
    :param seed: the recipe's seed.
    :param pad_to: pad every batch to this length (``train.padding = "max_length"``), else to
        its longest block.

    ``epoch`` is the training epoch being collated (0, 1, ...): the Trainer's callback
    :meth:`callback` keeps it up to date.
    """

    def __init__(self, tokenizer: Any, options: Any, vocab_size: int, seed: int, pad_to: int | None = None) -> None:
        self.pad_id = tokenizer.pad_token_id
        self.mask_id = tokenizer.mask_token_id
        self.special = set(tokenizer.all_special_ids)
        self.options = options
        self.vocab_size = vocab_size
        self.seed = seed
        self.pad_to = pad_to
        self.epoch = 0

    def mask(self, ids: list[int], rng: Any) -> tuple[list[int], list[int]]:
        """``(input_ids, labels)`` of one block masked as the options say (:func:`mask_block`)."""
        o = self.options
        return mask_block(
            ids, self.special, rng, o.mask_probability, o.masking == "span", o.span_max, self.mask_id, self.vocab_size
        )

    def callback(self) -> Any:
        """A ``TrainerCallback`` that tells this collator each epoch as it begins (a resumed epoch too)."""
        from transformers import TrainerCallback

        collator = self

        class Epochs(TrainerCallback):
            def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
                collator.epoch = int(state.epoch + 1e-6)  # a resumed run's state.epoch is e.g. 1.9
                return control

        return Epochs()

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import numpy as np
        import torch

        segments = "token_type_ids" in features[0]
        if "labels" not in features[0]:  # training blocks: new masks every epoch
            features = [
                dict(
                    zip(
                        ("input_ids", "labels"),
                        self.mask(
                            list(f["input_ids"]),
                            np.random.default_rng([self.seed, self.epoch, _fingerprint(f["input_ids"])]),
                        ),
                        strict=True,
                    )
                )
                for f in features
            ]
        width = self.pad_to or max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(features), width), -100, dtype=torch.long)
        attention = torch.zeros((len(features), width), dtype=torch.long)
        for i, f in enumerate(features):
            n = len(f["input_ids"])
            ids[i, :n] = torch.as_tensor(f["input_ids"])
            labels[i, :n] = torch.as_tensor(f["labels"])
            attention[i, :n] = 1
        batch = {"input_ids": ids, "attention_mask": attention, "labels": labels}
        if segments:  # one segment: zeros
            batch["token_type_ids"] = torch.zeros_like(ids)
        return batch
