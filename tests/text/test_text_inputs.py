"""Every text entry point on the read and write path takes any text: random Unicode, a long run of
one letter (the stemmer once recursed once per ``y``), deep punctuation. None raises
(``RecursionError`` included) and each returns its documented type."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lamina import Memory
from lamina.llm.extract import ExtractiveSummarizer, RuleFactExtractor, Turn, split_sentences
from lamina.native.lexical import tokenize
from lamina.text._stem import porter_stem
from lamina.text.timeref import annotate, date_intent, mentions_time, resolve

T0 = 1_700_000_000.0
#: longer than the interpreter's recursion limit: a recursion per letter would fail on it
RUN = max(1_000, sys.getrecursionlimit() + 100)

_letters = st.sampled_from("yYaeiouszlbdgtnmrw")
_runs = st.builds(lambda c, n: c * n, _letters, st.integers(1, 3 * RUN))
_punct = st.builds(
    lambda o, c, n, mid: o * n + mid + c * n,
    st.sampled_from("([{\"'<«"),
    st.sampled_from(")]}\"'>»"),
    st.integers(1, 3 * RUN),
    st.text(max_size=20),
)
_texts = st.one_of(
    st.text(max_size=200),
    _runs,
    _punct,
    st.lists(st.one_of(_runs, st.text(max_size=30), st.sampled_from([" ", ". ", "! ", "I love ", "my dog is "]))).map(
        "".join
    ),
)
_EXAMPLES = ["y" * RUN, "Y" * RUN + "ing", "I love " + "y" * RUN + ".", "(" * RUN + "last year" + ")" * RUN, "." * RUN]


def _with_examples(fn: Callable[..., None]) -> Callable[..., None]:
    for e in _EXAMPLES:
        fn = example(e)(fn)
    return fn


@settings(max_examples=150, deadline=None)
@given(st.one_of(_runs, st.text(max_size=60)))
@example("y" * RUN)
@example("yyyyy" * RUN + "ies")
def test_porter_stem_takes_any_word(word: str) -> None:
    out = porter_stem(word)
    assert isinstance(out, str)
    assert len(out) <= len(word.lower())


@pytest.mark.parametrize(
    ("word", "stem"),
    [
        ("y" * 6, "yyyyyi"),
        ("say", "say"),
        ("sayyy", "sayyy"),
        ("yyying", "yy"),
        ("flying", "fli"),
        ("enjoying", "enjoy"),
    ],
)
def test_porter_stem_y_runs(word: str, stem: str) -> None:
    """A y after a vowel is a consonant, after a consonant a vowel (the outputs of the former,
    recursive implementation)."""
    assert porter_stem(word) == stem


@settings(max_examples=150, deadline=None)
@given(_texts)
@_with_examples
def test_text_functions_take_any_text(text: str) -> None:
    assert all(isinstance(t, str) and t for t in tokenize(text))
    assert isinstance(resolve(text, T0), tuple)
    assert isinstance(annotate(text, T0), str)
    assert isinstance(date_intent(text), bool)
    assert isinstance(mentions_time(text, T0), bool)
    assert all(isinstance(s, str) for s in split_sentences(text))
    turns = [Turn("s1", "Caroline", text, T0), Turn("s2", "Mel", text[: len(text) // 2] or "x", T0)]
    assert isinstance(ExtractiveSummarizer().summarize(turns, 30), str)
    for fact in RuleFactExtractor().extract(turns):
        assert isinstance(fact.text, str)


@pytest.fixture(scope="module")
def memory() -> Iterator[Memory]:
    mem = Memory(None, embedder="hashing")
    try:
        yield mem
    finally:
        mem.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_texts.filter(lambda s: s.strip() != ""))
@_with_examples
def test_memory_add_and_search_take_any_text(memory: Memory, text: str) -> None:
    (item_id,) = memory.add([{"speaker": "u", "text": text}], user_id="prop", session_id="s", timestamp=T0)
    assert memory.get(item_id).text == text
    assert isinstance(memory.search(text, user_id="prop", k=3), list)
    assert memory.context(text, user_id="prop", budget=128) is not None


def test_a_run_of_one_letter_is_stored_and_found() -> None:
    mem = Memory(None, embedder="hashing")
    try:
        mem.add([{"speaker": "u", "text": "I went hiking in the Alps."}], user_id="u", session_id="s", timestamp=T0)
        (item_id,) = mem.add([{"speaker": "u", "text": "y" * RUN}], user_id="u", session_id="s", timestamp=T0)
        found = mem.search("y" * RUN, user_id="u", k=1)
        assert [it.id for it in found] == [item_id]
    finally:
        mem.close()
