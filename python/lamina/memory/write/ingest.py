"""``add``: checked messages become turns in working memory (a FIFO per live session) and the
archive; an overflowing queue hands its oldest half to consolidation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import InvalidInput
from ..inputs import check_text, to_time
from ..metadata import Frozen, check_metadata, merge
from ..state.records import COMMITMENTS
from ..state.tx import Models, Tx
from .consolidate import dequeue
from .notes import link_new_turns

__all__ = ["Message", "parse_messages", "add_turns"]


@dataclass(slots=True)
class Message:
    """One checked message of :meth:`lamina.Memory.add`."""

    text: str
    speaker: str | None
    source_id: str | None
    timestamp: float | None
    domain: str | None
    commitment: str
    metadata: Frozen = ()


#: The keys a message may have (anything else is refused, naming the key: a misspelt key such
#: as ``"timestmap"`` must not vanish, and caller data goes in ``metadata``, where it is kept).
MESSAGE_KEYS = ("speaker", "role", "text", "content", "id", "timestamp", "domain", "commitment", "metadata")


def parse_messages(messages: Sequence[Mapping[str, Any]], metadata: Frozen = ()) -> list[Message]:
    """Check ``add``'s messages (see :meth:`lamina.Memory.add`); raises before anything is written.
    ``metadata``: the call's metadata (checked), under each message's own (which wins on a key)."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise TypeError("messages must be a list of dicts like {'speaker': 'Alice', 'text': '...'}")
    if not messages:
        raise InvalidInput("messages is empty; pass at least one message")
    parsed: list[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise TypeError(f"messages[{i}] must be a dict, got {type(m).__name__}")
        unknown = [k for k in m if k not in MESSAGE_KEYS]
        if unknown:
            raise InvalidInput(
                f"messages[{i}] has unknown key {unknown[0]!r}; a message takes {list(MESSAGE_KEYS)} "
                f"(put your own values in 'metadata', e.g. {{'metadata': {{{unknown[0]!r}: ...}}}})"
            )
        text = m.get("text", m.get("content"))
        if not isinstance(text, str):
            raise TypeError(f"messages[{i}] needs 'text' (or 'content') as a str, got {type(text).__name__}")
        if not text.strip():
            raise InvalidInput(f"messages[{i}] has empty text")
        check_text(text, f"messages[{i}]['text']")
        sp = m.get("speaker", m.get("role"))
        if sp is not None:
            if not isinstance(sp, str):
                raise TypeError(f"messages[{i}]['speaker'] must be a str, got {type(sp).__name__}")
            check_text(sp, f"messages[{i}]['speaker']")
        src = m.get("id")
        if src is not None:
            if isinstance(src, bool) or not isinstance(src, (str, int)):
                raise TypeError(f"messages[{i}]['id'] must be a str or int, got {type(src).__name__}")
            src = check_text(str(src), f"messages[{i}]['id']")
        t = to_time(m.get("timestamp"), f"messages[{i}]['timestamp']")
        dom = m.get("domain")
        if dom is not None:
            if not isinstance(dom, str):
                raise TypeError(f"messages[{i}]['domain'] must be a str")
            check_text(dom, f"messages[{i}]['domain']")
        com = m.get("commitment", "persist")
        if com not in COMMITMENTS:
            raise InvalidInput(f"messages[{i}]['commitment'] must be one of {COMMITMENTS}, got {com!r}")
        meta = merge(metadata, check_metadata(m.get("metadata"), f"messages[{i}]['metadata']"))
        parsed.append(Message(text, sp, src, t, dom, com, meta))
    return parsed


def add_turns(
    tx: Tx, models: Models, msgs: list[Message], emb: npt.NDArray[np.float32], user_id: str, session_id: str
) -> list[int]:
    """Append turns (every message has its event time) to the session's working memory and
    the archive; returns their ids. Overflow (more than ``working_capacity``) dequeues the
    oldest turns down to half the capacity."""
    st = tx.st
    u = tx.user(user_id)
    key = (user_id, session_id)
    sess = st.sessions.get(key)
    if sess is None or sess[0] != "open":
        started = msgs[0].timestamp if sess is None else sess[1]
        ends = 0 if sess is None else int(sess[3])
        st.sessions[key] = ["open", started, None, ends]
        tx.store.upsert_session(user_id, session_id, "open", started, None, ends)
    ids: list[int] = []
    for m, e in zip(msgs, emb):
        r = tx.new_record(
            u,
            e,
            session_id=session_id,
            layer="working",
            kind="turn",
            text=m.text,
            speaker=m.speaker,
            timestamp=m.timestamp,
            created_at=m.timestamp,
            domain=m.domain,
            commitment=m.commitment,
            interaction_len=1.0,
            metadata=m.metadata,
        )
        r.source_id = m.source_id if m.source_id is not None else f"t{r.id}"
        st.set_sources(u, r, (r.source_id,))
        ids.append(r.id)
    link_new_turns(tx, u, ids)
    cap = st.config.working_capacity
    q = u.working.setdefault(session_id, [])
    if len(q) > cap:
        dequeue(tx, models, u, session_id, len(q) - cap + max(1, cap // 2))
    return ids
