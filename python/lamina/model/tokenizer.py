"""The GGUF file's byte-level BPE tokeniser, rebuilt with ``tokenizers`` to give llama.cpp's ids.

llama.cpp splits text with a list of regular expressions chosen by ``tokenizer.ggml.pre``, then
applies the byte-level BPE merges; control and user-defined tokens (``<|im_start|>``) written in
the text are matched first (llama.cpp's ``parse_special``). The same pipeline is built here as a
``tokenizers.Tokenizer``: Split pre-tokenisers with llama.cpp's expressions, then ByteLevel
without its own regex, the merges as a BPE model, control tokens as special added tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInput
from .gguf_file import TokenizerMetadata, UnsupportedModel

__all__ = ["Tokenizer", "PRE_TOKENIZER_REGEXES"]

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: llama.cpp's split expressions per ``tokenizer.ggml.pre`` (llama-vocab.cpp), applied in order.
PRE_TOKENIZER_REGEXES: dict[str, tuple[str, ...]] = {
    **{k: (r"\p{N}", _GPT2) for k in ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone")},
    **{k: (_GPT2,) for k in ("gpt2", "mpt", "olmo", "jais")},
    **{k: (_LLAMA3,) for k in ("llama-bpe", "llama3")},
}

_CONTROL, _USER_DEFINED = 3, 4


class Tokenizer:
    """Text ↔ token ids for one GGUF model.

    Parameters
    ----------
    meta : TokenizerMetadata
        The file's tokeniser metadata.

    Raises
    ------
    UnsupportedModel
        Not a byte-level BPE tokeniser (``tokenizer.ggml.model != "gpt2"``) or a pre-tokeniser
        whose expressions are not in :data:`PRE_TOKENIZER_REGEXES`.

    Notes
    -----
    Thread-safe for concurrent :meth:`encode` / :meth:`decode` (``tokenizers`` releases no
    shared state between calls).
    """

    def __init__(self, meta: TokenizerMetadata) -> None:
        from tokenizers import Regex, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as HFTokenizer

        if meta.model != "gpt2":
            raise UnsupportedModel(
                f"tokeniser model {meta.model!r} is not supported; lamina.model reads byte-level BPE ('gpt2')"
            )
        regexes = PRE_TOKENIZER_REGEXES.get(meta.pre)
        if regexes is None:
            raise UnsupportedModel(
                f"pre-tokeniser {meta.pre!r} is not supported; known: {', '.join(sorted(PRE_TOKENIZER_REGEXES))}"
            )
        vocab = {t: i for i, t in enumerate(meta.tokens)}
        merges: list[tuple[str, str]] = []
        for m in meta.merges:
            a, sep, b = m.partition(" ")
            if not sep:
                raise UnsupportedModel(f"BPE merge {m!r} is not two space-separated symbols")
            merges.append((a, b))
        bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
        tok: Any = HFTokenizer(bpe)
        splits: list[Any] = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
        tok.decoder = decoders.ByteLevel()
        special = [t for t, ty in zip(meta.tokens, meta.token_types) if ty in (_CONTROL, _USER_DEFINED)]
        tok.add_special_tokens(special)
        self._tok = tok
        self._meta = meta
        self.vocab_size = len(meta.tokens)
        self.bos_id = meta.bos_id
        self.eos_id = meta.eos_id
        self.add_bos = meta.add_bos
        self.special_ids = frozenset(vocab[t] for t in special)

    def encode(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        """Token ids of ``text``; control tokens written in the text become their ids.

        Parameters
        ----------
        text : str
        add_bos : bool, optional
            Prepend BOS; default: what the file says (``tokenizer.ggml.add_bos_token``).

        Returns
        -------
        list of int
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        ids = [int(i) for i in self._tok.encode(text, add_special_tokens=False).ids]
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        return ids

    def decode(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        """Text of token ids (control tokens written out unless ``skip_special``).

        Raises
        ------
        InvalidInput
            An id outside ``[0, vocab_size)``.
        """
        out = [int(i) for i in ids]
        bad = [i for i in out if not 0 <= i < self.vocab_size]
        if bad:
            raise InvalidInput(f"token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")
        return str(self._tok.decode(out, skip_special_tokens=skip_special))

    def token(self, i: int) -> str:
        """The stored string of token ``i`` (byte-level alphabet)."""
        if not 0 <= i < self.vocab_size:
            raise InvalidInput(f"token id {i} is outside the vocabulary [0, {self.vocab_size})")
        return self._meta.tokens[i]
