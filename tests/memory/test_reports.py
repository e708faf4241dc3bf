"""lamina.memory.reports: the typed results and their ``to_dict()`` (the dicts the API returned before)."""

from __future__ import annotations

from lamina import DeleteReport, Memory, MemoryConfig, MemoryStats, ProfileDrift, SessionReport

OLD_STATS_KEYS = {
    "embedder",
    "dim",
    "path",
    "users",
    "sessions",
    "open_sessions",
    "items",
    "layers",
    "kinds",
    "archive_turns",
    "facts_current",
    "facts_superseded",
    "evicted",
    "profile_drift",
    "ann_layers",
    "llm",
    "llm_fallbacks",
    "config",
}


def test_reports_to_dict() -> None:
    assert SessionReport().to_dict() == {
        "segments": 0,
        "facts": 0,
        "promoted": 0,
        "evicted": 0,
        "blend_drift": 0.0,
        "purged": 0,
    }
    assert DeleteReport(deleted=0).to_dict() == {"deleted": 0, "ids": []}
    assert DeleteReport(deleted=2, ids=(5, 9)).to_dict() == {"deleted": 2, "ids": [5, 9]}
    assert ProfileDrift(total=1.5, last=None, updates=2, lambda_=0.5).to_dict() == {
        "total": 1.5,
        "last": None,
        "updates": 2,
        "lambda": 0.5,
    }


def test_stats_to_dict_is_the_old_dict() -> None:
    with Memory(embedder="hashing", config=MemoryConfig(working_capacity=2)) as m:
        m.add(
            [{"speaker": "Ann", "text": f"I live in Paris, line {i}."} for i in range(3)],
            user_id="u",
            session_id="s",
            timestamp=1.7e9,
        )
        st = m.stats(user_id="u")
        assert isinstance(st, MemoryStats)
        d = st.to_dict()
        assert set(d) == OLD_STATS_KEYS
        assert d["profile_drift"] == {"total": 0.0, "last": 0.0, "updates": 0, "lambda": 1.0}
        assert {k: v for k, v in d.items() if k != "profile_drift"} == {
            k: getattr(st, k) for k in OLD_STATS_KEYS - {"profile_drift"}
        }
        assert d["layers"] == {"working": 1, "episodic": 1, "semantic": 2, "archive": 2, "history": 0}
        assert d["archive_turns"] == 3 and d["items"] == 6 and d["users"] == 1
