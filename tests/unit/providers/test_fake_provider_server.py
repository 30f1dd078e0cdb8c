"""The shared fake provider behaves as documented (other suites rely on it)."""

from __future__ import annotations

import threading
import time

import httpx

from fakes.provider_server import FakeProviderServer, Reply, chat_reply


def test_default_answers_and_recording(fake_provider: FakeProviderServer) -> None:
    chat = httpx.post(f"{fake_provider.base_url}/chat/completions",
                      json={"model": "m", "messages": [], "response_format": {"type": "json_object"}},
                      headers={"Authorization": "Bearer t"})
    assert chat.status_code == 200
    assert chat.json()["choices"][0]["message"]["content"] == "{}"
    questions = {"q": {"type": "choice", "instructions": "i", "criteria": {"a": "x", "b": "y"}},
                 "s": {"type": "score", "instructions": "i", "criteria": ["lo", "hi"]},
                 "n": {"type": "noul", "instructions": "i"}}
    decision = httpx.post(f"{fake_provider.base_url}/decisions",
                          json={"model": "d", "state": "x", "questions": questions}).json()
    assert decision["model"] == "d"
    assert decision["answers"]["q"]["choice"] == "a"
    assert decision["answers"]["s"]["score"] == 0
    assert [r.path for r in fake_provider.requests] == ["/v1/chat/completions", "/v1/decisions"]
    assert fake_provider.requests[0].headers["authorization"] == "Bearer t"
    assert fake_provider.requests[1].json["state"] == "x"


def test_queue_then_responder(fake_provider: FakeProviderServer) -> None:
    fake_provider.enqueue(Reply(429, {"error": {"message": "slow"}}), chat_reply("second"))
    fake_provider.responder = lambda request: Reply(200, b"raw")
    url = f"{fake_provider.base_url}/chat/completions"
    assert httpx.post(url, json={}).status_code == 429
    assert httpx.post(url, json={}).json()["choices"][0]["message"]["content"] == "second"
    assert httpx.post(url, json={}).content == b"raw"


def test_delay_does_not_block_other_requests(fake_provider: FakeProviderServer) -> None:
    fake_provider.enqueue(Reply(200, {"slow": True}, delay_s=30))
    slow_started = threading.Event()

    def slow_call() -> None:
        slow_started.set()
        try:
            httpx.post(f"{fake_provider.base_url}/decisions", json={}, timeout=60)
        except httpx.HTTPError:
            pass  # dropped when the server stops

    thread = threading.Thread(target=slow_call, daemon=True)
    thread.start()
    slow_started.wait()
    while not fake_provider.requests:
        time.sleep(0.01)
    fast = httpx.post(f"{fake_provider.base_url}/chat/completions", json={}, timeout=10)
    assert fast.status_code == 200
    started = time.monotonic()
    fake_provider.stop()
    assert time.monotonic() - started < 10
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_unknown_path_is_404() -> None:
    with FakeProviderServer() as server:
        assert httpx.post(f"{server.base_url}/nope", json={}).status_code == 404
