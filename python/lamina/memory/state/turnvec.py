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

``MemoryConfig.turn_vectors = "late"`` computes the same sum from one encoder pass per turn
("late chunking", :meth:`lamina.embedders.encoder.SentenceEncoder.embed_spans`): the turn is
encoded once and its token states are pooled over each sentence's characters, so a sentence
vector is read in the context of its turn and a turn costs one embedded text (a turn longer
than the encoder's window: one pass per window) instead of 1 + its sentences. With an embedder
that has no ``embed_spans`` (the hashing embedder) it is the same as "sentences". Measured with
MiniLM (docs/evaluation/ingest.md): ingest 0.8x the time of embedding the turns once on LoCoMo
(2.6x with "sentences"), but evidence recall 0.9 / 1.3 points lower at 256 / 1,024 tokens on
LoCoMo and lower on a LongMemEval sample, a pooled sentence leaning toward its turn: not the default.

``MemoryConfig.turn_vectors = "parts"`` drops the whole text of a turn that has sentences of its
own: its content vector is the normalised sum of those sentences' vectors, so every word is read
about once. Measured with MiniLM (docs/evaluation/ingest.md): ingest 1.05x / 1.20x the time of
embedding the turns once on LoCoMo / LongMemEval (2.4x with "sentences"), evidence recall 0.5 /
0.7 points lower at 256 / 1,024 tokens on LoCoMo; on LongMemEval higher at 1,024 tokens and, with
the fill's value per token, lower at 4,096 with MiniLM (92.2 / 96.7 % against 90.5 / 97.6 %):
the option for ingest-bound deployments, not the default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from ...embedders.embedder import Span, SpanEmbedder

__all__ = [
    "MIN_WORDS",
    "SPEAKER_WEIGHT",
    "ROLES",
    "sentences",
    "sentence_spans",
    "turn_texts",
    "turn_vectors",
    "is_name",
]

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


def sentence_spans(text: str) -> list[Span]:
    """Character ranges ``[start, end)`` in ``text`` of its :func:`sentences`, in order."""
    body = text.strip()
    off = text.index(body) if body else 0
    out: list[Span] = []
    pos = 0
    for m in _SENTENCE_END.finditer(body):
        out.append((off + pos, off + m.start()))
        pos = m.end()
    out.append((off + pos, off + len(body)))
    return [(a, b) for a, b in out if len(text[a:b].split()) >= MIN_WORDS]


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` with at least :data:`MIN_WORDS` words (split after . ! ?)."""
    return [text[a:b] for a, b in sentence_spans(text)]


def is_name(speaker: str | None) -> bool:
    """Whether a turn's speaker is a name whose vector joins the turn's (not empty, not a role)."""
    return bool(speaker and speaker.strip() and speaker.strip().lower() not in ROLES)


def _parts(text: str) -> list[Span]:
    """The sentence spans that join a turn's whole text in its vector: none when the turn has
    no more to say than the whole itself (no sentence, or one sentence that is the text)."""
    spans = sentence_spans(text)
    if not spans or (len(spans) == 1 and text[spans[0][0] : spans[0][1]] == text):
        return []
    return spans


def turn_texts(text: str, *, embed_whole: bool = True) -> list[str]:
    """What is embedded for a turn's content: the whole text first, then its :func:`sentences`
    when the turn has more than the whole itself to say; without ``whole``, those sentences
    alone (the text itself when it has none to add): ``embed_whole=False``."""
    parts = [text[a:b] for a, b in _parts(text)]
    if not embed_whole and parts:
        return parts
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
    late: SpanEmbedder | None = None,
    embed_whole: bool = True,
) -> Vec:
    """Vectors of turns ``(text, speaker)``: each the normalised u + w·e(speaker), u the
    normalised sum of the vectors of its :func:`turn_texts` (a speaker that is no name —
    none, or a chat role, :func:`is_name` —: u alone). Each distinct name is embedded once,
    through ``embed`` (whose cache serves it to every later call).

    Without ``late`` every turn text and sentence is embedded as a text of its own, all in one
    call of ``embed``; without ``embed_whole`` (``turn_vectors="parts"``) a turn with sentences to add
    is their sum alone, its whole text not embedded (``late`` ignores ``embed_whole``). With ``late`` each turn is encoded once and its sentence vectors are
    pooled from that pass (:meth:`SpanEmbedder.embed_spans`, "late chunking").

    Returns
    -------
    ndarray, shape (len(turns), dim), float32, rows of unit norm.
    """
    names = sorted({sp for _, sp in turns if sp is not None and is_name(sp)}) if speaker_weight else []
    if late is None:
        texts: list[str] = []
        starts = np.empty(len(turns), dtype=np.int64)
        for i, (text, _) in enumerate(turns):
            starts[i] = len(texts)
            texts.extend(turn_texts(text, embed_whole=embed_whole))
        X = np.asarray(embed(texts + names), dtype=np.float32)
        if not len(turns):
            return np.ascontiguousarray(X[:0])
        whole = X[starts]
        U = _normalised(np.add.reduceat(X[: len(texts)], starts, axis=0), whole)
        N = X[len(texts) :]
    else:
        pooled = late.embed_spans([t for t, _ in turns], [_parts(t) for t, _ in turns])
        N = np.asarray(embed(names), dtype=np.float32) if names else np.zeros((0, late.dim), np.float32)
        if not len(turns):
            return np.zeros((0, late.dim), np.float32)
        whole = np.stack([p.whole for p in pooled]).astype(np.float32)
        U = _normalised(whole + np.stack([p.spans.sum(axis=0) for p in pooled]).astype(np.float32), whole)
    if names:
        row = {n: j for j, n in enumerate(names)}
        who = np.array([row.get(sp, -1) if sp is not None else -1 for _, sp in turns], dtype=np.int64)
        has = who >= 0
        U[has] += np.float32(speaker_weight) * N[who[has]]
        U = _normalised(U, whole)
    return np.ascontiguousarray(U, dtype=np.float32)
