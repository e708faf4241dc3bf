"""A turn's vector: its text and sentences embedded and summed, plus its speaker's name.

A conversational turn often carries several things ("Thanks! I went hiking with my dad last
weekend. How was your trip?"); one vector of the whole turn is pulled toward its pleasantries.
lamina therefore embeds a turn as its whole text together with each of its sentences of at least
:data:`MIN_WORDS` words and takes the L2-normalised sum u, so every statement of the turn has an
equal say in its direction. Who said it is part of what a turn is about (a question naming a
person should meet that person's turns), so the speaker's name is embedded on its own (once per
distinct name) and added with weight :data:`SPEAKER_WEIGHT`: the stored vector is the normalised
u + w·e(speaker) (a chat role such as "user" or "assistant" is no name: :data:`ROLES`). The
name's share is then the same for a short turn and a long one; writing the
name into the texts instead ("Ann: ...") gave short chatter turns most of the name's pull, so
that a question naming a person met that person's small talk before their statements (the
demo's supersession check fell from 1.0 to 0.71 with the hashing embedder; with w = 1 it stays
at 0.71, with w = 0.5 it is 0.96).

Measured on the LoCoMo development split with all-MiniLM-L6-v2 (README, "LoCoMo"). It costs
3.6 embedded texts per turn there (about 2.2x the embedding time of the text alone).
``MemoryConfig.turn_vectors = "text"`` embeds the plain text instead (one vector per turn).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_WORDS", "SPEAKER_WEIGHT", "ROLES", "sentences", "turn_texts", "turn_vectors", "is_name"]

Vec = npt.NDArray[np.float32]

#: Sentences shorter than this (in words) carry no statement of their own ("Wow!", "Thanks, Mel!").
MIN_WORDS = 3
#: Weight w of the speaker's name vector against the turn's normalised content (chosen among
#: 0 / 0.3 / 0.5 / 0.8 / 1 / 1.3: README, "LoCoMo").
SPEAKER_WEIGHT = 0.5
#: Chat roles (compared case-insensitively): a speaker labelled by its role has no name to add —
#: no question asks about "the user" as a person, and the same label on every turn would only
#: shift every score by one constant.
ROLES = frozenset({"user", "assistant", "system", "human", "ai", "bot", "agent", "tool", "model"})
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` with at least :data:`MIN_WORDS` words (split after . ! ?)."""
    return [s for s in _SENTENCE_END.split(text.strip()) if len(s.split()) >= MIN_WORDS]


def is_name(speaker: str | None) -> bool:
    """Whether a turn's speaker is a name whose vector joins the turn's (not empty, not a role)."""
    return bool(speaker and speaker.strip() and speaker.strip().lower() not in ROLES)


def turn_texts(text: str) -> list[str]:
    """What is embedded for a turn's content: the whole text first, then its :func:`sentences`
    when the turn has more than the whole itself to say."""
    parts = sentences(text)
    if not parts or (len(parts) == 1 and parts[0] == text):
        return [text]
    return [text, *parts]


def _normalised(S: Vec, fallback: Vec) -> Vec:
    """Rows of ``S`` over their norms; a zero row (parts that cancel) takes ``fallback``'s row."""
    norms = np.linalg.norm(S, axis=1, keepdims=True)
    bad = norms[:, 0] <= 1e-12
    if bad.any():
        S[bad] = fallback[bad]
        norms[bad] = np.linalg.norm(S[bad], axis=1, keepdims=True)
    return np.asarray(S / np.maximum(norms, 1e-30), dtype=np.float32)


def turn_vectors(
    embed: Callable[[list[str]], Vec],
    turns: Sequence[tuple[str, str | None]],
    *,
    speaker_weight: float = SPEAKER_WEIGHT,
) -> Vec:
    """Vectors of turns ``(text, speaker)``: each the normalised u + w·e(speaker), u the
    normalised sum of the embeddings of its :func:`turn_texts` (a speaker that is no name —
    none, or a chat role, :func:`is_name` —: u alone). All texts and distinct names are
    embedded in one call.

    Returns
    -------
    ndarray, shape (len(turns), dim), float32, rows of unit norm.
    """
    texts: list[str] = []
    starts = np.empty(len(turns), dtype=np.int64)
    for i, (text, _) in enumerate(turns):
        starts[i] = len(texts)
        texts.extend(turn_texts(text))
    names = sorted({sp for _, sp in turns if sp is not None and is_name(sp)}) if speaker_weight else []
    X = np.asarray(embed(texts + names), dtype=np.float32)
    if not len(turns):
        return np.ascontiguousarray(X[:0])
    whole = X[starts]
    U = _normalised(np.add.reduceat(X[: len(texts)], starts, axis=0), whole)
    if names:
        row = {n: len(texts) + j for j, n in enumerate(names)}
        who = np.array([row.get(sp, -1) if sp is not None else -1 for _, sp in turns], dtype=np.int64)
        has = who >= 0
        U[has] += np.float32(speaker_weight) * X[who[has]]
        U = _normalised(U, whole)
    return np.ascontiguousarray(U, dtype=np.float32)
