"""``lamina eval position``: accuracy by gold position on the local model, per position method.

Every method (``rope``, ``ms-poe``, ``ms-poe:window=32``, ``channel``, ...) answers the same prompts of
:mod:`lamina.eval.position_sweep` greedily; the table shows accuracy per gold position with its
Wilson 95 % interval, per suite and length.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from ..eval.position_sweep import SUITES, PositionCell, PositionSample, make_suite, score_output, summarize
from .eval_args import LOCOMO_DATA, add_model_args, add_output_args, write_outputs

__all__ = [
    "PamqaReader",
    "parse_method",
    "run_position",
    "format_table",
    "plot_position",
    "merge_results",
    "paired_counts",
    "add_position_parser",
]

_DEFAULT_DATA = LOCOMO_DATA
_BOOL = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
_OPTIONS: dict[str, Any] = {
    "order": str,
    "ratio_min": float,
    "ratio_max": float,
    "first_layer": int,
    "window": int,
    "copy_heads": lambda v: _BOOL[v.lower()],
    "copy_threshold": float,
}


def parse_method(spec: str) -> tuple[str, dict[str, Any] | None]:
    """``"rope"`` -> ("rope", None); ``"pamqa"`` -> ("pamqa", None) (the plain model in PAM-QA's
    two-step prompt mode, :mod:`lamina.model.pamqa`; the ``locomo`` suite only);
    ``"channel"`` -> ("channel", None) (single-channel hidden-state scaling from a calibration:
    ``--calibration FILE``, or calibrated first); ``"ms-poe[:key=value,...]"`` -> ("ms-poe",
    MsPoE keyword arguments), keys: order, ratio_min, ratio_max, first_layer, window,
    copy_heads (0/1), copy_threshold.

    Raises
    ------
    ValueError
        An unknown method or option, or a value of the wrong form.
    """
    name, _, opts = spec.partition(":")
    if name in ("rope", "pamqa", "channel"):
        if opts:
            raise ValueError(f"{name} takes no options, got {spec!r}")
        return name, None
    if name != "ms-poe":
        raise ValueError(f"method must be rope, pamqa, channel or ms-poe[:key=value,...], got {spec!r}")
    kw: dict[str, Any] = {}
    for part in filter(None, opts.split(",")):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"ms-poe option {part!r} is not key=value")
        if key not in _OPTIONS:
            raise ValueError(f"unknown ms-poe option {key!r} ({', '.join(_OPTIONS)})")
        try:
            kw[key] = _OPTIONS[key](value)
        except (KeyError, ValueError):
            raise ValueError(f"ms-poe option {part!r}: bad value") from None
    return "ms-poe", kw


@dataclass(frozen=True)
class PamqaReader:
    """A model answering in PAM-QA's two-step mode (:func:`lamina.model.pamqa.answer_pamqa`)."""

    model: Any


def _answer(model: Any, s: PositionSample) -> str:
    if isinstance(model, PamqaReader):
        from ..model.pamqa import answer_pamqa

        if not s.documents:
            raise ValueError(f"pamqa needs documents: the locomo suite, not {s.suite!r}")
        return answer_pamqa(model.model, s.question, s.documents, max_tokens=s.max_tokens).text
    ids = model.tokenize(model.chat_prompt(s.prompt))
    if s.answer_prefix:
        ids += model.tokenizer.encode(s.answer_prefix, add_bos=False)
    cache = model.new_cache()
    pre = model.prefill(ids, cache)  # one call: Ms-PoE ranks on the prompt's last row
    return str(model.continue_from(cache, pre.logits, max_tokens=s.max_tokens).text)


def run_position(
    models: dict[str, Any], samples: Sequence[PositionSample], *, progress: TextIO | None = None
) -> list[dict[str, Any]]:
    """Every model's greedy answer to every sample: records with method, suite, length,
    position, index, gold, n_items, tokens, correct and the output text."""
    from .progress import ProgressBar

    bar = ProgressBar(len(samples) * len(models), "position", progress)
    out: list[dict[str, Any]] = []
    for s in samples:
        for label, m in models.items():
            text = _answer(m, s)
            ok = score_output(s.suite, text, s.answers)
            named = None
            if isinstance(m, PamqaReader):
                from ..model.pamqa import INDEX_PREFIX, parse_index

                named = parse_index(text[len(INDEX_PREFIX) :], s.n_items)
                ok = score_output(s.suite, text.split("Answer:", 1)[-1], s.answers)
            out.append(
                {
                    "method": label,
                    "suite": s.suite,
                    "length": s.length,
                    "position": s.position,
                    "index": s.index,
                    "gold": s.gold,
                    "n_items": s.n_items,
                    "tokens": s.tokens,
                    "correct": ok,
                    "named_document": named,
                    "answers": list(s.answers),
                    "output": text,
                }
            )
            bar.update(1, f"{s.suite} {s.length} @{s.position:.2f} {label}: {'ok' if ok else 'miss'}")
    return out


def format_table(cells: Sequence[PositionCell], methods: Sequence[str]) -> str:
    """One block per (suite, length): a row per method, accuracy [Wilson 95 %] per position."""
    lines: list[str] = []
    for suite, length in sorted({(c.suite, c.length) for c in cells}):
        sub = [c for c in cells if c.suite == suite and c.length == length]
        pos = sorted({c.position for c in sub})
        toks = sum(c.mean_tokens for c in sub) / len(sub)
        n = max(c.n for c in sub)
        lines.append(f"\n{suite}, {length} tokens (measured mean {toks:.0f}), n = {n} per cell")
        lines.append(f"{'method':<28}" + "".join(f"{f'pos {p:.2f}':>18}" for p in pos))
        for m in methods:
            row = {c.position: c for c in sub if c.method == m}
            if not row:  # a method not run on this suite and length (a merge of runs)
                continue
            cellstr = "".join(
                f"{f'{row[p].accuracy:.2f} [{row[p].low:.2f},{row[p].high:.2f}]':>18}" if p in row else f"{'-':>18}"
                for p in pos
            )
            lines.append(f"{m:<28}{cellstr}")
    return "\n".join(lines)


def _drawer(cells: Sequence[PositionCell], methods: Sequence[str]) -> Callable[[str], None]:
    """``--plot``'s drawing for :func:`~lamina.cli.eval_args.write_outputs`."""
    return lambda path: plot_position(cells, methods, path)


def plot_position(cells: Sequence[PositionCell], methods: Sequence[str], path: str) -> None:
    """A PNG of accuracy vs gold position (Wilson 95 % error bars): one panel per (suite,
    length), one line per method (each drawn slightly apart on x so that the bars can be told
    apart). ModuleNotFoundError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(c.suite, c.length) for c in cells})
    fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 3.9), squeeze=False)
    for ax, (suite, length) in zip(axes[0], keys, strict=True):
        for k, m in enumerate(methods):
            row = sorted(
                (c for c in cells if c.suite == suite and c.length == length and c.method == m),
                key=lambda c: c.position,
            )
            if not row:
                continue
            xs = [c.position + 0.012 * (k - (len(methods) - 1) / 2) for c in row]  # apart, to read
            ys = [c.accuracy for c in row]
            err = [[c.accuracy - c.low for c in row], [c.high - c.accuracy for c in row]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=m)
        ax.set_title(f"{suite}, {length} tokens")
        ax.legend(fontsize=7)
        ax.set_xlabel("gold position (fraction of the context)")
        ax.set_ylim(-0.05, 1.05)
    axes[0][0].set_ylabel("accuracy (Wilson 95 %)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def merge_results(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The records and method labels of several ``--out`` files of runs on the same prompts
    (e.g. one method per run, so that a stopped session keeps what finished; a method may
    appear in several files for different suites or lengths).

    Raises
    ------
    ValueError
        A file without records, one answer (method, suite, length, position, index) in two
        files, or a sample whose gold or answers differ between files (other prompts).
    """
    records: list[dict[str, Any]] = []
    methods: list[str] = []
    seen: dict[tuple[str, int, float, int], tuple[Any, list[str]]] = {}
    answered: set[tuple[str, str, int, float, int]] = set()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or not data.get("records"):
            raise ValueError(f"{path}: no records (not an eval position --out file)")
        methods += [m for m in data["config"]["methods"] if m not in methods]
        for r in data["records"]:
            key = (str(r["suite"]), int(r["length"]), float(r["position"]), int(r["index"]))
            if (r["method"], *key) in answered:
                raise ValueError(f"{path}: method {r['method']!r} answered sample {key} in two files")
            answered.add((r["method"], *key))
            sample = (r["gold"], list(r["answers"]))
            if seen.setdefault(key, sample) != sample:
                raise ValueError(f"{path}: sample {key} has another gold or answers than before: not the same prompts")
            records.append(r)
    return records, methods


def paired_counts(
    records: Sequence[dict[str, Any]], method: str, baseline: str
) -> dict[tuple[str, int, float], tuple[int, int]]:
    """Per (suite, length, position): (prompts ``method`` got right where ``baseline`` was
    wrong, prompts the reverse), over the samples both answered."""
    right: dict[tuple[str, str, int, float, int], bool] = {}
    for r in records:
        right[(r["method"], r["suite"], int(r["length"]), float(r["position"]), int(r["index"]))] = bool(r["correct"])
    out: dict[tuple[str, int, float], tuple[int, int]] = {}
    for (m, suite, length, pos, i), ok in right.items():
        if m != method or (baseline, suite, length, pos, i) not in right:
            continue
        base = right[(baseline, suite, length, pos, i)]
        gain, loss = out.get((suite, length, pos), (0, 0))
        out[(suite, length, pos)] = (gain + int(ok and not base), loss + int(base and not ok))
    return out


def _merge_cmd(args: argparse.Namespace) -> int:
    try:
        records, labels = merge_results(args.merge)
    except (OSError, ValueError, KeyError) as e:
        print(f"lamina eval position: --merge: {e}", file=sys.stderr)
        return 2
    cells = summarize(records)
    print(format_table(cells, labels))
    if args.baseline in labels:
        print(f"\nper prompt against {args.baseline} (right where it was wrong / the reverse)")
        for m in labels:
            if m == args.baseline:
                continue
            pc = paired_counts(records, m, args.baseline)
            row = "  ".join(f"{s} {n} @{p:.2f} +{g} -{lo}" for (s, n, p), (g, lo) in sorted(pc.items()))
            print(f"  {m}: {row}")
    config = {"merged": list(args.merge), "methods": labels}
    return write_outputs(args, lambda: {"config": config, "cells": [asdict(c) for c in cells]}, _drawer(cells, labels))


def _calibration(args: argparse.Namespace) -> str:
    """The calibration file of the ``channel`` method: ``--calibration``, or one made now
    (``lamina model calibrate``'s defaults, written to ``<model stem>.channel.json``)."""
    if args.calibration:
        return str(args.calibration)
    from ..model import load
    from ..model.calibration import calibrate, total_steps
    from .model_commands import default_calibration_path
    from .progress import ProgressBar

    model = load(args.model, threads=args.threads)
    path = default_calibration_path(model.path)
    bar = ProgressBar(total_steps(samples=10, corpus_texts=4, top=10), "calibrate", None if args.quiet else sys.stderr)
    calibrate(model, progress=lambda k, note: bar.update(k, note)).save(path)
    print(f"calibrated the channel method: wrote {path}", file=sys.stderr)
    return str(path)


def _cmd(args: argparse.Namespace) -> int:
    from ..eval.locomo import load_locomo
    from ..model import MsPoE, load

    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print("lamina eval position: --plot needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    if args.merge:
        return _merge_cmd(args)
    try:
        specs = [(m, *parse_method(m)) for m in args.methods]
        positions = [float(x) for x in args.positions.split(",") if x.strip()]
        lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    except ValueError as e:
        print(f"lamina eval position: {e}", file=sys.stderr)
        return 2
    if any(not 0.0 <= p <= 1.0 for p in positions) or not positions:
        print("lamina eval position: --positions must be fractions in [0, 1]", file=sys.stderr)
        return 2
    convs: list[Any] = []
    if "locomo" in args.suites:
        if not os.path.exists(args.data):
            print(f"lamina eval position: no LoCoMo data at {args.data!r} (--data)", file=sys.stderr)
            return 2
        convs, _ = load_locomo(args.data)
    if any(p == "pamqa" for _, p, _ in specs) and set(args.suites) != {"locomo"}:
        print("lamina eval position: pamqa needs numbered documents: --suites locomo", file=sys.stderr)
        return 2
    models: dict[str, Any] = {}
    calibrations: dict[str, Any] = {}
    try:
        plain = None
        for label, position, kw in specs:
            if position in ("rope", "pamqa"):
                plain = plain or load(args.model, threads=args.threads)  # one plain model serves both
                models[label] = PamqaReader(plain) if position == "pamqa" else plain
                continue
            if position == "channel":
                models[label] = load(args.model, calibration=_calibration(args), threads=args.threads)
                ch = models[label].channel
                calibrations[label] = None if ch is None else asdict(ch)
                continue
            ms = None if kw is None else MsPoE(**kw)
            models[label] = load(args.model, position=position, ms_poe=ms, threads=args.threads)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"lamina eval position: {e}", file=sys.stderr)
        return 2
    first = next(iter(models.values()))
    base = first.model if isinstance(first, PamqaReader) else first

    def count(text: str) -> int:
        return len(base.tokenize(base.chat_prompt(text)))

    t0 = time.perf_counter()
    samples = make_suite(
        args.suites, lengths, positions, args.samples, count=count, seed=args.seed, conversations=convs
    )
    records = run_position(models, samples, progress=None if args.quiet else sys.stderr)
    cells = summarize(records)
    labels = list(models)
    print(format_table(cells, labels))
    for label, m in models.items():
        if isinstance(m, PamqaReader):
            print(f"\n{label}: named the gold document (step 1), by position")
            for p in positions:
                rs = [r for r in records if r["method"] == label and r["position"] == p]
                hit = sum(r["named_document"] == r["gold"] for r in rs)
                print(f"  pos {p:.2f}: {hit}/{len(rs)}  (named none: {sum(r['named_document'] is None for r in rs)})")
    secs = time.perf_counter() - t0
    print(f"\n{len(records)} answers in {secs:.0f} s")

    def result() -> dict[str, Any]:
        return {
            "config": {
                "model": str(base.path.name),
                "suites": list(args.suites),
                "lengths": lengths,
                "positions": positions,
                "samples": args.samples,
                "seed": args.seed,
                "methods": labels,
                "channel_scaling": calibrations,
                "seconds": secs,
            },
            "cells": [asdict(c) for c in cells],
            "records": records,
        }

    return write_outputs(args, result, _drawer(cells, labels))


def add_position_parser(esub: Any) -> None:
    """Register ``eval position`` on the ``lamina eval`` subparsers."""
    p = esub.add_parser(
        "position",
        help="lost in the middle: accuracy by gold position on the local model, per position method",
        description="Generates the seeded suites of lamina.eval.position_sweep (UUID / numeric key-value retrieval, "
        "passkey by depth, multi-document QA over LoCoMo) and answers every prompt with each method.",
    )
    add_model_args(p)
    p.add_argument("--suites", nargs="+", choices=SUITES, default=["uuid"], help="suites to run")
    p.add_argument("--lengths", default="1024", help="prompt lengths in tokens, e.g. 1024,2048,4096")
    p.add_argument("--positions", default="0,0.25,0.5,0.75,1", help="gold positions as fractions")
    p.add_argument("--samples", type=int, default=8, help="prompts per (suite, length, position)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--methods",
        nargs="+",
        default=["rope", "ms-poe"],
        help="rope | pamqa (locomo only) | channel (single-channel scaling; --calibration or calibrated first) | "
        "ms-poe[:order=rank|gather|normal,window=N,copy_heads=1,ratio_min=,ratio_max=,first_layer=]",
    )
    p.add_argument(
        "--calibration",
        default=None,
        help="the channel method's calibration file (lamina model calibrate); without it the model is calibrated first",
    )
    p.add_argument("--data", default=_DEFAULT_DATA, help="LoCoMo locomo_dev.json or its folder (suite locomo)")
    add_output_args(
        p,
        out="write cells and every answer as JSON here",
        plot="write a PNG of accuracy vs position (needs matplotlib)",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="JSON",
        help="run nothing: combine --out files of runs on the same prompts into one table (and --plot, --out)",
    )
    p.add_argument("--baseline", default="rope", help="with --merge: the method of the per-prompt comparison")
    p.set_defaults(func=_cmd)
