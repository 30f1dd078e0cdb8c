"""Property tests of decision mode in the Anthropic Messages and OpenAI Responses formats, with the
adversarial scripted models of ``fakes`` behind the real Router, flow runtime and compaction code.

The invariants are the format-independent ones of docs/formats.md, recomputed here from the items
(calls and results read straight from the blocks and items, nothing imported from ``compactor.formats``):
units partition the items and never part a call from a result; protected items (tail, pins, the
human's turns, system/developer items) are kept; kept units come back byte-identical and a summary is
one item of the format's shape; the output is valid in its format; no hidden reasoning reaches a
model; byte figures are the dense sizes of the items arrays; nothing to compact is a byte-identical
round trip.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, strategies as st

from compactor import service
from compactor.budget import Deadline
from compactor.compaction.preset import load_preset
from compactor.models import CompactRequest

from .fakes import Script, ScriptedTransport, scripted_router
from .invariants import SUMMARY_MARKER, cdump, csize
from .strategies import FAST, TEXT, HUGE, MEDIUM
from .test_decision_properties import scripts

DECISION_POLICY = load_preset()["flow"][1]["classify"]["policy"]
SECRET = "HIDDEN-REASONING-7f3a"
BODY = st.one_of(TEXT, MEDIUM, HUGE)


# -- generated transcripts -------------------------------------------------------------------------

@st.composite
def anthropic_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    kind = draw(st.sampled_from(["human", "text", "tools", "tools", "split"]))
    if kind == "human":
        return [{"role": "user", "content": draw(st.one_of(BODY, st.builds(lambda t: [{"type": "text", "text": t}], BODY)))}]
    thinking = [{"type": "thinking", "thinking": SECRET + draw(TEXT), "signature": "sig"}] if draw(st.booleans()) else []
    if kind == "text":
        return [{"role": "assistant", "content": thinking + [{"type": "text", "text": draw(BODY)}]}]
    n = draw(st.integers(1, 3))
    uses = [{"type": "tool_use", "id": None, "name": "Bash", "input": {"cmd": draw(TEXT)}} for _ in range(n)]
    answered = draw(st.permutations(range(n)))[:draw(st.integers(0, n))] if draw(st.integers(0, 4)) == 0 \
        else list(range(n))
    results = [{"type": "tool_result", "tool_use_id": i, "content": draw(BODY)} for i in answered]
    if kind == "split":  # Claude Code: one record per block, sharing the response's id
        head = [{"role": "assistant", "id": "msg", "content": [block]} for block in thinking + uses]
        return head + [{"role": "user", "content": [r]} for r in results]
    return [{"role": "assistant", "content": thinking + uses}] + ([{"role": "user", "content": results}] if results else [])


@st.composite
def responses_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    kind = draw(st.sampled_from(["user", "assistant", "developer", "tools", "tools"]))
    if kind != "tools":
        part = "output_text" if kind == "assistant" else "input_text"
        return [{"type": "message", "role": kind, "content": [{"type": part, "text": draw(BODY)}]}]
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": SECRET + draw(TEXT)}],
                    "encrypted_content": "opaque"})
    if draw(st.booleans()):  # a preamble: the response's message before its calls (Codex)
        out.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": draw(BODY)}]})
    n = draw(st.integers(1, 3))
    calls = [draw(st.sampled_from([("function_call", "arguments"), ("custom_tool_call", "input")])) for _ in range(n)]
    out += [{"type": kind_, "call_id": i, "name": "exec", key: draw(TEXT)} for i, (kind_, key) in enumerate(calls)]
    answered = list(range(n)) if draw(st.integers(0, 4)) else draw(st.permutations(range(n)))[:draw(st.integers(0, n))]
    out += [{"type": calls[i][0] + "_output", "call_id": i,
             "output": draw(st.one_of(BODY, st.builds(lambda t: [{"type": "input_text", "text": t}], BODY)))}
            for i in answered]
    return out


def _number(turns: list[list[dict[str, Any]]], fmt: str) -> list[dict[str, Any]]:
    """Unique call ids: each turn's calls are numbered 0.. locally, and its results point at them."""
    out, counter = [], 0
    call_key, ref_key = ("id", "tool_use_id") if fmt == "anthropic-messages" else ("call_id", "call_id")
    for turn in turns:
        blocks = [b for item in turn for b in (item["content"] if fmt == "anthropic-messages"
                                                and isinstance(item.get("content"), list) else [item])]
        local = 0
        ids: dict[int, str] = {}
        for block in blocks:
            if block.get("type") in ("tool_use", "function_call", "custom_tool_call"):
                ids[local] = block[call_key] = f"call_{counter}"
                local, counter = local + 1, counter + 1
        for block in blocks:
            if str(block.get("type", "")).endswith(("tool_result", "_output")):
                block[ref_key] = ids[block[ref_key]]
        out += turn
    return out


@st.composite
def requests(draw: st.DrawFn, fmt: str) -> dict[str, Any]:
    turns = anthropic_turns() if fmt == "anthropic-messages" else responses_turns()
    items = _number(draw(st.lists(turns, min_size=3, max_size=18)), fmt)
    pins = sorted(draw(st.sets(st.integers(0, len(items) - 1), max_size=3))) if draw(st.booleans()) else None
    return {"format": fmt, "messages": items, "keep_recent": draw(st.integers(-1, 6)),
            "target_ratio": draw(st.sampled_from([0.01, 0.1, 0.5, 1.0])), "pinned_indices": pins}


# -- reading items independently ---------------------------------------------------------------------

def calls_and_results(item: dict[str, Any], fmt: str) -> tuple[set[str], set[str]]:
    if fmt == "openai-responses":
        kind, call = str(item.get("type", "")), item.get("call_id")
        return ({call} if kind.endswith("_call") else set()), ({call} if kind.endswith("_call_output") else set())
    blocks = item["content"] if isinstance(item.get("content"), list) else []
    return ({b["id"] for b in blocks if b.get("type") == "tool_use"},
            {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"})


def unanswered_results(items: list[dict[str, Any]], fmt: str) -> set[str]:
    made, orphans = set(), set()
    for item in items:
        calls, results = calls_and_results(item, fmt)
        made |= calls
        orphans |= results - made
    return orphans


def always_and_default_pins(items: list[dict[str, Any]], fmt: str) -> tuple[set[int], set[int]]:
    if fmt == "openai-responses":
        return ({i for i, m in enumerate(items) if m.get("role") in ("system", "developer")},
                {i for i, m in enumerate(items) if m.get("role") == "user"})
    human = {i for i, m in enumerate(items) if m["role"] == "user" and (
        not isinstance(m["content"], list) or any(b.get("type") != "tool_result" for b in m["content"]))}
    return set(), human


def summary_text(item: dict[str, Any], fmt: str) -> str:
    assert item["role"] == "assistant"
    if fmt == "openai-responses":
        assert item["type"] == "message" and [p["type"] for p in item["content"]] == ["output_text"]
    else:
        assert set(item) == {"role", "content"} and [b["type"] for b in item["content"]] == ["text"]
    return item["content"][0]["text"]


def run(req: dict[str, Any], transport: ScriptedTransport) -> tuple[int, dict[str, Any]]:
    body = dict(req)
    if req["format"] == "openai-responses":
        body["input"] = body.pop("messages")
    request = CompactRequest(**body, decision_policy_ir=DECISION_POLICY)

    async def go() -> tuple[int, dict[str, Any]]:
        return await service.compact(request, deadline=Deadline.after_ms(600_000), router=scripted_router(transport))

    return asyncio.run(go())


def check(req: dict[str, Any], body: dict[str, Any], transport: ScriptedTransport) -> None:
    fmt, items = req["format"], req["messages"]
    field = "input" if fmt == "openai-responses" else "messages"
    assert set(body) <= {field, "compacted", "compaction", "usage", "x_router"}
    output, report = body[field], body["compaction"]
    manifest = report["fragments"]

    # units partition the items, and a result is always in the unit of its call
    assert [e["start"] for e in manifest] == [0] + [e["end"] for e in manifest[:-1]] and manifest[-1]["end"] == len(items)
    where = {}
    for entry in manifest:
        for i in range(entry["start"], entry["end"]):
            for call in calls_and_results(items[i], fmt)[0]:
                where[call] = entry["start"]
    for entry in manifest:
        for i in range(entry["start"], entry["end"]):
            for result in calls_and_results(items[i], fmt)[1]:
                assert where.get(result, entry["start"]) == entry["start"], f"result {result} parted from its call"

    # protected items are kept
    always, default = always_and_default_pins(items, fmt)
    protected = always | (set(req["pinned_indices"]) if req["pinned_indices"] is not None else default)
    protected |= set(range(max(0, len(items) - max(1, req["keep_recent"])), len(items)))
    for entry in manifest:
        if protected & set(range(entry["start"], entry["end"])):
            assert entry["action"] == "keep", entry

    # kept units byte-identical, a summary one item of the format's shape, an archive nothing
    pos = 0
    for entry in manifest:
        unit = items[entry["start"]:entry["end"]]
        if entry["action"] == "keep":
            assert cdump(output[pos:pos + len(unit)]) == cdump(unit)
            pos += len(unit)
        elif entry["action"] == "summarize":
            assert summary_text(output[pos], fmt).startswith(SUMMARY_MARKER.format(id=entry["id"]))
            pos += 1
    assert pos == len(output)

    # valid in the format: every result answers a call made before it (as it did in the input)
    assert unanswered_results(output, fmt) <= unanswered_results(items, fmt)

    # a kept message or call of a response that began with reasoning keeps that reasoning (the Responses API
    # refuses it without); a response is the reasoning and the assistant messages and calls right after it
    if fmt == "openai-responses":
        needs, reasoning = {}, None
        for index, item in enumerate(items):
            kind = item.get("type", "message")
            if kind == "reasoning":
                reasoning = index
            elif reasoning is not None and (kind.endswith("_call") or (kind == "message" and item["role"] == "assistant")):
                needs[index] = reasoning
            else:
                reasoning = None
        kept = {i for e in manifest if e["action"] == "keep" for i in range(e["start"], e["end"])}
        assert all(needs[i] in kept for i in kept if i in needs), "a kept item lost its response's reasoning"

    # no hidden reasoning reaches a model
    assert all(SECRET not in cdump(call.items) for call in transport.chats)

    # byte accounting
    assert report["original_bytes"] == csize(items) and report["output_bytes"] == csize(output)
    assert csize(output) <= csize(items)
    assert body["compacted"] is (output != items)


@given(req=st.sampled_from(["anthropic-messages", "openai-responses"]).flatmap(requests), script=scripts())
@FAST
def test_decision_invariants_hold_in_every_format(req: dict[str, Any], script: Script) -> None:
    transport = ScriptedTransport(script)
    status, body = run(req, transport)
    assert status == 200, body
    check(req, body, transport)


@given(req=st.sampled_from(["anthropic-messages", "openai-responses"]).flatmap(requests))
@FAST
def test_nothing_to_compact_is_a_byte_identical_round_trip(req: dict[str, Any]) -> None:
    req = {**req, "keep_recent": len(req["messages"])}
    status, body = run(req, ScriptedTransport(Script(["summarize"], ["answer"], ["short"], ["object"])))
    field = "input" if req["format"] == "openai-responses" else "messages"
    assert status == 200 and body["compacted"] is False and cdump(body[field]) == cdump(req["messages"])
