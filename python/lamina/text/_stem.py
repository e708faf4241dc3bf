"""The Porter stemmer, as NLTK's ``PorterStemmer()`` applies it (its default ``NLTK_EXTENSIONS``
mode), which is what the official LoCoMo scorer uses.

M. F. Porter, "An algorithm for suffix stripping", Program 14(3), 1980, plus NLTK's documented
departures: a table of irregular forms, words of one or two letters left alone, ``ies``/``ied``
on four-letter words, ``y -> i`` only after a consonant that is not the first letter,
``bli -> ble``, ``alli`` handled first, ``fulli -> ful`` and ``logi -> log``. No dependency.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._memo import quiet_lru_cache

__all__ = ["porter_stem"]

_IRREGULAR = {
    "skies": "sky",
    "sky": "sky",
    "dying": "die",
    "lying": "lie",
    "tying": "tie",
    "news": "news",
    "innings": "inning",
    "inning": "inning",
    "outings": "outing",
    "outing": "outing",
    "cannings": "canning",
    "canning": "canning",
    "howe": "howe",
    "proceed": "proceed",
    "exceed": "exceed",
    "succeed": "succeed",
}
_VOWELS = frozenset("aeiou")


def _cons(w: str, i: int) -> bool:
    """Whether ``w[i]`` is a consonant: not a vowel, and ``y`` only at the start or after a vowel.

    A ``y`` is a consonant when the letter before it is not; a run of ``y`` alternates from the
    letter before the run (a loop over the run, not a recursion: a word of 1,000 ``y`` is input).
    """
    c = w[i]
    if c in _VOWELS:
        return False
    if c != "y":
        return True
    j = i
    while j > 0 and w[j - 1] == "y":
        j -= 1
    first = j == 0 or w[j - 1] in _VOWELS  # w[j], the run's first y, follows a vowel (or starts w)
    return first if (i - j) % 2 == 0 else not first


def _cv(stem: str) -> str:
    """``stem`` as ``c`` (consonant) and ``v`` (vowel) letters, in one pass."""
    out = []
    prev = True  # (unused for i = 0: a y there is a consonant)
    for i, c in enumerate(stem):
        cons = c not in _VOWELS and (c != "y" or i == 0 or not prev)
        out.append("c" if cons else "v")
        prev = cons
    return "".join(out)


def _m(stem: str) -> int:
    """Porter's measure: the number of vowel-consonant sequences."""
    return _cv(stem).count("vc")


def _has_vowel(stem: str) -> bool:
    return "v" in _cv(stem)


def _double_cons(w: str) -> bool:
    return len(w) >= 2 and w[-1] == w[-2] and _cons(w, len(w) - 1)


def _cvc(w: str) -> bool:
    if len(w) >= 3:
        return _cons(w, len(w) - 3) and not _cons(w, len(w) - 2) and _cons(w, len(w) - 1) and w[-1] not in "wxy"
    return len(w) == 2 and not _cons(w, 0) and _cons(w, 1)


#: (suffix, replacement, condition on the stem or None); suffix "*d": a double consonant
_Rule = tuple[str, str, Callable[[str], bool] | None]


def _rules(word: str, rules: Sequence[_Rule]) -> str:
    """Apply the first rule whose suffix matches (and stop there, matched or not)."""
    for suffix, repl, cond in rules:
        if suffix == "*d":
            if _double_cons(word):
                stem = word[:-2]
                return stem + repl if cond is None or cond(stem) else word
            continue
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)] if suffix else word
            return stem + repl if cond is None or cond(stem) else word
    return word


def _pos(stem: str) -> bool:
    return _m(stem) > 0


def _gt1(stem: str) -> bool:
    return _m(stem) > 1


def _step1a(w: str) -> str:
    if w.endswith("ies") and len(w) == 4:
        return w[:-3] + "ie"
    return _rules(w, [("sses", "ss", None), ("ies", "i", None), ("ss", "ss", None), ("s", "", None)])


def _step1b(w: str) -> str:
    if w.endswith("ied"):
        return w[:-3] + ("ie" if len(w) == 4 else "i")
    if w.endswith("eed"):
        stem = w[:-3]
        return stem + "ee" if _m(stem) > 0 else w
    for suffix in ("ed", "ing"):
        if w.endswith(suffix) and _has_vowel(w[: -len(suffix)]):
            s = w[: -len(suffix)]
            break
    else:
        return w
    return _rules(
        s,
        [
            ("at", "ate", None),
            ("bl", "ble", None),
            ("iz", "ize", None),
            ("*d", s[-1], lambda stem: s[-1] not in "lsz"),
            ("", "e", lambda stem: _m(stem) == 1 and _cvc(stem)),
        ],
    )


def _step1c(w: str) -> str:
    return _rules(w, [("y", "i", lambda stem: len(stem) > 1 and _cons(stem, len(stem) - 1))])


_STEP2 = [
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
    ("fulli", "ful"),
]


def _step2(w: str) -> str:
    if w.endswith("alli") and _pos(w[:-4]):
        w = w[:-4] + "al"  # (then the rules below on it: it no longer ends in "alli")
    rules = [(s, r, _pos) for s, r in _STEP2]
    rules.append(("logi", "log", lambda stem: _pos(w[:-3])))
    return _rules(w, rules)


def _step3(w: str) -> str:
    return _rules(
        w,
        [
            (s, r, _pos)
            for s, r in (
                ("icate", "ic"),
                ("ative", ""),
                ("alize", "al"),
                ("iciti", "ic"),
                ("ical", "ic"),
                ("ful", ""),
                ("ness", ""),
            )
        ],
    )


def _step4(w: str) -> str:
    rules = [(s, "", _gt1) for s in ("al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent")]
    rules.append(("ion", "", lambda stem: _m(stem) > 1 and stem[-1:] in ("s", "t")))
    rules += [(s, "", _gt1) for s in ("ou", "ism", "ate", "iti", "ous", "ive", "ize")]
    return _rules(w, rules)


def _step5a(w: str) -> str:
    if w.endswith("e"):
        stem = w[:-1]
        m = _m(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            return stem
    return w


def _step5b(w: str) -> str:
    return _rules(w, [("ll", "l", lambda stem: _m(w[:-1]) > 1)])


@quiet_lru_cache(maxsize=65536)
def porter_stem(word: str) -> str:
    """Stem one word (lower-cased first), as ``nltk.stem.PorterStemmer().stem(word)``."""
    w = word.lower()
    if w in _IRREGULAR:
        return _IRREGULAR[w]
    if len(w) <= 2:
        return w
    for step in (_step1a, _step1b, _step1c, _step2, _step3, _step4, _step5a, _step5b):
        w = step(w)
    return w
