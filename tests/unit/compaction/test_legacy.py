from dataclasses import dataclass

import pytest

from compactor.budget import Deadline
from compactor.compaction.seal import SEAL_MARKER, plan_seal, render_aged, seal
from compactor.errors import InvalidPolicy
from compactor.providers.base import ChatResponse, Offer
from compactor.router import Router

from .fixtures import tool_unit


def _msgs(*roles):
    return [{"role": r, "content": f"{r}{i}"} for i, r in enumerate(roles)]


def test_nothing_to_seal_when_tail_covers_everything():
    assert plan_seal(_msgs("system", "user", "assistant"), keep_recent=2) is None
    assert plan_seal(_msgs("user", "assistant"), keep_recent=0) is not None  # keep is at least 1


def test_frozen_system_prefix_aged_and_recent():
    plan = plan_seal(_msgs("system", "user", "assistant", "user", "assistant"), keep_recent=2)
    assert [m["content"] for m in plan.frozen] == ["system0"]
    assert [m["content"] for m in plan.aged] == ["user1", "assistant2"]
    assert [m["content"] for m in plan.recent] == ["user3", "assistant4"]


def test_tail_starting_with_a_tool_result_takes_its_whole_unit():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": "thinking"}, *tool_unit("a", "ls", "out"),
                {"role": "tool", "tool_call_id": "b", "content": "second result"}, {"role": "assistant", "content": "end"}]
    # keep_recent=2 would start the tail at the second tool result: the whole call (3 messages) joins the tail.
    plan = plan_seal(messages, keep_recent=2)
    assert plan.recent == messages[3:]
    assert plan.aged == messages[1:3]
    assert plan.frozen + plan.aged + plan.recent == messages


def test_stray_tool_results_stay_in_the_tail_without_the_message_before():
    messages = _msgs("user", "assistant") + [{"role": "tool", "tool_call_id": "x", "content": "stray"},
                                             {"role": "assistant", "content": "end"}]
    plan = plan_seal(messages, keep_recent=2)
    assert plan.recent == messages[2:]
    assert plan.aged == messages[:2]


def test_tail_swallowing_everything_is_a_no_op():
    messages = [{"role": "system", "content": "s"}, *tool_unit("a", "ls", "out")]
    assert plan_seal(messages, keep_recent=1) is None


def test_render_lines_and_tool_calls():
    text = render_aged([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                        *tool_unit("a", "ls -la", "files")])
    assert text.splitlines()[0] == "user: a b"
    assert '[tool call bash({"command": "ls -la"})]' in text
    assert text.splitlines()[-1] == "tool: files"


@dataclass
class _Fake:
    text: str | None
    calls: int = 0

    async def chat(self, offer, request, timeout_s):
        self.calls += 1
        self.request = request
        return ChatResponse(text=self.text, tokens_in=100, tokens_out=10, tokens_total=110)

    async def decide(self, offer, request, timeout_s):  # pragma: no cover - not used
        raise AssertionError


def _router(fake):
    offer = Offer(id="t/chat", provider="t", family="f", model="m", protocol="chat", transport="fake",
                  price_in=1.0, price_out=2.0)
    return Router([offer], transport_for=lambda o: fake)


async def test_seal_success_body():
    fake = _Fake("  the summary \n")
    messages = _msgs("system", "user", "assistant", "user", "assistant")
    messages[2]["content"] += " and a long answer" * 5  # the seal must make the transcript smaller
    body = await seal(messages, keep_recent=2, policy_ir=None, max_tokens=None, router=_router(fake),
                      deadline=Deadline.after_ms(5000))
    assert body["compacted"] is True
    assert body["messages"] == [messages[0], {"role": "system", "content": SEAL_MARKER + "the summary"},
                                *messages[3:]]
    assert body["usage"] == {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    assert body["x_router"]["cost_usd"] == pytest.approx(0.00012)
    assert body["x_router"]["cost_basis"] == "computed"
    assert fake.request.max_tokens == 512


async def test_empty_summary_returns_original_with_cost_keys():
    messages = _msgs("user", "assistant", "user")
    body = await seal(messages, keep_recent=1, policy_ir=None, max_tokens=0, router=_router(_Fake("   ")),
                      deadline=Deadline.after_ms(5000))
    assert body["messages"] == messages and body["compacted"] is False
    assert "x_router" in body and "usage" in body


@dataclass
class _Answer:
    """Answers every call with one ChatResponse."""

    response: ChatResponse

    async def chat(self, offer, request, timeout_s):
        return self.response


@pytest.mark.parametrize(("finish_reason", "tool_calls", "reason"), [
    ("content_filter", None, "summary_unfinished"),  # OpenAI's filter, Anthropic's refusal, Bedrock's guardrail
    ("tool_calls", [{"id": "t1", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
     "summary_unfinished"),
    ("stop", [{"id": "t1", "type": "function", "function": {"name": "read", "arguments": "{}"}}], "summary_unfinished"),
    ("length", None, "summary_truncated"),
])
async def test_an_answer_the_model_did_not_finish_is_not_a_summary(finish_reason, tool_calls, reason):
    # docs/reliability.md "Legacy seal never grows the transcript": only a finished summary seals.
    messages = _msgs("system", "user", "assistant", "user", "assistant")
    messages[2]["content"] += " and a long answer" * 5
    answer = ChatResponse(text="I'm sorry, I can't help with that.", finish_reason=finish_reason,
                          tool_calls=tool_calls, tokens_in=100, tokens_out=10)
    body = await seal(messages, keep_recent=2, policy_ir=None, max_tokens=None, router=_router(_Answer(answer)),
                      deadline=Deadline.after_ms(5000))
    assert body["messages"] == messages and body["compacted"] is False and body["reason"] == reason


@pytest.mark.parametrize(("finish_reason", "reason"), [("content_filter", "summary_unfinished"),
                                                     ("length", "summary_truncated"), ("stop", "no_summary")])
async def test_an_unfinished_answer_without_text_says_why(finish_reason, reason):
    # OpenAI's refusal carries no content (providers/openai.py): it read as no_summary, as an empty answer does.
    messages = _msgs("system", "user", "assistant", "user", "assistant")
    messages[2]["content"] += " and a long answer" * 5
    answer = ChatResponse(text=None, finish_reason=finish_reason, tokens_in=100, tokens_out=10)
    body = await seal(messages, keep_recent=2, policy_ir=None, max_tokens=None, router=_router(_Answer(answer)),
                      deadline=Deadline.after_ms(5000))
    assert body["messages"] == messages and body["compacted"] is False and body["reason"] == reason


async def test_no_op_body_has_exactly_two_keys_and_no_call():
    fake = _Fake("x")
    body = await seal(_msgs("user"), keep_recent=6, policy_ir=None, max_tokens=512, router=_router(fake),
                      deadline=Deadline.after_ms(5000))
    assert body == {"messages": _msgs("user"), "compacted": False}
    assert fake.calls == 0


async def test_bad_policy_is_rejected_before_any_call():
    fake = _Fake("x")
    with pytest.raises(InvalidPolicy, match=r"^policy_ir rejected at admission: ir"):
        await seal(_msgs("user", "assistant", "user"), keep_recent=1, policy_ir=["zero"], max_tokens=512,
                   router=_router(fake), deadline=Deadline.after_ms(5000))
    assert fake.calls == 0


def test_billed_failed_attempts_join_the_chosen_cost():
    from compactor.router import RouteResult
    from compactor.response_blocks import billed_cost

    def billed(**fields):
        return billed_cost(RouteResult(ok=True, response=None, chosen=None, **fields))

    assert billed(cost_usd=0.001, failed_cost_usd=0.0005, failed_cost_known=True) == pytest.approx(0.0015)
    assert billed(cost_usd=None, failed_cost_usd=0.1, failed_cost_known=True) is None
    assert billed(cost_usd=0.002, failed_cost_known=True) == 0.002
    # A failed attempt that may have been billed an unknown amount: the total is unknown, never a partial sum.
    assert billed(cost_usd=0.002, failed_cost_known=False) is None
    assert billed(cost_usd=0.002, failed_cost_usd=0.1, failed_cost_known=False) is None


@dataclass
class _Chunked:
    """Answers each seal call with a numbered summary and records what it was sent."""

    texts: list[str]
    finish_reason: str | None = None

    async def chat(self, offer, request, timeout_s):
        from compactor.router import chat_request_tokens

        assert chat_request_tokens(request) <= offer.observations["context"]  # every call fits the context
        self.texts.append(request.messages[1]["content"])
        return ChatResponse(text=f"summary {len(self.texts)}", tokens_in=100, tokens_out=10, tokens_total=110,
                            finish_reason=self.finish_reason)


def _small_router(fake, context):
    offer = Offer(id="t/chat", provider="t", family="f", model="m", protocol="chat", transport="fake",
                  price_in=1.0, price_out=2.0, observations={"context": context})
    return Router([offer], transport_for=lambda o: fake)


def _long_transcript():
    aged = [{"role": "user" if i % 2 else "assistant", "content": f"step {i}: " + "detail " * 300}
            for i in range(1, 13)]
    return [{"role": "system", "content": "s"}, {"role": "user", "content": "Fix app.py"}, *aged,
            {"role": "assistant", "content": "done"}]


async def test_an_aged_part_over_the_context_is_sealed_in_chunks_carrying_the_summary_forward():
    fake = _Chunked([])
    messages = _long_transcript()  # about 25 KB aged: over 8,000 bytes of room per call
    body = await seal(messages, keep_recent=1, policy_ir=None, max_tokens=200, router=_small_router(fake, 3_000),
                      deadline=Deadline.after_ms(5000))
    assert len(fake.texts) > 2
    assert fake.texts[0].startswith("user: Fix app.py")
    for number, text in enumerate(fake.texts[1:], start=1):  # each later call carries the summary so far
        assert text.startswith(f"system: {SEAL_MARKER}summary {number}\n")
    sent = "".join(fake.texts)
    assert all(f"step {i}: " in sent for i in range(1, 13))  # nothing of the aged part is left out
    assert body["compacted"] is True
    assert body["messages"] == [messages[0], {"role": "system", "content": SEAL_MARKER + f"summary {len(fake.texts)}"},
                                messages[-1]]
    assert body["usage"]["prompt_tokens"] == 100 * len(fake.texts)
    assert body["x_router"]["cost_usd"] == pytest.approx(0.00012 * len(fake.texts))


async def test_a_large_context_seals_in_one_call_and_a_cut_off_chunk_returns_the_original():
    fake = _Chunked([])
    messages = _long_transcript()
    body = await seal(messages, keep_recent=1, policy_ir=None, max_tokens=200, router=_small_router(fake, 100_000),
                      deadline=Deadline.after_ms(5000))
    assert len(fake.texts) == 1 and body["compacted"] is True
    truncated = _Chunked([], finish_reason="length")
    body = await seal(messages, keep_recent=1, policy_ir=None, max_tokens=200,
                      router=_small_router(truncated, 3_000), deadline=Deadline.after_ms(5000))
    assert len(truncated.texts) == 1  # the first chunk was cut off: no further calls, nothing sealed
    assert body["messages"] == messages and body["compacted"] is False and body["reason"] == "summary_truncated"


async def test_the_record_holds_each_seal_call_as_a_node_in_order():
    from compactor.models import CompactRequest
    from compactor.service import compact_call

    fake = _Chunked([])
    request = CompactRequest.model_validate({"messages": _long_transcript(), "keep_recent": 1, "max_tokens": 200,
                                             "mode": "seal"})
    record = await compact_call(request, deadline=Deadline.after_ms(5000), router=_small_router(fake, 3_000))
    names = [f"seal_{number}" for number in range(1, len(fake.texts) + 1)]
    assert len(names) > 2 and [node.node for node in record.nodes] == names
    assert [node.inputs for node in record.nodes] == [(), *[(name,) for name in names[:-1]]]  # one after another
    assert all(node.kind == "llm" and node.outcome == "ok" and node.trace["tokens_in"] == 100 for node in record.nodes)
    assert record.model_calls == sum(node.calls_made for node in record.nodes) == len(names)
    assert sum(node.trace["cost_reported"] for node in record.nodes) == pytest.approx(record.cost_usd)
    assert (record.cost_usd, record.cost_basis) == (record.body["x_router"]["cost_usd"],
                                                    record.body["x_router"]["cost_basis"])


async def test_a_summary_spent_on_reasoning_says_so_in_the_answer_and_the_record():
    # docs/providers.md "Reasoning models": a reasoning model whose reasoning took the whole output budget gave
    # no text; the seal said summary_truncated and its record showed a node that went fine.
    from compactor.models import CompactRequest
    from compactor.provider_failures import failure_causes
    from compactor.service import compact_call

    messages = _msgs("system", "user", "assistant", "user", "assistant")
    messages[2]["content"] += " and a long answer" * 5
    answer = ChatResponse(text="", finish_reason="length", tokens_in=100, tokens_out=600, tokens_reasoning=600)
    body = await seal(messages, keep_recent=2, policy_ir=None, max_tokens=None, router=_router(_Answer(answer)),
                      deadline=Deadline.after_ms(5000))
    assert body["messages"] == messages and body["compacted"] is False
    assert body["reason"] == "summary_spent_on_reasoning"
    assert body["x_router"]["cost_usd"] == pytest.approx((100 * 1.0 + 600 * 2.0) / 1e6)  # reasoning billed as output

    request = CompactRequest.model_validate({"messages": messages, "keep_recent": 2, "mode": "seal"})
    record = await compact_call(request, deadline=Deadline.after_ms(5000), router=_router(_Answer(answer)))
    (node,) = record.nodes
    assert node.outcome == "error" and node.error_kind == "reasoning_exhausted"
    ((cause, count),) = failure_causes(record.nodes)
    assert count == 1 and cause.cause == "the model spent its output budget on reasoning and gave no answer"
