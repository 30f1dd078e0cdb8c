"""Scheduler semantics (docs/behaviour.md#flow-execution, #budgets): concurrency, deadline, cancellation, values
and prompts."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from compactor.budget import Deadline
from compactor.flow import admit_flow, run_flow, scheduler
from compactor.providers.base import ChatResponse, DecisionResponse, ProviderError

from .chains import chain_flow, chain_input, chain_reply
from .fake_router import FakeRouter
from .triage import POLICY

LLM = {"kind": "llm", "policy": POLICY, "system": "Be brief."}


@pytest.fixture(autouse=True, params=[True, False], ids=["eager", "lazy"])
def task_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Every semantics test of this module runs with node tasks started eagerly (Python 3.12+) and lazily."""
    monkeypatch.setattr(scheduler, "EAGER_START", request.param and scheduler.EAGER_START)
    return request.param


async def run(router: FakeRouter, flow: list[Any], flow_input: Any = None, *, budget_ms: float = 40_000,
              **kwargs: Any):
    given = {} if flow_input is None else {"flow_input": flow_input}
    admitted = admit_flow(flow, admit_policy=router.admit_policy, **given)
    return await run_flow(admitted, *([flow_input] if flow_input is not None else []), router=router,
                          deadline=Deadline.after_ms(budget_ms), **kwargs)


def flow_of(**nodes: Any) -> list[Any]:
    return ["flow", {"input": {"kind": "input"}, **nodes}]


async def test_independent_chains_run_at_the_same_time() -> None:
    router = FakeRouter(chat=chain_reply, latency_s=0.2)
    started = time.monotonic()
    result = await run(router, chain_flow(8), chain_input(8))
    elapsed = time.monotonic() - started
    assert result.ok and result.output == {f"c{i}": f"answer {i}" for i in range(8)}
    assert router.max_active == 8
    assert elapsed < 8 * 2 * 0.2 / 2  # generous; sequential execution would take 3.2 s


async def test_a_slow_branch_never_delays_another() -> None:
    async def decide(request: Any) -> DecisionResponse:
        if "c0" in request.questions:
            await asyncio.sleep(0.5)
        name = next(iter(request.questions))
        return DecisionResponse(model="d", answers={name: {"type": "choice", "choice": "yes"}})

    events: list[dict[str, Any]] = []
    router = FakeRouter(decide=decide, chat=chain_reply)
    result = await run(router, chain_flow(2), chain_input(2), on_event=events.append)
    assert result.ok
    finished = [(e["label"], e["outcome"]) for e in events if e["event"] == "node_finished"]
    assert finished.index(("say_1", "ok")) < finished.index(("ask_0", "ok"))


async def test_events_report_start_and_finish() -> None:
    events: list[dict[str, Any]] = []
    flow = flow_of(a={**LLM, "inputs": ["input"]}, output={"kind": "output", "inputs": ["a"]})
    await run(FakeRouter(), flow, "hi", on_event=events.append)
    assert events == [{"event": "node_started", "node": "n1", "label": "a", "kind": "llm"},
                      {"event": "node_finished", "node": "n1", "label": "a", "kind": "llm", "outcome": "ok"}]


async def test_deadline_cancels_in_flight_calls_and_skips_later_model_nodes() -> None:
    async def slow(request: Any) -> Any:
        await asyncio.sleep(30)

    router = FakeRouter(decide=slow)
    flow = chain_flow(2, decision={"on_error": "input"}, llm={"on_error": "input"})
    started = time.monotonic()
    result = await run(router, flow, chain_input(2), budget_ms=100)
    assert time.monotonic() - started < 10
    assert sorted(router.cancelled) == ["decide", "decide"] and all(c.kind == "decide" for c in router.calls)
    kinds = {e["kind"]: e for e in result.flow_nodes}
    assert kinds["decision"]["error"] == "timeout: flow budget expired; call cancelled"
    assert kinds["llm"] == {"node": kinds["llm"]["node"], "kind": "llm", "inputs": kinds["llm"]["inputs"],
                            "skipped": True, "cost_reported": 0, "error": "flow_deadline", "fallback": "input"}
    # deterministic nodes still ran: the union assembled the fallbacks (each chain's input item)
    assert result.ok and result.output == {"q0": "item 0", "q1": "item 1"}
    assert result.cost_usd is None  # the cancelled decisions have unknown cost


async def test_expired_deadline_without_fallback_fails_with_flow_deadline() -> None:
    router = FakeRouter()
    flow = flow_of(a={**LLM, "inputs": ["input"]}, output={"kind": "output", "inputs": ["a"]})
    result = await run(router, flow, "hi", budget_ms=0)
    assert not result.ok and result.error_kind == "flow_deadline" and result.failed_node == "n1"
    assert result.flow_nodes == [{"node": "n1", "kind": "llm", "inputs": ["n0"], "skipped": True,
                                  "cost_reported": 0, "error": "flow_deadline"}]
    assert router.calls == [] and result.cost_usd == 0.0


async def test_failure_cancels_other_branches() -> None:
    async def slow_chat(request: Any) -> Any:
        await asyncio.sleep(30)

    router = FakeRouter(decide=lambda request: ProviderError("auth_error", "HTTP 401"), chat=slow_chat)
    flow = flow_of(
        slow={**LLM, "inputs": ["input"]},
        ask={"kind": "decision", "inputs": ["input"], "policy": POLICY,
             "questions": {"q": {"type": "noul", "instructions": "Sure?"}}},
        both={"kind": "data", "operation": "union", "inputs": ["slow", "ask"]},
        output={"kind": "output", "inputs": ["both"]})
    started = time.monotonic()
    result = await run(router, flow, {"x": 1})
    assert time.monotonic() - started < 10
    assert not result.ok and result.error_kind == "exhausted: auth_error"
    assert router.cancelled == ["chat"]
    cancelled = next(e for e in result.flow_nodes if e["kind"] == "llm")
    assert cancelled["error"] == f"cancelled: flow stopped at node {result.failed_node}"
    assert result.cost_usd is None


async def test_external_cancellation_propagates() -> None:
    async def slow(request: Any) -> Any:
        await asyncio.sleep(30)

    router = FakeRouter(chat=slow)
    flow = flow_of(a={**LLM, "inputs": ["input"]}, output={"kind": "output", "inputs": ["a"]})
    task = asyncio.create_task(run(router, flow, "hi"))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert router.cancelled == ["chat"]


async def test_untyped_flow_reads_the_last_user_message_and_the_conversation() -> None:
    router = FakeRouter(chat=lambda request: ChatResponse(text="4", tokens_in=1, tokens_out=1))
    conversation = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": [{"type": "text", "text": "2+2?"}]}]
    flow = flow_of(a={**LLM, "inputs": ["input"]}, output={"kind": "output", "inputs": ["a"]})
    result = await run(router, flow, conversation=conversation)
    assert result.output == "4"
    assert router.calls[0].request.messages == [
        *conversation, {"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]


async def test_prompt_views_sections_and_templates() -> None:
    router = FakeRouter(chat=lambda request: ChatResponse(text="done"))
    flow = flow_of(
        name={"kind": "data", "operation": "project", "inputs": ["input"], "path": ["name"]},
        facts={"kind": "data", "operation": "project", "inputs": ["input"], "path": ["facts"]},
        sections={**LLM, "inputs": ["name", "facts"]},
        templated={**LLM, "inputs": ["name", "facts"], "template": "Hi $1, see $2; $3$0 end $12"},
        both={**LLM, "inputs": ["sections", "templated"], "context": "inputs"},
        output={"kind": "output", "inputs": ["both"]})
    await run(router, flow, {"name": "Ada", "facts": {"born": 1815, "city": "Londön"}})
    prompts = {call.request.messages[-1]["content"] for call in router.calls}
    assert '[input 1]\nAda\n\n[input 2]\n{"born":1815,"city":"Londön"}' in prompts
    assert 'Hi Ada, see {"born":1815,"city":"Londön"};  end ' in prompts
    assert "[input 1]\ndone\n\n[input 2]\ndone" in prompts


async def test_a_node_embedding_json_text_shows_its_inputs_json_texts_as_json() -> None:
    """``embed_json_text`` (docs/behaviour.md "Node values"): an object's strings holding a JSON array or object are
    shown as that JSON, not quoted again, in a lone input's view, in sections and in a template; without it, quoted."""
    router = FakeRouter(chat=lambda request: ChatResponse(text="done"))
    items = {"a": '[{"role":"tool","content":"x\\"y"}]', "b": "plain"}
    flow = flow_of(items={"kind": "data", "operation": "project", "inputs": ["input"], "path": ["items"]},
                   lone={**LLM, "inputs": ["items"], "embed_json_text": True},
                   sections={**LLM, "inputs": ["items", "items"], "embed_json_text": True},
                   templated={**LLM, "inputs": ["items"], "template": "Items: $1", "embed_json_text": True},
                   quoted={**LLM, "inputs": ["items"]},
                   last={**LLM, "inputs": ["lone", "sections", "templated", "quoted"]},
                   output={"kind": "output", "inputs": ["last"]})
    await run(router, flow, {"items": items})
    shown = '{"a":[{"role":"tool","content":"x\\"y"}],"b":"plain"}'
    prompts = {call.request.messages[-1]["content"] for call in router.calls}
    assert {shown, f"[input 1]\n{shown}\n\n[input 2]\n{shown}", f"Items: {shown}",
            json.dumps(items, separators=(",", ":"))} < prompts


async def test_a_json_nodes_reply_bounds_reach_the_chat_request_as_data() -> None:
    router = FakeRouter(chat=lambda request: ChatResponse(text='{"a": "x"}'))
    bounded = {**LLM, "inputs": ["input"], "output_format": "json", "max_string_bytes": 40,
               "max_total_string_bytes": 70, "keep_names": ["src/a.py", "read_file"]}
    await run(router, flow_of(a=bounded, output={"kind": "output", "inputs": ["a"]}), "hello")
    (call,) = router.calls
    assert (call.request.json_mode, call.request.max_string_bytes, call.request.max_total_string_bytes) == (True, 40, 70)
    assert call.request.keep_names == ("src/a.py", "read_file")
    assert call.request.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]


async def test_proposed_tool_calls_are_shown_to_readers() -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]
    replies = iter([ChatResponse(text="run it", tool_calls=calls), ChatResponse(text="ok")])
    router = FakeRouter(chat=lambda request: next(replies))
    flow = flow_of(a={**LLM, "inputs": ["input"]}, b={**LLM, "inputs": ["a"]},
                   output={"kind": "output", "inputs": ["b"]})
    await run(router, flow, "go")
    assert router.calls[1].request.messages[-1]["content"] == (
        "run it\n\n[proposed tool calls]\n" + json.dumps(calls, separators=(",", ":")))


@pytest.mark.parametrize("text", ["I'm sorry, I can't help with that.", None])
async def test_a_refused_answer_is_no_text_output(text: str | None) -> None:
    # A refusal (finish_reason content_filter: OpenAI's refusal, Anthropic's stop_reason refusal, a guardrail) was
    # a text node's output: the refusal's words, or "" for OpenAI's, passed on as if the model had answered.
    router = FakeRouter(chat=lambda request: ChatResponse(text=text, finish_reason="content_filter", tokens_in=5,
                                                          tokens_out=2))
    plain = {**LLM, "inputs": ["input"]}
    failed = await run(router, flow_of(a=plain, output={"kind": "output", "inputs": ["a"]}), "hello")
    assert not failed.ok and failed.error_kind == "bad_response"
    assert "refused or filtered" in failed.error_message
    kept = await run(router, flow_of(a={**plain, "on_error": "input"}, output={"kind": "output", "inputs": ["a"]}),
                     "hello")
    assert kept.ok and kept.output == "hello" and kept.flow_nodes[0]["fallback"] == "input"


async def test_decision_with_several_inputs_gets_their_list_as_state() -> None:
    router = FakeRouter()
    flow = flow_of(
        a={"kind": "data", "operation": "project", "inputs": ["input"], "path": ["a"]},
        ask={"kind": "decision", "inputs": ["a", "input"], "policy": POLICY,
             "questions": {"q": {"type": "choice", "instructions": "Pick.", "criteria": {"x": "X"}}}},
        output={"kind": "output", "inputs": ["ask"]})
    result = await run(router, flow, {"a": "text"})
    assert router.calls[0].request.state == ["text", {"a": "text"}]
    assert result.output == {"q": {"type": "choice", "choice": "x", "confidence": 0.9}}


async def test_oversized_decision_state_fails_before_any_call() -> None:
    router = FakeRouter()
    flow = flow_of(ask={"kind": "decision", "inputs": ["input"], "policy": POLICY, "on_error": "input",
                        "questions": {"q": {"type": "noul", "instructions": "Ok?"}}},
                   output={"kind": "output", "inputs": ["ask"]})
    result = await run(router, flow, {"blob": "x" * 32_000})
    assert router.calls == []
    entry = result.flow_nodes[0]
    assert entry["error"] == "bad_request: Decision request exceeds 32000 bytes." and entry["cost_reported"] == 0
    assert result.ok and result.output == {"blob": "x" * 32_000} and result.cost_usd == 0.0


@pytest.mark.parametrize("empty", [{}, []])
async def test_skip_empty_passes_empty_values_through(empty: Any) -> None:
    router = FakeRouter()
    flow = flow_of(a={**LLM, "inputs": ["input"], "skip_empty": True}, output={"kind": "output", "inputs": ["a"]})
    result = await run(router, flow, empty)
    assert result.output == empty and router.calls == []
    assert result.flow_nodes[0]["skipped"] is True


async def test_json_output_may_be_any_json_value() -> None:
    router = FakeRouter(chat=lambda request: ChatResponse(text='[1, "two", {"3": null}]'))
    flow = flow_of(a={**LLM, "inputs": ["input"], "output_format": "json"}, output={"kind": "output", "inputs": ["a"]})
    result = await run(router, flow, "list please")
    assert result.output == [1, "two", {"3": None}]
    assert router.calls[0].request.json_mode


async def test_data_failure_without_fallback_stops_the_flow() -> None:
    flow = flow_of(a={"kind": "data", "operation": "project", "inputs": ["input"], "path": ["missing"]},
                   output={"kind": "output", "inputs": ["a"]})
    result = await run(FakeRouter(), flow, {"present": 1})
    assert not result.ok and result.error_kind == "data_error"
    assert result.error_message == "data_error: project: missing key 'missing' at step 1"
    assert result.cost_usd == 0.0


async def test_input_straight_to_output() -> None:
    result = await run(FakeRouter(), flow_of(output={"kind": "output", "inputs": ["input"]}), {"k": "v"})
    assert result.ok and result.output == {"k": "v"} and result.flow_nodes == []


async def test_eager_and_lazy_task_starts_give_the_same_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instant, later and failing calls, fallbacks and a failure that stops the flow: the same trace, values,
    events and calls whether node tasks start eagerly or on the loop's next step (eagerly, a round whose
    calls all finished at once is settled without waiting on the loop: docs/performance.md)."""
    def decide(request: Any) -> Any:
        if "fail" in json.dumps(request.state):
            return ProviderError("upstream_error", "HTTP 500")
        return DecisionResponse(model="m", answers={name: {"type": "choice", "choice": "yes", "confidence": 0.9}
                                                    for name in request.questions}, tokens_in=3, tokens_out=1)

    async def chat(request: Any) -> Any:
        prompt = request.messages[-1]["content"]
        if "boom" in prompt:
            return ProviderError("auth_error", "HTTP 401")
        if "wait" in prompt:  # answers on a later step of the loop: its task is not done when it starts
            await asyncio.sleep(0)
        return ChatResponse(text=json.dumps({"echo": prompt[:20]}), finish_reason="stop", tokens_in=5, tokens_out=2)

    question = {"q": {"type": "choice", "instructions": "Keep?", "criteria": {"yes": "keep", "no": "drop"}}}
    flows = [
        (chain_flow(4, decision={"on_error": "input"}, llm={"on_error": "input"}), chain_input(4)),
        (flow_of(a={**LLM, "inputs": ["input"], "output_format": "json"},
                 b={**LLM, "inputs": ["input"], "output_format": "json", "on_error": "input"},
                 d={"kind": "decision", "inputs": ["input"], "policy": POLICY, "questions": question},
                 both={"kind": "data", "operation": "union", "inputs": ["a", "b", "d"]},
                 output={"kind": "output", "inputs": ["both"]}), {"x": "fail boom"}),
        (flow_of(a={**LLM, "inputs": ["input"], "output_format": "json"},
                 d={"kind": "decision", "inputs": ["input"], "policy": POLICY, "questions": question},
                 both={"kind": "data", "operation": "union", "inputs": ["a", "d"]},
                 output={"kind": "output", "inputs": ["both"]}), {"x": "fine"}),
        # one call answers at once, another a step later, and a failure beside them
        (flow_of(a={**LLM, "inputs": ["input"], "output_format": "json"},
                 w={**LLM, "inputs": ["input"], "output_format": "json", "template": "wait $1"},
                 d={"kind": "decision", "inputs": ["input"], "policy": POLICY, "questions": question},
                 both={"kind": "data", "operation": "union", "inputs": ["a", "w", "d"]},
                 output={"kind": "output", "inputs": ["both"]}), {"x": "fail"}),
        (flow_of(a={**LLM, "inputs": ["input"], "output_format": "json"},
                 w={**LLM, "inputs": ["input"], "output_format": "json", "template": "wait $1"},
                 both={"kind": "data", "operation": "union", "inputs": ["a", "w"]},
                 output={"kind": "output", "inputs": ["both"]}), {"x": "fine"}),
    ]
    can_start_eagerly = scheduler.EAGER_START  # (read once: each pass below sets it)
    for flow, flow_input in flows:
        seen = []
        for eager in (True, False):
            monkeypatch.setattr(scheduler, "EAGER_START", eager and can_start_eagerly)
            router, events = FakeRouter(decide=decide, chat=chat), []
            result = await run(router, flow, flow_input, on_event=events.append)
            seen.append((result, events, [(c.kind, c.request) for c in router.calls]))
        assert seen[0] == seen[1]


async def test_start_task_runs_to_the_first_wait_at_once_only_when_eager(task_start: bool) -> None:
    """Eager (Python 3.12+, no custom task factory): the node's coroutine has run up to its first wait when
    ``start_task`` returns; lazy, or under a custom task factory: it has not started yet. Both finish alike."""
    steps: list[str] = []

    async def node() -> str:
        steps.append("started")
        await asyncio.sleep(0)
        return "done"

    task = scheduler.start_task(node())
    assert steps == (["started"] if task_start and scheduler.EAGER_START else [])
    assert await task == "done" and steps == ["started"]

    loop = asyncio.get_running_loop()
    loop.set_task_factory(lambda loop, coro, **kwargs: asyncio.Task(coro, loop=loop, **kwargs))
    try:
        steps.clear()
        task = scheduler.start_task(node())
        assert steps == []
        assert await task == "done" and steps == ["started"]
    finally:
        loop.set_task_factory(None)
