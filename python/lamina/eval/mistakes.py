"""``lamina eval mistakes``: the mistake localiser, leave one task out, against the majority index.

For every JSONL file (one task) of the data folder, a :class:`lamina.reasoning.MistakeLocator`
is fitted on the other files and scored on it: the fraction of chains whose located first
mistake (an index, or None for a correct chain) equals the annotation, with a Wilson 95 %
interval, beside the majority-index baseline of the training files (the most common
annotation there, predicted for every chain) and the two parts of the locator alone — the
exact checkers (first step a checker finds wrong, else None) and the trained classifier.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..reasoning import Chain, MistakeLocator, read_chains
from ..reasoning.checkers import first_wrong, step_verdicts
from .commands import add_mistake_data_arg, documented_command, write_json
from .scoring import wilson_interval

__all__ = ["TaskResult", "leave_one_task_out", "add_mistakes_parser"]


@dataclass(frozen=True)
class TaskResult:
    """Accuracy of exact first-mistake location on one held-out task."""

    task: str
    chains: int
    locator: float
    low: float
    high: float
    checkers: float
    classifier: float
    majority_index: int | None
    majority: float


def _checkers_only(c: Chain) -> int | None:
    return first_wrong(step_verdicts(c.question, c.steps))


def leave_one_task_out(files: Sequence[str]) -> list[TaskResult]:
    """One :class:`TaskResult` per file, each scored by a locator fitted on the others."""
    if len(files) < 2:
        raise ValueError("leave-one-task-out needs at least two task files")
    data = {os.path.splitext(os.path.basename(f))[0]: read_chains(f) for f in files}
    out = []
    for held, test in data.items():
        train = [g for t, g in data.items() if t != held]
        loc = MistakeLocator.fit(train)
        maj = collections.Counter(c.mistake for g in train for c in g).most_common(1)[0][0]
        n = len(test)
        acc = sum(loc.locate(c.question, c.steps) == c.mistake for c in test) / n
        lo, hi = wilson_interval(acc, n)
        chk = sum(_checkers_only(c) == c.mistake for c in test) / n
        clf = sum(loc.classify(c.question, c.steps) == c.mistake for c in test) / n
        base = sum(c.mistake == maj for c in test) / n
        out.append(TaskResult(held, n, acc, lo, hi, chk, clf, maj, base))
    return out


def _cmd(args: argparse.Namespace) -> int:
    folder = args.data
    files = (
        sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".jsonl"))
        if os.path.isdir(folder)
        else []
    )
    if len(files) < 2:
        print(f"lamina eval mistakes: need >= 2 .jsonl task files in {folder!r} (pass --data)", file=sys.stderr)
        return 2
    res = leave_one_task_out(files)
    print("first-mistake location, leave one task out (exact index; None = correct chain)")
    print(
        f"{'held-out task':<28}{'n':>5}{'locator':>9}{'95% CI':>15}{'checkers':>10}{'classifier':>12}{'majority':>14}"
    )
    for r in res:
        ci = f"{r.low:.3f}-{r.high:.3f}"
        maj = f"{r.majority:.3f} [{r.majority_index}]"
        print(f"{r.task:<28}{r.chains:>5}{r.locator:>9.3f}{ci:>15}{r.checkers:>10.3f}{r.classifier:>12.3f}{maj:>14}")
    if args.out:
        write_json(args.out, [asdict(r) for r in res])
    if args.save:
        MistakeLocator.train(files).save(args.save)
        print(f"wrote a locator trained on all {len(files)} files to {args.save}")
    return 0


def add_mistakes_parser(esub: Any) -> None:
    """Register ``lamina eval mistakes``."""
    p = documented_command(
        esub,
        "mistakes",
        help="locate the first wrong step of reasoning chains (BIG-Bench Mistake), leave one task out",
        doc=__doc__,
        func=_cmd,
    )
    add_mistake_data_arg(p)
    p.add_argument("--out", default=None, help="write the per-task results as JSON")
    p.add_argument("--save", default=None, help="also train on every file and save the locator here")
