"""Bad input on every POST route and on the S3 path: never a 5xx, always a clear message, nothing lost.

The real CompactFunction handler answers over the bundled offline catalog, so every case runs the whole
path (body parsing, validation, compaction or flow admission) without a network. See docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import json
from types import ModuleType
from typing import Any

import pytest

from compactor.budget import Deadline
from compactor.compaction.preset import load_preset
from compactor.jsonutil import MAX_BODY_DEPTH, dense_size
from compactor.object_jobs import Defaults, Source, run_job

from fakes.transcripts import agent_transcript

from ..s3.test_object_jobs import MemoryStore
from ..unit.flow.triage import FLOW_INPUT, triage_flow
from .conftest import assert_well_answered, post

pytestmark = pytest.mark.usefixtures("bundled_catalog")

ROUTES = ("compact", "flows", "flows/normalize")
LONG = "The agent ran the test suite; 3 failures in test_io.py remain. " * 8
DECISION_POLICY = load_preset()["flow"][1]["classify"]["policy"]


# Raw bodies every route must refuse with a 4xx (syntax, limits, wrong top-level types).
RAW_BODIES: dict[str, bytes] = {
    "deep_arrays_1500": b"[" * 1500 + b"]" * 1500,
    "deep_objects_1500": b'{"a":' * 1500 + b"1" + b"}" * 1500,
    "deep_just_over_limit": b'{"messages":' + b"[" * MAX_BODY_DEPTH + b"]" * MAX_BODY_DEPTH + b"}",
    "deep_100k": b"[" * 100_000,
    "int_4300_digits": b'{"messages":[],"keep_recent":' + b"9" * 4300 + b"}",
    "int_101_digits": b'{"messages":[],"max_tokens":' + b"1" * 101 + b"}",
    "float_overflow": b'{"messages":[],"target_ratio":1e999}',
    "negative_float_overflow": b'{"messages":[],"target_ratio":-1e999}',
    "nan": b'{"messages":[],"target_ratio":NaN}',
    "infinity": b'{"messages":[],"target_ratio":Infinity}',
    "long_fraction": b'{"messages":[],"target_ratio":0.' + b"1" * 200 + b"}",
    "not_json": b"hello",
    "empty": b"",
    "truncated": b'{"messages":[{"role":"user","content":"hi"',
    "top_level_array": b"[]",
    "top_level_string": b'"messages"',
    "top_level_number": b"42",
    "top_level_null": b"null",
    "invalid_utf8": b'{"messages":[{"role":"user","content":"\xff\xfe"}]}\xff',
    "lone_surrogate": b'{"messages":[{"role":"user","content":"\\ud800"}],"flow_ir":"\\udfff"}',
    "trailing_garbage": b'{"messages":[]} {"messages":[]}',
    "control_char_in_string": b'{"messages":[{"role":"user","content":"a\x01b"}]}',
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name", sorted(RAW_BODIES))
def test_raw_bodies_get_a_clear_4xx(compact_module: ModuleType, route: str, name: str) -> None:
    raw = RAW_BODIES[name]
    status, text = post(compact_module, route, raw)
    body = assert_well_answered(status, text, raw)
    assert 400 <= status < 500, body


# A lone surrogate (written by json.dumps as the escape "\\ud83d") in each field of each route that may hold
# text: the 422 that "messages" gets (docs/behaviour.md), never the 500 a policy quoting it once got.
LONE = "\ud83d"
SURROGATE_BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "compact_policy_ir": ("compact", {"messages": [], "policy_ir": ["x" + LONE]}),
    "compact_policy_ir_field": ("compact", {"messages": [], "policy_ir": [
        "policy", ["meets_req"], ["neg", ["field", LONE]], ["argmax"], ["id"],
        ["always", {"action": "next_candidate"}]]}),
    "compact_decision_policy_ir": ("compact", {"messages": [], "decision_policy_ir": ["x" + LONE]}),
    "compact_decision_policy_ir_key": ("compact", {"messages": [], "decision_policy_ir": [{LONE: 1}]}),
    "compact_mask_policy_ir": ("compact", {"messages": [], "mode": "mask", "policy_ir": [LONE]}),
    "compact_mode": ("compact", {"messages": [], "mode": LONE}),
    "compact_format": ("compact", {"messages": [], "format": LONE}),
    "flows_flow_ir": ("flows", {"flow_ir": [LONE]}),
    "flows_flow_input": ("flows", {"flow_ir": ["flow", {}], "flow_input": LONE}),
    "normalize_flow_ir": ("flows/normalize", {"flow_ir": ["flow", {LONE: {"kind": "input"}}]}),
    "expand_handles": ("expand", {"handles": [LONE]}),
}


@pytest.mark.parametrize("name", sorted(SURROGATE_BODIES))
def test_a_lone_surrogate_in_any_field_is_a_422(compact_module: ModuleType, name: str) -> None:
    route, request = SURROGATE_BODIES[name]
    raw = json.dumps(request).encode()
    status, text = post(compact_module, route, raw)
    body = assert_well_answered(status, text, raw)
    assert status == 422, body
    assert body["detail"][0]["loc"][-1] in request


def compact_cases() -> dict[str, dict[str, Any]]:
    good = agent_transcript(LONG)
    cases: dict[str, dict[str, Any]] = {
        # wrong types and ranges of every field
        "messages_string": {"messages": "hi"},
        "messages_object": {"messages": {"role": "user"}},
        "messages_ints": {"messages": [1] * 50_000},
        "messages_nulls": {"messages": [None, None]},
        "keep_recent_string": {"messages": good, "keep_recent": "6"},
        "keep_recent_bool": {"messages": good, "keep_recent": True},
        "keep_recent_float": {"messages": good, "keep_recent": 6.0},
        "keep_recent_huge": {"messages": good, "keep_recent": 10**20},
        "keep_recent_negative": {"messages": good, "keep_recent": -(10**20)},
        "max_tokens_negative": {"messages": good, "max_tokens": -1},
        "max_tokens_huge": {"messages": good, "max_tokens": 10**18},
        "max_tokens_string": {"messages": good, "max_tokens": "512"},
        "max_tokens_bool": {"messages": good, "max_tokens": True},
        "max_tokens_float": {"messages": good, "max_tokens": 1.5},
        "target_ratio_zero": {"messages": good, "target_ratio": 0},
        "target_ratio_above_one": {"messages": good, "target_ratio": 1.5},
        "target_ratio_string": {"messages": good, "target_ratio": "0.1"},
        "target_ratio_bool": {"messages": good, "target_ratio": True},
        "pinned_strings": {"messages": good, "pinned_indices": ["a"] * 10_000},
        "pinned_negative": {"messages": good, "pinned_indices": [-1]},
        "pinned_huge": {"messages": good, "pinned_indices": [10**15]},
        "pinned_out_of_range": {"messages": good, "pinned_indices": [999]},
        "pinned_bool": {"messages": good, "pinned_indices": [True]},
        # odd roles and message shapes
        "role_unknown": {"messages": [*good, {"role": "robot", "content": "beep"}]},
        "role_empty": {"messages": [{"role": "", "content": LONG}, *good]},
        "role_number": {"messages": [{"role": 5, "content": LONG}, *good]},
        "role_missing": {"messages": [{"content": LONG}, *good]},
        "role_null": {"messages": [{"role": None, "content": LONG}, *good]},
        "developer_role": {"messages": [{"role": "developer", "content": "Be brief."}, *good[1:]]},
        "only_system": {"messages": [{"role": "system", "content": "a"}, {"role": "system", "content": "b"},
                                     {"role": "system", "content": "c"}]},
        "empty_messages": {"messages": []},
        "empty_message_objects": {"messages": [{}, {}, {}, {}, {}, {}, {}, {}]},
        # content shapes
        "content_number": {"messages": [*good, {"role": "user", "content": 42}]},
        "content_object": {"messages": [*good[:3], {"role": "user", "content": {"text": LONG}}, *good[3:]]},
        "content_null": {"messages": [*good[:3], {"role": "assistant", "content": None}, *good[3:]]},
        "content_parts": {"messages": [*good[:3], {"role": "user", "content": [
            {"type": "text", "text": LONG}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
            *good[3:]]},
        "content_parts_junk": {"messages": [*good[:3], {"role": "user", "content": [1, None, "x", [], {"t": 2}]},
                                            *good[3:]]},
        "content_parts_nested": {"messages": [*good[:3], {"role": "user", "content": [[[{"type": "text"}]]]},
                                              *good[3:]]},
        # tool pairing
        "tool_without_call": {"messages": [*good[:3], {"role": "tool", "tool_call_id": "x", "content": LONG},
                                           *good[3:]]},
        "call_without_result": {"messages": [*good[:3], {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}, *good[3:]]},
        "tool_calls_not_a_list": {"messages": [*good[:3], {"role": "assistant", "content": "x", "tool_calls": 7},
                                               *good[3:]]},
        "tool_calls_junk_items": {"messages": [*good[:3], {"role": "assistant", "content": "x",
                                                           "tool_calls": [1, None, {"function": 3}]}, *good[3:]]},
        "tool_calls_non_objects": {"messages": [*good[:3], *(
            {"role": "assistant", "content": None, "tool_calls": [junk]} for junk in (None, 5, "x", [1])), *good[3:]]},
        "mismatched_tool_ids": {"messages": [*good[:3], {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c2", "content": LONG}, *good[3:]]},
        "tool_id_not_string": {"messages": [*good[:3], {"role": "assistant", "content": None, "tool_calls": [
            {"id": 5, "function": {"name": "ls"}}]}, {"role": "tool", "tool_call_id": 5, "content": LONG}, *good[3:]]},
        # unicode edge cases (lone surrogates are in RAW_BODIES and SURROGATE_BODIES)
        "emoji_and_rtl": {"messages": [*good, {"role": "user", "content": "\U0001F600 \u202e\u05e9\u05dc\u05d5\u05dd"}]},
        "nul_and_zero_width": {"messages": [*good, {"role": "user", "content": "a\u0000b\u200bc\ufeff"}]},
        "combining_marks": {"messages": [*good, {"role": "user", "content": "e" + "\u0301" * 5000}]},
        "non_ascii_keys": {"messages": [{**m, "\u00e9t\u00e9": "\u4e2d\u6587"} for m in good]},
        # huge policies
        "policy_deep": {"messages": good, "policy_ir": json.loads("[" * 100 + "]" * 100)},
        "policy_wide": {"messages": good, "policy_ir": ["policy"] + [["id"]] * 20_000},
        "policy_garbage": {"messages": good, "policy_ir": ["rm -rf", {"a": 1}]},
    }
    return cases


COMPACT_CASES = compact_cases()


@pytest.mark.parametrize("mode", ["legacy", "decision", "mask"])
@pytest.mark.parametrize("name", sorted(COMPACT_CASES))
def test_compact_bad_input(compact_module: ModuleType, name: str, mode: str) -> None:
    request = dict(COMPACT_CASES[name])
    if mode == "decision":
        request.setdefault("decision_policy_ir", DECISION_POLICY)
    elif mode == "mask":
        request["mode"] = "mask"
    raw = json.dumps(request).encode()
    status, text = post(compact_module, "compact", raw)
    body = assert_well_answered(status, text, raw)
    if status == 200:  # nothing lost: the original comes back whole unless it shrank
        assert dense_size(body["messages"]) <= dense_size(request["messages"])
        if not body["compacted"]:
            assert body["messages"] == request["messages"]


def flow_cases() -> dict[str, dict[str, Any]]:
    flow = triage_flow()
    nodes = flow[1]
    return {
        "flow_ir_missing": {"flow_input": FLOW_INPUT},
        "flow_ir_string": {"flow_ir": "flow"},
        "flow_ir_number": {"flow_ir": 10**30},
        "flow_ir_empty_list": {"flow_ir": []},
        "flow_nodes_not_object": {"flow_ir": ["flow", [1, 2]]},
        "unknown_kind": {"flow_ir": ["flow", {**nodes, "tickets": {"kind": "teleport", "inputs": ["input"]}}],
                         "flow_input": FLOW_INPUT},
        "cycle": {"flow_ir": ["flow", {**nodes, "tickets": {**nodes["tickets"], "inputs": ["answered"]}}],
                  "flow_input": FLOW_INPUT},
        "missing_output": {"flow_ir": ["flow", {k: v for k, v in nodes.items() if k != "output"}],
                           "flow_input": FLOW_INPUT},
        "dangling_input": {"flow_ir": ["flow", {**nodes, "output": {"kind": "output", "inputs": ["nowhere"]}}],
                           "flow_input": FLOW_INPUT},
        "huge_flow": {"flow_ir": ["flow", {"input": {"kind": "input"}, **{
            f"n{i}": {"kind": "data", "operation": "project", "inputs": ["input" if i == 0 else f"n{i - 1}"],
                      "path": ["x"]} for i in range(3_000)}, "output": {"kind": "output", "inputs": ["n2999"]}}],
            "flow_input": {"x": 1}},
        "flow_input_wrong_type": {"flow_ir": flow, "flow_input": 12},
        "flow_input_deep": {"flow_ir": flow, "flow_input": json.loads('{"a":' * 100 + "1" + "}" * 100)},
        "flow_input_missing_path": {"flow_ir": flow, "flow_input": {"not_tickets": {}}},
        "flow_input_huge_numbers": {"flow_ir": flow, "flow_input": {"tickets": {"t1": 10**90, "t2": -1e300}}},
        "max_tokens_out_of_range": {"flow_ir": triage_flow(draft={"max_tokens": 10**9}), "flow_input": FLOW_INPUT},
        "timeout_string": {"flow_ir": triage_flow(classify={"timeout_ms": "7000"}), "flow_input": FLOW_INPUT},
        "policy_garbage": {"flow_ir": triage_flow(classify={"policy": ["x"]}), "flow_input": FLOW_INPUT},
        "questions_junk": {"flow_ir": triage_flow(classify={"questions": [1, 2]}), "flow_input": FLOW_INPUT},
        "unicode_labels": {"flow_ir": ["flow", {("\u00fc" if k == "tickets" else k): v for k, v in nodes.items()}],
                           "flow_input": FLOW_INPUT},
    }


FLOW_CASES = flow_cases()


@pytest.mark.parametrize("route", ["flows", "flows/normalize"])
@pytest.mark.parametrize("name", sorted(FLOW_CASES))
def test_flows_bad_input(compact_module: ModuleType, route: str, name: str) -> None:
    raw = json.dumps(FLOW_CASES[name]).encode()
    status, text = post(compact_module, route, raw)
    assert_well_answered(status, text, raw)


S3_BODIES: dict[str, bytes] = {
    **{f"raw_{name}": body for name, body in RAW_BODIES.items()},
    "jsonl_deep_line": b'{"role":"user","content":"hi"}\n' + b"[" * 5000 + b"]" * 5000 + b"\n",
    "jsonl_huge_int": b'{"role":"user","content":' + b"7" * 5000 + b"}\n",
    **{f"compact_{name}": json.dumps(COMPACT_CASES[name]).encode() for name in (
        "keep_recent_string", "max_tokens_huge", "pinned_out_of_range", "messages_ints", "content_parts_junk",
        "tool_without_call", "policy_garbage")},
}


@pytest.mark.parametrize("name", sorted(S3_BODIES))
def test_s3_path_records_bad_objects_under_failed(name: str) -> None:
    store = MemoryStore()
    store.add("incoming/t.json", S3_BODIES[name])
    outcome = asyncio.run(run_job(Source("b", "incoming/t.json", etag="etag-1"), store=store, defaults=Defaults(),
                                  deadline=Deadline.after_ms(20_000)))
    assert outcome.result in ("failed", "compacted")
    written, _ = store.objects[("b", outcome.key)]
    body = json.loads(written)
    if outcome.result == "failed":
        assert 400 <= body["status"] < 500 and body["error"]["message"].strip()
        assert len(body.get("detail") or []) <= 20
    assert len(written) <= len(S3_BODIES[name]) + 128 * 1024
