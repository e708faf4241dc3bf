"""The text side of a model: its tokenizer, end-of-turn tokens and chat-template prompts.

:class:`ChatPrompts` is what :class:`lamina.model.Model` knows of text before any forward:
token ids of a string, the prompt of a user message or a conversation under the GGUF file's
chat template (:mod:`lamina.model.chat_template`), and a context / question prompt split where
the question starts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from ..errors import InvalidInput
from .chat_template import render_messages
from .generate import PromptParts
from .gguf_file import GGUFModelFile
from .press import REPEAT_INSTRUCTION
from .tokenizer import Tokenizer

__all__ = ["ChatPrompts", "QUESTION_SEPARATOR"]

#: Separator between a context and its question inside the one user message.
QUESTION_SEPARATOR = "\n\n"

#: Control tokens that end an assistant turn when the tokenizer marks them special.
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>")


class ChatPrompts:
    """Token ids and chat-template prompts of one GGUF file.

    Parameters
    ----------
    file : GGUFModelFile
        The opened file (:func:`lamina.model.read_gguf`).

    Attributes
    ----------
    tokenizer : Tokenizer
    eos_ids : frozenset of int
        The file's EOS id and the end-of-turn control tokens (:data:`END_OF_TURN`) it has.

    Notes
    -----
    Thread-safe: read-only after construction.
    """

    def __init__(self, file: GGUFModelFile) -> None:
        self._file = file
        self.tokenizer = Tokenizer(file.tokenizer)
        eos = {i for i in (file.tokenizer.eos_id,) if i is not None}
        for name in END_OF_TURN:
            if name in file.tokenizer.tokens:
                i = file.tokenizer.tokens.index(name)
                if i in self.tokenizer.special_ids:
                    eos.add(i)
        self.eos_ids = frozenset(eos)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without a BOS (a continuation of a prompt)."""
        return self.tokenizer.encode(text, add_bos=False)

    @functools.cached_property
    def repeat_instruction(self) -> list[int]:
        """Token ids (no BOS) of the instruction KVzip's reconstruction pass runs before the
        repeated context (:data:`lamina.model.press.REPEAT_INSTRUCTION`)."""
        return self.tokenizer.encode(REPEAT_INSTRUCTION, add_bos=False)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``, with the BOS the model expects (none for SmolLM2); control
        tokens written in the text (``<|im_start|>``) become their ids."""
        return self.tokenizer.encode(text)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of token ids (control tokens written out)."""
        return self.tokenizer.decode(ids)

    def chat_prompt(self, message: str) -> str:
        """The prompt text of one user message under the model's chat template."""
        return self.chat_messages_prompt([{"role": "user", "content": message}])

    def chat_messages_prompt(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The prompt text of a conversation (system/user/assistant messages, in order) under
        the model's chat template, ending with the opening of the assistant's turn."""
        t = self._file.tokenizer
        bos = t.tokens[t.bos_id] if t.bos_id is not None else ""
        eos = t.tokens[t.eos_id] if t.eos_id is not None else ""
        return render_messages(t.chat_template, messages, bos_token=bos, eos_token=eos)

    def prompt_parts(self, prompt: str, question: str | None = None) -> PromptParts:
        """Token ids of ``prompt`` (and ``question``) as one user message under the chat
        template; with a question, the ids are split where the question starts."""
        if not isinstance(prompt, str) or (question is not None and not isinstance(question, str)):
            raise TypeError("prompt and question must be str")
        if not prompt.strip() or (question is not None and not question.strip()):
            raise InvalidInput("prompt (and question, when given) must be non-empty text")
        if question is None:
            return PromptParts(context=self.tokenize(self.chat_prompt(prompt)), suffix=[])
        rendered = self.chat_prompt(prompt + QUESTION_SEPARATOR + question)
        cut = rendered.find(prompt) + len(prompt)
        return PromptParts(context=self.tokenize(rendered[:cut]), suffix=self.encode(rendered[cut:]))
