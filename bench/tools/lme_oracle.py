"""How far the systems of a ``lamina eval longmemeval`` run could reach together: the per-question
oracle.

For each budget, the evidence recall of every system in the run's JSON (``--out``), per question
type and overall (the questions with evidence: abstention questions left out, as the harness
does), and of the **oracle**: for each question, the best recall any of the chosen systems got
on it. The oracle knows the answer, so it bounds what any choice among, or blend of, those
systems' contexts question by question could score; it does not bound a new signal. Read it
against a target such as "BM25 + 10 points".

    python bench/tools/lme_oracle.py run.json                       # every system of the run
    python bench/tools/lme_oracle.py run.json --systems lamina,bm25 --target bm25:10
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Row:
    """One line of the table: a system (or the oracle) at one budget.

    Attributes
    ----------
    name : the system, or ``"oracle"``
    budget : the context budget (tokens)
    per_type : the mean evidence recall (%) of each question type
    overall : the mean over every scored question (%)
    """

    name: str
    budget: str
    per_type: dict[str, float]
    overall: float


def _mean(values: Sequence[float]) -> float:
    return 100.0 * sum(values) / len(values) if values else float("nan")


def oracle_rows(run: dict[str, Any], *, systems: Sequence[str] | None = None) -> list[Row]:
    """The evidence recall of each chosen system and of their per-question oracle, per budget.

    Parameters
    ----------
    run : a ``lamina eval longmemeval --out`` JSON, loaded
    systems : the systems to read and to take the best of (default: every system of the run)

    Returns
    -------
    list of Row
        per budget: one row per system, then the oracle's
    """
    per_q: dict[str, list[dict[str, Any]]] = run["per_question"]
    names = list(per_q) if systems is None else list(systems)
    missing = [s for s in names if s not in per_q]
    if missing:
        raise SystemExit(f"systems not in this run: {missing} (it has {list(per_q)})")
    if not names:
        raise SystemExit("no systems to read")
    qids = [q["qid"] for q in per_q[names[0]]]
    for s in names[1:]:
        if [q["qid"] for q in per_q[s]] != qids:
            raise SystemExit(f"system {s!r} has other questions than {names[0]!r}")
    rows: list[Row] = []
    for budget in (str(b) for b in run["budgets"]):
        scored = [i for i, q in enumerate(per_q[names[0]]) if q["ev"].get(budget) is not None]
        types = sorted({per_q[names[0]][i]["type"] for i in scored})
        recall = {s: {i: float(per_q[s][i]["ev"][budget]) for i in scored} for s in names}
        recall["oracle"] = {i: max(recall[s][i] for s in names) for i in scored}
        for name, by_q in recall.items():
            per_type = {t: _mean([by_q[i] for i in scored if per_q[names[0]][i]["type"] == t]) for t in types}
            rows.append(Row(name=name, budget=budget, per_type=per_type, overall=_mean(list(by_q.values()))))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a lamina eval longmemeval --out JSON")
    ap.add_argument("--systems", default=None, help="comma-separated systems (default: all of the run)")
    ap.add_argument("--target", default=None, help="SYSTEM:POINTS, e.g. bm25:10: print that system's overall + POINTS")
    args = ap.parse_args(argv)
    run = json.loads(args.run.read_text())
    systems = [s.strip() for s in args.systems.split(",") if s.strip()] if args.systems else None
    rows = oracle_rows(run, systems=systems)
    types = list(rows[0].per_type)
    read = [r.name for r in rows if r.budget == rows[0].budget and r.name != "oracle"]
    print(f"evidence recall (%), {args.run.name}; oracle: the best of {', '.join(read)} on each question")
    print("budget  system            " + "".join(f"{t[:14]:>15}" for t in types) + "        overall")
    for r in rows:
        cells = "".join(f"{r.per_type[t]:15.1f}" for t in types)
        print(f"{r.budget:>6}  {r.name:<16}  {cells}{r.overall:15.1f}")
    if args.target:
        system, _, points = args.target.partition(":")
        for budget in (str(b) for b in run["budgets"]):
            base = [r for r in rows if r.name == system and r.budget == budget]
            if not base:
                raise SystemExit(f"--target: {system!r} is not among the systems read")
            orc = next(r for r in rows if r.name == "oracle" and r.budget == budget)
            goal = base[0].overall + float(points or 0)
            print(
                f"{budget:>6}  target {system} + {points}: {goal:.1f}; oracle {orc.overall:.1f} ({orc.overall - goal:+.1f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
