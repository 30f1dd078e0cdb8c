"""Every item and block type of each format's API reference, through the real CompactFunction handler in every
mode (docs/formats.md "Item and block types"): accepted, grouped with its call or result, never rewritten (hidden
reasoning, signatures, server tools' encrypted results come back byte-identically or go with their whole unit), and
the answer is one the provider accepts back. A type the project does not know is kept as it is, inside its unit."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor.formats import get_dialect
from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event, decision_policy
from .validity import PROBLEMS, cdump, outputs_without_their_reasoning

MODES = ["decision", "seal", "mask"]
PAD = "The parser reads the header, then each record; the record loop is where it fails. " * 14


def _compact(module: ModuleType, context: LocalLambdaContext, fmt: str, items: list[dict[str, Any]], mode: str,
             **extra: Any) -> list[dict[str, Any]]:
    field = "input" if fmt == "openai-responses" else "messages"
    body = {"format": fmt, field: items, "mode": mode, "keep_recent": 2, "pinned_indices": [0], "target_ratio": 0.01,
            "decision_policy_ir": decision_policy(), **extra}
    response = module.handler(api_event("/compact", body), context)
    answer = json.loads(response["body"])
    assert response["statusCode"] == 200, answer
    # no problem the input did not have (an output answering a stored call an ``item_reference`` stands for is one)
    known = {problem.split(": ", 1)[1] for problem in PROBLEMS[fmt](items)}
    assert [p for p in PROBLEMS[fmt](answer[field]) if p.split(": ", 1)[1] not in known] == []
    return answer[field]


# -- anthropic-messages ----------------------------------------------------------------------------------------------

def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _user(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def _assistant(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


def _thinking(n: int) -> dict[str, Any]:
    return {"type": "thinking", "thinking": f"Private reasoning {n}. " * 12, "signature": f"EqQBCkgIARABGAIiQL{n}=="}


def _use(call: str, name: str = "Read") -> dict[str, Any]:
    return {"type": "tool_use", "id": call, "name": name, "input": {"path": f"src/{call}.py"}}


def _result(call: str, content: Any = PAD) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call, "content": content}


def _server(call: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "server_tool_use", "id": call, "name": name, "input": tool_input}


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo" * 60}}
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": PAD},
            "title": "spec.txt", "citations": {"enabled": True}}

# Each case: the messages holding the type (in the Messages API's documented shape), placed mid-transcript.
ANTHROPIC_CASES: dict[str, list[dict[str, Any]]] = {
    "thinking": [_assistant(_thinking(1), _text("Reading it."), _use("toolu_t")), _user(_result("toolu_t"))],
    "redacted_thinking": [_assistant({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFZT" * 8},
                                     _thinking(2), _use("toolu_r")), _user(_result("toolu_r"))],
    "server_tool_use+web_search_tool_result+citations": [_assistant(
        _server("srvtoolu_ws", "web_search", {"query": "record loop parser bug"}),
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_ws", "content": [
            {"type": "web_search_result", "url": "https://example.com/bug", "title": "Parser bug",
             "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1" * 20, "page_age": "April 30, 2025"}]},
        {"type": "text", "text": "The loop skips the last record. " * 10, "citations": [
            {"type": "web_search_result_location", "url": "https://example.com/bug", "title": "Parser bug",
             "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lM2M1LTQ", "cited_text": "skips the last record"}]})],
    "web_fetch_tool_result": [_assistant(
        _server("srvtoolu_wf", "web_fetch", {"url": "https://example.com/spec"}),
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_wf", "content": {
            "type": "web_fetch_result", "url": "https://example.com/spec", "retrieved_at": "2025-08-25T10:30:00Z",
            "content": DOCUMENT}}, _text("Fetched the spec. " * 10))],
    "code_execution_tool_result": [_assistant(
        _server("srvtoolu_ce", "code_execution", {"code": "print(parse('a.bin'))"}),
        {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_ce", "content": {
            "type": "code_execution_result", "stdout": PAD, "stderr": "", "return_code": 0, "content": []}},
        _text("It prints every record. " * 10))],
    "bash_code_execution_tool_result": [_assistant(
        _server("srvtoolu_bc", "bash_code_execution", {"command": "ls -la"}),
        {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_bc", "content": {
            "type": "bash_code_execution_result", "stdout": PAD, "stderr": "", "return_code": 0, "content": []}},
        _text("Listed. " * 10))],
    "text_editor_code_execution_tool_result": [_assistant(
        _server("srvtoolu_te", "text_editor_code_execution", {"command": "view", "path": "/tmp/a.py"}),
        {"type": "text_editor_code_execution_tool_result", "tool_use_id": "srvtoolu_te", "content": {
            "type": "text_editor_code_execution_view_result", "file_type": "text", "content": PAD, "num_lines": 14,
            "start_line": 1, "total_lines": 14}}, _text("Viewed. " * 10))],
    "tool_search_tool_result": [_assistant(
        _server("srvtoolu_ts", "tool_search_tool_regex", {"query": "weather"}),
        {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_ts", "content": {
            "type": "tool_search_tool_search_result", "tool_references": [{"type": "tool_reference",
                                                                           "tool_name": "get_weather"}]}},
        _use("toolu_w", "get_weather")), _user(_result("toolu_w"))],
    "advisor_tool_result": [_assistant(
        _server("srvtoolu_ad", "advisor", {}),
        {"type": "advisor_tool_result", "tool_use_id": "srvtoolu_ad", "content": {"type": "advisor_result",
                                                                                  "text": PAD}},
        _text("Following the advice. " * 10))],
    "mcp_tool_use+mcp_tool_result": [_assistant(
        {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "echo", "server_name": "example-mcp",
         "input": {"param1": "value1"}},
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": False, "content": [_text(PAD)]},
        _text("The server echoed it. " * 10))],
    "pause_turn (a server tool answered in the next assistant message)": [
        _assistant(_text("Searching. " * 10), _server("srvtoolu_pt", "web_search", {"query": "parser"})),
        _assistant({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_pt", "content": [
            {"type": "web_search_result", "url": "https://example.com/p", "title": "P",
             "encrypted_content": "Eq0KCioIARgBIiQ" * 20}]}, _text("Found it. " * 10))],
    "image+document+search_result in a tool_result": [
        _assistant(_use("toolu_i")),
        _user(_result("toolu_i", [IMAGE, DOCUMENT, {"type": "search_result", "source": "https://example.com/kb",
                                                    "title": "KB", "content": [_text(PAD)],
                                                    "citations": {"enabled": True}}]))],
    "container_upload": [_assistant(_use("toolu_c")),
                         _user(_result("toolu_c"), {"type": "container_upload", "file_id": "file_011CNha8iCJcU"},
                               _text("Analyse the uploaded file too."))],
    "compaction": [_assistant({"type": "compaction", "content": "Summary: the record loop is being fixed. " * 12},
                              _text("Continuing from the summary. " * 10), _use("toolu_k")),
                   _user(_result("toolu_k"))],
    "compaction (failed, null content)": [_assistant({"type": "compaction", "content": None},
                                                     _text("Going on. " * 10))],
    "mid_conv_system": [_user({"type": "mid_conv_system", "content": [_text("From now on, answer in French.")]},
                              _text("Carry on."))],
    "fallback": [_assistant(_thinking(3), {"type": "fallback", "from": {"model": "claude-opus-4-7"},
                                           "to": {"model": "claude-sonnet-4-6"}}, _thinking(4), _use("toolu_f")),
                 _user(_result("toolu_f"))],
    "unknown future block": [_assistant({"type": "hologram_2031", "payload": PAD, "signature": "opaque"},
                                        _text("Shown. " * 10))],
}
KEPT_WHOLE = ("compaction", "compaction (failed, null content)", "mid_conv_system")
"""Types whose message every mode keeps byte-identically, whatever is pinned."""


def _anthropic_transcript(case: str) -> list[dict[str, Any]]:
    items = [_user(_text("Fix the parser's record loop. " * 4), IMAGE)]
    for n in range(3):
        items += [_assistant(_thinking(10 + n), _use(f"toolu_a{n}")), _user(_result(f"toolu_a{n}"))]
    items += ANTHROPIC_CASES[case]
    items += [_user(_text("Now run the tests."))]
    for n in range(3):
        items += [_assistant(_thinking(20 + n), _use(f"toolu_b{n}")), _user(_result(f"toolu_b{n}"))]
    return items + [_assistant(_thinking(30), _text("All tests pass."))]


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _masked_result(block: dict[str, Any], items: list[dict[str, Any]]) -> bool:
    """Whether ``block`` is a masked result: a result block sent with the same id and type (a client tool's or an MCP
    tool's with a string ``content``)."""
    sent = [b for m in items for b in _blocks(m) if b.get("tool_use_id") == block.get("tool_use_id")
            and b.get("type") == block.get("type")]
    return bool(sent) and str(block["type"]).endswith("tool_result") and (
        isinstance(block["content"], str) or block["type"] not in ("tool_result", "mcp_tool_result"))


def _server_calls_answered_in_their_message(messages: list[dict[str, Any]]) -> list[str]:
    """A server tool's call (``server_tool_use``, ``mcp_tool_use``) and its result are in one assistant message (the
    API merges consecutive assistant messages: a paused turn's continuation answers in the next one)."""
    problems, runs = [], []
    for index, message in enumerate(messages):
        if runs and runs[-1][0] == message.get("role"):
            runs[-1][1].extend(_blocks(message))
        else:
            runs.append((message.get("role"), list(_blocks(message)), index))
    for role, blocks, start in runs:
        answered = {b.get("tool_use_id") for b in blocks if str(b.get("type", "")).endswith("tool_result")}
        problems += [f"{start}: {b['type']} {b.get('id')} without its result" for b in blocks
                     if role == "assistant" and b.get("type") in ("server_tool_use", "mcp_tool_use")
                     and b.get("id") not in answered]
    return problems


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(ANTHROPIC_CASES))
def test_each_anthropic_block_type_is_kept_with_its_unit_and_never_rewritten(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, case: str, mode: str) -> None:
    items = _anthropic_transcript(case)
    output = _compact(compact_module, lambda_context, "anthropic-messages", items, mode)

    assert _server_calls_answered_in_their_message(output) == []
    sent = {cdump(m) for m in items}
    sent_blocks = {cdump(b) for m in items for b in _blocks(m)}
    for message in output:
        if cdump(message) in sent:
            continue
        # a new item (a summary, the sealed summary) holds text only; a masked result keeps its id and type, a
        # string for a client tool's output (a server tool's masked output: tests/formats/test_dialect_fields.py)
        for block in _blocks(message):
            assert block["type"] == "text" or (mode == "mask" and _masked_result(block, items)) or (
                cdump(block) in sent_blocks)
    if case in KEPT_WHOLE:
        kept = {cdump(m) for m in output}
        assert all(cdump(m) in kept for m in ANTHROPIC_CASES[case])


@pytest.mark.parametrize("case", KEPT_WHOLE)
def test_a_compaction_or_system_block_is_always_pinned_whatever_the_request_pins(case: str) -> None:
    """The API drops every block before a ``compaction`` block, whose summary is the context from there on, and a
    ``mid_conv_system`` block holds system instructions: a summary, an archive or a seal of their message lost them.
    Explicit pins replace the default ones (the human's turns), never these."""
    items = _anthropic_transcript(case)
    dialect = get_dialect("anthropic-messages")
    start = 7  # where the case's messages are
    assert set(range(start, start + len(ANTHROPIC_CASES[case]))) <= dialect.always_pinned(items)


@pytest.mark.parametrize("case", KEPT_WHOLE)
def test_windows_pin_a_compaction_or_system_block_as_one_request_does(case: str) -> None:
    """Transcripts over one request's limits are compacted in windows, which find the pins from a stream
    (``Dialect.stream_facts``, docs/scale.md): the same as one request."""
    from compactor.compaction.units import instruction_pins

    dialect = get_dialect("anthropic-messages")
    items = _anthropic_transcript(case)
    facts = dialect.stream_facts()
    for item in items:
        facts.add(item)
    units = facts.units()
    assert units == dialect.split_units(items)
    assert sorted(facts.pins({0}, units)) == instruction_pins(items, [0], dialect)


def test_seal_seals_only_what_follows_a_server_side_compaction() -> None:
    """The API drops what precedes the ``compaction`` block: seal leaves it (and it) in place, as it does a Responses
    compaction item; a failed compaction (null ``content``) drops nothing, so it only keeps its own unit."""
    from compactor.compaction.seal import plan_seal

    dialect = get_dialect("anthropic-messages")
    items = _anthropic_transcript("compaction")
    plan = plan_seal(items, 2, dialect)
    assert plan is not None and len(plan.frozen) == 9  # the first prompt, three cycles, the compaction's unit
    failed = _anthropic_transcript("compaction (failed, null content)")
    plan = plan_seal(failed, 2, dialect)
    assert plan is not None and len(plan.frozen) == 1 and cdump(failed[7]) in {cdump(m) for m in plan.held}


# -- openai-responses ------------------------------------------------------------------------------------------------

def _message(role: str, text: str, part: str = "input_text", **fields: Any) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": part, "text": text}], **fields}


def _reasoning(n: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{n}", "summary": [{"type": "summary_text", "text": f"Thinking {n}. " * 10}],
            "encrypted_content": f"gAAAAABo{n}" * 40}


def _answer(n: str) -> dict[str, Any]:
    return _message("assistant", f"Answer {n}. " * 40, "output_text", id=f"msg_{n}", status="completed")


SCREENSHOT = {"type": "computer_screenshot", "image_url": "data:image/png;base64," + "iVBORw0KGgo" * 60}

RESPONSES_CASES: dict[str, list[dict[str, Any]]] = {
    "function_call+function_call_output": [
        _reasoning("f"), {"type": "function_call", "id": "fc_1", "call_id": "call_f", "name": "read",
                          "arguments": '{"path": "a.py"}', "status": "completed"},
        {"type": "function_call_output", "call_id": "call_f", "output": [
            {"type": "input_text", "text": PAD}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}],
    "custom_tool_call+custom_tool_call_output": [
        _reasoning("c"), {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_c", "name": "apply_grammar",
                          "input": "UPDATE records SET done = 1 " * 10},
        {"type": "custom_tool_call_output", "call_id": "call_c", "output": PAD}],
    "computer_call+computer_call_output": [
        _reasoning("cu"), {"type": "computer_call", "id": "cu_1", "call_id": "call_cu", "status": "completed",
                           "action": {"type": "click", "button": "left", "x": 156, "y": 50},
                           "pending_safety_checks": []},
        {"type": "computer_call_output", "call_id": "call_cu", "output": SCREENSHOT, "acknowledged_safety_checks": []}],
    "local_shell_call+local_shell_call_output": [
        _reasoning("ls"), {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_ls", "status": "completed",
                           "action": {"type": "exec", "command": ["ls", "-la"], "env": {}}},
        {"type": "local_shell_call_output", "id": "call_ls", "output": PAD}],
    "shell_call+shell_call_output": [
        _reasoning("sh"), {"type": "shell_call", "id": "sh_1", "call_id": "call_sh", "status": "completed",
                           "action": {"commands": ["pytest -q"], "timeout_ms": 60000, "max_output_length": 4096}},
        {"type": "shell_call_output", "call_id": "call_sh", "output": [
            {"stdout": PAD, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}],
    "apply_patch_call+apply_patch_call_output": [
        _reasoning("ap"), {"type": "apply_patch_call", "id": "ap_1", "call_id": "call_ap", "status": "completed",
                           "operation": {"type": "update_file", "path": "src/parse.py", "diff": "@@ -1 +1 @@\n" + PAD}},
        {"type": "apply_patch_call_output", "call_id": "call_ap", "status": "completed", "output": "Applied. " * 30}],
    "web_search_call": [
        _reasoning("ws"), {"type": "web_search_call", "id": "ws_1", "status": "completed",
                           "action": {"type": "search", "query": "parser record loop",
                                      "sources": [{"type": "url", "url": "https://example.com"}]}}, _answer("ws")],
    "file_search_call": [
        _reasoning("fs"), {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["record loop"],
                           "results": [{"file_id": "file-1", "filename": "spec.md", "score": 0.9, "text": PAD}]},
        _answer("fs")],
    "code_interpreter_call": [
        _reasoning("ci"), {"type": "code_interpreter_call", "id": "ci_1", "status": "completed",
                           "container_id": "cntr_1", "code": "print(1)", "outputs": [{"type": "logs", "logs": PAD}]},
        _answer("ci")],
    "image_generation_call": [
        _reasoning("ig"), {"type": "image_generation_call", "id": "ig_1", "status": "completed",
                           "result": "iVBORw0KGgo" * 120}, _answer("ig")],
    "mcp_list_tools+mcp_approval_request+mcp_approval_response+mcp_call": [
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "deepwiki",
         "tools": [{"name": "ask_question", "input_schema": {"type": "object"}}]},
        _reasoning("ma"), {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "deepwiki",
                           "name": "ask_question", "arguments": '{"question": "why"}'},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        _reasoning("mc"), {"type": "mcp_call", "id": "mcp_1", "server_label": "deepwiki", "name": "ask_question",
                           "arguments": '{"question": "why"}', "output": PAD, "approval_request_id": "mcpr_1"},
        _answer("mc")],
    "mcp_call (no approval)": [
        _reasoning("m2"), {"type": "mcp_call", "id": "mcp_2", "server_label": "deepwiki", "name": "ask_question",
                           "arguments": "{}", "output": None, "error": "timeout"}, _answer("m2")],
    "tool_search_call+tool_search_output": [
        _reasoning("ts"), {"type": "tool_search_call", "id": "tsc_1", "call_id": "call_ts", "status": "completed",
                           "arguments": {"query": "weather"}, "execution": "client"},
        {"type": "tool_search_output", "id": "tso_1", "call_id": "call_ts", "status": "completed",
         "execution": "client", "tools": [{"type": "function", "name": "get_weather", "parameters": {}}]}],
    "item_reference": [{"type": "item_reference", "id": "rs_stored"}, {"type": "item_reference", "id": "fc_stored"},
                       {"type": "function_call_output", "call_id": "call_stored", "output": PAD}],
    "compaction": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAABpM0Yj" * 40}],
    "refusal": [_reasoning("rf"), {"type": "message", "role": "assistant", "id": "msg_rf",
                                   "content": [{"type": "refusal", "refusal": "I can't help with that. " * 10}]}],
    "unknown future item": [{"type": "hologram_2031", "id": "hg_1", "payload": PAD}],
    "unknown future call and output": [
        _reasoning("fu"), {"type": "teleport_call", "id": "tp_1", "call_id": "call_tp", "destination": "mars"},
        {"type": "teleport_call_output", "call_id": "call_tp", "output": PAD}],
}


def _responses_transcript(case: str) -> list[dict[str, Any]]:
    items = [_message("user", "Fix the parser's record loop. " * 4)]
    for n in range(3):
        items += [_reasoning(f"a{n}"), {"type": "function_call", "call_id": f"call_a{n}", "name": "read",
                                        "arguments": f'{{"n": {n}}}'},
                  {"type": "function_call_output", "call_id": f"call_a{n}", "output": PAD}]
    items += RESPONSES_CASES[case] + [_message("user", "Now run the tests.")]
    for n in range(3):
        items += [_reasoning(f"b{n}"), {"type": "function_call", "call_id": f"call_b{n}", "name": "exec",
                                        "arguments": f'{{"n": {n}}}'},
                  {"type": "function_call_output", "call_id": f"call_b{n}", "output": PAD}]
    return items + [_reasoning("end"), _answer("end")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(RESPONSES_CASES))
def test_each_responses_item_type_is_kept_with_its_unit_and_never_rewritten(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, case: str, mode: str) -> None:
    items = _responses_transcript(case)
    output = _compact(compact_module, lambda_context, "openai-responses", items, mode)

    assert outputs_without_their_reasoning(items, output) == []
    sent = {cdump(m) for m in items}
    for item in output:
        if cdump(item) in sent:
            continue
        # a new message (a summary, the sealed summary), or (mask) an output whose ``output`` alone was replaced (a
        # server-side call's own result: an image generation's ``result``, a code interpreter's ``outputs``)
        if item.get("type") == "message":
            assert {part["type"] for part in item["content"]} <= {"output_text", "input_text"}
        else:
            assert mode == "mask" and any(cdump({**original, field: item[field]}) == cdump(item)
                                          for original in items for field in ("output", "result", "outputs")
                                          if field in item)
    if mode == "mask":  # mask replaces outputs only: every item is there, in order
        assert [m.get("type") for m in output] == [m.get("type") for m in items]


# -- openai-chat -----------------------------------------------------------------------------------------------------

def _custom_call(call: str, name: str, tool_input: str) -> dict[str, Any]:
    return {"id": call, "type": "custom", "custom": {"name": name, "input": tool_input}}


CHAT_CASES: dict[str, list[dict[str, Any]]] = {
    "custom tool call": [
        {"role": "assistant", "content": None, "tool_calls": [_custom_call("call_c1", "apply_grammar",
                                                                           "UPDATE records SET done = 1")]},
        {"role": "tool", "tool_call_id": "call_c1", "content": PAD}],
    "function and custom calls in one message": [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_f2", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}},
            _custom_call("call_c2", "apply_patch", "*** Begin Patch\n*** Update File: a.py\n*** End Patch")]},
        {"role": "tool", "tool_call_id": "call_f2", "content": [{"type": "text", "text": PAD}]},
        {"role": "tool", "tool_call_id": "call_c2", "content": PAD}],
    "refusal": [{"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that. " * 10}],
                 "refusal": "I can't help with that. " * 10}],
    "audio": [{"role": "assistant", "content": None, "audio": {"id": "audio_abc123"}}],
    "user image, audio and file parts": [{"role": "user", "content": [
        {"type": "text", "text": "And this one?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0KGgo" * 60, "detail": "low"}},
        {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF" * 30, "format": "wav"}},
        {"type": "file", "file": {"filename": "spec.pdf", "file_data": "JVBERi0xLjQ" * 30}}]}],
    "developer": [{"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]}],
    "legacy function_call": [{"role": "assistant", "content": None,
                              "function_call": {"name": "read", "arguments": "{}"}},
                             {"role": "function", "name": "read", "content": PAD}],
    "reasoning_content and harness fields": [{"role": "assistant", "content": "Reading. " * 30,
                                              "reasoning_content": "hidden " * 40, "extra": {"cost": 0.01}}],
    "unknown future role and part": [{"role": "critic", "content": "Review. " * 30},
                                     {"role": "assistant", "content": [{"type": "hologram_2031", "payload": PAD}]}],
}


def _chat_transcript(case: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "system", "content": "You fix parsers."},
                                   {"role": "user", "content": "Fix the parser's record loop."}]
    for n in range(3):
        items += [{"role": "assistant", "content": None, "tool_calls": [
                      {"id": f"call_a{n}", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": f"call_a{n}", "content": PAD}]
    items += CHAT_CASES[case] + [{"role": "user", "content": "Now run the tests."}]
    for n in range(3):
        items += [{"role": "assistant", "content": None, "tool_calls": [
                      {"id": f"call_b{n}", "type": "function", "function": {"name": "exec", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": f"call_b{n}", "content": PAD}]
    return items + [{"role": "assistant", "content": "All tests pass."}]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CHAT_CASES))
def test_each_chat_message_type_is_kept_with_its_unit(compact_module: ModuleType, lambda_context: LocalLambdaContext,
                                                      case: str, mode: str) -> None:
    items = _chat_transcript(case)
    output = _compact(compact_module, lambda_context, "openai-chat", items, mode, pinned_indices=[1])

    sent = {cdump(m) for m in items}
    for message in output:
        if cdump(message) not in sent:  # a summary, the sealed summary, or (mask) a tool output's placeholder
            assert isinstance(message["content"], str) and message["role"] in ("assistant", "system", "tool",
                                                                               "function")
    if case == "developer":
        assert cdump(CHAT_CASES[case][0]) in {cdump(m) for m in output}


def test_a_chat_custom_tool_call_is_read_by_the_models_and_named_in_placeholders(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """A Chat Completions custom tool's call (``{"type": "custom", "custom": {"name", "input"}}``) is a call like a
    function's. Before, the models' view kept only ``id``, ``type`` and ``function`` of a call, so the decider and the
    summarizer saw ``{"id": "call_c1", "type": "custom"}``, no tool and no input; seal's summary left the call out
    and mask's placeholder said "output of a tool"."""
    items = _chat_transcript("custom tool call")
    call = items[8]
    assert get_dialect("openai-chat").model_view([call]) == [call]

    masked = _compact(compact_module, lambda_context, "openai-chat", items, "mask", pinned_indices=[1])
    assert masked[9]["content"].startswith("[output of apply_grammar (call call_c1) omitted")

    sealed = _compact(compact_module, lambda_context, "openai-chat", items, "seal", pinned_indices=[1])
    assert "apply_grammar(UPDATE records SET done = 1)" in sealed[1]["content"]
