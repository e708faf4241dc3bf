"""Summaries (ψ) and fact extraction (𝒜): the protocols and the embedded defaults.

* :class:`ExtractiveSummarizer` — ψ without a model: picks the most central sentences of a
  segment (similarity to the segment centroid under the memory's embedder), in their original
  order, with speakers, within a word limit.
* :class:`RuleFactExtractor` — 𝒜 without a model: regular patterns for first-person
  statements ("I moved to Paris", "my dog is called Max", "I work as a nurse") with the speaker
  as subject. Negated statements are skipped.

Both are deterministic and thread-safe (stateless).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..native.search import inner_products
from ..text._memo import quiet_lru_cache

__all__ = [
    "Turn",
    "Fact",
    "Summarizer",
    "SourcedSummarizer",
    "FactExtractor",
    "ExtractiveSummarizer",
    "RuleFactExtractor",
    "FUNCTIONAL_PREDICATES",
    "is_functional",
    "fact_sentence",
    "split_sentences",
]


@dataclass(frozen=True)
class Turn:
    """A raw turn as seen by summarisers and extractors.

    ``vector``: the turn's embedding, shape (d,), unit length, when the caller has it (the memory
    loop passes every turn's, and a tree node's children's); :class:`ExtractiveSummarizer` then
    embeds nothing (its sentences are scored by word overlap, ties by the turn's centrality).
    """

    source_id: str
    speaker: str | None
    text: str
    timestamp: float | None = None
    vector: npt.NDArray[np.float32] | None = field(default=None, compare=False, repr=False)


@dataclass
class Fact:
    """An extracted (subject, predicate, object) fact with its sentence and provenance."""

    subject: str
    predicate: str
    object: str
    text: str
    sources: tuple[str, ...] = ()
    timestamp: float | None = None
    functional: bool = True  # one current value per subject+predicate (Resolve supersedes)
    extra: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Summarizer(Protocol):
    """ψ: a short summary of a run of turns (``max_words`` whitespace words at most)."""

    def summarize(self, turns: Sequence[Turn], max_words: int) -> str: ...


@runtime_checkable
class SourcedSummarizer(Protocol):
    """An extractive ψ that also says where its summary comes from: ``summarize_sourced``
    returns the summary (as :meth:`Summarizer.summarize` would) and the indices of the turns
    whose sentences it quotes, in order. The memory loop then gives a MemTree node the quoted
    turns as its provenance (bounded by the summary's length) instead of its whole subtree."""

    def summarize_sourced(self, turns: Sequence[Turn], max_words: int) -> tuple[str, list[int]]: ...


@runtime_checkable
class FactExtractor(Protocol):
    """𝒜: structured facts stated in a run of turns (subject = the speaker for first person)."""

    def extract(self, turns: Sequence[Turn]) -> list[Fact]: ...


_SENT = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` as ψ splits them (after ``.``, ``!`` or ``?``), stripped, none empty."""
    return list(_sentences(text))


@quiet_lru_cache(maxsize=65_536)
def _sentences(text: str) -> tuple[str, ...]:
    # (a MemTree node is summarised again from the same turns at each insert below it: a turn's
    # sentences and their words are read once)
    return tuple(s for s in (x.strip() for x in _SENT.split(text.strip())) if s)


def _sentence_key(sentence: str) -> str:
    """What two sentences share when they say the same (case and spacing aside)."""
    return " ".join(sentence.casefold().split())


def _words(s: str) -> list[str]:
    return s.split()


_WORD = re.compile(r"[a-z0-9]+")


@quiet_lru_cache(maxsize=65_536)
def _bag(s: str) -> tuple[tuple[str, ...], int]:
    """A sentence's distinct lower-cased words (sorted) and its whitespace length."""
    return tuple(sorted(set(_WORD.findall(s.lower())))), len(s.split())


def _overlap_scores(texts: Sequence[str]) -> npt.NDArray[np.float64]:
    """Word-overlap centrality: the summed document frequency of a sentence's distinct words
    over (1 + its length)."""
    return _bag_scores([_bag(s) for s in texts])


def _bag_scores(bags: Sequence[tuple[tuple[str, ...], int]]) -> npt.NDArray[np.float64]:
    """:func:`_overlap_scores` of sentences given by their bags (:func:`_bag`); the counts and
    sums run in C (``Counter`` over the chained bags, ``map`` over the vocabulary)."""
    vocab = Counter(chain.from_iterable(b for b, _n in bags))
    df = vocab.__getitem__
    return np.array([sum(map(df, b)) / (1 + n) for b, n in bags])


@quiet_lru_cache(maxsize=65_536)
def _turn_sentences(speaker: str | None, text: str) -> tuple[tuple[str, tuple[tuple[str, ...], int]], ...]:
    """A turn's sentences as ψ quotes them (``Speaker: sentence``) with their bags (:func:`_bag`):
    a MemTree node is summarised again from the same turns at each insert below it."""
    return tuple(((q := f"{speaker}: {s}" if speaker else s), _bag(q)) for s in _sentences(text))


def _centrality(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Each row's inner product with the rows' centroid, shape (n,), by lamina's kernel (the
    BLAS rounds differently on different CPUs, and the order of the sentences is a decision)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out: npt.NDArray[np.float32] = inner_products(x.mean(axis=0, keepdims=True), x)[0]
    return out


class ExtractiveSummarizer:
    """ψ by centrality: the sentences closest to the centroid, in order, with speakers.

    Sentences are scored in one of three ways:

    * every turn carries its vector (:attr:`Turn.vector`, as the memory loop passes them):
      nothing is embedded; word-overlap centrality, ties broken by the centrality of the
      sentence's turn (its vector against the turns' centroid);
    * otherwise with ``embed``: each ``Speaker: sentence`` is embedded and scored by its
      similarity to the sentences' centroid;
    * without ``embed``: word-overlap centrality (the summed document frequency of a sentence's
      distinct words over 1 + its length).

    Parameters
    ----------
    embed : callable, optional
        ``embed(list[str]) -> (n, d) unit-norm float32``; used only when a turn has no vector.
    """

    def __init__(self, embed: Callable[[list[str]], npt.NDArray[np.float32]] | None = None) -> None:
        self._embed = embed

    def summarize(self, turns: Sequence[Turn], max_words: int = 60) -> str:
        return self.summarize_sourced(turns, max_words)[0]

    def summarize_sourced(self, turns: Sequence[Turn], max_words: int = 60) -> tuple[str, list[int]]:
        """The summary and the indices of the turns it quotes (ascending; see
        :class:`SourcedSummarizer`)."""
        sents: list[int] = []  # the turn of each sentence
        texts: list[str] = []  # "Speaker: sentence"
        bags: list[tuple[tuple[str, ...], int]] = []
        keys: list[str] = []  # what makes two sentences the same (whoever says it)
        for ti, t in enumerate(turns):
            got = _turn_sentences(t.speaker, t.text)
            sents += [ti] * len(got)
            keys += [_sentence_key(x) for x in _sentences(t.text)]
            for q, b in got:
                texts.append(q)
                bags.append(b)
        if not sents:
            return "", []
        lens = [n for _b, n in bags]
        # a sentence said again (small talk, a repeated fact) is quoted once, where first said;
        # the scores below still count every occurrence (a repeated sentence is central)
        if sum(lens) <= max_words:
            seen: dict[str, int] = {}
            first = [i for i, k in enumerate(keys) if seen.setdefault(k, i) == i]
            return " ".join(texts[i] for i in first), sorted({sents[i] for i in first})
        vecs = [t.vector for t in turns]
        if all(v is not None for v in vecs):
            # Nothing is embedded: word-overlap centrality first, then the centrality of the
            # sentence's turn (its vector against the turns' centroid) on equal overlap.
            V = np.stack([np.asarray(v, dtype=np.float32) for v in vecs])
            turn_score = _centrality(V)[sents]
            order = np.lexsort((-turn_score, -_bag_scores(bags)))
        else:
            score = _bag_scores(bags) if self._embed is None else _centrality(self._embed(texts))
            order = np.argsort(-score, kind="stable")
        chosen: list[int] = []
        said: set[str] = set()
        used = 0
        for i in order.tolist():
            n = lens[i]
            if (used + n > max_words and chosen) or keys[i] in said:
                continue
            said.add(keys[i])
            chosen.append(int(i))
            used += n
            if used >= max_words:
                break
        chosen.sort()
        out = " ".join(texts[i] for i in chosen)
        w = _words(out)
        quoted = sorted({sents[i] for i in chosen})
        return (" ".join(w[:max_words]) if len(w) > max_words else out), quoted


# ---- rule-based facts ----------------------------------------------------------------------

#: Predicates with one current value per subject; a new value supersedes the old (Resolve).
FUNCTIONAL_PREDICATES = frozenset(
    {
        "lives_in",
        "works_as",
        "works_at",
        "age",
        "spouse",
        "partner",
        "drives",
        "from",
        "studies",
        "birthday",
        "phone",
        "email",
        "relationship_status",
    }
)


def is_functional(predicate: str) -> bool:
    """True when a predicate has one current value per subject (a new value supersedes)."""
    return predicate in FUNCTIONAL_PREDICATES or predicate.endswith("_name") or predicate.startswith("favorite_")


_OBJ = r"(?P<obj>[^.,;!?]+?)"
_END = r"(?=\s*(?:[.,;!?]|$|\s+(?:and|but|because|since|so|now|these days|nowadays|last|this|next|"
_END += r"a few|two|three|recently|yesterday|today|ago|with|for|after|before|when|which|who|where)\b))"

_NEG = re.compile(r"\b(not|never|no longer|don'?t|doesn'?t|didn'?t|isn'?t|wasn'?t|won'?t|can'?t)\b", re.I)

_PATTERNS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], tuple[str, str, bool]]]] = []


def _rule(pattern: str, fn: Callable[[re.Match[str]], tuple[str, str, bool]]) -> None:
    _PATTERNS.append((re.compile(pattern, re.I), fn))


def _pred(name: str, functional: bool = True) -> Callable[[re.Match[str]], tuple[str, str, bool]]:
    return lambda m: (name, m.group("obj"), functional)


_rule(
    r"\bI(?:'ve| have)? (?:just |recently |finally )?(?:moved|relocated) (?:back )?to " + _OBJ + _END, _pred("lives_in")
)
_rule(r"\bI(?:'m| am)? (?:now |currently |still )?(?:live|living) in " + _OBJ + _END, _pred("lives_in"))
_rule(r"\bI(?: now| currently)? live in " + _OBJ + _END, _pred("lives_in"))
_rule(r"\bI(?:'m| am) (?:originally )?from " + _OBJ + _END, _pred("from"))
_rule(r"\bI (?:now |currently )?work as (?:an? )?" + _OBJ + _END, _pred("works_as"))
_rule(r"\bI(?:'m| am) (?:now |currently )?working as (?:an? )?" + _OBJ + _END, _pred("works_as"))
_rule(r"\bI (?:just )?(?:became|started as|got a job as) (?:an? )?" + _OBJ + _END, _pred("works_as"))
_rule(r"\bI (?:now |currently )?work (?:at|for) " + _OBJ + _END, _pred("works_at"))
_rule(
    r"\bI(?:'ve| have)? (?:just )?(?:started working|got a job|joined) (?:at|for|with)? ?" + _OBJ + _END,
    _pred("works_at"),
)
_rule(r"\bI(?:'m| am) (?P<obj>\d{1,3}) (?:years old|now)\b", _pred("age"))
_rule(r"\bI(?:'m| am) (?:now )?(?:married|engaged) to " + _OBJ + _END, _pred("spouse"))
_rule(r"\bmy (?:wife|husband|spouse) (?:is called|is named|is) " + _OBJ + _END, _pred("spouse"))
_rule(r"\bmy (?:partner|girlfriend|boyfriend) (?:is called|is named|is) " + _OBJ + _END, _pred("partner"))
_rule(r"\bI (?:now )?drive an? " + _OBJ + _END, _pred("drives"))
_rule(r"\bI (?:just )?(?:bought|got) (?:myself )?a new car,? an? " + _OBJ + _END, _pred("drives"))
_rule(r"\bI(?:'m| am) (?:now )?studying " + _OBJ + _END, _pred("studies"))
_rule(r"\bmy birthday is (?:on )?" + _OBJ + _END, _pred("birthday"))
_rule(
    r"\bmy favou?rite (?P<what>[a-z]+(?: [a-z]+)?) (?:is|are) (?:now )?" + _OBJ + _END,
    lambda m: (f"favorite_{m.group('what').lower().replace(' ', '_')}", m.group("obj"), True),
)
_rule(
    r"\bmy (?P<what>[a-z]+(?: (?!is\b)[a-z]+)?)(?:'s name is| is called| is named| named) " + _OBJ + _END,
    lambda m: (f"{m.group('what').lower().replace(' ', '_')}_name", m.group("obj"), True),
)
_rule(
    r"\bI have an? (?P<what>[a-z]+(?: [a-z]+)?) (?:called|named) " + _OBJ + _END,
    lambda m: (f"{m.group('what').lower().replace(' ', '_')}_name", m.group("obj"), True),
)
_rule(r"\bI (?:really )?(?:love|like|enjoy|adore) " + _OBJ + _END, _pred("likes", False))
_rule(r"\bI(?:'m| am) allergic to " + _OBJ + _END, _pred("allergic_to", False))

_PRED_TEXT = {
    "lives_in": "lives in",
    "from": "is from",
    "works_as": "works as",
    "works_at": "works at",
    "age": "is aged",
    "spouse": "is married to",
    "partner": "has partner",
    "drives": "drives",
    "studies": "studies",
    "birthday": "has birthday on",
    "likes": "likes",
    "allergic_to": "is allergic to",
}
_STRIP_TAIL = re.compile(r"\s+(?:now|too|as well|though|then|again|already|actually|anymore)$", re.I)
_STRIP_HEAD = re.compile(r"^(?:the city of |a |an |the )", re.I)


def fact_sentence(subject: str, predicate: str, obj: str) -> str:
    """Plain sentence for a fact: ``Alice lives in Paris``, ``Alice's dog name is Max``."""
    if predicate in _PRED_TEXT:
        return f"{subject} {_PRED_TEXT[predicate]} {obj}"
    if predicate.endswith("_name"):
        return f"{subject}'s {predicate[:-5].replace('_', ' ')} is called {obj}"
    if predicate.startswith("favorite_"):
        return f"{subject}'s favorite {predicate[9:].replace('_', ' ')} is {obj}"
    return f"{subject} {predicate.replace('_', ' ')} {obj}"


def _clean_obj(s: str) -> str:
    s = s.strip().strip("\"'")
    for _ in range(3):
        s2 = _STRIP_TAIL.sub("", s)
        if s2 == s:
            break
        s = s2
    if len(s.split()) > 1:
        s = _STRIP_HEAD.sub("", s)
    return s.strip()


# An object must name something: not a clause ("that you chose pottery", "how it's both ..."),
# an infinitive ("to"), a pronoun ("it", "them") or function words only.
_CLAUSE_HEAD = frozenset(
    """to that how what when where why who whom which whether if it it's its they them
this these those there here you your yours he she him her we us our me myself yourself being doing having
seeing going getting making so as because""".split()
)
_FUNCTION = _CLAUSE_HEAD | frozenset(
    """a an the of in on at for with and or but is are was were be been
very really just also too much many some any all more most""".split()
)


def _is_noun_phrase(obj: str) -> bool:
    w = [x.strip(".,!?;:'\"").lower() for x in obj.split()]
    w = [x for x in w if x]
    return bool(w) and w[0] not in _CLAUSE_HEAD and any(x not in _FUNCTION for x in w)


class RuleFactExtractor:
    """𝒜 by rules over first-person statements; the speaker is the subject.

    Recognised (case-insensitive): moved/relocated to, live(s)/living in, from, work as / at,
    became / got a job as, N years old, married/engaged to, my wife/husband/partner is, drive a,
    studying, my birthday is, my favorite X is Y, my X is called/named Y, my X's name is Y,
    I have a X named Y, I love/like/enjoy X (multi-valued), allergic to X (multi-valued).
    Objects end at punctuation or a connective (and, because, since, now, last, ...); negated
    sentences are skipped. Objects longer than 6 words are dropped as unreliable.
    """

    max_object_words = 6

    def extract(self, turns: Sequence[Turn]) -> list[Fact]:
        out: list[Fact] = []
        for t in turns:
            if not t.speaker:
                continue
            for sent in _SENT.split(t.text):
                if _NEG.search(sent):
                    continue
                seen: set[tuple[str, str]] = set()
                for pat, fn in _PATTERNS:
                    for m in pat.finditer(sent):
                        pred, obj, functional = fn(m)
                        obj = _clean_obj(obj)
                        if not obj or len(obj.split()) > self.max_object_words:
                            continue
                        if not _is_noun_phrase(obj):
                            continue
                        if (pred, obj.lower()) in seen or any(p == pred for p, _ in seen) and functional:
                            continue
                        seen.add((pred, obj.lower()))
                        out.append(
                            Fact(
                                subject=t.speaker,
                                predicate=pred,
                                object=obj,
                                text=fact_sentence(t.speaker, pred, obj),
                                sources=(t.source_id,),
                                timestamp=t.timestamp,
                                functional=functional,
                            )
                        )
        return out
