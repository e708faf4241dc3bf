"""What a memory holds, counted: :class:`~lamina.memory.reports.MemoryStats` from the state."""

from __future__ import annotations

from dataclasses import asdict

from ..config import MemoryConfig
from ..reports import MemoryStats, ProfileDrift
from ..state.memstate import MemoryState, UserState
from ..state.records import NsCode
from ..types import LAYERS

__all__ = ["count_stats"]


def count_stats(
    st: MemoryState,
    users: list[UserState],
    *,
    embedder: str,
    dim: int,
    path: str | None,
    config: MemoryConfig,
    llm: str | None,
    llm_fallbacks: int,
) -> MemoryStats:
    """Counts over ``users`` (loaded states): items per layer and kind, archive turns, facts
    (current / superseded), evicted items, sessions, profile drift, the (user/layer)s searched
    through hnswlib; the other fields are passed through (see :class:`lamina.MemoryStats`)."""
    uids = {u.user_id for u in users}
    layers = {L: 0 for L in LAYERS}
    kinds: dict[str, int] = {}
    evicted = turns = 0
    recs = [r for u in users for r in st.urecs(u)]
    for r in recs:
        if r.kind == "turn":
            turns += 1
        if r.status == "active":
            layers[r.layer] += 1
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
        else:
            evicted += 1
    ann = st.vectors.uses_ann
    return MemoryStats(
        embedder=embedder,
        dim=dim,
        path=path,
        users=len(users),
        sessions=sum(1 for (uid, _s) in st.sessions if uid in uids),
        open_sessions=sum(1 for (uid, _s), v in st.sessions.items() if uid in uids and v[0] == "open"),
        items=len(recs),
        layers=layers,
        kinds=kinds,
        archive_turns=turns,
        facts_current=sum(1 for r in recs if r.kind == "fact" and r.layer == "semantic" and r.status == "active"),
        facts_superseded=layers["history"],
        evicted=evicted,
        profile_drift=ProfileDrift(
            total=float(sum(u.drift_total for u in users)),
            last=float(users[-1].drift_last) if len(users) == 1 else None,
            updates=int(sum(u.drift_updates for u in users)),
            lambda_=float(config.profile_lambda),
        ),
        # (user/layer) searched through hnswlib (past ann_threshold), the rest exactly (an archive
        # the index's remote answers, on PostgreSQL with pgvector, never goes through hnswlib)
        ann_layers=sorted(
            f"{u.user_id}/{L}"
            for u in users
            for L in LAYERS
            if (ann(u.ns(LAYERS[L])) and not (L == "archive" and st.vectors.remote is not None))
            or (L == "episodic" and ann(u.ns(NsCode.LEAF)))
        ),
        llm=llm,
        llm_fallbacks=llm_fallbacks,
        config=asdict(config),
    )
