"""Metric functions of lamina.eval against hand-worked examples (docs/design.md §4, official LoCoMo rules)."""

from __future__ import annotations

import importlib.util
import math

import pytest

from lamina.eval.scoring import (
    answer_token_recall,
    answer_tokens,
    bleu1,
    context_usage,
    count_tokens,
    distractor_coverage,
    evidence_recall,
    f1_multi,
    f1_score,
    false_memory,
    normalize_answer,
    percentile,
    porter_stem,
    retention,
    score_answer,
)


def test_normalize_answer_official_steps():
    # commas out, lowercase, punctuation out, a/an/the/and out, spaces collapsed
    assert normalize_answer("The Quick, brown fox -- and a dog!") == "quick brown fox dog"
    assert normalize_answer("Mental-health, self-care") == "mentalhealth selfcare"
    assert normalize_answer("band and the bandana") == "band bandana"  # whole words only
    assert normalize_answer(2023) == "2023"


@pytest.mark.parametrize(
    "word, stem",
    [
        ("caresses", "caress"),
        ("ponies", "poni"),
        ("ties", "tie"),
        ("cats", "cat"),
        ("feed", "feed"),
        ("agreed", "agre"),
        ("plastered", "plaster"),
        ("motoring", "motor"),
        ("sing", "sing"),
        ("hopping", "hop"),
        ("falling", "fall"),
        ("filing", "file"),
        ("happy", "happi"),
        ("sky", "sky"),
        ("relational", "relat"),
        ("generously", "gener"),
        ("dying", "die"),
        ("is", "is"),
        ("Running", "run"),
        ("adoption", "adopt"),
        ("agencies", "agenc"),
        ("painting", "paint"),
        ("cried", "cri"),
        ("died", "die"),
    ],
)
def test_porter_stem_known_words(word, stem):
    assert porter_stem(word) == stem


@pytest.mark.skipif(importlib.util.find_spec("nltk") is None, reason="nltk not installed (cross-check only)")
def test_porter_stem_matches_nltk_default_mode():
    from nltk.stem import PorterStemmer

    ps = PorterStemmer()
    words = (
        "abilities abundantly accompanied activities adjustable allowance analogously archaeology "
        "bowdlerize callousness conditional conformably controlling decisiveness dependent digitizer "
        "electrical electricity feudalism formality formalize generalization hesitancy hopefulness "
        "innings irritant predication radically replacement sensibility triplicate vietnamization "
        "exceed succeed proceeding lying tying skies news outings cannings howe fully geology"
    ).split()
    for w in words:
        assert porter_stem(w) == ps.stem(w), w


def test_f1_hand_worked():
    # pred tokens [went, run], gold [run]: P = 1/2, R = 1 -> F1 = 2/3
    assert f1_score("went running", "running") == pytest.approx(2 / 3)
    assert f1_score("The dog", "a dog") == 1.0
    assert f1_score("cat", "dog") == 0.0
    assert f1_score("", "dog") == 0.0
    # multisets: pred [new, york, new], gold [new, york] -> same 2, P 2/3, R 1 -> 0.8
    assert f1_score("new york new", "New York") == pytest.approx(0.8)


def test_category_1_comma_splitting():
    assert f1_multi("adoption agencies, pottery", "pottery, adoption agencies") == 1.0
    # gold parts: pottery -> 1, camping -> 0; mean 0.5
    assert f1_multi("pottery", "pottery, camping") == pytest.approx(0.5)
    assert score_answer("pottery", "pottery, camping", 1)["f1"] == pytest.approx(0.5)


def test_category_3_semicolon_cut_and_category_5_rule():
    assert score_answer("psychology", "Psychology; maybe counseling too", 3)["f1"] == 1.0
    assert score_answer("Not mentioned in the conversation", None, 5) == {"f1": 1.0, "bleu1": 1.0}
    assert score_answer("No information available.", None, 5)["f1"] == 1.0
    assert score_answer("Yes", "No", 5)["f1"] == 0.0
    with pytest.raises(ValueError, match="gold"):
        score_answer("x", None, 4)


def test_bleu1_hand_worked():
    # 3 candidate tokens all in the 6-token reference: precision 1, BP = exp(1 - 6/3)
    assert bleu1("the cat sat", "the cat sat on the mat") == pytest.approx(math.exp(-1))
    # clipping: "the" counted once; candidate longer than reference -> BP 1
    assert bleu1("the the the", "the cat") == pytest.approx(1 / 3)
    assert bleu1("The cat.", "the cat.") == 1.0  # lowercased; "." is a token
    assert bleu1("", "x") == 0.0


def test_evidence_and_answer_token_recall():
    ctx = "[2023-05-08 13:56] Ann: I like   tea.\n[2023-05-08 13:57] Bob: Bye now"
    assert evidence_recall(["I like tea.", "Not there"], ctx) == 0.5
    assert math.isnan(evidence_recall([], ctx))
    assert answer_token_recall("mental health", "ran a race for Mental Health!") == 1.0
    assert answer_token_recall("mental health", "mental stuff") == 0.5
    assert answer_token_recall("painting sunsets", "she paints a sunset") == 1.0  # stemmed both sides
    assert math.isnan(answer_token_recall("the", "anything"))


def test_usage_tokens_percentile_retention():
    assert count_tokens(" a  b\tc\n") == 3
    assert context_usage(100, 1000) == 0.1
    assert context_usage(5, 0) == 0.0
    with pytest.raises(ValueError):
        context_usage(-1, 10)
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile(range(1, 101), 99) == pytest.approx(99.01)
    assert math.isnan(percentile([], 50))
    assert retention(0.5, 0.3) == pytest.approx(0.6)
    assert math.isnan(retention(0.0, 0.3))


def test_false_memory_rule():
    parts = (("Melanie", "I'm starting to realize that self-care is really important."),)
    assert distractor_coverage("self-care is important", parts[0][1]) == 1.0
    # the question names Caroline; the distractor is in Melanie's turn at the top -> false memory
    assert false_memory(False, parts, "self-care is important", "Caroline")
    # attributed to the named speaker -> not a false memory
    assert not false_memory(False, parts, "self-care is important", "Melanie")
    # abstaining is never a false memory
    assert not false_memory(True, parts, "self-care is important", "Caroline")
    # under half of the distractor tokens: [selfcar, is, import, daili] -> 1/4 present
    assert not false_memory(False, (("Melanie", "self-care"),), "self-care is important daily", "Caroline")
    # unattributed text (a summary) carrying the distractor counts
    assert false_memory(False, ((None, "self-care is important"),), "self-care is important", "Caroline")
    assert answer_tokens("Self-care is important") == ["selfcar", "is", "import"]
