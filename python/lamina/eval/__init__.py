"""Evaluation of lamina against baselines on LoCoMo (``lamina eval locomo``).

* :mod:`lamina.eval.scoring` — the metric definitions of docs/design.md §4 and the official LoCoMo
  answer scoring (normalisation, Porter stemming, F1, BLEU-1).
* :mod:`lamina.eval.locomo` — the loader (turns for memories, gold questions kept apart).
* :mod:`lamina.eval.systems` — raw-turn baselines and lamina with its ablations.
* :mod:`lamina.eval.harness` — the replay, the tables, the JSON and the plot.
"""

from __future__ import annotations

from .harness import ALL_SYSTEMS, Reader, run_locomo
from .locomo import Conversation, LoadReport, Question, Session, Turn, load_locomo
from .scoring import CATEGORY_NAMES
from .tables import format_tables, plot_recall

__all__ = [
    "ALL_SYSTEMS",
    "CATEGORY_NAMES",
    "Conversation",
    "LoadReport",
    "Question",
    "Reader",
    "Session",
    "Turn",
    "format_tables",
    "load_locomo",
    "plot_recall",
    "run_locomo",
]
