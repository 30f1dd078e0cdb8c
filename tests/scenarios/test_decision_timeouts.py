"""Decision mode through ``compactor serve``: a model that does not answer within the shared flow budget
(``COMPACTOR_FLOW_BUDGET_MS``, docs/behaviour.md#budgets) keeps its batch's units and makes the cost unknown."""

from __future__ import annotations

import time

import pytest

from fakes.provider_server import RecordedRequest

from .conftest import Stack
from .helpers import bulky, model_nodes, summary

BUDGET_MS = 1500
SLOW_S = 5.0
SYSTEM = {"role": "system", "content": "Be careful."}
TASK = {"role": "user", "content": "Fix the bug."}
DONE = {"role": "assistant", "content": "Done."}


@pytest.fixture
def short_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_FLOW_BUDGET_MS", str(BUDGET_MS))


def slow_when(path_suffix: str, marker: str | None = None):
    def delay(request: RecordedRequest) -> float:
        hit = request.path.endswith(path_suffix) and (marker is None or marker.encode() in request.body)
        return SLOW_S if hit else 0.0

    return delay


def test_decision_model_timeout_keeps_everything_and_cost_is_unknown(stack: Stack, short_budget: None) -> None:
    messages = [SYSTEM, TASK, bulky(2), bulky(3), DONE]
    stack.script.delay_for = slow_when("/decisions")

    started = time.monotonic()
    body = stack.compact(messages, keep_recent=1)
    elapsed = time.monotonic() - started

    assert elapsed < SLOW_S  # the call was cancelled at the budget, not waited for
    assert body["messages"] == messages and body["compacted"] is False
    assert [f["action"] for f in body["compaction"]["fragments"]] == ["keep"] * 5
    assert body["x_router"]["cost_usd"] is None and body["x_router"]["cost_basis"] is None
    assert "usage" not in body  # nothing reported any tokens
    classify, = model_nodes(body, "decision")
    assert classify["fallback"] == "input" and "timeout" in classify["error"]
    generate, = model_nodes(body, "llm")
    assert generate["skipped"] is True and generate["cost_reported"] == 0
    assert stack.requests("chat") == []


def test_summary_model_timeout_keeps_its_batch_and_cost_is_unknown(stack: Stack, short_budget: None) -> None:
    messages = [SYSTEM, TASK, *(bulky(i) for i in range(2, 12)), DONE]  # batches 2–9 and 10–11
    stack.script.delay_for = slow_when("/chat/completions", "fragment_10")

    body = stack.compact(messages, keep_recent=1)

    assert body["messages"] == [*messages[:2], *(summary(f"fragment_{i}", f"Evidence fragment_{i}") for i in range(2, 10)),
                                *messages[10:]]
    assert [f["action"] for f in body["compaction"]["fragments"]] == ["keep"] * 2 + ["summarize"] * 8 + ["keep"] * 3
    assert body["x_router"]["cost_usd"] is None and body["x_router"]["cost_basis"] is None
    assert body["usage"]["prompt_tokens"] == 2 * 20 + 10  # two decisions and the one summary that answered
    late = [n for n in model_nodes(body, "llm") if n.get("fallback")]
    assert len(late) == 1 and "timeout" in late[0]["error"] and "cost_reported" not in late[0]
    assert len(stack.requests("summaries")) == 2
