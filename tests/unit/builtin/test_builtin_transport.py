"""BuiltinTransport: dispatch on the offer's model, usage estimates and the bundled catalog."""

from __future__ import annotations

import json
import math

import pytest

from compactor.catalog import bundled_catalog_path, load_catalog
from compactor.decision_validation import validate_answers
from compactor.jsonutil import dense_dumps, strict_loads
from compactor.providers.base import BAD_REQUEST, ChatRequest, DecisionRequest, Offer, ProviderError
from compactor.offline.transport import BuiltinTransport

SUMMARY_PROMPT = "Summarise each item. Do not add ids."
ITEM = dense_dumps([{"role": "assistant", "content": "long output follows " + "data " * 200}])


def offer(model: str, protocol: str) -> Offer:
    return Offer(id=f"builtin/{model}", provider="builtin", family=model, model=model,
                 protocol=protocol, transport="builtin", price_in=0, price_out=0)


SUMMARIZER = offer("builtin-extractive-summarizer", "chat")
DECIDER = offer("builtin-rules-decider", "decisions")
QUESTIONS = {"fragment_2": {"type": "choice", "instructions": "Classify.",
                            "criteria": {"keep": "k", "summarize": "s", "archive": "a"}}}


def test_bundled_catalog_lists_the_two_builtin_offers() -> None:
    catalog = load_catalog(str(bundled_catalog_path()))
    offers = {item.id: item for item in catalog.offers}
    assert set(offers) == {"builtin/rules-decider", "builtin/extractive-summarizer"}
    decider, summarizer = offers["builtin/rules-decider"], offers["builtin/extractive-summarizer"]
    assert (decider.protocol, decider.transport, decider.model) == ("decisions", "builtin", "builtin-rules-decider")
    assert (summarizer.protocol, summarizer.transport, summarizer.model) == (
        "chat", "builtin", "builtin-extractive-summarizer")
    assert summarizer.observations["supports_json_mode"] is True
    for item in offers.values():
        assert (item.price_in, item.price_out) == (0, 0)
        assert item.observations["no_log"] is True and item.observations["disabled"] is False
    assert catalog.policy_envelope is None


async def test_json_mode_chat_answers_every_id_within_the_requests_byte_bound() -> None:
    user = dense_dumps({"fragment_2": ITEM, "fragment_3": "plain " * 100})
    request = ChatRequest(messages=[{"role": "system", "content": SUMMARY_PROMPT},
                                    {"role": "user", "content": user}], max_tokens=512, json_mode=True,
                          max_string_bytes=128)
    response = await BuiltinTransport().chat(SUMMARIZER, request, 20.0)
    reply = strict_loads(response.text)
    assert set(reply) == {"fragment_2", "fragment_3"}
    assert all(len(summary.encode("utf-8")) <= 128 for summary in reply.values())
    assert response.finish_reason == "stop" and response.tool_calls is None
    assert response.served_model_id == "builtin-extractive-summarizer"
    assert response.cost_reported == 0.0
    assert response.tokens_in == math.ceil((len(SUMMARY_PROMPT) + len(user.encode("utf-8"))) / 4)
    assert response.tokens_out == math.ceil(len(response.text.encode("utf-8")) / 4)
    assert response.tokens_total == response.tokens_in + response.tokens_out


async def test_the_byte_bounds_are_the_requests_not_the_prompts_words() -> None:
    user = dense_dumps({"fragment_2": ITEM})
    worded = [{"role": "system", "content": "Each summary must use at most 40 UTF-8 bytes."},
              {"role": "user", "content": user}]

    async def longest(**bounds: int) -> int:
        request = ChatRequest(messages=worded, max_tokens=512, json_mode=True, **bounds)
        reply = strict_loads((await BuiltinTransport().chat(SUMMARIZER, request, 20.0)).text)
        return max(len(summary.encode("utf-8")) for summary in reply.values())

    assert 40 < await longest(max_string_bytes=128) <= 128
    assert 128 < await longest() <= 256  # no bound given: the built-in default, whatever the prompt says
    assert await longest(max_string_bytes=128, max_total_string_bytes=60) <= 60


async def test_the_names_to_keep_are_the_requests_not_the_prompts_words() -> None:
    listing = "".join(f"def helper_{i}(x):\n    return x\n" for i in range(200))
    user = dense_dumps({"fragment_2": dense_dumps([{"role": "assistant", "content": listing}])})
    hinted = [{"role": "system", "content": "Summarise.\nNames used again later in the transcript (keep them where "
                                            "the item mentions them): helper_77, helper_150"},
              {"role": "user", "content": user}]

    async def summary(**names: tuple[str, ...]) -> str:
        request = ChatRequest(messages=hinted, max_tokens=512, json_mode=True, max_string_bytes=256, **names)
        return strict_loads((await BuiltinTransport().chat(SUMMARIZER, request, 20.0)).text)["fragment_2"]

    kept = await summary(keep_names=("helper_77", "helper_150"))
    assert "def helper_77(x):" in kept and "def helper_150(x):" in kept
    unhinted = await summary()  # the prompt's list alone is for models: the built-in does not parse it
    assert "def helper_77(x):" not in unhinted and "def helper_150(x):" not in unhinted


async def test_plain_chat_seals_within_max_tokens() -> None:
    conversation = "\n".join(f"assistant: step {i} I will check src/mod_{i}.py next." for i in range(200))
    request = ChatRequest(messages=[{"role": "system", "content": "Summarise the conversation."},
                                    {"role": "user", "content": conversation}], max_tokens=64)
    response = await BuiltinTransport().chat(SUMMARIZER, request, 20.0)
    assert 0 < len(response.text.encode("utf-8")) <= 64 * 4
    assert response.text.startswith("Extractive digest of 200 messages")
    default = await BuiltinTransport().chat(SUMMARIZER, ChatRequest(messages=request.messages), 20.0)
    assert len(default.text.encode("utf-8")) <= 512 * 4


async def test_unparseable_json_mode_content_is_a_bad_request() -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "not json"}], json_mode=True)
    with pytest.raises(ProviderError) as caught:
        await BuiltinTransport().chat(SUMMARIZER, request, 20.0)
    assert caught.value.kind == BAD_REQUEST


async def test_decide_returns_a_valid_priced_at_zero_answer() -> None:
    state = {"instructions": [], "recent_evidence": [],
             "fragments": [{"id": "fragment_2", "evidence": json.dumps([{"role": "assistant", "content": "ok"}])}]}
    response = await BuiltinTransport().decide(DECIDER, DecisionRequest(state, QUESTIONS), 7.0)
    body = {"model": response.model, "answers": response.answers, "usage": response.usage}
    validate_answers(QUESTIONS, body)
    assert response.model == "builtin-rules-decider"
    assert response.answers["fragment_2"]["choice"] == "keep"
    assert response.usage["cost"] == 0 and response.cost_reported == 0.0
    assert response.usage["total_tokens"] == response.tokens_total == response.tokens_in + response.tokens_out


@pytest.mark.parametrize("call", ["chat", "decide"])
async def test_wrong_method_or_unknown_model_is_a_bad_request(call: str) -> None:
    transport = BuiltinTransport()
    chat_request = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    decision_request = DecisionRequest("state", QUESTIONS)
    for target in (DECIDER if call == "chat" else SUMMARIZER, offer("builtin-nonexistent", "chat")):
        with pytest.raises(ProviderError) as caught:
            if call == "chat":
                await transport.chat(target, chat_request, 1.0)
            else:
                await transport.decide(target, decision_request, 1.0)
        assert caught.value.kind == BAD_REQUEST


async def test_unsupported_question_type_is_a_bad_request() -> None:
    questions = {"q": {"type": "ranking", "instructions": "?"}}
    with pytest.raises(ProviderError) as caught:
        await BuiltinTransport().decide(DECIDER, DecisionRequest("state", questions), 1.0)
    assert caught.value.kind == BAD_REQUEST
