"""``lamina demo``: a bundled, deterministic multi-user conversation run through the memory loop.

The generator writes (no external data) one long conversation per user between two personas
over many dated weekly sessions: facts that change over time (city, job), facts stated once
(pet, sibling, favourite food), dated events ("yesterday I ran my first marathon"), distractor
statements by the other speaker using the same templates about themselves, and small talk.
Questions with known answers and gold evidence turns are asked after the first period and
after the whole history; the run reports evidence recall, context usage, retention across
sessions, supersession correctness and add/context latency, and leaves the memory in a SQLite
file.
"""

from __future__ import annotations

import datetime as _dt
import os
import random
import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from .progress import ProgressBar

if TYPE_CHECKING:
    from ..memory import Memory

__all__ = ["Conversation", "Question", "generate", "run_demo"]

NAMES = ["Alice", "Bruno", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Keiko", "Liam"]
CITIES = [
    "Paris",
    "Berlin",
    "Lisbon",
    "Toronto",
    "Osaka",
    "Nairobi",
    "Denver",
    "Prague",
    "Madrid",
    "Oslo",
    "Seattle",
    "Dublin",
    "Vienna",
    "Austin",
]
JOBS = [
    "nurse",
    "architect",
    "chef",
    "teacher",
    "software engineer",
    "photographer",
    "pilot",
    "pharmacist",
    "journalist",
    "carpenter",
]
PETS = [
    ("dog", ["Max", "Biscuit", "Rocky", "Pepper"]),
    ("cat", ["Luna", "Mochi", "Tiger", "Olive"]),
    ("parrot", ["Kiwi", "Mango", "Rio"]),
    ("rabbit", ["Clover", "Hazel"]),
]
FOODS = ["sushi", "lasagna", "ramen", "tacos", "paella", "dumplings", "falafel", "curry"]
SIBLINGS = ["Ana", "Tomas", "Priya", "Yusuf", "Mei", "Oscar", "Sofia", "Lars"]
EVENTS = [
    ("ran my first marathon", "run a marathon"),
    ("went to a jazz concert", "go to a jazz concert"),
    ("visited my grandmother", "visit their grandmother"),
    ("started pottery classes", "start pottery classes"),
    ("got my driving license", "get a driving license"),
    ("adopted a bonsai tree", "adopt a bonsai tree"),
    ("climbed a volcano", "climb a volcano"),
    ("baked sourdough bread", "bake sourdough bread"),
]
SMALL_TALK = [
    "How has your week been?",
    "Pretty busy, but good overall.",
    "Did you catch the game on Sunday?",
    "I have been trying to sleep earlier.",
    "The weather keeps changing every day.",
    "I finished a great book.",
    "We should plan a video call with everyone.",
    "Work has been hectic lately.",
    "I tried a new coffee place.",
    "My neighbours are renovating again.",
    "I started learning a few words of Italian.",
    "That reminds me of our trip years ago.",
    "Haha, that is so true.",
    "I need a vacation soon.",
    "I watched a documentary about octopuses.",
    "My phone screen cracked this morning.",
    "Let us catch up again next week.",
    "Take care and talk soon!",
    "I am thinking of repainting my room.",
    "The traffic was terrible today.",
]


@dataclass
class Question:
    """A question with its answer and gold evidence (source ids of the turns stating it)."""

    user_id: str
    text: str
    answer: str
    evidence: list[str]
    kind: str  # current | stable | event
    subject: str
    stale: list[str] = field(default_factory=list)  # superseded values (for current questions)
    period: int = 0  # session index of the evidence


@dataclass
class Conversation:
    """One user's conversation: sessions of dated messages, and questions about them."""

    user_id: str
    speakers: tuple[str, str]
    sessions: list[tuple[str, list[dict[str, Any]]]]
    questions: list[Question]

    def turns(self) -> Iterator[dict[str, Any]]:
        for _sid, msgs in self.sessions:
            yield from msgs


def generate(n_users: int = 4, n_sessions: int = 12, turns_per_session: int = 24, seed: int = 7) -> list[Conversation]:
    """Build the demo conversations (deterministic for a given seed)."""
    rng = random.Random(seed)
    start = _dt.datetime(2023, 1, 2, 18, 0, tzinfo=_dt.timezone.utc)
    convs = []
    for ui in range(n_users):
        a, b = rng.sample(NAMES, 2)
        uid = f"user{ui}"
        persona: dict[str, dict[str, Any]] = {}
        for p in (a, b):
            pet_kind, pet_names = rng.choice(PETS)
            persona[p] = {
                "city": rng.choice(CITIES),
                "job": rng.choice(JOBS),
                "pet": (pet_kind, rng.choice(pet_names)),
                "food": rng.choice(FOODS),
                "sibling": rng.choice(SIBLINGS),
            }
        # When facts change: a's city changes ~3 times, job once; b's city once (distractor).
        moves = {
            p: sorted(rng.sample(range(2, n_sessions), k=min(3 if p == a else 1, max(1, n_sessions - 2))))
            for p in (a, b)
        }
        job_change = {p: rng.randrange(3, n_sessions) if n_sessions > 3 else None for p in (a, b)}
        events = {p: rng.sample(EVENTS, k=min(3, len(EVENTS))) for p in (a, b)}
        event_sess = {p: sorted(rng.sample(range(n_sessions), k=len(events[p]))) for p in (a, b)}
        sessions = []
        evidence: dict[tuple[str, str], list[tuple[str, str, int]]] = {}  # (speaker, slot) -> [(value, src, sess)]
        event_ev: list[tuple[str, str, str, float, int]] = []
        for s in range(n_sessions):
            day = start + _dt.timedelta(days=7 * s + rng.randrange(0, 3))
            lines: list[tuple[str, str, tuple[str, str] | None]] = []
            for p in (a, b):
                st = persona[p]
                if s == 0:
                    lines.append((p, f"I live in {st['city']} these days.", ("city", st["city"])))
                    lines.append((p, f"I work as a {st['job']}.", ("job", st["job"])))
                    lines.append((p, f"My {st['pet'][0]} is called {st['pet'][1]}.", ("pet", st["pet"][1])))
                    lines.append((p, f"My favorite food is {st['food']}.", ("food", st["food"])))
                    lines.append((p, f"My sister is called {st['sibling']}.", ("sibling", st["sibling"])))
                if s in moves[p]:
                    new = rng.choice([c for c in CITIES if c != st["city"]])
                    st["city"] = new
                    lines.append((p, f"Big news: I moved to {new} last week!", ("city", new)))
                if job_change[p] == s:
                    new = rng.choice([j for j in JOBS if j != st["job"]])
                    st["job"] = new
                    lines.append((p, f"I quit my old job and I work as a {new} now.", ("job", new)))
                for ev, when in zip(events[p], event_sess[p]):
                    if when == s:
                        lines.append((p, f"Yesterday I {ev[0]}, it was amazing.", ("event:" + ev[1], ev[0])))
            while len(lines) < turns_per_session:
                lines.append((rng.choice((a, b)), rng.choice(SMALL_TALK), None))
            rng.shuffle(lines)
            msgs = []
            for i, (sp, tx, tag) in enumerate(lines):
                sid = f"{uid}:S{s + 1}:{i + 1}"
                t = (day + _dt.timedelta(minutes=2 * i)).timestamp()
                msgs.append({"speaker": sp, "text": tx, "id": sid, "timestamp": t})
                if tag is not None:
                    if tag[0].startswith("event:"):
                        event_ev.append((sp, tag[0][6:], sid, t - 86400, s))
                    else:
                        evidence.setdefault((sp, tag[0]), []).append((tag[1], sid, s))
            sessions.append((f"S{s + 1}", msgs))
        qs: list[Question] = []
        for p in (a, b):
            for fact, ask in (("city", f"Where does {p} live now?"), ("job", f"What does {p} do for work these days?")):
                hist = evidence[(p, fact)]
                qs.append(
                    Question(
                        uid,
                        ask,
                        hist[-1][0],
                        [hist[-1][1]],
                        "current",
                        p,
                        stale=[v for v, _, _ in hist[:-1] if v != hist[-1][0]],
                        period=hist[-1][2],
                    )
                )
            pet = evidence[(p, "pet")][0]
            qs.append(
                Question(uid, f"What is the name of {p}'s {persona[p]['pet'][0]}?", pet[0], [pet[1]], "stable", p)
            )
            food = evidence[(p, "food")][0]
            qs.append(Question(uid, f"What is {p}'s favorite food?", food[0], [food[1]], "stable", p))
            sib = evidence[(p, "sibling")][0]
            qs.append(Question(uid, f"What is the name of {p}'s sister?", sib[0], [sib[1]], "stable", p))
        for sp, happened, sid, t, s in event_ev:
            date = _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).strftime("%Y-%m-%d")
            qs.append(Question(uid, f"When did {sp} {happened}?", date, [sid], "event", sp, period=s))
        convs.append(Conversation(uid, (a, b), sessions, qs))
    return convs


# ---- running ---------------------------------------------------------------------------------


def _norm_tokens(s: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", s.lower()) if w not in {"a", "an", "the", "and"}]


def _ask(
    mem: Memory, q: Question, budget: int, now: float, turns: dict[str, str], history_tokens: int
) -> dict[str, Any]:
    t0 = time.perf_counter()
    ctx = mem.context(q.text, user_id=q.user_id, budget=budget, now=now)
    dt = time.perf_counter() - t0
    text = ctx.render()
    ev = [s for s in q.evidence]
    ev_hit = sum(1 for s in ev if turns[s] in text) / len(ev)
    ans = _norm_tokens(q.answer)
    low = set(_norm_tokens(text))
    ans_hit = sum(1 for w in ans if w in low) / max(1, len(ans))
    out = {
        "evidence": ev_hit,
        "answer": ans_hit,
        "usage": ctx.tokens / max(1, history_tokens),
        "latency": dt,
        "abstain": ctx.abstain,
    }
    if q.kind == "current":
        # supersession: the best-scored item naming any value of this slot names the current one
        vals = [q.answer] + q.stale
        best = None
        for it in sorted(ctx.items, key=lambda x: -x.score):
            r = it.render().lower()
            if any(re.search(r"\b" + re.escape(v.lower()) + r"\b", r) for v in vals):
                best = r
                break
        out["supersession"] = float(
            best is not None
            and bool(re.search(r"\b" + re.escape(q.answer.lower()) + r"\b", best))
            and not any(re.search(r"\b" + re.escape(v.lower()) + r"\b", best) for v in q.stale)
        )
        pred = "lives_in" if "live" in q.text else "works_as"
        cur = [f.object for f in mem.facts(user_id=q.user_id, subject=q.subject) if f.predicate == pred]
        out["fact_current"] = float(cur == [q.answer])
    return out


def run_demo(
    db_path: str = "lamina-demo.db",
    users: int = 6,
    sessions: int = 20,
    turns: int = 30,
    budget: int = 256,
    seed: int = 7,
    embedder: str = "hashing",
    out: TextIO = sys.stdout,
    progress: bool = True,
) -> dict[str, Any]:
    """Generate, ingest, ask; print the results table; return the numbers."""
    from ..memory import Memory

    convs = generate(users, sessions, turns, seed)
    for suffix in ("", "-wal", "-shm", "-lock"):
        if os.path.exists(db_path + suffix):
            os.remove(db_path + suffix)
    mem = Memory(db_path, embedder=embedder)
    texts = {m["id"]: m["text"] for c in convs for m in c.turns()}
    n_turns = len(texts)
    out.write(
        f"lamina demo: {len(convs)} users x {sessions} sessions x {turns} turns = {n_turns} turns, "
        f"embedder {mem.embedder.name}"
        + (
            " (lexical, quick; --embedder auto: MiniLM, semantic, about 2 minutes)"
            if mem.embedder.name.startswith("hashing")
            else ""
        )
        + f", budget {budget} tokens\n"
    )
    bar = ProgressBar(n_turns, "ingest", sys.stderr, show="rate") if progress else None
    add_lat: list[float] = []
    early: dict[int, dict[str, Any]] = {}
    hist_tokens: dict[str, int] = {c.user_id: 0 for c in convs}
    t_start = time.perf_counter()
    for c in convs:
        for si, (sid, msgs) in enumerate(c.sessions):
            for m in msgs:
                t0 = time.perf_counter()
                mem.add([m], user_id=c.user_id, session_id=sid)
                add_lat.append(time.perf_counter() - t0)
                hist_tokens[c.user_id] += len(f"{m['speaker']}: {m['text']}".split())
                if bar:
                    bar.update()
            mem.end_session(user_id=c.user_id, session_id=sid)
            if si == 0:  # period 1: ask the questions whose evidence is in the first session
                now = msgs[-1]["timestamp"] + 3600
                for q in c.questions:
                    if q.kind != "current" and q.period == 0:
                        early[id(q)] = _ask(mem, q, budget, now, texts, hist_tokens[c.user_id])
    ingest_s = time.perf_counter() - t_start
    results: list[tuple[Question, dict[str, Any]]] = []
    qbar = ProgressBar(sum(len(c.questions) for c in convs), "questions", sys.stderr, show="rate") if progress else None
    for c in convs:
        now = c.sessions[-1][1][-1]["timestamp"] + 86400
        for q in c.questions:
            results.append((q, _ask(mem, q, budget, now, texts, hist_tokens[c.user_id])))
            if qbar:
                qbar.update()
    st = mem.stats().to_dict()
    mem.close()

    def mean(xs: Iterable[float]) -> float:
        v = list(xs)
        return float(np.mean(v)) if v else float("nan")

    ret_q = [(q, r) for q, r in results if id(q) in early]
    base = mean(early[id(q)]["evidence"] for q, _ in ret_q)
    after = mean(r["evidence"] for _, r in ret_q)
    cur = [r for q, r in results if q.kind == "current"]
    ctx_lat = np.array([r["latency"] for _, r in results]) * 1e3
    add_ms = np.array(add_lat) * 1e3
    rows = [
        (f"evidence recall@{budget} (all questions)", f"{mean(r['evidence'] for _, r in results):.3f}"),
        ("  current-state questions", f"{mean(r['evidence'] for q, r in results if q.kind == 'current'):.3f}"),
        (
            "  stable facts (stated in session 1)",
            f"{mean(r['evidence'] for q, r in results if q.kind == 'stable'):.3f}",
        ),
        ("  dated events", f"{mean(r['evidence'] for q, r in results if q.kind == 'event'):.3f}"),
        ("answer-token recall", f"{mean(r['answer'] for _, r in results):.3f}"),
        ("context usage (context / history tokens)", f"{mean(r['usage'] for _, r in results):.2%}"),
        (
            f"retention: recall after {sessions} sessions / after 1",
            f"{after:.3f} / {base:.3f} = {after / base:.2%}" if base > 0 else "n/a",
        ),
        ("supersession: current value ranked above stale", f"{mean(r['supersession'] for r in cur):.3f}"),
        ("supersession: semantic fact is the current value", f"{mean(r['fact_current'] for r in cur):.3f}"),
        ("abstained", f"{sum(r['abstain'] for _, r in results)}/{len(results)}"),
        (
            "add latency p50 / p99 (ms, 1 turn per call)",
            f"{np.percentile(add_ms, 50):.2f} / {np.percentile(add_ms, 99):.2f}",
        ),
        (
            "context latency p50 / p99 (ms, incl. embedding)",
            f"{np.percentile(ctx_lat, 50):.2f} / {np.percentile(ctx_lat, 99):.2f}",
        ),
        ("ingest time (s, incl. end_session)", f"{ingest_s:.1f}"),
        (
            "memory: items / facts current / superseded",
            f"{st['items']} / {st['facts_current']} / {st['facts_superseded']}",
        ),
        (
            "profile drift (sum of |de|^2, updates)",
            f"{st['profile_drift']['total']:.3f}, {st['profile_drift']['updates']}",
        ),
    ]
    w = max(len(k) for k, _ in rows) + 2
    out.write("\n" + "metric".ljust(w) + "value\n" + "-" * (w + 24) + "\n")
    for k, v in rows:
        out.write(k.ljust(w) + v + "\n")
    out.write(
        f"\nmemory written to {os.path.abspath(db_path)} (reopen with lamina.Memory({db_path!r}): a database "
        f"opens with the embedder it was built with, {st['embedder']})\n"
    )
    return {"rows": dict(rows), "results": results, "stats": st}
