"""The trained byte-level BPE: lossless on JSON text, and a save/load round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simworld.worldmodel.tokenizer import EOS, PAD, decode, encode, load_tokenizer, train_tokenizer

TEXTS = [
    json.dumps({"path": "/Home/Alex", "items": ["A.txt", "b.TXT"], "n": 12}),
    json.dumps({"error": "No such file: 'Log.txt'\nTry again"}, indent=2),
    "  leading spaces, Tabs\tand\nnewlines\r\n, unicode: Ünïcode 日本 ✓",
] * 20


def test_round_trip_through_a_checkpoint_directory(tmp_path: Path) -> None:
    tok = train_tokenizer(TEXTS, vocab_size=400)
    tok.save_pretrained(str(tmp_path))
    assert (tmp_path / "tokenizer.json").is_file()
    assert (tmp_path / "tokenizer_config.json").is_file()
    loaded = load_tokenizer(tmp_path)
    assert loaded.pad_token == PAD and loaded.eos_token == EOS
    for text in [*TEXTS[:3], 'unseen Words\n\n{"K": [1, 2]}  ']:
        ids = encode(tok, text)
        assert encode(loaded, text) == ids
        assert decode(loaded, ids) == text


def test_special_tokens_are_single_ids_and_never_added_by_encode() -> None:
    tok = train_tokenizer(TEXTS, vocab_size=400)
    assert tok.convert_tokens_to_ids([PAD, EOS]) == [tok.pad_token_id, tok.eos_token_id]
    assert tok.eos_token_id not in encode(tok, TEXTS[0])
    assert len(tok) <= 400


def test_too_small_a_vocabulary_says_the_minimum() -> None:
    with pytest.raises(ValueError, match="at least 259"):
        train_tokenizer(TEXTS, vocab_size=100)


def test_split_digits_gives_every_digit_its_own_token_and_stays_lossless(tmp_path: Path) -> None:
    metrics = [json.dumps({"cv_mean": 0.6421 + i / 997, "cv_std": 0.0225, "folds": 5})
               for i in range(40)]  # fmt: skip
    text = '{"cv_mean":0.8345,"n":120, "x": "a12"}'
    merged = train_tokenizer(TEXTS + metrics, vocab_size=400)
    assert any(len(t) > 1 and t.isdigit() for t in merged.tokenize(text))  # the default merges
    tok = train_tokenizer(TEXTS + metrics, vocab_size=400, split_digits="all")
    tokens = tok.tokenize(text)
    assert [t for t in tokens if any(c.isdigit() for c in t)] == list("0834512012")
    tok.save_pretrained(str(tmp_path))
    loaded = load_tokenizer(tmp_path)
    for sample in (text, *TEXTS[:3]):
        assert decode(loaded, encode(loaded, sample)) == sample


def test_decimal_split_gives_the_digits_of_decimal_literals_a_token_each() -> None:
    ids = [json.dumps({"message_id": 67410 + i, "fuelLevel": 20.5 + i}) for i in range(40)]
    tok = train_tokenizer(TEXTS + ids, vocab_size=400, split_digits="decimals")
    text = '{"fuelLevel": 20.25, "new_id": 67410, "card": "391310425148", "v": 0.8345}'
    digit_tokens = [t.lstrip("Ġ") for t in tok.tokenize(text) if any(c.isdigit() for c in t)]
    # 20.25 and 0.8345 digit by digit; the integer and the digit string as merged runs
    assert digit_tokens[:4] == list("2025") and digit_tokens[-5:] == list("08345")
    assert any(len(t) > 1 for t in digit_tokens[4:-5])
    assert "".join(digit_tokens[4:-5]) == "67410391310425148"
    assert decode(tok, encode(tok, text)) == text
    with pytest.raises(ValueError, match="split_digits is one of"):
        train_tokenizer(TEXTS, vocab_size=400, split_digits="some")
