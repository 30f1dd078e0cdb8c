"""BedrockTransport through real boto3 (signing, serialisation, error parsing) against a local HTTP
endpoint speaking the Converse REST shape (``endpoint_url`` = the fake provider)."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import compactor_aws  # noqa: F401  (plugs the AWS provider adapters into the core)
from compactor.catalog import parse_catalog
from compactor.providers.base import (
    AUTH_ERROR, BAD_REQUEST, BAD_RESPONSE, CONTEXT_OVERFLOW, NETWORK_ERROR, RATE_LIMIT, REASONING_EXHAUSTED, TIMEOUT,
    UPSTREAM_ERROR, ChatRequest, DecisionRequest, Offer, ProviderError,
)
from compactor.providers.registry import transport_for
from compactor.router import compute_cost
from compactor_aws import aws_session, background, bedrock
from compactor_aws.bedrock import BedrockTransport
from fakes.provider_server import FakeProviderServer, Reply, bedrock_error, converse_reply

MODEL = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
QUESTIONS = {"f1": {"type": "noul", "instructions": "Is it useful?"}}


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    # The container's session and clients are kept across calls: built in an earlier test (under moto's mock,
    # with its credentials), they would sign these tests' calls; and these tests' must not sign later tests'.
    aws_session.SESSION.reset()
    bedrock._bedrock_client.cache_clear()
    yield
    aws_session.SESSION.reset()
    bedrock._bedrock_client.cache_clear()


@pytest.fixture
def offer(fake_provider: FakeProviderServer) -> Offer:
    return Offer(id="bedrock/haiku", provider="bedrock", family="claude-haiku", model=MODEL, protocol="chat",
                 transport="bedrock", base_url=fake_provider.root_url, region="eu-west-1",
                 price_in=0.8, price_out=4.0)


def test_catalog_offer_is_served_by_the_registered_transport() -> None:
    catalog = parse_catalog({"offers": [{"id": "b", "provider": "bedrock", "family": "f", "model": MODEL,
                                         "protocol": "decisions", "transport": "bedrock", "region": "eu-west-1"}]})
    assert catalog.offers[0].region == "eu-west-1"
    assert isinstance(transport_for(catalog.offers[0]), BedrockTransport)


async def test_converse_request_is_signed_and_shaped(fake_provider: FakeProviderServer, offer: Offer) -> None:
    fake_provider.enqueue(converse_reply("summary", input_tokens=200, output_tokens=30, cache_read=800))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    response = await transport_for(offer).chat(offer, ChatRequest(messages, max_tokens=77), 10)
    sent = fake_provider.requests[0]
    assert sent.path == "/model/" + MODEL.replace(":", "%3A") + "/converse"
    authorization = sent.headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=testing/")
    assert "/eu-west-1/bedrock/aws4_request" in authorization  # signed for the offer's region
    assert sent.json == {"messages": [{"role": "user", "content": [{"text": "hello"}]}],
                         "system": [{"text": "Be brief."}], "inferenceConfig": {"maxTokens": 77}}
    assert response.text == "summary" and response.finish_reason == "stop"
    assert (response.tokens_in, response.tokens_out, response.tokens_cached) == (1000, 30, 800)
    cost, basis = compute_cost(offer, response, 6)
    assert basis == "computed"
    assert cost == pytest.approx(round((200 * 0.8 + 800 * 0.8 * 0.1 + 30 * 4.0) / 1e6, 6))


async def test_a_thinking_budget_is_sent_as_claudes_thinking_on_top_of_the_answer(
        fake_provider: FakeProviderServer, offer: Offer) -> None:
    # docs/providers.md "Reasoning models": Claude's extended thinking through Converse, priced as output
    fake_provider.enqueue(converse_reply("summary", reasoning="thinking it over", input_tokens=200, output_tokens=900))
    thinking = dataclasses.replace(offer, reasoning_budget_tokens=2048)
    response = await BedrockTransport().chat(thinking, ChatRequest([{"role": "user", "content": "x"}], max_tokens=77),
                                             10)
    sent = fake_provider.requests[0].json
    assert sent["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    assert sent["inferenceConfig"] == {"maxTokens": 77 + 2048}
    assert response.text == "summary" and response.tokens_reasoning is None
    assert compute_cost(thinking, response, 12) == (pytest.approx((200 * 0.8 + 900 * 4.0) / 1e6), "computed")


async def test_an_effort_is_sent_as_claudes_adaptive_thinking(fake_provider: FakeProviderServer, offer: Offer) -> None:
    # Before: refused at load ("bedrock offers take no reasoning_effort"); the budget, the only setting, is sent as
    # thinking.type "enabled", which Claude 4.7 and later refuse (docs/providers.md "Reasoning models").
    fake_provider.enqueue(converse_reply("summary", reasoning="thinking it over", output_tokens=900),
                          converse_reply("fine"))
    adaptive = dataclasses.replace(offer, model="us.anthropic.claude-opus-4-7", reasoning_effort="medium")
    response = await BedrockTransport().chat(adaptive, ChatRequest([{"role": "user", "content": "x"}], max_tokens=77),
                                             10)
    sent = fake_provider.requests[0].json
    assert sent["additionalModelRequestFields"] == {"thinking": {"type": "adaptive"}}
    assert sent["outputConfig"] == {"effort": "medium"}
    assert sent["inferenceConfig"] == {"maxTokens": 77 + 8192}
    assert response.text == "summary"  # the reasoning blocks are not the answer

    roomy = dataclasses.replace(adaptive, reasoning_effort="max", reasoning_budget_tokens=40000)
    await BedrockTransport().chat(roomy, ChatRequest([{"role": "user", "content": "x"}], max_tokens=77), 10)
    sent = fake_provider.requests[1].json
    assert (sent["additionalModelRequestFields"], sent["outputConfig"], sent["inferenceConfig"]) == \
        ({"thinking": {"type": "adaptive"}}, {"effort": "max"}, {"maxTokens": 77 + 40000})


async def test_an_answer_with_redacted_reasoning_is_read(fake_provider: FakeProviderServer, offer: Offer) -> None:
    # Before: Converse's redactedContent (encrypted reasoning, a blob boto3 reads as bytes) made the answer's
    # Unicode check raise "TypeError: Object of type bytes is not JSON serializable": a billed answer lost as an
    # upstream_error, on every call whose thinking Claude redacted.
    reply = converse_reply("summary", reasoning="thinking it over", output_tokens=900)
    reply.body["output"]["message"]["content"].insert(0, {"reasoningContent": {"redactedContent": "ZW5jcnlwdGVk"}})
    fake_provider.enqueue(reply)
    thinking = dataclasses.replace(offer, reasoning_budget_tokens=1024)
    response = await BedrockTransport().chat(thinking, ChatRequest([{"role": "user", "content": "x"}]), 10)
    assert response.text == "summary" and response.tokens_out == 900  # the reasoning is not the answer
    only_redacted = converse_reply("", stop_reason="max_tokens", output_tokens=1400)
    only_redacted.body["output"]["message"]["content"] = [{"reasoningContent": {"redactedContent": "ZW5j"}}]
    fake_provider.enqueue(only_redacted)
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().decide(dataclasses.replace(thinking, protocol="decisions"),
                                        DecisionRequest(state={"f1": "x"}, questions=QUESTIONS), 10)
    assert caught.value.kind == REASONING_EXHAUSTED and "1400 reasoning tokens" in caught.value.message


async def test_a_model_refusing_a_thinking_budget_says_what_to_change(fake_provider: FakeProviderServer,
                                                                      offer: Offer) -> None:
    fake_provider.enqueue(bedrock_error(400, "ValidationException", (
        'The model returned the following errors: "thinking.type.enabled" is not supported for this model. Use '
        '"thinking.type.adaptive" and "output_config.effort" to control thinking behavior.')))
    budgeted = dataclasses.replace(offer, model="us.anthropic.claude-opus-4-7", reasoning_budget_tokens=2048)
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().chat(budgeted, ChatRequest([{"role": "user", "content": "x"}]), 10)
    assert (caught.value.kind, caught.value.http_status) == (BAD_REQUEST, 400)
    assert caught.value.message.startswith(
        "model 'us.anthropic.claude-opus-4-7' takes adaptive thinking only, not extended thinking with a budget: in "
        "the catalog, replace \"reasoning_budget_tokens\": 2048 with \"reasoning_effort\" (low, medium, high, xhigh "
        "or max: adaptive thinking) in offer 'bedrock/haiku'; the provider said: ValidationException: The model")

    fake_provider.enqueue(bedrock_error(400, "ValidationException", (
        "The model returned the following errors: thinking: Input tag 'adaptive' found using 'type' does not match "
        "any of the expected tags: 'disabled', 'enabled'")))
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().chat(dataclasses.replace(offer, reasoning_effort="low"),
                                      ChatRequest([{"role": "user", "content": "x"}]), 10)
    assert caught.value.message.startswith(
        f"model '{MODEL}' does not take adaptive thinking: in the catalog, replace \"reasoning_effort\": \"low\" with "
        "\"reasoning_budget_tokens\" (1024 to 128000: extended thinking) in offer 'bedrock/haiku'")


async def test_a_decision_spent_on_thinking_says_so(fake_provider: FakeProviderServer, offer: Offer) -> None:
    fake_provider.enqueue(converse_reply("", reasoning="a long thought", stop_reason="max_tokens", output_tokens=1400))
    thinking = dataclasses.replace(offer, protocol="decisions", reasoning_budget_tokens=1024)
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().decide(thinking, DecisionRequest(state={"f1": "x"}, questions=QUESTIONS), 10)
    assert caught.value.kind == REASONING_EXHAUSTED
    assert caught.value.message == ("decision reply spent its whole output budget on reasoning (1400 reasoning "
                                    "tokens, no answer text; finish_reason length)")


async def test_max_tokens_stop_reads_as_length(fake_provider: FakeProviderServer, offer: Offer) -> None:
    fake_provider.enqueue(converse_reply("cut", stop_reason="max_tokens"))
    response = await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 10)
    assert response.finish_reason == "length"


@pytest.mark.parametrize(("stop_reason", "finish_reason"), [
    ("end_turn", "stop"), ("guardrail_intervened", "content_filter"), ("content_filtered", "content_filter"),
    ("model_context_window_exceeded", "length"),
    # a tool call Bedrock could not read: no answer either (it passed as a finished one)
    ("malformed_tool_use", "tool_calls"),
])
async def test_stop_reasons_read_as_finish_reasons(fake_provider: FakeProviderServer, offer: Offer, stop_reason: str,
                                                   finish_reason: str) -> None:
    fake_provider.enqueue(converse_reply("text", stop_reason=stop_reason))
    response = await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 10)
    assert response.finish_reason == finish_reason


async def test_a_malformed_model_output_is_a_bad_response(fake_provider: FakeProviderServer, offer: Offer) -> None:
    # Bedrock's own word that the model's output is broken: it was taken as a finished answer (a seal's summary).
    fake_provider.enqueue(converse_reply("{\"answers\": {\"f1\": ", stop_reason="malformed_model_output"))
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 10)
    assert caught.value.kind == BAD_RESPONSE and "malformed_model_output" in caught.value.message


@pytest.mark.parametrize(("reply", "kind"), [
    (bedrock_error(429, "ThrottlingException", "Too many requests, please wait"), RATE_LIMIT),
    (bedrock_error(400, "ValidationException", "The model returned the following errors: malformed input"),
     BAD_REQUEST),
    (bedrock_error(400, "ValidationException", "Input is too long for requested model. Too many tokens"),
     CONTEXT_OVERFLOW),
    # What Bedrock really says when the prompt exceeds the model's context (Claude, through Converse):
    (bedrock_error(400, "ValidationException", "Input is too long for requested model."), CONTEXT_OVERFLOW),
    (bedrock_error(400, "ValidationException",
                   "The model returned the following errors: Input is too long for requested model."),
     CONTEXT_OVERFLOW),
    (bedrock_error(403, "AccessDeniedException", "You don't have access to the model"), AUTH_ERROR),
    (bedrock_error(408, "ModelTimeoutException", "Model has timed out"), TIMEOUT),
    (bedrock_error(503, "ServiceUnavailableException", "unavailable"), UPSTREAM_ERROR),
    (Reply(200, {"stopReason": "end_turn"}), BAD_RESPONSE),
])
async def test_errors_map_onto_router_kinds(fake_provider: FakeProviderServer, offer: Offer, reply: Reply,
                                            kind: str) -> None:
    fake_provider.enqueue(reply)
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 10)
    assert caught.value.kind == kind
    assert len(fake_provider.requests) == 1  # no SDK retries: the router decides


async def test_text_utf8_cannot_carry_is_a_bad_response_and_errors_are_made_safe(
        fake_provider: FakeProviderServer, offer: Offer) -> None:
    # docs/reliability.md "Bounded answers": an escaped lone surrogate is no text (botocore parses it as one).
    fake_provider.enqueue(converse_reply("Summary \ud800 here."))
    fake_provider.enqueue(bedrock_error(503, "ServiceUnavailableException", "down \ud800"))
    for kind in (BAD_RESPONSE, UPSTREAM_ERROR):
        with pytest.raises(ProviderError) as caught:
            await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 10)
        assert caught.value.kind == kind
        caught.value.message.encode("utf-8")


async def test_retry_after_reaches_the_router(fake_provider: FakeProviderServer, offer: Offer) -> None:
    # docs/reliability.md "Polite retries": a re-issue waits at least the service's Retry-After.
    throttled = bedrock_error(429, "ThrottlingException", "Too many requests, please wait")
    throttled.headers["Retry-After"] = "7"
    fake_provider.enqueue(throttled)
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 10)
    assert (caught.value.kind, caught.value.retry_after_s) == (RATE_LIMIT, 7.0)


DEEP = b"[" * 100_000  # nested past the JSON parser's recursion limit: json.loads raises RecursionError


@pytest.mark.parametrize(("reply", "kind", "status", "retry_after_s"), [
    (Reply(429, DEEP, headers={"x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/",
                               "Retry-After": "3"}), RATE_LIMIT, 429, 3.0),
    (Reply(400, DEEP, headers={"x-amzn-ErrorType": "ValidationException:http://internal.amazon.com/"}),
     BAD_REQUEST, 400, None),
    (Reply(200, DEEP), BAD_RESPONSE, None, None),
    (Reply(200, b'{"output": {"message": {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", '
                b'"name": "n", "input": ' + DEEP), BAD_RESPONSE, None, None),
])
async def test_a_body_nested_too_deep_is_still_classified(fake_provider: FakeProviderServer, offer: Offer,
                                                          reply: Reply, kind: str, status: int | None,
                                                          retry_after_s: float | None) -> None:
    # botocore's json.loads raised RecursionError (it catches ValueError): every such answer was an unclassified
    # upstream_error, without the error's code, status or Retry-After (a ValidationException retried).
    fake_provider.enqueue(reply)
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 10)
    assert (caught.value.kind, caught.value.http_status, caught.value.retry_after_s) == (kind, status, retry_after_s)


async def test_an_answer_over_the_bound_is_a_bad_response_and_an_error_keeps_its_kind(
        fake_provider: FakeProviderServer, offer: Offer, monkeypatch: pytest.MonkeyPatch) -> None:
    # A Converse answer was read whole, however large (an endpoint base_url names that is not Bedrock's); the
    # HTTP transports' 8 MiB bound holds here too, and an error past it is read to the bound and keeps its kind.
    monkeypatch.setattr(bedrock, "ANSWER_MAX_BYTES", 1000)
    fake_provider.enqueue(Reply(200, json.dumps(converse_reply("x" * 2000).body).encode()))
    throttled = Reply(429, b'{"message": "Too many requests"}' + b" " * 2000, headers={
        "x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/", "Retry-After": "4"})
    fake_provider.enqueue(throttled, converse_reply("the next call"))
    for kind, retry_after_s, words in ((BAD_RESPONSE, None, "exceeds 1000 bytes"), (RATE_LIMIT, 4.0, "Too many")):
        with pytest.raises(ProviderError) as caught:
            await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 10)
        assert (caught.value.kind, caught.value.retry_after_s) == (kind, retry_after_s)
        assert words in caught.value.message
    response = await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "y"}]), 10)
    assert response.text == "the next call"


async def test_unreachable_endpoint_is_network_error(offer: Offer) -> None:
    closed = dataclasses.replace(offer, base_url="http://127.0.0.1:9")
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().chat(closed, ChatRequest([{"role": "user", "content": "x"}]), 5)
    assert caught.value.kind == NETWORK_ERROR


async def test_decisions_are_validated(fake_provider: FakeProviderServer, offer: Offer) -> None:
    decider = dataclasses.replace(offer, protocol="decisions")
    good = {"answers": {"f1": {"type": "noul", "noul": 0.25}}}
    fake_provider.enqueue(converse_reply(json.dumps(good), input_tokens=50, output_tokens=7),
                          converse_reply("Sure! Here it is: " + json.dumps(good)))
    request = DecisionRequest(state={"f1": "a"}, questions=QUESTIONS)
    response = await BedrockTransport().decide(decider, request, 10)
    assert response.answers == good["answers"] and response.tokens_in == 50
    assert '"answers"' in fake_provider.requests[0].json["system"][0]["text"]
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().decide(decider, request, 10)
    assert caught.value.kind == BAD_RESPONSE


LONG = "x" * 4000  # past the default 1024-token minimum by the router's estimate (3 bytes a token)


@pytest.mark.parametrize(("model", "observations", "marked"), [
    ("us.amazon.nova-micro-v1:0", {}, True),
    ("anthropic.claude-sonnet-4-20250514-v1:0", {}, True),
    # Bedrock refuses a cachePoint for models without prompt caching: none unless the offer says so.
    ("meta.llama3-1-70b-instruct-v1:0", {}, False),
    ("anthropic.claude-3-haiku-20240307-v1:0", {}, False),
    ("meta.llama3-1-70b-instruct-v1:0", {"prompt_cache": True}, True),
    ("us.amazon.nova-micro-v1:0", {"prompt_cache": False}, False),
])
async def test_a_cache_point_follows_the_shared_prefix_for_models_that_cache(
        fake_provider: FakeProviderServer, offer: Offer, model: str, observations: dict, marked: bool) -> None:
    decider = dataclasses.replace(offer, protocol="decisions", model=model, observations=observations)
    good = {"answers": {"f1": {"type": "noul", "noul": 0.25}}}
    fake_provider.enqueue(converse_reply(json.dumps(good), input_tokens=20, output_tokens=7, cache_write=1500))
    request = DecisionRequest(state={"rules": LONG, "f1": "a"}, questions=QUESTIONS, cache_prefix=("rules",))
    response = await BedrockTransport().decide(decider, request, 10)
    content = fake_provider.requests[0].json["messages"][0]["content"]
    texts = [block["text"] for block in content if "text" in block]
    assert json.loads("".join(texts)) == {"state": request.state, "questions": QUESTIONS}
    if marked:
        assert content[1] == {"cachePoint": {"type": "default"}} and len(content) == 3
        assert texts[0] == '{"state":{"rules":"' + LONG + '"'
    else:
        assert len(content) == 1
    # Cache writes are input too, priced at 125 % of price_in.
    assert (response.tokens_in, response.tokens_cached, response.tokens_cache_written) == (1520, None, 1500)
    cost, _ = compute_cost(decider, response, 12)
    assert cost == pytest.approx((20 * 0.8 + 1500 * 0.8 * 1.25 + 7 * 4.0) / 1e6)


async def test_a_short_prefix_gets_no_cache_point(fake_provider: FakeProviderServer, offer: Offer) -> None:
    decider = dataclasses.replace(offer, protocol="decisions", model="us.amazon.nova-micro-v1:0")
    fake_provider.enqueue(converse_reply(json.dumps({"answers": {"f1": {"type": "noul", "noul": 0.25}}})))
    request = DecisionRequest(state={"rules": "short", "f1": "a"}, questions=QUESTIONS, cache_prefix=("rules",))
    await BedrockTransport().decide(decider, request, 10)
    assert len(fake_provider.requests[0].json["messages"][0]["content"]) == 1


async def test_a_requests_calls_are_all_in_flight_at_once(fake_provider: FakeProviderServer, offer: Offer) -> None:
    """As many Converse calls as a container may have in flight (64) are in flight together: the provider answers
    none until all have arrived. On the event loop's default executor (``asyncio.to_thread``: ``min(32, cpu_count
    + 4)`` threads, 6 on a two-vCPU Lambda, never more than 32 whatever the machine) only the first few arrived,
    and the others waited for their threads."""
    calls = background.CALLS_IN_FLIGHT
    assert calls > 32  # more than any default executor has threads
    arrived = threading.Barrier(calls, timeout=20)

    def answer(request: Any) -> Reply:
        arrived.wait()  # raises BrokenBarrierError (the fake answers 599) unless every call is in flight
        return converse_reply("summary")

    fake_provider.responder = answer
    request = ChatRequest([{"role": "user", "content": "hello"}])
    transport = transport_for(offer)

    responses = await asyncio.gather(*(transport.chat(offer, request, 60) for _ in range(calls)))

    assert [response.text for response in responses] == ["summary"] * calls
    assert len(fake_provider.requests) == calls


async def test_an_abandoned_call_on_a_slow_body_ends_soon_after_its_deadline(
        fake_provider: FakeProviderServer, offer: Offer, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/providers.md "Abandoned calls": a body arriving a piece every second, each under the 5 s read
    timeout, held the call's thread until the whole body came (20 s here; forever for an endless drip). It is
    read within the call's time now: the thread ends at the first piece after it, and its connection closes."""
    ended: list[float] = []
    in_thread = background.in_thread

    async def traced(function: Any, /, *args: Any, **kwargs: Any) -> Any:
        def run() -> Any:
            try:
                return function(*args, **kwargs)
            finally:
                ended.append(time.monotonic())
        return await in_thread(run)

    monkeypatch.setattr(bedrock.background, "in_thread", traced)
    body = json.dumps(converse_reply("ok").body).encode()
    fake_provider.enqueue(Reply(200, body + b" " * 2000, trickle_s=20))
    fake_provider.enqueue(converse_reply("the next call"))
    started = time.monotonic()
    with pytest.raises(TimeoutError):  # the router gives up at the call's time
        await asyncio.wait_for(BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 1.5),
                               1.5)
    while not ended and time.monotonic() - started < 25:
        await asyncio.sleep(0.1)
    assert ended and ended[0] - started < 5
    response = await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "y"}]), 10)
    assert response.text == "the next call"  # on another connection: the half-read one was closed


async def test_a_body_read_past_the_deadline_is_a_timeout(fake_provider: FakeProviderServer, offer: Offer) -> None:
    body = json.dumps(converse_reply("ok").body).encode()
    fake_provider.enqueue(Reply(200, body + b" " * 2000, trickle_s=4))
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}]), 1)
    assert caught.value.kind == TIMEOUT


async def test_calls_in_threads_carry_the_callers_context_and_its_errors() -> None:
    variable: contextvars.ContextVar[str] = contextvars.ContextVar("segment", default="none")
    variable.set("the request's")

    def read(suffix: str) -> str:
        if suffix == "boom":
            raise ValueError("boom")
        return variable.get() + suffix

    assert await background.in_thread(read, " segment") == "the request's segment"
    with pytest.raises(ValueError, match="boom"):
        await background.in_thread(read, "boom")


async def test_a_request_botocore_refuses_to_send_is_an_unsent_bad_request(fake_provider: FakeProviderServer,
                                                                          offer: Offer) -> None:
    # botocore checks the parameters before it sends anything (ParamValidationError: here an output limit of 0,
    # below Converse's least maxTokens): it was an upstream_error that may have been billed, retried and counted
    # toward the breaker, though no request left.
    with pytest.raises(ProviderError) as caught:
        await BedrockTransport().chat(offer, ChatRequest([{"role": "user", "content": "x"}], max_tokens=0), 5)
    assert "ParamValidationError" in caught.value.message or "Parameter validation failed" in caught.value.message
    assert (caught.value.kind, caught.value.sent) == (BAD_REQUEST, False)
    assert fake_provider.requests == []
