"""``Retry-After`` over real HTTP from ``compactor serve`` (docs/behaviour.md#retry-after): the local server answers
the headers the function answers, for a flow that failed on a provider's wait and for the billed routes' 503 and 409."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from compactor.errors import RETRY_AFTER, RETRY_LATER_S
from compactor_cli import serve
from fakes.local_serve import API_CODE_DIR, running
from fakes.provider_server import FakeProviderServer, Reply, chat_reply

from ..billing.conftest import idempotency_store_down_once
from .test_flows_http import api  # noqa: F401 (fixture: serve over a catalog of the fake provider)

SUMMARY_POLICY = ["policy", ["meets_req"], ["neg", ["field", "price_in"]], ["argmax"], ["id"],
                  ["always", {"action": "next_candidate"}]]  # no re-issue: the provider's first answer ends the call
FLOW = ["flow", {"n0": {"kind": "input"},
                 "n1": {"kind": "llm", "system": "Summarise.", "policy": SUMMARY_POLICY, "inputs": ["n0"]},
                 "n2": {"kind": "output", "inputs": ["n1"]}}]


@pytest.mark.parametrize(("reply", "status", "wait"), [
    (Reply(429, {"error": {"message": "slow down"}}, headers={"retry-after-ms": "2500"}), 429, "3"),
    (Reply(503, {"error": {"message": "overloaded"}}, headers={"Retry-After": "4"}), 502, "4"),
    (Reply(429, {"error": {"message": "slow down"}}), 429, None),
])
def test_a_flow_failed_on_a_providers_wait_answers_it(api: str, fake_provider: FakeProviderServer,  # noqa: F811
                                                      reply: Reply, status: int, wait: str | None) -> None:
    fake_provider.responder = lambda request: reply

    response = httpx.post(f"{api}/flows", json={"flow_ir": FLOW, "flow_input": "text"}, timeout=30)

    assert response.status_code == status and response.json()["error"]["type"] == "router_error"
    assert response.headers.get(RETRY_AFTER) == wait


@pytest.fixture
def local_api() -> Iterator[str]:
    with running(serve.create_server(port=0, code_dir=API_CODE_DIR)) as url:
        yield url


def test_the_local_server_answers_when_to_retry_a_key(local_api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    idempotency_store_down_once(monkeypatch)
    sent = {"json": {"messages": [{"role": "user", "content": "Fix the bug."}]},
            "headers": {"Idempotency-Key": "local-when"}}

    unkept = httpx.post(f"{local_api}/compact", **sent, timeout=30)
    held = httpx.post(f"{local_api}/compact", **sent, timeout=30)

    assert (unkept.status_code, held.status_code) == (503, 409)
    assert unkept.headers.get(RETRY_AFTER) == held.headers.get(RETRY_AFTER) == str(RETRY_LATER_S)


def test_a_keyed_retry_after_the_wait_is_computed_again(api: str, fake_provider: FakeProviderServer) -> None:  # noqa: F811
    # The 429 was stored like any 4xx: the retry the header asked for, under the same key, was answered the stored
    # 429 for the key's 24 h, never computed again.
    replies = [Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "1"}), chat_reply("done")]
    fake_provider.responder = lambda request: replies.pop(0)
    sent = {"json": {"flow_ir": FLOW, "flow_input": "text"}, "headers": {"Idempotency-Key": "flow-wait"},
            "timeout": 30}

    limited = httpx.post(f"{api}/flows", **sent)
    retried = httpx.post(f"{api}/flows", **sent)
    replayed = httpx.post(f"{api}/flows", **sent)

    assert (limited.status_code, limited.headers.get(RETRY_AFTER)) == (429, "1")
    assert retried.status_code == 200 and retried.json()["output"] == "done"
    assert "Idempotent-Replayed" not in retried.headers and replayed.headers.get("Idempotent-Replayed") == "true"
    assert replayed.content == retried.content and replies == []
