"""Independent checks that items are valid in their format (written from the APIs' documented rules,
not from ``compactor.formats``): every result answers a call made earlier, and no call made in an item
that precedes its results lost them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
CLAUDE_CODE = CORPUS / "anthropic-messages" / "claude-code-2.1.179_claude-opus-4-8_git-sync_omitted-thinking.jsonl"
CODEX = CORPUS / "openai-responses" / "codex-desktop-0.133.0_gpt-5.5_entire-graph_resumed.jsonl"
CHAT = CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"


def anthropic_problems(messages: list[dict[str, Any]]) -> list[str]:
    problems, called = [], set()
    if messages and messages[0].get("role") != "user":  # "messages: first message must use the "user" role"
        problems.append(f"0: the first message has role {messages[0].get('role')!r}")
    for index, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            problems.append(f"{index}: role {message.get('role')!r}")
        content = message.get("content")
        if not isinstance(content, (str, list)):
            problems.append(f"{index}: content is {type(content).__name__}")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use":
                called.add(block["id"])
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                problems.append(f"{index}: tool_result {block.get('tool_use_id')} answers no earlier tool_use")
    return problems + _final_thinking_problems(messages) + tool_uses_without_results_right_after(messages)


def _loaded_names(block: dict[str, Any]) -> set[str]:
    """The deferred tools a block loads: the ``tool_reference`` blocks of a client tool search's ``tool_result``
    content, or of a server tool search result's ``content.tool_references`` (the Messages API's tool search)."""
    content = block.get("content")
    references = content.get("tool_references") if isinstance(content, dict) else content
    return {r.get("tool_name") for r in references if isinstance(r, dict) and r.get("type") == "tool_reference"
            } if isinstance(references, list) else set()


def calls_to_unloaded_tools(items: list[dict[str, Any]], output: list[dict[str, Any]]) -> list[str]:
    """``tool_use`` blocks of ``output`` calling a deferred tool (one a ``tool_reference`` of ``items`` loads)
    before any block of ``output`` loads it: the API knows such a tool's definition only from the reference on."""
    deferred = {name for m in items for b in _blocks(m) for name in _loaded_names(b)}
    loaded: set[str] = set()
    problems = []
    for index, message in enumerate(output):
        for block in _blocks(message):
            loaded |= _loaded_names(block)
            if block.get("type") == "tool_use" and block.get("name") in deferred - loaded:
                problems.append(f"{index}: {block.get('name')} is called but no longer loaded")
    return problems


def responses_calls_to_unloaded_tools(items: list[dict[str, Any]], output: list[dict[str, Any]]) -> list[str]:
    """``function_call`` items of ``output`` calling a deferred function (one a ``tool_search_output`` of ``items``
    loads, alone or in a namespace) before any ``tool_search_output`` of ``output`` loads it."""
    def loaded(item: dict[str, Any]) -> set[str]:
        tools = item.get("tools") if item.get("type") == "tool_search_output" else None
        found = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
        found += [m for t in found if t.get("type") == "namespace" for m in t.get("tools") or [] if isinstance(m, dict)]
        return {t.get("name") for t in found if t.get("type") != "namespace"}

    deferred = {name for item in items for name in loaded(item)}
    available: set[str] = set()
    problems = []
    for index, item in enumerate(output):
        available |= loaded(item)
        if item.get("type") == "function_call" and item.get("name") in deferred - available:
            problems.append(f"{index}: {item.get('name')} is called but no longer loaded")
    return problems


def tool_uses_without_results_right_after(messages: list[dict[str, Any]]) -> list[str]:
    """``tool_use`` blocks not answered by the next user message ("tool_use ids were found without tool_result
    blocks immediately after"); the API merges consecutive messages of one role. The last turn may be unanswered."""
    turns: list[tuple[str, list[dict[str, Any]], int]] = []
    for index, message in enumerate(messages):
        if turns and turns[-1][0] == message.get("role"):
            turns[-1][1].extend(_blocks(message))
        else:
            turns.append((str(message.get("role")), list(_blocks(message)), index))
    problems = []
    for (role, blocks, start), following in zip(turns, turns[1:]):
        answered = {b.get("tool_use_id") for b in following[1] if b.get("type") == "tool_result"}
        problems += [f"{start}: tool_use {b.get('id')} has no tool_result right after it" for b in blocks
                     if role == "assistant" and b.get("type") == "tool_use" and b.get("id") not in answered]
    return problems


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


THINKING = ("thinking", "redacted_thinking")


def _final_thinking_problems(messages: list[dict[str, Any]]) -> list[str]:
    """With thinking on (the final assistant message holds thinking), the final assistant message of a turn in
    progress must start with a thinking block ("a final assistant message must start with a thinking block");
    the API merges consecutive assistant messages into one. The turn is in progress while the last user turn carries
    tool results, whatever text it holds beside them: the API combines consecutive user messages into one turn too
    (Claude Code stores "[Request interrupted by user for tool use]" as a message after the results)."""
    end = len(messages)
    while end and messages[end - 1].get("role") == "user":
        end -= 1
    if end < len(messages) and not any(_carries_tool_results(m) for m in messages[end:]):
        return []  # the last turn is the human's: no turn in progress
    start = end
    while start and messages[start - 1].get("role") == "assistant":
        start -= 1
    if start == end:  # no assistant message before the last user turn: no turn in progress
        return []
    blocks = [b for m in messages[start:end] for b in (m["content"] if isinstance(m.get("content"), list) else
                                                         [{"type": "text"}])]
    if any(b.get("type") in THINKING for b in blocks) and blocks[0].get("type") not in THINKING:
        return [f"{start}: the final assistant message starts with {blocks[0].get('type')}, not its thinking"]
    return []


def _carries_tool_results(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


# The Responses API's pairing (its API reference): a ``*_call_output`` answers the ``call_id`` of an earlier
# call, except a ``local_shell_call_output``, whose ``id`` is the ``call_id`` of its ``local_shell_call``; an
# ``mcp_approval_response`` answers the ``id`` of an earlier ``mcp_approval_request``. Server-side calls
# (``mcp_call``, ``web_search_call``, …) carry their results and have no call_id. A call with no output is
# rejected ("No tool output found for function call"). A ``tool_search_call`` the client executes has a ``call_id``
# its ``tool_search_output`` echoes; one the server executes has a null ``call_id``, and so has its output.
def _answered_id(item: dict[str, Any], kind: str) -> Any:
    if kind == "local_shell_call_output":
        return item.get("id")
    return item.get("approval_request_id") if kind == "mcp_approval_response" else item.get("call_id")


def responses_problems(items: list[dict[str, Any]]) -> list[str]:
    problems, called, answered = [], {}, set()
    for index, item in enumerate(items):
        kind = item.get("type", "message" if "role" in item else None)
        if kind is None:
            problems.append(f"{index}: no type")
        elif kind.endswith("_call_output") or kind == "mcp_approval_response" or (
                kind == "tool_search_output" and item.get("call_id") is not None):
            answers = _answered_id(item, kind)
            if answers not in called:
                problems.append(f"{index}: {kind} {answers} answers no earlier call")
            answered.add(answers)
        elif kind.endswith("_call") and item.get("call_id") is not None:
            called[item["call_id"]] = index
        elif kind == "mcp_approval_request":
            called[item.get("id")] = index
        elif kind == "message" and not isinstance(item.get("content"), (str, list)):
            problems.append(f"{index}: message content")
    problems += [f"{index}: call {call} has no output" for call, index in called.items() if call not in answered]
    return problems


def _response_output(item: dict[str, Any]) -> bool:
    """An item a response outputs: an assistant message or a call (``reasoning`` aside)."""
    kind = item.get("type", "message" if "role" in item else "")
    return (kind == "message" and item.get("role") == "assistant") or kind.endswith("_call")


def outputs_without_their_reasoning(items: list[dict[str, Any]], output: list[dict[str, Any]]) -> list[str]:
    """Items of ``output`` from a response that began with a ``reasoning`` item (read in ``items``: the
    reasoning, then the assistant messages and calls after it) whose reasoning ``output`` no longer holds. The
    Responses API refuses them ("Item 'fc_…' of type 'function_call' was provided without its required
    'reasoning' item", and the same for a 'message')."""
    needs: dict[str, str] = {}
    reasoning = None
    for item in items:
        if item.get("type") == "reasoning":
            reasoning = cdump(item)
        elif not _response_output(item):
            reasoning = None
        elif reasoning is not None:
            needs[cdump(item)] = reasoning
    present = {cdump(item) for item in output}
    return [f"{index}: {item.get('type')} {item.get('id')} without its reasoning"
            for index, item in enumerate(output) if needs.get(cdump(item), cdump(item)) not in present]


def chat_problems(messages: list[dict[str, Any]]) -> list[str]:
    problems, called = [], set()
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or []:
            called.add(call.get("id"))
        if message.get("role") == "tool" and message.get("tool_call_id") not in called:
            problems.append(f"{index}: tool message answers no earlier call")
    return problems


PROBLEMS = {"openai-chat": chat_problems, "anthropic-messages": anthropic_problems,
            "openai-responses": responses_problems}


def claude_code_messages(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["message"] for r in records if r.get("type") in ("user", "assistant") and isinstance(r.get("message"), dict)]


def codex_items(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["payload"] for r in records if r.get("type") == "response_item"]


def cdump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
