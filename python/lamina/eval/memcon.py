"""``lamina eval memcon``: MemCon learning offline on LoCoMo, with regret against fixed policies.

Each conversation's turns (only turns: text, speaker, dia_id, session date) are replayed into a
real :class:`lamina.Memory`. Each question is then asked once at the end of the conversation,
with the last session in the recall FIFO (the recent window, in context for every action), and
every memory action's outcome is computed once:

* ``retrieve@θ`` — the archive's best-scoring turns filling θ tokens;
* ``re_retrieve`` — a second search with the query expanded by the first hit's text, fused with
  the first list by reciprocal rank, filling 512 tokens;
* ``consolidate`` — ``Memory.context`` (episodic segments, semantic notes, working) at 512;
* ``forget`` — retrieval over the more recent half of the sessions only, 256 tokens;
* ``noop`` — the recent window alone (0 extra tokens);
* ``plan_inject`` — a cached plan template (its tokens) and retrieve@256.

Reward = evidence recall of (window ∪ retrieved) − ``cost`` × extra tokens / 1000; the gold
evidence is read only here, for the reward. The state φ is observable without gold: the
question's interrogative class, a tertile of the top retrieval score, and whether the top hit
lies in the recent window. Episodes draw a question uniformly (seeded); MemCon picks an
action by UCB and is updated with the reward (one-step episodes); each fixed policy plays its
action on the same draws. Regret after t episodes = (cumulative reward of the best fixed policy
in hindsight over those t) − (the policy's cumulative reward); the best fixed policy has 0, so
MemCon beats every fixed policy exactly when its regret is negative.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..agent.memcon import Action, MemCon, PlanLibrary, default_actions
from .locomo import Conversation

__all__ = ["QuestionOutcomes", "precompute", "simulate", "question_class", "plot_regret"]

_WH = (
    ("when", re.compile(r"\bwhen\b|\bwhat (?:year|month|date|day|time)\b", re.I)),
    ("quantity", re.compile(r"\bhow (?:many|much|long|often|old)\b", re.I)),
    ("who", re.compile(r"\bwho(?:m|se)?\b", re.I)),
    ("where", re.compile(r"\bwhere\b", re.I)),
    ("why_how", re.compile(r"\bwhy\b|\bhow\b", re.I)),
    ("what", re.compile(r"\bwhat\b|\bwhich\b", re.I)),
    ("yes_no", re.compile(r"^\s*(?:is|are|was|were|do|does|did|would|could|can|has|have|will|should)\b", re.I)),
)


def question_class(q: str) -> str:
    """The interrogative class of a question (English wh-words; ``other`` when none)."""
    for name, rx in _WH:
        if rx.search(q):
            return name
    return "other"


@dataclass(frozen=True)
class QuestionOutcomes:
    """One question's precomputed outcomes: ``reward[a]``, ``recall[a]``, ``tokens[a]`` per action,
    the observable state parts (``qclass``, ``top_score``, ``top_recent``) and the final state ``phi``."""

    conversation: str
    qid: str
    qclass: str
    top_score: float
    top_recent: bool
    recall: tuple[float, ...]
    tokens: tuple[int, ...]
    phi: tuple[str, int, bool] = ("", 0, False)


def _ntok(text: str) -> int:
    return len(text.split()) + 4  # "[date time] Speaker:" framing, as a rendered turn


def _fill(hits: Sequence[tuple[str, int]], budget: int) -> tuple[set[str], int]:
    got: set[str] = set()
    used = 0
    for did, n in hits:
        if did in got:
            continue
        if used + n > budget:
            continue
        got.add(did)
        used += n
    return got, used


def _recall(evidence: set[str], shown: set[str]) -> float:
    return len(evidence & shown) / len(evidence)


def precompute(
    convs: Sequence[Conversation],
    *,
    embedder: Any = "hashing",
    thetas: Sequence[int] = (256, 512, 1024),
    k: int = 64,
    progress: Any = None,
) -> tuple[list[Action], list[QuestionOutcomes]]:
    """Replay every conversation into a Memory and compute each question's outcome per action.

    Returns the actions and one :class:`QuestionOutcomes` per question with parseable evidence
    (``phi`` filled in with score tertiles over all questions).
    """
    from ..memory import Memory

    actions = default_actions(thetas)
    plans = PlanLibrary()
    raw: list[QuestionOutcomes] = []
    for conv in convs:
        mem = Memory(None, embedder=embedder)
        uid = conv.sample_id
        session_of: dict[str, int] = {}
        for s in conv.sessions:
            msgs = [{"speaker": t.speaker, "text": t.text, "id": t.dia_id, "timestamp": t.timestamp} for t in s.turns]
            if not msgs:
                continue
            mem.add(msgs, user_id=uid, session_id=f"s{s.number}")
            mem.end_session(user_id=uid, session_id=f"s{s.number}")
            for t in s.turns:
                session_of[t.dia_id] = s.number
        numbers = sorted({s.number for s in conv.sessions if s.turns})
        last = numbers[-1]
        window = {d for d, n in session_of.items() if n == last}
        recent_half = {d for d, n in session_of.items() if n >= numbers[len(numbers) // 2]}
        for q in conv.questions:
            ev = {e for e in q.evidence if e in session_of}
            if not ev:
                continue
            hits = mem.search(q.question, user_id=uid, k=k, layers=["archive"])
            ranked = [(h.sources[0], _ntok(h.text)) for h in hits if h.sources]
            top = float(hits[0].score) if hits else 0.0
            top_recent = bool(ranked) and ranked[0][0] in window
            rec: list[float] = []
            tok: list[int] = []
            for a in actions:
                shown: set[str]
                used = 0
                if a.kind == "retrieve":
                    assert a.theta is not None
                    shown, used = _fill(ranked, a.theta)
                elif a.kind == "re_retrieve":
                    q2 = q.question + " " + (hits[0].text if hits else "")
                    hits2 = mem.search(q2, user_id=uid, k=k, layers=["archive"])
                    r2 = [(h.sources[0], _ntok(h.text)) for h in hits2 if h.sources]
                    rrf: dict[str, float] = {}
                    size = {d: n for d, n in ranked + r2}
                    for lst in (ranked, r2):
                        for i, (d, _) in enumerate(lst):
                            rrf[d] = rrf.get(d, 0.0) + 1.0 / (60 + i)
                    fused = sorted(rrf, key=lambda d: -rrf[d])
                    shown, used = _fill([(d, size[d]) for d in fused], 512)
                elif a.kind == "consolidate":
                    ctx = mem.context(q.question, user_id=uid, budget=512)
                    shown = {s for it in ctx.items for s in it.sources}
                    used = sum(_ntok(it.text) for it in ctx.items)
                elif a.kind == "forget":
                    shown, used = _fill([h for h in ranked if h[0] in recent_half], 256)
                elif a.kind == "noop":
                    shown = set()
                else:  # plan_inject: the best cached template, then retrieve@256
                    tpl = plans.best() or ""
                    shown, used = _fill(ranked, 256)
                    used += len(tpl.split())
                rec.append(_recall(ev, shown | window))
                tok.append(used)
            # the template cache learns from questions whose top hit sat in the window (observable)
            plans.record(q.question, success=top_recent)
            raw.append(
                QuestionOutcomes(
                    conversation=uid,
                    qid=q.qid,
                    qclass=question_class(q.question),
                    top_score=top,
                    top_recent=top_recent,
                    recall=tuple(rec),
                    tokens=tuple(tok),
                )
            )
        mem.close()
        if progress is not None:
            print(f"memcon: {uid}: {len(conv.questions)} questions precomputed", file=progress, flush=True)
    cuts = np.quantile([o.top_score for o in raw], [1 / 3, 2 / 3]) if raw else np.zeros(2)
    out = [
        QuestionOutcomes(**{**o.__dict__, "phi": (o.qclass, int(np.searchsorted(cuts, o.top_score)), o.top_recent)})
        for o in raw
    ]
    return actions, out


def simulate(
    actions: Sequence[Action],
    outcomes: Sequence[QuestionOutcomes],
    *,
    episodes: int = 20000,
    cost: float = 0.25,
    c: float = 0.3,
    alpha: float = 0.15,
    seed: int = 0,
    checkpoints: int = 50,
) -> dict[str, Any]:
    """Run MemCon and every fixed policy over the same ``episodes`` question draws.

    Returns a JSON-able dict: per policy the mean reward, recall and tokens; regret curves at
    ``checkpoints`` points; ``beats_all_fixed_from``: the first episode after which MemCon's
    regret stays below every fixed policy's to the end (None if never); the contextual oracle
    (the best action per state in hindsight) as the ceiling.
    """
    if not outcomes:
        raise ValueError("no questions with parseable evidence to simulate")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    n_a = len(actions)
    R = np.array([[r - cost * t / 1000.0 for r, t in zip(o.recall, o.tokens)] for o in outcomes])
    rng = random.Random(seed)
    draws = [rng.randrange(len(outcomes)) for _ in range(episodes)]
    bandit = MemCon(n_a, c=c, alpha=alpha, seed=seed)
    got = np.empty(episodes)
    chosen = np.empty(episodes, dtype=np.int64)
    for t, i in enumerate(draws):
        phi = outcomes[i].phi
        a = bandit.select(phi)
        r = float(R[i, a])
        bandit.update([(phi, a)], r)
        got[t] = r
        chosen[t] = a
    fixed = R[draws]  # (episodes, n_actions)
    cum_fixed = np.cumsum(fixed, axis=0)
    cum_mc = np.cumsum(got)
    best_cum = cum_fixed.max(axis=1)
    regret_mc = best_cum - cum_mc
    regret_fixed = best_cum[:, None] - cum_fixed
    below = regret_mc < regret_fixed.min(axis=1)  # strictly below every fixed policy (the best: 0)
    beats_from = None
    if below[-1]:
        last_not = np.flatnonzero(~below)
        beats_from = int(last_not[-1] + 2) if last_not.size else 1
    # contextual oracle: the best action per state in hindsight (the ceiling of a state-aware policy)
    states = sorted({o.phi for o in outcomes}, key=str)
    idx = {s: j for j, s in enumerate(states)}
    sid = np.array([idx[o.phi] for o in outcomes])
    oracle_a = {s: int(R[sid == idx[s]].mean(axis=0).argmax()) for s in states}
    oracle = float(np.mean([R[i, oracle_a[outcomes[i].phi]] for i in draws]))
    pts = sorted({max(1, round(episodes * (j + 1) / checkpoints)) for j in range(checkpoints)})
    names = [a.name for a in actions]
    recall = np.array([o.recall for o in outcomes])
    tokens = np.array([o.tokens for o in outcomes])
    per_fixed = {
        n: {
            "mean_reward": float(fixed[:, j].mean()),
            "mean_recall": float(recall[draws, j].mean()),
            "mean_tokens": float(tokens[draws, j].mean()),
            "final_regret": float(regret_fixed[-1, j]),
        }
        for j, n in enumerate(names)
    }
    last = slice(episodes // 2, None)
    return {
        "questions": len(outcomes),
        "states": len(states),
        "episodes": episodes,
        "cost_per_1k_tokens": cost,
        "c": c,
        "alpha": alpha,
        "seed": seed,
        "actions": names,
        "fixed": per_fixed,
        "best_fixed": names[int(cum_fixed[-1].argmax())],
        "memcon": {
            "mean_reward": float(got.mean()),
            "mean_reward_second_half": float(got[last].mean()),
            "mean_recall": float(recall[np.array(draws), chosen].mean()),
            "mean_tokens": float(tokens[np.array(draws), chosen].mean()),
            "final_regret": float(regret_mc[-1]),
            "action_share": {n: float((chosen == j).mean()) for j, n in enumerate(names)},
            "greedy_policy": {str(s): names[bandit.greedy(s)] for s in states},
        },
        "oracle_contextual_mean_reward": oracle,
        "oracle_policy": {str(s): names[a] for s, a in oracle_a.items()},
        "beats_all_fixed_from": beats_from,
        "curve": {
            "episode": pts,
            "memcon": [float(regret_mc[p - 1]) for p in pts],
            **{n: [float(regret_fixed[p - 1, j]) for p in pts] for j, n in enumerate(names)},
        },
    }


def plot_regret(res: dict[str, Any], path: str) -> str | None:
    """Write the regret curves as a PNG; returns why not (no matplotlib) or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not installed"
    cur = res["curve"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n in res["actions"]:
        ax.plot(cur["episode"], cur[n], lw=1, alpha=0.7, label=n)
    ax.plot(cur["episode"], cur["memcon"], lw=2.5, color="k", label="MemCon")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("episode")
    ax.set_ylabel("regret vs best fixed policy in hindsight")
    ax.set_title(f"MemCon on LoCoMo dev ({res['questions']} questions, cost {res['cost_per_1k_tokens']}/1k tok)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def timed_precompute(convs: Sequence[Conversation], **kw: Any) -> tuple[list[Action], list[QuestionOutcomes], float]:
    """:func:`precompute` and its wall time in seconds."""
    t0 = time.perf_counter()
    a, o = precompute(convs, **kw)
    return a, o, time.perf_counter() - t0
