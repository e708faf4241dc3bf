"""``lamina pamqa build``: PAM-QA training data from LoCoMo-style multi-document questions.

Each example is one ``qa`` question whose evidence lies in one session (the questions of
``lamina eval position``'s ``locomo`` suite): the gold document (the turns around the
evidence) and ``documents − 1`` distractors from the other conversations, shuffled per example
(seeded), in PAM-QA's format (:mod:`lamina.model.pamqa`): the user message holds the question
before and after the numbered documents, the assistant's reply names the gold document and
then answers. One JSON object a line::

    {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}],
     "question": ..., "answer": ..., "gold_index": 3, "documents": [...],
     "conversation": 0, "session": 2}

``gold_index`` is 0-based (the reply writes it 1-based). lamina trains nothing: the file is
for users who fine-tune elsewhere.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Sequence
from typing import Any

from .commands import documented_command, shared_data, write_jsonl
from .locomo import Conversation
from .position_sweep import _locomo_docs, locomo_questions

__all__ = ["build_pamqa_examples", "add_pamqa_parser"]

_DEFAULT_DATA = shared_data("locomo")


def build_pamqa_examples(
    conversations: Sequence[Conversation],
    *,
    documents: int = 8,
    seed: int = 0,
    limit: int | None = None,
    doc_turns: int = 6,
) -> list[dict[str, Any]]:
    """PAM-QA examples, one per usable question (at most ``limit``), documents shuffled per
    example with ``random.Random(f"{seed}:{i}")``.

    Raises
    ------
    ValueError
        Fewer than two conversations or no usable question, ``documents`` < 2, ``limit`` < 1.
    """
    from ..model.pamqa import pamqa_prompt, pamqa_response  # the model package only when used

    if documents < 2:
        raise ValueError(f"documents must be >= 2 (the gold and a distractor), got {documents}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    qs = locomo_questions(conversations)
    if len(conversations) < 2 or not qs:
        raise ValueError("PAM-QA data needs at least two LoCoMo conversations with single-session questions")
    out: list[dict[str, Any]] = []
    for i, q in enumerate(qs[:limit]):
        rng = random.Random(f"{seed}:{i}")
        gold_doc, pool = _locomo_docs(conversations, q, rng, documents, doc_turns)
        docs = [gold_doc, *pool]
        rng.shuffle(docs)
        g = docs.index(gold_doc)
        out.append(
            {
                "messages": [
                    {"role": "user", "content": pamqa_prompt(q.question, docs)},
                    {"role": "assistant", "content": pamqa_response(g, q.answer)},
                ],
                "question": q.question,
                "answer": q.answer,
                "gold_index": g,
                "documents": docs,
                "conversation": q.conversation,
                "session": q.session,
            }
        )
    return out


def _cmd(args: argparse.Namespace) -> int:
    from .locomo import load_locomo

    if not os.path.exists(args.data):
        print(f"lamina pamqa build: no LoCoMo data at {args.data!r} (--data)", file=sys.stderr)
        return 2
    convs, _ = load_locomo(args.data)
    try:
        ex = build_pamqa_examples(convs, documents=args.documents, seed=args.seed, limit=args.limit)
    except ValueError as e:
        print(f"lamina pamqa build: {e}", file=sys.stderr)
        return 2
    write_jsonl(args.out, ex)
    spread = sorted({x["gold_index"] for x in ex})
    print(f"wrote {len(ex)} PAM-QA examples ({args.documents} documents each, gold at {spread}) to {args.out}")
    return 0


def add_pamqa_parser(sub: Any) -> None:
    """Register ``lamina pamqa build`` on the ``lamina`` command's subparsers."""
    p = sub.add_parser("pamqa", help="PAM-QA (position-agnostic multi-step QA) training data")
    psub = p.add_subparsers(dest="pamqa_cmd", required=True)
    b = documented_command(
        psub,
        "build",
        help="write PAM-QA examples (JSONL) from LoCoMo-style multi-document questions",
        doc=__doc__,
        func=_cmd,
    )
    b.add_argument("--data", default=_DEFAULT_DATA, help="locomo_dev.json or its folder")
    b.add_argument("--out", required=True, help="the JSONL file to write")
    b.add_argument("--documents", type=int, default=8, help="documents per example (gold + distractors)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--limit", type=int, default=None, help="at most this many examples")
