"""How a turn is embedded (:mod:`lamina.memory.state.turnvec`): the speaker-prefixed turn and its
sentences, summed and normalised, through every path that embeds a turn (add, update, import)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lamina import Memory, MemoryConfig
from lamina.embedders import get_embedder
from lamina.errors import InvalidInput
from lamina.memory.state.turnvec import (
    SPEAKER_WEIGHT,
    is_name,
    sentence_spans,
    sentences,
    turn_texts,
    turn_vectors,
)
from memkit import T0, chat

HASH = get_embedder("hashing")


def stored(m: Memory, text: str) -> np.ndarray:
    """The vector a memory holds for its turn with this text (read through an export)."""
    (it,) = [it for it in m.export_user(user_id="u", vectors=True).items if it.kind == "turn" and it.text == text]
    assert it.embedding is not None
    return it.embedding


class Recording:
    """The hashing embedder, remembering each call's texts."""

    dim, name = HASH.dim, HASH.name

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return HASH.embed(texts)


def test_sentences_keep_the_ones_that_say_something() -> None:
    assert sentences("Wow! I went hiking with my dad. Great?  See you at the lake soon.") == [
        "I went hiking with my dad.",
        "See you at the lake soon.",
    ]
    assert sentences("ok") == []
    assert sentences("") == []


def test_turn_texts_whole_first_then_sentences() -> None:
    assert turn_texts("Thanks! I adopted a cat. Her name is Luna.") == [
        "Thanks! I adopted a cat. Her name is Luna.",
        "I adopted a cat.",
        "Her name is Luna.",
    ]
    # one sentence that is the whole turn, or none long enough: the whole turn alone
    assert turn_texts("I adopted a cat.") == ["I adopted a cat."]
    assert turn_texts("Thanks! Wow!") == ["Thanks! Wow!"]
    # a short opener and one statement: the statement also gets its own say
    assert turn_texts("Wow! I adopted a cat.") == ["Wow! I adopted a cat.", "I adopted a cat."]
    # "parts": the sentences alone, the whole text only where it has none to add
    assert turn_texts("Thanks! I adopted a cat. Her name is Luna.", embed_whole=False) == [
        "I adopted a cat.",
        "Her name is Luna.",
    ]
    assert turn_texts("I adopted a cat.", embed_whole=False) == ["I adopted a cat."]
    assert turn_texts("Thanks! Wow!", embed_whole=False) == ["Thanks! Wow!"]


def _expected(text: str, speaker: str | None) -> np.ndarray:
    """u + w·e(speaker), normalised; u the normalised sum of the turn's texts' vectors."""
    u = HASH.embed(turn_texts(text)).astype(np.float64).sum(axis=0)
    u /= np.linalg.norm(u)
    if speaker:
        u = u + SPEAKER_WEIGHT * HASH.embed([speaker])[0]
    return u / np.linalg.norm(u)


def test_turn_vectors_are_content_plus_speaker_in_one_call() -> None:
    rec = Recording()
    turns = [("Thanks! I adopted a cat. Her name is Luna.", "Ann"), ("Fine.", None), ("I like tea a lot.", "Ann")]
    V = turn_vectors(rec.embed, turns)
    # every content text, then each distinct name once
    assert len(rec.calls) == 1 and rec.calls[0] == [t for tx, _ in turns for t in turn_texts(tx)] + ["Ann"]
    assert V.shape == (3, HASH.dim) and V.dtype == np.float32 and V.flags.c_contiguous
    for v, (tx, sp) in zip(V, turns):
        np.testing.assert_allclose(v, _expected(tx, sp), atol=1e-6)
    assert turn_vectors(rec.embed, []).shape == (0, HASH.dim)


def test_the_speaker_has_the_same_say_in_a_short_and_a_long_turn() -> None:
    """The name is added to the normalised content: cos(v, e) = (u·e + w) / |u + w·e| whatever
    the turn's length (a name written into the text would weigh most in the shortest turns)."""
    name = HASH.embed(["Ann"])[0].astype(np.float64)
    texts = ["Okay.", "We drove to the coast, camped two nights and saw seals on the rocks. It rained."]
    V = turn_vectors(HASH.embed, [(t, "Ann") for t in texts])
    for v, t in zip(V, texts):
        u = _expected(t, None)
        want = (float(u @ name) + SPEAKER_WEIGHT) / np.linalg.norm(u + SPEAKER_WEIGHT * name)
        assert float(v @ name) == pytest.approx(want, abs=1e-5)
    u0 = turn_vectors(HASH.embed, [(texts[0], "Ann")], speaker_weight=0.0)[0]
    np.testing.assert_allclose(u0, _expected(texts[0], None), atol=1e-6)


def test_a_question_naming_a_person_meets_that_persons_turn() -> None:
    lines = [("Ann", "I moved to Berlin with my partner last spring."), ("Ben", "I moved to Lisbon with my partner.")]
    m = Memory(embedder="hashing", config=MemoryConfig(layers=("working", "episodic"), min_similarity=-1.0))
    chat(m, "u", "s1", lines, T0, "D")
    for who, city in (("Ann", "Berlin"), ("Ben", "Lisbon")):
        (top,) = m.search(f"Where did {who} move with the partner?", user_id="u", k=1, layers=["archive"])
        assert city in top.text
    m.close()


def test_a_chat_role_is_no_name() -> None:
    """Turns labelled "user" / "assistant" (any case) get their content vector alone: the label
    says nothing a question could ask about, and on every turn it would only shift all scores."""
    assert [is_name(x) for x in ("Ann", "user", "Assistant", " SYSTEM ", "", None)] == [
        True,
        False,
        False,
        False,
        False,
        False,
    ]
    rec = Recording()
    text = "I booked the flights. The hotel is next."
    V = turn_vectors(rec.embed, [(text, "user"), (text, "Assistant"), (text, None)])
    assert rec.calls[0] == turn_texts(text) * 3  # no name embedded
    for v in V:
        np.testing.assert_allclose(v, _expected(text, None), atol=1e-6)


def test_opposite_parts_fall_back_to_the_whole_turn() -> None:
    def opposed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 4), dtype=np.float32)
        out[0, 0] = 1.0
        out[1, 0] = -1.0  # the sentence cancels the whole turn exactly
        return out

    V = turn_vectors(opposed, [("Okay then! I adopted a cat.", None)])
    np.testing.assert_array_equal(V, [[1.0, 0.0, 0.0, 0.0]])


def test_config_names_the_choice() -> None:
    assert MemoryConfig().turn_vectors == "sentences"
    with pytest.raises(InvalidInput, match="turn_vectors"):
        MemoryConfig(turn_vectors="words")  # type: ignore[arg-type]


@given(st.text(alphabet=st.sampled_from(list("ab .!?\n")), max_size=60))
def test_sentence_spans_locate_the_sentences(text: str) -> None:
    """Late chunking pools over these spans: they must be exactly the sentences, in order."""
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == sentences(text)
    assert all(0 <= a < b <= len(text) for a, b in spans)
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))


def test_late_turn_vectors_without_an_encoder_are_the_sentence_vectors() -> None:
    """The hashing embedder has no token states to pool: "late" stores what "sentences" stores."""
    text = "Thanks, Bob! I moved to Lisbon in May. The flat is small."
    m = Memory(embedder="hashing", config=MemoryConfig(turn_vectors="late"))
    chat(m, "u", "s1", [("Ann", text)], T0, "D")
    np.testing.assert_allclose(stored(m, text), turn_vectors(HASH.embed, [(text, "Ann")])[0], atol=1e-6)
    m.close()


def _by_rule(mode: str, text: str) -> np.ndarray:
    if mode == "text":
        return HASH.embed([text])[0]
    return turn_vectors(HASH.embed, [(text, "Ann")], embed_whole=mode == "sentences")[0]


@pytest.mark.parametrize("mode", ["sentences", "parts", "text"])
def test_add_and_update_store_the_configured_vector(mode: str) -> None:
    m = Memory(embedder="hashing", config=MemoryConfig(turn_vectors=mode))  # type: ignore[arg-type]
    text = "Thanks, Bob! I moved to Lisbon in May. The flat is small."
    (i,) = chat(m, "u", "s1", [("Ann", text)], T0, "D")
    np.testing.assert_allclose(stored(m, text), _by_rule(mode, text), atol=1e-6)
    new = "I live in Porto now. It rains a lot."
    m.update(i, new)
    np.testing.assert_allclose(stored(m, new), _by_rule(mode, new), atol=1e-6)
    m.close()


def test_parts_embed_each_sentence_once_and_no_whole_turn() -> None:
    """``turn_vectors="parts"``: a turn costs its sentences' texts (about one text's worth of
    tokens), its vector their normalised sum plus the speaker's name."""
    rec = Recording()
    turns = [("Thanks! I adopted a cat. Her name is Luna.", "Ann"), ("I like tea a lot.", None)]
    V = turn_vectors(rec.embed, turns, embed_whole=False)
    assert rec.calls == [["I adopted a cat.", "Her name is Luna.", "I like tea a lot.", "Ann"]]
    u = HASH.embed(["I adopted a cat.", "Her name is Luna."]).astype(np.float64).sum(axis=0)
    u = u / np.linalg.norm(u) + SPEAKER_WEIGHT * HASH.embed(["Ann"])[0]
    np.testing.assert_allclose(V[0], u / np.linalg.norm(u), atol=1e-6)
    np.testing.assert_allclose(V[1], HASH.embed(["I like tea a lot."])[0], atol=1e-6)


def test_import_into_another_embedder_embeds_turns_as_the_write_path() -> None:
    src = Memory(embedder="hashing")
    text = "Hi! My sister adopted a kitten. It is grey."
    chat(src, "u", "s1", [("Ann", text), ("Bob", "That is lovely news for her.")], T0, "D")
    src.end_session(user_id="u", session_id="s1")
    dump = src.export_user(user_id="u")
    rec = Recording()
    dst = Memory(embedder=rec)
    dst.import_user(dump, embedder="another-embedder")
    np.testing.assert_allclose(stored(dst, text), turn_vectors(HASH.embed, [(text, "Ann")])[0], atol=1e-6)
    assert "My sister adopted a kitten." in [t for call in rec.calls for t in call]
    src.close()
    dst.close()


def test_a_dump_without_vectors_is_re_embedded_by_the_rule() -> None:
    """A database written with plain text vectors moves to the sentence rule by exporting a user
    without vectors and importing it (same embedder)."""
    text = "Hi! My sister adopted a kitten. It is grey."
    src = Memory(embedder="hashing", config=MemoryConfig(turn_vectors="text"))
    chat(src, "u", "s1", [("Ann", text)], T0, "D")
    np.testing.assert_allclose(stored(src, text), HASH.embed([text])[0], atol=1e-6)
    dump = src.export_user(user_id="u", vectors=False)
    dst = Memory(embedder="hashing")
    dst.import_user(dump, embedder=dst.embedder.name)
    np.testing.assert_allclose(stored(dst, text), turn_vectors(HASH.embed, [(text, "Ann")])[0], atol=1e-6)
    src.close()
    dst.close()
