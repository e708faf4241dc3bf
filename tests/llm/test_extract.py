"""lamina.llm.extract: ψ by centrality (ExtractiveSummarizer), 𝒜 by rules (RuleFactExtractor),
fact_sentence and is_functional."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.embedders import get_embedder
from lamina.llm.extract import (
    ExtractiveSummarizer,
    FactExtractor,
    RuleFactExtractor,
    Summarizer,
    Turn,
    fact_sentence,
    is_functional,
    split_sentences,
)

_POOL = [
    "How has your week been?",
    "Pretty busy, but good overall.",
    "I work as a nurse now.",
    "I moved to Lisbon last spring.",
    "Haha, that is so true!",
    "My dog Max loves the beach.",
    "We should plan a call.",
    "i work as a  NURSE now.",  # the same sentence, case and spacing aside
]


@settings(max_examples=150, deadline=None)
@given(
    picks=st.lists(
        st.tuples(st.sampled_from(["Ann", "Bo", None]), st.lists(st.sampled_from(_POOL), min_size=1, max_size=4)),
        min_size=1,
        max_size=14,
    ),
    max_words=st.integers(min_value=3, max_value=120),
    with_vectors=st.booleans(),
)
def test_a_summary_never_repeats_a_sentence(
    picks: list[tuple[str | None, list[str]]], max_words: int, with_vectors: bool
) -> None:
    emb = get_embedder("hashing-64")
    turns = []
    for i, (speaker, sents) in enumerate(picks):
        text = " ".join(sents)
        vec = emb.embed([text])[0] if with_vectors else None
        turns.append(Turn(str(i), speaker, text, float(i), vector=vec))
    summary, quoted = ExtractiveSummarizer(emb.embed).summarize_sourced(turns, max_words)
    said = [" ".join(x.split(": ", 1)[-1].casefold().split()) for x in split_sentences(summary)]
    assert len(said) == len(set(said)), summary
    assert summary and quoted == sorted(set(quoted)) and all(0 <= q < len(turns) for q in quoted)


def _facts(text: str, speaker: str | None = "Ann") -> list[tuple[str, str, str]]:
    return [(f.subject, f.predicate, f.object) for f in RuleFactExtractor().extract([Turn("1", speaker, text, 5.0)])]


def test_protocols() -> None:
    assert isinstance(ExtractiveSummarizer(), Summarizer)
    assert isinstance(RuleFactExtractor(), FactExtractor)


def test_short_runs_are_kept_whole_with_speakers() -> None:
    turns = [Turn("1", "Ann", "Hello there. How are you?"), Turn("2", None, "Fine!"), Turn("3", "Ben", "   ")]
    assert ExtractiveSummarizer().summarize(turns, 60) == "Ann: Hello there. Ann: How are you? Fine!"
    assert ExtractiveSummarizer().summarize([Turn("1", "Ann", "  ")], 10) == ""


def test_long_runs_keep_the_most_central_sentences_in_order() -> None:
    emb = get_embedder("hashing")
    turns = [
        Turn(str(i), "Ann", t)
        for i, t in enumerate(
            [
                "The cat sat on the mat in the sun.",
                "Quantum flux capacitors hum loudly tonight.",
                "The cat on the mat slept in the sun.",
                "A cat and a mat in the warm sun.",
            ]
        )
    ]
    for s in (ExtractiveSummarizer(emb.embed), ExtractiveSummarizer()):
        out = s.summarize(turns, 20)
        assert len(out.split()) <= 20 and "Quantum" not in out  # the outlier goes
        parts = [p for p in out.split("Ann: ") if p]
        texts = [t.text for t in turns]
        assert [texts.index(p.strip()) for p in parts] == sorted(texts.index(p.strip()) for p in parts)
    # one sentence over the limit is cut to it
    long = ExtractiveSummarizer().summarize([Turn("1", None, " ".join(f"w{i}" for i in range(30)) + ".")], 5)
    assert long == "w0 w1 w2 w3 w4"


def test_summaries_use_the_given_embedder() -> None:
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        x = np.zeros((len(texts), 2), dtype=np.float32)
        x[:, 0] = 1.0
        x[-1] = [0.0, 1.0]  # the last sentence is the outlier
        return x

    turns = [Turn(str(i), None, f"sentence number {i} here.") for i in range(4)]
    out = ExtractiveSummarizer(embed).summarize(turns, 8)
    assert calls == [[t.text for t in turns]] and "3" not in out and out.startswith("sentence number 0")


@pytest.mark.parametrize(
    "text,want",
    [
        ("I moved to Paris last week.", [("Ann", "lives_in", "Paris")]),
        ("I've just relocated to the city of Porto.", [("Ann", "lives_in", "Porto")]),
        ("I am living in New York these days.", [("Ann", "lives_in", "New York")]),
        ("I'm from Lisbon.", [("Ann", "from", "Lisbon")]),
        ("I work as a nurse at the hospital.", [("Ann", "works_as", "nurse at the hospital")]),
        ("I work at Google.", [("Ann", "works_at", "Google")]),
        ("I'm 34 years old.", [("Ann", "age", "34")]),
        ("My wife is Maria.", [("Ann", "spouse", "Maria")]),
        ("My wife is called Maria.", [("Ann", "spouse", "Maria"), ("Ann", "wife_name", "Maria")]),
        ("My boyfriend is named Leo.", [("Ann", "partner", "Leo"), ("Ann", "boyfriend_name", "Leo")]),
        ("I drive a Volvo.", [("Ann", "drives", "Volvo")]),
        ("My birthday is on May 3rd.", [("Ann", "birthday", "May 3rd")]),
        ("My favorite color is green.", [("Ann", "favorite_color", "green")]),
        ("My dog is called Max.", [("Ann", "dog_name", "Max")]),
        ("I have a cat named Luna.", [("Ann", "cat_name", "Luna")]),
        ("I'm allergic to peanuts.", [("Ann", "allergic_to", "peanuts")]),
        ("I love hiking and painting.", [("Ann", "likes", "hiking")]),
    ],
)
def test_rule_facts(text: str, want: list[tuple[str, str, str]]) -> None:
    assert _facts(text) == want


def test_rule_facts_need_a_noun_phrase_object() -> None:
    # (the last: an object over six words is dropped as unreliable)
    for text in (
        "I love to paint.",
        "I love that you chose pottery.",
        "I love how it is both calm and fun.",
        "I love it.",
        "I love the.",
        "I moved to the little blue house on the corner of Elm Street.",
    ):
        assert _facts(text) == [], text


def test_rule_facts_skip_negation_speakerless_turns_and_keep_provenance() -> None:
    assert _facts("I don't live in Paris.") == [] and _facts("I no longer work as a nurse.") == []
    assert _facts("I moved to Paris.", speaker=None) == []
    (f,) = RuleFactExtractor().extract([Turn("D1:3", "Ann", "I moved to Paris now.", 12.0)])
    assert (f.sources, f.timestamp, f.functional, f.text) == (("D1:3",), 12.0, True, "Ann lives in Paris")
    # one value per functional predicate and sentence; a second sentence may state another
    two = RuleFactExtractor().extract([Turn("1", "Ann", "I live in Rome. I moved to Oslo.")])
    assert [f.object for f in two] == ["Rome", "Oslo"]
    likes = RuleFactExtractor().extract([Turn("1", "Ann", "I love chess. I really enjoy jazz.")])
    assert [(f.object, f.functional) for f in likes] == [("chess", False), ("jazz", False)]


def test_fact_sentence_and_is_functional() -> None:
    assert fact_sentence("Ann", "lives_in", "Paris") == "Ann lives in Paris"
    assert fact_sentence("Ann", "dog_name", "Max") == "Ann's dog is called Max"
    assert fact_sentence("Ann", "favorite_ice_cream", "mint") == "Ann's favorite ice cream is mint"
    assert fact_sentence("Ann", "plays_with", "Bo") == "Ann plays with Bo"
    assert is_functional("lives_in") and is_functional("dog_name") and is_functional("favorite_color")
    assert not is_functional("likes") and not is_functional("allergic_to")


def test_summaries_of_turns_with_vectors_embed_nothing() -> None:
    """With every turn's vector given, nothing is embedded: sentences go by word-overlap
    centrality, and on equal overlap the sentence of the more central turn comes first."""
    calls: list[list[str]] = []

    def spy(ts: list[str]) -> np.ndarray:
        calls.append(ts)
        return get_embedder("hashing").embed(ts)

    texts = [
        "The cat sat on the mat in the sun.",
        "Quantum flux capacitors hum loudly tonight.",
        "The cat on the mat slept in the sun.",
        "A cat and a mat in the warm sun.",
    ]
    vecs = get_embedder("hashing").embed(texts)
    turns = [Turn(str(i), "Ann", t, float(i), vecs[i]) for i, t in enumerate(texts)]
    out = ExtractiveSummarizer(spy).summarize(turns, 20)
    assert calls == [] and "Quantum" not in out and len(out.split()) <= 20
    assert out == ExtractiveSummarizer().summarize(turns, 20)  # the word-overlap order
    # equal overlap (the same sentence twice): the turn nearer the centroid wins
    e = np.eye(3, dtype=np.float32)
    tie = [Turn("a", "Ann", "Same words here.", None, e[1]), Turn("b", "Ben", "Same words here.", None, e[0])]
    tie += [Turn("c", None, "Other.", None, e[0]), Turn("d", None, "Other.", None, e[0])]
    assert ExtractiveSummarizer(spy).summarize(tie, 5) == "Ben: Same words here. Other."
    assert calls == []
    # a turn without a vector: the sentences are embedded, as before
    plain = [Turn(t.source_id, t.speaker, t.text, t.timestamp) for t in turns]
    ExtractiveSummarizer(spy).summarize(plain, 20)
    assert len(calls) == 1 and len(calls[0]) == 4


def test_extractive_summary_names_the_turns_it_quotes() -> None:
    turns = [
        Turn("a", "Ann", "I moved to Paris. It rains a lot there."),
        Turn("b", "Ben", "Paris is lovely in spring. I moved there too."),
        Turn("c", "Ann", "Zebras."),
        Turn("d", "Ben", "The weather in Paris is mild. We moved to Paris in May."),
    ]
    summ = ExtractiveSummarizer()
    text, quoted = summ.summarize_sourced(turns, 12)
    assert text == summ.summarize(turns, 12) and quoted == sorted(set(quoted))
    for i, t in enumerate(turns):  # a turn is named exactly when one of its sentences is quoted
        said = any(f"{t.speaker}: {s}" in text for s in split_sentences(t.text))
        assert (i in quoted) == said, (i, text)
    assert ExtractiveSummarizer().summarize_sourced([], 12) == ("", [])
    short = turns[2:3]
    assert summ.summarize_sourced(short, 12) == ("Ann: Zebras.", [0])
