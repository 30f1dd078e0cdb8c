"""Cache boundaries (docs/providers.md "Prompt caching"): where a decision request's shared state ends in
its chat prompt, how a boundary maps onto Anthropic/Bedrock turns, and when the anthropic transport marks
it (through the transport, against the local fake provider)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from compactor.caller import calling_as
from compactor.providers.anthropic import AnthropicTransport
from compactor.providers.base import CacheBoundary, ChatRequest, DecisionRequest, Offer
from compactor.providers.chat_decisions import cache_boundary, decision_messages
from compactor.providers.prompt_cache import CACHE_TTL_S, DEFAULT_CACHE_MIN_TOKENS, written_first
from compactor.providers.turns import to_turns
from compactor.router import BYTES_PER_TOKEN_ESTIMATE
from fakes.provider_server import FakeProviderServer, anthropic_reply

QUESTIONS = {"f1": {"type": "noul", "instructions": "Is it useful?"}}
ANSWER = json.dumps({"answers": {"f1": {"type": "noul", "noul": 0.5}}})
# A shared member long enough for the default minimum by the router's estimate.
LONG = "x" * (DEFAULT_CACHE_MIN_TOKENS * BYTES_PER_TOKEN_ESTIMATE)


def test_the_boundary_ends_the_leading_shared_members_of_the_state() -> None:
    payload = {"state": {"rules": "r", "notes": ["n"], "own": 1, "later": "l"}, "questions": QUESTIONS}
    messages = decision_messages(payload)
    boundary = cache_boundary(messages, payload, ("rules", "notes", "later"))
    assert boundary is not None and boundary.message == 1
    assert messages[1]["content"][:boundary.chars] == '{"state":{"rules":"r","notes":["n"]'
    # A member named later but not leading ends nothing; no named leading member, no boundary.
    assert cache_boundary(messages, payload, ("own",)) is None
    assert cache_boundary(messages, payload, ()) is None
    listed = {"state": ["rules"], "questions": QUESTIONS}
    assert cache_boundary(decision_messages(listed), listed, ("rules",)) is None


def test_the_boundary_ends_the_shared_members_as_the_prompt_shows_them() -> None:
    """A shared member's JSON text is shown as JSON (the recent evidence): the boundary ends it there, the same in
    every batch of a request."""
    evidence = '[{"role": "tool", "content": "ok"}]'
    boundaries = []
    for own in ('[{"role": "user", "content": "a"}]', "b"):
        payload = {"state": {"rules": "r", "recent": [evidence], "own": own}, "questions": QUESTIONS}
        messages = decision_messages(payload)
        boundary = cache_boundary(messages, payload, ("rules", "recent"))
        assert boundary is not None
        boundaries.append(messages[1]["content"][:boundary.chars])
    assert boundaries == ['{"state":{"rules":"r","recent":[' + evidence + "]"] * 2


@pytest.mark.parametrize(("messages", "boundary", "expected"), [
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "shared|own"}], CacheBoundary(1, 7),
     (0, "shared")),
    # merged into the turn before it: the offset counts the earlier text and the blank line
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "shared|own"}], CacheBoundary(1, 7),
     (0, "a\n\nshared")),
    # a tool result is prefixed in its (user) turn; a first assistant turn gets a user turn before it
    ([{"role": "assistant", "content": "x"}, {"role": "tool", "content": "shared|own"}], CacheBoundary(1, 7),
     (2, "[tool result] shared")),
])
def test_a_boundary_lands_in_its_turn(messages: list, boundary: CacheBoundary, expected: tuple) -> None:
    turns = to_turns(messages, cache_boundary=boundary)
    assert turns.cache_at is not None
    index, chars = turns.cache_at
    assert (index, turns.turns[index][1][:chars]) == (expected[0], expected[1] + "|")


@pytest.mark.parametrize("boundary", [CacheBoundary(0, 1), CacheBoundary(1, 0), CacheBoundary(1, 99),
                                      CacheBoundary(5, 1)])
def test_a_boundary_outside_a_turns_string_content_is_dropped(boundary: CacheBoundary) -> None:
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "shared"}]
    assert to_turns(messages, cache_boundary=boundary).cache_at is None


async def test_a_long_shared_prefix_is_marked_once_and_the_text_is_unchanged(
        fake_provider: FakeProviderServer, anthropic_offer: Offer) -> None:
    decider = dataclasses.replace(anthropic_offer, protocol="decisions")
    fake_provider.enqueue(anthropic_reply(ANSWER, input_tokens=30, cache_read=2000))
    request = DecisionRequest({"rules": LONG, "own": "mine"}, QUESTIONS, cache_prefix=("rules",))
    response = await AnthropicTransport().decide(decider, request, 10)
    content = fake_provider.requests[0].json["messages"][0]["content"]
    assert [sorted(block) for block in content] == [["cache_control", "text", "type"], ["text", "type"]]
    assert content[0]["cache_control"] == {"type": "ephemeral"}
    assert content[0]["text"] == '{"state":{"rules":"' + LONG + '"'
    assert json.loads(content[0]["text"] + content[1]["text"]) == {"state": request.state, "questions": QUESTIONS}
    # A decision keeps the cache tokens its chat call reported (priced by compactor.cost).
    assert (response.tokens_in, response.tokens_cached, response.tokens_cache_written) == (2030, 2000, None)


@pytest.mark.parametrize(("state", "observations"), [
    ({"rules": "short", "own": "mine"}, {}),  # below the default minimum
    ({"rules": LONG, "own": "mine"}, {"cache_min_tokens": 4 * DEFAULT_CACHE_MIN_TOKENS}),  # below the offer's
    ({"rules": LONG, "own": "mine"}, {"prompt_cache": False}),  # the offer does not cache
])
async def test_no_marker_below_the_minimum_or_when_the_offer_does_not_cache(
        fake_provider: FakeProviderServer, anthropic_offer: Offer, state: dict, observations: dict) -> None:
    decider = dataclasses.replace(anthropic_offer, protocol="decisions", observations=observations)
    fake_provider.enqueue(anthropic_reply(ANSWER))
    await AnthropicTransport().decide(decider, DecisionRequest(state, QUESTIONS, cache_prefix=("rules",)), 10)
    content = fake_provider.requests[0].json["messages"][0]["content"]
    assert isinstance(content, str) and json.loads(content)["state"] == state


async def test_chat_requests_without_a_boundary_are_sent_as_before(
        fake_provider: FakeProviderServer, anthropic_offer: Offer) -> None:
    fake_provider.enqueue(anthropic_reply("ok"))
    await AnthropicTransport().chat(anthropic_offer, ChatRequest([{"role": "user", "content": LONG}]), 10)
    assert fake_provider.requests[0].json["messages"] == [{"role": "user", "content": LONG}]


async def test_the_first_call_with_a_prefix_goes_alone_and_a_failed_one_lets_the_next_write() -> None:
    now = [0.0]
    order: list[str] = []

    async def call(name: str, fail: bool = False) -> None:
        async with written_first("k", clock=lambda: now[0]):
            order.append(f"{name} start")
            await asyncio.sleep(0)
            order.append(f"{name} end")
            if fail:
                raise RuntimeError("upstream")

    results = await asyncio.gather(call("a", fail=True), call("b"), call("c"), return_exceptions=True)
    assert isinstance(results[0], RuntimeError) and results[1:] == [None, None]
    # a wrote alone and failed; b then wrote alone; c read after b had answered.
    assert order == ["a start", "a end", "b start", "b end", "c start", "c end"]
    order.clear()
    await asyncio.gather(call("d"), call("e"))  # written within the TTL: no wait
    assert order == ["d start", "e start", "d end", "e end"]
    order.clear()
    now[0] += CACHE_TTL_S + 1  # the provider has dropped it: the next call writes alone again
    await asyncio.gather(call("f"), call("g"))
    assert order == ["f start", "f end", "g start", "g end"]
    async with written_first(None):  # no marker, no gate
        pass


async def test_callers_with_the_same_prefix_do_not_wait_on_each_other() -> None:
    """The gate is each caller's own (docs/providers.md "Prompt caching"): another caller's first call with the same
    prefix, however slow, does not hold this caller's call back, while a caller's own calls still wait."""
    order: list[str] = []
    release = asyncio.Event()

    async def call(name: str, caller: str, slow: bool = False) -> None:
        with calling_as(caller):
            async with written_first("same prefix"):
                order.append(f"{name} start")
                if slow:
                    await release.wait()
                order.append(f"{name} end")

    slow = asyncio.create_task(call("a1", "caller-a", slow=True))
    own = asyncio.create_task(call("a2", "caller-a"))
    other = asyncio.create_task(call("b1", "caller-b"))
    await asyncio.wait_for(other, 1)  # caller b's call ran while a's first call was still writing
    assert order == ["a1 start", "b1 start", "b1 end"] and not own.done()
    release.set()
    await asyncio.gather(slow, own)
    assert order[3:] == ["a1 end", "a2 start", "a2 end"]
