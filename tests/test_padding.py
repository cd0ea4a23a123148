"""Persona padding: the pure search here; on a real vLLM server in test_padding_server.py."""

import pytest

from app.stages.padding import PaddingError, pad_to_block


def words(text: str) -> int:
    """A stand-in tokenizer: a word a token, plus a 5-token chat-template frame."""
    return len(text.split()) + 5


def merging(text: str) -> int:
    """Worse: " ." pairs merge into one token, so growth is uneven."""
    return words(text.replace(" . .", " ..")) if " . ." in text else words(text)


@pytest.mark.parametrize("count", [words, merging], ids=["plain", "merging"])
@pytest.mark.parametrize("block", [16, 128, 544])
def test_padded_to_exact_multiple(count, block):
    persona = "You are An, a spoken assistant. " * 7
    padded = pad_to_block(persona, count, block)
    assert padded.tokens % block == 0 and count(padded.text) == padded.tokens
    assert padded.text.startswith(persona)
    assert padded.original_tokens == count(persona)
    assert 0 < padded.tokens - padded.original_tokens <= block


def test_already_aligned_is_untouched():
    persona = " ".join(["w"] * 11)  # 11 + 5 = 16 tokens
    padded = pad_to_block(persona, words, 16)
    assert padded.text == persona and padded.tokens == 16


def test_impossible_padding_is_an_error():
    with pytest.raises(PaddingError):
        pad_to_block("x", lambda t: 3 if t == "x" else 10 ** 6, 16)
