"""The contextual firewall (lamina.Firewall) and domain labels (lamina.DomainClassifier)
through Memory.context: what is blocked, why, and what still passes."""

from __future__ import annotations

import pytest

import lamina
from lamina import DomainClassifier, Firewall, InvalidInput, Memory, NotFoundError

HEALTH = "My doctor says my blood pressure is too high and I take medication for it."
WORK = "The project deadline at the office is next Friday and my manager is worried."
BELIEF = "I believe astrology explains my personality and I read my horoscope daily."
FOOD = "My favorite food is sushi and I love jazz music on weekends."


def _memory(**kw: object) -> Memory:
    m = Memory(None, embedder="hashing", domains=DomainClassifier(), **kw)  # type: ignore[arg-type]
    msgs = [{"speaker": "Ann", "text": t} for t in (HEALTH, WORK, BELIEF, FOOD)]
    msgs.append({"speaker": "Ann", "text": "Call the plumber about the leaking thing.", "commitment": "clarify"})
    msgs.append({"speaker": "Ann", "text": "My manager moved the project review to Monday.", "commitment": "verify"})
    m.add(msgs, user_id="ann", session_id="s1", timestamp=1.7e9)
    m.end_session(user_id="ann", session_id="s1")
    return m


def test_classifier_labels_by_lexicon_and_falls_back_to_other() -> None:
    c = DomainClassifier()
    assert c.classify(HEALTH) == "health"
    assert c.classify(WORK) == "work"
    assert c.classify(BELIEF) == "beliefs"
    assert c.classify(FOOD) == "preferences"
    assert c.classify("Is the sky blue today?") == "other"
    custom = DomainClassifier({"pets": ["dog", "cats", "veterinarian"]})
    assert custom.domains == ("pets", "other")
    assert custom.classify("The dogs barked at the cat") == "pets"
    with pytest.raises(InvalidInput, match="lexicon"):
        DomainClassifier({})
    with pytest.raises(InvalidInput, match="other"):
        DomainClassifier({"other": ["x"]})
    with pytest.raises(TypeError, match="iterable of words"):
        DomainClassifier({"pets": "dog"})


def test_markers_weigh_a_firm_belief_over_a_hedged_opinion() -> None:
    c = DomainClassifier()
    # a hedged opinion with no topic word is a belief; a topic word of another domain outweighs it
    assert c.classify("I think the pyramids were built by a lost civilisation.") == "beliefs"
    assert c.classify("I think my doctor wants another blood test.") == "health"
    words_only = DomainClassifier(lamina.text.domains.DEFAULT_LEXICON)  # (a lexicon given: no markers)
    text = "In my opinion, I am convinced."
    assert c.scores(text)["beliefs"] == words_only.scores(text)["beliefs"] + 1 + 2
    weighted = DomainClassifier({"pets": ["dog"]}, {"pets": [(r"\bwoof\b", 3), r"\bpaw\b"]})
    assert weighted.scores("woof woof, a paw")["pets"] == 3 + 3 + 2
    for bad in ([("x", 0)], [("x", True)], [3], [("(", 1)]):
        with pytest.raises(InvalidInput, match="markers"):
            DomainClassifier({"pets": ["dog"]}, {"pets": bad})  # type: ignore[dict-item]


def test_memory_labels_unlabelled_turns_and_keeps_given_labels() -> None:
    m = Memory(None, embedder="hashing", domains=DomainClassifier())
    m.add(
        [{"speaker": "A", "text": HEALTH}, {"speaker": "A", "text": WORK, "domain": "custom"}],
        user_id="u",
        session_id="s",
        timestamp=1.7e9,
    )
    got = {it.text: it.domain for it in m.search("doctor office project", user_id="u", k=5, layers=["working"])}
    assert got == {HEALTH: "health", WORK: "custom"}
    plain = Memory(None, embedder="hashing")  # no classifier: nothing is labelled
    plain.add([{"speaker": "A", "text": HEALTH}], user_id="u", session_id="s", timestamp=1.7e9)
    assert [it.domain for it in plain.search("doctor", user_id="u", k=1, layers=["working"])] == [None]


def test_domain_gate_blocks_other_domains_verbatim_and_inside_summaries() -> None:
    m = _memory()
    q = "When is the project deadline my manager set?"
    off = m.context(q, user_id="ann", budget=400)
    assert off.firewall is None
    fw = m.context(q, user_id="ann", budget=400, firewall=Firewall(tau=-1.0))
    assert fw.firewall is not None and fw.firewall.query_domain == "work"
    text = fw.render()
    assert "project deadline" in text
    for secret in ("blood pressure", "astrology", "sushi"):
        assert secret not in text
    reasons = {b.reason for b in fw.firewall.blocked}
    # (the candidates reach past the floor, MemoryConfig.fill_past_floor: the CLARIFY turn is one
    # and is held back for its commitment)
    assert "domain" in reasons and reasons <= {"domain", "clarify"}
    # every blocked item names the domains that blocked it; none of them is the query's alone
    assert all(
        b.domain and set(b.domain.split(",")) - {"work", "other"} for b in fw.firewall.blocked if b.reason == "domain"
    )
    # the gate off: the same items as without a firewall once the floor is off too
    open_fw = m.context(q, user_id="ann", budget=400, firewall=Firewall(tau=-1.0, domain_gate=False))
    assert open_fw.firewall is not None
    assert {b.reason for b in open_fw.firewall.blocked} <= {"clarify"}
    if not open_fw.firewall.blocked:  # nothing kept out: the very context of no firewall
        assert [it.id for it in open_fw.items] == [it.id for it in off.items]


def test_similarity_floor_and_allow_list() -> None:
    m = _memory()
    q = "What medication do I take for my blood pressure?"
    strict = m.context(q, user_id="ann", budget=400, firewall=Firewall(tau=0.99, domain_gate=False))
    assert strict.abstain and strict.items == []
    assert strict.firewall is not None and {b.reason for b in strict.firewall.blocked} == {"similarity"}
    assert all(b.similarity < 0.99 for b in strict.firewall.blocked)
    # an explicit domain and an allow list: health items pass a work-labelled query
    allowed = m.context(
        q, user_id="ann", budget=400, domain="work", firewall=Firewall(tau=-1.0, allow=("health", "other"))
    )
    assert "blood pressure" in allowed.render()
    blocked = m.context(q, user_id="ann", budget=400, domain="work", firewall=Firewall(tau=-1.0))
    assert "blood pressure" not in blocked.render()


def test_a_stated_constraint_crosses_the_gate_only_into_a_plan_request() -> None:
    m = Memory(None, embedder="hashing", domains=DomainClassifier())
    texts = {
        # (each shares a word with the questions, so the hashing embedder retrieves it)
        "gluten": "My doctor says I can't eat gluten, so food at dinner is a worry.",
        "asthma": "My asthma medication makes me sleepy after dinner.",
        "belief": "I am convinced that dinner after eight is poison, I cannot change my mind.",
        "cap": "Money is short: no more than 200 dollars a month on restaurant dinner.",
        "food": "My favorite dinner is Italian cuisine and I love pizza.",
        "stairs": "After the knee surgery I cannot climb stairs to a dinner in the office.",
    }
    m.add(
        [{"speaker": "Bo", "text": t, "id": k} for k, t in texts.items()], user_id="bo", session_id="s", timestamp=1.7e9
    )
    m.end_session(user_id="bo", session_id="s")
    plan = "Can you suggest a restaurant for my birthday dinner?"  # preferences, asks for a recommendation
    c = m.context(plan, user_id="bo", budget=400, include_archive=True, firewall=Firewall(tau=-1.0))
    assert c.firewall is not None and c.firewall.query_domain == "preferences"
    got = set(c.sources)
    assert {"gluten", "cap", "food"} <= got  # the constraints of health and finance help the plan
    assert "asthma" not in got and "belief" not in got  # a plain health fact and a belief do not cross
    # a constraint whose words touch only other domains (health, work) does not bear on a meal
    assert "stairs" not in got
    no_gate = Firewall(tau=-1.0, domain_gate=False)
    assert "stairs" in m.context(plan, user_id="bo", budget=400, include_archive=True, firewall=no_gate).sources
    # a question that plans nothing: the constraints of other domains stay out
    ask = m.context(
        "What is my favorite cuisine for dinner?",
        user_id="bo",
        budget=400,
        include_archive=True,
        firewall=Firewall(tau=-1.0),
    )
    assert {"gluten", "cap"}.isdisjoint(ask.sources) and "food" in ask.sources
    # the exception off: the plain gate
    off = m.context(
        plan, user_id="bo", budget=400, include_archive=True, firewall=Firewall(tau=-1.0, constraints_cross=False)
    )
    assert {"gluten", "cap"}.isdisjoint(off.sources)
    assert lamina.text.domains.states_constraint(texts["cap"]) and not lamina.text.domains.states_constraint(
        "I can't wait for the weekend."
    )
    plans = lamina.text.domains.asks_for_plan
    assert plans("What should I cook tonight?") and plans("Which hotel do you recommend?")
    assert not plans("When is my interview?") and not plans("What did the doctor say?")
    with pytest.raises(TypeError, match="str"):
        plans(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str"):
        lamina.text.domains.states_constraint(b"cannot")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="constraints_cross"):
        Firewall(constraints_cross=1)  # type: ignore[arg-type]


def test_clarify_is_withheld_and_reported_verify_is_marked() -> None:
    m = _memory()
    c = m.context(
        "What about the leaking thing and the plumber?", user_id="ann", budget=400, firewall=Firewall(tau=0.1)
    )
    assert c.firewall is not None and c.firewall.needs_clarification
    assert "plumber" not in c.render()
    assert all(b.reason == "clarify" for b in c.firewall.blocked if b.item_id in c.firewall.clarify)
    # without a firewall the CLARIFY turn is an ordinary memory
    assert "plumber" in m.context("What about the leaking thing and the plumber?", user_id="ann", budget=400).render()
    v = m.context("When is the project review with my manager?", user_id="ann", budget=400, firewall=Firewall(tau=0.1))
    assert v.firewall is not None and v.firewall.verify
    assert "[recheck]" in v.render() or "verify" in v.render()


def test_auto_domain_without_firewall_is_the_silent_gate() -> None:
    """domain="auto" alone classifies the query and applies the plain gate (items labelled with
    another domain are not candidates; unlabelled summaries are, unlike under the firewall)."""
    m = _memory()
    c = m.context("What medication do I take for my blood pressure?", user_id="ann", budget=400, domain="auto")
    assert c.firewall is None
    assert "blood pressure" in c.render()
    assert {it.domain for it in c.items} <= {"health", None}


def test_firewall_bad_settings_and_unknown_user() -> None:
    with pytest.raises(InvalidInput, match="tau"):
        Firewall(tau=1.5)
    with pytest.raises(TypeError, match="tau"):
        Firewall(tau="0.2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="allow"):
        Firewall(allow="health")  # type: ignore[arg-type]
    m = _memory()
    with pytest.raises(TypeError, match="firewall"):
        m.context("q", user_id="ann", firewall=0.2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="domains"):
        Memory(None, embedder="hashing", domains="health")  # type: ignore[arg-type]
    with pytest.raises(NotFoundError, match="unknown user_id 'nobody'"):
        m.context("anything at all", user_id="nobody", firewall=Firewall())
    c = m.context("anything at all", user_id="ann", firewall=Firewall())
    assert lamina.FirewallReport is type(c.firewall)
