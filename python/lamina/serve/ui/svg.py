"""Small inline-SVG plots for the inspector's pages (no script, no style attribute: they pass a
strict Content-Security-Policy). Labels are escaped; the markup is returned as
:class:`markupsafe.Markup` so the templates' autoescaping leaves it as it is."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from markupsafe import Markup

__all__ = ["bars", "timeline"]

_W = 360
_ROW = 18


def _num(x: float) -> str:
    return f"{x:.4g}"


def bars(
    rows: Sequence[tuple[str, float]], *, title: str, maximum: float | None = None, mark: float | None = None
) -> Markup:
    """Horizontal bars, one per ``(label, value)``; ``mark``: a vertical rule at that value."""
    top = maximum if maximum is not None else max([v for _, v in rows] + [1e-12])
    top = top if top > 0 else 1.0
    h = _ROW * len(rows) + 24
    x0, span = 110, _W - 110 - 60
    parts = [
        f'<svg class="plot" role="img" width="{_W}" height="{h}" viewBox="0 0 {_W} {h}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    ]
    for i, (label, v) in enumerate(rows):
        y = 6 + i * _ROW
        w = max(0.0, min(1.0, v / top)) * span
        parts.append(
            f'<text x="{x0 - 6}" y="{y + 12}" text-anchor="end" font-size="12">{escape(label)}</text>'
            f'<rect x="{x0}" y="{y + 2}" width="{w:.1f}" height="{_ROW - 6}" fill="#4a78b5"/>'
            f'<text x="{x0 + w + 4:.1f}" y="{y + 12}" font-size="11">{escape(_num(v))}</text>'
        )
    if mark is not None:
        mx = x0 + max(0.0, min(1.0, mark / top)) * span
        parts.append(
            f'<line x1="{mx:.1f}" y1="2" x2="{mx:.1f}" y2="{h - 14}" stroke="#c0392b" stroke-dasharray="3,2"/>'
            f'<text x="{mx:.1f}" y="{h - 3}" font-size="10" text-anchor="middle" fill="#c0392b">'
            f"{escape(_num(mark))}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def timeline(points: Sequence[tuple[str, float, float]], *, title: str) -> Markup:
    """Columns over time: ``(label, value, heat)``; a column's height is its value, its colour
    its heat relative to the hottest (white to red). Labels of the first and last column shown."""
    if not points:
        return Markup("")
    h, base = 90, 70
    n = len(points)
    cw = max(2.0, (_W - 20) / n)
    vmax = max(p[1] for p in points) or 1.0
    hmax = max(p[2] for p in points) or 1.0
    parts = [
        f'<svg class="plot" role="img" width="{_W}" height="{h}" viewBox="0 0 {_W} {h}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    ]
    for i, (_label, v, heat) in enumerate(points):
        bh = (v / vmax) * (base - 6)
        red = int(255 * min(1.0, heat / hmax))
        fill = f"#{255:02x}{255 - red:02x}{255 - red:02x}" if heat > 0 else "#b8c7dc"
        parts.append(
            f'<rect x="{10 + i * cw:.1f}" y="{base - bh:.1f}" width="{max(1.0, cw - 1):.1f}" '
            f'height="{bh:.1f}" fill="{fill}" stroke="#567" stroke-width="0.3"/>'
        )
    parts.append(f'<text x="10" y="{h - 4}" font-size="10">{escape(points[0][0])}</text>')
    parts.append(f'<text x="{_W - 10}" y="{h - 4}" font-size="10" text-anchor="end">{escape(points[-1][0])}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
