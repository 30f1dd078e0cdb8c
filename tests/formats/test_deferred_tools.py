"""A unit that loads deferred tools (in ``anthropic-messages`` a tool search answered with ``tool_reference``
blocks, as Claude Code's ToolSearch is; in ``openai-responses`` a ``tool_search_call`` with its
``tool_search_output``) is kept whole by every mode, so the later calls of those tools still find them loaded
(docs/formats.md "Deferred tools")."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor.compaction.mask import mask
from compactor.compaction.seal import plan_seal
from compactor.container import run_sync
from compactor.formats import get_dialect
from compactor.models import CompactRequest
from compactor.service import compact_call, request_deadline
from compactor.transcripts import read_transcript
from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event, decision_policy
from .validity import (CLAUDE_CODE, PROBLEMS, calls_to_unloaded_tools, cdump, claude_code_messages,
                       outputs_without_their_reasoning, responses_calls_to_unloaded_tools)

ANTHROPIC = get_dialect("anthropic-messages")
SEARCH = 5  # where the tool search's unit starts in _session(): its call, then its result


def _call(n: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": [
        {"type": "thinking", "thinking": f"what to do next, {n} " * 20, "signature": f"sig{n}"},
        {"type": "text", "text": f"Now {name}. " * 8},
        {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": tool_input}]}


def _result(n: str, content: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": content}]}


def _session() -> list[dict[str, Any]]:
    """A prompt, two reads, a tool search loading TaskCreate and TaskUpdate, six TaskCreate calls, a human
    turn, then four TaskUpdate calls: the search's unit sits in the middle, the calls of its tools after it."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Plan the repository sync as tasks, then do them."}]
    for n in range(2):
        items += [_call(f"r{n}", "Read", {"file_path": f"src/sync{n}.py"}), _result(f"r{n}", f"line of sync{n} " * 80)]
    items += [_call("search", "ToolSearch", {"query": "select:TaskCreate,TaskUpdate", "max_results": 5}),
              _result("search", [{"type": "tool_reference", "tool_name": "TaskCreate"},
                                 {"type": "tool_reference", "tool_name": "TaskUpdate"}])]
    for n in range(6):
        items += [_call(f"c{n}", "TaskCreate", {"subject": f"Sync step {n}", "description": "details " * 40}),
                  _result(f"c{n}", f"Task #{n} created successfully " * 30)]
    items += [{"role": "assistant", "content": [{"type": "text", "text": "Six tasks planned."}]},
              {"role": "user", "content": "Go ahead."}]
    for n in range(4):
        items += [_call(f"u{n}", "TaskUpdate", {"taskId": str(n), "status": "completed"}),
                  _result(f"u{n}", f"Updated task #{n} status " * 30)]
    return items


def _compact(module: ModuleType, context: LocalLambdaContext, body: dict[str, Any]) -> dict[str, Any]:
    response = module.handler(api_event("/compact", body), context)
    assert response["statusCode"] == 200, response["body"]
    return json.loads(response["body"])


def _valid(items: list[dict[str, Any]], output: list[dict[str, Any]]) -> None:
    """Valid for the API (every tool_use answered right after it) and every deferred tool called still loaded."""
    assert PROBLEMS["anthropic-messages"](output) == []
    assert calls_to_unloaded_tools(items, output) == []


def _search_kept_whole(items: list[dict[str, Any]], output: list[dict[str, Any]]) -> None:
    """The search's call and its result come back as they were, the result right after the call."""
    texts = [cdump(m) for m in output]
    at = texts.index(cdump(items[SEARCH]))
    assert texts[at + 1] == cdump(items[SEARCH + 1])


@pytest.mark.parametrize("pinned_indices", [None, []])
def test_decision_keeps_the_unit_loading_deferred_tools(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, pinned_indices: list[int] | None) -> None:
    """Before, the search's unit was a candidate like any other: at a low target it was summarized, and the
    TaskCreate and TaskUpdate calls kept after it called tools no longer loaded."""
    items = _session()
    request: dict[str, Any] = {"format": "anthropic-messages", "messages": items, "keep_recent": 1,
                               "target_ratio": 0.01, "decision_policy_ir": decision_policy()}
    if pinned_indices is not None:
        request["pinned_indices"] = pinned_indices
    body = _compact(compact_module, lambda_context, request)

    output = body["messages"]
    assert body["compacted"] is True
    _valid(items, output)
    _search_kept_whole(items, output)
    entry = next(e for e in body["compaction"]["fragments"] if e["start"] == SEARCH)
    assert (entry["end"], entry["action"], entry["reason"]) == (SEARCH + 2, "keep", "pinned")
    assert sum(e["action"] != "keep" for e in body["compaction"]["fragments"]) >= 8  # the rest still compacts


def test_seal_holds_the_unit_loading_deferred_tools_whole_after_its_summary(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """Before, seal sealed the search into its summary (and holding only its result, as an always-pinned item of
    the middle is held, would have orphaned it from its call): the later calls used tools no longer loaded."""
    items = _session()
    plan = plan_seal(items, keep_recent=2, dialect=ANTHROPIC)
    assert plan is not None and plan.frozen == items[:1] and plan.held == items[SEARCH:SEARCH + 2]

    body = _compact(compact_module, lambda_context, {"format": "anthropic-messages", "messages": items,
                                                     "mode": "seal", "keep_recent": 2})
    output = body["messages"]
    assert body["compacted"] is True
    _valid(items, output)
    assert "[Earlier conversation, sealed summary]" in cdump(output[1])
    assert [cdump(m) for m in output[2:4]] == [cdump(m) for m in items[SEARCH:SEARCH + 2]]


def test_mask_leaves_the_whole_unit_loading_deferred_tools_alone() -> None:
    items = _session()
    output, masked = mask(items, keep_recent=1, pinned_indices=[], dialect=ANTHROPIC)

    assert SEARCH + 1 not in {m.index for m in masked} and output[SEARCH:SEARCH + 2] == items[SEARCH:SEARCH + 2]
    _valid(items, output)


def test_a_server_tool_search_result_loads_tools_too() -> None:
    """The Messages API's own tool search answers in the assistant message (``server_tool_use`` and a
    ``tool_search_tool_result`` whose ``content.tool_references`` are ``tool_reference`` blocks): its unit is kept
    whole too, and a tool result without references is not."""
    search = {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_regex",
         "input": {"query": "weather"}},
        {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1", "content": {
            "type": "tool_search_tool_search_result",
            "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}]}},
        {"type": "tool_use", "id": "toolu_w", "name": "get_weather", "input": {"location": "Oslo"}}]}
    items = [{"role": "user", "content": "Weather in Oslo?"}, _call("r", "Read", {"file_path": "a"}),
             _result("r", [{"type": "text", "text": "plain"}]), search, _result("w", "rain"),
             {"role": "assistant", "content": "Rain."}]

    assert ANTHROPIC.always_pinned(items) == {0, 3, 4}


def test_the_corpus_session_keeps_its_tool_searches_in_every_mode(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """The corpus's Claude Code 2.1.179 session: a ToolSearch (messages 25 to 28) loads TaskCreate, TaskUpdate and
    TaskList, and 18 calls of them follow; a later one (the unit of messages 159 to 161) loads Monitor. Before,
    decision summarized the first search's unit, and a seal keeping the last 130 messages sealed it while 16 of
    those calls stayed."""
    items = claude_code_messages(CLAUDE_CODE)
    requests = [("decision", {"target_ratio": 0.05, "decision_policy_ir": decision_policy()}),
                ("seal", {"keep_recent": 4}), ("seal", {"keep_recent": 130}), ("mask", {})]
    for mode, extra in requests:
        body = _compact(compact_module, lambda_context, {"format": "anthropic-messages", "messages": items,
                                                         "mode": mode, **extra})
        output = body["messages"]
        assert body["compacted"] is True, (mode, extra)
        assert calls_to_unloaded_tools(items, output) == [], (mode, extra)
        assert PROBLEMS["anthropic-messages"](output) == [], (mode, extra)
        texts = [cdump(m) for m in output]
        for start, end in ((25, 29), (159, 162)):  # each search's unit comes back whole, in order
            at = texts.index(cdump(items[start]))
            assert texts[at:at + end - start] == [cdump(m) for m in items[start:end]], (mode, extra, start)


def test_a_sealed_claude_code_session_chains_the_held_search_between_summary_and_tail() -> None:
    """Written back as a session file, the held search's records keep their lines after the sealed summary's, and
    Claude Code's ``parentUuid`` chain, followed back from the last record on resume, holds every message."""
    transcript = read_transcript(CLAUDE_CODE.read_text(encoding="utf-8"))
    request = CompactRequest.model_validate({**transcript.compact_body(mode="seal"), "keep_recent": 130})
    record = run_sync(compact_call(request, deadline=request_deadline()))
    assert record.status == 200 and record.body["compacted"] is True
    written = transcript.write_back(record)
    assert written is not None

    records = [json.loads(line) for line in written.splitlines()]
    by_uuid = {r["uuid"]: r for r in records if isinstance(r.get("uuid"), str)}
    chain, current = [], [r for r in records if r.get("type") in ("user", "assistant")][-1]
    while current is not None:
        chain.append(current)
        current = by_uuid.get(current.get("parentUuid"))
    messages = [r["message"] for r in reversed(chain) if r.get("type") in ("user", "assistant")]
    assert messages == record.body["messages"]
    assert messages[2:6] == transcript.items[25:29]
    assert calls_to_unloaded_tools(transcript.items, messages) == []


RESPONSES = get_dialect("openai-responses")
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather of a city.", "defer_loading": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _responses_cycle(n: str, name: str) -> list[dict[str, Any]]:
    return [{"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"opaque {n}"},
            {"type": "function_call", "call_id": f"call_{n}", "name": name, "arguments": f'{{"city": "city {n}"}}'},
            {"type": "function_call_output", "call_id": f"call_{n}", "output": f"forecast {n} " * 60}]


def _responses_session(execution: str) -> list[dict[str, Any]]:
    """A prompt, one lookup, a tool search loading ``get_weather`` (executed by the client, answered by its
    ``call_id``, or by the server, both ids null), six calls of it, a human turn and three more calls."""
    call_id = "ts_1" if execution == "client" else None
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "Plan the week's trips by weather."},
                                   *_responses_cycle("l", "lookup_trips")]
    items += [{"type": "reasoning", "id": "rs_search", "summary": [], "encrypted_content": "opaque search"},
              {"type": "tool_search_call", "id": "tsc_1", "call_id": call_id, "execution": execution,
               "arguments": {"paths": ["get_weather"]}, "status": "completed"},
              {"type": "tool_search_output", "id": "tso_1", "call_id": call_id, "execution": execution,
               "tools": [WEATHER], "status": "completed"}]
    for n in range(6):
        items += _responses_cycle(f"w{n}", "get_weather")
    items += [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Planned."}]},
              {"type": "message", "role": "user", "content": "And next week?"}]
    for n in range(3):
        items += _responses_cycle(f"x{n}", "get_weather")
    return items


def _responses_valid(items: list[dict[str, Any]], output: list[dict[str, Any]]) -> None:
    assert PROBLEMS["openai-responses"](output) == []
    assert outputs_without_their_reasoning(items, output) == []
    assert responses_calls_to_unloaded_tools(items, output) == []
    texts = [cdump(item) for item in output]
    at = texts.index(cdump(items[4]))  # the search's reasoning, call and output, together
    assert texts[at:at + 3] == [cdump(item) for item in items[4:7]]


@pytest.mark.parametrize("execution", ["client", "server"])
def test_responses_decision_and_seal_keep_a_tool_search_whole(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, execution: str) -> None:
    """Before, a ``tool_search_output`` answered no call: a client-executed search's call and output were two
    units (the call's unit took in nothing after it), and neither was protected, so decision summarized them (or
    kept the output without its call) and seal sealed them while the ``get_weather`` calls after them stayed."""
    items = _responses_session(execution)
    assert PROBLEMS["openai-responses"](items) == []

    decided = _compact(compact_module, lambda_context, {
        "format": "openai-responses", "input": items, "keep_recent": 1, "target_ratio": 0.01,
        "decision_policy_ir": decision_policy()})
    assert decided["compacted"] is True
    _responses_valid(items, decided["input"])

    sealed = _compact(compact_module, lambda_context, {"format": "openai-responses", "input": items,
                                                       "mode": "seal", "keep_recent": 20})
    assert sealed["compacted"] is True
    _responses_valid(items, sealed["input"])
    assert "[Earlier conversation, sealed summary]" in cdump(sealed["input"][0])
    units = [(u.start, u.end) for u in RESPONSES.split_units(items) if u.start <= 6 and u.end > 4]
    assert units == ([(4, 7)] if execution == "client" else [(4, 6), (6, 7)])  # the output answers its call
    assert set(range(4, 7)) <= RESPONSES.always_pinned(items)
