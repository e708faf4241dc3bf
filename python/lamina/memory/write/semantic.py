"""The semantic layer's write path: Resolve(τ_s) of extracted facts (a new value of a functional
predicate supersedes the current one, which moves to ``history``; the same value stated again
strengthens it) and entity profiles moved by the damped update of eq. 9–10
(``kernels.damped_update``: e = (e* + λ·e_prev)/(1+λ); its drift is reported by ``stats``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...llm.extract import Fact, fact_sentence
from ...native import kernels
from ...native.search import inner_products
from ..inputs import wall_clock
from ..state.memstate import UserState
from ..state.records import Record, derived_commitment, norm_key
from ..state.tx import Models, Tx

__all__ = ["resolve", "update_profile"]


def _same_value(tx: Tx, models: Models, a: str, b: str) -> bool:
    if norm_key(a) == norm_key(b):
        return True
    x = models.embed([a, b])
    return float(inner_products(x[0:1], x[1:2])[0, 0]) >= tx.st.config.resolve_threshold


def _last_stated(tx: Tx, u: UserState, r: Record) -> float:
    """When a current fact was last stated: its ``valid_from``, or the time of a later turn among
    its sources (the same value stated again strengthens the fact and adds the turn there)."""
    assert r.valid_from is not None
    recs = tx.st.recs
    times = [recs[i].timestamp for i in map(u.by_src.get, r.sources) if i is not None and i in recs]
    return max([r.valid_from] + [x for x in times if x is not None])


def resolve(tx: Tx, models: Models, u: UserState, facts: list[Fact], by_src: Mapping[str, Record]) -> None:
    """Resolve(τ_s): insert facts; a new object of a functional predicate supersedes the old."""
    if not facts:
        return
    st = tx.st
    touched: set[str] = set()
    embs = models.embed([f.text for f in facts])
    for f, e in zip(facts, embs):
        key = (norm_key(f.subject), f.predicate)
        src_recs = [by_src[s] for s in f.sources if s in by_src]
        commitment = derived_commitment(r.commitment for r in src_recs)
        domain = src_recs[0].domain if src_recs else None
        t = f.timestamp if f.timestamp is not None else (src_recs[0].timestamp if src_recs else wall_clock())
        assert t is not None
        session_id = src_recs[0].session_id if src_recs else None
        cur_ids = u.current.get(key, [])
        same = next((i for i in cur_ids if _same_value(tx, models, st.recs[i].object or "", f.object)), None)
        if same is not None:  # reinforcement: same value stated again
            r = st.recs[same]
            st.set_sources(u, r, tuple(dict.fromkeys(r.sources + tuple(f.sources))))
            r.strength += 1.0
            tx.changed(r, "sources", "strength")
            u.stale = None
            continue
        fact = {
            "kind": "fact",
            "text": f.text,
            "subject": f.subject,
            "predicate": f.predicate,
            "object": f.object,
            "sources": tuple(f.sources),
            "timestamp": t,
            "created_at": t,
            "valid_from": t,
            "domain": domain,
            "commitment": commitment,
            "session_id": session_id,
        }
        if f.functional and cur_ids:
            cur = st.recs[cur_ids[0]]
            last = _last_stated(tx, u, cur)
            if t < last:
                # An older statement replayed late (the current value was stated, or stated again,
                # after it): it goes straight to history.
                tx.new_record(u, e, layer="history", valid_to=last, superseded_by=cur.id, **fact)
                if last != cur.valid_from:  # (stated again after it: the current value holds from then)
                    cur.valid_from = last
                    tx.changed(cur, "valid_from")
                    u.stale = None
                continue
            new = tx.new_record(u, e, layer="semantic", **fact)
            u.current[key].remove(cur.id)
            cur.valid_to, cur.superseded_by = t, new.id
            st.move(u, cur, "history")
            tx.changed(cur, "layer", "valid_to", "superseded_by")
            u.stale = None
        else:
            tx.new_record(u, e, layer="semantic", **fact)
        touched.add(f.subject)
        tx.facts_added += 1
    for subj in sorted(touched):
        update_profile(tx, models, u, subj)


def _without_subject(subject: str, sentence: str) -> str:
    """A fact's sentence after its subject (``"Alice's dog is called Max"`` -> ``"dog is called Max"``)."""
    for head in (f"{subject}'s ", f"{subject} "):
        if sentence.startswith(head):
            return sentence[len(head) :]
    return sentence


def update_profile(tx: Tx, models: Models, u: UserState, subject: str) -> None:
    """Entity profile: text = current facts; embedding moves by the damped update (eq. 9–10)."""
    st = tx.st
    sk = norm_key(subject)
    facts = [st.recs[i] for (s, _), ids in sorted(u.current.items()) if s == sk for i in ids]
    if not facts:
        return
    facts.sort(key=lambda r: (r.predicate or "", r.valid_from or 0.0))
    parts = [_without_subject(subject, fact_sentence(subject, r.predicate or "", r.object or "")) for r in facts]
    text = f"{subject}: " + "; ".join(parts)
    target = models.embed([text])
    t = max(r.valid_from or 0.0 for r in facts)
    srcs: list[str] = []
    for r in facts:
        srcs.extend(r.sources)
    pid = u.profiles.get(sk)
    if pid is None:
        tx.new_record(
            u,
            target[0],
            layer="semantic",
            kind="profile",
            text=text,
            subject=subject,
            sources=tuple(dict.fromkeys(srcs)),
            timestamp=t,
            created_at=t,
        )
        return
    p = st.recs[pid]
    rows = st.vec(p).reshape(1, -1).astype(np.float32)
    drift = kernels.damped_update(rows, np.ascontiguousarray(target, dtype=np.float32), float(st.config.profile_lambda))
    d = float(np.asarray(drift).reshape(-1)[0])
    u.drift_total += d
    u.drift_last = d
    u.drift_updates += 1
    tx.store.set_drift(u.user_id, u.drift_total, u.drift_last, u.drift_updates)
    p.text, p.timestamp = text, t
    st.set_sources(u, p, tuple(dict.fromkeys(srcs)))
    st.move(u, p, "semantic", rows[0])
    tx.changed(p, "text", "timestamp", "sources", emb=rows[0])
