"""Reading LoCoMo (Maharana et al., ACL 2024) for evaluation, keeping gold apart from turns.

:func:`load_locomo` returns :class:`Conversation` objects with two strictly separate parts:

* ``sessions`` — what a memory may ingest: per session its date and turns (speaker, text,
  ``dia_id`` as provenance). An image shared in a turn is ingested as the caption the dataset
  provides (``blip_caption``), appended to the turn text as ``[shares a photo: ...]``, which is
  how the official LoCoMo scripts show images to models; ``captions=False`` leaves them out.
* ``questions`` — the gold ``qa`` entries, used only to query and to score.

The annotation fields ``observation``, ``event_summary`` and ``session_summary`` are never read.
Evidence ids are parsed leniently (``'D8:6; D9:17'`` → two ids, ``'D:11:26'`` → ``D11:26``);
ids that cannot be parsed or point at no turn are kept in ``Question.bad_evidence`` and counted
in :attr:`LoadReport`.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Turn",
    "Session",
    "Question",
    "Conversation",
    "LoadReport",
    "load_locomo",
    "parse_session_date",
    "conversations_from",
    "Audit",
    "AuditEntry",
    "load_audit",
    "AUDIT_DROPPED",
]

_DATE_FMT = "%I:%M %p on %d %B, %Y"
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class Turn:
    """One conversation turn as a memory may see it."""

    dia_id: str
    session: int
    speaker: str
    text: str
    timestamp: float  # event time, seconds since the epoch (UTC)


@dataclass(frozen=True)
class Session:
    """One session of a conversation: its number (1-based), start time (epoch seconds) and turns."""

    number: int
    timestamp: float
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """A gold question (never shown to a memory while it is built)."""

    qid: str
    question: str
    category: int
    answer: str | None
    adversarial_answer: str | None
    evidence: tuple[str, ...]
    bad_evidence: tuple[str, ...] = ()


@dataclass
class Conversation:
    """A LoCoMo sample: two speakers, their sessions in order and the gold questions."""

    sample_id: str
    speakers: tuple[str, str]
    sessions: list[Session]
    questions: list[Question]

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]

    def turn_by_id(self) -> dict[str, Turn]:
        """Every turn by its dialogue id (``D<session>:<turn>``)."""
        return {t.dia_id: t for t in self.turns}


@dataclass
class LoadReport:
    """Counts of what :func:`load_locomo` read, and the evidence ids it could not use."""

    conversations: int = 0
    sessions: int = 0
    turns: int = 0
    questions: int = 0
    evidence_ids: int = 0
    malformed_evidence: list[str] = field(default_factory=list)  # could not be parsed at all
    repaired_evidence: list[str] = field(default_factory=list)  # parsed leniently
    missing_evidence: list[str] = field(default_factory=list)  # parsed, but no such turn
    empty_date_keys: int = 0  # session_<N>_date_time without a session_<N>


def parse_session_date(s: str) -> float:
    """``"1:56 pm on 8 May, 2023"`` → seconds since the epoch (UTC)."""
    try:
        d = _dt.datetime.strptime(s.strip(), _DATE_FMT)
    except ValueError as e:
        raise ValueError(f"unrecognised LoCoMo session date {s!r} (expected like '1:56 pm on 8 May, 2023')") from e
    return d.replace(tzinfo=_dt.timezone.utc).timestamp()


def _turn_text(raw: dict[str, Any], captions: bool) -> str:
    text = " ".join(str(raw.get("text", "")).split())
    cap = raw.get("blip_caption")
    if captions and isinstance(cap, str) and cap.strip():
        text = (text + " " if text else "") + f"[shares a photo: {cap.strip()}]"
    return text


def conversations_from(
    samples: list[dict[str, Any]], *, captions: bool = True, report: LoadReport | None = None
) -> list[Conversation]:
    """Build conversations from parsed LoCoMo JSON samples (see module docs)."""
    rep = report if report is not None else LoadReport()
    out: list[Conversation] = []
    for s in samples:
        sid = str(s["sample_id"])
        conv = s["conversation"]
        speakers = (str(conv["speaker_a"]), str(conv["speaker_b"]))
        numbers = sorted(int(m.group(1)) for k in conv for m in [_SESSION.fullmatch(k)] if m)
        rep.empty_date_keys += sum(
            1 for k in conv if k.endswith("_date_time") and not isinstance(conv.get(k[: -len("_date_time")]), list)
        )
        sessions: list[Session] = []
        for n in numbers:
            raw_turns = conv[f"session_{n}"]
            if not isinstance(raw_turns, list) or not raw_turns:
                continue
            t0 = parse_session_date(conv[f"session_{n}_date_time"])
            turns = []
            for i, rt in enumerate(raw_turns):
                text = _turn_text(rt, captions)
                if not text:
                    continue
                # turns of one session are one second apart, so their order survives as time
                turns.append(Turn(str(rt["dia_id"]), n, str(rt["speaker"]), text, t0 + i))
            sessions.append(Session(n, t0, tuple(turns)))
        known = {t.dia_id for se in sessions for t in se.turns}
        questions: list[Question] = []
        for i, q in enumerate(s.get("qa", [])):
            ev: list[str] = []
            bad: list[str] = []
            for e in q.get("evidence", []):
                rep.evidence_ids += 1
                found = [f"D{a}:{b}" for a, b in _EVIDENCE.findall(str(e))]
                if not found:
                    rep.malformed_evidence.append(f"{sid}: {e!r}")
                    bad.append(str(e))
                    continue
                if len(found) > 1 or found[0] != e:
                    rep.repaired_evidence.append(f"{sid}: {e!r} -> {found}")
                for f in found:
                    if f in known:
                        if f not in ev:
                            ev.append(f)
                    else:
                        rep.missing_evidence.append(f"{sid}: {f}")
                        bad.append(f)
            ans = q.get("answer")
            adv = q.get("adversarial_answer")
            questions.append(
                Question(
                    qid=f"{sid}#{i}",
                    question=str(q["question"]),
                    category=int(q["category"]),
                    answer=None if ans is None else str(ans),
                    adversarial_answer=None if adv is None else str(adv),
                    evidence=tuple(ev),
                    bad_evidence=tuple(bad),
                )
            )
        rep.conversations += 1
        rep.sessions += len(sessions)
        rep.turns += sum(len(se.turns) for se in sessions)
        rep.questions += len(questions)
        out.append(Conversation(sid, speakers, sessions, questions))
    return out


def load_locomo(
    path: str | os.PathLike[str], *, captions: bool = True, limit: int | None = None
) -> tuple[list[Conversation], LoadReport]:
    """Load a LoCoMo JSON file (the official ``locomo10.json`` format or a cut of it).

    Parameters
    ----------
    path : the JSON file, or a folder holding ``locomo_dev.json`` / ``locomo10.json``
    captions : append shared-image captions to turn texts (see module docs)
    limit : keep the first ``limit`` conversations

    Raises
    ------
    FileNotFoundError, ValueError (not LoCoMo-shaped JSON)
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        for name in ("locomo_dev.json", "locomo10.json"):
            if os.path.isfile(os.path.join(p, name)):
                p = os.path.join(p, name)
                break
        else:
            raise FileNotFoundError(f"no locomo_dev.json or locomo10.json in {p}")
    with open(p, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list) or not all(
        isinstance(s, dict) and "conversation" in s and "sample_id" in s for s in data
    ):
        raise ValueError(f"{p} is not LoCoMo data (a list of samples with sample_id and conversation)")
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        data = data[:limit]
    rep = LoadReport()
    return conversations_from(data, captions=captions, report=rep), rep


# ---- the audit's corrections -------------------------------------------------------------------

#: Error types whose question is dropped from the corrected gold (no evidence can be right).
AUDIT_DROPPED = ("HALLUCINATION", "AMBIGUOUS")


@dataclass(frozen=True)
class AuditEntry:
    """One audited question: its corrected evidence, or ``None`` when it is dropped."""

    qid: str
    error_type: str
    evidence: tuple[str, ...] | None


@dataclass
class Audit:
    """The audit's corrections keyed by :attr:`Question.qid`, and the entries that matched no
    question of the loaded conversations (other conversations, or a question text that
    differs)."""

    entries: dict[str, AuditEntry] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)

    def evidence(self, q: Question) -> tuple[str, ...] | None:
        """``q``'s evidence on the corrected gold (``None``: the question is dropped)."""
        e = self.entries.get(q.qid)
        return q.evidence if e is None else e.evidence

    @property
    def dropped(self) -> int:
        return sum(1 for e in self.entries.values() if e.evidence is None)

    @property
    def corrected(self) -> int:
        return sum(1 for e in self.entries.values() if e.evidence is not None)


def load_audit(path: str | os.PathLike[str], convs: list[Conversation]) -> Audit:
    """Read the audit's error list (``audit_errors_dev.json``: see the data README) for ``convs``.

    An entry's ``question_id`` is ``locomo_<conv index>_qa<0-based qa index>``; it is matched by
    ``sample_id`` and qa index and checked against the question's text. ``HALLUCINATION`` and
    ``AMBIGUOUS`` questions are dropped; the others take ``correct_evidence`` where it is given
    (parsed as the loader parses evidence; ids of no turn are left out) and keep their evidence
    otherwise.

    Raises
    ------
    FileNotFoundError, ValueError (not the audit's format)
    """
    with open(os.fspath(path), encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list) or not all(isinstance(e, dict) and "question_id" in e for e in data):
        raise ValueError(f"{os.fspath(path)} is not an audit error list (a list of entries with question_id)")
    by_sample = {c.sample_id: c for c in convs}
    audit = Audit()
    for e in data:
        qid_raw = str(e["question_id"])
        m = re.fullmatch(r"locomo_\d+_qa(\d+)", qid_raw)
        conv = by_sample.get(str(e.get("sample_id", "")))
        if m is None or conv is None:
            audit.unmatched.append(qid_raw)
            continue
        i = int(m.group(1))
        if i >= len(conv.questions) or " ".join(conv.questions[i].question.split()) != " ".join(
            str(e.get("question", "")).split()
        ):
            audit.unmatched.append(qid_raw)
            continue
        q = conv.questions[i]
        kind = str(e.get("error_type", ""))
        if kind in AUDIT_DROPPED:
            audit.entries[q.qid] = AuditEntry(q.qid, kind, None)
            continue
        known = conv.turn_by_id()
        fixed = [f"D{a}:{b}" for x in e.get("correct_evidence") or () for a, b in _EVIDENCE.findall(str(x))]
        ev = tuple(dict.fromkeys(f for f in fixed if f in known)) or q.evidence
        audit.entries[q.qid] = AuditEntry(q.qid, kind, ev)
    return audit
