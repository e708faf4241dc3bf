"""The GGUF tokeniser rebuilt with ``tokenizers``: round trips, special tokens, llama.cpp's
pre-tokeniser rules for SmolLM2 (digits split one by one, no BOS)."""

from __future__ import annotations

from typing import Any

import pytest

import lamina.model as lm

STRINGS = [
    "Hello world!",
    "  leading spaces,\ttabs\n\nand blank lines\n",
    "Numbers: 3.14159, 1,000,000 and 2024-06-01.",
    "café naïve façade — “quotes” 日本語のテキスト 🙂👍🏽",
    "don't you'll we've I'm they'd it's",
    "x = {'a': [1, 2, 3]}; print(f\"{x!r:>10}\")",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "",
]


@pytest.mark.parametrize("text", STRINGS)
def test_round_trip(model: Any, text: str) -> None:
    ids = model.tokenize(text)
    assert all(0 <= i < model.config.vocab_size for i in ids)
    assert model.detokenize(ids) == text


def test_chatml_markers_and_no_bos(model: Any) -> None:
    t = model.tokenizer
    assert (t.bos_id, t.eos_id, t.add_bos) == (1, 2, False)
    ids = model.tokenize("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2  # the markers are single control tokens, no BOS added
    assert model.tokenize("<|im_end|>") == [2]
    # written without the exact marker spelling they are ordinary text
    assert 2 not in model.tokenize("<|im_end>")


def test_digits_split_one_by_one(model: Any) -> None:
    ids = model.tokenize("12345")
    assert len(ids) == 5 and model.detokenize(ids[:1]) == "1"


def test_known_ids(model: Any) -> None:
    # ids produced by this tokeniser for SmolLM2's vocabulary (regression: BPE merges applied
    # in rank order, byte-level alphabet, " " + digit split as llama.cpp's smollm rules)
    assert model.tokenize("Hello world!") == [19556, 905, 17]
    assert model.tokenize("What is 12 + 7?") == [1780, 314, 216, 33, 34, 1232, 216, 39, 47]


def test_decode_rejects_out_of_vocab(model: Any) -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.detokenize([model.config.vocab_size])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.detokenize([-1])


def test_chat_template_single_user_message(model: Any) -> None:
    p = model.chat_prompt("Hi there")
    assert p.endswith("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
    assert p.startswith("<|im_start|>system\n")


def test_unknown_pre_tokenizer_is_named() -> None:
    meta = lm.TokenizerMetadata(
        model="gpt2",
        pre="no-such-pre",
        tokens=["a"],
        token_types=[1],
        merges=[],
        bos_id=None,
        eos_id=None,
        add_bos=False,
        chat_template=None,
    )
    with pytest.raises(lm.UnsupportedModel, match="no-such-pre"):
        lm.Tokenizer(meta)
