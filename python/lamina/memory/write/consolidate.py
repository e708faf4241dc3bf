"""Consolidation: working memory → episodic segments in the MemTree (with summaries ψ) and facts
(:mod:`lamina.memory.write.semantic`); at the end of a session its summary ŝ, the EMA blend into the
matching earlier episode (eq. 5), the α decay of strengths, promotion and the capacity projection
(:mod:`lamina.memory.write.retention`).

MemTree insertion: a new leaf descends from the root while its cosine to the best child is at
least θ(d) = θ0·exp(λ·d/D) (D the tree's height); reaching a leaf expands it into an internal
node holding both; every internal node on the path is re-summarised from its children.

Embedding: the loop embeds the turns (``Memory.add``) and the facts and profiles
(:mod:`lamina.memory.write.semantic`), nothing else. A leaf's vector is the centroid of its turns', a
session summary's the centroid of the session's turns'. A tree node is summarised (extractive ψ)
from the turns its children quote — a leaf's turns, a node's own quoted turns — so its
provenance (``sources``) is the few turns its summary quotes, however large its subtree, and
its vector is their centroid: a delete of a turn takes exactly the nodes whose text or vector
comes from it, and a node's cost does not grow with the store. (Centroids of whole subtrees
would converge on the corpus mean as a tree grows, match every new leaf above θ(d) and turn the
tree into a chain; a few quoted turns do not.) With another ψ a node summarises its children's
summaries, keeps their provenance and takes its most central child's vector. ψ scores sentences
with the turn (or child) vectors it is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from ...llm.extract import SourcedSummarizer, Turn, split_sentences
from ...native import kernels
from ...native.search import inner_products
from ..inputs import wall_clock
from ..reports import SessionReport
from ..state.memstate import MemoryState, UserState
from ..state.records import NO_TREE, ROOT, Record, derived_commitment, unit
from ..state.tx import Models, Tx
from .retention import evict, observe_covered, promote
from .semantic import resolve

__all__ = ["dequeue", "end_session", "turn_views", "lift_orphans"]

Vec = npt.NDArray[np.float32]


def turn_views(recs: Sequence[Record], vecs: Vec | None = None) -> list[Turn]:
    """The turns as ψ and 𝒜 see them, with their vectors when given (shape (len(recs), dim));
    a turn's source id is set when it is added."""
    if vecs is None:
        return [Turn(r.source_id or f"t{r.id}", r.speaker, r.text, r.timestamp) for r in recs]
    return [Turn(r.source_id or f"t{r.id}", r.speaker, r.text, r.timestamp, v) for r, v in zip(recs, vecs)]


def dequeue(tx: Tx, models: Models, u: UserState, session_id: str, n: int) -> None:
    """Move the oldest n turns of a session's working memory to the archive and the tree."""
    st = tx.st
    q = u.working[session_id]
    out, u.working[session_id] = q[:n], q[n:]
    if not u.working[session_id]:
        del u.working[session_id]
    turns = [st.recs[i] for i in out]
    embs = st.vecs(out)
    for r in turns:
        st.move(u, r, "archive")
        tx.changed(r, "layer")
    keep = [(r, e) for r, e in zip(turns, embs) if r.commitment != "ephemeral"]
    if keep:
        consolidate(tx, models, u, [r for r, _ in keep], np.stack([e for _, e in keep]))
        observe_covered(st, u, [r.id for r, _ in keep if r.id in u.seg_of])


def segments(tx: Tx, embs: Vec) -> list[list[int]]:
    """Cut adjacent turns into segments: a turn joins while cos(turn, centroid) >= threshold."""
    c = tx.st.config
    dim = tx.st.dim
    segs: list[list[int]] = []
    cur: list[int] = []
    centroid = np.zeros(dim, dtype=np.float32)
    for i in range(len(embs)):
        if cur:
            sim = float(inner_products(embs[i : i + 1], unit(centroid).reshape(1, -1))[0, 0])
            if len(cur) >= c.max_segment_turns or (len(cur) >= c.min_segment_turns and sim < c.segment_threshold):
                segs.append(cur)
                cur, centroid = [], np.zeros(dim, dtype=np.float32)
        cur.append(i)
        centroid = centroid + embs[i]
    if cur:
        if segs and len(cur) < c.min_segment_turns and len(segs[-1]) + len(cur) <= c.max_segment_turns:
            segs[-1].extend(cur)
        else:
            segs.append(cur)
    return segs


def consolidate(tx: Tx, models: Models, u: UserState, turns: list[Record], embs: Vec) -> None:
    """Segments -> episodic leaves (MemTree insertion) and facts -> semantic (Resolve)."""
    st = tx.st
    c = st.config
    for seg in segments(tx, embs) if "episodic" in c.layers else []:
        recs = [turns[i] for i in seg]
        e = unit(embs[seg].mean(axis=0))
        summary = models.summarizer.summarize(turn_views(recs, embs[seg]), c.summary_words) or recs[0].text
        text = "\n".join(f"{r.speaker}: {r.text}" if r.speaker else r.text for r in recs)
        srcs: list[str] = []
        for r in recs:
            srcs.extend(r.sources)
        leaf = tx.new_record(
            u,
            e,
            session_id=recs[-1].session_id,
            layer="episodic",
            kind="segment",
            text=text,
            summary=summary,
            sources=tuple(dict.fromkeys(srcs)),
            members=tuple(r.id for r in recs),
            timestamp=recs[-1].timestamp,
            created_at=recs[0].timestamp,
            interaction_len=float(len(recs)),
            domain=recs[0].domain,
            commitment=derived_commitment(r.commitment for r in recs),
            parent_id=None,
            depth=1,
        )
        _tree_insert(tx, models, u, leaf, e)
        st.add_turn_views(u, leaf, [r.id for r in recs], np.ascontiguousarray(embs[seg]))
    if "semantic" not in c.layers:
        return
    facts = models.extractor.extract(turn_views(turns))
    resolve(tx, models, u, facts, {r.source_id: r for r in turns if r.source_id is not None})


# -- MemTree
def _theta(tx: Tx, depth: int, height: int) -> float:
    c = tx.st.config
    return c.tree_theta0 * math.exp(c.tree_lambda * depth / max(1, height))


def _tree_insert(tx: Tx, models: Models, u: UserState, leaf: Record, e: Vec) -> None:
    st = tx.st
    v, depth = ROOT, 0
    path: list[int] = []
    height = max(1, u.max_depth)
    # The leaf was indexed under parent None; attach it properly below.
    while True:
        if v != ROOT and st.recs[v].kind == "segment":
            # Leaf expansion: a new internal node takes v's place, v and the new leaf under it.
            old = st.recs[v]
            parent = old.parent_id
            assert parent is not None
            sib = u.children[parent]
            node = tx.new_record(
                u,
                st.vec(old),
                session_id=leaf.session_id,
                layer="episodic",
                kind="summary",
                text=old.summary or old.text,
                summary=old.summary,
                sources=(),
                members=(),
                timestamp=old.timestamp,
                created_at=old.created_at,
                parent_id=None,
                depth=old.depth,
            )
            sib[sib.index(v)] = node.id
            sib.sort(key=lambda i: st.recs[i].seq)
            node.parent_id = parent
            u.children[node.id] = [v]
            old.parent_id, old.depth = node.id, old.depth + 1
            tx.changed(old, "parent_id", "depth")
            _attach(u, leaf, node.id, old.depth)
            path.append(node.id)
            break
        kids = u.children.get(v, [])
        if not kids:
            _attach(u, leaf, v, depth + 1)
            break
        sims = inner_products(np.ascontiguousarray(e, dtype=np.float32).reshape(1, -1), st.vecs(kids))[0]
        b = int(np.argmax(sims))
        if float(sims[b]) >= _theta(tx, depth, height):
            v = kids[b]
            depth += 1
            if st.recs[v].kind == "summary":
                path.append(v)
            continue
        _attach(u, leaf, v, depth + 1)
        break
    for nid in reversed(path):  # deepest first, so parents see fresh child summaries
        _resummarise(tx, models, u, st.recs[nid], leaf)


def lift_orphans(st: MemoryState, u: UserState, doomed: set[int]) -> dict[int, dict[str, int]]:
    """Before ``doomed`` records of ``u`` are deleted: a surviving tree node whose parent is
    doomed moves, with its subtree, under the nearest ancestor that survives (the root when none
    does), so that no active node points at a deleted one. (A deleted turn takes every node whose
    sources hold it — its leaf and the ancestors that quote it —, but not their other children.)

    Changes nothing: returns the new column values (``parent_id`` and/or ``depth``) per record
    id, for the store; the state is patched from the store afterwards. Reads only the children
    of the doomed nodes and their subtrees."""
    moves: dict[int, dict[str, int]] = {}

    def depth(i: int) -> int:
        return moves[i]["depth"] if i in moves and "depth" in moves[i] else int(st.recs[i].depth)

    orphans = {k for d in doomed for k in u.children.get(d, ()) if k not in doomed}
    for xid in sorted(orphans, key=lambda i: st.recs[i].seq):
        x = st.recs[xid]
        assert x.parent_id is not None
        anchor = x.parent_id
        while anchor not in (ROOT, NO_TREE) and anchor in doomed:
            p = st.recs.get(anchor)
            anchor = ROOT if p is None or p.parent_id is None else p.parent_id
        shift = (0 if anchor == ROOT else depth(anchor)) + 1 - depth(xid)
        moves.setdefault(xid, {})["parent_id"] = anchor
        stack = [xid]
        while stack:
            y = stack.pop()
            moves.setdefault(y, {})["depth"] = max(1, depth(y) + shift)
            stack.extend(k for k in u.children.get(y, ()) if k not in doomed)
    return moves


def _attach(u: UserState, leaf: Record, parent: int, depth: int) -> None:
    leaf.parent_id, leaf.depth = parent, depth
    u.children.setdefault(parent, []).append(leaf.id)
    u.max_depth = max(u.max_depth, depth)


def _centroid(vecs: Vec) -> Vec:
    """Unit mean of ``vecs`` (shape (n, dim)), shape (dim,): a session summary's vector (and a
    leaf's, from its turns). Nothing is embedded."""
    return unit(vecs.mean(axis=0))


def _resummarise(tx: Tx, models: Models, u: UserState, node: Record, leaf: Record) -> None:
    """Re-summarise an ancestor of a newly inserted leaf; its interaction length grows by the
    leaf's (a freshly expanded node also takes its first child's). Nothing is embedded.

    With an extractive ψ (:class:`~lamina.llm.extract.SourcedSummarizer`, the default) the node is
    summarised from the turns its children quote (a leaf: its turns; a node: its sources), and
    its provenance is the turns it quotes in turn, its vector their centroid: a node's sources
    stay as short as its summary however large its subtree grows, and deleting a turn takes
    exactly the nodes whose text or vector comes from it. Another ψ summarises the children's
    summaries; then the node's provenance is every child's, its vector its most central child's
    (see the module docstring)."""
    st = tx.st
    kids = [st.recs[k] for k in u.children.get(node.id, [])]
    if not kids:
        return
    psi = models.summarizer
    sourced = _sourced(psi)
    turns = _quotable_turns(st, u, kids) if sourced is not None else []
    if turns:
        assert sourced is not None
        tv = st.vecs([t.id for t in turns])
        summary, quoted = sourced.summarize_sourced(turn_views(turns, tv), st.config.summary_words)
        quoted = quoted or list(range(len(turns)))
        sources = tuple(dict.fromkeys(s for i in quoted for s in turns[i].sources))
        emb = _centroid(tv[quoted])
    else:
        kv = st.vecs([k.id for k in kids])
        views = [Turn(str(k.id), None, k.summary or k.text, k.timestamp, v) for k, v in zip(kids, kv)]
        summary = psi.summarize(views, st.config.summary_words)
        sources = tuple(dict.fromkeys(s for k in kids for s in k.sources))
        emb = np.ascontiguousarray(
            kv[int(np.argmax(inner_products(_centroid(kv).reshape(1, -1), kv)[0]))]
        )  # the most central child's
    if node.interaction_len is None or not node.sources:  # a new node from a leaf expansion
        node.interaction_len = float(sum(k.interaction_len or 0.0 for k in kids if k.id != leaf.id))
    node.text = node.summary = summary or kids[-1].text
    st.set_sources(u, node, sources)
    node.timestamp = max((k.timestamp for k in kids if k.timestamp is not None), default=node.timestamp)
    node.interaction_len = float(node.interaction_len or 0.0) + float(leaf.interaction_len or 0.0)
    st.move(u, node, "episodic", emb)
    tx.changed(node, "text", "summary", "sources", "timestamp", "interaction_len", emb=emb)


def _sourced(psi: object) -> SourcedSummarizer | None:
    """``psi`` as a :class:`~lamina.llm.extract.SourcedSummarizer` (the protocol's one member is
    there), or None; what ``isinstance`` on the runtime-checkable protocol decides, without its
    tens of µs per call (it runs per tree node)."""
    return cast(SourcedSummarizer, psi) if callable(getattr(psi, "summarize_sourced", None)) else None


def _quotable_turns(st: MemoryState, u: UserState, kids: list[Record]) -> list[Record]:
    """The stored turns a node's summary may quote, in id order: each leaf child's turns and
    each node child's source turns (only those its summary quotes, for a node written before
    nodes kept quoted provenance: such a node's sources are its whole subtree's)."""
    ids: set[int] = set()
    bound = 4 * int(st.config.max_segment_turns) + int(st.config.summary_words)
    for k in kids:
        if k.kind == "segment":
            ids.update(k.members or ())
            continue
        cand = [t for t in map(u.by_src.get, k.sources) if t is not None]
        if len(cand) > bound:
            text = k.summary or k.text
            cand = [t for t in cand if t in st.recs and _quoted_in(st.recs[t], text)]
        ids.update(cand)
    return [st.recs[i] for i in sorted(ids) if i in st.recs and i in st.vectors]


def _quoted_in(turn: Record, text: str) -> bool:
    """Whether ``text`` holds a sentence of ``turn`` (as ψ quotes it: whole, after its speaker)."""
    return any(s in text for s in split_sentences(turn.text))


# -- end of session
def end_session(tx: Tx, models: Models, u: UserState, session_id: str, t_now: float | None) -> SessionReport:
    """Consolidate a session (see :meth:`lamina.Memory.end_session`) inside ``tx``."""
    st = tx.st
    c = st.config
    report = SessionReport()
    if st.sessions[(u.user_id, session_id)][0] == "ended" and session_id not in u.working:
        return report  # already consolidated
    n_seg0 = u.n_active["episodic"]
    session_turns = [
        r for r in (st.recs[i] for i in u.session_turns.get(session_id, ())) if r.commitment != "ephemeral"
    ]
    if session_id in u.working:
        dequeue(tx, models, u, session_id, len(u.working[session_id]))
    if t_now is None:
        t_now = max((r.timestamp for r in session_turns if r.timestamp is not None), default=wall_clock())
    # Strength decay of earlier episodes (the α·M_{t-1} part of eq. 5), lazily: one more decay
    # for the user, none for this session's own items (MemoryState.strength)
    key = (u.user_id, session_id)
    u.decays += 1
    st.sessions[key][3] += 1
    tx.store.set_decays(u.user_id, u.decays)
    if session_turns and "episodic" in c.layers:
        # the earlier sessions' summaries, in id order (the blend's candidates)
        recs = st.recs
        prev = sorted(i for i in u.pool_sessions if (r := recs[i]).kind == "summary" and r.session_id != session_id)
        report.blend_drift = _session_summary(tx, models, u, session_id, session_turns, prev)
    report.promoted = promote(tx, models, u, t_now) if "semantic" in c.layers else 0
    report.evicted = evict(tx, u, t_now)
    report.segments = max(0, u.n_active["episodic"] - n_seg0)
    report.facts = tx.facts_added
    _status, started, _ended, ends = st.sessions[key]
    st.sessions[key] = ["ended", started, t_now, ends]
    tx.store.upsert_session(u.user_id, session_id, "ended", started, t_now, ends)
    return report


def _session_summary(
    tx: Tx, models: Models, u: UserState, session_id: str, session_turns: list[Record], prev: list[int]
) -> float:
    """Add ŝ = ψ(session) to the episodic layer, blended first into the most similar earlier
    session summary (eq. 5, ``kernels.ema_blend``); returns the blend's drift (0: none). ŝ's
    vector is the centroid of the session's turns (:func:`_centroid`): nothing is embedded.
    ``prev``: the ids of the earlier sessions' active summaries, in id order."""
    st = tx.st
    c = st.config
    tv = st.vecs([r.id for r in session_turns])
    summary = models.summarizer.summarize(turn_views(session_turns, tv), c.summary_words)
    if not summary.strip():
        return 0.0
    drift = 0.0
    s_emb = _centroid(tv).reshape(1, -1)
    if prev:
        P = st.vecs(prev)
        sims = inner_products(s_emb, P)[0]
        b = int(np.argmax(sims))
        if float(sims[b]) >= c.blend_threshold:
            row = np.ascontiguousarray(P[b : b + 1])
            d = kernels.ema_blend(row, np.ascontiguousarray(s_emb), float(c.alpha), renormalize=True)
            drift = float(np.asarray(d).reshape(-1)[0])
            m = st.recs[prev[b]]
            st.move(u, m, "episodic", row[0])
            tx.changed(m, emb=row[0])
    srcs: list[str] = []
    for r in session_turns:
        srcs.extend(r.sources)
    tx.new_record(
        u,
        s_emb[0],
        session_id=session_id,
        layer="episodic",
        kind="summary",
        text=summary,
        summary=summary,
        sources=tuple(dict.fromkeys(srcs)),
        timestamp=session_turns[-1].timestamp,
        created_at=session_turns[0].timestamp,
        interaction_len=float(len(session_turns)),
        parent_id=NO_TREE,
        depth=0,
    )
    return drift
