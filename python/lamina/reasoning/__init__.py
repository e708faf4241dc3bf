"""Reasoning chains: exact step checkers and a mistake localiser (BIG-Bench Mistake format).

``MistakeLocator.train(paths)`` fits a locator on annotated chains; ``.locate(question, steps)``
returns the 0-based index of the first wrong step or None; ``.save`` / ``MistakeLocator.load``.
"""

from __future__ import annotations

from .checkers import RIGHT, UNCHECKED, WRONG, check_step
from .locator import Chain, MistakeLocator, read_chains, step_features

__all__ = ["Chain", "MistakeLocator", "read_chains", "step_features", "check_step", "RIGHT", "WRONG", "UNCHECKED"]
