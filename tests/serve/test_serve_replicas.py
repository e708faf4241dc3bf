"""The scale-out fault test: three ``lamina serve`` replicas on one PostgreSQL, four concurrent
writers spread over them, one replica killed with SIGKILL mid-load and restarted.

Afterwards: every acknowledged add is stored exactly once (an add whose reply never came may be
stored or not, but at most once: writers never resend); a delete acknowledged by any replica is
served by none; no tenant reads another's user of the same name; every replica answers the same
query with the same context. Real processes, a real PostgreSQL (tests/pgkit.py), a real SIGKILL.
The third replica keeps one user loaded (``--max-loaded-users 1``): it evicts and reloads users
all along, and must serve exactly what the others serve.
"""

from __future__ import annotations

import collections
import random
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from servekit import KEY_A, KEY_B, ServerProc, serve_process

WRITERS = 4
ADDS_PER_WRITER = 24
KILL_AFTER = 30  # acknowledged adds (all writers) before replica 1 is killed


class Replicas:
    """The replicas' URLs as the load balancer sees them (a killed one is marked down)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = list(urls)
        self.down: set[int] = set()
        self.lock = threading.Lock()

    def pick(self, rng: random.Random) -> str:
        with self.lock:
            up = [u for i, u in enumerate(self.urls) if i not in self.down]
        return rng.choice(up)


def _post(url: str, path: str, key: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30.0)


def _archive(url: str, key: str, user: str) -> list[str]:
    r = _post(url, "/v1/search", key, {"user_id": user, "query": "note", "k": 10_000, "layers": ["archive"]})
    if r.status_code == 404:  # a user with nothing stored yet
        return []
    assert r.status_code == 200, r.text
    return [h["text"] for h in r.json()["items"]]


@pytest.mark.slow
def test_three_replicas_one_killed_mid_load(tmp_path: Path, pg_url: str) -> None:
    args = ["--db", pg_url, "--embedder", "hashing"]
    env_keys = f"a:{KEY_A},b:{KEY_B}"
    with (
        serve_process(tmp_path, args, env_keys=env_keys) as r0,
        serve_process(tmp_path, args, env_keys=env_keys) as r1,
        serve_process(tmp_path, [*args, "--max-loaded-users", "1"], env_keys=env_keys) as r2,
    ):
        replicas = Replicas([r0.url, r1.url, r2.url])
        acked: dict[str, list[str]] = collections.defaultdict(list)  # user -> acknowledged texts
        unacked: dict[str, list[str]] = collections.defaultdict(list)
        deleted: dict[str, set[str]] = collections.defaultdict(set)
        errors: list[str] = []
        n_acked = [0]
        at_kill = [0]
        killed = threading.Event()
        mu = threading.Lock()

        def writer(w: int) -> None:
            rng = random.Random(w)
            user, key = f"w{w % 2}", (KEY_A if w < 2 else KEY_B)  # tenants a and b each have w0, w1
            tenant_user = f"{'ab'[w // 2]}/{user}"
            ids: list[tuple[int, str]] = []
            for i in range(ADDS_PER_WRITER):
                text = f"note {tenant_user} number {w}-{i} about {rng.choice(['tea', 'maps', 'rain'])}"
                url = replicas.pick(rng)
                try:
                    r = _post(
                        url, "/v1/memories", key, {"user_id": user, "session_id": f"s{w}", "messages": [{"text": text}]}
                    )
                except httpx.TransportError:
                    with mu:
                        unacked[tenant_user].append(text)
                    continue
                if r.status_code != 200:
                    with mu:
                        if r.status_code >= 500 or r.status_code == 503:
                            unacked[tenant_user].append(text)
                        else:
                            errors.append(f"add {r.status_code}: {r.text}")
                    continue
                with mu:
                    acked[tenant_user].append(text)
                    n_acked[0] += 1
                ids.append((r.json()["ids"][0], text))
                if i % 6 == 5:  # delete an acknowledged add, through another replica
                    gone_id, gone_text = ids.pop(rng.randrange(len(ids)))
                    url = replicas.pick(rng)
                    try:
                        d = httpx.delete(
                            f"{url}/v1/memories/{gone_id}",
                            params={"user_id": user},
                            headers={"Authorization": f"Bearer {key}"},
                            timeout=30.0,
                        )
                    except httpx.TransportError:
                        continue  # not acknowledged: it may or may not be gone
                    if d.status_code == 200:
                        with mu:
                            deleted[tenant_user].add(gone_text)
                        # never served again, by any replica that is up
                        for r, u in enumerate(replicas.urls):
                            if r in replicas.down:
                                continue
                            try:
                                served = _archive(u, key, user)
                            except httpx.TransportError:
                                continue
                            if gone_text in served:
                                with mu:
                                    errors.append(f"deleted {gone_text!r} served by {u}")

        def killer() -> None:
            while n_acked[0] < KILL_AFTER and not killed.is_set():
                time.sleep(0.01)
            with replicas.lock:
                replicas.down.add(1)
            at_kill[0] = n_acked[0]
            r1.proc.send_signal(signal.SIGKILL)
            r1.proc.wait(30)
            killed.set()

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        k = threading.Thread(target=killer)
        k.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        killed.set()
        k.join(60)
        assert r1.proc.returncode == -signal.SIGKILL, "replica 1 was not killed mid-load"
        assert not errors, errors[:5]
        assert KILL_AFTER <= at_kill[0] < n_acked[0], (at_kill, n_acked)  # killed mid-load

        # replica 1 comes back on the same database
        with serve_process(tmp_path, args, env_keys=env_keys) as r1b:
            urls = [r0.url, r1b.url, r2.url]
            for tenant, key in (("a", KEY_A), ("b", KEY_B)):
                for user in ("w0", "w1"):
                    tu = f"{tenant}/{user}"
                    views = [collections.Counter(_archive(u, key, user)) for u in urls]
                    assert views[0] == views[1] == views[2], f"{tu}: replicas disagree"
                    stored = views[0]
                    for text in acked[tu]:
                        want = 0 if text in deleted[tu] else 1
                        assert stored[text] == want, f"{tu}: {text!r} stored {stored[text]} times, want {want}"
                    for text in unacked[tu]:
                        assert stored[text] <= 1, f"{tu}: unacknowledged {text!r} stored twice"
                    other = "b" if tenant == "a" else "a"
                    assert not [t for t in stored if f"{other}/" in t], f"{tu} reads tenant {other}'s turns"
                    assert set(stored) <= set(acked[tu]) | set(unacked[tu])
                    contexts = [
                        _post(
                            u, "/v1/context", key, {"user_id": user, "query": "notes about tea", "budget": 200}
                        ).json()
                        for u in urls
                    ]
                    rendered = [[it["text"] for it in c["items"]] for c in contexts]
                    assert rendered[0] == rendered[1] == rendered[2], f"{tu}: contexts differ across replicas"
            _check_logs([r0, r1b, r2])


def _check_logs(procs: list[ServerProc]) -> None:
    for p in procs:
        assert "Traceback" not in p.log.read_text(), p.log.read_text()[-3000:]
