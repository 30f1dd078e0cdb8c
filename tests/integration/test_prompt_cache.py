"""Prompt-cache markers (docs/providers.md "Prompt caching") through the real ``anthropic`` and ``bedrock``
transports, a decision-mode compaction against a fake provider on 127.0.0.1 (Bedrock: boto3 with
``endpoint_url`` = the fake, speaking Converse) that plays a prompt cache as the providers describe it: a
marked prefix is readable once the call that wrote it has answered, and every call that misses writes it.
Every batch's request carries one marker, at the end of the shared state the batches repeat; the batches
write it once and read it after; the cache reads and writes the provider reports are priced as billed."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import compactor_aws  # noqa: F401  (plugs the Bedrock transport into the registry)
from compactor import service
from compactor.budget import Deadline
from compactor.cost import CACHE_WRITE_PRICE_FACTOR, CACHED_INPUT_PRICE_FACTOR, RESPONSE_DECIMALS
from compactor.jsonutil import dense_dumps
from compactor.models import CompactRequest
from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
from compactor.providers.base import Offer
from compactor.providers.registry import transport_for
from compactor.router import Router
from compactor.transcripts import parse_transcript
from fakes.provider_server import (
    FakeProviderServer, RecordedRequest, Reply, anthropic_reply, chat_reply, converse_reply, default_answers)

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
TRANSCRIPT = CORPUS / "msa-v2-toolcalls_deepseek-chat_astroid-1978.json"
SHARED = ("guidance", "instructions", "recent_evidence")  # the preset's classify node's cache_prefix
PRICE_IN, PRICE_OUT = 3.0, 15.0
OUTPUT_TOKENS = 40


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def _tokens(text: str) -> int:
    return len(text.encode("utf-8")) // 4


class CachingProvider:
    """Answers decision prompts with valid answers; a marked prefix is read when a call that wrote it has
    answered, else written (taking a moment, so that concurrent misses all write). Keeps each call's usage."""

    def __init__(self, wire: str) -> None:
        self.wire = wire  # "anthropic" | "bedrock"
        self.seen: set[str] = set()
        self.lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []  # per call: its text blocks, marked blocks, system prompt, usage

    def user_blocks(self, request: RecordedRequest) -> list[Any]:
        content = request.json["messages"][0]["content"]
        return [content] if isinstance(content, str) else content

    def __call__(self, request: RecordedRequest) -> Reply:
        if self.wire == "anthropic":
            system = request.json["system"]
            blocks = self.user_blocks(request)
            texts = [block if isinstance(block, str) else block["text"] for block in blocks]
            marked = [i for i, block in enumerate(blocks) if isinstance(block, dict) and "cache_control" in block]
        else:
            system = request.json["system"][0]["text"]
            blocks = request.json["messages"][0]["content"]
            texts = [block["text"] for block in blocks if "text" in block]
            marked = [i - 1 for i, block in enumerate(blocks) if "cachePoint" in block]
        head = system + "".join(texts[:marked[0] + 1]) if marked else ""
        with self.lock:
            hit = head in self.seen
        if head and not hit:
            time.sleep(0.05)
            with self.lock:
                self.seen.add(head)
        cached = _tokens(head)
        fresh = _tokens(system + "".join(texts)) - cached
        read, write = (cached, 0) if hit else (0, cached)
        with self.lock:
            self.calls.append({"texts": texts, "marked": marked, "system": system, "fresh": fresh, "read": read,
                               "write": write})
        answer = json.dumps({"answers": default_answers(json.loads("".join(texts))["questions"])})
        if self.wire == "anthropic":
            return anthropic_reply(answer, input_tokens=fresh, output_tokens=OUTPUT_TOKENS,
                                   cache_read=read, cache_write=write)
        return converse_reply(answer, input_tokens=fresh, output_tokens=OUTPUT_TOKENS, cache_read=read,
                              cache_write=write)


def provider_for(fake: FakeProviderServer, wire: str) -> CachingProvider:
    caching = CachingProvider(wire)
    route = "/v1/messages" if wire == "anthropic" else "/converse"
    fake.responder = lambda request: caching(request) if request.path.endswith(route) else chat_reply("{}")
    return caching


def decider(fake: FakeProviderServer, wire: str, **observations: Any) -> Offer:
    if wire == "anthropic":
        return Offer(id="a/dec", provider="a", family="claude", model="claude-x", protocol="decisions",
                     transport="anthropic", base_url=fake.root_url, price_in=PRICE_IN, price_out=PRICE_OUT,
                     observations={"context": 1_000_000, **observations})
    return Offer(id="b/dec", provider="b", family="nova", model="us.amazon.nova-micro-v1:0", protocol="decisions",
                 transport="bedrock", base_url=fake.root_url, region="us-east-1", price_in=PRICE_IN,
                 price_out=PRICE_OUT, observations={"context": 1_000_000, **observations})


async def compact(fake: FakeProviderServer, offer: Offer) -> dict[str, Any]:
    summarizer = Offer(id="p/chat", provider="p", family="chat", model="chat", protocol="chat", transport="openai",
                       base_url=fake.base_url, price_in=0.0, price_out=0.0,
                       observations={"supports_json_mode": True, "context": 1_000_000})
    messages, fields = parse_transcript(TRANSCRIPT.read_text(encoding="utf-8"))
    request = CompactRequest.model_validate({**fields, "messages": messages,
                                             "decision_policy_ir": DEFAULT_DECISIONS_POLICY})
    status, body = await service.compact(request, deadline=Deadline.after_ms(60_000),
                                         router=Router([offer, summarizer], transport_for=transport_for))
    assert status == 200
    return body


@pytest.mark.parametrize("wire", ["anthropic", "bedrock"])
async def test_every_batch_marks_the_end_of_the_shared_state_and_cache_reads_are_priced_at_the_discount(
        fake_provider: FakeProviderServer, wire: str) -> None:
    caching = provider_for(fake_provider, wire)
    body = await compact(fake_provider, decider(fake_provider, wire))
    calls = caching.calls
    assert len(calls) >= 4
    texts = ["".join(call["texts"]) for call in calls]
    for call, text in zip(calls, texts, strict=True):
        assert call["marked"] == [0] and len(call["texts"]) == 2  # one marker, after the first text block
        state = json.loads(text)["state"]
        assert list(state)[:3] == list(SHARED)
        head = dense_dumps({"state": {key: state[key] for key in SHARED}})[:-2]
        assert call["texts"][0] == head  # the marker ends the shared state members, exactly
        assert call["system"] == calls[0]["system"] and call["texts"][0] == calls[0]["texts"][0]
    # The batches share nothing after the marker but the JSON that opens their own fragments.
    first_ids = [json.loads(text)["state"]["fragments"][0]["id"] for text in texts]
    assert os.path.commonprefix(texts) == calls[0]["texts"][0] + ',"fragments":[{"id":"' + os.path.commonprefix(first_ids)
    reads, writes = sum(call["read"] for call in calls), sum(call["write"] for call in calls)
    # The first call with the prefix went alone: one write, every other batch read it.
    assert writes == calls[0]["write"] == max(call["write"] for call in calls) > 0
    assert reads == (len(calls) - 1) * writes
    router = body["x_router"]
    assert router["tokens_cached"] == reads  # the summary calls report no cache
    expected = sum(call["fresh"] * PRICE_IN + call["read"] * PRICE_IN * CACHED_INPUT_PRICE_FACTOR
                   + call["write"] * PRICE_IN * CACHE_WRITE_PRICE_FACTOR + OUTPUT_TOKENS * PRICE_OUT
                   for call in calls) / 1e6
    assert router["cost_usd"] == pytest.approx(round(expected, RESPONSE_DECIMALS), abs=2 * 10 ** -RESPONSE_DECIMALS)
    full_price = sum((call["fresh"] + call["read"] + call["write"]) * PRICE_IN + OUTPUT_TOKENS * PRICE_OUT
                     for call in calls) / 1e6
    assert router["cost_usd"] < full_price


@pytest.mark.parametrize("wire", ["anthropic", "bedrock"])
@pytest.mark.parametrize("observations", [{"prompt_cache": False}, {"cache_min_tokens": 1_000_000}])
async def test_an_offer_that_does_not_cache_or_a_prefix_below_its_minimum_gets_no_marker(
        fake_provider: FakeProviderServer, wire: str, observations: dict[str, Any]) -> None:
    caching = provider_for(fake_provider, wire)
    await compact(fake_provider, decider(fake_provider, wire, **observations))
    assert caching.calls and all(call["marked"] == [] and len(call["texts"]) == 1 for call in caching.calls)
    assert all(call["read"] == call["write"] == 0 for call in caching.calls)
