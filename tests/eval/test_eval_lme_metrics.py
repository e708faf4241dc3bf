"""LongMemEval's retrieval metrics on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from lamina.eval.lme_metrics import (
    dcg,
    first_occurrence,
    ndcg_at_k,
    recall_all_at_k,
    recall_any_at_k,
    retrieval_scores,
)


def test_dcg_weighs_positions_one_and_two_alike():
    # the benchmark's DCG: r1 + r2/log2(2) + r3/log2(3) + ...
    assert dcg([1, 1, 1], 3) == pytest.approx(1 + 1 + 1 / math.log2(3))
    assert dcg([0, 1], 2) == dcg([1, 0], 2) == 1.0
    assert dcg([1, 1, 1], 1) == 1.0
    assert dcg([], 5) == 0.0


def test_recall_and_ndcg_by_hand():
    ranked = ["a", "b", "c", "d"]
    rel = {"b", "d"}
    assert recall_any_at_k(ranked, rel, 1) == 0.0
    assert recall_any_at_k(ranked, rel, 2) == 1.0
    assert recall_all_at_k(ranked, rel, 2) == 0.0
    assert recall_all_at_k(ranked, rel, 4) == 1.0
    # k = 2: got [0, 1] -> 1; ideal [1, 1] -> 2
    assert ndcg_at_k(ranked, rel, 2) == pytest.approx(0.5)
    # k = 4: got [0, 1, 0, 1] -> 1 + 1/log2(4) = 1.5; ideal [1, 1] -> 2
    assert ndcg_at_k(ranked, rel, 4) == pytest.approx(0.75)
    assert ndcg_at_k(["b", "d", "x"], rel, 10) == pytest.approx(1.0)


def test_repeated_units_count_once_and_short_rankings_miss():
    assert first_occurrence(["a", "a", "b", "a", "c"]) == ["a", "b", "c"]
    # a session shown twice does not push the evidence out of the top 2
    assert recall_any_at_k(["a", "a", "b"], {"b"}, 2) == 1.0
    assert ndcg_at_k(["a", "a", "b"], {"b"}, 2) == pytest.approx(1.0)
    # a ranking shorter than k retrieves fewer units; a relevant unit never ranked is missed
    assert recall_all_at_k(["b"], {"b", "z"}, 10) == 0.0
    assert ndcg_at_k(["b"], {"b", "z"}, 10) == pytest.approx(1 / 2)
    assert recall_any_at_k([], {"b"}, 5) == 0.0


def test_nothing_relevant_is_left_out():
    assert math.isnan(recall_any_at_k(["a"], set(), 5))
    assert math.isnan(recall_all_at_k(["a"], [], 5))
    assert math.isnan(ndcg_at_k(["a"], (), 5))
    assert retrieval_scores(["a"], []) is None
    s = retrieval_scores(["x", "a", "y"], ["a"])
    assert s == {
        "recall_any@5": 1.0,
        "recall_all@5": 1.0,
        "ndcg@5": 1.0,
        "recall_any@10": 1.0,
        "recall_all@10": 1.0,
        "ndcg@10": 1.0,
    }


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="k must be"):
        recall_any_at_k(["a"], {"a"}, 0)
    with pytest.raises(ValueError, match="k must be"):
        ndcg_at_k(["a"], {"a"}, -1)
