"""The evaluation's output: the LoCoMo results as text tables (:func:`format_tables`,
:func:`format_orders`) and the recall plot (:func:`plot_recall`, needs matplotlib) of
:func:`lamina.eval.harness.run_locomo`'s results."""

from __future__ import annotations

import math
from typing import Any

from .harness import _OVERALL
from .scoring import (
    CATEGORY_NAMES,
)
from .systems import BASELINES

__all__ = ["format_tables", "format_orders", "plot_recall"]


def _pct(x: float) -> str:
    return "   -  " if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:5.1f}%"


def _ci(c: dict[str, Any]) -> str:
    lo, hi = c["low"], c["high"]
    return "-" if math.isnan(lo) else f"{100 * lo:.0f}-{100 * hi:.0f}%"


def format_tables(results: dict[str, Any]) -> str:
    """One table per budget: rows systems; evidence recall per category and overall (1-4),
    answer-token recall (1-4), context usage, false-memory rate, retention, latency p50/p99."""
    cats = [CATEGORY_NAMES[c] for c in (1, 2, 3, 4, 5)]
    lines = []
    n_cat = results["dataset"]["questions_per_category"]
    lines.append(
        "questions: " + ", ".join(f"{k} {v}" for k, v in n_cat.items()) + f"; embedder {results['embedder']['name']}"
    )
    w = max(len(s) for s in results["systems"]) + 2
    for b in results["budgets"]:
        lines.append("")
        lines.append(f"budget {b} tokens — evidence recall by category (overall = categories 1-4)")
        head = (
            f"{'system':<{w}}" + "".join(f"{c[:11]:>12}" for c in cats) + f"{'overall':>9}{'ans-rec':>9}"
            f"{'usage':>8}{'FMR':>8}{'retain':>8}{'p50 ms':>9}{'p99 ms':>9}"
        )
        lines.append(head)
        lines.append("-" * len(head))
        for s in results["systems"]:
            a = results["results"][s][str(b)]
            ev = a["evidence_recall"]
            rt = a.get("retention", {}).get("retention", math.nan)
            lines.append(
                f"{s:<{w}}"
                + "".join(f"{_pct(ev[c]):>12}" for c in cats)
                + f"{_pct(ev['overall']):>9}{_pct(a['answer_token_recall']['overall']):>9}"
                + f"{_pct(a['context_usage']):>8}{_pct(a['false_memory_rate']):>8}{_pct(rt):>8}"
                + f"{a['latency_ms']['p50']:>9.2f}{a['latency_ms']['p99']:>9.2f}"
            )
        lines.append("")
        au = results["dataset"].get("audit")
        lines.append(
            f"budget {b} tokens — evidence recall on the audit-corrected gold"
            + (f" ({au['corrected']} corrected, {au['dropped']} dropped)" if au else " (no audit given: = original)")
            + "; Wilson 95 % interval of each cell on the original gold below it"
        )
        for s in results["systems"]:
            a = results["results"][s][str(b)]
            au_ev, ci = a["evidence_recall_audit"], a["evidence_recall_ci95"]
            lines.append(f"{s:<{w}}" + "".join(f"{_pct(au_ev[c]):>12}" for c in cats) + f"{_pct(au_ev['overall']):>9}")
            lines.append(f"{'':<{w}}" + "".join(f"{_ci(ci[c]):>12}" for c in [*cats, "overall"]))
    rd = results.get("reader", {})
    lines.append("")
    if rd.get("status") == "ran":
        lines.append(
            f"reader {rd['model']} at budget {rd['budget']}: F1 / BLEU-1 (official LoCoMo rules; "
            "overall without category 5)"
        )
        for s in results["systems"]:
            r = results["results"][s][str(rd["budget"])].get("reader")
            if r:
                lines.append(
                    f"  {s:<{w}} F1 "
                    + " ".join(f"{k} {100 * v:.1f}" for k, v in r["f1"].items())
                    + f" | BLEU-1 overall {100 * r['bleu1']['overall (1-4)']:.1f}"
                    + (f" | {r['errors']} failed calls" if r["errors"] else "")
                )
        if rd.get("orders"):
            lines.append("")
            lines.extend(format_orders(results))
    else:
        lines.append("reader: skipped — no OpenAI-compatible endpoint configured (no F1 / BLEU-1 reported)")
    return "\n".join(lines)


def format_orders(results: dict[str, Any]) -> list[str]:
    """The reader's F1 per context order (rows) and category, with the bootstrap interval under
    each cell, then each order's paired difference from the first."""
    rd = results["reader"]
    cats = [*CATEGORY_NAMES.values(), *_OVERALL]
    lines = [
        f"reader {rd['model']} at budget {rd['budget']} by context order (the same items, only the order "
        "changed): F1 per category, 95 % bootstrap interval below"
    ]
    for s in results["systems"]:
        st = results["results"][s][str(rd["budget"])].get("reader_orders")
        if not st:
            continue
        w = max(len(o) for o in st["f1"]) + 2
        lines.append(f"{s}: {st['questions']} questions answered in every order")
        head = f"  {'order':<{w}}" + "".join(f"{c[:13]:>14}" for c in cats)
        lines.append(head)
        lines.append(f"  {'n':<{w}}" + "".join(f"{st['n'][c]:>14}" for c in cats))
        for o in st["f1"]:
            lines.append(f"  {o:<{w}}" + "".join(f"{_pct(st['f1'][o][c]):>14}" for c in cats))
            lines.append(
                f"  {'':<{w}}"
                + "".join(
                    f"{'-' if math.isnan(lo) else f'{100 * lo:.1f}-{100 * hi:.1f}':>14}"
                    for lo, hi in (st["ci95"][o][c] for c in cats)
                )
            )
        for o, d in st["diff"].items():
            lines.append(
                f"  {o} - {st['base']} (paired, points): "
                + ", ".join(
                    f"{c} {100 * d[c]['mean']:+.1f} [{100 * d[c]['low']:+.1f}, {100 * d[c]['high']:+.1f}]"
                    for c in _OVERALL
                    if not math.isnan(d[c]["mean"])
                )
            )
    return lines


def plot_recall(results: dict[str, Any], path: str) -> str | None:
    """Overall evidence recall vs budget per system as a PNG; returns None, or why it could not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib) — no plot written"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bs = results["budgets"]
    for s in results["systems"]:
        ys = [100 * results["results"][s][str(b)]["evidence_recall"]["overall"] for b in bs]
        ax.plot(bs, ys, marker="o", label=s, linestyle="-" if s == "lamina" or s in BASELINES else "--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs)
    ax.set_xticklabels([str(b) for b in bs])
    ax.set_xlabel("context budget (tokens)")
    ax.set_ylabel("evidence recall, categories 1-4 (%)")
    ax.set_title(f"LoCoMo evidence recall vs budget ({results['embedder']['name']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
