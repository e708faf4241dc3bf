"""Rate limits shared across replicas (issue 45): two real ``lamina serve`` processes on one
real PostgreSQL draw from one budget per address (failed authentications) and per key (writes);
a legitimate client on another address is not affected."""

from __future__ import annotations

from pathlib import Path

import httpx
from servekit import KEY_A, KEY_B, serve_process

AUTH_BUDGET = 10
WRITE_BUDGET = 6
REPLICAS = 2


def test_two_replicas_share_the_budgets(tmp_path: Path, pg_url: str) -> None:
    args = ["--db", pg_url, "--embedder", "hashing", "--rate-limit", f"auth={AUTH_BUDGET}/1h,writes={WRITE_BUDGET}/1h"]
    keys = f"a:{KEY_A},b:{KEY_B}"
    with serve_process(tmp_path, args, env_keys=keys) as r0, serve_process(tmp_path, args, env_keys=keys) as r1:
        urls = [r0.url, r1.url]
        # a guesser behind one address (a trusted proxy names it), alternating between the replicas
        guesser = {"X-Forwarded-For": "10.0.0.66"}
        answers = []
        for i in range(4 * AUTH_BUDGET):
            hdr = {**guesser, "Authorization": f"Bearer wrong-key-{i:04d}-0123456789abcdefghij"}
            answers.append(httpx.get(urls[i % 2] + "/v1/users", headers=hdr, timeout=30))
        n401 = sum(r.status_code == 401 for r in answers)
        # one budget for both (each replica may let one more through before it reads the other's takes)
        assert AUTH_BUDGET <= n401 <= AUTH_BUDGET + REPLICAS - 1, n401
        assert {r.status_code for r in answers[n401 + 1 :]} == {429}
        assert all(int(r.headers["Retry-After"]) >= 1 for r in answers if r.status_code == 429)
        # the guesser's address is refused on both replicas, even with a right key ...
        for url in urls:
            assert (
                httpx.get(url + "/v1/users", headers={**guesser, "Authorization": f"Bearer {KEY_A}"}).status_code == 429
            )
        # ... a client on another address is not
        for url in urls:
            ok = httpx.get(
                url + "/v1/users", headers={"X-Forwarded-For": "10.0.0.7", "Authorization": f"Bearer {KEY_B}"}
            )
            assert ok.status_code == 200, ok.text
        # writes: one budget per key across both replicas
        statuses = []
        for i in range(3 * WRITE_BUDGET):
            body = {"user_id": "w", "session_id": "s", "messages": [{"speaker": "u", "text": f"write {i}"}]}
            hdr = {"X-Forwarded-For": f"10.1.0.{i}", "Authorization": f"Bearer {KEY_A}"}  # (new address each)
            statuses.append(httpx.post(urls[i % 2] + "/v1/memories", json=body, headers=hdr, timeout=30).status_code)
        n200 = statuses.count(200)
        assert WRITE_BUDGET <= n200 <= WRITE_BUDGET + REPLICAS - 1, statuses
        assert set(statuses[n200 + 1 :]) == {429}, statuses
        # key b's writes have their own budget
        body = {"user_id": "w", "session_id": "s", "messages": [{"speaker": "u", "text": "b writes"}]}
        hdr = {"X-Forwarded-For": "10.2.0.1", "Authorization": f"Bearer {KEY_B}"}
        assert httpx.post(urls[1] + "/v1/memories", json=body, headers=hdr, timeout=30).status_code == 200
