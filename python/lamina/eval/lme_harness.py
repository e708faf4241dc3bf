"""The LongMemEval run behind ``lamina eval longmemeval``.

Per question, per system, a fresh memory of one user: the question's haystack sessions are
added in date order with their dates (one second per turn within a session), the session ended
after each (:func:`lamina.eval.lme_systems.replay_sessions`: roles and texts only, never the
gold); then, as of the question's date, a context at every budget and a ranking:

* evidence recall of each budgeted context — the share of the question's ``has_answer`` turns
  whose text is in the rendered context (:func:`lamina.eval.scoring.evidence_recall`, as on
  LoCoMo);
* the benchmark's retrieval metrics (:mod:`lamina.eval.lme_metrics`) of the ranking at session
  and turn granularity. A baseline's ranking is its order of every turn; lamina's is the items of
  a context with room for the whole history, by score (each item's shown turns; its session for
  a summary). A session ranks where its first turn (or item) ranks.

Abstention questions (``_abs``) are left out of every retrieval score, as LongMemEval does;
questions without ``has_answer`` turns are left out of evidence recall and turn-level scores.
Every system works on the same vectors (one :class:`~lamina.eval.systems.CachedEmbedder`;
with a file, a second run embeds nothing). ``now`` is the question date, or the last session's
date when the file dates a session after the question (some temporal-reasoning histories are all
dated on the question's day, at random hours; ``late_sessions`` counts them).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from ..cli.progress import ProgressBar
from ..embedders import Embedder
from .lme_metrics import KS, first_occurrence, retrieval_scores
from .lme_systems import (
    LME_BASELINES,
    Replay,
    baseline_ranking,
    history_tokens,
    lamina_context,
    lamina_ranking,
    replay_sessions,
)
from .longmemeval import LME_TYPES, LmeData, LmeQuestion
from .scoring import count_tokens, evidence_recall, percentile, wilson_interval
from .systems import LAMINA_VARIANTS, CachedEmbedder, LaminaSystem, make_system

__all__ = [
    "LME_SYSTEMS",
    "LME_CHOICES",
    "run_longmemeval",
    "question_records",
    "aggregate",
    "format_lme_tables",
    "plot_lme",
]

#: lamina and the three baselines, in table order.
LME_SYSTEMS: tuple[str, ...] = ("lamina", *LME_BASELINES)
#: What ``systems`` may name: those, and lamina's ablations (:data:`lamina.eval.systems.LAMINA_VARIANTS`).
LME_CHOICES: tuple[str, ...] = LME_SYSTEMS + tuple(v for v in LAMINA_VARIANTS if v not in LME_SYSTEMS)
_SHORT = {
    "single-session-user": "ss-user",
    "single-session-assistant": "ss-assistant",
    "single-session-preference": "ss-preference",
    "multi-session": "multi-session",
    "knowledge-update": "know-update",
    "temporal-reasoning": "temporal",
    "overall": "overall",
}
_METRICS = tuple(f"{m}@{k}" for k in KS for m in ("recall_any", "recall_all", "ndcg"))


def _build(name: str, emb: CachedEmbedder, user: str) -> Any:
    if name in LME_BASELINES:
        return LME_BASELINES[name](emb)
    if name in LAMINA_VARIANTS:
        return make_system(name, emb, user)
    raise ValueError(f"unknown system {name!r}; expected some of {list(LME_CHOICES)}")


def _ranked_keys(turns: Sequence[str], sessions: Sequence[int], replay: Replay) -> tuple[list[Any], list[str]]:
    return [replay.key_of[t] for t in turns], [replay.session_of[n] for n in sessions]


def question_records(
    q: LmeQuestion,
    data: LmeData,
    emb: CachedEmbedder,
    *,
    budgets: Sequence[int],
    systems: Sequence[str],
) -> dict[str, dict[str, Any]]:
    """Every system's scores on one question (see module docs), keyed by system name."""
    replay = replay_sessions(q, data.sessions)
    turns = replay.turns
    emb.embed([t.text for t in turns] + [q.question])  # one batch: every system reads these vectors
    q_vec = emb.embed([q.question])[0]
    now = max(q.question_date, replay.last_time)
    ev_texts = list(dict.fromkeys(data.sessions[s].turns[j].text for s, j in q.gold.evidence))
    scored = not q.abstention
    rank_budget = 2 * history_tokens(replay) + 64  # room for everything, headers and fact lines included
    out: dict[str, dict[str, Any]] = {}
    for name in systems:
        sysm = _build(name, emb, f"lme-{q.qid}")
        t0 = time.perf_counter()
        for s in replay.sessions:
            sysm.ingest(s)
        rec: dict[str, Any] = {
            "qid": q.qid,
            "type": q.qtype,
            "abs": q.abstention,
            "ingest_s": round(time.perf_counter() - t0, 4),
            "ev": {},
            "tokens": {},
            "ms": {},
        }
        # the ranking first (read-only for lamina; it builds a baseline's lazy BM25 index, which
        # the context latencies below then leave out)
        if isinstance(sysm, LaminaSystem):
            full, _ = lamina_context(sysm, q.question, rank_budget, now, q_vec)
            t_names, s_nums = lamina_ranking(full, replay)
        else:
            t_names = baseline_ranking(sysm, q.question, q_vec)
            s_nums = [int(t.split(":")[0]) for t in t_names]
        for b in budgets:
            t1 = time.perf_counter()
            if isinstance(sysm, LaminaSystem):
                ctx, _ = lamina_context(sysm, q.question, b, now, q_vec)
            else:
                ctx = sysm.context(q.question, b, now, q_vec)
            rec["ms"][str(b)] = round((time.perf_counter() - t1) * 1e3, 3)
            text = ctx.render()
            rec["tokens"][str(b)] = count_tokens(text)
            rec["ev"][str(b)] = evidence_recall(ev_texts, text) if (ev_texts and scored) else None
        t_keys, s_ids = _ranked_keys(t_names, s_nums, replay)
        rec["session"] = retrieval_scores(s_ids, q.gold.answer_session_ids) if scored else None
        rec["turn"] = retrieval_scores(t_keys, q.gold.evidence) if scored else None
        rec["ranked_sessions"] = len(first_occurrence(s_ids))
        rec["ranked_turns"] = len(first_occurrence(t_keys))
        out[name] = rec
        if hasattr(sysm, "close"):
            sysm.close()
    return out


def _mean(xs: Sequence[float]) -> float:
    ys = [x for x in xs if not math.isnan(x)]
    return float(statistics.fmean(ys)) if ys else math.nan


def _cell(xs: Sequence[float]) -> dict[str, Any]:
    m = _mean(xs)
    lo, hi = wilson_interval(m, len(xs)) if xs else (math.nan, math.nan)
    return {"mean": m, "n": len(xs), "low": lo, "high": hi}


def _groups(recs: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    g = {t: [r for r in recs if r["type"] == t] for t in LME_TYPES}
    g = {t: rs for t, rs in g.items() if rs}
    g["overall"] = list(recs)
    return g


def aggregate(recs: Sequence[dict[str, Any]], budgets: Sequence[int]) -> dict[str, Any]:
    """One system's means per question type and overall, each ``{"mean", "n", "low", "high"}``
    (Wilson 95 % interval over the n questions scored)."""
    groups = _groups(recs)
    out: dict[str, Any] = {"questions": len(recs), "evidence_recall": {}, "session": {}, "turn": {}}
    for b in budgets:
        key = str(b)
        out["evidence_recall"][key] = {
            g: _cell([r["ev"][key] for r in rs if r["ev"][key] is not None]) for g, rs in groups.items()
        }
    for level in ("session", "turn"):
        out[level] = {
            m: {g: _cell([r[level][m] for r in rs if r[level] is not None]) for g, rs in groups.items()}
            for m in _METRICS
        }
    out["context_tokens_mean"] = {str(b): _mean([float(r["tokens"][str(b)]) for r in recs]) for b in budgets}
    out["latency_ms"] = {
        str(b): {
            "p50": percentile([r["ms"][str(b)] for r in recs], 50),
            "p99": percentile([r["ms"][str(b)] for r in recs], 99),
        }
        for b in budgets
    }
    out["ingest_seconds"] = round(sum(r["ingest_s"] for r in recs), 3)
    out["ranked_depth"] = {  # how deep a ranking goes: lamina's stops at its candidates
        "sessions": _mean([float(r["ranked_sessions"]) for r in recs]),
        "turns": _mean([float(r["ranked_turns"]) for r in recs]),
    }
    return out


def run_longmemeval(
    data: LmeData,
    embedder: Embedder | CachedEmbedder,
    *,
    budgets: Sequence[int] = (1024, 4096),
    systems: Sequence[str] = LME_SYSTEMS,
    progress: TextIO | None = sys.stderr,
) -> dict[str, Any]:
    """Run every question of ``data`` through ``systems``; returns a JSON-serialisable dict
    (``dataset``, ``embedder`` with the cache's hits, ``results[system]`` from :func:`aggregate`,
    ``per_question[system]``).

    Raises
    ------
    ValueError
        Budgets not positive, or an unknown system.
    """
    budgets = [int(b) for b in budgets]
    if not budgets or any(b < 1 for b in budgets):
        raise ValueError(f"budgets must be positive token counts, got {budgets}")
    bad = [s for s in systems if s not in LME_CHOICES]
    if bad or not systems:
        raise ValueError(f"unknown system(s) {bad or list(systems)}; expected some of {list(LME_CHOICES)}")
    emb = embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder)
    per_q: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    bar = ProgressBar(len(data.questions), "longmemeval", progress)
    t_start = time.perf_counter()
    late = 0
    for q in data.questions:
        late += max(d for _, d in q.haystack) > q.question_date
        for name, rec in question_records(q, data, emb, budgets=budgets, systems=systems).items():
            per_q[name].append(rec)
        emb.forget()  # the vectors stay on disk; the memo would grow with every question
        bar.update(1, q.qtype)
    rep = data.report
    return {
        "dataset": {
            "questions": rep.questions,
            "per_type": rep.per_type,
            "abstention": rep.abstention,
            "sessions": rep.sessions,
            "haystack_sessions": rep.haystack_sessions,
            "turns": rep.turns,
            "empty_turns": rep.empty_turns,
            "evidence_turns": rep.evidence_turns,
            "questions_without_evidence_turns": rep.questions_without_evidence_turns,
            "late_sessions": late,
        },
        "embedder": {**emb.report(), "cache": emb.path},
        "budgets": budgets,
        "systems": list(systems),
        "protocol": {
            "token": "whitespace-separated word of the rendered context",
            "order": "sessions added in date order, one second per turn, end_session after each",
            "now": "question_date (or the last session's date where the file dates one after the question)",
            "scored": "abstention questions left out of retrieval scores; questions without has_answer turns "
            "left out of evidence recall and turn-level scores",
            "corpus": "every turn, user and assistant (the benchmark's own turn retriever indexes user turns only)",
        },
        "elapsed_seconds": round(time.perf_counter() - t_start, 1),
        "results": {s: aggregate(per_q[s], budgets) for s in systems},
        "per_question": per_q,
    }


# ---- output -----------------------------------------------------------------------------------------


def _pct(c: dict[str, Any] | None) -> str:
    if c is None or math.isnan(c["mean"]):
        return "-"
    return f"{100 * c['mean']:.1f}"


def _ci(c: dict[str, Any] | None) -> str:
    if c is None or math.isnan(c["low"]):
        return "-"
    return f"{100 * c['low']:.0f}-{100 * c['high']:.0f}"


def _table(results: dict[str, Any], title: str, pick: Any) -> list[str]:
    groups = [t for t in (*LME_TYPES, "overall") if t in results["results"][results["systems"][0]]["session"]["ndcg@5"]]
    w = max(len(s) for s in results["systems"]) + 2
    lines = ["", title + " (Wilson 95 % interval below; n = questions scored)"]
    head = f"{'system':<{w}}" + "".join(f"{_SHORT[g]:>15}" for g in groups)
    lines += [head, "-" * len(head)]
    for s in results["systems"]:
        cells = pick(results["results"][s])
        lines.append(f"{s:<{w}}" + "".join(f"{_pct(cells.get(g)):>15}" for g in groups))
        lines.append(f"{'':<{w}}" + "".join(f"{_ci(cells.get(g)):>15}" for g in groups))
    first = pick(results["results"][results["systems"][0]])
    lines.append(f"{'n':<{w}}" + "".join(f"{first[g]['n'] if g in first else 0:>15}" for g in groups))
    return lines


def format_lme_tables(results: dict[str, Any]) -> str:
    """Evidence recall per budget, then session and turn recall_all@5 / recall_any@5 /
    ndcg@10, per type and overall, one row per system; then tokens, latency and ingest."""
    d = results["dataset"]
    lines = [
        f"LongMemEval: {d['questions']} questions ({d['abstention']} abstention), "
        f"embedder {results['embedder']['name']}"
    ]
    for b in results["budgets"]:
        lines += _table(results, f"evidence recall at {b} tokens (%)", lambda r, b=b: r["evidence_recall"][str(b)])
    for level in ("session", "turn"):
        for m in ("recall_all@5", "recall_any@5", "ndcg@10", "recall_all@10"):
            lines += _table(results, f"{level} {m} (%)", lambda r, level=level, m=m: r[level][m])
    lines.append("")
    w = max(len(s) for s in results["systems"]) + 2
    for s in results["systems"]:
        a = results["results"][s]
        lines.append(
            f"{s:<{w}}"
            + "  ".join(
                f"@{b}: {a['context_tokens_mean'][str(b)]:.0f} tokens, p50 {a['latency_ms'][str(b)]['p50']:.1f} ms"
                for b in results["budgets"]
            )
            + f"  ingest {a['ingest_seconds']:.1f} s; ranking depth {a['ranked_depth']['turns']:.0f} turns, "
            f"{a['ranked_depth']['sessions']:.0f} sessions"
        )
    return "\n".join(lines)


def plot_lme(results: dict[str, Any], folder: str) -> str | None:
    """One PNG per question type (and ``overall``) in ``folder``: evidence recall per budget,
    one bar per system. Returns None, or why nothing was written (matplotlib missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no plot written"
    import os

    os.makedirs(folder, exist_ok=True)
    systems, budgets = results["systems"], results["budgets"]
    groups = list(results["results"][systems[0]]["evidence_recall"][str(budgets[0])])
    width = 0.8 / len(systems)
    for g in groups:
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, s in enumerate(systems):
            ys = [100 * results["results"][s]["evidence_recall"][str(b)][g]["mean"] for b in budgets]
            ax.bar([j + i * width for j in range(len(budgets))], ys, width, label=s)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(budgets))])
        ax.set_xticklabels([f"{b} tokens" for b in budgets])
        ax.set_ylabel("evidence recall (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"LongMemEval {g} ({results['embedder']['name']})")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, f"longmemeval-{g}.png"), dpi=110)
        plt.close(fig)
    return None
