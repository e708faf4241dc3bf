"""The ``lamina model`` commands (added to the ``lamina`` command line by
:func:`add_model_parser`): ``lamina model calibrate`` finds a model's single-channel scaling
(:func:`lamina.model.calibration.calibrate`) and writes its calibration file."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from .groups import command_group

__all__ = ["add_model_parser", "default_calibration_path"]


def default_calibration_path(model_path: Path) -> Path:
    """``<model file stem>.channel.json`` in the current directory."""
    return Path(f"{model_path.stem}.channel.json")


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from ..errors import InvalidInput
    from ..model import load
    from ..model.calibration import calibrate, total_steps
    from .progress import ProgressBar

    try:
        model = load(args.gguf, threads=args.threads)
    except (FileNotFoundError, ModuleNotFoundError, ValueError) as e:
        print(f"lamina model calibrate: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else default_calibration_path(model.path)
    steps = total_steps(samples=args.samples, corpus_texts=args.corpus, top=args.top)
    bar = ProgressBar(steps, "calibrate", None if args.quiet else sys.stderr)
    t0 = time.perf_counter()
    try:
        cal = calibrate(
            model,
            samples=args.samples,
            seed=args.seed,
            corpus_texts=args.corpus,
            corpus_tokens=args.corpus_tokens,
            length=args.length,
            top=args.top,
            progress=lambda k, note: bar.update(k, note),
        )
    except InvalidInput as e:
        print(f"lamina model calibrate: {e}", file=sys.stderr)
        return 2
    cal.save(out)
    s = cal.scaling
    print(f"model {cal.model['file']}: baseline answer loss {cal.baseline_loss:.4f} nats/token")
    print(f"{'channel':>8} {'monotonic layers':>17} {'smoothness':>11}  loss by factor")
    for c in cal.candidates:
        losses = "  ".join(f"{float(f):+.1f}: {v:.4f}" for f, v in c.losses.items())
        print(f"{c.channel:>8} {len(c.monotonic_layers):>17} {c.smoothness:>11.4g}  {losses}")
    where = "every position" if s.last_tokens == 0 else f"the last {s.last_tokens} position(s) of each call"
    print(
        f"chosen: channel {s.channel} x {s.factor:g} in layers {s.first_layer}..{s.last_layer - 1}, {where} "
        f"(loss {cal.loss:.4f}; every position {cal.all_positions_loss:.4f}; baseline {cal.baseline_loss:.4f})"
    )
    print(f"{time.perf_counter() - t0:.0f} s; wrote {out}")
    return 0


def add_model_parser(sub: Any) -> None:
    """Register ``lamina model calibrate`` on the ``lamina`` subparsers: under the ``model``
    group ``lamina model serve`` opened (:mod:`lamina.cli.serve_commands`), or a new group."""
    msub = command_group(sub, "model", help="the local model", dest="model_cmd")
    c = msub.add_parser(
        "calibrate",
        help="find the model's position channel and factor (Yu et al. 2024) and write its calibration file",
        description="Random-string corpus -> residual stream per layer -> channels monotonic over positions in more "
        "than a quarter of the layers, the 10 smoothest -> channel and factor (0.5, 0, -0.5, -1) with the lowest "
        "answer cross-entropy on seeded key-value retrievals. Load the result with "
        "lamina.model.load(calibration=FILE) or lamina eval position --methods channel --calibration FILE.",
    )
    c.add_argument("--gguf", default=None, help="a llama-architecture .gguf (default: packaged SmolLM2-135M)")
    c.add_argument("--out", default=None, help="calibration file (default: <model stem>.channel.json)")
    c.add_argument("--samples", type=int, default=10, help="key-value retrievals of the selection")
    c.add_argument("--seed", type=int, default=0, help="seeds the corpus and the retrievals")
    c.add_argument("--corpus", type=int, default=4, help="random-string texts of the statistics")
    c.add_argument("--corpus-tokens", type=int, default=1024, help="tokens per corpus text")
    c.add_argument("--length", type=int, default=512, help="tokens per retrieval prompt")
    c.add_argument("--top", type=int, default=10, help="candidate channels kept by the statistics")
    c.add_argument("--threads", type=int, default=0, help="worker threads (0: lamina's default)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=_cmd_calibrate)
