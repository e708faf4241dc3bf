"""The measurement behind the context-order table of docs/evaluation/locomo.md (#23 part 4): lamina's LoCoMo contexts
answered by the local reader in every context order, round-robin across the conversations, one
JSON line per question (a stop keeps every question done); then the table.

    python bench/locomo_orders.py --per-conversation 80 --budget 1024 --out orders.jsonl
    python bench/locomo_orders.py --summarise orders.jsonl

Each conversation's questions are ``lamina eval locomo --questions-per-conversation N``'s subset,
asked in the same order against the same Memory, so every context equals the CLI's; only the
order of the conversations is interleaved (``--stop`` ends the run at a wall-clock time).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from lamina.embedders import get_embedder
from lamina.eval.harness import _DAY, Reader, _answer_in_orders, order_stats
from lamina.eval.locomo import load_locomo
from lamina.eval.systems import CachedEmbedder, make_system
from lamina.eval.tables import format_orders
from lamina.memory.types import CONTEXT_ORDERS, ContextOrder, context_order


def _summarise(path: str) -> None:
    recs = [json.loads(line) for line in open(path, encoding="utf-8")]
    ords = list(recs[0]["orders"])
    st = order_stats(recs, ords)
    res = {
        "reader": {"model": recs[0]["model"], "budget": recs[0]["budget"], "orders": ords},
        "systems": ["lamina"],
        "results": {"lamina": {str(recs[0]["budget"]): {"reader_orders": st}}},
    }
    print("\n".join(format_orders(res)))
    same = sum(1 for r in recs if len({r["orders"][o]["pred"] for o in ords}) == 1)
    print(f"answers identical in every order: {same}/{len(recs)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/locomo")
    ap.add_argument("--per-conversation", type=int, default=80)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--orders", default=",".join(CONTEXT_ORDERS))
    ap.add_argument("--stop", type=float, default=None, help="epoch seconds: start no question after this")
    ap.add_argument("--cache", default=None, help="the eval vector cache (SQLite)")
    ap.add_argument("--out", default="orders.jsonl")
    ap.add_argument("--summarise", default=None, help="print the table of a finished JSONL and exit")
    a = ap.parse_args()
    if a.summarise:
        _summarise(a.summarise)
        return 0
    from lamina.llm.local_chat import LocalChat

    ords: list[ContextOrder] = [context_order(o.strip()) for o in a.orders.split(",")]
    n = a.per_conversation
    convs, _ = load_locomo(a.data)
    emb = CachedEmbedder(get_embedder("minilm"), a.cache)
    chat = LocalChat(threads=2)
    reader = Reader(chat, name=f"local:{chat.model.path.name}")
    state = []
    t0 = time.time()
    for c in convs:
        qs = c.questions
        sub = [qs[i * len(qs) // n] for i in range(n)] if n < len(qs) else qs
        emb.embed([t.text for t in c.turns] + [q.question for q in sub])
        sysm = make_system("lamina", emb, c.sample_id)
        for s in c.sessions:
            sysm.ingest(s)
        state.append((c, sub, sysm, max(t.timestamp for t in c.turns) + _DAY))
    done = 0
    with open(a.out, "a", encoding="utf-8", buffering=1) as out:
        for i in range(n):
            for c, sub, sysm, now in state:
                if i >= len(sub):
                    continue
                if a.stop is not None and time.time() > a.stop:
                    print(f"stopped after {done} questions", file=sys.stderr)
                    return 0
                q = sub[i]
                ctx = sysm.context(q.question, a.budget, now, emb.embed([q.question])[0])
                rec = {"qid": q.qid, "cat": q.category, "round": i, "tokens": ctx.tokens, "items": len(ctx.items),
                       "model": reader.model, "budget": a.budget}  # fmt: skip
                _answer_in_orders(reader, ctx, ords, c.speakers, q, rec)
                out.write(json.dumps(rec) + "\n")
                done += 1
                print(f"\r{done} questions, round {i + 1}/{n}, {time.time() - t0:.0f} s", end="", file=sys.stderr)
    print(f"\nall {done} questions done", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
