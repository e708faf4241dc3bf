"""Byte-level equivalence of the memory loop across two builds of lamina.

Replays the LoCoMo development split through ``lamina.Memory`` exactly as ``lamina eval
locomo`` does (one user per conversation, session by session, ``end_session`` after each, then
every question at every budget, with every lamina variant of the evaluation), plus a
capacity-bounded replay of each conversation (the retention protocol's eviction path, with both
eviction rules), and ``lamina demo``. It records a SHA-256 of everything a user can observe:

* each context: the rendered text, the items (id, layer, kind, score), gates, β, abstain;
* each ``end_session`` report, ``search`` results, ``facts``, ``stats`` (paths and timings
  left out);
* every stored row of the SQLite file (items with their embedding bytes, sessions, users, meta),
  after ``close``;
* ``lamina demo``'s table (the latency and timing rows masked) and its stored rows.

Run it on the old build (``--out before.json``) and on the new one (``--out after.json
--compare before.json``); the comparison lists every key whose digest differs.

The script speaks only the public API, so it runs on both sides of a refactoring.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import re
import secrets
import sqlite3
import sys
import tempfile
from dataclasses import replace
from typing import Any

import numpy as np

import lamina

try:
    from lamina.cli.demo import run_demo
except ImportError:  # a build before the layout of issue 43
    from lamina.demo import run_demo  # type: ignore[no-redef]
from lamina.embedders import get_embedder
from lamina.eval import load_locomo
from lamina.eval.systems import LAMINA_VARIANTS, CachedEmbedder

BUDGETS = (256, 512, 1024, 2048)

# Item ids carry a random per-database tag (``(tag << 40) | seq``); pinned here, so that the two
# builds give the same ids (and iterate id sets in the same order).
secrets.randbelow = lambda n: 4242  # type: ignore[assignment]
_DAY = 86400.0


def _sha(x: Any) -> str:
    return hashlib.sha256(json.dumps(x, sort_keys=True, default=repr).encode()).hexdigest()


def _as_dict(x: Any) -> Any:
    return x.to_dict() if hasattr(x, "to_dict") else x


def _ctx_view(c: Any) -> dict[str, Any]:
    return {
        "render": c.render(),
        "items": [(it.id, it.layer, it.kind, repr(float(it.score)), it.render()) for it in c.items],
        "gates": {k: repr(float(v)) for k, v in sorted(c.gates.items())},
        "beta": repr(float(c.beta)),
        "abstain": bool(c.abstain),
        "tokens": int(c.tokens),
    }


def _rows(path: str) -> dict[str, str]:
    con = sqlite3.connect(path)
    try:
        out = {}
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            h = hashlib.sha256()
            for row in con.execute(f"SELECT * FROM {table} ORDER BY 1, 2"):
                h.update(repr(tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)).encode())
            out[table] = h.hexdigest()
        return out
    finally:
        con.close()


def _stats_view(st: Any) -> dict[str, Any]:
    d = dict(_as_dict(st))
    d.pop("path", None)
    return d


def replay(
    conv: Any, emb: CachedEmbedder, cfg: lamina.MemoryConfig, tag: str, out: dict[str, str], questions: bool = True
) -> None:
    """One conversation through one configuration; digests go to ``out`` under ``tag``."""
    uid = conv.sample_id
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.db")
        mem = lamina.Memory(path, embedder=emb, config=cfg)
        reports = []
        for s in conv.sessions:
            if not s.turns:
                continue
            sid = f"session_{s.number}"
            msgs = [{"speaker": t.speaker, "text": t.text, "id": t.dia_id, "timestamp": t.timestamp} for t in s.turns]
            ids = mem.add(msgs, user_id=uid, session_id=sid)
            rep = mem.end_session(user_id=uid, session_id=sid, now=s.turns[-1].timestamp)
            reports.append((ids, _as_dict(rep)))
        out[f"{tag}/reports"] = _sha(reports)
        now = max(t.timestamp for t in conv.turns) + _DAY
        qs = conv.questions if questions else conv.questions[:40]
        for q in qs:
            qv = np.ascontiguousarray(emb.embed([q.question])[0], dtype=np.float32)
            for b in BUDGETS:
                c = mem.context(q.question, user_id=uid, budget=b, now=now, query_embedding=qv)
                out[f"{tag}/ctx/{q.qid}/{b}"] = _sha(_ctx_view(c))
        for q in conv.questions[:10]:
            for layers in (None, ["archive"], ["episodic"], ["semantic"]):
                hits = mem.search(q.question, user_id=uid, k=8, layers=layers)
                out[f"{tag}/search/{q.qid}/{layers}"] = _sha([(h.id, h.layer, repr(float(h.score))) for h in hits])
        out[f"{tag}/facts"] = _sha(
            [(f.id, f.subject, f.predicate, f.object, f.valid_from, f.valid_to) for f in mem.facts(user_id=uid)]
        )
        out[f"{tag}/stats"] = _sha(_stats_view(mem.stats()))
        mem.close()
        for table, h in _rows(path).items():
            out[f"{tag}/rows/{table}"] = h


def demo(out: dict[str, str]) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "demo.db")
        buf = io.StringIO()
        run_demo(db_path=path, out=buf, progress=False)
        text = buf.getvalue().replace(os.path.abspath(path), "<db>")
        masked = "\n".join(
            re.sub(r"\d+\.\d+( / \d+\.\d+)?$", "<time>", ln) if ("latency" in ln or "time (s" in ln) else ln
            for ln in text.splitlines()
        )
        out["demo/table"] = _sha(masked)
        for table, h in _rows(path).items():
            out[f"demo/rows/{table}"] = h
        return masked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "locomo")
    )
    p.add_argument("--embedder", default="hashing", help="hashing | minilm")
    p.add_argument("--cache", default=os.path.expanduser("~/.cache/lamina/eval-vectors.sqlite"))
    p.add_argument("--conversations", type=int, default=0, help="only the first N (0: all)")
    p.add_argument("--out", required=True)
    p.add_argument("--compare", help="a digest file of the other build")
    p.add_argument(
        "--ignore",
        default=None,
        help="a regular expression of keys whose difference is intended (e.g. 'rows/(users|meta)$' "
        "across a schema change); they are listed but do not fail the comparison",
    )
    a = p.parse_args(argv)
    convs, _ = load_locomo(a.data)
    if a.conversations:
        convs = convs[: a.conversations]
    emb = CachedEmbedder(get_embedder(a.embedder), path=a.cache)
    out: dict[str, str] = {}
    for i, conv in enumerate(convs):
        n_turns = len(conv.turns)
        for name, change in LAMINA_VARIANTS.items():
            replay(conv, emb, replace(lamina.MemoryConfig(), **change), f"{a.embedder}/{name}/{conv.sample_id}", out)
        half = max(1, math.ceil(0.25 * n_turns / 2))
        for ev in ("coverage", "heat"):
            cfg = replace(lamina.MemoryConfig(), episodic_capacity=half, semantic_capacity=half, eviction=ev)
            replay(conv, emb, cfg, f"{a.embedder}/capacity-{ev}/{conv.sample_id}", out, questions=False)
        print(f"[{i + 1}/{len(convs)}] {conv.sample_id}: {len(out)} digests", file=sys.stderr)
    table = demo(out)
    print(table)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
    print(f"{len(out)} digests written to {a.out}")
    if a.compare:
        with open(a.compare) as f:
            other = json.load(f)
        keys = sorted(set(out) | set(other))
        diff = [k for k in keys if out.get(k) != other.get(k)]
        intended = [k for k in diff if a.ignore and re.search(a.ignore, k)]
        diff = [k for k in diff if k not in intended]
        print(
            f"compared with {a.compare}: {len(keys) - len(diff) - len(intended)} of {len(keys)} identical, "
            f"{len(diff)} differ"
            + (f", {len(intended)} differ as intended (--ignore {a.ignore!r})" if intended else "")
        )
        for k in diff[:40]:
            print(f"  differs: {k}")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
