"""What a context was chosen from, and why (:meth:`lamina.Memory.explain_context`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..reports import Candidate, ContextExplanation
from ..state.memstate import MemoryState
from ..state.records import Record
from ..types import Context
from .candidates import Candidates

__all__ = ["explanation", "gate_entropy"]


def gate_entropy(gates: Mapping[str, float]) -> float:
    """H(γ) in nats over the layers with a positive gate."""
    g = np.array([v for v in gates.values() if v > 0], dtype=np.float64)
    return float(-(g * np.log(g)).sum()) if g.size else 0.0


def explanation(
    st: MemoryState,
    ctx: Context,
    layers: Sequence[str],
    cands: Candidates,
    chosen: Sequence[tuple[float, Record]],
    reasons: Mapping[int, str],
    used: int,
    max_entropy: float | None,
) -> ContextExplanation:
    """The explanation of ``ctx``: per layer its candidates best first, each chosen or why not
    (``reasons``: what :func:`lamina.memory.read.fill.fill` recorded; an item chosen in one layer is
    ``taken`` in the others; what the fill never reached is ``budget``)."""
    ids = {r.id for _, r in chosen}
    shown: set[int] = set()
    per: dict[str, list[Candidate]] = {}
    for L in layers:
        out = []
        for s, r in sorted(cands.per_layer.get(L, ()), key=lambda sr: -sr[0]):
            it = st.item(r, cands.demoted.get(r.id, s))
            if r.id in ids:
                why = "taken" if r.id in shown else "chosen"
                shown.add(r.id)
            else:
                why = reasons.get(r.id, "budget")
                why = "budget" if why == "taken" else why
            out.append(Candidate(it, L, why == "chosen", why, r.id in cands.demoted))
        if out:
            per[L] = out
    return ContextExplanation(
        context=ctx,
        candidates=per,
        relevance=dict(cands.relevance),
        max_entropy=max_entropy,
        entropy=gate_entropy(ctx.gates),
        used_tokens=int(used),
    )
