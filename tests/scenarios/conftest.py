"""End-to-end scenarios: ``compactor serve`` in-process, a catalog of HTTP offers pointing at the fake
provider on 127.0.0.1, and real HTTP POSTs to ``/v1/compact``.

The :class:`Script` answers decisions per fragment id and summaries per item id, so each test states
only what differs from the happy path (every fragment ``summarize``, every summary ``Evidence <id>``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from compactor.catalog import reset_catalog_cache
from compactor.compaction import preparation
from compactor_cli import serve
from compactor.container import reset_router
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply, decision_reply

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "SCENARIO_PROVIDER_KEY"
SECRET = "sk-scenario-0123456789abcdef"
OMIT = object()  # a summary responder returning this leaves the id out of its answer

# The preset's policy shape; any admissible policy switches on decision mode.
DECISION_POLICY = ["policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
                   ["top_k", 4, ["argmax"]], ["id"], ["always", {"action": "next_candidate"}]]

DECIDER_PRICES = (0.5, 2.0)  # USD per million tokens
SUMMARIZER_PRICES = (3.0, 15.0)
DECISION_TOKENS = (20, 4)  # fake decision_reply defaults
CHAT_TOKENS = (10, 5)  # fake chat_reply defaults


def decision_cost() -> float:
    return DECISION_TOKENS[0] / 1e6 * DECIDER_PRICES[0] + DECISION_TOKENS[1] / 1e6 * DECIDER_PRICES[1]


def chat_cost(prices: tuple[float, float] = SUMMARIZER_PRICES, tokens: tuple[int, int] = CHAT_TOKENS) -> float:
    return tokens[0] / 1e6 * prices[0] + tokens[1] / 1e6 * prices[1]


def offer(offer_id: str, protocol: str, base_url: str, prices: tuple[float | None, float | None],
          **extra: Any) -> dict[str, Any]:
    provider, family = offer_id.split("/")
    return {"id": offer_id, "provider": provider, "family": family, "model": f"{family}-model",
            "protocol": protocol, "transport": "decisions" if protocol == "decisions" else "openai",
            "base_url": base_url, "api_key_env": KEY_ENV, "price_in": prices[0], "price_out": prices[1],
            "context": 200_000, "supports_json_mode": protocol == "chat", **extra}


def default_offers(base_url: str) -> list[dict[str, Any]]:
    """One native decisions offer and one JSON-capable OpenAI chat offer."""
    return [offer("acme/decider", "decisions", base_url, DECIDER_PRICES),
            offer("acme/summarizer", "chat", base_url, SUMMARIZER_PRICES)]


@dataclass
class Script:
    """Answers the fake provider's requests by content.

    * decisions: ``choices[fragment_id]`` or ``default_choice``; ``decision_reply_for`` (if set)
      replaces the whole reply.
    * summaries (JSON-mode chat): ``summary_for(id, item)`` → value, or :data:`OMIT`; ``extra``
      keys are added to every summary object; ``summary_reply_for`` replaces the whole reply.
    * plain chat (legacy seal): ``seal_text``.
    * ``delay_for(request)`` → seconds to wait before answering.
    """

    choices: dict[str, str] = field(default_factory=dict)
    default_choice: str = "summarize"
    summary_for: Callable[[str, Any], Any] = lambda fid, item: f"Evidence {fid}"
    extra: dict[str, Any] = field(default_factory=dict)
    decision_reply_for: Callable[[dict[str, Any]], Reply] | None = None
    summary_reply_for: Callable[[dict[str, Any]], Reply] | None = None
    seal_text: str = "Sealed summary."
    delay_for: Callable[[RecordedRequest], float] = lambda request: 0.0

    def __call__(self, request: RecordedRequest) -> Reply:
        reply = self._reply(request)
        reply.delay_s = self.delay_for(request)
        return reply

    def _reply(self, request: RecordedRequest) -> Reply:
        body = request.json
        if request.path.endswith("/decisions"):
            if self.decision_reply_for is not None:
                return self.decision_reply_for(body)
            answers = {fid: {"type": "choice", "choice": self.choices.get(fid, self.default_choice),
                             "confidence": 0.9} for fid in body["questions"]}
            return decision_reply(answers, model=body["model"])
        if body.get("response_format") != {"type": "json_object"}:
            return chat_reply(self.seal_text, model=body["model"])
        if self.summary_reply_for is not None:
            return self.summary_reply_for(body)
        items = json.loads(body["messages"][-1]["content"])
        summaries = {fid: self.summary_for(fid, item) for fid, item in items.items()}
        summaries = {fid: value for fid, value in summaries.items() if value is not OMIT}
        return chat_reply(json.dumps({**summaries, **self.extra}), model=body["model"])


class Stack:
    """The running server, the fake provider behind it and helpers to call and inspect them."""

    def __init__(self, url: str, fake: FakeProviderServer, catalog_path: Path) -> None:
        self.url = url
        self.fake = fake
        self.catalog_path = catalog_path
        self.script = Script()
        fake.responder = self.script

    def use_offers(self, offers: list[dict[str, Any]]) -> None:
        """Replace the catalog (takes effect on the next request: the router is rebuilt)."""
        self.catalog_path.write_text(json.dumps({"offers": offers, "policy_envelope": None}), encoding="utf-8")
        reset_catalog_cache()
        reset_router()

    def post(self, body: dict[str, Any] | bytes, timeout: float = 30.0) -> httpx.Response:
        if isinstance(body, bytes):
            response = httpx.post(f"{self.url}/compact", content=body,
                                  headers={"Content-Type": "application/json"}, timeout=timeout)
        else:
            response = httpx.post(f"{self.url}/compact", json=body, timeout=timeout)
        assert SECRET not in response.text  # docs/behaviour.md#catalog-and-transports
        return response

    def compact(self, messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        """A decision-mode request that must answer 200; returns the body."""
        fields.setdefault("decision_policy_ir", DECISION_POLICY)
        response = self.post({"messages": messages, **fields})
        assert response.status_code == 200, response.text
        return response.json()

    def requests(self, kind: str) -> list[dict[str, Any]]:
        """Recorded request bodies: ``decisions``, ``summaries`` (JSON-mode chat) or ``chat`` (any chat)."""
        out = []
        for request in self.fake.requests:
            assert request.headers.get("authorization") == f"Bearer {SECRET}"
            if kind == "decisions" and request.path.endswith("/decisions"):
                out.append(request.json)
            elif kind != "decisions" and request.path.endswith("/chat/completions"):
                if kind == "chat" or request.json.get("response_format") == {"type": "json_object"}:
                    out.append(request.json)
        return out


@pytest.fixture
def provider() -> Iterator[FakeProviderServer]:
    """The shared fake provider (its listen backlog takes 32 concurrent batches)."""
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: FakeProviderServer,
          batches_of_eight: None) -> Iterator[Stack]:
    # The scenarios' transcripts are built for batches of 8 fragments and evidence excerpted over 2,000
    # characters to its first and last 1,000 (their premises: several batches, whole 1,500-character
    # fragments that may be archived); the current sizes are held by tests/unit/compaction and the goldens.
    for name, value in (("EVIDENCE_EXCERPT_OVER", 2000), ("EVIDENCE_HALF", 1000), ("_EVIDENCE_KEEP", 1001)):
        monkeypatch.setattr(preparation, name, value)
    catalog_path = tmp_path / "catalog.json"
    monkeypatch.setenv("COMPACTOR_CATALOG", str(catalog_path))
    monkeypatch.setenv(KEY_ENV, SECRET)
    server = serve.create_server(port=0, code_dir=REPO / "functions" / "compact")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    built = Stack(server.url.rstrip("/"), provider, catalog_path)
    built.use_offers(default_offers(provider.base_url))
    try:
        yield built
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        reset_catalog_cache()
        reset_router()
