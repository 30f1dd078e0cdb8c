"""Reasoning models (docs/providers.md "Reasoning models"): the catalog's reasoning settings, the output budget
that leaves room for reasoning, the failure of an answer spent on reasoning, and its cost, against the fake
provider."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from compactor.catalog import CatalogError, parse_catalog
from compactor.provider_failures import explain
from compactor.providers import openai
from compactor.providers import reasoning as reasoning_module
from compactor.providers.anthropic import AnthropicTransport
from compactor.providers.base import (
    BAD_RESPONSE, REASONING_EXHAUSTED, ChatRequest, DecisionRequest, Offer, ProviderError,
)
from compactor.providers.chat_decisions import ChatDecisionsTransport
from compactor.providers.openai import OpenAITransport
from compactor.providers.registry import transport_for
from compactor.router import Router, compute_cost
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, anthropic_reply, chat_reply

MESSAGES = [{"role": "user", "content": "hi"}]
QUESTIONS = {"useful": {"type": "noul", "instructions": "Is it useful?"}}
DECISION = DecisionRequest(state={"f1": "ls -la output"}, questions=QUESTIONS)
GOOD = json.dumps({"answers": {"useful": {"type": "noul", "noul": 0.8}}})


def offer_entry(**fields: Any) -> dict[str, Any]:
    return {"id": "o", "provider": "openai", "family": "gpt-5", "model": "gpt-5-mini", "protocol": "chat",
            "transport": "openai", "base_url": "https://api.openai.com/v1", **fields}


def catalog_error(**fields: Any) -> str:
    with pytest.raises(CatalogError) as caught:
        parse_catalog({"offers": [offer_entry(**fields)]})
    return str(caught.value)


# --- the catalog -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("transport, protocol, fields", [
    ("openai", "chat", {"reasoning_effort": "low"}),
    ("openai", "chat", {"reasoning_effort": "high", "reasoning_budget_tokens": 20000}),
    ("chat-decisions", "decisions", {"reasoning_effort": "minimal"}),
    ("anthropic", "chat", {"reasoning_budget_tokens": 2048}),
    ("anthropic", "chat", {"reasoning_effort": "max"}),
    ("anthropic", "decisions", {"reasoning_effort": "low", "reasoning_budget_tokens": 2048}),
    ("bedrock", "chat", {"reasoning_effort": "xhigh"}),
    ("bedrock", "decisions", {"reasoning_budget_tokens": 1024}),
    ("bedrock", "chat", {"reasoning_budget_tokens": 1024,
                         "model": "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc"}),
])
def test_the_catalog_takes_the_settings_a_transport_sends(transport: str, protocol: str,
                                                          fields: dict[str, Any]) -> None:
    entry = offer_entry(transport=transport, protocol=protocol, **fields)
    if transport == "bedrock":
        del entry["base_url"]
        # a Claude that takes the thinking the settings send: adaptive (an effort), or extended (a budget alone)
        entry["model"] = fields.get("model", "us.anthropic.claude-opus-4-7" if "reasoning_effort" in fields
                                    else "us.anthropic.claude-sonnet-4-20250514-v1:0")
    offer = parse_catalog({"offers": [entry]}).offers[0]
    assert (offer.reasoning_effort, offer.reasoning_budget_tokens) == \
        (fields.get("reasoning_effort"), fields.get("reasoning_budget_tokens"))
    assert not {"reasoning_effort", "reasoning_budget_tokens"} & offer.observations.keys()  # wiring, not observed


@pytest.mark.parametrize("fields, words", [
    ({"reasoning_effort": "hihg"}, "reasoning_effort: Input should be 'none', 'minimal', 'low', 'medium', 'high'"),
    ({"reasoning_effort": 3}, "reasoning_effort"),
    ({"reasoning_budget_tokens": 512}, "greater than or equal to 1024"),
    ({"reasoning_budget_tokens": 10**9}, "less than or equal to 128000"),
    ({"reasoning_budget_tokens": 2048.0}, "reasoning_budget_tokens"),
    ({"transport": "anthropic", "reasoning_effort": "minimal"},
     "anthropic offers take a reasoning_effort of low, medium, high, xhigh or max (Anthropic's effort levels), "
     "not 'minimal'"),
    ({"transport": "anthropic", "reasoning_effort": "none"}, "anthropic offers take a reasoning_effort of low"),
    ({"reasoning_effort": "max"}, "openai offers take a reasoning_effort of none, minimal, low, medium, high or xhigh "
                                  "(OpenAI's reasoning_effort), not 'max'"),
    ({"transport": "bedrock", "base_url": None, "reasoning_effort": "low"},
     "bedrock sends reasoning_effort as Claude's adaptive thinking (additionalModelRequestFields.thinking, "
     "outputConfig.effort), which model 'gpt-5-mini' does not take"),
    ({"transport": "bedrock", "base_url": None, "model": "us.anthropic.claude-opus-4-7", "reasoning_effort": "minimal"},
     "bedrock offers take a reasoning_effort of low, medium, high, xhigh or max"),
    ({"transport": "bedrock", "base_url": None, "model": "deepseek.r1-v1:0", "reasoning_budget_tokens": 2048},
     "bedrock sends reasoning_budget_tokens as Claude's extended thinking (additionalModelRequestFields.thinking), "
     "which model 'deepseek.r1-v1:0' does not take"),
    ({"transport": "decisions", "protocol": "decisions", "reasoning_effort": "low"},
     "decisions offers take no reasoning_effort: the transport has no way to send it"),
    ({"transport": "decisions", "protocol": "decisions", "reasoning_budget_tokens": 4096},
     "decisions offers take no reasoning_budget_tokens"),
])
def test_a_setting_the_transport_cannot_send_is_refused_at_load(fields: dict[str, Any], words: str) -> None:
    # Before, reasoning_effort was an unknown extra field (a string: refused as "extra offer fields must be
    # booleans, finite numbers or null"), and a reasoning_budget_tokens number became a policy observation the
    # transports ignored.
    assert words in catalog_error(**fields)


@pytest.mark.parametrize("transport, model, fields, words", [
    # Claude 4.7 (and Mythos) take adaptive thinking only: a budget alone is sent as extended thinking, a 400
    ("anthropic", "claude-opus-4-7", {"reasoning_budget_tokens": 4096},
     "offer 'o' at offers.0: model 'claude-opus-4-7' takes adaptive thinking only, and reasoning_budget_tokens alone sends "
     "extended thinking with a budget, which it refuses: state reasoning_effort (low, medium, high, xhigh or max: "
     "adaptive thinking) instead"),
    ("bedrock", "anthropic.claude-mythos-preview", {"reasoning_budget_tokens": 2048},
     "state reasoning_effort (low, medium, high or max: adaptive thinking)"),
    # Claude 4.5 and earlier take no adaptive thinking, which an effort turns on
    ("anthropic", "claude-sonnet-4-5-20250929", {"reasoning_effort": "medium"},
     "model 'claude-sonnet-4-5-20250929' takes no adaptive thinking (Claude 4.5 and earlier think with a budget, if "
     "at all), which reasoning_effort turns on: state reasoning_budget_tokens (1024 to 128000: extended thinking)"),
    ("bedrock", "us.anthropic.claude-3-7-sonnet-20250219-v1:0", {"reasoning_effort": "low"}, "no adaptive thinking"),
    ("anthropic", "claude-haiku-4-5", {"reasoning_effort": "low", "reasoning_budget_tokens": 2048},
     "no adaptive thinking"),
    # xhigh is not among the levels of Claude Opus 4.6, Sonnet 4.6 and Mythos Preview
    ("bedrock", "us.anthropic.claude-opus-4-6-v1", {"reasoning_effort": "xhigh"},
     "model 'us.anthropic.claude-opus-4-6-v1' takes a reasoning_effort of low, medium, high or max, not 'xhigh'"),
    ("anthropic", "claude-sonnet-4-6", {"reasoning_effort": "xhigh"}, "not 'xhigh'"),
    # OpenAI's API: gpt-5.1 takes none to high, the models before it neither none nor xhigh, gpt-5-pro high only
    ("openai", "gpt-5.1", {"reasoning_effort": "minimal"},
     "model 'gpt-5.1' does not take reasoning_effort 'minimal' on OpenAI's API (gpt-5.1 takes none, low, medium or "
     "high)"),
    ("openai", "gpt-5-mini", {"reasoning_effort": "xhigh"},
     "(the models before gpt-5.1 take neither none nor xhigh)"),
    ("chat-decisions", "o4-mini-2025-04-16", {"reasoning_effort": "none"}, "does not take reasoning_effort 'none'"),
    ("openai", "gpt-5-pro", {"reasoning_effort": "medium"}, "(gpt-5-pro takes high only)"),
])
def test_a_setting_the_model_refuses_is_refused_at_load(transport: str, model: str, fields: dict[str, Any],
                                                        words: str) -> None:
    # Before, each loaded, and every call of the offer was a provider 400 (a bad_request the router failed over from,
    # counted as a failed attempt), explained only after the first call.
    protocol = "decisions" if transport == "chat-decisions" else "chat"
    base_url = None if transport == "bedrock" else "https://api.openai.com/v1" if transport != "anthropic" \
        else "https://api.anthropic.com"
    assert words in catalog_error(transport=transport, protocol=protocol, model=model, base_url=base_url, **fields)


@pytest.mark.parametrize("transport, model, fields", [
    ("anthropic", "claude-opus-4-7", {"reasoning_effort": "xhigh"}),
    ("anthropic", "claude-opus-4-7", {"reasoning_effort": "max", "reasoning_budget_tokens": 40000}),  # N the room
    ("anthropic", "claude-opus-4-6", {"reasoning_effort": "max"}),
    ("anthropic", "claude-sonnet-4-6", {"reasoning_budget_tokens": 2048}),  # deprecated, still answered
    ("anthropic", "claude-sonnet-4-20250514", {"reasoning_budget_tokens": 2048}),
    ("bedrock", "anthropic.claude-opus-4-1-20250805-v1:0", {"reasoning_budget_tokens": 2048}),
    # models the references name nothing of are the provider's to judge
    ("anthropic", "claude-opus-4-8", {"reasoning_budget_tokens": 2048}),
    ("anthropic", "claude-fable-5-1", {"reasoning_budget_tokens": 2048}),
    ("anthropic", "my-gateway-alias", {"reasoning_effort": "xhigh"}),
    ("bedrock", "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc", {"reasoning_effort": "low"}),
    ("openai", "gpt-5.2", {"reasoning_effort": "xhigh"}),
    ("openai", "gpt-5.1", {"reasoning_effort": "none"}),
    ("openai", "o3", {"reasoning_effort": "high"}),
])
def test_a_setting_the_model_takes_or_that_nothing_is_known_of_loads(transport: str, model: str,
                                                                      fields: dict[str, Any]) -> None:
    base_url = None if transport == "bedrock" else "https://api.openai.com/v1" if transport == "openai" \
        else "https://api.anthropic.com"
    entry = offer_entry(transport=transport, model=model, base_url=base_url, **fields)
    assert parse_catalog({"offers": [entry]}).offers[0].model == model


@pytest.mark.parametrize("model, fields, refused", [
    ("anthropic/claude-opus-4.7", {"reasoning_effort": "high"}, None),  # adaptive only: an effort is what it takes
    ("claude-sonnet-4.6", {"reasoning_effort": "max"}, None),
    ("claude-opus-4.7", {"reasoning_budget_tokens": 4096}, "takes adaptive thinking only"),
    ("claude-opus-4.6", {"reasoning_effort": "xhigh"}, "not 'xhigh'"),
    ("claude-3.7-sonnet", {"reasoning_effort": "low"}, "no adaptive thinking"),
])
def test_a_claude_version_written_with_a_dot_is_read_as_that_version(model: str, fields: dict[str, Any],
                                                                     refused: str | None) -> None:
    # A gateway's id (OpenRouter's anthropic/claude-opus-4.7) was read as Claude 4.0: an effort on Opus 4.7, which
    # takes adaptive thinking only, was refused at load as "Claude 4.5 and earlier"
    entry = offer_entry(transport="anthropic", model=model, base_url="https://gateway.example", **fields)
    if refused is None:
        assert parse_catalog({"offers": [entry]}).offers[0].model == model
    else:
        assert refused in catalog_error(transport="anthropic", model=model, base_url="https://gateway.example", **fields)


def test_openai_names_behind_another_server_are_that_servers() -> None:
    # OpenRouter, vLLM or a gateway may take what OpenAI's own API refuses for the same name
    entry = offer_entry(model="gpt-5-mini", base_url="http://localhost:8000/v1", reasoning_effort="xhigh")
    assert parse_catalog({"offers": [entry]}).offers[0].reasoning_effort == "xhigh"


def test_a_builtin_offer_takes_no_reasoning_setting() -> None:
    entry = {"id": "b", "provider": "builtin", "family": "f", "model": "m", "protocol": "chat",
             "transport": "builtin", "reasoning_budget_tokens": 2048}
    with pytest.raises(CatalogError, match="builtin offers take no reasoning_budget_tokens"):
        parse_catalog({"offers": [entry]})


# --- the wire ----------------------------------------------------------------------------------------------------

def reasoning(offer: Offer, **settings: Any) -> Offer:
    return dataclasses.replace(offer, model="gpt-5-mini", **settings)


async def test_an_effort_is_sent_with_room_for_reasoning(fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    # Before: the catalog could not state an effort, and an o-series or gpt-5 model's max_completion_tokens was
    # the answer's budget alone, which its hidden reasoning spends first.
    fake_provider.enqueue(chat_reply("fine"), chat_reply("fine"), chat_reply("fine"))
    await OpenAITransport().chat(reasoning(chat_offer, reasoning_effort="low"), ChatRequest(MESSAGES, max_tokens=512), 10)
    await OpenAITransport().chat(reasoning(chat_offer, reasoning_effort="high", reasoning_budget_tokens=3000),
                                 ChatRequest(MESSAGES, max_tokens=100), 10)
    await OpenAITransport().chat(reasoning(chat_offer, reasoning_effort="none"), ChatRequest(MESSAGES), 10)
    low, budgeted, unbounded = (request.json for request in fake_provider.requests)
    assert low == {"model": "gpt-5-mini", "messages": MESSAGES, "max_completion_tokens": 512 + 4096,
                   "reasoning_effort": "low"}  # at once: no max_tokens to be refused first
    assert (budgeted["max_completion_tokens"], budgeted["reasoning_effort"]) == (100 + 3000, "high")
    assert unbounded == {"model": "gpt-5-mini", "messages": MESSAGES, "reasoning_effort": "none"}


async def test_an_offer_without_settings_is_sent_as_before(fake_provider: FakeProviderServer,
                                                           chat_offer: Offer) -> None:
    fake_provider.enqueue(chat_reply("fine"))
    await OpenAITransport().chat(chat_offer, ChatRequest(MESSAGES, max_tokens=64), 10)
    assert fake_provider.requests[0].json == {"model": "fake-chat-1", "messages": MESSAGES, "max_tokens": 64}


async def test_chat_decisions_send_the_effort_and_room(fake_provider: FakeProviderServer,
                                                       chat_decision_offer: Offer) -> None:
    fake_provider.enqueue(chat_reply(GOOD, reasoning_tokens=40, completion_tokens=60))
    offer = dataclasses.replace(chat_decision_offer, reasoning_effort="minimal")
    decision = await ChatDecisionsTransport().decide(offer, DECISION, 10)
    assert decision.answers == {"useful": {"type": "noul", "noul": 0.8}} and decision.tokens_out == 60
    sent = fake_provider.requests[0].json
    assert sent["reasoning_effort"] == "minimal"
    assert sent["max_completion_tokens"] == 256 + 128 + 1024 and "max_tokens" not in sent  # answer + room


async def test_anthropic_thinking_budget_is_sent_on_top_of_the_answer(fake_provider: FakeProviderServer,
                                                                      anthropic_offer: Offer) -> None:
    fake_provider.enqueue(anthropic_reply("the answer", thinking="let me think", output_tokens=700))
    offer = dataclasses.replace(anthropic_offer, reasoning_budget_tokens=2048)
    response = await AnthropicTransport().chat(offer, ChatRequest(MESSAGES, max_tokens=300), 10)
    sent = fake_provider.requests[0].json
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent["max_tokens"] == 300 + 2048  # Anthropic requires max_tokens > budget_tokens
    assert response.text == "the answer"  # the thinking block is not the answer
    assert response.tokens_out == 700 and response.tokens_reasoning is None  # the split is not reported

    fake_provider.enqueue(anthropic_reply("fine"))
    await AnthropicTransport().chat(anthropic_offer, ChatRequest(MESSAGES), 10)
    assert "thinking" not in fake_provider.requests[1].json and fake_provider.requests[1].json["max_tokens"] == 1024


def adaptive_reply(text: str) -> Reply:
    """An answer of adaptive thinking: a thinking block (its text omitted, as Claude 4.7 and later send it by
    default), a redacted one, then the text."""
    reply = anthropic_reply(text, output_tokens=900)
    reply.body["content"][:0] = [{"type": "thinking", "thinking": "", "signature": "c2ln"},
                                 {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}]
    return reply


async def test_an_anthropic_effort_is_sent_as_adaptive_thinking(fake_provider: FakeProviderServer,
                                                                 anthropic_offer: Offer) -> None:
    # Before: refused at load ("anthropic offers take no reasoning_effort"), and reasoning_budget_tokens, the only
    # setting, is sent as thinking.type "enabled", which Claude 4.7 and later refuse with a 400.
    fake_provider.enqueue(adaptive_reply("the answer"), adaptive_reply("fine"))
    offer = dataclasses.replace(anthropic_offer, model="claude-opus-4-7", reasoning_effort="high")
    response = await AnthropicTransport().chat(offer, ChatRequest(MESSAGES, max_tokens=300), 10)
    sent = fake_provider.requests[0].json
    assert list(sent) == ["model", "max_tokens", "messages", "thinking", "output_config"]
    assert sent["thinking"] == {"type": "adaptive"} and sent["output_config"] == {"effort": "high"}
    assert sent["max_tokens"] == 300 + 16384  # max_tokens bounds thinking and answer together
    assert response.text == "the answer"  # neither thinking block is the answer

    # beside an effort, the budget is the room alone: adaptive thinking takes no budget_tokens
    roomy = dataclasses.replace(offer, reasoning_effort="low", reasoning_budget_tokens=20000)
    await AnthropicTransport().chat(roomy, ChatRequest(MESSAGES, max_tokens=100), 10)
    sent = fake_provider.requests[1].json
    assert (sent["thinking"], sent["output_config"], sent["max_tokens"]) == \
        ({"type": "adaptive"}, {"effort": "low"}, 100 + 20000)


async def test_anthropic_requests_without_a_setting_are_unchanged(fake_provider: FakeProviderServer,
                                                                  anthropic_offer: Offer) -> None:
    fake_provider.enqueue(anthropic_reply("fine"), anthropic_reply("fine"))
    await AnthropicTransport().chat(anthropic_offer, ChatRequest(MESSAGES, max_tokens=64), 10)
    await AnthropicTransport().chat(dataclasses.replace(anthropic_offer, reasoning_budget_tokens=1024),
                                    ChatRequest(MESSAGES, max_tokens=64), 10)
    plain, budgeted = (request.body for request in fake_provider.requests)
    assert plain == (b'{"model":"' + anthropic_offer.model.encode() +
                     b'","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}')
    assert budgeted == plain.replace(b"64,", b"1088,")[:-1] + b',"thinking":{"type":"enabled","budget_tokens":1024}}'


# What Anthropic answers a thinking.type "enabled" sent to Claude 4.7 and later (docs/providers.md "Reasoning models").
REFUSES_ENABLED = Reply(400, {"type": "error", "error": {
    "type": "invalid_request_error",
    "message": '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and '
               '"output_config.effort" to control thinking behavior.'}})


async def test_a_model_refusing_a_thinking_budget_says_what_to_change(fake_provider: FakeProviderServer,
                                                                      anthropic_offer: Offer) -> None:
    # Before: "HTTP 400: "thinking.type.enabled" is not supported for this model...", explained as "check the
    # offer's model name and transport": the catalog's words (reasoning_budget_tokens) were nowhere.
    fake_provider.enqueue(REFUSES_ENABLED)
    offer = dataclasses.replace(anthropic_offer, id="anthropic/opus", model="claude-opus-4-7",
                                reasoning_budget_tokens=4096)
    with pytest.raises(ProviderError) as caught:
        await AnthropicTransport().chat(offer, ChatRequest(MESSAGES, max_tokens=64), 10)
    error = caught.value
    assert (error.kind, error.http_status) == ("bad_request", 400)
    assert error.message.startswith(
        "model 'claude-opus-4-7' takes adaptive thinking only, not extended thinking with a budget: in the catalog, "
        "replace \"reasoning_budget_tokens\": 4096 with \"reasoning_effort\" (low, medium, high, xhigh or max: "
        "adaptive thinking) in offer 'anthropic/opus'; the provider said: HTTP 400: \"thinking.type.enabled\" is not "
        "supported for this model.")
    assert len(fake_provider.requests) == 1  # not sent again another way: the operator's setting is not guessed at
    cause, fix = explain(error.kind, error.message, error.http_status)
    assert cause == "model 'claude-opus-4-7' takes adaptive thinking only, not extended thinking with a budget"
    assert fix == ("in the catalog, replace \"reasoning_budget_tokens\": 4096 with \"reasoning_effort\" (low, medium, "
                   "high, xhigh or max: adaptive thinking) in offer 'anthropic/opus'")


async def test_a_model_refusing_adaptive_thinking_says_what_to_change(fake_provider: FakeProviderServer,
                                                                      anthropic_offer: Offer) -> None:
    fake_provider.enqueue(Reply(400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": "adaptive thinking is not supported on this model"}}))
    offer = dataclasses.replace(anthropic_offer, model="claude-haiku-4-5", reasoning_effort="medium")
    with pytest.raises(ProviderError) as caught:
        await AnthropicTransport().chat(offer, ChatRequest(MESSAGES), 10)
    assert caught.value.message.startswith(
        "model 'claude-haiku-4-5' does not take adaptive thinking: in the catalog, replace \"reasoning_effort\": "
        "\"medium\" with \"reasoning_budget_tokens\" (1024 to 128000: extended thinking) in offer 'fake/claude'; "
        "the provider said: HTTP 400: adaptive thinking is not supported on this model")

    # another 400, or one to an offer that sent no thinking, is left as it was
    fake_provider.enqueue(REFUSES_ENABLED, Reply(400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": "max_tokens: 999999 > 64000"}}))
    with pytest.raises(ProviderError) as caught:
        await AnthropicTransport().chat(anthropic_offer, ChatRequest(MESSAGES), 10)
    assert caught.value.message.startswith('HTTP 400: "thinking.type.enabled"')
    with pytest.raises(ProviderError) as caught:
        await AnthropicTransport().chat(offer, ChatRequest(MESSAGES), 10)
    assert caught.value.message == "HTTP 400: max_tokens: 999999 > 64000"


# --- an answer spent on reasoning ------------------------------------------------------------------------------

def spent(prompt_tokens: int = 400, completion_tokens: int = 1408) -> Reply:
    """OpenAI's answer when a reasoning model's reasoning used the whole max_completion_tokens."""
    return chat_reply("", finish_reason="length", prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                      reasoning_tokens=completion_tokens)


async def test_a_decision_spent_on_reasoning_says_so(fake_provider: FakeProviderServer,
                                                     chat_decision_offer: Offer) -> None:
    # Before: "decision reply cut off (finish_reason length)", a bad_response like any other, its cost unknown.
    fake_provider.enqueue(spent())
    offer = dataclasses.replace(chat_decision_offer, price_in=1.0, price_out=8.0, reasoning_effort="minimal")
    with pytest.raises(ProviderError) as caught:
        await ChatDecisionsTransport().decide(offer, DECISION, 10)
    error = caught.value
    assert error.kind == REASONING_EXHAUSTED
    assert error.message == ("decision reply spent its whole output budget on reasoning (1408 reasoning tokens, "
                             "no answer text; finish_reason length)")
    assert error.answered is not None and error.answered.tokens_out == 1408
    cause, fix = explain(error.kind, error.message)
    assert cause == "the model spent its output budget on reasoning and gave no answer"
    assert "reasoning_budget_tokens" in fix and "reasoning_effort" in fix


async def test_a_reply_cut_off_after_its_answer_began_is_still_cut_off(fake_provider: FakeProviderServer,
                                                                        chat_decision_offer: Offer) -> None:
    fake_provider.enqueue(chat_reply('{"answers": {"use', finish_reason="length", reasoning_tokens=300))
    with pytest.raises(ProviderError) as caught:
        await ChatDecisionsTransport().decide(chat_decision_offer, DECISION, 10)
    assert (caught.value.kind, caught.value.message) == (BAD_RESPONSE, "decision reply cut off (finish_reason length)")


async def test_anthropic_thinking_without_text_is_spent_on_reasoning(fake_provider: FakeProviderServer,
                                                                     anthropic_offer: Offer) -> None:
    fake_provider.enqueue(anthropic_reply("", thinking="a long thought", stop_reason="max_tokens", output_tokens=1400))
    offer = dataclasses.replace(anthropic_offer, protocol="decisions", reasoning_budget_tokens=1024)
    with pytest.raises(ProviderError) as caught:
        await AnthropicTransport().decide(offer, DECISION, 10)
    assert caught.value.kind == REASONING_EXHAUSTED
    assert "1400 reasoning tokens" in caught.value.message


def chat_decider(fake_provider: FakeProviderServer, offer_id: str, model: str, **fields: Any) -> Offer:
    return Offer(id=offer_id, provider=offer_id, family=model, model=model, protocol="decisions",
                 transport="chat-decisions", base_url=fake_provider.base_url, api_key_env="COMPACTOR_TEST_PROVIDER_KEY",
                 **fields)


async def test_the_router_falls_back_and_prices_the_reasoning(fake_provider: FakeProviderServer, api_key: str) -> None:
    def respond(request: RecordedRequest) -> Reply:
        if request.json["model"] == "o4-mini":
            return spent(prompt_tokens=1000, completion_tokens=2000)
        return chat_reply(GOOD, prompt_tokens=1000, completion_tokens=10)

    fake_provider.responder = respond
    reasoner = chat_decider(fake_provider, "reasoner", "o4-mini", price_in=1.0, price_out=4.0,
                            reasoning_effort="low")
    plain = chat_decider(fake_provider, "plain", "gpt-4.1-mini", price_in=0.5, price_out=2.0)
    router = Router([reasoner, plain], transport_for=transport_for)
    policy = router.admit_policy(["policy", ["top"], ["zero"], ["ordered"], ["id"],
                                  ["always", {"action": "next_candidate"}]])
    result = await router.decide(policy, DECISION)
    assert result.ok and result.chosen is not None and result.chosen.id == "plain"
    failed = next(event for event in result.trace["decision_path"] if event.get("error_kind"))
    assert failed["offer"] == "reasoner" and failed["error_kind"] == REASONING_EXHAUSTED
    # the reasoning tokens are output tokens: 1000 in at $1, 2000 out at $4 per million
    assert failed["cost_computed"] == pytest.approx(0.001 + 0.008)
    assert result.failed_cost_known and result.failed_cost_usd == pytest.approx(0.009)
    assert result.failure_cost() == pytest.approx(0.009)


# --- cost: reasoning tokens are output tokens -----------------------------------------------------------------

async def test_openai_reasoning_tokens_are_priced_as_output(fake_provider: FakeProviderServer,
                                                            chat_offer: Offer) -> None:
    # OpenAI's completion_tokens counts the reasoning tokens (completion_tokens_details.reasoning_tokens is a part)
    fake_provider.enqueue(chat_reply("ok", prompt_tokens=1000, completion_tokens=3000, reasoning_tokens=2900))
    offer = reasoning(chat_offer, reasoning_effort="medium")
    response = await OpenAITransport().chat(offer, ChatRequest(MESSAGES, max_tokens=200), 10)
    assert response.tokens_out == 3000  # (the reasoning part is read only from an answer stopped at its limit)
    assert compute_cost(offer, response, 12) == (pytest.approx(1000 / 1e6 * 1.0 + 3000 / 1e6 * 2.0), "computed")


async def test_anthropic_thinking_tokens_are_priced_as_output(fake_provider: FakeProviderServer,
                                                              anthropic_offer: Offer) -> None:
    # Anthropic's output_tokens counts the thinking (billed as output); there is no separate count
    fake_provider.enqueue(anthropic_reply("ok", thinking="hmm", input_tokens=1000, output_tokens=3000))
    offer = dataclasses.replace(anthropic_offer, reasoning_budget_tokens=4000)
    response = await AnthropicTransport().chat(offer, ChatRequest(MESSAGES, max_tokens=200), 10)
    assert compute_cost(offer, response, 12) == (pytest.approx(1000 / 1e6 * 3.0 + 3000 / 1e6 * 15.0), "computed")


def test_a_learned_reasoning_model_keeps_room_at_the_default_effort(monkeypatch: pytest.MonkeyPatch) -> None:
    offer = Offer(id="o", provider="openai", family="o3", model="o3", protocol="chat", transport="openai",
                  base_url="https://api.openai.com/v1")
    monkeypatch.setattr(reasoning_module, "_FOUND", {(offer.base_url, "o3")})
    body = openai.chat_body(offer, ChatRequest(MESSAGES, max_tokens=700))
    assert body["max_completion_tokens"] == 700 + 8192 and "reasoning_effort" not in body


# --- the room is part of the context ------------------------------------------------------------------------

def test_a_context_no_larger_than_the_room_is_refused() -> None:
    assert "context 4096 leaves nothing beside the 4096 tokens kept for reasoning" in \
        catalog_error(reasoning_effort="low", context=4096)
    assert parse_catalog({"offers": [offer_entry(reasoning_effort="low", context=4097)]}).offers[0].observations == \
        {"context": 4097}


async def test_the_context_check_and_batch_sizes_leave_the_room_out(fake_provider: FakeProviderServer,
                                                                    api_key: str) -> None:
    # Before: a request fitting the stated context was sent with its answer's budget plus the room, past the
    # model's context (OpenAI refuses prompt + max_completion_tokens over it), and batches were sized for it.
    reasoner = Offer(id="reasoner", provider="openai", family="o4-mini", model="o4-mini", protocol="chat",
                     transport="openai", base_url=fake_provider.base_url, api_key_env="COMPACTOR_TEST_PROVIDER_KEY",
                     reasoning_budget_tokens=4000, observations={"context": 6000})
    plain = dataclasses.replace(reasoner, id="plain", model="gpt-4.1-mini", reasoning_budget_tokens=None)
    router = Router([reasoner, plain], transport_for=transport_for)
    policy = router.admit_policy(["policy", ["top"], ["zero"], ["ordered"], ["id"],
                                  ["always", {"action": "next_candidate"}]])
    assert router.smallest_context("chat") == 2000 and router.first_choice_context("chat", policy) == 2000
    fake_provider.enqueue(chat_reply("fine"))
    result = await router.chat(policy, ChatRequest([{"role": "user", "content": "x" * 3000}], max_tokens=1500))
    assert result.ok and result.chosen is not None and result.chosen.id == "plain"
    assert result.trace["rejected"] == [{"offer": "reasoner", "reason": "context_too_small", "estimated_tokens": 2510}]
    assert fake_provider.requests[0].json["model"] == "gpt-4.1-mini"


async def test_a_model_found_to_reason_keeps_its_room_out_of_the_context_too(
        fake_provider: FakeProviderServer, api_key: str) -> None:
    # Before: an OpenAI model found to reason at run time (it refused max_tokens) was sent its answer's budget plus
    # 8192 tokens of room, but the router's context check and the batch sizes counted the answer's budget alone,
    # so a request that fit there went out past the model's context. (A model name no other test uses: the
    # container's memory of it is the test process's.)
    reasoner = Offer(id="reasoner", provider="openai", family="o3", model="o3-found", protocol="chat", transport="openai",
                     base_url=fake_provider.base_url, api_key_env="COMPACTOR_TEST_PROVIDER_KEY",
                     observations={"context": 12000})
    plain = dataclasses.replace(reasoner, id="plain", model="gpt-4.1-mini", observations={"context": 6000})
    router = Router([reasoner, plain], transport_for=transport_for)
    policy = router.admit_policy(["policy", ["top"], ["zero"], ["ordered"], ["id"],
                                  ["always", {"action": "next_candidate"}]])
    assert router.smallest_context("chat") == 6000 and router.first_choice_context("chat", policy) == 12000
    fake_provider.enqueue(Reply(400, {"error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                   "Use 'max_completion_tokens' instead.", "param": "max_tokens"}}), chat_reply("first"))
    small = ChatRequest([{"role": "user", "content": "x" * 300}], max_tokens=100)
    assert (await router.chat(policy, small)).chosen.id == "reasoner"
    assert fake_provider.requests[1].json["max_completion_tokens"] == 100 + 8192
    # found to reason: 12000 - 8192 = 3808 tokens are the request's and its answer's
    assert router.smallest_context("chat") == 3808 and router.first_choice_context("chat", policy) == 3808
    fake_provider.enqueue(chat_reply("fine"))
    result = await router.chat(policy, ChatRequest([{"role": "user", "content": "x" * 9000}], max_tokens=1000))
    assert result.ok and result.chosen is not None and result.chosen.id == "plain"
    assert result.trace["rejected"] == [{"offer": "reasoner", "reason": "context_too_small", "estimated_tokens": 4010}]


# --- a model found to reason by its answer -----------------------------------------------------------------------

REASONED = {
    "reasoning_tokens": chat_reply("fine", completion_tokens=900, reasoning_tokens=880),
    "reasoning_content": chat_reply("fine", reasoning={"reasoning_content": "The user wants..."}),
    "reasoning": chat_reply("fine", reasoning={"reasoning": "The user wants..."}),
}


@pytest.mark.parametrize("signal", sorted(REASONED))
async def test_a_model_reasoning_within_max_tokens_gets_its_room_from_the_next_call(
        fake_provider: FakeProviderServer, api_key: str, signal: str) -> None:
    # Before: only a refusal of max_tokens marked a model as reasoning, so a reasoning model behind a server that
    # takes max_tokens (vLLM, llama.cpp, OpenRouter) was sent its answer's budget alone on every call, which its
    # reasoning spent first (reasoning_exhausted or a cut-off answer), and the router checked its whole context.
    # (A model name no other test uses: the container's memory of it is the test process's.)
    reasoner = Offer(id="reasoner", provider="vllm", family="qwq", model=f"qwq-32b-{signal}", protocol="chat",
                     transport="openai",
                     base_url=fake_provider.base_url, api_key_env="COMPACTOR_TEST_PROVIDER_KEY",
                     observations={"context": 12000})
    plain = dataclasses.replace(reasoner, id="plain", model="plain-chat", observations={"context": 6000})
    router = Router([reasoner, plain], transport_for=transport_for)
    policy = router.admit_policy(["policy", ["top"], ["zero"], ["ordered"], ["id"],
                                  ["always", {"action": "next_candidate"}]])
    assert router.first_choice_context("chat", policy) == 12000
    fake_provider.enqueue(REASONED[signal], chat_reply("fine"))
    small = ChatRequest([{"role": "user", "content": "x" * 300}], max_tokens=100)
    for _ in range(2):
        assert (await router.chat(policy, small)).chosen.id == "reasoner"
    first, second = (request.json for request in fake_provider.requests)
    assert first["max_tokens"] == 100  # nothing known of the model yet
    # the same parameter it took, with room at the default effort's; no max_completion_tokens it may not take
    assert second["max_tokens"] == 100 + 8192 and "max_completion_tokens" not in second
    # the room is left out of the context the router checks: 12000 - 8192 = 3808
    assert router.smallest_context("chat") == 3808 and router.first_choice_context("chat", policy) == 3808
    fake_provider.enqueue(chat_reply("fine"))
    result = await router.chat(policy, ChatRequest([{"role": "user", "content": "x" * 9000}], max_tokens=1000))
    assert result.ok and result.chosen is not None and result.chosen.id == "plain"
    assert result.trace["rejected"] == [{"offer": "reasoner", "reason": "context_too_small", "estimated_tokens": 4010}]


@pytest.mark.parametrize("reply", [chat_reply("fine", reasoning_tokens=0), chat_reply("fine"),
                                   chat_reply("fine", reasoning={"reasoning_content": " ", "reasoning": ""})],
                         ids=["zero-tokens", "none", "blank-text"])
async def test_an_answer_without_reasoning_marks_nothing(fake_provider: FakeProviderServer, chat_offer: Offer,
                                                         monkeypatch: pytest.MonkeyPatch, reply: Reply) -> None:
    monkeypatch.setattr(reasoning_module, "_REASONED", set())
    fake_provider.enqueue(reply, chat_reply("fine"))
    for _ in range(2):
        await OpenAITransport().chat(chat_offer, ChatRequest(MESSAGES, max_tokens=64), 10)
    assert [request.json["max_tokens"] for request in fake_provider.requests] == [64, 64]
    assert reasoning_module.reasoning_room(chat_offer) == 0


async def test_a_reasoning_answer_of_an_offer_stating_its_settings_keeps_the_stated_room(
        fake_provider: FakeProviderServer, chat_offer: Offer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reasoning_module, "_REASONED", set())
    offer = reasoning(chat_offer, reasoning_effort="low")
    fake_provider.enqueue(chat_reply("fine", reasoning_tokens=500), chat_reply("fine"))
    for _ in range(2):
        await OpenAITransport().chat(offer, ChatRequest(MESSAGES, max_tokens=64), 10)
    assert [request.json["max_completion_tokens"] for request in fake_provider.requests] == [64 + 4096] * 2
    assert reasoning_module._REASONED == set()
