"""The one progress bar of the command line (and of the evaluation harness it runs): a line on
a stream, redrawn in place, no dependency. A leaf: it imports nothing of lamina."""

from __future__ import annotations

import time
from typing import Literal, TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """A one-line progress bar of ``total`` steps on ``stream`` (None: counts, draws nothing).

    ``show="eta"`` draws the fraction done, the time elapsed and the time left (and a note per
    update); ``show="rate"`` the steps done of ``total`` and the steps per second. The line is
    redrawn at most every 0.2 s (``"rate"``: 0.1 s), and always at the last step, which ends it.
    Not thread-safe: one thread updates a bar."""

    def __init__(self, total: int, label: str, stream: TextIO | None, *, show: Literal["eta", "rate"] = "eta") -> None:
        self.total, self.label, self.stream, self.n = max(1, total), label, stream, 0
        self.show = show
        self.t0 = time.perf_counter()
        self._last = -1.0
        self._every = 0.2 if show == "eta" else 0.1

    def update(self, k: int = 1, note: str = "") -> None:
        """``k`` more steps done; ``note`` is shown beside an ``"eta"`` bar."""
        self.n += k
        if self.stream is None:
            return
        now = time.perf_counter()
        if now - self._last < self._every and self.n < self.total:
            return
        self._last = now
        self.stream.write(self._line(now, note))
        if self.n >= self.total:
            self.stream.write("\n")
        self.stream.flush()

    def _line(self, now: float, note: str) -> str:
        f = min(1.0, self.n / self.total)
        el = now - self.t0
        if self.show == "rate":
            w = 30
            bar = "#" * int(f * w) + "-" * (w - int(f * w))
            rate = self.n / max(el, 1e-9)
            return f"\r{self.label:<10} [{bar}] {self.n}/{self.total} {rate:,.0f}/s"
        w = 28
        eta = el / f - el if f > 0 else 0.0
        return (
            f"\r{self.label} [{'#' * int(f * w)}{'-' * (w - int(f * w))}] {100 * f:5.1f}% "
            f"{el:6.0f}s elapsed, ~{eta:5.0f}s left {note[:40]:<40}"
        )
