"""The per-tenant gauges: grouped by the stored ids' tenant prefix, recounted at most every max_age."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from lamina.serve.metrics import TenantCollector
from lamina.serve.tenancy import SEP


def test_tenant_gauges_and_their_reuse() -> None:
    calls: list[int] = []
    rows = [(f"a{SEP}alice", 3), (f"a{SEP}bob", 4), (f"b{SEP}alice", 5), ("local", 1)]

    def counts() -> list[tuple[str, int]]:
        calls.append(1)
        return rows

    reg = CollectorRegistry()
    reg.register(TenantCollector(counts, max_age=3600))
    text = generate_latest(reg).decode()
    for line in (
        'lamina_users{tenant="a"} 2.0',
        'lamina_items{tenant="a"} 7.0',
        'lamina_items{tenant="b"} 5.0',
        'lamina_users{tenant=""} 1.0',
    ):
        assert line in text
    generate_latest(reg)
    assert len(calls) == 1  # reused within max_age
    reg2 = CollectorRegistry()
    reg2.register(TenantCollector(counts, max_age=0))
    generate_latest(reg2)
    generate_latest(reg2)
    assert len(calls) == 3
