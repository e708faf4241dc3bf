"""lamina eval end to end: a tiny synthetic LoCoMo-shaped conversation (CI) and the first real
LoCoMo conversation when the shared data is present."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from lamina.cli.entry import main
from lamina.embedders import Hashing
from lamina.eval import ALL_SYSTEMS, format_tables, load_locomo, run_locomo
from lamina.eval.harness import Reader, named_speaker
from lamina.eval.locomo import conversations_from, parse_session_date

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

_LINES = [
    ("Alice", "I adopted a golden retriever puppy named Biscuit.", "Bob", "Biscuit is a lovely name for a dog!"),
    ("Bob", "I started learning to play the cello last week.", "Alice", "The cello sounds hard, good luck."),
    ("Alice", "My sister Dana moved to Lisbon for work.", "Bob", "Lisbon has great food and sunny weather."),
    ("Bob", "I ran the Berlin marathon in three hours yesterday.", "Alice", "Three hours is an amazing time!"),
    ("Alice", "I painted a sunset over the lake for my mother.", "Bob", "Your mother must love that painting."),
    ("Bob", "We booked a trip to Kyoto for April.", "Alice", "Kyoto in April means cherry blossoms."),
]


class _Poison(dict):
    """A sample that fails the test if gold annotation fields are read while loading."""

    FORBIDDEN = {"observation", "event_summary", "session_summary"}

    def __getitem__(self, k):
        assert k not in self.FORBIDDEN, f"the loader read gold field {k!r}"
        return super().__getitem__(k)

    def get(self, k, default=None):
        assert k not in self.FORBIDDEN, f"the loader read gold field {k!r}"
        return super().get(k, default)


def _sample() -> dict:
    conv = {"speaker_a": "Alice", "speaker_b": "Bob"}
    for i, (s1, t1, s2, t2) in enumerate(_LINES, start=1):
        conv[f"session_{i}_date_time"] = f"{i}:00 pm on {i} May, 2023"
        conv[f"session_{i}"] = [
            {"speaker": s1, "dia_id": f"D{i}:1", "text": t1},
            {
                "speaker": s2,
                "dia_id": f"D{i}:2",
                "text": t2,
                **({"blip_caption": "a photo of a lake at dusk"} if i == 5 else {}),
            },
        ]
    conv["session_7_date_time"] = "1:00 pm on 9 May, 2023"  # a date with no session: ignored
    qa = [
        {"question": "What is the name of Alice's puppy?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4},
        {"question": "What instrument is Bob learning?", "answer": "the cello", "evidence": ["D2:1"], "category": 4},
        {
            "question": "Where did Dana move, and what did Alice paint?",
            "answer": "Lisbon, a sunset",
            "evidence": ["D3:1; D5:1"],
            "category": 1,
        },
        {
            "question": "When did Bob run the Berlin marathon?",
            "answer": "3 May 2023",
            "evidence": ["D4:1"],
            "category": 2,
        },
        {
            "question": "Would Bob enjoy travelling to Japan?",
            "answer": "Likely yes; he booked Kyoto",
            "evidence": ["D6:1", "D"],
            "category": 3,
        },
        {
            "question": "What instrument is Alice learning to play?",
            "adversarial_answer": "the cello",
            "evidence": ["D2:1", "D9:9"],
            "category": 5,
        },
    ]
    return _Poison(
        sample_id="syn-1", conversation=conv, qa=qa, observation=None, event_summary=None, session_summary=None
    )


@pytest.fixture(scope="module")
def synthetic():
    from lamina.eval.locomo import LoadReport

    rep = LoadReport()
    return conversations_from([_sample()], report=rep), rep


def test_loader_keeps_gold_apart_and_reports_evidence(synthetic):
    convs, rep = synthetic
    (c,) = convs
    assert c.speakers == ("Alice", "Bob") and len(c.sessions) == 6 and len(c.turns) == 12
    assert rep.empty_date_keys == 1 and rep.questions == 6
    assert c.questions[2].evidence == ("D3:1", "D5:1")  # 'D3:1; D5:1' split leniently
    assert rep.malformed_evidence == ["syn-1: 'D'"] and rep.missing_evidence == ["syn-1: D9:9"]
    assert c.turn_by_id()["D5:2"].text.endswith("[shares a photo: a photo of a lake at dusk]")
    # turns keep their order as event times; sessions carry their dates
    assert c.sessions[0].timestamp == parse_session_date("1:00 pm on 1 May, 2023")
    assert c.turns[1].timestamp == c.turns[0].timestamp + 1
    with pytest.raises(ValueError, match="session date"):
        parse_session_date("yesterday")


def test_named_speaker():
    assert named_speaker("What did Caroline's sister do?", ["Caroline", "Melanie"]) == "Caroline"
    assert named_speaker("What did they do?", ["Caroline", "Melanie"]) is None
    assert named_speaker("Did Caroline meet Melanie?", ["Caroline", "Melanie"]) is None


def test_harness_end_to_end_on_synthetic(synthetic):
    convs, rep = synthetic
    res = run_locomo(convs, Hashing(), budgets=[16, 400], progress=None, load_report=rep)
    assert set(res["results"]) == set(ALL_SYSTEMS)
    hist = res["dataset"]["conversations"][0]["history_tokens"]
    for name in ALL_SYSTEMS:
        for b in ("16", "400"):
            a = res["results"][name][b]
            assert 0.0 <= a["context_usage"] <= 1.0
            assert a["context_tokens_mean"] <= int(b)
        assert len(res["per_question"][name][16]) == 6
    # 400 tokens hold the whole history (< 200 tokens): every raw-turn baseline sees every turn
    assert hist < 400
    for name in ("recency", "dense-rag", "bm25", "hybrid-rag"):
        a = res["results"][name]["400"]
        assert a["evidence_recall"]["overall"] == 1.0
        assert a["context_usage"] == pytest.approx(1.0)
    # a 16-token budget holds one turn: bm25 ranks the keyword turn first for the single-hop questions
    bm = {r["qid"]: r for r in res["per_question"]["bm25"][16]}
    assert bm["syn-1#0"]["ev"] == 1.0 and bm["syn-1#1"]["ev"] == 1.0
    # the adversarial question names Alice; Bob's cello turn is on top of bm25's context: a false memory
    assert bm["syn-1#5"]["fm"] is True
    assert res["results"]["bm25"]["16"]["false_memory_rate"] == 1.0
    # recency at 16 tokens keeps only the last turn (no evidence of the first questions)
    rc = {r["qid"]: r for r in res["per_question"]["recency"][16]}
    assert rc["syn-1#0"]["ev"] == 0.0
    # lamina runs and reports its retention numbers
    lam = res["results"]["lamina"]["400"]
    assert lam["retention"]["questions"] == 1  # only 'Biscuit' has its evidence in period 1
    assert 0.0 <= lam["evidence_recall"]["overall"] <= 1.0
    out = format_tables(res)
    assert "budget 16 tokens" in out and "reader: skipped" in out and "lamina -episodic" in out
    json.dumps(res, allow_nan=True)


class _RecordingLLM:
    """A deterministic chat model that records each prompt and answers it with ``answer``."""

    model = "recording-1"

    def __init__(self):
        self.prompts = []

    def complete(self, messages, temperature=0.0, max_tokens=64):
        p = messages[0]["content"]
        self.prompts.append(p)
        return self.answer(p)

    def answer(self, p):
        raise NotImplementedError


class _FakeLLM(_RecordingLLM):
    """Says 'not mentioned' to choice questions, else repeats a context word."""

    model = "fake-reader-1"

    def answer(self, p):
        if "Select the correct answer" in p:
            return "Not mentioned in the conversation"
        question = p.rsplit("Question:", 1)[1]
        return "Biscuit" if "puppy" in question else "cello"


def test_reader_scores_with_official_rules(synthetic):
    convs, _ = synthetic
    llm = _FakeLLM()
    res = run_locomo(
        convs,
        Hashing(),
        budgets=[400],
        systems=["bm25"],
        retention=False,
        reader=Reader(llm),
        reader_budget=400,
        progress=None,
    )
    assert res["reader"] == {"status": "ran", "model": "fake-reader-1", "budget": 400}
    recs = {r["qid"]: r for r in res["per_question"]["bm25"][400]}
    assert recs["syn-1#0"]["f1"] == 1.0  # Biscuit
    assert recs["syn-1#1"]["f1"] == 1.0  # "cello" vs "the cello"
    assert recs["syn-1#5"]["f1"] == 1.0  # category 5: "not mentioned"
    assert recs["syn-1#3"]["f1"] == 0.0
    assert "Use DATE of CONVERSATION" in llm.prompts[3]
    assert "fake-reader-1" in format_tables(res)


def _locomo_args(data: Path, out: Path, *, budgets: str, systems: str) -> list[str]:
    """``lamina eval locomo`` on the hashing embedder, quiet, its vectors cached beside the data."""
    return [
        "eval",
        "locomo",
        "--data",
        str(data),
        "--embedder",
        "hashing",
        "--budgets",
        budgets,
        "--systems",
        systems,
        "--out",
        str(out),
        "--quiet",
        "--cache",
        str(data / "v.sqlite"),
    ]


def test_cli_eval_locomo(tmp_path, capsys):
    data = tmp_path / "locomo_dev.json"
    data.write_text(json.dumps([dict(_sample())]))
    out = tmp_path / "res.json"
    rc = main(_locomo_args(tmp_path, out, budgets="32,64", systems="bm25,lamina"))
    assert rc == 0
    text = capsys.readouterr().out
    assert "1 conversations" in text and "budget 64 tokens" in text and "reader: skipped" in text
    res = json.loads(out.read_text())  # strict JSON: NaN written as null
    assert set(res["results"]) == {"bm25", "lamina"}
    assert res["dataset"]["load_report"]["questions"] == 6
    assert res["embedder"]["from_cache"] == 0 and res["embedder"]["texts_embedded"] > 0
    # a rerun embeds nothing: every vector comes back from the cache file
    rc = main(_locomo_args(tmp_path, out, budgets="32", systems="bm25"))
    assert rc == 0 and "read from the cache" in capsys.readouterr().out
    res2 = json.loads(out.read_text())
    # (the first run also embedded lamina's summaries and facts; this one needs turns and questions)
    assert (
        res2["embedder"]["texts_embedded"] == 0
        and 0 < res2["embedder"]["from_cache"] <= res["embedder"]["texts_embedded"]
    )
    assert main(["eval", "locomo", "--data", str(tmp_path / "missing.json")]) == 2
    with pytest.raises(SystemExit):
        main(["eval", "locomo", "--budgets", "0,5"])


def test_cached_embedder_file_round_trip(tmp_path):
    from lamina.eval.systems import CachedEmbedder

    texts = ["I moved to Paris", "my dog is called Max", "I moved to Paris", "ünïcode ✓"]
    a = CachedEmbedder(Hashing(dim=64), str(tmp_path / "c" / "v.sqlite"))
    Ea = a.embed(texts)
    assert a.embedded == 3 and a.from_disk == 0
    a.close()
    b = CachedEmbedder(Hashing(dim=64), str(tmp_path / "c" / "v.sqlite"))
    Eb = b.embed(texts[::-1])
    assert b.embedded == 0 and b.from_disk == 3
    np.testing.assert_array_equal(Eb[::-1], Ea)  # bit for bit
    # another model (here: another dim) never reads these vectors
    c = CachedEmbedder(Hashing(dim=32), str(tmp_path / "c" / "v.sqlite"))
    assert c.embed(texts[:1]).shape == (1, 32) and c.embedded == 1
    b.close(), c.close()


def test_cached_embedder_keeps_late_vectors_apart_and_on_disk(tmp_path, minilm_model):
    """Late-chunked vectors are stored under their own key (model + "/late", text and spans): a
    second embedder on the file encodes nothing, and the plain vector of the text is not one of them."""
    from lamina.eval.systems import CachedEmbedder

    text = "Thanks! I adopted a grey kitten. Her name is Luna and she sleeps a lot."
    spans = [[(8, 32), (33, len(text))]]
    a = CachedEmbedder(minilm_model, str(tmp_path / "v.sqlite"))
    (sa,) = a.embed_spans([text], spans)
    assert a.embedded == 1 and sa.spans.shape == (2, 384)
    a.close()
    b = CachedEmbedder(minilm_model, str(tmp_path / "v.sqlite"))
    (sb,) = b.embed_spans([text], spans)
    assert b.embedded == 0 and b.from_disk == 1
    np.testing.assert_array_equal(sb.spans, sa.spans)
    np.testing.assert_array_equal(sb.whole, sa.whole)
    # other spans of the same text are other vectors; the plain text is embedded on its own
    (sc,) = b.embed_spans([text], [[(8, 32)]])
    assert b.embedded == 1 and sc.spans.shape == (1, 384)
    b.embed([text])
    assert b.embedded == 2
    b.close()


def test_cached_embedder_late_spans_without_an_encoder_embed_each_span():
    from lamina.eval.systems import CachedEmbedder

    h = Hashing(dim=64)
    e = CachedEmbedder(h)
    text = "I moved to Paris. My dog is called Max."
    (sv,) = e.embed_spans([text], [[(0, 17), (18, len(text))]])
    np.testing.assert_array_equal(sv.whole, h.embed([text])[0])
    np.testing.assert_array_equal(sv.spans, h.embed(["I moved to Paris.", "My dog is called Max."]))
    with pytest.raises(ValueError, match="spans"):
        e.embed_spans([text], [[(5, 500)]])


def test_run_locomo_rejects_bad_arguments(synthetic):
    convs, _ = synthetic
    with pytest.raises(ValueError, match="budgets"):
        run_locomo(convs, Hashing(), budgets=[0], progress=None)
    with pytest.raises(ValueError, match="unknown system"):
        run_locomo(convs, Hashing(), systems=["nope"], progress=None)


@pytest.mark.data
def test_first_locomo_conversation():
    convs, rep = load_locomo(SHARED_DATA / "locomo", limit=1)
    assert rep.questions == 199 and rep.turns == 419
    res = run_locomo(
        convs, Hashing(), budgets=[1024], systems=["recency", "bm25", "lamina"], progress=None, load_report=rep
    )
    bm, rc, lam = (res["results"][s]["1024"] for s in ("bm25", "recency", "lamina"))
    assert bm["evidence_recall"]["overall"] > rc["evidence_recall"]["overall"]
    for a in (bm, rc, lam):
        assert a["context_usage"] <= 0.1  # 1024 tokens of a ~14k-token history
        assert not math.isnan(a["evidence_recall"]["overall"])
    assert res["dataset"]["questions_per_category"]["adversarial"] == 47


def _audit_file(tmp_path: Path) -> Path:
    entries = [
        # a wrong citation: the puppy's evidence is said to be Bob's turn of session 1
        {"question_id": "locomo_0_qa0", "sample_id": "syn-1", "question": "What is the name of Alice's puppy?",
         "category": 4, "error_type": "WRONG_CITATION", "cited_evidence": ["D1:1"], "correct_evidence": ["D1:2"]},
        # a hallucinated answer: the question leaves the corrected gold
        {"question_id": "locomo_0_qa1", "sample_id": "syn-1", "question": "What instrument is Bob learning?",
         "category": 4, "error_type": "HALLUCINATION", "correct_evidence": ["D2:1"]},
        # a question text that differs from the data: reported, not applied
        {"question_id": "locomo_0_qa3", "sample_id": "syn-1", "question": "When did Bob run?",
         "category": 2, "error_type": "WRONG_CITATION", "correct_evidence": ["D4:2"]},
        {"question_id": "locomo_9_qa0", "sample_id": "conv-99", "question": "?", "error_type": "AMBIGUOUS"},
    ]  # fmt: skip
    p = tmp_path / "audit_errors_dev.json"
    p.write_text(json.dumps(entries))
    return p


def test_audit_corrections_are_matched_checked_and_applied(synthetic, tmp_path):
    from lamina.eval.locomo import load_audit

    convs, _ = synthetic
    audit = load_audit(_audit_file(tmp_path), convs)
    q = convs[0].questions
    assert audit.evidence(q[0]) == ("D1:2",) and audit.evidence(q[1]) is None
    assert audit.evidence(q[3]) == q[3].evidence and audit.evidence(q[4]) == q[4].evidence
    assert (audit.corrected, audit.dropped) == (1, 1)
    assert sorted(audit.unmatched) == ["locomo_0_qa3", "locomo_9_qa0"]
    with pytest.raises(ValueError, match="audit"):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"question_id": 1}))
        load_audit(bad, convs)


def test_both_golds_and_their_intervals_are_reported(synthetic, tmp_path):
    from lamina.eval.locomo import load_audit
    from lamina.eval.scoring import wilson_interval

    convs, rep = synthetic
    audit = load_audit(_audit_file(tmp_path), convs)
    res = run_locomo(convs, Hashing(), budgets=[16], systems=["bm25"], progress=None, audit=audit, retention=False)
    by_q = {r["qid"]: r for r in res["per_question"]["bm25"][16]}
    # bm25's one-turn context for the puppy question is Alice's keyword turn: right on the
    # original gold, wrong on the corrected one; the dropped question has no corrected score
    assert by_q["syn-1#0"]["ev"] == 1.0 and by_q["syn-1#0"]["ev_audit"] == 0.0
    assert by_q["syn-1#1"]["ev_audit"] is None and by_q["syn-1#1"]["ev"] is not None
    a = res["results"]["bm25"]["16"]
    single = [r["ev_audit"] for r in by_q.values() if r["cat"] == 4 and r["ev_audit"] is not None]
    assert a["evidence_recall_audit"]["single-hop"] == pytest.approx(sum(single) / len(single))
    ci = a["evidence_recall_ci95"]["overall"]
    assert ci["n"] == 5 and ci["low"] <= a["evidence_recall"]["overall"] <= ci["high"]
    assert res["dataset"]["audit"]["dropped"] == 1
    assert "audit-corrected gold (1 corrected, 1 dropped)" in format_tables(res)
    # the interval itself: a textbook value, and its edges
    lo, hi = wilson_interval(0.5, 100)
    assert (round(lo, 4), round(hi, 4)) == (0.4038, 0.5962)
    assert wilson_interval(0.0, 10)[0] == 0.0 and wilson_interval(1.0, 10)[1] == pytest.approx(1.0)
    assert all(math.isnan(x) for x in wilson_interval(0.5, 0))
    with pytest.raises(ValueError):
        wilson_interval(1.5, 3)


def test_cli_local_reader_scores_a_question_subset(tmp_path, capsys):
    from llmkit import MISSING

    if MISSING:
        pytest.skip(f"the local reader needs {', '.join(MISSING)}")
    data = tmp_path / "locomo_dev.json"
    data.write_text(json.dumps([dict(_sample())]))
    out = tmp_path / "res.json"
    argv = ["eval", "locomo", "--data", str(tmp_path), "--embedder", "hashing", "--budgets", "64",
            "--systems", "bm25,recency", "--no-retention", "--quiet", "--no-cache", "--audit", "none",
            "--reader", "local", "--reader-budget", "64", "--questions-per-conversation", "3", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "reader: local:SmolLM2-135M-Instruct.Q4_1.gguf" in text and "F1" in text
    res = json.loads(out.read_text())
    assert res["reader"]["model"].startswith("local:") and res["dataset"]["load_report"]["questions"] == 3
    recs = res["per_question"]["bm25"]["64"]
    assert [r["qid"] for r in recs] == ["syn-1#0", "syn-1#2", "syn-1#4"]  # every 2nd of 6: each category kept
    assert all(isinstance(r["pred"], str) and 0.0 <= r["f1"] <= 1.0 for r in recs)
    assert main([*argv[:-2], "--questions-per-conversation", "0"]) == 2


class _FirstLineLLM(_RecordingLLM):
    """Answers with the context's first ``Speaker: text`` line, so its F1 depends on the order."""

    model = "first-line-1"

    def answer(self, p):
        ctx = p.split("\n\n", 1)[1].rsplit("\n\n", 1)[0]
        lines = [ln for ln in ctx.splitlines() if not ln.startswith("[")]
        return lines[0].split(": ", 1)[-1] if lines else "nothing"


def test_reader_answers_the_same_items_in_each_order(synthetic):
    from lamina.eval.harness import order_stats

    convs, _ = synthetic
    llm = _FirstLineLLM()
    orders = ["lost-in-the-middle", "score", "reversed"]
    res = run_locomo(
        convs, Hashing(), budgets=[40], systems=["lamina"], retention=False,
        reader=Reader(llm), reader_budget=40, progress=None, orders=orders,
    )  # fmt: skip
    assert res["reader"]["orders"] == orders
    recs = res["per_question"]["lamina"][40]
    assert len(llm.prompts) == 3 * len(recs)  # one answer per order per question
    for i, r in enumerate(recs):
        assert set(r["orders"]) == set(orders)
        assert (
            r["pred"] == r["orders"]["lost-in-the-middle"]["pred"]
            and r["f1"] == r["orders"]["lost-in-the-middle"]["f1"]
        )
        ps = llm.prompts[3 * i : 3 * i + 3]
        # the same lines (items, headers, question) in every order's prompt
        assert len({tuple(sorted(p.splitlines())) for p in ps}) == 1
    assert any(len({p for p in llm.prompts[3 * i : 3 * i + 3]}) > 1 for i in range(len(recs)))  # order moved something
    st = res["results"]["lamina"]["40"]["reader_orders"]
    assert st["questions"] == len(recs) and st["base"] == "lost-in-the-middle"
    for o in orders:
        f1 = [r["orders"][o]["f1"] for r in recs if r["cat"] != 5]
        assert st["f1"][o]["overall (1-4)"] == pytest.approx(sum(f1) / len(f1))
        lo, hi = st["ci95"][o]["overall (1-4)"]
        assert lo <= st["f1"][o]["overall (1-4)"] <= hi
    for o in orders[1:]:
        d = st["diff"][o]["overall (1-5)"]
        assert d["mean"] == pytest.approx(
            st["f1"][o]["overall (1-5)"] - st["f1"]["lost-in-the-middle"]["overall (1-5)"]
        )
        assert d["low"] <= d["mean"] <= d["high"]
    text = format_tables(res)
    assert "by context order" in text and "reversed - lost-in-the-middle (paired, points)" in text
    # identical answers in every order: every paired difference is exactly 0
    same = [{"cat": 4, "orders": {o: {"f1": 0.5} for o in orders}} for _ in range(5)]
    z = order_stats(same, orders)["diff"]["score"]["overall (1-4)"]
    assert (z["mean"], z["low"], z["high"]) == (0.0, 0.0, 0.0)


def test_orders_are_refused_where_they_mean_nothing(synthetic):
    convs, _ = synthetic
    kw = dict(budgets=[40], retention=False, progress=None)
    with pytest.raises(ValueError, match="raw-turn baselines"):
        run_locomo(convs, Hashing(), systems=["lamina", "bm25"], reader=Reader(_FakeLLM()), reader_budget=40,
                   orders=["score"], **kw)  # fmt: skip
    with pytest.raises(ValueError, match="need a reader"):
        run_locomo(convs, Hashing(), systems=["lamina"], orders=["score"], **kw)
    with pytest.raises(ValueError, match="unknown context order"):
        run_locomo(convs, Hashing(), systems=["lamina"], reader=Reader(_FakeLLM()), reader_budget=40,
                   orders=["score", "middle"], **kw)  # fmt: skip
    with pytest.raises(ValueError, match="distinct"):
        run_locomo(convs, Hashing(), systems=["lamina"], reader=Reader(_FakeLLM()), reader_budget=40,
                   orders=["score", "score"], **kw)  # fmt: skip


def test_cli_orders_option_parses_and_rejects(tmp_path, capsys):
    from lamina.cli.eval_commands import _orders

    assert _orders("lost-in-the-middle, score,reversed") == ["lost-in-the-middle", "score", "reversed"]
    data = tmp_path / "locomo_dev.json"
    data.write_text(json.dumps([dict(_sample())]))
    base = ["eval", "locomo", "--data", str(tmp_path), "--embedder", "hashing", "--budgets", "64",
            "--no-retention", "--quiet", "--no-cache", "--audit", "none"]  # fmt: skip
    for bad in ("score,sideways", "", "score,score"):
        with pytest.raises(SystemExit) as e:
            main([*base, "--orders", bad])
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown context order 'sideways'" in err and "repeats an order" in err
    assert main([*base, "--orders", "score", "--systems", "bm25", "--reader", "local"]) == 2
    assert "lamina's contexts only" in capsys.readouterr().err
    assert main([*base, "--orders", "score"]) == 2  # no reader
    assert "needs a reader" in capsys.readouterr().err
