"""Reading LongMemEval (Wu et al., ICLR 2025) for evaluation, keeping gold apart from turns.

The compact format of ``../shared/data/longmemeval/`` (one JSON file; a filler session shared by
many questions is stored once)::

    {"questions": [{"question_id", "question_type", "question", "question_date", "answer",
                    "answer_session_ids", "haystack_dates", "haystack_session_ids"}, ...],
     "sessions":  {"<id>": [{"role": "user" | "assistant", "content": str, "has_answer": bool?}]}}

:func:`load_longmemeval` returns :class:`LmeData` with two strictly separate parts:

* what a memory may ingest — :class:`LmeSession` objects (role and text of each turn, nothing
  else) and, per question, its haystack (session ids with their dates) and the question itself;
* the gold — :class:`LmeGold` per question: the answer, ``answer_session_ids`` and the evidence
  turns (the ``has_answer`` flags, as (session id, turn index) pairs). The flags are read here and
  nowhere else; :class:`LmeSession` does not carry them.

Session ids are gold too: an evidence session's id starts with ``answer_``. A runner must name
sessions by something else (their position in the haystack) when it feeds a memory.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LME_TYPES",
    "LmeTurn",
    "LmeSession",
    "LmeGold",
    "LmeQuestion",
    "LmeLoadReport",
    "LmeData",
    "load_longmemeval",
    "parse_lme_date",
]

#: The six question types of LongMemEval, in the order tables show them.
LME_TYPES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)
_DATE_FMT = "%Y/%m/%d (%a) %H:%M"
_ROLES = ("user", "assistant")
_Q_KEYS = (
    "question_id",
    "question_type",
    "question",
    "question_date",
    "answer",
    "answer_session_ids",
    "haystack_dates",
    "haystack_session_ids",
)


@dataclass(frozen=True)
class LmeTurn:
    """One turn as a memory may see it: the role (``user`` / ``assistant``) and the text."""

    role: str
    text: str


@dataclass(frozen=True)
class LmeSession:
    """A chat session: its id (gold-bearing: never show it to a memory) and its turns in order.
    Turn indices (positions in ``turns``) are those of the file, empty turns included."""

    sid: str
    turns: tuple[LmeTurn, ...]


@dataclass(frozen=True)
class LmeGold:
    """A question's gold, used only to score.

    Attributes
    ----------
    answer : str
        The reference answer (integers in the file are kept as their decimal text).
    answer_session_ids : tuple of str
        The evidence sessions (session-level relevance).
    evidence : tuple of (str, int)
        The evidence turns, ``(session id, turn index)``, from the ``has_answer`` flags of the
        question's haystack sessions (turn-level relevance); may be empty.
    """

    answer: str
    answer_session_ids: tuple[str, ...]
    evidence: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class LmeQuestion:
    """One question: what is asked, when, over which history, and its gold (kept apart).

    Attributes
    ----------
    qid, qtype, question : str
    question_date : float
        When the question is asked, seconds since the epoch (UTC).
    haystack : tuple of (str, float)
        The history in the file's order: (session id, session date in epoch seconds).
    gold : LmeGold
    """

    qid: str
    qtype: str
    question: str
    question_date: float
    haystack: tuple[tuple[str, float], ...]
    gold: LmeGold

    @property
    def abstention(self) -> bool:
        """An abstention question (id ending in ``_abs``): the answer is not in the history;
        LongMemEval leaves these out of retrieval scoring."""
        return self.qid.endswith("_abs")


@dataclass
class LmeLoadReport:
    """Counts of what :func:`load_longmemeval` kept."""

    questions: int = 0
    sessions: int = 0  # distinct sessions referenced by the kept questions
    haystack_sessions: int = 0  # summed over questions (shared sessions counted per question)
    turns: int = 0  # of the distinct sessions
    empty_turns: int = 0  # turns with no text (a memory cannot ingest them)
    evidence_turns: int = 0  # summed over questions
    questions_without_evidence_turns: int = 0
    abstention: int = 0
    per_type: dict[str, int] = field(default_factory=dict)


@dataclass
class LmeData:
    """Loaded questions and the sessions they reference (each stored once)."""

    questions: list[LmeQuestion]
    sessions: dict[str, LmeSession]
    report: LmeLoadReport


def parse_lme_date(s: str) -> float:
    """``"2023/05/20 (Sat) 02:21"`` → seconds since the epoch (UTC).

    Raises
    ------
    ValueError
        Any other format.
    """
    try:
        d = _dt.datetime.strptime(str(s).strip(), _DATE_FMT)
    except ValueError as e:
        raise ValueError(f"unrecognised LongMemEval date {s!r} (expected like '2023/05/20 (Sat) 02:21')") from e
    return d.replace(tzinfo=_dt.timezone.utc).timestamp()


def _bad(path: str, msg: str) -> ValueError:
    return ValueError(f"{path}: not LongMemEval data in the compact format ({msg}); see the data README")


def _session(path: str, sid: str, raw: Any) -> tuple[LmeSession, list[int]]:
    """A session and the indices of its ``has_answer`` turns."""
    if not isinstance(raw, list):
        raise _bad(path, f"session {sid!r} is not a list of turns")
    turns: list[LmeTurn] = []
    flagged: list[int] = []
    for j, t in enumerate(raw):
        if not isinstance(t, dict) or "role" not in t or "content" not in t:
            raise _bad(path, f"turn {j} of session {sid!r} lacks role or content")
        role = str(t["role"])
        if role not in _ROLES:
            raise _bad(path, f"turn {j} of session {sid!r} has role {role!r}, expected user or assistant")
        if not isinstance(t["content"], str):
            raise _bad(path, f"turn {j} of session {sid!r}: content is not a string")
        turns.append(LmeTurn(role, t["content"]))
        if t.get("has_answer") is True:
            flagged.append(j)
    return LmeSession(sid, tuple(turns)), flagged


def _question(path: str, q: Any, sessions: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(q, dict):
        raise _bad(path, "a question is not an object")
    qid = str(q.get("question_id", "?"))
    missing = [k for k in _Q_KEYS if k not in q]
    if missing:
        raise _bad(path, f"question {qid!r} lacks {', '.join(missing)}")
    ids, dates = q["haystack_session_ids"], q["haystack_dates"]
    if not isinstance(ids, list) or not isinstance(dates, list) or len(ids) != len(dates):
        raise _bad(path, f"question {qid!r}: haystack_session_ids and haystack_dates are not lists of one length")
    unknown = [str(s) for s in ids if str(s) not in sessions]
    if unknown:
        raise _bad(path, f"question {qid!r} names sessions absent from 'sessions': {unknown[:3]}")
    ans_ids = q["answer_session_ids"]
    if not isinstance(ans_ids, list):
        raise _bad(path, f"question {qid!r}: answer_session_ids is not a list")
    return q


def load_longmemeval(
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    types: Sequence[str] | None = None,
    per_type: int | None = None,
) -> LmeData:
    """Load a compact LongMemEval file (see module docs).

    Parameters
    ----------
    path : the JSON file, or a folder holding ``longmemeval_s_dev.json``
    limit : keep the first ``limit`` questions (after the type filter and ``per_type``)
    types : keep only these question types (names of :data:`LME_TYPES`)
    per_type : keep the first ``per_type`` questions of each type (the file is ordered by
        type, so ``limit`` alone takes the first types only)

    Returns
    -------
    LmeData
        Questions in file order, the sessions they reference, and the counts.

    Raises
    ------
    FileNotFoundError
        No such file (or no ``longmemeval_s_dev.json`` in the folder).
    ValueError
        Not JSON, not the compact format (the message names the first problem), an unknown
        type, a bad date, or ``limit`` / ``per_type`` < 1.
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        cand = os.path.join(p, "longmemeval_s_dev.json")
        if not os.path.isfile(cand):
            raise FileNotFoundError(f"no longmemeval_s_dev.json in {p}")
        p = cand
    if not os.path.isfile(p):
        raise FileNotFoundError(f"no LongMemEval file at {p}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if per_type is not None and per_type < 1:
        raise ValueError(f"per_type must be >= 1, got {per_type}")
    if types is not None:
        bad = [t for t in types if t not in LME_TYPES]
        if bad or not types:
            raise ValueError(f"unknown question type(s) {bad or list(types)}; expected some of {list(LME_TYPES)}")
    try:
        with open(p, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise _bad(p, "expected an object with 'questions' (a list) and 'sessions' (an object)")
    raw_sessions = data.get("sessions")
    if not isinstance(raw_sessions, dict):
        raise _bad(p, "'sessions' is missing or not an object")
    raws = [_question(p, q, raw_sessions) for q in data["questions"]]
    if types is not None:
        raws = [q for q in raws if str(q["question_type"]) in types]
    if per_type is not None:
        seen: dict[str, int] = {}
        kept = []
        for q in raws:
            t = str(q["question_type"])
            seen[t] = seen.get(t, 0) + 1
            if seen[t] <= per_type:
                kept.append(q)
        raws = kept
    if limit is not None:
        raws = raws[:limit]
    rep = LmeLoadReport()
    sessions: dict[str, LmeSession] = {}
    flags: dict[str, list[int]] = {}
    questions: list[LmeQuestion] = []
    for q in raws:
        qid, qtype = str(q["question_id"]), str(q["question_type"])
        if qtype not in LME_TYPES:
            raise _bad(p, f"question {qid!r} has type {qtype!r}, expected one of {list(LME_TYPES)}")
        hay = tuple((str(s), parse_lme_date(d)) for s, d in zip(q["haystack_session_ids"], q["haystack_dates"]))
        for sid, _ in hay:
            if sid not in sessions:
                sessions[sid], flags[sid] = _session(p, sid, raw_sessions[sid])
        evidence = tuple(dict.fromkeys((sid, j) for sid, _ in hay for j in flags[sid]))
        gold = LmeGold(str(q["answer"]), tuple(str(s) for s in q["answer_session_ids"]), evidence)
        lq = LmeQuestion(qid, qtype, str(q["question"]), parse_lme_date(q["question_date"]), hay, gold)
        questions.append(lq)
        rep.questions += 1
        rep.haystack_sessions += len(hay)
        rep.evidence_turns += len(evidence)
        rep.questions_without_evidence_turns += not evidence
        rep.abstention += lq.abstention
        rep.per_type[qtype] = rep.per_type.get(qtype, 0) + 1
    rep.sessions = len(sessions)
    rep.turns = sum(len(s.turns) for s in sessions.values())
    rep.empty_turns = sum(1 for s in sessions.values() for t in s.turns if not t.text.strip())
    return LmeData(questions, sessions, rep)
