"""lamina eval longmemeval end to end: a tiny synthetic file in the compact LongMemEval format
(written here), real lamina.Memory with the hashing embedder, and the first dev questions when
the shared data is present."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lamina.cli import main
from lamina.embedders import Hashing
from lamina.eval.lme_harness import LME_SYSTEMS, format_lme_tables, plot_lme, run_longmemeval
from lamina.eval.lme_systems import ChunkHybrid, replay_sessions
from lamina.eval.locomo import Session, Turn
from lamina.eval.longmemeval import load_longmemeval, parse_lme_date
from lamina.eval.systems import CachedEmbedder
from lamina.memory import Memory

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def _u(text: str, ev: bool = False) -> dict[str, Any]:
    return {"role": "user", "content": text, **({"has_answer": True} if ev else {})}


def _a(text: str, ev: bool = False) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **({"has_answer": True} if ev else {})}


_SESSIONS = {
    "filler_1": [
        _u("What is a good recipe for banana bread?"),
        _a("Mix ripe bananas, flour, sugar and eggs, then bake for an hour."),
    ],
    "filler_2": [
        _u("How do I fix a flat bicycle tire?"),
        _a("Remove the wheel, patch the inner tube and inflate it again."),
        _u("   "),  # an empty turn: never ingested
    ],
    "filler_3": [
        _u("Tell me about the history of the Roman empire."),
        _a("The Roman empire lasted for centuries and built roads, aqueducts and cities."),
    ],
    "answer_k1_1": [
        _u("I moved my old sneakers to a shoe rack in my closet.", ev=True),
        _a("A shoe rack keeps sneakers tidy."),
    ],
    "answer_u2_1": [_u("I adopted a grey cat named Pixel last month.", ev=True), _a("Pixel is a cute name for a cat.")],
    "answer_a3_1": [
        _u("Can you recommend a hiking trail near Denver?"),
        _a("Try the Mount Falcon trail west of Denver, about four miles long.", ev=True),
    ],
    "answer_x4_abs_1": [_u("I bought a blue kayak for the lake."), _a("Kayaking on a lake is relaxing.")],
}

# the gold answers carry a marker that no turn holds: it must never reach a memory
_QUESTIONS = [
    ("k1", "knowledge-update", "Where do I keep my old sneakers?", "shoe rack (gold-k1)", ["answer_k1_1"]),
    ("u2", "single-session-user", "What is the name of my cat?", "Pixel (gold-u2)", ["answer_u2_1"]),
    (
        "a3",
        "single-session-assistant",
        "Which trail near Denver did you recommend?",
        "Mount Falcon (gold-a3)",
        ["answer_a3_1"],
    ),
    ("x4_abs", "single-session-user", "What color is my canoe?", "not mentioned (gold-x4)", ["answer_x4_abs_1"]),
]


def _dataset() -> dict[str, Any]:
    qs = []
    for i, (qid, qtype, question, answer, ans) in enumerate(_QUESTIONS):
        hay = ["filler_1", "filler_2", *ans, "filler_3"]
        # dates out of file order (the runner adds sessions in date order)
        dates = ["2023/05/02 (Tue) 10:00", "2023/05/01 (Mon) 09:00", "2023/05/03 (Wed) 12:30", "2023/05/04 (Thu) 08:00"]
        if i == 0:  # a session dated after the question, on its day: still seen
            dates[-1] = "2023/05/10 (Wed) 23:00"
        qs.append(
            {
                "question_id": qid,
                "question_type": qtype,
                "question": question,
                "question_date": "2023/05/10 (Wed) 09:00",
                "answer": answer,
                "answer_session_ids": ans,
                "haystack_dates": dates,
                "haystack_session_ids": hay,
            }
        )
    return {"questions": qs, "sessions": json.loads(json.dumps(_SESSIONS))}


@pytest.fixture
def lme_file(tmp_path: Path) -> Path:
    p = tmp_path / "lme.json"
    p.write_text(json.dumps(_dataset()), encoding="utf-8")
    return p


def test_load_keeps_gold_apart_and_sessions_once(lme_file: Path):
    data = load_longmemeval(lme_file)
    rep = data.report
    assert rep.questions == 4 and rep.abstention == 1
    assert rep.sessions == 7 and rep.haystack_sessions == 16  # fillers shared: stored once
    assert rep.empty_turns == 1 and rep.evidence_turns == 3 and rep.questions_without_evidence_turns == 1
    assert rep.per_type == {"knowledge-update": 1, "single-session-user": 2, "single-session-assistant": 1}
    q = data.questions[2]
    assert q.qid == "a3" and q.gold.evidence == (("answer_a3_1", 1),)
    assert q.gold.answer_session_ids == ("answer_a3_1",)
    assert q.question_date == parse_lme_date("2023/05/10 (Wed) 09:00")
    assert data.questions[3].abstention and not q.abstention
    # a session holds roles and texts only
    t = data.sessions["answer_a3_1"].turns[1]
    assert set(vars(t)) == {"role", "text"}
    assert load_longmemeval(lme_file, types=["single-session-user"], limit=1).report.questions == 1
    strat = load_longmemeval(lme_file, per_type=1)
    assert [q.qid for q in strat.questions] == ["k1", "u2", "a3"]


def test_replay_orders_by_date_and_hides_session_ids(lme_file: Path):
    data = load_longmemeval(lme_file)
    r = replay_sessions(data.questions[1], data.sessions)
    assert [r.session_of[s.number] for s in r.sessions] == ["filler_2", "filler_1", "answer_u2_1", "filler_3"]
    assert [s.number for s in r.sessions] == [1, 2, 3, 4]
    assert len(r.sessions[0].turns) == 2  # the empty turn is left out
    for s in r.sessions:
        for t in s.turns:
            assert t.speaker in ("user", "assistant")
            assert "answer" not in t.dia_id and "filler" not in t.dia_id
    assert r.key_of["3:0"] == ("answer_u2_1", 0)
    assert r.sessions[0].turns[1].timestamp == r.sessions[0].timestamp + 1


def test_parse_date():
    assert parse_lme_date("2023/05/20 (Sat) 02:21") == 1684549260.0
    with pytest.raises(ValueError, match="expected like"):
        parse_lme_date("20 May 2023")


def test_chunk_windows_overlap_by_one():
    class Spy:
        dim, name = 8, "spy"

        def embed(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 8), dtype=np.float32) / np.sqrt(8)

    ch = ChunkHybrid(CachedEmbedder(Spy()))  # type: ignore[arg-type]
    turns = tuple(Turn(f"1:{j}", 1, "user", f"turn number {j}", 100.0 + j) for j in range(13))
    ch.ingest(Session(1, 100.0, turns))
    assert ch._chunks == [[0, 1, 2, 3, 4, 5], [5, 6, 7, 8, 9, 10], [10, 11, 12]]
    ch.ingest(Session(2, 200.0, (Turn("2:0", 2, "assistant", "alone", 200.0),)))
    assert ch._chunks[-1] == [13]
    assert ch._ctexts[-1] == "[1970-01-01 00:03]\nassistant: alone"
    order, _ = ch.ranking("turn number", np.ones(8, dtype=np.float32) / np.sqrt(8), 14)
    assert sorted(order) == list(range(14)) and len(order) == 14  # every turn once
    with pytest.raises(ValueError, match="capacity"):
        ChunkHybrid(CachedEmbedder(Spy()), capacity=3)  # type: ignore[arg-type]


def test_run_scores_every_system(lme_file: Path):
    data = load_longmemeval(lme_file)
    res = run_longmemeval(data, Hashing(), budgets=[16, 4096], progress=None)
    assert res["systems"] == list(LME_SYSTEMS)
    assert res["dataset"]["late_sessions"] == 1
    for s in LME_SYSTEMS:
        a = res["results"][s]
        big = a["evidence_recall"]["4096"]
        # the whole (tiny) history fits in 4,096 tokens: every evidence turn is there
        assert big["overall"]["mean"] == 1.0 and big["overall"]["n"] == 3  # the abstention question left out
        assert a["context_tokens_mean"]["16"] <= 16
        for level in ("session", "turn"):
            assert a[level]["recall_any@10"]["overall"]["n"] == 3
        # every session of a 4-session history is within the top 5 of every ranking
        assert a["session"]["recall_all@5"]["overall"]["mean"] == 1.0
        recs = {r["qid"]: r for r in res["per_question"][s]}
        assert recs["x4_abs"]["session"] is None and recs["x4_abs"]["ev"]["4096"] is None
        assert recs["k1"]["ev"]["4096"] == 1.0  # its session dated after the question is seen
    text = format_lme_tables(res)
    assert "evidence recall at 4096 tokens" in text and "session recall_all@5" in text
    json.dumps(res)  # serialisable


def test_gold_never_reaches_a_memory(lme_file: Path, monkeypatch: pytest.MonkeyPatch):
    added: list[dict[str, Any]] = []
    sessions: list[str] = []
    real_add = Memory.add

    def spy_add(self: Memory, messages: Any, **kw: Any) -> list[int]:
        added.extend(dict(m) for m in messages)
        sessions.append(kw["session_id"])
        return real_add(self, messages, **kw)

    monkeypatch.setattr(Memory, "add", spy_add)
    embedded: list[str] = []

    class Recording(Hashing):
        def embed(self, texts: Any) -> Any:
            embedded.extend(texts)
            return super().embed(texts)

    data = load_longmemeval(lme_file)
    run_longmemeval(data, Recording(), budgets=[64], progress=None)
    assert added and embedded
    gold_sessions = {s for q in data.questions for s in q.gold.answer_session_ids}
    for m in added:
        assert set(m) <= {"speaker", "text", "id", "timestamp"}, m
        assert m["speaker"] in ("user", "assistant")
        assert "gold-" not in m["text"]
        assert not any(g in str(m["id"]) for g in gold_sessions)
    assert all(s.startswith("session_") and "answer" not in s for s in sessions)
    assert not any("gold-" in t for t in embedded)
    assert not any("has_answer" in t for t in embedded)


def test_second_run_embeds_nothing(lme_file: Path, tmp_path: Path):
    data = load_longmemeval(lme_file)
    cache = str(tmp_path / "vec.sqlite")
    first = CachedEmbedder(Hashing(), cache)
    r1 = run_longmemeval(data, first, budgets=[64], progress=None)
    first.close()
    second = CachedEmbedder(Hashing(), cache)
    r2 = run_longmemeval(data, second, budgets=[64], progress=None)
    second.close()
    # (the first run reads back, per question, the shared sessions it embedded for earlier ones)
    assert r1["embedder"]["texts_embedded"] > 0
    assert r2["embedder"]["texts_embedded"] == 0
    assert r2["embedder"]["from_cache"] >= r1["embedder"]["texts_embedded"]
    assert r1["results"] == r2["results"] or _same_scores(r1, r2)


def _same_scores(a: dict[str, Any], b: dict[str, Any]) -> bool:
    strip = ("ms", "ingest_s")
    pa = {s: [{k: v for k, v in r.items() if k not in strip} for r in rs] for s, rs in a["per_question"].items()}
    pb = {s: [{k: v for k, v in r.items() if k not in strip} for r in rs] for s, rs in b["per_question"].items()}
    return pa == pb


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not valid JSON"),
        ("[]", "expected an object"),
        ('{"questions": []}', "'sessions' is missing"),
        ('{"questions": [{"question_id": "q"}], "sessions": {}}', "lacks question_type"),
    ],
)
def test_bad_files_give_clear_errors(tmp_path: Path, content: str, message: str):
    p = tmp_path / "bad.json"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_longmemeval(p)


def test_bad_contents_name_the_problem(tmp_path: Path):
    def write(mutate: Any) -> Path:
        d = _dataset()
        mutate(d)
        p = tmp_path / "x.json"
        p.write_text(json.dumps(d), encoding="utf-8")
        return p

    with pytest.raises(ValueError, match="absent from 'sessions'"):
        load_longmemeval(write(lambda d: d["sessions"].pop("filler_3")))
    with pytest.raises(ValueError, match="expected like"):
        load_longmemeval(write(lambda d: d["questions"][0].update(question_date="yesterday")))
    with pytest.raises(ValueError, match="role 'system'"):
        load_longmemeval(write(lambda d: d["sessions"]["filler_1"][0].update(role="system")))
    with pytest.raises(ValueError, match="one length"):
        load_longmemeval(write(lambda d: d["questions"][1]["haystack_dates"].pop()))
    with pytest.raises(ValueError, match="unknown question type"):
        load_longmemeval(write(lambda d: None), types=["nope"])
    with pytest.raises(ValueError, match="per_type must be"):
        load_longmemeval(write(lambda d: None), per_type=0)
    with pytest.raises(FileNotFoundError):
        load_longmemeval(tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match="longmemeval_s_dev.json"):
        load_longmemeval(tmp_path)


def test_cli_end_to_end(lme_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "res.json"
    plots = tmp_path / "plots"
    cache = tmp_path / "c.sqlite"
    argv = ["eval", "longmemeval", "--data", str(lme_file), "--embedder", "hashing", "--budgets", "32,256"]
    argv += [
        "--cache",
        str(cache),
        "--out",
        str(out),
        "--plot",
        str(plots),
        "--quiet",
        "--types",
        "single-session-user",
    ]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res["dataset"]["questions"] == 2 and res["budgets"] == [32, 256]
    if importlib.util.find_spec("matplotlib") is not None:  # (an optional extra: without it no plot, a message)
        assert (plots / "longmemeval-overall.png").exists()
        assert (plots / "longmemeval-single-session-user.png").exists()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "0 texts embedded" in printed and "read from the cache" in printed
    assert main(["eval", "longmemeval", "--data", str(tmp_path / "none.json"), "--quiet"]) == 2
    assert "no LongMemEval file" in capsys.readouterr().err
    assert main(["eval", "longmemeval", "--data", str(lme_file), "--limit", "0", "--quiet"]) == 2
    assert "limit must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "longmemeval", "--types", "nope"])


def test_plot_without_matplotlib(lme_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    res = run_longmemeval(load_longmemeval(lme_file, limit=1), Hashing(), budgets=[64], progress=None)
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    why = plot_lme(res, str(tmp_path / "p"))
    assert why is not None and "matplotlib is not installed" in why


@pytest.mark.data
def test_first_dev_questions():
    data = load_longmemeval(SHARED_DATA / "longmemeval", limit=3)
    assert data.report.questions == 3
    res = run_longmemeval(data, Hashing(), budgets=[1024], progress=None)
    for s in LME_SYSTEMS:
        a = res["results"][s]
        assert a["context_tokens_mean"]["1024"] <= 1024
        ev = a["evidence_recall"]["1024"]["overall"]
        assert ev["n"] >= 1 and 0.0 <= ev["mean"] <= 1.0
        assert not math.isnan(a["session"]["recall_any@10"]["overall"]["mean"])
        for r in res["per_question"][s]:
            # a baseline ranks every session; lamina what its candidates reach
            assert r["ranked_sessions"] >= (1 if s == "lamina" else 10)
