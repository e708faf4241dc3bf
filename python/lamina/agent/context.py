"""MemGPT's virtual context over a :class:`lamina.Memory`.

The prompt is assembled from a system block, the core memory (``persona`` and ``human``
blocks: always in context, editable by tools, at most ``core_limit`` characters each), a
recursive summary of evicted history, retrieved memory, and a recall FIFO of recent messages.
Every message is written to the Memory as it enters (recall storage: the archive keeps every
raw turn), so evicting it from the prompt loses nothing — ``conversation_search`` finds it.

Tokens are counted by :func:`token_counter`: a callable, a tokenizer with ``tokenize`` or
``encode`` (``lamina.model.Model``), else whitespace words (the Memory's own budget count).
At ``warn`` × ``window`` tokens a memory-pressure system message is inserted (once until the
next flush); at ``flush`` × ``window`` the oldest messages are evicted until the prompt is at
``flush_target`` × ``window``, and their text folds into the recursive summary.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import NotFoundError
from ..llm.extract import ExtractiveSummarizer, Summarizer, Turn

if TYPE_CHECKING:
    from ..memory import Memory

__all__ = [
    "CoreMemory",
    "VirtualContext",
    "PressureEvent",
    "token_counter",
    "PRESSURE_MESSAGE",
    "PRESSURE_MESSAGE_PREFIX",
]

PRESSURE_MESSAGE = (
    "[memory pressure] The context is at {pct:.0f}% of its {window}-token window; the oldest "
    "messages will soon be evicted (they stay findable by conversation_search). Save anything "
    "important now with core_memory_append or archival_memory_insert."
)
PRESSURE_MESSAGE_PREFIX = "[memory pressure]"
_ARCHIVAL = "archival"


def token_counter(source: object = None) -> Callable[[str], int]:
    """A ``str -> int`` token count.

    Parameters
    ----------
    source : callable, tokenizer, or None
        A callable ``str -> int``; an object with ``tokenize(text)`` or ``encode(text)`` returning
        a sequence (a real tokenizer: ``lamina.model.Model``, its ``Tokenizer``, tiktoken's
        encodings); None: whitespace-separated words (what ``Memory.context`` budgets count).
    """
    if source is None:
        return lambda s: len(s.split())
    for meth in ("tokenize", "encode"):
        f = getattr(source, meth, None)
        if callable(f):
            g: Callable[[str], Any] = f
            return lambda s: len(g(s))
    if callable(source):
        h: Callable[[str], Any] = source
        return lambda s: int(h(s))
    raise TypeError(f"token source must be a callable or a tokenizer, got {type(source).__name__}")


class CoreMemory:
    """Editable, size-bounded blocks that are always in context (``persona``, ``human``).

    Raises
    ------
    ValueError
        An unknown block, an edit that would pass ``limit`` characters, or text not found.
    """

    BLOCKS = ("persona", "human")

    def __init__(self, *, persona: str = "", human: str = "", limit: int = 2000) -> None:
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"core limit must be a positive int (characters), got {limit!r}")
        self.limit = limit
        self._b = {"persona": "", "human": ""}
        for k, v in (("persona", persona), ("human", human)):
            self._set(k, v)

    def _check(self, block: str) -> None:
        if block not in self._b:
            raise ValueError(f"unknown core block {block!r}; blocks: persona, human")

    def _set(self, block: str, text: str) -> None:
        if len(text) > self.limit:
            raise ValueError(
                f"core block {block!r} would hold {len(text)} characters, over its limit of {self.limit}; "
                "move details to archival memory"
            )
        self._b[block] = text

    def get(self, block: str) -> str:
        self._check(block)
        return self._b[block]

    def append(self, block: str, content: str) -> None:
        self._check(block)
        if not content.strip():
            raise ValueError("content must be non-empty")
        old = self._b[block]
        self._set(block, (old + "\n" + content) if old else content)

    def replace(self, block: str, old: str, new: str) -> None:
        self._check(block)
        cur = self._b[block]
        if not old or old not in cur:
            raise ValueError(f"text {old!r} not found in core block {block!r}")
        self._set(block, cur.replace(old, new, 1))

    def render(self) -> str:
        return "\n".join(f"<{k}>\n{v}\n</{k}>" for k, v in self._b.items())


@dataclass(frozen=True)
class PressureEvent:
    """A threshold crossing: ``kind`` is ``"warning"`` or ``"flush"``; tokens before (and after)."""

    kind: str
    tokens: int
    window: int
    tokens_after: int = 0
    evicted: int = 0


@dataclass
class _Msg:
    msg: dict[str, Any]
    ntok: int
    stored: bool = field(default=False)


class VirtualContext:
    """The prompt of one agent over a :class:`lamina.Memory` (MemGPT virtual context).

    Parameters
    ----------
    memory : lamina.Memory
        Recall and archival storage (user ``user_id``; archival passages in session ``archival``).
    user_id, session_id : str
    system : str
        The system instructions (first block of the prompt).
    window : int
        The model's context window in tokens.
    warn, flush, flush_target : float
        Fractions of ``window``: pressure warning (0.7), eviction (1.0), and where eviction stops (0.5).
    tokens : callable, tokenizer, or None
        See :func:`token_counter`.
    core : CoreMemory, optional
    summarizer : lamina.llm.extract.Summarizer, optional
        Folds evicted messages into the recursive summary (default: extractive).
    summary_words : int
        Length bound of the recursive summary (1 .. window/4; eviction leaves room for it).
    clock : callable, optional
        Seconds since the epoch for message timestamps (default: the wall clock).
    """

    def __init__(
        self,
        memory: Memory,
        *,
        user_id: str,
        session_id: str,
        system: str = "You are a helpful assistant with a long-term memory you manage with tools.",
        window: int = 8192,
        warn: float = 0.7,
        flush: float = 1.0,
        flush_target: float = 0.5,
        tokens: object = None,
        core: CoreMemory | None = None,
        summarizer: Summarizer | None = None,
        summary_words: int = 100,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(window, int) or window < 64:
            raise ValueError(f"window must be an int >= 64 tokens, got {window!r}")
        if not 0 < flush_target < warn <= flush <= 1.0:
            raise ValueError(f"need 0 < flush_target < warn <= flush <= 1, got {flush_target}, {warn}, {flush}")
        self.memory = memory
        self.user_id = user_id
        self.session_id = session_id
        self.system = system
        self.window = window
        self.warn, self.flush_at, self.flush_target = warn, flush, flush_target
        self.count = token_counter(tokens)
        self.core = core or CoreMemory()
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()
        if not isinstance(summary_words, int) or not 1 <= summary_words <= window // 4:
            raise ValueError(f"summary_words must be an int in 1..window/4 ({window // 4}), got {summary_words!r}")
        self.summary_words = summary_words
        self.summary = ""
        self.retrieved = ""
        self.clock = clock or time.time
        self.fifo: list[_Msg] = []
        self.events: list[PressureEvent] = []
        self._warned = False

    # ------------------------------------------------------------------ prompt
    def _head(self) -> str:
        parts = [self.system, "### Core memory", self.core.render()]
        if self.summary:
            parts += ["### Summary of evicted conversation", self.summary]
        if self.retrieved:
            parts += ["### Retrieved memory", self.retrieved]
        return "\n".join(parts)

    def messages(self) -> list[dict[str, Any]]:
        """The prompt: one system message (blocks) then the recall FIFO, OpenAI message dicts."""
        return [{"role": "system", "content": self._head()}] + [m.msg for m in self.fifo]

    def tokens(self) -> int:
        """Tokens of :meth:`messages` (content only, plus 4 per message of framing)."""
        return self.count(self._head()) + 4 + sum(m.ntok + 4 for m in self.fifo)

    # ------------------------------------------------------------------ messages
    def append(self, msg: dict[str, Any]) -> list[PressureEvent]:
        """Add a message (OpenAI dict) to the FIFO and to recall storage; apply the thresholds.

        Returns the pressure events this append caused (warning and / or flush).
        """
        if not isinstance(msg, dict) or "role" not in msg:
            raise TypeError("a message must be a dict with a 'role'")
        text = str(msg.get("content") or "")
        calls = msg.get("tool_calls") or []
        m = _Msg(dict(msg), self.count(text) + sum(self.count(str(c["function"]["arguments"])) for c in calls))
        if text.strip() and msg["role"] in ("user", "assistant", "tool"):
            self.memory.add(
                [{"speaker": str(msg["role"]), "text": text}],
                user_id=self.user_id,
                session_id=self.session_id,
                timestamp=self.clock(),
            )
            m.stored = True
        self.fifo.append(m)
        return self._thresholds()

    def _thresholds(self) -> list[PressureEvent]:
        out: list[PressureEvent] = []
        n = self.tokens()
        if n >= self.flush_at * self.window:
            out.append(self.evict())
            n = self.tokens()
        pending_call = bool(self.fifo and self.fifo[-1].msg.get("tool_calls"))  # its results come next
        if n >= self.warn * self.window and not self._warned and not pending_call:
            self._warned = True
            ev = PressureEvent(kind="warning", tokens=n, window=self.window)
            text = PRESSURE_MESSAGE.format(pct=100.0 * n / self.window, window=self.window)
            self.fifo.append(_Msg({"role": "system", "content": text}, self.count(text)))
            out.append(ev)
        self.events.extend(out)
        return out

    def evict(self) -> PressureEvent:
        """Evict the oldest messages until the prompt is at ``flush_target`` of the window.

        Evicted text folds into the recursive summary (summary ← ψ(summary + evicted)); a tool
        result never stays without the call that asked for it.
        """
        before = self.tokens()
        target = self.flush_target * self.window
        gone: list[_Msg] = []
        # room for the summary to grow to summary_words: the prompt ends at the target with it
        grow = max(0, self.summary_words - self.count(self.summary))
        while len(self.fifo) > 1 and self.tokens() + grow > target:  # the newest message always stays
            gone.append(self.fifo.pop(0))
        while self.fifo and self.fifo[0].msg["role"] == "tool":
            gone.append(self.fifo.pop(0))
        turns = [Turn(source_id="summary", speaker="summary", text=self.summary)] if self.summary else []
        turns += [
            Turn(source_id=f"m{i}", speaker=str(g.msg["role"]), text=str(g.msg.get("content")))
            for i, g in enumerate(gone)
            if str(g.msg.get("content") or "").strip() and g.msg["role"] != "system"
        ]
        if turns:
            self.summary = self.summarizer.summarize(turns, max_words=self.summary_words)
        self._warned = False
        return PressureEvent(
            kind="flush", tokens=before, window=self.window, tokens_after=self.tokens(), evicted=len(gone)
        )

    # ------------------------------------------------------------------ storage (tools)
    def retrieve(self, query: str, *, budget: int) -> None:
        """Fill the retrieved-memory block with ``Memory.context(query, budget)`` (empty: none)."""
        try:
            ctx = self.memory.context(query, user_id=self.user_id, budget=budget)
        except NotFoundError:  # nothing stored for this user yet
            self.retrieved = ""
            return
        self.retrieved = "" if ctx.abstain else ctx.render()

    def archival_insert(self, text: str) -> int:
        if not text.strip():
            raise ValueError("content must be non-empty")
        ids = self.memory.add(
            [{"speaker": _ARCHIVAL, "text": text}], user_id=self.user_id, session_id=_ARCHIVAL, timestamp=self.clock()
        )
        return ids[0]

    def _archive(self, query: str, k: int) -> list[Any]:
        if not query.strip():
            raise ValueError("query must be non-empty")
        try:
            return self.memory.search(query, user_id=self.user_id, k=k, layers=["archive"])
        except NotFoundError:  # nothing stored for this user yet
            return []

    def archival_search(self, query: str, *, k: int = 50) -> list[str]:
        """Archival passages for ``query``, best first (formatted lines)."""
        return [f"[{it.id}] {it.text}" for it in self._archive(query, k) if it.speaker == _ARCHIVAL]

    def conversation_search(
        self, query: str, *, start: float | None = None, end: float | None = None, k: int = 100
    ) -> list[str]:
        """Past messages (in context or evicted) for ``query``, best first, within [start, end]."""
        out = []
        for it in self._archive(query, k):
            if it.speaker == _ARCHIVAL or it.timestamp is None:
                continue
            if (start is not None and it.timestamp < start) or (end is not None and it.timestamp > end):
                continue
            day = _dt.datetime.fromtimestamp(it.timestamp, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
            out.append(f"[{day}] {it.speaker}: {it.text}")
        return out
