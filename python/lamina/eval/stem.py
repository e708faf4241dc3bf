"""The Porter stemmer used by the official LoCoMo scorer; it lives in :mod:`lamina.text._stem`
(shared with the lexical index's tokenizer) and is re-exported here."""

from __future__ import annotations

from ..text._stem import porter_stem

__all__ = ["porter_stem"]
