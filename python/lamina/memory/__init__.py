"""``lamina.memory``: the multi-layer memory loop (MLMF Algorithm 1 with MemoryOS / MemTree tiers).

Write path (``add``, ``end_session``) and read path (``context``, ``search``) of docs/design.md §2:

* **working** — raw turns of each live (user, session), FIFO, at most ``working_capacity``;
  on overflow the oldest half is dequeued, cut into segments of adjacent turns by embedding
  similarity and inserted into the episodic tree (the raw turns move to the archive).
* **episodic** — a MemTree per user: segment leaves (raw turns + extractive summary ψ) under
  internal summary nodes, descended while cos ≥ θ(d) = θ0·exp(λ·d/D); session summaries
  EMA-blended (eq. 5, ``kernels.ema_blend``); heat (``kernels.heat_scores``) drives promotion
  (``kernels.select_hot``) to the semantic layer and capacity eviction (``kernels.evict_to_capacity``).
* **semantic** — facts (subject, predicate, object) with validity and provenance, resolved so
  that a new value of a functional predicate supersedes the old one (kept in ``history``), notes
  promoted from hot episodes, and one profile per entity whose embedding moves by the damped
  update of eq. 9–10 (``kernels.damped_update``; drift in ``stats()``).
* **archive** — every raw turn ever added; eviction never touches it.

Capacity projection Π_C (``end_session``): beyond C_e / C_s the items whose raw text is most
redundant go first (the Shapley share of novelty-weighted turn coverage; ``eviction="heat"``: the
lowest heat × strength), optionally a pool using what the other leaves unused (``lend_capacity``); the rule
is written out in :mod:`lamina.memory.write.retention`.

Vectors live in a :class:`~lamina.native.layer_index.LayerIndex`: two native arenas (the archive apart
from the active layers), one namespace per (user, layer), searched with the native exact top-k up
to ``MemoryConfig.ann_threshold`` vectors and through hnswlib past it; the layer gate is
``kernels.softmax_gate`` (eq. 7, entropy bound ε).

The package reads bottom-up as the loop, one folder per stage (imports flow one way, from the
first to the last; ``tests/test_layering.py`` states the rule of each folder):

* at its root, what every stage uses: :mod:`~lamina.memory.config` (``MemoryConfig``),
  :mod:`~lamina.memory.inputs` (argument checks), :mod:`~lamina.memory.reports` (typed results),
  :mod:`~lamina.memory.types` (items and ``Context``);
* :mod:`lamina.memory.store` — persistence, the only SQL: the ``Store`` protocol, SQLite,
  PostgreSQL with pgvector and ``LISTEN`` / ``NOTIFY``;
* :mod:`lamina.memory.state` — the record and namespace codes, per-user indexes, the state and its
  catching up with the store's change log, staleness, the coverage rule's neighbour lists, the
  unit of work ``Tx``;
* :mod:`lamina.memory.dump` — the export format and one user's export and import;
* :mod:`lamina.memory.write` — ``add`` (working FIFO), consolidation (segments, MemTree, summaries,
  EMA blend), A-Mem notes, facts (supersession, profiles), retention (heat, promotion, eviction);
* :mod:`lamina.memory.read` — candidates, rank fusion, ranking, the firewall (what may pass into a
  prompt; domain labels from :mod:`lamina.text.domains`), the budget fill (gate, order);
* :mod:`~lamina.memory.facade`, the façade ``Memory`` (its read methods and export / import are
  mixins from read/ and dump/), and :mod:`~lamina.memory.aio` (``AsyncMemory``).
"""

from __future__ import annotations

from ..text.domains import DomainClassifier
from .config import MemoryConfig
from .facade import ClosedError, Memory
from .read.firewall import Firewall
from .read.listing import Activity, ActivityBin, ItemPage
from .reports import Candidate, ContextExplanation, DeleteReport, MemoryPage, MemoryStats, ProfileDrift, SessionReport
from .write.notes import Link, Note, NoteRevision

__all__ = [
    "Memory",
    "MemoryConfig",
    "Firewall",
    "DomainClassifier",
    "ClosedError",
    "SessionReport",
    "DeleteReport",
    "MemoryPage",
    "MemoryStats",
    "ProfileDrift",
    "Candidate",
    "ContextExplanation",
    "ItemPage",
    "Activity",
    "ActivityBin",
    "Note",
    "NoteRevision",
    "Link",
]
