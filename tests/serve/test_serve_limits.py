"""Behaviour under load: the bounded work pool answers 503 with Retry-After instead of queueing
without bound, and a request that started always finishes."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from servekit import serve_in_thread

import lamina
from lamina import Client, Memory
from lamina.serve import Limits, ServeConfig, create_app
from memkit import GatedEmbedder


def _add(url: str, text: str) -> httpx.Response:
    body = {"user_id": "u", "session_id": "s", "messages": [{"text": text}]}
    return httpx.post(url + "/v1/memories", json=body, timeout=30)


@pytest.mark.parametrize("queue_timeout", [0.2, 30.0])
def test_full_pool_answers_503_and_started_work_finishes(queue_timeout: float) -> None:
    emb = GatedEmbedder()
    mem = Memory(None, embedder=emb)
    # one thread; with queue_timeout 30 one more may wait, with 0.2 the waiter times out
    limits = Limits(threads=1, max_pending=2 if queue_timeout > 1 else 5, queue_timeout=queue_timeout)
    app = create_app(ServeConfig(db=None, limits=limits), memory=mem)
    with serve_in_thread(app) as url, ThreadPoolExecutor(4) as ex:
        first = ex.submit(_add, url, "the first request")
        assert emb.entered.wait(30)  # it runs (in the embedder) and holds the only thread
        if queue_timeout > 1:
            second = ex.submit(_add, url, "the second request waits")
            while app.state.lamina.pool.pending < 2:
                threading.Event().wait(0.01)
            r = _add(url, "the third is one too many")
            assert r.status_code == 503 and r.json()["code"] == "overloaded" and r.headers["retry-after"] == "1"
            with Client(url) as c, pytest.raises(lamina.Overloaded) as ei:
                c.add([{"text": "refused"}], user_id="u", session_id="s")
            assert ei.value.retry_after == 1.0
        else:
            r = _add(url, "this one waits 0.2 s for the thread, then gives up")
            assert r.status_code == 503 and r.json()["code"] == "overloaded" and "queue_timeout" in r.json()["message"]
        emb.gate.set()
        assert first.result().status_code == 200
        if queue_timeout > 1:
            assert second.result().status_code == 200
        with Client(url) as c:
            texts = {h.text for h in c.search("request", user_id="u", k=10, layers=["archive"])}
    assert "the first request" in texts and "refused" not in texts and "the third is one too many" not in texts
    assert ("the second request waits" in texts) == (queue_timeout > 1)
    mem.close()


def test_limits_are_checked() -> None:
    with pytest.raises(lamina.InvalidInput, match="threads"):
        Limits(threads=0)
    with pytest.raises(lamina.InvalidInput, match="queue_timeout"):
        Limits(queue_timeout=0)
    with pytest.raises(lamina.InvalidInput, match="max_messages"):
        Limits(max_messages=True)  # type: ignore[arg-type]


class BrokenEmbedder(GatedEmbedder):
    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        if any("boom" in t for t in texts):
            raise RuntimeError("the embedder broke")
        return super().embed(texts)


def test_an_unexpected_error_is_a_json_500_and_the_server_goes_on() -> None:
    emb = BrokenEmbedder()
    emb.gate.set()
    with Memory(None, embedder=emb) as mem, serve_in_thread(create_app(ServeConfig(db=None), memory=mem)) as url:
        r = _add(url, "boom")
        assert r.status_code == 500 and r.json() == {
            "code": "internal",
            "message": "internal error (RuntimeError); see the server log",
        }
        assert _add(url, "fine").status_code == 200
        with Client(url) as c, pytest.raises(lamina.client.http_client.ServiceError) as ei:
            c.add([{"text": "boom again"}], user_id="u", session_id="s")
        assert ei.value.status == 500 and ei.value.code == "internal"
