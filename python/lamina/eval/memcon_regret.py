"""``lamina eval memcon``: MemCon learning offline on LoCoMo, with regret against fixed policies.

**Outcomes.** Each conversation's turns (only turns: text, speaker, dia_id, session date) are
replayed into a real :class:`lamina.Memory`, session by session. Each question is asked once:
at the end of the conversation (``ask="end"``), or at the end of a session drawn (seeded, per
question) from those at or after its last evidence turn (``ask="after_evidence"``: the memory
is smaller and the evidence more often recent). The last session is the recall FIFO (the
recent window, in context for every action). Every action's outcome is computed once, with
read-only reads (:meth:`lamina.Memory.explain_context` counts no visit, so no question changes
another's outcome):

* ``retrieve@θ`` — the memory's own read (``Memory.context``: working, episodic, semantic
  layers, gated) at budget θ, as the memory filled it;
* ``re_retrieve`` — the read at 256, plus up to 256 tokens of a second read whose query is
  expanded by the first read's best item;
* ``consolidate`` — the consolidated items alone (episodic segments, semantic notes and facts
  of the read at 1,024; no raw turns), filled to 512 by score;
* ``forget`` — the read's items whose turns all lie in the more recent half of the stored
  sessions, filled to 256 by score;
* ``noop`` — the recent window alone (0 extra tokens);
* ``plan_inject`` — a cached plan template (its tokens) and ``retrieve@256``.

**Reward** = evidence recall of (window ∪ shown) − ``cost`` × shown tokens / 1,000, where a
shown item covers every turn it quotes and its tokens are its words + 4 (the rendered
"[date] speaker:" framing). The gold evidence is read only here, for the reward.

**State φ** (observable without gold, from the query and a first retrieval whose scores are
looked at but not put into the prompt), a tuple of the features named in ``state``:
``date`` (the question asks for a time), ``names`` (capitalised names in it: 0 / 1 / 2+),
``qlen`` (words: ≤ 7 / 8-11 / 12+), ``qclass`` (wh-class), ``top`` (the archive probe's top
cosine), ``gap`` (top minus the 10th), ``conc`` (distinct sessions among the probe's top 5:
1 / 2 / 3+), ``spread`` (layers with gate γ ≥ 0.2), ``recent`` (the top hit is in the window),
``size`` (sessions stored). Continuous features are cut at the tertiles of the *training*
questions.

**Simulation.** Episodes draw a question uniformly (seeded); MemCon picks an action by UCB on
φ and is updated with the reward (one-step episodes, α = 0.15); each fixed policy plays its
action on the same draws. With ``train`` conversations, MemCon first learns for
``train_episodes`` on their questions, then runs (still learning) on the held-out questions,
where regret is reported. Regret after t episodes = (cumulative reward of the best fixed policy
in hindsight over those t) − (the policy's cumulative reward); MemCon beats every fixed policy
exactly when its regret is negative. The *headroom* is reported beside it: the contextual
oracle (the best action per state) fitted on the training questions and scored on the
held-out ones, and in hindsight on the held-out ones themselves, each minus every fixed policy.
"""

from __future__ import annotations

import random
import re
import time
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..agent.memcon import Action, MemCon, PlanLibrary, default_actions
from .locomo import Conversation

__all__ = [
    "FEATURES",
    "DEFAULT_STATE",
    "QuestionOutcomes",
    "precompute",
    "question_class",
    "question_features",
    "simulate",
    "headroom",
    "plot_regret",
    "report",
]

#: The state features :func:`simulate` can build φ from (see the module docstring).
FEATURES = ("date", "names", "qlen", "qclass", "top", "gap", "conc", "spread", "recent", "size")
#: Continuous features, cut at the training questions' tertiles.
_CONTINUOUS = ("top", "gap", "size")
#: The default state: the query's time intent and names, the probe's top score and concentration.
DEFAULT_STATE = ("date", "names", "top", "conc")
DEFAULT_THETAS = (128, 256, 512, 1024)

_WH = (
    ("when", re.compile(r"\bwhen\b|\bwhat (?:year|month|date|day|time)\b", re.I)),
    ("quantity", re.compile(r"\bhow (?:many|much|long|often|old)\b", re.I)),
    ("who", re.compile(r"\bwho(?:m|se)?\b", re.I)),
    ("where", re.compile(r"\bwhere\b", re.I)),
    ("why_how", re.compile(r"\bwhy\b|\bhow\b", re.I)),
    ("what", re.compile(r"\bwhat\b|\bwhich\b", re.I)),
    ("yes_no", re.compile(r"^\s*(?:is|are|was|were|do|does|did|would|could|can|has|have|will|should)\b", re.I)),
)
_DATE_INTENT = re.compile(
    r"\bwhen\b|\bwhat (?:year|month|date|day|time)\b|\bhow long\b|\bago\b|\bbefore\b|\bafter\b|\bsince\b|\bdate\b",
    re.I,
)
_NAME = re.compile(r"(?<!^)\b[A-Z][a-z]+")


def question_class(q: str) -> str:
    """The interrogative class of a question (English wh-words; ``other`` when none)."""
    for name, rx in _WH:
        if rx.search(q):
            return name
    return "other"


def question_features(q: str) -> dict[str, float]:
    """The query's own state features: ``date`` (0/1), ``names`` (0, 1, 2 = two or more),
    ``qlen`` (0: ≤ 7 words, 1: 8-11, 2: 12+)."""
    n = len(q.split())
    return {
        "date": float(_DATE_INTENT.search(q) is not None),
        "names": float(min(len(_NAME.findall(q)), 2)),
        "qlen": 0.0 if n <= 7 else (1.0 if n <= 11 else 2.0),
    }


@dataclass(frozen=True)
class QuestionOutcomes:
    """One question's precomputed outcomes.

    Attributes
    ----------
    conversation, qid : str
    recall : tuple of float, one per action
        Evidence recall of (window ∪ shown).
    tokens : tuple of int, one per action
        Tokens shown besides the window.
    features : mapping of str to float
        The observable state features (:data:`FEATURES`; ``qclass`` as its index in the
        wh-classes).
    """

    conversation: str
    qid: str
    recall: tuple[float, ...]
    tokens: tuple[int, ...]
    features: Mapping[str, float] = field(default_factory=dict)


def _ntok(text: str) -> int:
    return len(text.split()) + 4  # "[date time] Speaker:" framing, as a rendered turn


def _fill(items: Iterable[tuple[frozenset[str], int]], budget: int) -> tuple[set[str], int]:
    """Items (sources, tokens) in order, each taken if it fits and shows a new turn."""
    got: set[str] = set()
    used = 0
    for srcs, n in items:
        if srcs <= got or used + n > budget:
            continue
        got |= srcs
        used += n
    return got, used


def _as_read(items: Iterable[tuple[frozenset[str], int]]) -> tuple[set[str], int]:
    """Every item of a read: the turns they show and their tokens."""
    got: set[str] = set()
    used = 0
    for srcs, n in items:
        got |= srcs
        used += n
    return got, used


def _recall(evidence: set[str], shown: set[str]) -> float:
    return len(evidence & shown) / len(evidence)


_WH_INDEX = {name: float(i) for i, (name, _) in enumerate(_WH)} | {"other": float(len(_WH))}
_CONSOLIDATED = ("episodic", "semantic")


def _schedule(conv: Conversation, session_of: Mapping[str, int], ask: str) -> dict[int, list[tuple[Any, set[str]]]]:
    """The session after which each question (with parseable evidence) is asked."""
    numbers = sorted({s.number for s in conv.sessions if s.turns})
    out: dict[int, list[tuple[Any, set[str]]]] = defaultdict(list)
    for q in conv.questions:
        ev = {e for e in q.evidence if e in session_of}
        if not ev:
            continue
        if ask == "end":
            out[numbers[-1]].append((q, ev))
        else:
            first = max(session_of[e] for e in ev)
            rng = random.Random(zlib.crc32(f"{conv.sample_id}/{q.qid}".encode()))
            out[rng.choice([n for n in numbers if n >= first])].append((q, ev))
    return out


def precompute(
    convs: Sequence[Conversation],
    *,
    embedder: Any = "hashing",
    thetas: Sequence[int] = DEFAULT_THETAS,
    ask: str = "end",
    k: int = 64,
    progress: Any = None,
) -> tuple[list[Action], list[QuestionOutcomes]]:
    """Replay every conversation into a Memory and compute each question's outcome per action.

    Parameters
    ----------
    convs : the conversations (only their turns are ingested).
    embedder : the Memory's embedder.
    thetas : the budgets of the ``retrieve`` actions.
    ask : ``"end"`` (every question after the last session) or ``"after_evidence"``.
    k : archive hits of the probe.
    progress : a file to print one line per conversation to (None: silent).

    Returns
    -------
    actions : list of Action
    outcomes : list of QuestionOutcomes
        One per question with parseable evidence, in replay order.
    """
    from ..memory import Memory

    if ask not in ("end", "after_evidence"):
        raise ValueError(f"ask must be 'end' or 'after_evidence', got {ask!r}")
    actions = default_actions(thetas)
    plans = PlanLibrary()
    out: list[QuestionOutcomes] = []
    for conv in convs:
        uid = conv.sample_id
        session_of = {t.dia_id: s.number for s in conv.sessions for t in s.turns}
        schedule = _schedule(conv, session_of, ask)
        mem = Memory(None, embedder=embedder)
        stored: list[int] = []
        for s in conv.sessions:
            if not s.turns:
                continue
            msgs = [{"speaker": t.speaker, "text": t.text, "id": t.dia_id, "timestamp": t.timestamp} for t in s.turns]
            mem.add(msgs, user_id=uid, session_id=f"s{s.number}")
            mem.end_session(user_id=uid, session_id=f"s{s.number}")
            stored.append(s.number)
            window = {t.dia_id for t in s.turns}
            recent_half = set(stored[len(stored) // 2 :])
            for q, ev in schedule.get(s.number, []):
                out.append(_outcomes(mem, uid, q, ev, actions, plans, window, recent_half, session_of, len(stored), k))
        mem.close()
        if progress is not None:
            n = sum(len(v) for v in schedule.values())
            print(f"memcon: {uid}: {n} questions precomputed", file=progress, flush=True)
    return actions, out


def _outcomes(
    mem: Any,
    uid: str,
    q: Any,
    ev: set[str],
    actions: Sequence[Action],
    plans: PlanLibrary,
    window: set[str],
    recent_half: set[int],
    session_of: Mapping[str, int],
    n_stored: int,
    k: int,
) -> QuestionOutcomes:
    """One question's features and outcome per action (see the module docstring)."""

    def read(query: str, budget: int) -> Any:
        return mem.explain_context(query, user_id=uid, budget=budget).context

    def shown(items: Iterable[Any]) -> list[tuple[frozenset[str], int]]:
        return [(frozenset(it.sources), _ntok(it.text)) for it in items]

    hits = mem.search(q.question, user_id=uid, k=k, layers=["archive"])
    scores = [float(h.score) for h in hits]
    top5 = {session_of.get(h.sources[0], -1) for h in hits[:5] if h.sources}
    reads = {th: read(q.question, th) for th in sorted({*(a.theta for a in actions if a.theta), 256, 1024})}
    by_score = sorted(reads[1024].items, key=lambda it: -it.score)
    gates = reads[1024].gates
    feats = question_features(q.question) | {
        "qclass": _WH_INDEX[question_class(q.question)],
        "top": scores[0] if scores else 0.0,
        "gap": scores[0] - scores[min(9, len(scores) - 1)] if scores else 0.0,
        "conc": float(min(len(top5), 3)),
        "spread": float(sum(g >= 0.2 for g in gates.values())),
        "recent": float(bool(hits) and bool(hits[0].sources) and hits[0].sources[0] in window),
        "size": float(n_stored),
    }
    rec: list[float] = []
    tok: list[int] = []
    for a in actions:
        got: set[str]
        used = 0
        if a.kind == "retrieve":  # the read as the memory filled it (its own token count)
            assert a.theta is not None
            got, used = _as_read(shown(reads[a.theta].items))
        elif a.kind == "re_retrieve":
            first = reads[256].items
            got, used = _as_read(shown(first))
            if first:
                best = max(first, key=lambda it: it.score).text
                more = [(s, n) for s, n in shown(read(q.question + " " + best, 256).items) if not s <= got]
                extra, n_extra = _fill(more, 256)
                got, used = got | extra, used + n_extra
        elif a.kind == "consolidate":
            got, used = _fill(shown(it for it in by_score if it.layer in _CONSOLIDATED), 512)
        elif a.kind == "forget":
            keep = (it for it in by_score if all(session_of.get(s, -1) in recent_half for s in it.sources))
            got, used = _fill(shown(keep), 256)
        elif a.kind == "noop":
            got = set()
        else:  # plan_inject: the best cached template, then retrieve@256
            got, used = _as_read(shown(reads[256].items))
            used += len((plans.best() or "").split())
        rec.append(_recall(ev, got | window))
        tok.append(used)
    # the template cache learns from questions whose top hit sat in the window (observable)
    plans.record(q.question, success=bool(feats["recent"]))
    return QuestionOutcomes(conversation=uid, qid=q.qid, recall=tuple(rec), tokens=tuple(tok), features=feats)


def _states(
    outcomes: Sequence[QuestionOutcomes], keys: Sequence[str], fit: npt.NDArray[np.bool_]
) -> list[tuple[int, ...]]:
    """φ per question: the named features, continuous ones cut at the tertiles of ``fit``'s."""
    unknown = [k for k in keys if k not in FEATURES]
    if unknown or not keys:
        raise ValueError(f"state features must be a non-empty subset of {', '.join(FEATURES)}; got {list(keys)}")
    cols = []
    for k in keys:
        v = np.array([o.features.get(k, 0.0) for o in outcomes], dtype=np.float64)
        if k in _CONTINUOUS:
            ref = v[fit] if fit.any() else v
            v = np.searchsorted(np.quantile(ref, [1 / 3, 2 / 3]), v).astype(np.float64)
        cols.append(v.astype(np.int64))
    return [tuple(int(c[i]) for c in cols) for i in range(len(outcomes))]


def headroom(
    rewards: npt.NDArray[np.float64],
    states: Sequence[tuple[int, ...]],
    fit: npt.NDArray[np.bool_],
    test: npt.NDArray[np.bool_],
) -> dict[str, Any]:
    """The contextual oracle against the fixed policies.

    Parameters
    ----------
    rewards : ndarray, shape (n_questions, n_actions)
    states : φ per question.
    fit, test : boolean masks, shape (n_questions,)
        The oracle's best action per state is fitted on ``fit`` (a state unseen there plays the
        best fixed action of ``fit``) and scored on ``test``.

    Returns
    -------
    dict
        ``fitted`` (mean reward of the fitted oracle on ``test``), ``hindsight`` (the best
        action per state chosen on ``test`` itself), ``fixed`` (each action's mean on ``test``),
        and both oracles minus the best fixed policy.
    """
    by_state: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i in np.flatnonzero(fit).tolist():
        by_state[states[i]].append(i)
    default = int(rewards[fit].mean(axis=0).argmax())
    policy = {s: int(rewards[idx].mean(axis=0).argmax()) for s, idx in by_state.items()}
    te: list[int] = np.flatnonzero(test).tolist()
    fitted = float(np.mean([rewards[i, policy.get(states[i], default)] for i in te]))
    in_test: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i in te:
        in_test[states[i]].append(i)
    hindsight = float(sum(rewards[idx].mean(axis=0).max() * len(idx) for idx in in_test.values()) / len(te))
    fixed = rewards[te].mean(axis=0)
    return {
        "fitted": fitted,
        "hindsight": hindsight,
        "fixed": fixed.tolist(),
        "fitted_minus_best_fixed": fitted - float(fixed.max()),
        "hindsight_minus_best_fixed": hindsight - float(fixed.max()),
        "policy": policy,
    }


def simulate(
    actions: Sequence[Action],
    outcomes: Sequence[QuestionOutcomes],
    *,
    episodes: int = 20000,
    train: Sequence[str] = (),
    train_episodes: int = 20000,
    state: Sequence[str] = DEFAULT_STATE,
    cost: float = 0.25,
    c: float = 0.3,
    alpha: float = 0.15,
    seed: int = 0,
    checkpoints: int = 50,
) -> dict[str, Any]:
    """Run MemCon and every fixed policy over the same ``episodes`` question draws.

    Parameters
    ----------
    actions, outcomes : from :func:`precompute`.
    episodes : reported episodes (on the held-out questions when ``train`` is given).
    train : conversations MemCon learns on first (``train_episodes`` draws); the others are
        held out and reported. Empty: one stream over every question, from scratch.
    state : the features of φ (:data:`FEATURES`).
    cost : reward cost per 1,000 shown tokens.
    c, alpha, seed : MemCon's exploration weight, step size and seed (draws too).
    checkpoints : points of the returned regret curves.

    Returns
    -------
    dict
        JSON-able: per policy the mean reward, recall and tokens; regret curves at
        ``checkpoints`` points; ``beats_all_fixed_from``: the first reported episode after
        which MemCon's regret stays below every fixed policy's to the end (None if never); the
        contextual oracle's headroom (:func:`headroom`) over the state and over each feature.
    """
    if not outcomes:
        raise ValueError("no questions with parseable evidence to simulate")
    if episodes < 1 or train_episodes < 0:
        raise ValueError(f"episodes must be >= 1 and train_episodes >= 0, got {episodes}, {train_episodes}")
    convs = np.array([o.conversation for o in outcomes])
    fit = np.isin(convs, list(train))
    if train and (not fit.any() or fit.all()):
        raise ValueError(f"train must name some, not all, of the conversations {sorted(set(convs.tolist()))}")
    test = ~fit if train else np.ones(len(outcomes), dtype=bool)
    fit_or_all = fit if train else test
    n_a = len(actions)
    R = np.array([[r - cost * t / 1000.0 for r, t in zip(o.recall, o.tokens)] for o in outcomes])
    phi = _states(outcomes, state, fit_or_all)
    rng = random.Random(seed)
    bandit = MemCon(n_a, c=c, alpha=alpha, seed=seed)
    tr_idx, te_idx = np.flatnonzero(fit), np.flatnonzero(test)
    for _ in range(train_episodes if train else 0):
        i = int(tr_idx[rng.randrange(len(tr_idx))])
        a = bandit.select(phi[i])
        bandit.update([(phi[i], a)], float(R[i, a]))
    draws = [int(te_idx[rng.randrange(len(te_idx))]) for _ in range(episodes)]
    got = np.empty(episodes)
    chosen = np.empty(episodes, dtype=np.int64)
    for t, i in enumerate(draws):
        a = bandit.select(phi[i])
        r = float(R[i, a])
        bandit.update([(phi[i], a)], r)
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
    names = [a.name for a in actions]
    head = headroom(R, phi, fit_or_all, test)
    per_feature = {
        f: {
            k: v
            for k, v in headroom(R, _states(outcomes, [f], fit_or_all), fit_or_all, test).items()
            if k.endswith("best_fixed")
        }
        for f in FEATURES
    }
    pts = sorted({max(1, round(episodes * (j + 1) / checkpoints)) for j in range(checkpoints)})
    recall = np.array([o.recall for o in outcomes])
    tokens = np.array([o.tokens for o in outcomes])
    dr = np.array(draws)
    per_fixed = {
        n: {
            "mean_reward": float(fixed[:, j].mean()),
            "mean_recall": float(recall[dr, j].mean()),
            "mean_tokens": float(tokens[dr, j].mean()),
            "final_regret": float(regret_fixed[-1, j]),
            "fitted_oracle_gap": head["fitted"] - head["fixed"][j],
            "hindsight_oracle_gap": head["hindsight"] - head["fixed"][j],
        }
        for j, n in enumerate(names)
    }
    states = sorted(set(phi))
    return {
        "questions": len(outcomes),
        "train_conversations": sorted(train),
        "test_conversations": sorted(set(convs[test].tolist())),
        "train_questions": int(fit.sum()),
        "test_questions": int(test.sum()),
        "train_episodes": train_episodes if train else 0,
        "state": list(state),
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
            "mean_reward_second_half": float(got[episodes // 2 :].mean()),
            "mean_recall": float(recall[dr, chosen].mean()),
            "mean_tokens": float(tokens[dr, chosen].mean()),
            "final_regret": float(regret_mc[-1]),
            "action_share": {n: float((chosen == j).mean()) for j, n in enumerate(names)},
            "greedy_policy": {str(s): names[bandit.greedy(s)] for s in states},
        },
        "oracle": {
            "fitted_mean_reward": head["fitted"],
            "hindsight_mean_reward": head["hindsight"],
            "fitted_minus_best_fixed": head["fitted_minus_best_fixed"],
            "hindsight_minus_best_fixed": head["hindsight_minus_best_fixed"],
            "policy": {str(s): names[a] for s, a in head["policy"].items()},
        },
        "oracle_per_feature": per_feature,
        "beats_all_fixed_from": beats_from,
        "curve": {
            "episode": pts,
            "memcon": [float(regret_mc[p - 1]) for p in pts],
            **{n: [float(regret_fixed[p - 1, j]) for p in pts] for j, n in enumerate(names)},
        },
    }


def report(res: Mapping[str, Any]) -> str:
    """The result of :func:`simulate` as a text table (policies, MemCon, the oracle, the verdict)."""
    lines = [f"{'policy':<16}{'reward':>9}{'recall':>9}{'tokens':>9}{'regret':>11}{'oracle gap':>12}"]
    for n, f in res["fixed"].items():
        lines.append(
            f"{n:<16}{f['mean_reward']:>9.4f}{f['mean_recall']:>9.4f}{f['mean_tokens']:>9.0f}"
            f"{f['final_regret']:>11.1f}{f['fitted_oracle_gap']:>+12.4f}"
        )
    m, o = res["memcon"], res["oracle"]
    lines.append(
        f"{'MemCon':<16}{m['mean_reward']:>9.4f}{m['mean_recall']:>9.4f}{m['mean_tokens']:>9.0f}{m['final_regret']:>11.1f}"
    )
    where = (
        f"held out: {', '.join(res['test_conversations'])} ({res['test_questions']} questions; "
        f"learned first on {', '.join(res['train_conversations'])} for {res['train_episodes']} episodes)"
        if res["train_conversations"]
        else f"one stream over {res['questions']} questions"
    )
    lines.append(where)
    lines.append(
        f"state {'+'.join(res['state'])}: {res['states']} states; contextual oracle fitted on the training "
        f"questions {o['fitted_mean_reward']:.4f} ({o['fitted_minus_best_fixed']:+.4f} vs the best fixed), "
        f"in hindsight {o['hindsight_mean_reward']:.4f} ({o['hindsight_minus_best_fixed']:+.4f}); best fixed: "
        f"{res['best_fixed']}"
    )
    lines.append(
        "oracle minus best fixed per single feature (fitted / hindsight): "
        + ", ".join(
            f"{f} {v['fitted_minus_best_fixed']:+.4f}/{v['hindsight_minus_best_fixed']:+.4f}"
            for f, v in res["oracle_per_feature"].items()
        )
    )
    b = res["beats_all_fixed_from"]
    lines.append(
        f"MemCon's regret is below every fixed policy's from episode {b} on"
        if b
        else f"MemCon does not end below every fixed policy after {res['episodes']} episodes"
    )
    return "\n".join(lines)


def plot_regret(res: Mapping[str, Any], path: str) -> str | None:
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
    ax.set_xlabel("episode" + (" (held-out conversations)" if res["train_conversations"] else ""))
    ax.set_ylabel("regret vs best fixed policy in hindsight")
    ax.set_title(
        f"MemCon on LoCoMo dev ({res['test_questions']} questions, state {'+'.join(res['state'])}, "
        f"cost {res['cost_per_1k_tokens']}/1k tok)",
        fontsize=9,
    )
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
