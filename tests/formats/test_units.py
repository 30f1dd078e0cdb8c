"""Units follow each format's own pairing; the real sessions have no unit that parts a call from its result."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.formats import get_dialect

from .validity import CLAUDE_CODE, CODEX, claude_code_messages, codex_items

ANTHROPIC = get_dialect("anthropic-messages")
CHAT = get_dialect("openai-chat")
RESPONSES = get_dialect("openai-responses")


def _spans(dialect: Any, items: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(u.start, u.end) for u in dialect.split_units(items)]


def test_anthropic_units_pair_tool_use_with_every_result_and_keep_turns_whole() -> None:
    items = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "id": "m1", "content": [{"type": "thinking", "thinking": "", "signature": "s"}]},
        {"role": "assistant", "id": "m1", "content": [{"type": "tool_use", "id": "a", "name": "R", "input": {}}]},
        {"role": "assistant", "id": "m1", "content": [{"type": "tool_use", "id": "b", "name": "R", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "A"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "B"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        {"role": "user", "content": "thanks"},
    ]
    assert _spans(ANTHROPIC, items) == [(0, 1), (1, 6), (6, 7), (7, 8)]
    assert ANTHROPIC.default_pins(items) == {0, 7}
    assert ANTHROPIC.always_pinned(items) == {0}  # the first message: the API needs a user message first


def test_responses_units_pair_calls_with_outputs_and_reasoning_with_what_follows() -> None:
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "a", "name": "x", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "b", "name": "apply_patch", "input": "..."},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
        {"type": "custom_tool_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "B"}]},
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
        {"type": "function_call", "call_id": "c", "name": "x", "arguments": "{}"},  # in flight: no output
    ]
    # the last reasoning, the message and the call after it are one response's output: one unit
    assert _spans(RESPONSES, items) == [(0, 1), (1, 2), (2, 7), (7, 10)]
    assert RESPONSES.always_pinned(items) == {0} and RESPONSES.default_pins(items) == {1}
    assert all(i.get("type") != "reasoning" for i in RESPONSES.model_view(items))


def test_chat_model_view_keeps_the_chat_fields_only() -> None:
    """A harness's own fields (raw responses, costs, DeepSeek's hidden ``reasoning_content``) and empty
    optional fields never reach a model; the chat fields keep their order and values."""
    items = [
        {"content": "run it", "role": "assistant", "reasoning_content": "hidden", "function_call": None,
         "tool_calls": [{"index": 0, "function": {"arguments": "{}", "name": "bash"}, "id": "a", "type": "function"}],
         "extra": {"response": {"usage": 1}}, "provider_specific_fields": None},
        {"role": "tool", "tool_call_id": "a", "name": "bash", "content": "ok", "timestamp": 1.5},
        {"role": "assistant", "content": None, "refusal": "no"},
    ]
    assert CHAT.model_view(items) == [
        {"content": "run it", "role": "assistant",
         "tool_calls": [{"function": {"arguments": "{}", "name": "bash"}, "id": "a", "type": "function"}]},
        {"role": "tool", "tool_call_id": "a", "name": "bash", "content": "ok"},
        {"role": "assistant", "content": None, "refusal": "no"},
    ]
    assert list(CHAT.model_view(items)[0]) == ["content", "role", "tool_calls"]


def test_anthropic_model_view_keeps_the_messages_api_fields_only() -> None:
    """Claude Code stores the API's whole response as each assistant message: its ``id``, ``model``, ``type``,
    ``stop_reason``, ``stop_sequence``, ``usage`` (and more). None of it reaches a model; ``role`` and ``content``
    keep their order and values, the caller's message is untouched, and a message with nothing else is itself.
    Before, they were a fifth of the Claude Code session's view (``usage`` alone 43 KB of 200 KB)."""
    usage = {"input_tokens": 5342, "output_tokens": 87, "cache_read_input_tokens": 16344}
    response = {"model": "claude-opus-4-8", "id": "msg_01AiMc", "type": "message", "role": "assistant",
                "content": [{"type": "thinking", "thinking": "", "signature": "s"},
                            {"type": "text", "text": "I'll look."}],
                "stop_reason": "tool_use", "stop_sequence": None, "usage": usage, "diagnostics": None}
    user = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"}]}
    before = json.dumps(response)
    view = ANTHROPIC.model_view([response, user])
    assert view == [{"role": "assistant", "content": [{"type": "text", "text": "I'll look."}]}, user]
    assert list(view[0]) == ["role", "content"] and view[1] is user and json.dumps(response) == before
    thinking_only = {"id": "msg_2", "role": "assistant", "usage": usage,
                     "content": [{"type": "thinking", "thinking": "", "signature": "s"}]}
    assert ANTHROPIC.model_view([thinking_only]) == []


def test_no_model_reads_a_claude_code_sessions_response_fields() -> None:
    """On the real Claude Code session: the fragments' evidence, the items to summarize and the recent evidence
    carry no ``usage`` block, response id or stop reason, and each fragment's ``bytes`` still counts its unit as
    it is in the transcript."""
    from compactor.compaction.preparation import prepare
    from compactor.compaction.preset import load_preset
    from compactor.jsonutil import dense_size

    messages = claude_code_messages(CLAUDE_CODE)
    prep = prepare(messages, keep_recent=4, target_ratio=0.1, pinned_indices=None,
                   question_template=load_preset()["question"], dialect=ANTHROPIC)
    candidates = [c for b in prep.batches for c in b.candidates]
    assert len(candidates) > 20 and prep.recent_evidence
    for text in [*(c.evidence for c in candidates), *(c.item for c in candidates), *prep.recent_evidence]:
        for field in ('"usage"', '"stop_reason"', '"stop_sequence"', '"cache_read_input_tokens"', '"msg_0'):
            assert field not in text  # as a key (or a response id): the words may be in the messages' text
    assert all(c.size == dense_size(messages[c.unit.start:c.unit.end]) for c in candidates)


def _model_message_by_copy(item: Any) -> Any:
    """The chat model view of one message as first written: always a copy."""
    from compactor.formats.openai_chat import CALL_FIELDS, MODEL_FIELDS

    if not isinstance(item, dict):
        return item
    return {key: [{k: v for k, v in c.items() if k in CALL_FIELDS} if isinstance(c, dict) else c for c in value]
            if key == "tool_calls" and isinstance(value, list) else value
            for key, value in item.items() if key in MODEL_FIELDS and (value is not None or key in ("role", "content"))}


_CHAT_KEYS = st.sampled_from(["role", "content", "tool_calls", "name", "tool_call_id", "refusal", "extra",
                              "reasoning_content", "function_call"])
_CALL = st.dictionaries(st.sampled_from(["id", "type", "function", "index"]), st.none() | st.text(max_size=3),
                        max_size=4) | st.just("call")
_CHAT_ITEM = st.dictionaries(_CHAT_KEYS, st.none() | st.text(max_size=3) | st.lists(_CALL, max_size=3), max_size=6) | st.just(
    "not a message")


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(_CHAT_ITEM, max_size=4))
def test_the_chat_model_view_is_the_copy_s_json_and_the_item_itself_when_nothing_is_left_out(items) -> None:
    for item, view in zip(items, CHAT.model_view(items), strict=True):
        expected = _model_message_by_copy(item)
        assert json.dumps(view) == json.dumps(expected)
        assert (view is item) == (expected == item and list(expected) == list(item)) or not isinstance(item, dict)


def _results_with_their_calls(dialect: Any, items: list[dict[str, Any]], calls: Any, results: Any) -> None:
    for unit in dialect.split_units(items):
        made = {c for item in items[unit.start:unit.end] for c in calls(item)}
        answered = {r for item in items[unit.start:unit.end] for r in results(item)}
        assert answered <= made


def test_real_sessions_never_part_a_call_from_its_result() -> None:
    def tool_blocks(item: dict[str, Any], kind: str, key: str) -> set[str]:
        content = item.get("content")
        return {b[key] for b in content if b.get("type") == kind} if isinstance(content, list) else set()

    _results_with_their_calls(ANTHROPIC, claude_code_messages(CLAUDE_CODE),
                              lambda i: tool_blocks(i, "tool_use", "id"),
                              lambda i: tool_blocks(i, "tool_result", "tool_use_id"))
    _results_with_their_calls(RESPONSES, codex_items(CODEX),
                              lambda i: {i["call_id"]} if i.get("type", "").endswith("_call") else set(),
                              lambda i: {i["call_id"]} if i.get("type", "").endswith("_call_output") else set())


def test_responses_units_keep_a_call_with_its_output_whatever_lies_between() -> None:
    """Codex and the Responses API put reasoning, messages (Codex's mid-turn developer notes) and other
    calls between a call and its output; the unit runs to the call's last answer."""
    items = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "a", "name": "x", "arguments": "{}"},
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "waiting"}]},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "note"}]},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ]
    assert _spans(RESPONSES, items) == [(0, 1), (1, 6), (6, 7)]


def test_an_unanswered_call_does_not_swallow_what_follows() -> None:
    """A call never answered (the agent stopped, or its output was lost) waits for nothing: the rest of its
    response stays with it, and its unit ends where that response does (after the next call's output), even when
    a later call reuses its id."""
    items = [
        {"type": "function_call", "call_id": "lost", "name": "x", "arguments": "{}"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "next"}]},
        {"type": "function_call", "call_id": "b", "name": "x", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "b", "output": "B"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "again"}]},
        {"type": "function_call", "call_id": "b", "name": "x", "arguments": "{}"},  # an id used twice
        {"type": "function_call_output", "call_id": "b", "output": "B2"},
    ]
    assert _spans(RESPONSES, items) == [(0, 4), (4, 7)]  # a message joins the call after it


def test_a_response_with_an_unanswered_call_keeps_its_reasoning_with_all_its_items() -> None:
    """Reasoning, a call never answered and the response's message after it: the call ended the unit, so decision
    could summarize the reasoning and the call and keep the message, which the Responses API refuses without its
    reasoning (the property tests found it)."""
    items = [
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "lost", "name": "x", "arguments": "{}"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
        {"type": "function_call", "call_id": "end", "name": "x", "arguments": "{}"},  # stopped mid-call
    ]
    assert _spans(RESPONSES, items) == [(0, 3), (3, 4), (4, 5)]


def _stand_in(call_id: str | None, output: Any) -> str:
    return f"[masked {call_id}]"


def test_a_local_shell_call_output_answers_the_call_id_its_id_names() -> None:
    """The API reference: a ``local_shell_call_output``'s ``id`` is the ``call_id`` of its ``local_shell_call``
    (whose own ``id`` is the item's). The pair is one unit, and mask mode names the call it masks."""
    items = [
        {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_1", "status": "completed",
         "action": {"type": "exec", "command": ["ls"], "env": {}}},
        {"type": "reasoning", "summary": []},
        {"type": "local_shell_call_output", "id": "call_1", "output": '{"stdout": "a b c"}'},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ]
    assert _spans(RESPONSES, items) == [(0, 3), (3, 4)]
    assert RESPONSES.masked(items, 2, _stand_in) == {**items[2], "output": "[masked call_1]"}
    assert RESPONSES.call_names(items) == {"call_1": "local_shell_call"}


def test_an_mcp_approval_is_one_unit_and_an_mcp_call_waits_for_no_output() -> None:
    """``mcp_approval_request`` (its ``id``) is answered by ``mcp_approval_response`` (its
    ``approval_request_id``), and the ``mcp_call`` made after it names it too; an ``mcp_call`` carries its
    output and waits for none: what follows joins it only as the same response's output (calls, messages)."""
    items = [
        {"type": "message", "role": "user", "content": "roll"},
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "dice", "tools": [{"name": "roll", "input_schema": {}}]},
        {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "dice", "name": "roll", "arguments": "{}"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ok"}]},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        {"type": "mcp_call", "id": "mcp_1", "approval_request_id": "mcpr_1", "server_label": "dice", "name": "roll",
         "arguments": "{}", "output": "4"},
        {"type": "mcp_call", "id": "mcp_2", "server_label": "dice", "name": "roll", "arguments": "{}", "output": "6"},
        {"type": "function_call", "call_id": "f", "name": "x", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f", "output": "F"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "4 and 6"}]},
    ]
    # the calls after the approval (both mcp_calls, the function call) are one response's output
    assert _spans(RESPONSES, items) == [(0, 1), (1, 2), (2, 9), (9, 10)]
    assert RESPONSES.render_line(items[6]) == "assistant: [tool call roll({})]\ntool: 6"
    assert RESPONSES.render_line(items[1]) == "mcp_list_tools: dice: roll"


def test_an_mcp_calls_own_output_is_masked_and_the_call_kept() -> None:
    """An ``mcp_call`` carries its output in the call item: mask replaces that string (named by the call's
    ``id`` and tool), keeping the call; before, mask left every ``mcp_call`` output whole."""
    call = {"type": "mcp_call", "id": "mcp_2", "server_label": "dice", "name": "roll", "arguments": "{}",
            "output": "x" * 500}
    items = [{"type": "message", "role": "user", "content": "roll"}, call]

    assert RESPONSES.masked(items, 1, _stand_in) == {**call, "output": "[masked mcp_2]"}
    assert RESPONSES.call_names(items) == {"mcp_2": "roll"}
    assert RESPONSES.masked(items, 1, lambda call_id, output: None) is None  # not smaller: kept
    assert RESPONSES.masked([{**call, "output": None}], 0, _stand_in) is None  # no output (failed call): kept


def test_structured_outputs_are_masked_in_their_own_shape_and_rendered_with_their_text() -> None:
    """A list of content parts becomes one ``input_text`` part; a screenshot (``computer_call_output``), which
    cannot be text in the API, is kept; seal's line shows the text and marks images and files."""
    image = {"type": "input_image", "image_url": "data:image/png;base64," + "A" * 200}
    parts = [{"type": "input_text", "text": "page 1"}, image, {"type": "input_file", "filename": "a.pdf", "file_id": "f"}]
    screenshot = {"type": "computer_screenshot", "image_url": image["image_url"]}
    items = [
        {"type": "function_call", "call_id": "a", "name": "view", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": parts},
        {"type": "computer_call", "call_id": "b", "action": {"type": "screenshot"}},
        {"type": "computer_call_output", "call_id": "b", "output": screenshot},
    ]
    assert RESPONSES.masked(items, 1, _stand_in) == {**items[1], "output": [{"type": "input_text", "text": "[masked a]"}]}
    assert RESPONSES.masked(items, 3, _stand_in) is None
    assert RESPONSES.render_line(items[1]) == "tool: page 1 [image] [file a.pdf]"
    assert RESPONSES.render_line(items[3]) == "tool: [image]"


def test_a_compaction_item_is_protected_and_hidden_from_the_models() -> None:
    items = [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "compaction", "encrypted_content": "E"},
        {"type": "compaction_summary", "encrypted_content": "E"},
        {"type": "function_call", "call_id": "a", "name": "x", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
    ]
    assert RESPONSES.always_pinned(items) == {1, 2}
    assert _spans(RESPONSES, items) == [(0, 1), (1, 2), (2, 3), (3, 5)]  # it leads into nothing
    assert RESPONSES.model_view(items) == [items[0], items[3], items[4]]
    assert RESPONSES.render_line(items[1]) == RESPONSES.render_line(items[2]) == ""


def _late_responses() -> list[dict[str, Any]]:
    """A call answered late: a build started, the human asks for something else, the agent does it (a call and its
    output), and the build's output comes after all of that."""
    def call(call_id: str, cmd: str) -> dict[str, Any]:
        return {"type": "function_call", "call_id": call_id, "name": "exec", "arguments": json.dumps({"cmd": cmd})}

    return [
        {"role": "user", "content": "build it"},
        {"type": "reasoning", "summary": []}, call("build", "make all"),
        {"role": "user", "content": "meanwhile, what is in notes.txt?"},
        {"type": "reasoning", "summary": []}, call("cat", "cat notes.txt"),
        {"type": "function_call_output", "call_id": "cat", "output": "notes " * 300},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The notes say ..."}]},
        {"type": "function_call_output", "call_id": "build", "output": "built " * 300},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Built."}]},
    ]


def _late_anthropic() -> list[dict[str, Any]]:
    def use(tool_id: str) -> dict[str, Any]:
        return {"role": "assistant", "content": [{"type": "tool_use", "id": tool_id, "name": "Bash", "input": {}}]}

    def result(tool_id: str, text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": text * 300}]}

    return [{"role": "user", "content": "build it"}, use("build"), {"role": "user", "content": "meanwhile, the notes?"},
            use("cat"), result("cat", "notes "), {"role": "assistant", "content": [{"type": "text", "text": "..."}]},
            result("build", "built "), {"role": "assistant", "content": [{"type": "text", "text": "Built."}]}]


def test_a_call_answered_late_keeps_its_answer_without_taking_in_the_work_between() -> None:
    """A call whose answer comes past other work (a human turn, a call answered before it) made one unit of
    everything between the call and its answer, so one decision covered unrelated work. The call's unit now ends
    where it would without the late answer; the call and its answer are protected, paired and in order, and the work
    between them is compacted as usual."""
    items = _late_responses()
    assert _spans(RESPONSES, items) == [(0, 1), (1, 3), (3, 4), (4, 7), (7, 8), (8, 9), (9, 10)]
    assert RESPONSES.always_pinned(items) == {1, 2, 8}
    items = _late_anthropic()
    assert _spans(ANTHROPIC, items) == [(0, 1), (1, 2), (2, 3), (3, 5), (5, 6), (6, 7), (7, 8)]
    assert ANTHROPIC.always_pinned(items) == {0, 1, 6}


def test_a_late_answer_past_reasoning_and_messages_of_its_own_turn_stays_in_the_unit() -> None:
    """No other work between (reasoning, the agent's messages, Codex's developer notes): one unit, as before."""
    items = _late_responses()
    del items[3:7]
    assert _spans(RESPONSES, items) == [(0, 1), (1, 5), (5, 6)] and RESPONSES.always_pinned(items) == set()


def test_decision_compacts_the_work_between_a_call_and_its_late_answer() -> None:
    from compactor.container import run_sync
    from compactor.models import CompactRequest
    from compactor.service import compact_call, request_deadline

    from .conftest import decision_policy
    from .validity import PROBLEMS

    for fmt, items, field in (("openai-responses", _late_responses(), "input"),
                              ("anthropic-messages", _late_anthropic(), "messages")):
        request = CompactRequest.model_validate({"format": fmt, field: items, "mode": "decision", "keep_recent": 1,
                                                 "target_ratio": 0.01, "pinned_indices": [0],
                                                 "decision_policy_ir": decision_policy()})
        record = run_sync(compact_call(request, deadline=request_deadline()))
        assert record.status == 200 and record.body["compacted"] is True, fmt
        output = record.body[field]
        # the Messages API wants a result right after its call: such an input has that problem already, no other
        assert set(PROBLEMS[fmt](output)) <= set(PROBLEMS[fmt](items)), fmt
        text = json.dumps(output)
        assert "make all" in text or '"build"' in text, fmt  # the late call and its answer, kept
        assert ("built " * 300) in text and ("notes " * 300) not in text, fmt  # the work between: compacted


def test_one_claude_code_response_interleaved_with_its_results_is_one_unit() -> None:
    """Claude Code writes a response as a record per block and each call's result as soon as it has it, so a
    response's later calls and text come after the results of its first calls. Only consecutive records of one
    ``id`` were joined: the response spanned units, and decision could keep its first part (with its thinking, whose
    signature covers the whole response) and summarize the rest."""
    def block(kind: str, n: int) -> dict[str, Any]:
        if kind == "thinking":
            return {"type": "thinking", "thinking": "", "signature": "sig"}
        if kind == "text":
            return {"type": "text", "text": "All three read."}
        return {"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {"n": n}}

    def result(n: int) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": f"file {n}"}]}

    items = [{"role": "user", "content": "read three files"},
             {"role": "assistant", "id": "m1", "content": [block("thinking", 0)]},
             {"role": "assistant", "id": "m1", "content": [block("tool_use", 1)]}, result(1),
             {"role": "assistant", "id": "m1", "content": [block("tool_use", 2)]}, result(2),
             {"role": "assistant", "id": "m1", "content": [block("tool_use", 3)]}, result(3),
             {"role": "assistant", "id": "m1", "content": [block("text", 0)]},
             {"role": "user", "content": "thanks"},
             {"role": "assistant", "id": "m2", "content": [block("tool_use", 4)]}, result(4)]
    assert _spans(ANTHROPIC, items) == [(0, 1), (1, 9), (9, 10), (10, 12)]


def test_no_response_of_the_real_claude_code_session_spans_units() -> None:
    items = claude_code_messages(CLAUDE_CODE)
    unit_of = {i: k for k, unit in enumerate(ANTHROPIC.split_units(items)) for i in unit.indexes()}
    units_of_response: dict[str, set[int]] = {}
    for index, item in enumerate(items):
        if item.get("role") == "assistant" and isinstance(item.get("id"), str):
            units_of_response.setdefault(item["id"], set()).add(unit_of[index])
    assert units_of_response and all(len(units) == 1 for units in units_of_response.values())
