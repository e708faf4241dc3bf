"""Text no word list knows, through a real ``lamina serve``: a message of 1,000 repeated letters
(the stemmer once recursed once per letter: a 500) is stored and found."""

from __future__ import annotations

import uuid

import httpx
from servekit import KEY_A, ServerProc

T0 = 1_683_550_000.0


def test_a_long_run_of_one_letter_is_stored_and_searchable(server: ServerProc) -> None:
    user = f"u-{uuid.uuid4().hex[:10]}"
    run = "y" * 1000
    messages = [{"speaker": "u", "text": "We hiked in the Alps."}, {"speaker": "u", "text": run}]
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30) as c:
        r = c.post("/v1/memories", json={"user_id": user, "session_id": "s", "timestamp": T0, "messages": messages})
        assert r.status_code == 200, r.text
        ids = r.json()["ids"]
        assert c.get(f"/v1/memories/{ids[1]}").json()["text"] == run
        r = c.post("/v1/search", json={"user_id": user, "query": run, "k": 1})
        assert r.status_code == 200, r.text
        assert [h["id"] for h in r.json()["items"]] == [ids[1]]
        r = c.post("/v1/context", json={"user_id": user, "query": "(" * 500 + run + ")" * 500, "budget": 256})
        assert r.status_code == 200, r.text
