"""The LoCoMo evaluation run behind ``lamina eval locomo``.

For each conversation and each system: replay the sessions in order (session dates as event
times, the session closed after each), then build a context for every question at every
budget, as of the end of the conversation (LoCoMo asks its questions after the whole
conversation), and score it with the retrieval metrics of docs/design.md §4
(:mod:`lamina.eval.scoring`). Questions are embedded once, before any timing, so context
latencies measure retrieval and assembly, not the query embedding (reported on its own).

Retention: the sessions are split into 6 contiguous periods; for the questions of categories 1–4
whose evidence lies wholly in period 1, evidence recall is measured on a fresh system that has
ingested period 1 and on one that has ingested all 6 periods, both under a fixed capacity of
25 % of the conversation's turns (lamina: C_e + C_s, split evenly; ``lamina +lend``: each pool
also using what the other leaves unused, ``MemoryConfig.lend_capacity``; raw-turn baselines: the
newest turns, FIFO). Retention = mean recall after 6 periods / mean recall after period 1.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, TextIO

import numpy as np

from ..cli.progress import ProgressBar
from ..embedders import Embedder
from ..llm.openai_chat import LLM
from ..memory.types import ContextOrder, context_order
from .locomo import Audit, Conversation, LoadReport, Question
from .scoring import (
    CATEGORY_NAMES,
    answer_token_recall,
    bootstrap_interval,
    context_usage,
    count_tokens,
    evidence_recall,
    false_memory,
    percentile,
    score_answer,
    wilson_interval,
)
from .systems import BASELINES, LAMINA_VARIANTS, CachedEmbedder, Ctx, make_system, render_turn

__all__ = ["ALL_SYSTEMS", "PERIODS", "RETENTION_CAPACITY", "named_speaker", "run_locomo", "order_stats", "Reader"]

ALL_SYSTEMS: tuple[str, ...] = tuple(BASELINES) + tuple(LAMINA_VARIANTS)
PERIODS = 6
RETENTION_CAPACITY = 0.25  # of the conversation's raw turns
_DAY = 86400.0


def named_speaker(question: str, speakers: Sequence[str]) -> str | None:
    """The one speaker a question names (None when it names neither or both)."""
    import re

    hits = [s for s in speakers if re.search(r"\b" + re.escape(s.lower()) + r"\b", question.lower())]
    return hits[0] if len(hits) == 1 else None


class Reader:
    """Answers a question from a context with an OpenAI-compatible chat model, with the prompts of
    the official LoCoMo scripts (short-phrase answers; category 2 asks for a date; category 5
    offers "Not mentioned in the conversation" beside the distractor)."""

    QA = (
        "Based on the above context, write an answer in the form of a short phrase for the following "
        "question. Answer with exact words from the context whenever possible.\n\nQuestion: {} Short answer:"
    )
    QA5 = "Based on the above context, answer the following question.\n\nQuestion: {} Short answer:"

    def __init__(self, llm: LLM, *, name: str | None = None) -> None:
        self.llm = llm
        self.model = name or str(getattr(llm, "model", "unknown"))

    def prompt(self, context: str, speakers: Sequence[str], q: Question) -> str:
        head = (
            f"Below are excerpts from a conversation between two people: {speakers[0]} and {speakers[1]}. "
            "Each line starts with the date and time it was said.\n\n"
        )
        text = q.question
        if q.category == 2:
            text += " Use DATE of CONVERSATION to answer with an approximate date."
        if q.category == 5:
            opts = ["Not mentioned in the conversation", q.adversarial_answer or ""]
            if hash(q.qid) % 2:  # fixed per question, like the official random order
                opts.reverse()
            text += f" Select the correct answer: (a) {opts[0]} (b) {opts[1]}. "
            return head + context + "\n\n" + self.QA5.format(text)
        return head + context + "\n\n" + self.QA.format(text)

    def answer(self, context: str, speakers: Sequence[str], q: Question) -> str:
        return self.llm.complete(
            [{"role": "user", "content": self.prompt(context, speakers, q)}], temperature=0.0, max_tokens=64
        ).strip()


def _mean(xs: Sequence[float]) -> float:
    ys = [x for x in xs if not (isinstance(x, float) and math.isnan(x))]
    return float(statistics.fmean(ys)) if ys else math.nan


def _record(
    q: Question,
    ctx: Ctx,
    latency: float,
    ev_texts: list[str],
    history_tokens: int,
    speakers: Sequence[str],
    audit_texts: list[str] | None,
) -> dict[str, Any]:
    """One question's scores. ``audit_texts``: its evidence on the audit-corrected gold (None:
    dropped there)."""
    text = ctx.render()
    toks = count_tokens(text)
    rec: dict[str, Any] = {
        "qid": q.qid,
        "cat": q.category,
        "ms": round(latency * 1e3, 4),
        "tokens": toks,
        "usage": context_usage(toks, history_tokens),
        "abstain": ctx.abstain,
        "ev": evidence_recall(ev_texts, text) if ev_texts else None,
        "ev_audit": evidence_recall(audit_texts, text) if audit_texts else None,
    }
    if q.category in (1, 2, 3, 4) and q.answer is not None:
        a = answer_token_recall(q.answer, text)
        rec["ans"] = None if math.isnan(a) else a
    if q.category == 5 and q.adversarial_answer:
        who = named_speaker(q.question, speakers)
        if who is not None:
            top = ctx.top()
            rec["fm"] = false_memory(ctx.abstain, top.parts if top else (), q.adversarial_answer, who)
    return rec


def _intervals(recs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Wilson 95 % intervals of the mean of ``key`` per category and overall (1-4), with n."""
    out: dict[str, Any] = {}
    groups = {nm: (c,) for c, nm in CATEGORY_NAMES.items()} | {"overall": (1, 2, 3, 4)}
    for nm, cats in groups.items():
        xs = [r[key] for r in recs if r["cat"] in cats and r.get(key) is not None]
        lo, hi = wilson_interval(_mean(xs), len(xs)) if xs else (math.nan, math.nan)
        out[nm] = {"n": len(xs), "low": lo, "high": hi}
    return out


def _aggregate(recs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"questions": len(recs)}
    ev: dict[str, float] = {}
    for c, nm in CATEGORY_NAMES.items():
        ev[nm] = _mean([r["ev"] for r in recs if r["cat"] == c and r["ev"] is not None])
    ev["overall"] = _mean([r["ev"] for r in recs if r["cat"] in (1, 2, 3, 4) and r["ev"] is not None])
    ev["overall_with_5"] = _mean([r["ev"] for r in recs if r["ev"] is not None])
    out["evidence_recall"] = ev
    out["evidence_recall_ci95"] = _intervals(recs, "ev")
    # the same on the audit-corrected gold (../shared/data/locomo/README.md): corrected evidence,
    # HALLUCINATION / AMBIGUOUS questions dropped; equal to the original when no audit was given
    out["evidence_recall_audit"] = {
        **{
            nm: _mean([r["ev_audit"] for r in recs if r["cat"] == c and r["ev_audit"] is not None])
            for c, nm in CATEGORY_NAMES.items()
        },
        "overall": _mean([r["ev_audit"] for r in recs if r["cat"] in (1, 2, 3, 4) and r["ev_audit"] is not None]),
    }
    out["evidence_recall_audit_ci95"] = _intervals(recs, "ev_audit")
    ans: dict[str, float] = {
        CATEGORY_NAMES[c]: _mean([r["ans"] for r in recs if r["cat"] == c and r.get("ans") is not None])
        for c in (1, 2, 3, 4)
    }
    ans["overall"] = _mean([r["ans"] for r in recs if r.get("ans") is not None])
    out["answer_token_recall"] = ans
    out["context_usage"] = _mean([r["usage"] for r in recs])
    out["context_tokens_mean"] = _mean([float(r["tokens"]) for r in recs])
    fm = [r["fm"] for r in recs if "fm" in r]
    out["false_memory_rate"] = (sum(fm) / len(fm)) if fm else math.nan
    out["false_memory_questions"] = len(fm)
    out["abstain_rate"] = _mean([float(r["abstain"]) for r in recs])
    lat = [r["ms"] for r in recs]
    out["latency_ms"] = {"p50": percentile(lat, 50), "p99": percentile(lat, 99), "mean": _mean(lat)}
    if any("f1" in r for r in recs):
        rd = [r for r in recs if "f1" in r]
        out["reader"] = {
            "f1": {CATEGORY_NAMES[c]: _mean([r["f1"] for r in rd if r["cat"] == c]) for c in CATEGORY_NAMES},
            "bleu1": {CATEGORY_NAMES[c]: _mean([r["bleu1"] for r in rd if r["cat"] == c]) for c in CATEGORY_NAMES},
        }
        out["reader"]["f1"]["overall (1-4)"] = _mean([r["f1"] for r in rd if r["cat"] != 5])
        out["reader"]["bleu1"]["overall (1-4)"] = _mean([r["bleu1"] for r in rd if r["cat"] != 5])
        out["reader"]["f1"]["overall (1-5)"] = _mean([r["f1"] for r in rd])
        out["reader"]["errors"] = sum(1 for r in recs if r.get("reader_error"))
    return out


def _periods(conv: Conversation, n: int = PERIODS) -> list[list[int]]:
    """Session indices per period: n contiguous groups of (nearly) equal size."""
    idx = list(range(len(conv.sessions)))
    return [list(map(int, g)) for g in np.array_split(np.array(idx), min(n, len(idx))) if len(g)]


def run_locomo(
    convs: Sequence[Conversation],
    embedder: Embedder,
    *,
    budgets: Sequence[int] = (256, 512, 1024, 2048),
    systems: Sequence[str] = ALL_SYSTEMS,
    retention: bool = True,
    reader: Reader | None = None,
    reader_budget: int = 1024,
    progress: TextIO | None = sys.stderr,
    load_report: LoadReport | None = None,
    audit: Audit | None = None,
    orders: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run the evaluation; returns a JSON-serialisable dict (see module docs).

    Parameters
    ----------
    convs : conversations from :func:`lamina.eval.load_locomo`
    embedder : any lamina embedder (``.embed``, ``.dim``, ``.name``); shared by every system
    budgets : context budgets in tokens (whitespace words), each >= 1
    systems : names from :data:`ALL_SYSTEMS`
    retention : also measure retention after 6 periods (costs two more replays per system)
    reader : answer with a chat model at ``reader_budget`` and score F1 / BLEU-1 (official rules)
    progress : stream for the progress bar (None: quiet)
    audit : the audit's corrections (:func:`lamina.eval.locomo.load_audit`): evidence recall is
        also reported on the corrected gold (``evidence_recall_audit``); without it that equals
        the original
    orders : context orders (:data:`lamina.memory.types.CONTEXT_ORDERS`) the reader answers each
        question in: the same selected items of the same context, only their order changed
        (:meth:`lamina.Context.reordered`), one answer per order; per question under
        ``"orders"``, aggregated as ``reader_orders`` (F1 per category with bootstrap intervals,
        and each order's paired difference from the first). Needs ``reader`` and lamina systems
        only (the raw-turn baselines carry no order). The first order's answer is also the
        question's ``pred`` / ``f1``.
    """
    budgets = [int(b) for b in budgets]
    if not budgets or any(b < 1 for b in budgets):
        raise ValueError(f"budgets must be positive token counts, got {budgets}")
    for s in systems:
        if s not in ALL_SYSTEMS:
            raise ValueError(f"unknown system {s!r}; expected some of {list(ALL_SYSTEMS)}")
    if reader is not None and reader_budget not in budgets:
        raise ValueError(f"reader_budget {reader_budget} must be one of the budgets {budgets}")
    ords: list[ContextOrder] | None = None
    if orders is not None:
        ords = [context_order(o) for o in orders]
        if not ords or len(set(ords)) != len(ords):
            raise ValueError(f"orders must be distinct and at least one, got {list(orders)}")
        if reader is None:
            raise ValueError("orders need a reader (the order is measured by the reader's answers)")
        raw = [s for s in systems if s not in LAMINA_VARIANTS]
        if raw:
            raise ValueError(f"orders apply to lamina's contexts only; {raw} are raw-turn baselines with no order")
    emb = embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder)
    per_q: dict[str, dict[int, list[dict[str, Any]]]] = {s: {b: [] for b in budgets} for s in systems}
    ret: dict[str, dict[int, dict[str, list[float]]]] = {
        s: {b: {"first": [], "all": []} for b in budgets} for s in systems
    }
    ingest_s: dict[str, float] = {s: 0.0 for s in systems}
    work = sum(len(c.questions) * len(systems) for c in convs)
    bar = ProgressBar(work, "locomo", progress)
    t_start = time.perf_counter()
    conv_info = []
    for conv in convs:
        turns = conv.turns
        by_id = conv.turn_by_id()
        history_tokens = sum(count_tokens(render_turn(t)) for t in turns)
        # Embed every turn and question up front (batched), so that context latencies below
        # do not include embedding, and every system sees identical vectors.
        emb.embed([t.text for t in turns] + [q.question for q in conv.questions])
        q_vecs = {q.qid: emb.embed([q.question])[0] for q in conv.questions}
        now = max(t.timestamp for t in turns) + _DAY
        conv_info.append(
            {
                "sample_id": conv.sample_id,
                "sessions": len(conv.sessions),
                "turns": len(turns),
                "history_tokens": history_tokens,
                "questions": len(conv.questions),
            }
        )
        for name in systems:
            sysm = make_system(name, emb, conv.sample_id)
            t0 = time.perf_counter()
            for session in conv.sessions:
                sysm.ingest(session)
            ingest_s[name] += time.perf_counter() - t0
            for q in conv.questions:
                ev_texts = [by_id[e].text for e in q.evidence]
                fixed = q.evidence if audit is None else audit.evidence(q)
                audit_texts = None if fixed is None else [by_id[e].text for e in fixed]
                for b in budgets:
                    t0 = time.perf_counter()
                    ctx = sysm.context(q.question, b, now, q_vecs[q.qid])
                    dt = time.perf_counter() - t0
                    rec = _record(q, ctx, dt, ev_texts, history_tokens, conv.speakers, audit_texts)
                    if reader is not None and b == reader_budget and ords is not None:
                        _answer_in_orders(reader, ctx, ords, conv.speakers, q, rec)
                    elif reader is not None and b == reader_budget:
                        try:
                            pred = reader.answer(ctx.render(), conv.speakers, q)
                            rec["pred"] = pred
                            rec.update(score_answer(pred, q.answer, q.category))
                        except Exception as e:  # a failed call is reported, never scored
                            rec["reader_error"] = str(e)[:200]
                    per_q[name][b].append(rec)
                bar.update(1, f"{conv.sample_id} {name}")
            if hasattr(sysm, "close"):
                sysm.close()
        if retention:
            _retention(conv, systems, budgets, emb, q_vecs, ret)
    elapsed = time.perf_counter() - t_start

    results: dict[str, Any] = {
        "dataset": {
            "conversations": conv_info,
            "load_report": None
            if load_report is None
            else {k: (len(v) if isinstance(v, list) else v) for k, v in asdict(load_report).items()},
            "evidence_problems": None
            if load_report is None
            else {
                "malformed": load_report.malformed_evidence,
                "repaired": load_report.repaired_evidence,
                "missing": load_report.missing_evidence,
            },
            "audit": None
            if audit is None
            else {
                "entries": len(audit.entries),
                "corrected": audit.corrected,
                "dropped": audit.dropped,
                "unmatched": audit.unmatched,
            },
            "questions_per_category": {
                CATEGORY_NAMES[c]: sum(1 for cv in convs for q in cv.questions if q.category == c)
                for c in CATEGORY_NAMES
            },
        },
        "embedder": {**emb.report(), "texts_per_s": (emb.embedded / emb.seconds) if emb.seconds > 0 else None},
        "budgets": budgets,
        "systems": list(systems),
        "protocol": {
            "token": "whitespace-separated word of the rendered context",
            "history_tokens": "sum of the tokens of every turn rendered as '[date time] Speaker: text'",
            "overall": "categories 1-4 (category 5 reported on its own)",
            "question_time": "one day after the last turn (questions come after the whole conversation)",
            "retention": f"{PERIODS} periods, capacity {RETENTION_CAPACITY:.0%} of the turns; lamina: C_e = C_s = "
            "half of it (lamina +lend: each pool may use what the other leaves unused, MemoryConfig.lend_capacity); "
            "baselines: newest turns (FIFO)",
            "false_memory": "category 5 questions naming exactly one speaker",
        },
        "ingest_seconds": {s: round(v, 3) for s, v in ingest_s.items()},
        "elapsed_seconds": round(elapsed, 1),
        "results": {},
        "per_question": per_q,
    }
    if reader is None:
        results["reader"] = {"status": "skipped", "why": "no OpenAI-compatible endpoint configured"}
    else:
        results["reader"] = {"status": "ran", "model": reader.model, "budget": reader_budget}
        if ords is not None:
            results["reader"]["orders"] = list(ords)
    for name in systems:
        results["results"][name] = {}
        for b in budgets:
            agg = _aggregate(per_q[name][b])
            if retention:
                r1, r6 = ret[name][b]["first"], ret[name][b]["all"]
                m1, m6 = _mean(r1), _mean(r6)
                agg["retention"] = {
                    "questions": len(r1),
                    "recall_after_period_1": m1,
                    "recall_after_all_periods": m6,
                    "retention": (m6 / m1) if m1 and not math.isnan(m1) else math.nan,
                }
            if ords is not None and b == reader_budget:
                agg["reader_orders"] = order_stats(per_q[name][b], ords)
            results["results"][name][str(b)] = agg
    return results


def _answer_in_orders(
    reader: Reader, ctx: Ctx, ords: Sequence[ContextOrder], speakers: Sequence[str], q: Question, rec: dict[str, Any]
) -> None:
    """One reader answer per order from the same context's items; the first order's answer is
    also ``rec["pred"]`` / ``rec["f1"]``. Every order must render the same tokens (the same
    items, and each group of raw turns keeps its one header), else the comparison is void."""
    texts = {o: ctx.render_in(o) for o in ords}
    toks = {count_tokens(t) for t in texts.values()}
    if len(toks) != 1:
        raise RuntimeError(f"{q.qid}: the orders rendered different token counts {sorted(toks)}")
    if texts.get("lost-in-the-middle", ctx.render()) != ctx.render():
        raise RuntimeError(f"{q.qid}: the context as built is not in lost-in-the-middle order")
    out: dict[str, dict[str, Any]] = {}
    for o in ords:
        try:
            pred = reader.answer(texts[o], speakers, q)
            out[o] = {"pred": pred, **score_answer(pred, q.answer, q.category)}
        except Exception as e:  # a failed call is reported, never scored
            out[o] = {"reader_error": str(e)[:200]}
    rec["orders"] = out
    first = out[ords[0]]
    if "reader_error" in first:
        rec["reader_error"] = first["reader_error"]
    else:
        rec.update(first)


_OVERALL = {"overall (1-4)": (1, 2, 3, 4), "overall (1-5)": (1, 2, 3, 4, 5)}


def order_stats(recs: Sequence[dict[str, Any]], ords: Sequence[str], *, resamples: int = 2000) -> dict[str, Any]:
    """Reader F1 per order: per category and overall, with 95 % percentile-bootstrap intervals,
    over the questions every order answered; and each order's paired difference from the first
    (per-question F1 differences, bootstrapped the same way, seed 0).

    Returns
    -------
    dict
        ``{"questions": n, "base": ords[0], "f1": {order: {group: mean}}, "ci95": {order: {group:
        [low, high]}}, "n": {group: n}, "diff": {order: {group: {"mean", "low", "high"}}}}``
    """
    rd = [r for r in recs if "orders" in r and all("f1" in r["orders"].get(o, {}) for o in ords)]
    groups: dict[str, tuple[int, ...]] = {nm: (c,) for c, nm in CATEGORY_NAMES.items()} | _OVERALL
    out: dict[str, Any] = {"questions": len(rd), "base": ords[0], "f1": {}, "ci95": {}, "diff": {}}
    out["n"] = {g: sum(1 for r in rd if r["cat"] in cats) for g, cats in groups.items()}
    for o in ords:
        f1: dict[str, float] = {}
        ci: dict[str, list[float]] = {}
        for g, cats in groups.items():
            xs = [float(r["orders"][o]["f1"]) for r in rd if r["cat"] in cats]
            f1[g] = _mean(xs)
            ci[g] = list(bootstrap_interval(xs, resamples=resamples))
        out["f1"][o], out["ci95"][o] = f1, ci
    for o in ords[1:]:
        d: dict[str, Any] = {}
        for g, cats in groups.items():
            ds = [float(r["orders"][o]["f1"]) - float(r["orders"][ords[0]]["f1"]) for r in rd if r["cat"] in cats]
            lo, hi = bootstrap_interval(ds, resamples=resamples)
            d[g] = {"mean": _mean(ds), "low": lo, "high": hi}
        out["diff"][o] = d
    return out


def _retention(
    conv: Conversation,
    systems: Sequence[str],
    budgets: Sequence[int],
    emb: CachedEmbedder,
    q_vecs: dict[str, Any],
    ret: dict[str, dict[int, dict[str, list[float]]]],
) -> None:
    periods = _periods(conv)
    if len(periods) < 2:
        return
    first = {conv.sessions[i].number for i in periods[0]}
    qs = [
        q
        for q in conv.questions
        if q.category in (1, 2, 3, 4) and q.evidence and all(int(e[1:].split(":")[0]) in first for e in q.evidence)
    ]
    if not qs:
        return
    by_id = conv.turn_by_id()
    cap = max(1, math.ceil(RETENTION_CAPACITY * len(conv.turns)))
    p1_sessions = [conv.sessions[i] for i in periods[0]]
    now1 = max(t.timestamp for s in p1_sessions for t in s.turns) + 1.0
    now_all = max(t.timestamp for t in conv.turns) + _DAY

    def probe(sysm: Any, now: float, key: str) -> None:
        for q in qs:
            ev = [by_id[e].text for e in q.evidence]
            for b in budgets:
                ctx = sysm.context(q.question, b, now, q_vecs[q.qid])
                ret[sysm.name][b][key].append(evidence_recall(ev, ctx.render()))

    for name in systems:
        a = make_system(name, emb, conv.sample_id, capacity_turns=cap)
        for s in p1_sessions:
            a.ingest(s)
        probe(a, now1, "first")
        if name in BASELINES:  # probing a raw-turn store changes nothing: continue the same one
            full = a
            for i in range(len(p1_sessions), len(conv.sessions)):
                full.ingest(conv.sessions[i])
        else:  # lamina's contexts bump access counts (heat): measure on a fresh replay
            a.close()
            full = make_system(name, emb, conv.sample_id, capacity_turns=cap)
            for s in conv.sessions:
                full.ingest(s)
        probe(full, now_all, "all")
        if hasattr(full, "close"):
            full.close()


# ---- output -----------------------------------------------------------------------------------------
