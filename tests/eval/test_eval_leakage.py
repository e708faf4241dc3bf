"""lamina eval leakage: the generator's labels, the rates, and the command's JSON."""

from __future__ import annotations

import json
from pathlib import Path

from lamina import Firewall, Memory
from lamina.cli.entry import main
from lamina.eval.leakage import decoy_rate, generate_users, run_setting


def test_generator_is_deterministic_and_labels_every_probe() -> None:
    a, b = generate_users(5, seed=3), generate_users(5, seed=3)
    assert [u.memories for u in a] == [u.memories for u in b]
    assert [u.probes for u in a] != [u.probes for u in generate_users(5, seed=4)]
    for u in a:
        ids = {s for s, _, _ in u.memories}
        domain = {s: d for s, d, _ in u.memories}
        for p in u.probes:
            assert set(p.should) <= ids and set(p.must_not) <= ids
            assert not set(p.should) & set(p.must_not)
            if p.domain == "factual":
                assert p.should == () and set(p.must_not) == ids
            else:  # nothing of the query's own domain is labelled a leak
                assert all(domain[s] != p.domain for s in p.must_not)
            assert p.cross == any(domain[s] != p.domain for s in p.should)


def test_rates_count_what_reaches_the_context() -> None:
    users = generate_users(6, seed=0)
    m = Memory(None, embedder="hashing")
    from lamina.eval.leakage import _ingest

    _ingest(m, users, caller_labels=True)
    off = run_setting(m, users, 256, None)
    on = run_setting(m, users, 256, Firewall(tau=-1.0))
    assert off.queries == on.queries == sum(len(u.probes) for u in users)
    assert off.factual_queries == 12 and off.beneficial_pairs == off.queries - 12
    # with the caller's labels the gate keeps every other domain out, beliefs included
    assert on.leakage_rate == 0.0 and on.sycophancy_rate == 0.0
    assert off.leakage_rate > 0.5 and off.sycophancy_rate > 0.5  # a full budget draws on everything
    # a gate without the constraint exception costs exactly the cross-domain pairs
    strict = run_setting(m, users, 256, Firewall(tau=-1.0, constraints_cross=False))
    assert strict.beneficial_miss_cross_domain == 1.0 and strict.leakage_rate == 0.0
    # stated constraints cross into plan requests: the cross-domain pairs come back, no leak does
    assert on.beneficial_miss_cross_domain <= off.beneficial_miss_cross_domain + 1 / 6
    assert on.beneficial_miss_same_domain <= off.beneficial_miss_same_domain + 0.05
    # decoy plan requests that a foreign constraint does not bear on: drawn in without a firewall
    assert decoy_rate(m, users, 256, None) > 0.5 and decoy_rate(m, users, 256, Firewall(tau=-1.0)) == 0.0


def test_cli_writes_the_settings_and_keys(tmp_path: Path, capsys: object) -> None:
    out = tmp_path / "leak.json"
    assert main(["eval", "leakage", "--users", "3", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    for setting in ("off", "firewall"):
        assert {"leakage_rate", "sycophancy_rate", "beneficial_miss_rate"} <= set(res[setting])
        assert all(0.0 <= res[setting][k] <= 1.0 for k in ("leakage_rate", "sycophancy_rate", "beneficial_miss_rate"))
    assert {(r["tau"], r["domain_gate"]) for r in res["sweep"]} >= {(-1.0, False), (-1.0, True)}
    assert 0.0 <= res["classifier_accuracy"]["memories"] <= 1.0
    assert set(res["constraint_decoy_rate"]) == {"off", "firewall"}
