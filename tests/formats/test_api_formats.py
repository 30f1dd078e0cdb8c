"""Each format through the real CompactFunction handler and the bundled offline offers: the answer is
in the caller's format, valid in it, and every item nobody changed comes back byte-identically."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event, decision_policy
from .validity import (CHAT, CLAUDE_CODE, CODEX, PROBLEMS, cdump, claude_code_messages, codex_items,
                       outputs_without_their_reasoning)

CASES = {
    "openai-chat": ("messages", lambda: json.loads(CHAT.read_text(encoding="utf-8"))),
    "anthropic-messages": ("messages", lambda: claude_code_messages(CLAUDE_CODE)),
    "openai-responses": ("input", lambda: codex_items(CODEX)),
}


def _compact(module: ModuleType, context: LocalLambdaContext, body: dict[str, Any]) -> tuple[int, Any]:
    response = module.handler(api_event("/compact", body), context)
    return response["statusCode"], json.loads(response["body"])


def _kept_items_identical(items: list[Any], output: list[Any], manifest: list[dict[str, Any]]) -> None:
    """Walk the manifest: kept units appear in order, dense-byte-identical to the request's items."""
    position = 0
    for entry in manifest:
        unit = items[entry["start"]:entry["end"]]
        if entry["action"] == "keep":
            assert [cdump(m) for m in output[position:position + len(unit)]] == [cdump(m) for m in unit]
            position += len(unit)
        elif entry["action"] == "summarize":
            position += 1
    assert position == len(output)


@pytest.mark.parametrize("fmt", list(CASES))
def test_decision_mode_answers_in_the_callers_format(compact_module: ModuleType, lambda_context: LocalLambdaContext,
                                                     fmt: str) -> None:
    field, load = CASES[fmt]
    items = load()
    status, body = _compact(compact_module, lambda_context,
                            {"format": fmt, field: items, "decision_policy_ir": decision_policy()})

    assert status == 200, body
    output = body[field]
    assert body["compacted"] is True and len(output) < len(items)
    assert PROBLEMS[fmt](items) == [] and PROBLEMS[fmt](output) == []
    report = body["compaction"]
    assert report["original_bytes"] == len(cdump(items).encode()) and report["output_bytes"] == len(cdump(output).encode())
    assert {e["action"] for e in report["fragments"]} >= {"keep", "summarize"}
    _kept_items_identical(items, output, report["fragments"])


@pytest.mark.parametrize("fmt", list(CASES))
def test_seal_mode_answers_in_the_callers_format(compact_module: ModuleType, lambda_context: LocalLambdaContext,
                                                 fmt: str) -> None:
    field, load = CASES[fmt]
    items = load()
    status, body = _compact(compact_module, lambda_context, {"format": fmt, field: items, "keep_recent": 4})

    assert status == 200, body
    output = body[field]
    assert body["compacted"] is True and PROBLEMS[fmt](output) == []
    tail = output[-4:]
    assert [cdump(m) for m in items[-len(tail):]] == [cdump(m) for m in tail]
    assert "[Earlier conversation, sealed summary]" in cdump(output)


@pytest.mark.parametrize("fmt", list(CASES))
def test_nothing_to_compact_returns_the_items_byte_identically(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, fmt: str) -> None:
    field, load = CASES[fmt]
    items = load()
    status, body = _compact(compact_module, lambda_context, {"format": fmt, field: items, "keep_recent": len(items),
                                                             "decision_policy_ir": decision_policy()})

    assert status == 200 and body["compacted"] is False
    assert cdump(body[field]) == cdump(items)


def test_hidden_reasoning_never_reaches_a_summary(compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """Thinking text and reasoning summaries stay out of every new item (the built-in summarizer quotes
    what it is given, so anything it saw would show)."""
    secret = "SECRET-CHAIN-OF-THOUGHT"
    turns: list[dict[str, Any]] = [{"role": "user", "content": "Fix the parser."}]
    for n in range(12):
        turns += [{"role": "assistant", "content": [
                      {"type": "thinking", "thinking": f"{secret} {n} " * 40, "signature": f"sig{n}"},
                      {"type": "text", "text": f"Looking at file {n}. " * 20},
                      {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"path": f"f{n}.py"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}",
                                                "content": f"contents of f{n}.py " * 60}]}]
    status, body = _compact(compact_module, lambda_context, {
        "format": "anthropic-messages", "messages": turns, "keep_recent": 2, "pinned_indices": [0],
        "decision_policy_ir": decision_policy()})

    assert status == 200 and body["compacted"] is True
    kept = {cdump(m) for m in turns}
    new = [m for m in body["messages"] if cdump(m) not in kept]
    assert new and all(secret not in cdump(m) for m in new)
    assert cdump(body["messages"][-2:]) == cdump(turns[-2:])  # the tail keeps its thinking and signature

    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go"}]}]
    for n in range(12):
        items += [{"type": "reasoning", "summary": [{"type": "summary_text", "text": f"{secret} {n} " * 40}],
                   "encrypted_content": "opaque"},
                  {"type": "function_call", "call_id": f"c{n}", "name": "exec", "arguments": f'{{"cmd": "cat f{n}"}}'},
                  {"type": "function_call_output", "call_id": f"c{n}", "output": f"line of f{n} " * 80}]
    status, body = _compact(compact_module, lambda_context, {
        "format": "openai-responses", "input": items, "keep_recent": 3, "decision_policy_ir": decision_policy()})

    assert status == 200 and body["compacted"] is True and "messages" not in body
    kept = {cdump(m) for m in items}
    new = [m for m in body["input"] if cdump(m) not in kept]
    assert new and all(secret not in cdump(m) for m in new)
    assert PROBLEMS["openai-responses"](body["input"]) == []


@pytest.mark.parametrize("body, fragment", [
    ({"format": "anthropic-messages", "messages": [{"role": "system", "content": "x"}]}, "top-level 'system'"),
    ({"format": "openai-responses", "messages": [{"role": "user", "content": "x"}]}, "go in 'input'"),
    ({"format": "openai-responses", "input": [{"content": "x"}]}, "needs a 'type'"),
    ({"format": "gemini", "messages": []}, "format"),
])
def test_items_that_do_not_fit_the_format_are_a_422(compact_module: ModuleType, lambda_context: LocalLambdaContext,
                                                    body: dict[str, Any], fragment: str) -> None:
    status, answer = _compact(compact_module, lambda_context, body)

    assert status == 422
    assert fragment in json.dumps(answer)


@pytest.mark.parametrize("body, loc", [
    ({"format": "openai-responses", "input": "Summarise the repository"}, ["body", "input"]),
    ({"format": "openai-responses", "input": [{"type": "message", "role": "user", "content": "x"}, 7]},
     ["body", "input", 1]),
    ({"format": "openai-chat", "messages": "x"}, ["body", "messages"]),
])
def test_a_422_names_the_items_field_the_format_uses(compact_module: ModuleType, lambda_context: LocalLambdaContext,
                                                      body: dict[str, Any], loc: list[Any]) -> None:
    """A Responses body sends its items as ``input``; a 422 on them named ``messages``, a field it never sent."""
    status, answer = _compact(compact_module, lambda_context, body)

    assert status == 422
    assert [item["loc"] for item in answer["detail"]] == [loc]


def test_a_responses_body_without_input_says_where_its_items_go(compact_module: ModuleType,
                                                                lambda_context: LocalLambdaContext) -> None:
    status, answer = _compact(compact_module, lambda_context, {"format": "openai-responses", "keep_recent": 2})

    assert status == 422 and "items go in 'input'" in answer["detail"][0]["msg"]


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic-messages"])
def test_another_formats_items_under_input_are_a_422_saying_where_they_go(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, fmt: str) -> None:
    """The CLI and the S3 path said so; the API answered ``messages: Field required``, as if nothing had been sent."""
    status, answer = _compact(compact_module, lambda_context, {"format": fmt, "input": [{"role": "user", "content": "x"}]})

    assert status == 422, answer
    assert [(item["loc"], item["msg"]) for item in answer["detail"]] == [
        (["body"], f"{fmt} items go in 'messages', not 'input'")]


def test_a_body_naming_no_format_with_its_items_in_input_is_read_as_openai_responses(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """``{"input": [...]}`` holds Responses items: the CLI, the S3 path and the streamed reading read it so, and the
    OpenAPI document takes a body with ``messages`` or ``input``. The API dropped the ``input`` as an unknown field of
    an ``openai-chat`` request and answered 422 ``messages: Field required``."""
    items = codex_items(CODEX)
    status, named = _compact(compact_module, lambda_context,
                             {"format": "openai-responses", "mode": "decision", "input": items})
    assert status == 200, named

    status, unnamed = _compact(compact_module, lambda_context, {"mode": "decision", "input": items})

    assert status == 200, unnamed
    assert "messages" not in unnamed and unnamed["input"] == named["input"]
    assert unnamed["compaction"] == named["compaction"] and PROBLEMS["openai-responses"](unnamed["input"]) == []


def _lines(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("fmt", list(CASES))
def test_a_claude_code_sessions_records_sent_as_items_are_a_422_saying_what_to_send(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, fmt: str) -> None:
    """A record (``{"type": "user", "message": {...}, "uuid", …}``) has a ``type`` and no ``role``: it was refused as
    an openai-responses item, with the advice to send it with format openai-responses, which refused it again."""
    records = _lines(CLAUDE_CODE)
    first = next(i for i, r in enumerate(records) if r.get("type") in ("user", "assistant"))
    field = CASES[fmt][0]

    status, answer = _compact(compact_module, lambda_context, {"format": fmt, "mode": "decision", field: records})

    assert status == 422, answer
    assert answer["detail"][0]["msg"] == (
        f"{field}[{first}] is a Claude Code session record (type {records[first]['type']!r} with a 'message'), not an "
        "item: send each user and assistant record's 'message' as the items, with format anthropic-messages, or "
        "compact the session file itself (compactor compact FILE, or the S3 path), which reads and writes it as a "
        "session")


@pytest.mark.parametrize("mode", ["decision", "seal", "mask"])
def test_a_codex_rollouts_lines_sent_as_responses_items_are_a_422_not_compacted(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, mode: str) -> None:
    """Every line has a ``type`` and no ``role``, so they passed for Responses items: compacted (200), their
    ``session_meta``, ``turn_context`` and ``event_msg`` lines sealed or summarized with the rest."""
    lines = _lines(CODEX)

    status, answer = _compact(compact_module, lambda_context, {"format": "openai-responses", "mode": mode,
                                                               "input": lines})

    assert status == 422, answer
    assert answer["detail"][0]["msg"].startswith(
        f"input[0] is a Codex rollout line (type {lines[0]['type']!r} with a 'payload'), not an item: send the payloads "
        "of its 'response_item' lines as the items, with format openai-responses, or compact the session file itself")


LANGCHAIN = {  # langchain_core's messages_to_dict, and a message's model_dump()
    "messages_to_dict": [{"type": "system", "data": {"content": "Be careful.", "type": "system"}},
                         {"type": "human", "data": {"content": "Fix the bug.", "type": "human"}},
                         {"type": "ai", "data": {"content": "Done.", "type": "ai", "tool_calls": []}}],
    "model_dump": [{"content": "Fix the bug.", "additional_kwargs": {}, "response_metadata": {}, "type": "human",
                    "name": None, "id": None},
                   {"content": "Done.", "additional_kwargs": {}, "response_metadata": {"model_name": "m"},
                    "type": "ai", "name": None, "id": "run-1", "tool_calls": [], "invalid_tool_calls": []}],
}


@pytest.mark.parametrize("dump", list(LANGCHAIN))
@pytest.mark.parametrize("fmt", list(CASES))
def test_langchain_messages_sent_as_items_are_a_422_saying_what_to_send(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, fmt: str, dump: str) -> None:
    """A LangChain message dict has a ``type`` and no ``role``: it was refused as an openai-responses item, with the
    advice to send it with that format, which took it (an item of an unknown type) and sealed it into a summary."""
    items = LANGCHAIN[dump] * 6
    field = CASES[fmt][0]

    status, answer = _compact(compact_module, lambda_context, {"format": fmt, "mode": "seal", "keep_recent": 1,
                                                               field: items})

    assert status == 422, answer
    assert answer["detail"][0]["msg"] == (
        f"{field}[0] is a LangChain message (type {items[0]['type']!r}), not an item: send OpenAI chat messages, with "
        "format openai-chat (langchain_core.messages.convert_to_openai_messages makes them)")


def _ai_sdk_transcript() -> list[dict[str, Any]]:
    """The Vercel AI SDK's messages: calls as ``tool-call`` parts, results as ``tool-result`` parts of ``tool`` messages."""
    items: list[dict[str, Any]] = [{"role": "system", "content": "Be careful."},
                                   {"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]}]
    for n in range(8):
        items += [{"role": "assistant", "content": [{"type": "text", "text": f"Step {n}."},
                                                    {"type": "tool-call", "toolCallId": f"c{n}", "toolName": "bash",
                                                     "args": {"command": f"cat f{n}.py"}}]},
                  {"role": "tool", "content": [{"type": "tool-result", "toolCallId": f"c{n}", "toolName": "bash",
                                                "result": f"line of f{n}\n" * 200}]}]
    return items + [{"role": "assistant", "content": [{"type": "text", "text": "Done."}]}]


@pytest.mark.parametrize("mode", ["decision", "seal", "mask"])
def test_ai_sdk_messages_are_a_422_not_compacted_apart_from_their_results(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, mode: str) -> None:
    """Their ``tool`` role made them chat messages, but nothing paired a ``tool-call`` part with its ``tool-result``:
    decision mode answered 200 with the results summarized and their calls kept, which a provider refuses."""
    status, answer = _compact(compact_module, lambda_context, {"mode": mode, "keep_recent": 2,
                                                               "messages": _ai_sdk_transcript()})

    assert status == 422, answer
    assert answer["detail"][0]["msg"].startswith(
        "messages[2] is a Vercel AI SDK message (a 'tool-call' part), not an item: send OpenAI chat messages, with "
        "format openai-chat: each call in its assistant message's 'tool_calls'")


def test_gemini_contents_are_a_422_not_sealed_apart_from_their_function_responses(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """A Gemini ``Content`` (``{"role": "model", "parts": [{"functionCall": …}]}``) passed for a chat message: seal
    answered 200 with a ``system`` summary (no Gemini role) followed by a ``functionResponse`` whose call it had
    sealed."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "Fix the bug."}]}]
    for n in range(8):
        contents += [{"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {"command": f"cat f{n}"}}}]},
                     {"role": "user", "parts": [{"functionResponse": {"name": "bash",
                                                                      "response": {"output": "x = 1\n" * 200}}}]}]

    status, answer = _compact(compact_module, lambda_context, {"mode": "seal", "keep_recent": 2, "messages": contents})

    assert status == 422, answer
    assert answer["detail"][0]["msg"] == (
        "messages[0] is a Gemini Content (role 'user' with 'parts'), not an item: send OpenAI chat messages, with format "
        "openai-chat: each functionCall in its assistant message's 'tool_calls', each functionResponse a 'tool' message "
        "with its 'tool_call_id'")


def _interleaved_session() -> list[dict[str, Any]]:
    """Calls whose outputs come after reasoning, an assistant message and another call (parallel calls,
    as the Responses API and Codex write them)."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go"}]}]
    for n in range(8):
        items += [{"type": "function_call", "call_id": f"a{n}", "name": "exec", "arguments": f'{{"cmd": "cat a{n}"}}'},
                  {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
                  {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"Waiting {n}. " * 30}]},
                  {"type": "function_call", "call_id": f"b{n}", "name": "exec", "arguments": f'{{"cmd": "cat b{n}"}}'},
                  {"type": "function_call_output", "call_id": f"a{n}", "output": f"line of a{n} " * 80},
                  {"type": "function_call_output", "call_id": f"b{n}", "output": f"line of b{n} " * 80}]
    return items


@pytest.mark.parametrize("mode", ["decision", "seal", "mask"])
@pytest.mark.parametrize("keep_recent", [2, 3, 4, 5])
def test_no_mode_parts_a_responses_call_from_an_output_that_comes_later(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, mode: str, keep_recent: int) -> None:
    items = _interleaved_session()
    status, body = _compact(compact_module, lambda_context, {
        "format": "openai-responses", "input": items, "mode": mode, "keep_recent": keep_recent,
        "decision_policy_ir": decision_policy()})

    assert status == 200 and body["compacted"] is True
    assert PROBLEMS["openai-responses"](items) == [] and PROBLEMS["openai-responses"](body["input"]) == []


def _preamble_session() -> list[dict[str, Any]]:
    """Codex's responses: reasoning, a short assistant message announcing the call, the call, then its output
    (items with their ids, as a stored response lists them); and responses searching the web before answering."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go"}]}]
    for n in range(8):
        if n % 3 == 2:  # a response searching the web, then answering: its message needs its reasoning too
            items += [{"type": "reasoning", "id": f"rs_w{n}", "summary": [], "encrypted_content": "opaque"},
                      {"type": "web_search_call", "id": f"ws_{n}", "status": "completed",
                       "action": {"type": "search", "query": f"topic {n}"}},
                      {"type": "message", "id": f"msg_w{n}", "role": "assistant",
                       "content": [{"type": "output_text", "text": f"Found {n}. " * 80}]},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Next {n}"}]}]
        items += [{"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": "opaque"},
                  {"type": "message", "id": f"msg_{n}", "role": "assistant",
                   "content": [{"type": "output_text", "text": f"Reading a{n}. " * (1 if n % 2 else 60)}]},
                  {"type": "function_call", "id": f"fc_{n}", "call_id": f"a{n}", "name": "exec",
                   "arguments": f'{{"cmd": "cat a{n}"}}'},
                  {"type": "function_call_output", "call_id": f"a{n}", "output": f"line of a{n} " * (80 if n % 2 else 2)}]
    return items + [{"type": "reasoning", "id": "rs_end", "summary": [], "encrypted_content": "opaque"},
                    {"type": "web_search_call", "id": "ws_end", "status": "completed", "action": {"type": "search", "query": "docs"}},
                    {"type": "message", "id": "msg_end", "role": "assistant", "content": [{"type": "output_text", "text": "Done"}]}]


@pytest.mark.parametrize("mode", ["decision", "seal"])
@pytest.mark.parametrize("keep_recent", [1, 2, 3])
def test_a_responses_item_is_never_kept_without_the_reasoning_of_its_response(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, mode: str, keep_recent: int) -> None:
    """The reasoning item and the messages and calls of one response are one unit: before, the reasoning went
    with the item right after it only, so compacting that item (a preamble message, a web search) sent the call
    or the answer after it back without the reasoning the Responses API requires for it."""
    items = _preamble_session()
    status, body = _compact(compact_module, lambda_context, {
        "format": "openai-responses", "input": items, "mode": mode, "keep_recent": keep_recent, "target_ratio": 0.01,
        "decision_policy_ir": decision_policy()})

    assert status == 200 and body["compacted"] is True
    assert PROBLEMS["openai-responses"](body["input"]) == []
    assert outputs_without_their_reasoning(items, body["input"]) == []


@pytest.mark.parametrize("mode", ["decision", "seal"])
def test_an_anthropic_transcript_still_starts_with_a_user_message_whatever_is_pinned(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, mode: str) -> None:
    """The Messages API refuses a first message that is not a user message, and a summary is an assistant
    message: with pins that leave the first prompt out (``pinned_indices: []``), decision mode used to summarize
    it and answer a transcript starting with an assistant message. The first user message is always kept."""
    big = "Read the module and explain it. " * 60
    items: list[dict[str, Any]] = [{"role": "user", "content": big}]
    for n in range(6):
        items += [{"role": "assistant", "content": [{"type": "text", "text": f"Reading part {n}. " * 40},
                                                    {"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {"n": n}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": f"line {n} " * 200}]}]
    items += [{"role": "assistant", "content": [{"type": "text", "text": "Done."}]}, {"role": "user", "content": "Thanks"}]
    status, body = _compact(compact_module, lambda_context, {
        "format": "anthropic-messages", "messages": items, "mode": mode, "keep_recent": 1, "pinned_indices": [],
        "target_ratio": 0.01, "decision_policy_ir": decision_policy()})

    assert status == 200 and body["compacted"] is True
    output = body["messages"]
    assert cdump(output[0]) == cdump(items[0])
    assert PROBLEMS["anthropic-messages"](output) == []


@pytest.mark.parametrize("kind", ["compaction", "compaction_summary"])
@pytest.mark.parametrize("mode", ["decision", "seal", "mask"])
def test_an_earlier_compaction_item_is_kept_in_place_and_never_read_as_text(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, mode: str, kind: str) -> None:
    """A Responses ``compaction`` item (Codex: ``compaction_summary``) stands for everything before it as
    opaque ``encrypted_content``: every mode keeps it byte-identically where it was, and no new item quotes it."""
    state = {"type": kind, "encrypted_content": "OPAQUE-STATE-" * 40}
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go"}]},
                                   {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Ok"}]},
                                   state]
    for n in range(10):
        items += [{"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
                  {"type": "function_call", "call_id": f"a{n}", "name": "exec", "arguments": f'{{"cmd": "cat a{n}"}}'},
                  {"type": "function_call_output", "call_id": f"a{n}", "output": f"line of a{n} " * 80}]
    status, body = _compact(compact_module, lambda_context, {
        "format": "openai-responses", "input": items, "mode": mode, "keep_recent": 3, "pinned_indices": [],
        "decision_policy_ir": decision_policy()})

    assert status == 200 and body["compacted"] is True
    output = body["input"]
    assert [cdump(m) for m in output].count(cdump(state)) == 1
    assert cdump(output[:3]) == cdump(items[:3])  # nothing before it sealed, moved or summarized away
    kept = {cdump(m) for m in items}
    assert all("OPAQUE-STATE" not in cdump(m) for m in output if cdump(m) not in kept)
    assert PROBLEMS["openai-responses"](output) == []
