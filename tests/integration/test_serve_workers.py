"""``compactor serve`` with worker instances (``workers=N``): concurrent requests are answered
concurrently, whatever their ``Idempotency-Key``, and what one caller's retries rely on (idempotent
replay, the usage ledger) still holds across instances. No timing is asserted: overlap is proven by a barrier the fake provider waits on."""

from __future__ import annotations

import json
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from compactor.catalog import reset_catalog_cache
from compactor.container import reset_router
from compactor_cli import serve
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply

from fakes.local_serve import REPO, running

SUMMARY = "The agent tried several fixes of the parser."
KEY_ENV = "SERVE_WORKERS_TEST_KEY"


def messages(tag: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Fix the parser ({tag})."}] + [
        {"role": "assistant", "content": f"{tag} step {i}: " + "tried something " * 40} for i in range(10)]


@pytest.fixture
def catalog_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Point the server's catalog at one chat offer of ``provider`` (workers inherit the environment)."""
    def configure(provider: FakeProviderServer) -> None:
        catalog = tmp_path / "catalog.json"
        catalog.write_text(json.dumps({"offers": [{
            "id": "fake/summarizer", "provider": "fake", "family": "m", "model": "m", "protocol": "chat",
            "transport": "openai", "base_url": provider.base_url, "api_key_env": KEY_ENV,
            "price_in": 1.0, "price_out": 2.0, "supports_json_mode": True}]}))
        monkeypatch.setenv(KEY_ENV, "sk-local")
        monkeypatch.setenv("COMPACTOR_CATALOG", str(catalog))
        reset_catalog_cache()
        reset_router()

    yield configure  # tests/conftest.py restores the environment and drops the cached catalog and router


def overlapping_responder() -> Callable[[RecordedRequest], Reply]:
    """A provider whose model call answers only once another request's model call has arrived too: run one
    request after the other and the first call fails when the barrier gives up."""
    both_in_flight = threading.Barrier(2)

    def responder(request: RecordedRequest) -> Reply:
        try:
            both_in_flight.wait(timeout=60)
        except threading.BrokenBarrierError:
            return Reply(500, {"error": {"message": "the two requests did not overlap"}})
        return chat_reply(SUMMARY)

    return responder


def post_at_once(url: str, tags: list[str], *, keyed: bool = False) -> list[httpx.Response]:
    """One ``/compact`` request per tag (its messages named by the tag; with ``keyed``, the tag is also its
    ``Idempotency-Key``), all sent at the same time."""
    def post(tag: str) -> httpx.Response:
        return httpx.post(f"{url}/compact", json={"messages": messages(tag), "keep_recent": 2},
                          headers={"Idempotency-Key": tag} if keyed else None, timeout=120)

    with ThreadPoolExecutor(max_workers=len(tags)) as clients:
        return list(clients.map(post, tags))


def test_two_slow_requests_are_answered_at_the_same_time_and_both_are_in_the_one_ledger(catalog_of) -> None:
    with FakeProviderServer() as provider:
        provider.responder = overlapping_responder()
        catalog_of(provider)
        with running(serve.create_server(port=0, code_dir=REPO / "functions" / "compact", workers=2)) as url:
            answers = post_at_once(url, ["first", "second"])
            usage = httpx.get(f"{url}/usage", timeout=60).json()  # one instance: both calls are there

    for answer in answers:
        assert answer.status_code == 200
        body = answer.json()
        assert body["compacted"] is True
        assert SUMMARY in json.dumps(body["messages"])
    assert len(provider.requests) == 2
    assert [day["calls"] for day in usage["days"]] == [2]


def keys_on_one_instance(count: int, instances: int) -> list[str]:
    """``count`` keys that the former routing (crc32 of the key modulo the instances) sent to one instance."""
    keys = [f"k-{n}" for n in range(100)]
    return [key for key in keys if zlib.crc32(key.encode()) % instances == 0][:count]


def test_keyed_requests_of_different_keys_run_at_once_whatever_their_keys(catalog_of) -> None:
    """Keys do not pin requests to an instance: two keys the former routing put on one instance (where
    the second waited for the first while the other instance idled) are in flight at the same time."""
    keys = keys_on_one_instance(2, 2)
    with FakeProviderServer() as provider:
        provider.responder = overlapping_responder()
        catalog_of(provider)
        with running(serve.create_server(port=0, code_dir=REPO / "functions" / "compact", workers=2)) as url:
            answers = post_at_once(url, keys, keyed=True)

    assert [answer.status_code for answer in answers] == [200, 200]
    assert all(SUMMARY in answer.text for answer in answers)
    assert len(provider.requests) == 2


def last_used(pool: serve.WorkerPool) -> int:
    """The instance given the latest call."""
    return max(range(len(pool._used)), key=lambda index: pool._used[index])


def test_a_key_s_record_holds_on_every_instance(catalog_of) -> None:
    """While a key's first request runs on one instance, its retry on the other gets 409 and the same key
    with another body 422; once it is answered, its retry on the other instance is replayed, not computed."""
    first_call_arrived, release = threading.Event(), threading.Event()

    def responder(request: RecordedRequest) -> Reply:
        first_call_arrived.set()
        release.wait(timeout=60)
        return chat_reply(SUMMARY)

    body = {"messages": messages("retried"), "keep_recent": 2}
    other_body = {"messages": messages("another"), "keep_recent": 2}
    headers = {"Idempotency-Key": "retry-1"}
    with FakeProviderServer() as provider:
        provider.responder = responder
        catalog_of(provider)
        server = serve.create_server(port=0, code_dir=REPO / "functions" / "compact", workers=2)
        pool = server.instances
        assert isinstance(pool, serve.WorkerPool)
        with running(server) as url:
            with ThreadPoolExecutor(max_workers=1) as clients:
                first = clients.submit(httpx.post, f"{url}/compact", json=body, headers=headers, timeout=120)
                assert first_call_arrived.wait(timeout=60)
                computing = last_used(pool)
                in_progress = httpx.post(f"{url}/compact", json=body, headers=headers, timeout=120)
                assert last_used(pool) != computing  # answered by the other instance, while the first runs
                reused_in_flight = httpx.post(f"{url}/compact", json=other_body, headers=headers, timeout=120)
                assert last_used(pool) != computing
                release.set()
                first_answer = first.result()
            # Both idle now: the retry goes to the one used last, the instance that did not compute.
            replay = httpx.post(f"{url}/compact", json=body, headers=headers, timeout=120)
            assert last_used(pool) != computing
            reused = httpx.post(f"{url}/compact", json=other_body, headers=headers, timeout=120)
            usage = httpx.get(f"{url}/usage", timeout=60).json()

    assert first_answer.status_code == 200
    assert "Idempotent-Replayed" not in first_answer.headers
    assert in_progress.status_code == 409
    assert in_progress.json()["error"]["code"] == "idempotency_in_progress"
    assert reused_in_flight.status_code == 422
    assert reused_in_flight.json()["error"]["code"] == "idempotency_key_reused"
    assert replay.status_code == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.content == first_answer.content
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert len(provider.requests) == 1
    assert [day["calls"] for day in usage["days"]] == [1]  # billed once, though two instances answered it


def test_the_docs_page_is_served_with_worker_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    # The page read the handler module of the server's own process, which only the instances import: a
    # `compactor serve` (workers by default) closed the connection on GET /docs without an answer.
    monkeypatch.delitem(sys.modules, "compact", raising=False)  # as in the process `compactor serve` runs in
    with running(serve.create_server(port=0, code_dir=REPO / "functions" / "compact", workers=1)) as url:
        response = httpx.get(url.removesuffix("/v1") + "/docs", timeout=60)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert "Compactor API" in response.text  # the document, inlined in the page
    assert "compact" not in sys.modules


def test_workers_must_be_positive() -> None:
    from compactor_cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--workers", "0"])
    assert build_parser().parse_args(["serve"]).workers == serve.DEFAULT_WORKERS
