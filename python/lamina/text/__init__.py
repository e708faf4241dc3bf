"""``lamina.text``: text helpers below the memory loop — the Porter stemmer (:mod:`._stem`),
relative time expressions (:mod:`.timeref`), bounded memos the garbage collector does not walk
(:mod:`._memo`) and the domain lexicon classifier (:mod:`.domains`).

These modules import nothing of lamina but the core and :mod:`lamina.errors`."""
