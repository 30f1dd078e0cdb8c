"""A call priced with a default cache price (an offer without ``price_cached_in`` / ``price_cache_write`` whose answer
read or wrote a cache) says so in its billing line (``default_cache_prices``), as its traces do, so that an invoice can
be checked (docs/billing.md "Prices the catalog does not state"). It was said only in the traces and by
``compactor doctor``."""

from __future__ import annotations

from typing import Any

import pytest

from compactor.budget import Deadline
from compactor.call_record import NodeOutcome
from compactor.compaction.windows import RunState
from compactor.models import CompactRequest
from compactor.providers.base import ChatResponse, Offer
from compactor.service import compact_call
from compactor_aws import observability

from ..s3.conftest import transcript
from ..unit.test_routing import make_router


def seal_line(**stated: Any) -> dict[str, Any]:
    """The billing line of a seal whose one model answer read 600 tokens from a cache, its offer stating ``stated``."""
    import asyncio

    offer = Offer(id="a", provider="a", family="f", model="f", protocol="chat", transport="openai", price_in=1.0,
                  price_out=2.0, **stated)
    answer = ChatResponse(text="the summary", tokens_in=1000, tokens_out=50, tokens_cached=600)
    router, _, _, _ = make_router([offer], {"a": lambda o, n: answer})
    request = CompactRequest.model_validate({"messages": transcript(), "mode": "seal"})
    record = asyncio.run(compact_call(request, router=router, deadline=Deadline.after_ms(30_000)))
    assert record.status == 200 and record.model_calls == 1 and record.cost_usd
    return observability.summarize(record).billing_record()["billing"]


def test_a_seal_priced_with_the_default_cached_input_price_says_so_on_its_billing_line() -> None:
    assert list(seal_line()["default_cache_prices"]) == ["price_cached_in"]  # was absent
    assert list(seal_line(price_cached_in=0.5)["default_cache_prices"]) == []


@pytest.mark.parametrize("where", ["decision_trace", "routing"])
def test_a_flow_nodes_default_cache_prices_are_its_records(where: str) -> None:
    """A model node's call (or its routing decision's), and a rejected answer priced from its usage before it."""
    trace = {"decision_path": [{"event": "attempted", "error_kind": "reasoning_exhausted",
                                "default_cache_prices": ["price_cache_write"]}, {"event": "attempted"}],
             "default_cache_prices": ["price_cached_in"]}
    entry = {"node": "n", "kind": "llm", **({"decision_trace": trace} if where == "decision_trace"
                                            else {"routing": {"decision_trace": trace}})}
    node = NodeOutcome.from_trace(entry)
    assert node.default_cache_prices == ("price_cache_write", "price_cached_in")


def test_a_windowed_runs_record_says_what_its_windows_priced_by_default() -> None:
    from compactor.compaction.windowed import run_record
    from compactor.compaction.windows import PassAssembly

    from compactor.compaction.windows import Settings

    state = RunState.begin(Settings())
    state.scan([{"role": "user", "content": "x" * 100}])
    assembly = PassAssembly(state.input_bytes, lambda message: None, None)
    task = {"messages": [{"role": "user", "content": "x" * 100}], "offset": 0}
    assembly.add(task, {"messages": task["messages"], "actions": {"keep": 1, "summarize": 0, "archive": 0},
                        "reasons": [], "tokens_in": 10, "tokens_out": 1, "cost_usd": 0.1, "model_calls": 1,
                        "default_cache_prices": ["price_cached_in"]})
    state.finish_pass(assembly)
    restored = RunState.from_dict(state.as_dict())  # the state a windowed job's steps save and read
    line = observability.summarize(run_record(restored, [])).billing_record()["billing"]
    assert list(line["default_cache_prices"]) == ["price_cached_in"]



def test_the_line_of_an_entry_billed_late_does_not_say_every_price_was_stated() -> None:
    """The line an invocation writes for an entry whose call it did not compute (a replay, a retry, the on-failure
    destination) cannot know the call's default cache prices (the entry does not keep them): null, as its tokens are.
    It said ``[]``, "every price stated", of a call whose cost may have used the defaults."""
    from compactor.billing import billing_facts, make_entry

    class Logger:
        lines: list[dict[str, Any]] = []

        def info(self, message: str, extra: dict[str, Any]) -> None:
            self.lines.append(extra["billing"])

    facts = billing_facts(route="s3_compact", mode="decision", bytes_in=9, bytes_out=3, model_calls=2, cost_usd=0.5)
    observability.write_entry_line(Logger(), make_entry(entry_id="s3:x", api_key_id="k", facts=facts,
                                                        time="2026-12-03T00:00:00.000000Z"))
    [line] = Logger.lines
    assert line["billed"] is True and line["tokens_in"] is None
    assert line["default_cache_prices"] is None  # before: []
