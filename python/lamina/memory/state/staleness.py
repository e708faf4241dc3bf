"""What only supports superseded facts: the stale penalty of the read path."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from .records import Record, norm_key

__all__ = ["Staleness", "supersession_heirs"]


def supersession_heirs(
    recs: Mapping[int, Record], fact_ids: Iterable[int], stale: frozenset[str]
) -> dict[str, tuple[int, ...]]:
    """Stale source id -> the current facts at the end of the supersession chains of the
    superseded facts (``history`` layer) from that source (:attr:`Staleness.heirs`)."""
    heirs: dict[str, set[int]] = {}
    for i in fact_ids:
        r = recs[i]
        if r.status != "active" or r.layer != "history" or r.superseded_by is None:
            continue
        heir = _current_heir(recs, int(r.superseded_by))
        if heir is not None:
            for src in r.sources:
                if src in stale:
                    heirs.setdefault(src, set()).add(heir)
    return {k: tuple(sorted(v)) for k, v in heirs.items()}


def _current_heir(recs: Mapping[int, Record], fact_id: int) -> int | None:
    """The current fact at the end of a supersession chain from ``fact_id`` (None: the chain
    ends in a deleted or no longer current fact)."""
    seen: set[int] = set()
    while fact_id not in seen:
        seen.add(fact_id)
        r = recs.get(fact_id)
        if r is None or r.status != "active":
            return None
        if r.layer != "history":
            return fact_id
        if r.superseded_by is None:
            return None
        fact_id = int(r.superseded_by)
    return None


class Staleness:
    """Sources and values that only support superseded facts (for the stale penalty).

    Parameters
    ----------
    sources : source ids whose every fact is superseded
    values : superseded object value -> the current values of the same subject + predicate
    resolved : ids of current facts that superseded another
    heirs : stale source id -> the current facts that superseded (directly or along a chain) a
        fact of that source: what a question the stale turn answers asks now
    """

    def __init__(
        self,
        sources: frozenset[str],
        values: dict[str, set[str]],
        resolved: frozenset[int] = frozenset(),
        heirs: dict[str, tuple[int, ...]] | None = None,
    ) -> None:
        self.sources = sources
        self.values = values
        self.resolved = resolved
        self.heirs: dict[str, tuple[int, ...]] = heirs or {}
        self._heirless = frozenset(self.heirs).isdisjoint
        # item id -> (its text, its sources, weight): an entry holds while the item keeps the
        # very text and sources objects it was computed from (a re-summarised node gets new ones)
        self.cache: dict[int, tuple[str, Sequence[str], float]] = {}
        self._re = (
            re.compile(r"\b(" + "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True)) + r")\b", re.I)
            if values
            else None
        )
        # Prefilter: the pattern can match only where a value occurs case-insensitively, so a
        # text none of whose casefolded substrings is a casefolded value is skipped.
        self._folded = tuple({v.casefold() for v in values})

    def __bool__(self) -> bool:
        return bool(self.sources) or bool(self.values)

    def same_as(self, other: Staleness) -> bool:
        """Whether both were built from the same facts (then one's cache serves the other)."""
        return (self.sources, self.values, self.resolved, self.heirs) == (
            other.sources,
            other.values,
            other.resolved,
            other.heirs,
        )

    def lifts(self, rows: Sequence[tuple[float, Sequence[str]]]) -> dict[int, float]:
        """The current-value lift of one query: for each current fact that superseded a fact of
        a candidate's sources, the best (unpenalised) score of such a candidate. ``rows``: the
        query's stale candidates (score, sources), in any order."""
        out: dict[int, float] = {}
        heirs = self.heirs
        lone = self._heirless  # (most candidates have no source with an heir: skipped in one C call)
        for s, sources in [x for x in rows if not lone(x[1])]:
            for src in sources:
                for f in heirs.get(src, ()):
                    if f not in out or s > out[f]:
                        out[f] = s
        return out

    def weight(self, item_id: int, text: str, sources: Sequence[str], low: str | None = None) -> float:
        """1 when the text names a superseded value and not its current one (or all its sources
        are stale); else the share of stale sources. Cached per item (this object is rebuilt
        whenever facts change; an item's entry holds while its text and sources are the same
        objects). ``low``: the text's ``norm_key``, when known."""
        e = self.cache.get(item_id)
        if e is not None and e[0] is text and e[1] is sources:
            return e[2]
        w = self._weight(text, sources, low)
        self.cache[item_id] = (text, sources, w)
        return w

    def _weight(self, text: str, sources: Sequence[str], low: str | None = None) -> float:
        if self._re is not None:
            if low is None:
                low = norm_key(text)
            folded = low.casefold()
            for m in self._re.finditer(low) if any(v in folded for v in self._folded) else ():
                if not any(cur in low for cur in self.values.get(m.group(1), ())):
                    return 1.0
        if not sources or not self.sources:
            return 0.0
        if len(sources) == 1:  # (a turn)
            return 1.0 if sources[0] in self.sources else 0.0
        return sum(1 for x in sources if x in self.sources) / len(sources)
