"""``lamina eval kv``: KV-cache presses on a real model over the RULER-style suite.

For every prompt of :mod:`lamina.eval.kv_suite` the context is prefilled **once** (recording
the attention of its last :data:`~lamina.model.press.DEFAULT_WINDOW` queries, and the
accumulated attention when H2O runs); every method × compression × mode then works on a
clone of that cache:

* ``agnostic`` (kvpress's setting): the context cache is compressed, then the question is
  run and the answer decoded;
* ``aware``: the question is run on the full cache first (its queries join the observation
  window), then the cache — question included — is compressed and the answer decoded.

The full-cache answer (compression 0) is the same text in both modes and is scored once per
prompt; every row carries it. ``kv_bytes`` is the cache's allocation right after the press
(the native cache frees what it drops, head by head), against the full context cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from ..cli.progress import ProgressBar
from ..kv import METHODS, KVMethod, make_method
from ..model import Model
from ..model.press import (
    ACCUMULATED,
    DEFAULT_WINDOW,
    RECONSTRUCTED,
    apply_press,
    observation_window,
    reads_window,
)
from .kv_suite import KVSample, score_output

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_COMPRESSIONS",
    "MODES",
    "KVRecord",
    "run_kv",
    "summarize",
    "format_kv_tables",
    "plot_kv",
]

DEFAULT_METHODS: tuple[str, ...] = tuple(METHODS)
"""Every :mod:`lamina.kv` method, in :data:`lamina.kv.METHODS` order."""
DEFAULT_COMPRESSIONS: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9)
MODES: tuple[str, ...] = ("agnostic", "aware")


@dataclass(frozen=True)
class KVRecord:
    """One answer.

    Attributes
    ----------
    task, length, seed : as the sample
    mode : str
        ``"agnostic"``, ``"aware"`` or ``"full"`` (compression 0).
    method : str
        ``"full"`` for the uncompressed cache.
    compression : float
    score : float
        Fraction of the references in the output.
    full_score : float
        The same prompt's score with the full cache.
    kv_bytes : int
        Bytes the cache held right after the press (the full context cache for ``"full"``).
    full_kv_bytes : int
        Bytes of the full cache the press started from.
    output : str
    """

    task: str
    length: int
    seed: int
    mode: str
    method: str
    compression: float
    score: float
    full_score: float
    kv_bytes: int
    full_kv_bytes: int
    output: str


def _window_rows(att: npt.NDArray[np.float32], w: int) -> npt.NDArray[np.float32]:
    return np.ascontiguousarray(att[:, :, att.shape[2] - w :, :])


def _aware_attention(
    ctx_att: npt.NDArray[np.float32] | None, suf_att: npt.NDArray[np.float32] | None, window: int
) -> npt.NDArray[np.float32] | None:
    """The last ``window`` rows of the whole prompt: context rows (zero over the question's
    entries, which they cannot see) then the question's rows."""
    if ctx_att is None or suf_att is None:
        return None
    L, H, ws, S = suf_att.shape
    need = max(0, window - ws)
    if need == 0:
        return _window_rows(suf_att, window)
    need = min(need, ctx_att.shape[2])
    out = np.zeros((L, H, need + ws, S), np.float32)
    out[:, :, :need, : ctx_att.shape[3]] = ctx_att[:, :, ctx_att.shape[2] - need :, :]
    out[:, :, need:, :] = suf_att
    return out


def run_kv(
    model: Model,
    samples: Sequence[KVSample],
    *,
    methods: Sequence[str | KVMethod] = DEFAULT_METHODS,
    compressions: Sequence[float] = DEFAULT_COMPRESSIONS,
    modes: Sequence[str] = ("agnostic",),
    progress: TextIO | None = None,
) -> list[KVRecord]:
    """Answer every sample with the full cache and with each method × compression × mode.

    Parameters
    ----------
    model : lamina.model.Model
    samples : sequence of KVSample
    methods : sequence of str or KVMethod
        ``lamina.kv`` methods (default hyper-parameters for names).
    compressions : sequence of float
        Fractions removed, each in (0, 1).
    modes : sequence of {"agnostic", "aware"}
    progress : file, optional
        Where a progress bar goes (None: silent).

    Returns
    -------
    list of KVRecord
        One ``"full"`` record per sample, then one per method × compression × mode.

    Raises
    ------
    ValueError
        An unknown mode or method, or a compression outside (0, 1).
    """
    ms = [make_method(m) for m in methods]
    for r in compressions:
        if not 0.0 < float(r) < 1.0:
            raise ValueError(f"compressions must be in (0, 1) (0 is the full cache, always run), got {r}")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    need_acc = any(m.name in ACCUMULATED for m in ms)
    need_att = any(reads_window(m.name) for m in ms)
    need_rec = any(m.name in RECONSTRUCTED for m in ms)

    def rebuild(cache: Any, ids: Sequence[int]) -> npt.NDArray[np.float32] | None:
        # KVzip's reconstruction maxima for a cache holding exactly ``ids`` (once per prompt)
        if not need_rec:
            return None
        return model.reconstruction_scores(cache, ids)

    bar = ProgressBar(len(samples) * (1 + len(ms) * len(compressions) * len(modes)), "kv", progress)
    out: list[KVRecord] = []
    for smp in samples:
        parts = model.prompt_parts(smp.context, smp.question)
        # the question, the assistant header and RULER's answer prefix follow the context
        ctx = parts.context
        suffix = parts.suffix + (model.tokenizer.encode(smp.answer_prefix, add_bos=False) if smp.answer_prefix else [])
        base = model.new_cache()
        window = min(DEFAULT_WINDOW, len(ctx) - 1) if need_att else 0
        pre = model.prefill(ctx, base, record_window=window, accumulate=need_acc)
        full_bytes = int(base.nbytes)
        g = model.continue_from(base.clone(), pre.logits, suffix=suffix, max_tokens=smp.max_tokens)
        full = score_output(g.text, smp.answers)
        out.append(
            KVRecord(smp.task, smp.length, smp.seed, "full", "full", 0.0, full, full, full_bytes, full_bytes, g.text)
        )
        bar.update(1, f"{smp.task} {smp.length}")
        aware = None
        if "aware" in modes:
            qa = base.clone()
            suf = model.prefill(suffix, qa, record_window=len(suffix) if need_att else 0, accumulate=need_acc)
            # the question's append left growth room; compact without dropping so that the
            # full cache it is compared with holds exactly its entries
            n_all = np.arange(int(qa.lengths().max()), dtype=np.int64)
            for l in range(qa.n_layers):
                for h in range(qa.n_kv_heads):
                    qa.keep(l, h, n_all)
            acc = None
            if need_acc and pre.accumulated is not None and suf.accumulated is not None:
                acc = suf.accumulated.copy()
                acc[:, :, : pre.accumulated.shape[2]] += pre.accumulated
            att = _aware_attention(pre.attention, suf.attention, DEFAULT_WINDOW) if need_att else None
            aware = (qa, suf.logits, att, acc, rebuild(qa, list(ctx) + list(suffix)))
        rec_agnostic = rebuild(base, ctx) if "agnostic" in modes else None
        for mode in modes:
            for m in ms:
                for r in compressions:
                    if mode == "agnostic":
                        src, logits, att, acc, suf_ids = base, pre.logits, pre.attention, pre.accumulated, suffix
                        rec = rec_agnostic
                    else:
                        assert aware is not None
                        src, logits, att, acc, rec = aware
                        suf_ids = []
                    c = src.clone()
                    S = int(c.lengths().max())
                    scores = None
                    if m.name in ACCUMULATED:
                        scores = acc
                    elif m.name in RECONSTRUCTED:
                        scores = rec
                    elif reads_window(m.name) and att is not None:
                        scores = _window_rows(att, min(observation_window(m, S, float(r)), att.shape[2]))
                    apply_press(c, scores, m, float(r), threads=model.threads)
                    held = int(c.nbytes)
                    full_here = int(src.nbytes)
                    g = model.continue_from(c, logits, suffix=suf_ids, max_tokens=smp.max_tokens)
                    out.append(
                        KVRecord(
                            smp.task,
                            smp.length,
                            smp.seed,
                            mode,
                            m.name,
                            float(r),
                            score_output(g.text, smp.answers),
                            full,
                            held,
                            full_here,
                            g.text,
                        )
                    )
                    bar.update(1, f"{smp.task} {smp.length} {mode} {m.name} {r}")
    if progress is not None:
        progress.write("\n")
    return out


def summarize(records: Sequence[KVRecord]) -> dict[str, Any]:
    """Mean scores per (length, mode, method, compression), with the full-cache mean of the
    same prompts, the ratio of the two, and the mean held/full byte ratio; per task too."""
    groups: dict[tuple[int, str, str, float], list[KVRecord]] = {}
    for r in records:
        if r.method == "full":
            continue
        groups.setdefault((r.length, r.mode, r.method, r.compression), []).append(r)
    rows = []
    for (length, mode, method, comp), rs in sorted(groups.items()):
        score = float(np.mean([r.score for r in rs]))
        full = float(np.mean([r.full_score for r in rs]))
        tasks: dict[str, float] = {}
        for t in sorted({r.task for r in rs}):
            tasks[t] = float(np.mean([r.score for r in rs if r.task == t]))
        rows.append(
            {
                "length": length,
                "mode": mode,
                "method": method,
                "compression": comp,
                "score": score,
                "full_score": full,
                "kept_of_full": score / full if full > 0 else None,
                "bytes_ratio": float(np.mean([r.kv_bytes / r.full_kv_bytes for r in rs])),
                "n": len(rs),
                "per_task": tasks,
            }
        )
    fulls: dict[int, list[float]] = {}
    for r in records:
        if r.method == "full":
            fulls.setdefault(r.length, []).append(r.score)
    return {
        "rows": rows,
        "full": {str(k): float(np.mean(v)) for k, v in sorted(fulls.items())},
        "records": [asdict(r) for r in records],
    }


def format_kv_tables(summary: dict[str, Any]) -> str:
    """One table per (length, mode): a row per method with the full-cache score of the same
    prompts, then per compression the score %, its share of the full-cache score and the
    held/full bytes ratio."""
    lines: list[str] = []
    rows = summary["rows"]
    keys = sorted({(r["length"], r["mode"]) for r in rows})
    for length, mode in keys:
        sel = [r for r in rows if r["length"] == length and r["mode"] == mode]
        comps = sorted({r["compression"] for r in sel})
        methods = list(dict.fromkeys(r["method"] for r in sel))
        n = max(r["n"] for r in sel)
        lines.append(
            f"\n{length} tokens, query-{mode} ({n} prompts): score % (share of the full-cache score) bytes held/full"
        )
        lines.append(f"{'method':<18}{'full':>7}" + "".join(f"{'r=' + format(c, 'g'):>22}" for c in comps))
        for m in methods:
            mine = [x for x in sel if x["method"] == m]
            cells = []
            for c in comps:
                r = next((x for x in mine if x["compression"] == c), None)
                if r is None:
                    cells.append(f"{'-':>22}")
                    continue
                share = f"{100 * r['kept_of_full']:.0f}%" if r["kept_of_full"] is not None else "-"
                cells.append(f"{100 * r['score']:>9.1f} ({share:>4}) {r['bytes_ratio']:.3f}")
            lines.append(f"{m:<18}{100 * mine[0]['full_score']:>7.1f}" + "".join(f"{x:>22}" for x in cells))
    return "\n".join(lines)


_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def _esc(t: str) -> str:
    return t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def plot_kv(summary: dict[str, Any], path: str) -> str | None:
    """Write an SVG of score vs compression: one panel per (length, mode), one line per method
    (starting at the full-cache score at compression 0), the full-cache score dashed.

    Parameters
    ----------
    summary : dict
        :func:`summarize`'s output.
    path : str
        The SVG file written.

    Returns
    -------
    str or None
        A message when there is nothing to plot, else None.
    """
    rows = summary["rows"]
    keys = sorted({(r["length"], r["mode"]) for r in rows})
    if not keys:
        return "plot skipped: no compressed rows"
    pw, ph, ml, mt, mb = 340, 240, 46, 28, 40
    legend_w = 150
    W, H = len(keys) * (pw + ml) + legend_w, ph + mt + mb
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
    ]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    for i, (length, mode) in enumerate(keys):
        x0 = i * (pw + ml) + ml

        def X(c: float, x0: int = x0) -> float:
            return x0 + c * pw

        def Y(v: float) -> float:
            return mt + (1.0 - v) * ph

        out.append(f'<text x="{x0 + pw / 2}" y="16" text-anchor="middle">{length} tokens, query-{_esc(mode)}</text>')
        out.append(f'<rect x="{x0}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
        for t in range(0, 101, 25):
            out.append(f'<line x1="{x0 - 4}" x2="{x0}" y1="{Y(t / 100):.1f}" y2="{Y(t / 100):.1f}" stroke="#444"/>')
            out.append(f'<text x="{x0 - 6}" y="{Y(t / 100) + 4:.1f}" text-anchor="end">{t}</text>')
        for c in (0.0, 0.25, 0.5, 0.75, 1.0):
            out.append(f'<text x="{X(c):.1f}" y="{mt + ph + 14}" text-anchor="middle">{c:g}</text>')
        out.append(
            f'<text x="{x0 + pw / 2}" y="{mt + ph + 30}" text-anchor="middle">compression (fraction removed)</text>'
        )
        full = summary["full"].get(str(length))
        if full is not None:
            out.append(
                f'<line x1="{x0}" x2="{x0 + pw}" y1="{Y(full):.1f}" y2="{Y(full):.1f}" stroke="#000" '
                'stroke-dasharray="4 3"/>'
            )
        for j, m in enumerate(methods):
            sel = sorted(
                (r["compression"], r["score"], r["full_score"])
                for r in rows
                if r["length"] == length and r["mode"] == mode and r["method"] == m
            )
            if not sel:
                continue
            pts = [(0.0, sel[0][2])] + [(c, v) for c, v, _ in sel]
            col = _COLORS[j % len(_COLORS)]
            d = " ".join(f"{X(c):.1f},{Y(v):.1f}" for c, v in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{col}" stroke-width="1.6"/>')
            out.extend(f'<circle cx="{X(c):.1f}" cy="{Y(v):.1f}" r="2.5" fill="{col}"/>' for c, v in pts)
    lx = len(keys) * (pw + ml) + 10
    out.append(f'<text x="{lx}" y="{mt}">score % (y)</text>')
    for j, m in enumerate(methods):
        y = mt + 18 + 16 * j
        col = _COLORS[j % len(_COLORS)]
        out.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{y - 4}" y2="{y - 4}" stroke="{col}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 24}" y="{y}">{_esc(m)}</text>')
    y = mt + 18 + 16 * len(methods)
    out.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{y - 4}" y2="{y - 4}" stroke="#000" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{lx + 24}" y="{y}">full cache</text>')
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    return None
