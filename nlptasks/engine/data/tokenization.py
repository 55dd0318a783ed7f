"""Tokenizers: a pretrained one, or a vocabulary built from the training texts ("from scratch").

From-scratch tokenizers are built with the ``tokenizers`` library and wrapped in
``transformers.PreTrainedTokenizerFast``, so they save as ``tokenizer.json`` and load back with
plain ``AutoTokenizer.from_pretrained``.  (``BertTokenizer(vocab_file=...)`` silently ignores the
file in transformers 5: see FACTS.md.  We check the built vocabulary size and the ``[UNK]`` rate.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nlptasks.errors import NlptasksError, first_line

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from nlptasks.context import RunContext
    from nlptasks.recipe import ScratchConfig

__all__ = [
    "DECODER_SPECIALS",
    "SPECIALS",
    "build_tokenizer",
    "check_tokenizer",
    "get_tokenizer",
    "load_pretrained_tokenizer",
]

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Decoder (causal LM) vocabularies: a pad, an unknown (unused by byte-level BPE), an end-of-text
# and the two chat-turn markers of the ChatML template (so a from-scratch model can use it).
DECODER_SPECIALS = ["<|pad|>", "<|unk|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def get_tokenizer(
    ctx: RunContext, corpus: Iterable[str] | None = None, style: str = "encoder"
) -> PreTrainedTokenizerBase:
    """The run's tokenizer, made once and kept in ``ctx.tokenizer``.

    :param corpus: training texts; needed for from-scratch models (the vocabulary is built from
        them), ignored for pretrained ones.
    :param style: for from-scratch vocabularies: ``"encoder"`` (BERT-style ``[CLS] a [SEP]``
        framing) or ``"decoder"`` (causal LMs: no framing, ``<|endoftext|>`` as end of sequence,
        ChatML turn markers, spaces and newlines kept; needs ``model.scratch.tokenizer = "bpe"``).
    """
    if ctx.tokenizer is not None:
        return ctx.tokenizer
    model = ctx.recipe.model
    if model.name_or_path:
        tokenizer = load_pretrained_tokenizer(model.name_or_path, model.revision, model.trust_remote_code)
    else:
        if corpus is None:
            raise NlptasksError("a from-scratch model needs the training texts to build its vocabulary")
        assert model.scratch is not None
        if style == "decoder" and model.scratch.tokenizer != "bpe":
            from nlptasks.errors import Problem, RecipeError

            raise RecipeError(
                "recipe",
                [
                    Problem(
                        "model.scratch.tokenizer",
                        f"{model.scratch.tokenizer!r} drops spaces and newlines, which a text generator must "
                        "reproduce; use 'bpe' (byte-level) for this task",
                    )
                ],
            )
        tokenizer = build_tokenizer(list(corpus), model.scratch, model.max_length, style=style)
        ctx.log.info(
            "built a %s vocabulary of %d tokens from the training texts",
            model.scratch.tokenizer,
            len(tokenizer),
        )
    tokenizer.model_max_length = model.max_length
    ctx.tokenizer = tokenizer
    return tokenizer


def load_pretrained_tokenizer(name: str, revision: str | None = None, trust_remote_code: bool = False) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - offline, typo, private repo
        first = first_line(exc)
        raise NlptasksError(
            f"model.name_or_path: cannot load a tokenizer from {name!r}: {first}",
            hint="A hub id needs internet (or a filled cache); a folder needs tokenizer files. "
            "Offline, use [model.scratch] instead (see recipes/cls.toml).",
        ) from None


def _char_vocab(texts: list[str], cfg: ScratchConfig) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for text in texts:
        if cfg.lowercase:
            text = text.lower()
        counts.update("".join(text.split()))
    kept = [ch for ch, n in counts.most_common() if n >= cfg.min_frequency]
    kept = kept[: max(0, cfg.vocab_size - len(SPECIALS))]
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in sorted(kept, key=lambda c: (-counts[c], c)):
        vocab[ch] = len(vocab)
    return vocab


def build_tokenizer(texts: list[str], cfg: ScratchConfig, max_length: int, style: str = "encoder") -> Any:
    """Build a tokenizer from ``texts``: BERT-style (``[CLS] a [SEP] b [SEP]``) for
    ``style="encoder"``, GPT-style (byte-level, no framing) for ``style="decoder"``."""
    if style == "decoder":
        return _build_decoder_tokenizer(texts, cfg, max_length)
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        raise NlptasksError("cannot build a vocabulary: the training texts are empty")
    norm = [normalizers.NFC()]
    if cfg.lowercase:
        norm.append(normalizers.Lowercase())
    if cfg.tokenizer == "char":
        texts = [normalizers.NFC().normalize_str(t) for t in texts]
        vocab = _char_vocab(texts, cfg)
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
        tok.normalizer = normalizers.Sequence(norm)
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex("."), behavior="isolated")]
        )
        tok.decoder = decoders.Fuse()
        expected = len(vocab)
    elif cfg.tokenizer == "wordpiece":
        tok = _wordpiece(texts, cfg)
        expected = tok.get_vocab_size()
    else:  # bpe, byte level: no [UNK] ever
        tok = _byte_level_bpe(texts, cfg, SPECIALS, norm, prefix_space=True)
        expected = tok.get_vocab_size()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_length,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )
    check_tokenizer(wrapped, expected, texts[:200])
    return wrapped


def _wordpiece(texts: list[str], cfg: ScratchConfig) -> Any:
    """A WordPiece ``tokenizers.Tokenizer`` trained on ``texts``, the same from the same texts every time.

    tokenizers' trainer numbers the continuing pieces (``##a``) in hash-map order, and breaks ties
    between equally frequent merges by those numbers, so two builds differ (huggingface/tokenizers
    #1794).  Here every continuing piece the texts can need is numbered first, in sorted order (as
    a special token of the training run only); the tokenizer is then rebuilt from the vocabulary,
    with the real special tokens alone."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    normalizer = normalizers.BertNormalizer(lowercase=cfg.lowercase, handle_chinese_chars=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    inner: set[str] = set()
    for text in texts:
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)):
            inner.update(word[1:])
    pieces = sorted(f"##{ch}" for ch in inner)
    trained = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    trained.normalizer, trained.pre_tokenizer = normalizer, pre_tokenizer
    trainer = trainers.WordPieceTrainer(
        vocab_size=cfg.vocab_size + len(pieces),  # the pieces count once in the vocabulary, not twice
        min_frequency=cfg.min_frequency,
        special_tokens=SPECIALS + pieces,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    trained.train_from_iterator(texts, trainer=trainer)
    vocab = dict(sorted(trained.get_vocab().items(), key=lambda kv: kv[1]))
    if len(vocab) > cfg.vocab_size:  # the pieces were budgeted apart: keep the first vocab_size entries
        vocab = dict(list(vocab.items())[: cfg.vocab_size])
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(SPECIALS)
    return tok


def _byte_level_bpe(
    texts: list[str], cfg: ScratchConfig, specials: list[str], norm: list[Any], prefix_space: bool
) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts`` (no unknown token, ever)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _build_decoder_tokenizer(texts: list[str], cfg: ScratchConfig, max_length: int) -> Any:
    """Byte-level BPE for causal LMs: every string round-trips (spaces, newlines, any script)."""
    from tokenizers import normalizers
    from transformers import PreTrainedTokenizerFast

    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        raise NlptasksError("cannot build a vocabulary: the training texts are empty")
    norm = [normalizers.NFC(), *([normalizers.Lowercase()] if cfg.lowercase else [])]
    # No prefix space: a prompt template's text must tokenize exactly as written.
    tok = _byte_level_bpe(texts, cfg, DECODER_SPECIALS, norm, prefix_space=False)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<|unk|>",
        pad_token="<|pad|>",
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=max_length,
        model_input_names=["input_ids", "attention_mask"],
    )
    check_tokenizer(wrapped, tok.get_vocab_size(), texts[:200])
    sample = texts[0]
    if wrapped.decode(wrapped(sample, add_special_tokens=False)["input_ids"]) != normalizers.NFC().normalize_str(
        sample.lower() if cfg.lowercase else sample
    ):
        raise NlptasksError("internal error: the built byte-level tokenizer does not round-trip a training text")
    return wrapped


def check_tokenizer(tokenizer: Any, expected_size: int, sample: list[str]) -> float:
    """Fail if the wrapped tokenizer lost its vocabulary; return the ``[UNK]`` rate on ``sample``."""
    if len(tokenizer) != expected_size:
        raise NlptasksError(
            f"internal error: built a vocabulary of {expected_size} tokens but the tokenizer has {len(tokenizer)}"
        )
    unk = tokenizer.unk_token_id
    total = unknown = 0
    for ids in tokenizer(sample, add_special_tokens=False, verbose=False)["input_ids"]:
        total += len(ids)
        unknown += sum(1 for i in ids if i == unk)
    rate = unknown / total if total else 0.0
    if rate > 0.2:
        raise NlptasksError(f"internal error: {rate:.0%} of the training tokens are [UNK] with the built vocabulary")
    return rate
