"""A superseded fact's turns rank below the current value's (the current-value lift of the read
path, :meth:`lamina.memory.state.staleness.Staleness.lifts`), on the demo's conversations: for
every current-state question the best-scored item naming any value of the slot names the
current one, and the context marks it ``(current)``; with both embedders."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from lamina import Memory
from lamina.cli.demo import generate


def _names(text: str, value: str) -> bool:
    return re.search(r"\b" + re.escape(value.lower()) + r"\b", text.lower()) is not None


def current_value_ranks_first(path: Path, embedder: Any) -> tuple[int, int, int]:
    """Ingest a demo of 4 users x 12 sessions x 24 turns; (questions whose best-scored item
    naming a value names the current one, current-state questions, contexts marked current)."""
    convs = generate(4, 12, 24, 7)
    good = total = marked = 0
    with Memory(path, embedder=embedder) as m:
        for c in convs:
            for sid, msgs in c.sessions:
                m.add(msgs, user_id=c.user_id, session_id=sid)
                m.end_session(user_id=c.user_id, session_id=sid)
        for c in convs:
            now = c.sessions[-1][1][-1]["timestamp"] + 86400
            queries = [q for q in c.questions if q.kind == "current"]
            for q, ctx in zip(queries, m.context_batch([q.text for q in queries], user_ids=c.user_id, now=now)):
                values = [q.answer, *q.stale]
                best = next(
                    (
                        it.render()
                        for it in sorted(ctx.items, key=lambda x: -x.score)
                        if any(_names(it.render(), v) for v in values)
                    ),
                    "",
                )
                total += 1
                good += _names(best, q.answer) and not any(_names(best, v) for v in q.stale)
                marked += any(
                    _names(line, q.answer) and line.endswith("(current)") for line in ctx.render().split("\n")
                )
                assert ctx.render() == m.context(q.text, user_id=c.user_id, now=now).render()  # batch = one by one
    return good, total, marked


def test_the_current_value_ranks_first_with_the_hashing_embedder(tmp_path: Path) -> None:
    good, total, marked = current_value_ranks_first(tmp_path / "demo.db", "hashing")
    assert total == 16 and good == total and marked == total


@pytest.mark.slow  # (about a minute of MiniLM on 2 cores)
def test_the_current_value_ranks_first_with_minilm(tmp_path: Path, minilm_model: Any) -> None:
    good, total, marked = current_value_ranks_first(tmp_path / "demo.db", minilm_model)
    assert total == 16 and good == total and marked == total
