"""Tokenizers for the AR world model: a byte-level BPE trained on the training texts, or a
pretrained model's own tokenizer.

Byte-level BPE maps every byte to a symbol first, so any text (JSON, newlines, case,
unicode) encodes and decodes losslessly; no normalizer, no added prefix space. The trained
tokenizer is wrapped as a `transformers` fast tokenizer, so it saves into and loads from a
checkpoint directory (tokenizer.json, tokenizer_config.json) like any other:

    tok = train_tokenizer(texts, vocab_size=4096)
    tok.save_pretrained("ckpt/")
    tok = load_tokenizer("ckpt/")

Special tokens: `<pad>` (padding), `<eos>` (end of observation: appended to every target,
generation stops on it) and `<bos>` (reserved; nothing adds it automatically). Encoding
never inserts special tokens: callers build `prompt + target + eos` themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

PAD, EOS, BOS = "<pad>", "<eos>", "<bos>"
SPECIAL_TOKENS = [PAD, EOS, BOS]
DIGIT_SPLITS = ("", "all", "decimals")  # train_tokenizer's split_digits
# A digit of a decimal literal: one before the point (a point and a digit follow), or one
# of the first 12 after it (fixed-length look-behinds: Oniguruma allows no other kind).
_DECIMAL_DIGIT = r"\d(?=\d*\.\d)|" + "|".join(rf"(?<=\.\d{{{k}}})\d" for k in range(12))


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2, split_digits: str = ""
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of at most `vocab_size` tokens (special tokens included).

    `split_digits="all"` makes every digit its own token (no merges across digits), so a
    number is generated digit by digit: a multi-digit vocabulary spreads a value's
    probability over many tokens and greedy decoding then prefers a short number (0.3 for
    0.8345). `"decimals"` does so only for the digits of a decimal literal (`20.0`,
    `0.8345`: up to 12 decimals), and other digit runs (ids such as 67410, counts) merge as
    usual; `""` merges every digit run."""
    if split_digits not in DIGIT_SPLITS:
        raise ValueError(f"split_digits is one of {DIGIT_SPLITS}, got {split_digits!r}")
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size={vocab_size} cannot hold the 256 byte symbols and "
            f"{len(SPECIAL_TOKENS)} special tokens: use at least {256 + len(SPECIAL_TOKENS)}"
        )
    tok = Tokenizer(models.BPE())
    # use_regex splits words/digits/punctuation before merging, as GPT-2 does
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if split_digits:
        digits: pre_tokenizers.PreTokenizer = (
            pre_tokenizers.Digits(individual_digits=True)
            if split_digits == "all"
            else pre_tokenizers.Split(Regex(_DECIMAL_DIGIT), behavior="isolated")
        )
        tok.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return wrap_tokenizer(tok)


def wrap_tokenizer(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap a raw `tokenizers.Tokenizer` holding the special tokens as a transformers one."""
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=BOS,
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer saved in a checkpoint or a pretrained model directory (offline).

    A tokenizer without a pad token (most pretrained ones) pads with its eos token."""
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return ensure_pad(tok)


def ensure_pad(tok: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Give `tok` a pad token (its eos) when it has none; fail when it has no eos either."""
    if tok.eos_token_id is None:
        raise ValueError("the tokenizer has no eos token: set tokenizer.eos_token before training")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def encode(tok: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of `text`, without any special token added."""
    return list(tok(text, add_special_tokens=False)["input_ids"])


def token_counter(tok: PreTrainedTokenizerBase, cache: int = 4096) -> Callable[[str], int]:
    """How many tokens `tok` makes of a text (no special tokens): a Budget's `count`. The
    last `cache` texts' counts are kept: fitting a context to its budget counts the same
    block renderings many times, and a session's next step renders most of them again."""

    @functools.lru_cache(maxsize=cache)
    def count(text: str) -> int:
        return len(encode(tok, text))

    return count


def decode(tok: PreTrainedTokenizerBase, ids: list[int]) -> str:
    """Text of `ids`, dropping special tokens and keeping spaces exactly as encoded."""
    return str(tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False))
