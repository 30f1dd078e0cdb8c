"""OpenAITransport against the fake provider: wire body, parsing, error kinds, secrecy."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import httpx
import pytest
import respx

from compactor.providers.base import ChatRequest, DecisionRequest, Offer, ProviderError
from compactor.providers import openai, reasoning
from compactor.providers.openai import CHAT_RESPONSE_MAX_BYTES, OpenAITransport
from compactor.providers.turns import JSON_INSTRUCTION
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply

TRANSPORT = OpenAITransport()
MESSAGES = [{"role": "user", "content": "hi"}]
JSON_MESSAGES = [{"role": "user", "content": "Answer with a JSON object."}]


async def failure(offer: Offer, request: ChatRequest | None = None, timeout_s: float = 10) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await TRANSPORT.chat(offer, request or ChatRequest(MESSAGES), timeout_s)
    return caught.value


async def test_success_body_headers_and_usage(fake_provider: FakeProviderServer, chat_offer: Offer,
                                              api_key: str) -> None:
    fake_provider.enqueue(chat_reply("hello", model="served-1", prompt_tokens=7, completion_tokens=3,
                                     cached_tokens=2, cost=0.00125))
    response = await TRANSPORT.chat(chat_offer, ChatRequest(MESSAGES, max_tokens=64), 10)
    assert response.text == "hello"
    assert response.finish_reason == "stop"
    assert response.served_model_id == "served-1"
    assert (response.tokens_in, response.tokens_out, response.tokens_total, response.tokens_cached) == (7, 3, 10, 2)
    assert response.cost_reported == pytest.approx(0.00125)
    assert response.tool_calls is None
    sent = fake_provider.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.json == {"model": "fake-chat-1", "messages": MESSAGES, "max_tokens": 64}
    assert sent.headers["authorization"] == f"Bearer {api_key}"
    assert sent.headers["content-type"] == "application/json"


def reasoning_model(request: RecordedRequest) -> Reply:
    """OpenAI as it answers for its reasoning models (o-series, gpt-5): ``max_tokens`` is refused."""
    if "max_tokens" in request.json:
        return Reply(400, {"error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                       "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}})
    return chat_reply('{"answers": {}}', prompt_tokens=40, completion_tokens=300)


async def test_a_model_refusing_max_tokens_gets_max_completion_tokens(
        fake_provider: FakeProviderServer, chat_offer: Offer, monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/providers.md: every call with an output limit to gpt-5 or an o-series model was a 400 bad_request,
    # so no node using such an offer ever had an answer.
    monkeypatch.setattr(reasoning, "_FOUND", set())
    fake_provider.responder = reasoning_model
    for _ in range(2):
        response = await TRANSPORT.chat(chat_offer, ChatRequest(JSON_MESSAGES, max_tokens=512, json_mode=True), 10)
        assert (response.text, response.tokens_out) == ('{"answers": {}}', 300)
    sent = [request.json for request in fake_provider.requests]
    # refused once, then asked as the model wants, with room for its reasoning at OpenAI's default effort
    # (docs/providers.md "Reasoning models"): max_completion_tokens counts the hidden reasoning too
    assert [("max_tokens" in body, body.get("max_completion_tokens")) for body in sent] == \
        [(True, None), (False, 512 + 8192), (False, 512 + 8192)]
    assert all(body["messages"] == JSON_MESSAGES and body["response_format"] == {"type": "json_object"}
               for body in sent)

    # another model of the same server is asked as before; a request without a limit is sent as it is
    other = dataclasses.replace(chat_offer, model="gpt-4.1-mini")
    fake_provider.responder = None
    await TRANSPORT.chat(other, ChatRequest(MESSAGES, max_tokens=64), 10)
    await TRANSPORT.chat(chat_offer, ChatRequest(MESSAGES), 10)
    assert fake_provider.requests[3].json["max_tokens"] == 64
    assert "max_completion_tokens" not in fake_provider.requests[4].json


async def test_calls_in_flight_when_max_tokens_is_refused_are_all_sent_again(
        fake_provider: FakeProviderServer, chat_offer: Offer, monkeypatch: pytest.MonkeyPatch) -> None:
    # A request's batches go at once: each of them is refused before any learns the model's wish.
    monkeypatch.setattr(reasoning, "_FOUND", set())
    refusal = reasoning_model(RecordedRequest("POST", "/v1/chat/completions", {}, b"", {"max_tokens": 1}))
    fake_provider.enqueue(*[dataclasses.replace(refusal, delay_s=0.2 * (i + 1)) for i in range(3)])
    fake_provider.responder = reasoning_model
    calls = [TRANSPORT.chat(chat_offer, ChatRequest(MESSAGES, max_tokens=100), 10) for _ in range(3)]
    assert [response.tokens_out for response in await asyncio.gather(*calls)] == [300, 300, 300]
    assert len(fake_provider.requests) == 6


async def test_other_400s_are_not_sent_again(fake_provider: FakeProviderServer, chat_offer: Offer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reasoning, "_FOUND", set())
    fake_provider.enqueue(Reply(400, {"error": {"message": "max_tokens is too large: 99999999. This model supports "
                                                           "at most 16384 completion tokens", "param": "max_tokens"}}))
    error = await failure(chat_offer, ChatRequest(MESSAGES, max_tokens=99_999_999))
    assert (error.kind, len(fake_provider.requests)) == ("bad_request", 1)


@pytest.mark.parametrize("root", ["/openai/v1?api-version=preview", "/openai/v1/?api-version=preview"])
async def test_a_query_in_base_url_stays_after_the_path(fake_provider: FakeProviderServer, chat_offer: Offer,
                                                        root: str) -> None:
    # Azure OpenAI (and some gateways) take parameters in the query: the path was appended after the query, so
    # the call went to the API root with ``api-version=preview/chat/completions`` and every call failed.
    offer = dataclasses.replace(chat_offer, base_url=fake_provider.root_url + root)
    response = await TRANSPORT.chat(offer, ChatRequest(MESSAGES), 10)
    assert response.text == "ok"
    assert fake_provider.requests[0].path == "/openai/v1/chat/completions?api-version=preview"


async def test_azure_openais_deployment_path_sends_the_key_as_api_key(fake_provider: FakeProviderServer,
                                                                        chat_offer: Offer, api_key: str) -> None:
    # Azure OpenAI's deployments API takes a key only in ``api-key``: sent as ``Authorization: Bearer`` (which it
    # reads as a Microsoft Entra token) every call was a 401.
    offer = dataclasses.replace(chat_offer, base_url=fake_provider.root_url + "/openai/deployments/gpt-4o-mini"
                                                                              "?api-version=2024-10-21")
    assert (await TRANSPORT.chat(offer, ChatRequest(MESSAGES), 10)).text == "ok"
    sent = fake_provider.requests[0]
    assert sent.path == "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21"
    assert sent.headers["api-key"] == api_key and "authorization" not in sent.headers


@pytest.mark.parametrize(("base_url", "key", "header"), [
    ("https://res.openai.azure.com/openai/v1?api-version=preview", "0123456789abcdef0123456789abcdef", "api-key"),
    ("https://res.cognitiveservices.azure.com/openai/deployments/d?api-version=2024-10-21", "k" * 32, "api-key"),
    # a Microsoft Entra access token is a bearer token, as the Azure SDKs send it
    ("https://res.openai.azure.com/openai/deployments/d?api-version=2024-10-21", "eyJhbGciOi.eyJhdWQiOi.c2ln",
     "authorization"),
    ("https://api.openai.com/v1", "sk-0123456789abcdef", "authorization"),
    ("https://gateway.example/v1?u=res.openai.azure.com", "sk-0123456789abcdef", "authorization"),
])
async def test_the_key_header_follows_the_api(chat_offer: Offer, monkeypatch: pytest.MonkeyPatch, base_url: str,
                                             key: str, header: str) -> None:
    monkeypatch.setenv(chat_offer.api_key_env, key)
    offer = dataclasses.replace(chat_offer, base_url=base_url)
    root, _, query = base_url.partition("?")
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(f"{root.rstrip('/')}/chat/completions" + (f"?{query}" if query else "")).mock(
            return_value=httpx.Response(200, json=chat_reply("ok").body))
        assert (await TRANSPORT.chat(offer, ChatRequest(MESSAGES), 10)).text == "ok"
    sent = route.calls[0].request.headers
    assert sent[header] == (key if header == "api-key" else f"Bearer {key}")
    assert ("authorization" if header == "api-key" else "api-key") not in sent


async def test_json_mode_sets_response_format(fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    response = await TRANSPORT.chat(chat_offer, ChatRequest(MESSAGES, json_mode=True), 10)
    assert response.text == "{}"
    assert fake_provider.requests[0].json["response_format"] == {"type": "json_object"}
    assert "max_tokens" not in fake_provider.requests[0].json


@pytest.mark.parametrize(("messages", "instructed"), [
    (MESSAGES, True),
    ([{"role": "system", "content": "Summarise as an object with a 'summary' key."}, *MESSAGES], True),
    (JSON_MESSAGES, False),
    ([{"role": "user", "content": [{"type": "text", "text": "Reply in json"}]}], False),
])
async def test_json_mode_says_json_when_the_messages_do_not(fake_provider: FakeProviderServer, chat_offer: Offer,
                                                           messages: list, instructed: bool) -> None:
    # OpenAI refuses response_format json_object for messages that never say "json" (a 400): a JSON llm node whose
    # prompt asked for "an object" failed every call on OpenAI, and passed on Anthropic and Bedrock, whose
    # transports always add the instruction.
    await TRANSPORT.chat(chat_offer, ChatRequest(messages, json_mode=True), 10)
    await TRANSPORT.chat(chat_offer, ChatRequest(messages), 10)
    json_body, plain_body = (request.json for request in fake_provider.requests)
    assert json_body["messages"] == ([{"role": "system", "content": JSON_INSTRUCTION}] if instructed else []) + messages
    assert plain_body["messages"] == messages


async def test_no_cost_reported_and_tool_calls(fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
    fake_provider.enqueue(chat_reply(None, finish_reason="tool_calls", tool_calls=[call]))
    response = await TRANSPORT.chat(chat_offer, ChatRequest(MESSAGES), 10)
    assert response.text is None
    assert response.tool_calls == [call]
    assert response.finish_reason == "tool_calls"
    assert response.cost_reported is None
    assert response.tokens_cached is None


@pytest.mark.parametrize(("content", "refusal", "finish_reason"), [
    (None, "I'm sorry, I can't assist with that request.", "content_filter"),
    ("", "I'm sorry, I can't assist with that request.", "content_filter"),
    ("ok", None, "stop"),
    ("ok", "", "stop"),  # servers that always send the member send it empty
])
async def test_a_refusal_is_no_answer(fake_provider: FakeProviderServer, chat_offer: Offer, content: str | None,
                                     refusal: str | None, finish_reason: str) -> None:
    # OpenAI's refusal: content null, a refusal string, finish_reason "stop". It read as a finished, empty answer
    # (the seal's reason no_summary, a text llm node's empty output); it is now refused (finish_reason content_filter).
    reply = chat_reply(content)
    reply.body["choices"][0]["message"]["refusal"] = refusal
    fake_provider.enqueue(reply)
    response = await TRANSPORT.chat(chat_offer, ChatRequest(MESSAGES), 10)
    assert (response.text, response.finish_reason) == (content, finish_reason)
    assert (response.tokens_in, response.tokens_out) == (10, 5)  # billed: its usage is kept


async def test_offer_without_key_env_sends_no_authorization(fake_provider: FakeProviderServer,
                                                            chat_offer: Offer) -> None:
    await TRANSPORT.chat(dataclasses.replace(chat_offer, api_key_env=None), ChatRequest(MESSAGES), 10)
    assert "authorization" not in fake_provider.requests[0].headers


async def test_missing_key_is_auth_error_naming_the_variable(fake_provider: FakeProviderServer, chat_offer: Offer,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(chat_offer.api_key_env)
    error = await failure(chat_offer)
    assert error.kind == "auth_error"
    assert chat_offer.api_key_env in error.detail
    assert fake_provider.requests == []


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (429, "Rate limit reached", "rate_limit"),
        (401, "Unauthorized", "auth_error"),
        (403, "Forbidden", "auth_error"),
        (400, "This model's maximum context length is 8192 tokens", "context_overflow"),
        (413, "Request too large: too many tokens", "context_overflow"),
        (422, "context_length_exceeded", "context_overflow"),
        (400, "Invalid value for messages[0].role", "bad_request"),
        (404, "No such model", "bad_request"),
        (500, "Internal error", "upstream_error"),
        (503, "Overloaded", "upstream_error"),
        # a gateway's or proxy's timeout is a timeout, not a request the provider refused
        (408, "Your request timed out", "timeout"),
        # OpenRouter: the account has no credits left; no other request to that account passes either
        (402, "Insufficient credits. Add more using https://openrouter.ai/settings/credits", "auth_error"),
    ],
)
async def test_http_error_kinds(fake_provider: FakeProviderServer, chat_offer: Offer, status: int, message: str,
                                kind: str) -> None:
    fake_provider.enqueue(Reply(status, {"error": {"message": message}}))
    error = await failure(chat_offer)
    assert (error.kind, error.http_status) == (kind, status)
    assert message in error.message


async def test_a_429_for_an_account_without_credit_is_not_a_rate_limit(fake_provider: FakeProviderServer,
                                                                        chat_offer: Offer) -> None:
    # OpenAI's answer when the account has no credit: waiting does not help, so no retry and no backoff.
    fake_provider.enqueue(Reply(429, {"error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}))
    fake_provider.enqueue(Reply(429, {"error": {"message": "Rate limit reached for gpt-4.1-mini on tokens per min",
                                                "type": "tokens", "code": "rate_limit_exceeded"}}))
    assert [(error.kind, error.http_status) for error in [await failure(chat_offer), await failure(chat_offer)]] \
        == [("auth_error", 429), ("rate_limit", 429)]


# JSON nested past the parser's recursion limit: ``json.loads`` raises RecursionError, not ValueError.
DEEP = b"[" * 100_000


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (429, DEEP, "rate_limit"),
        (400, DEEP, "bad_request"),
        (401, DEEP, "auth_error"),
        (503, DEEP, "upstream_error"),
        # the out-of-credit check and the max_tokens refusal look into the error object of such a body too
        (429, b'{"error": {"code": "insufficient_quota", "x": ' + DEEP, "rate_limit"),
        (400, b'{"error": {"param": "max_tokens", "message": "max_completion_tokens", "x": ' + DEEP, "bad_request"),
    ],
)
async def test_a_deeply_nested_error_body_is_still_the_error_its_status_means(
        fake_provider: FakeProviderServer, chat_offer: Offer, status: int, body: bytes, kind: str) -> None:
    # Before, the RecursionError escaped the transport: the router read any status as an unclassified
    # upstream_error without its status or Retry-After (a 400 or 401 retried, a 429 retried at once).
    fake_provider.enqueue(Reply(status, body, headers={"Retry-After": "2"}))
    error = await failure(chat_offer, ChatRequest(MESSAGES, max_tokens=16))
    assert (error.kind, error.http_status, error.retry_after_s) == (kind, status, 2.0)
    assert len(error.message) <= 300
    assert len(fake_provider.requests) == 1


async def test_a_deeply_nested_answer_is_bad_response(fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    fake_provider.enqueue(Reply(200, DEEP), Reply(200, b'{"choices": [{"message": {"content": ' + DEEP))
    for _ in range(2):
        error = await failure(chat_offer)
        assert (error.kind, error.http_status) == ("bad_response", 200)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"code": 502, "message": "Provider returned error", "metadata": {"provider_name": "X"}}, "upstream_error"),
        ({"code": 429, "message": "Rate limit exceeded upstream"}, "rate_limit"),
        ({"code": "503", "message": "No instances available"}, "upstream_error"),
        ({"code": 400, "message": "This model's maximum context length is 8192 tokens"}, "context_overflow"),
        ({"code": "invalid_api_key", "message": "what"}, "bad_response"),  # no status named: not an answer
        ({"message": "something broke"}, "bad_response"),
    ],
)
async def test_an_error_object_sent_with_200_is_the_error_its_code_names(
        fake_provider: FakeProviderServer, chat_offer: Offer, error: dict, kind: str) -> None:
    # OpenRouter answers 200 and puts the error in the body when the model fails after the answer has begun
    # (docs/providers.md "Errors"): a 502 there is the provider's failure, not an answer of the wrong API.
    fake_provider.enqueue(Reply(200, {"error": error}, headers={"Retry-After": "3"}))
    failed = await failure(chat_offer)
    assert (failed.kind, failed.http_status) == (kind, 200)  # the status it came with: it may have been billed
    assert error["message"] in failed.message
    assert failed.retry_after_s == 3.0


async def test_key_never_appears_in_errors(fake_provider: FakeProviderServer, chat_offer: Offer,
                                           api_key: str) -> None:
    echoed = f"Incorrect API key provided: {api_key}. Header was Bearer {api_key}"
    fake_provider.enqueue(Reply(401, {"error": {"message": echoed}}), Reply(200, {"error": {"message": echoed}}))
    for _ in range(2):
        error = await failure(chat_offer)
        assert api_key not in error.message
        assert api_key not in str(error)
        assert "[redacted]" in error.message


async def test_error_message_is_truncated(fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    fake_provider.enqueue(Reply(500, "boom " * 1000))
    error = await failure(chat_offer)
    assert len(error.message) <= 300


async def test_timeout(fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    fake_provider.enqueue(chat_reply(delay_s=30))
    error = await failure(chat_offer, timeout_s=0.3)
    assert error.kind == "timeout"


async def test_no_time_left_is_a_timeout_without_a_call(fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    error = await failure(chat_offer, timeout_s=0)
    assert error.kind == "timeout"
    assert fake_provider.requests == []


async def test_connection_refused_is_network_error(chat_offer: Offer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    error = await failure(dataclasses.replace(chat_offer, base_url=f"http://127.0.0.1:{port}/v1"))
    assert error.kind == "network_error"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"choices": []}',
        b'{"choices": [{"finish_reason": "stop"}]}',
        b'{"id": "x", "id": "y", "choices": [{"message": {"content": "a"}}]}',
        b"[1, 2]",
    ],
)
async def test_malformed_bodies_are_bad_response(fake_provider: FakeProviderServer, chat_offer: Offer,
                                                 body: bytes) -> None:
    fake_provider.enqueue(Reply(200, body))
    error = await failure(chat_offer)
    assert (error.kind, error.http_status) == ("bad_response", 200)


async def test_malformed_body_keeps_reported_cost(fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    fake_provider.enqueue(Reply(200, {"choices": [], "usage": {"cost": 0.5}}))
    error = await failure(chat_offer)
    assert error.kind == "bad_response"
    assert error.cost_reported == 0.5


async def test_oversized_body_is_bad_response(fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    fake_provider.enqueue(Reply(200, b" " * (CHAT_RESPONSE_MAX_BYTES + 1)))
    error = await failure(chat_offer)
    assert error.kind == "bad_response"
    assert "exceeds" in error.message


async def test_oversized_stream_without_length_is_bad_response(chat_offer: Offer) -> None:
    async def chunks():
        for _ in range(9):
            yield b" " * (1024 * 1024)

    with respx.mock(assert_all_called=True) as mock:
        mock.post(f"{chat_offer.base_url}/chat/completions").mock(
            return_value=httpx.Response(200, stream=chunks()))  # streamed: no Content-Length
        error = await failure(chat_offer)
    assert error.kind == "bad_response"


async def test_decide_is_refused(chat_offer: Offer) -> None:
    with pytest.raises(ProviderError) as caught:
        await TRANSPORT.decide(chat_offer, DecisionRequest("s", {}), 1)
    assert caught.value.kind == "bad_request"


async def test_offer_without_base_url_is_bad_request(chat_offer: Offer) -> None:
    error = await failure(dataclasses.replace(chat_offer, base_url=None))
    assert error.kind == "bad_request"
