"""Domain labels for memory items and queries: a small offline lexicon classifier.

The contextual firewall (:mod:`lamina.memory.read.firewall`) keeps a memory of one life domain out of
a prompt about another (a health detail in a work question). Callers may label items
themselves (``add(..., {"domain": ...})``); :class:`DomainClassifier` labels what they leave
unlabelled, and queries (``Memory.context(..., domain="auto")``), without a model or a network:
each domain is a set of word stems, a text scores one point per token whose Porter stem is in
a domain's set, and two per match of the domain's marker phrases (first-person statements of
belief for ``beliefs``: "I believe", "I am convinced"); the best-scoring domain wins, a tie goes
to the domain listed first (the sensitive ones lead the default lexicon), and a text with no
hit is ``other``.

The default lexicon covers health, work, finance, relationships, preferences and beliefs with
general vocabulary (not any data set's); pass ``lexicon=`` to use other domains or words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from ..errors import InvalidInput
from ._memo import quiet_lru_cache
from ._stem import porter_stem

__all__ = ["DomainClassifier", "DEFAULT_LEXICON", "DEFAULT_MARKERS", "OTHER", "states_constraint", "asks_for_plan"]

#: The label of a text that names no domain.
OTHER = "other"

_WORD = re.compile(r"[a-z][a-z'-]*")

# listed in tie-break order: the more sensitive domains first
_DEFAULT_WORDS: dict[str, str] = {
    "health": """health healthy doctor doctors physician nurse hospital clinic surgery surgeon
        diagnosis diagnosed illness ill sick disease symptom symptoms medication medicine pill
        pills prescription therapy therapist treatment allergy allergic diabetes cancer asthma
        blood pressure pain injury injured fever flu virus infection vaccine dentist tooth
        migraine headache depression anxiety insomnia sleep pregnant pregnancy diet weight
        cholesterol heart kidney liver lung knee ankle appointment checkup chemo""",
    "finance": """money finance financial bank banking account savings save saving loan loans
        mortgage debt credit card cards budget budgeting invest investing investment
        investments stock stocks shares portfolio retirement pension tax taxes income
        expense expenses rent bill bills payment payments paid pay spend spending price
        insurance crypto bitcoin fund funds dollars euros cash wealth broke afford""",
    "relationships": """wife husband spouse partner girlfriend boyfriend married marriage
        wedding divorce divorced dating friend friends friendship mother father mom
        dad parent parents son daughter child children kids sister brother sibling family
        grandmother grandfather cousin aunt uncle breakup relationship anniversary fiance
        fiancee neighbor roommate""",
    "beliefs": """believe believes belief beliefs faith religion religious god church mosque
        temple pray prayer spiritual convinced opinion opinions conspiracy politics
        political vote voted election liberal conservative ideology astrology horoscope
        superstition moral morals values skeptic atheist agnostic theory""",
    "work": """work working job jobs career office boss manager colleague colleagues coworker
        team meeting meetings project projects deadline deadlines client clients employer
        employee hired hiring promotion promoted salary interview resume shift company startup
        business presentation report quarterly review performance task tasks workplace
        engineer engineering contract overtime commute internship department""",
    "preferences": """like likes love loves prefer prefers preference favorite favourite enjoy
        enjoys hate hates dislike dislikes fan taste food restaurant cuisine vegetarian vegan
        coffee tea music song songs band movie movies film films book books novel hobby
        hobbies game games sport sports color travel vacation hiking cooking recipe recipes
        pizza sushi chocolate wine beer genre style fashion""",
}


def _stems(words: Iterable[str]) -> frozenset[str]:
    return frozenset(porter_stem(w.lower()) for w in words if w)


# first-person statements of belief (general English, any topic)
_BELIEF_MARKERS = (
    r"\b(?:i|we) (?:really |firmly |truly |strongly )?(?:believe|am (?:sure|convinced|certain)|are (?:sure|convinced|certain)|know for a fact|think that)\b",
    r"\bmy (?:faith|belief|horoscope)\b",
    # a hedged opinion is weaker evidence: one point, so a topic word of another domain wins
    (r"\b(?:i|we) (?:really |honestly |just )?(?:think|feel that|reckon)\b|\bin my (?:opinion|view)\b", 1),
)

#: Default marker phrases per domain: regular expressions (case-insensitive), two points a match,
#: or ``(regex, points)`` pairs.
DEFAULT_MARKERS: Mapping[str, tuple[str | tuple[str, int], ...]] = MappingProxyType({"beliefs": _BELIEF_MARKERS})

#: The default lexicon: domain -> word stems.
DEFAULT_LEXICON: Mapping[str, frozenset[str]] = MappingProxyType(
    {d: _stems(ws.split()) for d, ws in _DEFAULT_WORDS.items()}
)


def _marker(domain: str, p: object) -> tuple[re.Pattern[str], int]:
    """A marker entry (a regex, or a ``(regex, points)`` pair) compiled, with its points."""
    pat, pts = p if isinstance(p, tuple) and len(p) == 2 else (p, 2)
    if not isinstance(pat, str) or isinstance(pts, bool) or not isinstance(pts, int) or pts < 1:
        raise InvalidInput(f"markers[{domain!r}] entries must be regex strs or (regex, points >= 1) pairs, got {p!r}")
    try:
        return re.compile(pat, re.IGNORECASE), pts
    except re.error as e:
        raise InvalidInput(f"markers[{domain!r}] has an invalid regular expression: {e}") from None


# A constraint: a limit the user lives under, whatever its domain (an allergy, a physical limit,
# a spending cap). Plans and recommendations in *any* domain must respect it, so the firewall's
# domain gate lets constraints through to queries that ask for one (general English, any topic).
_CONSTRAINT = re.compile(
    r"\b(?:can ?not|can't(?! wait| believe| stop)|unable to|not able to|must not|mustn't|not allowed to"
    r"|allergic|intolerant|at (?:the )?most|no more than|only afford|can't afford|forbidden to)\b",
    re.IGNORECASE,
)
# a request for a plan, a recommendation, advice or a choice of what to avoid
_PLAN = re.compile(
    r"\b(?:plan|planning|schedule|scheduling|recommend|recommendation|suggest|advise|avoid|organi[sz]e"
    r"|arrange|book|(?:should|shall|can) (?:i|we))\b",
    re.IGNORECASE,
)


def states_constraint(text: str) -> bool:
    """Whether ``text`` states a limit on its speaker ("I cannot sit for long", "allergic to",
    "at most 50 dollars"): general English markers, any domain."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _CONSTRAINT.search(text) is not None


def asks_for_plan(query: str) -> bool:
    """Whether ``query`` asks for a plan, a schedule, a recommendation, advice ("should I",
    "can we") or what to avoid (the requests a constraint of any domain bears on)."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    return _PLAN.search(query) is not None


@quiet_lru_cache(maxsize=65_536)
def _stem_of(token: str) -> str:
    return porter_stem(token)


class DomainClassifier:
    """Label a text with one domain by the stems of its words.

    Parameters
    ----------
    lexicon : mapping of str to iterable of str, optional
        Domain name -> words (stemmed here), in tie-break order. Default :data:`DEFAULT_LEXICON`
        (health, finance, relationships, beliefs, work, preferences). ``other`` is reserved for
        texts with no hit.
    markers : mapping of str to iterable, optional
        Domain name -> regular expressions (case-insensitive) worth two points a match, or
        ``(regex, points)`` pairs (points a positive int). Default :data:`DEFAULT_MARKERS` with
        the default lexicon, none with a custom one.
    """

    def __init__(
        self,
        lexicon: Mapping[str, Iterable[str]] | None = None,
        markers: Mapping[str, Iterable[str | tuple[str, int]]] | None = None,
    ) -> None:
        if lexicon is None:
            self.lexicon: dict[str, frozenset[str]] = dict(DEFAULT_LEXICON)
        else:
            if not isinstance(lexicon, Mapping) or not lexicon:
                raise InvalidInput("lexicon must be a non-empty mapping of domain name -> words")
            out: dict[str, frozenset[str]] = {}
            for name, words in lexicon.items():
                if not isinstance(name, str) or not name.strip() or name == OTHER:
                    raise InvalidInput(
                        f"lexicon domain names must be non-empty strs other than {OTHER!r}, got {name!r}"
                    )
                if isinstance(words, str):
                    raise TypeError(f"lexicon[{name!r}] must be an iterable of words, not a str")
                stems = _stems(str(w) for w in words)
                if not stems:
                    raise InvalidInput(f"lexicon[{name!r}] has no words")
                out[name] = stems
            self.lexicon = out
        if markers is None:
            markers = DEFAULT_MARKERS if lexicon is None else {}
        self.markers: dict[str, tuple[tuple[re.Pattern[str], int], ...]] = {}
        for name, pats in markers.items():
            if name not in self.lexicon:
                raise InvalidInput(f"markers[{name!r}] names no domain of the lexicon")
            self.markers[name] = tuple(_marker(name, p) for p in pats)

    @property
    def domains(self) -> tuple[str, ...]:
        """The domains this classifier can return, ``other`` last."""
        return (*self.lexicon, OTHER)

    def scores(self, text: str) -> dict[str, int]:
        """Points per domain: ``text``'s tokens whose stem is in the domain's set, plus each
        marker match's points (two unless the marker says)."""
        toks = [_stem_of(t.strip("'-")) for t in _WORD.findall(text.lower())]
        out = {d: sum(t in stems for t in toks) for d, stems in self.lexicon.items()}
        for d, pats in self.markers.items():
            out[d] += sum(w * len(p.findall(text)) for p, w in pats)
        return out

    def classify(self, text: str) -> str:
        """The domain with the most points (a tie: the one listed first); ``other`` when none
        has a point."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        s = self.scores(text)
        best = max(s.values(), default=0)
        if best == 0:
            return OTHER
        return next(d for d, v in s.items() if v == best)

    def __repr__(self) -> str:
        return f"DomainClassifier(domains={self.domains!r})"
