"""What the models, seal's input and mask read of each documented item and block type (docs/formats.md "Item and
block types"): every call type's own fields, never a base64 image, a refusal as its text; mask replaces the large
outputs that have a smaller form the provider accepts back."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

from compactor.formats import get_dialect
from compactor.jsonutil import dense_size
from compactor_cli.lambda_runtime import LocalLambdaContext

from .test_dialect_types import (
    ANTHROPIC_CASES, CHAT_CASES, PAD, RESPONSES_CASES, _anthropic_transcript, _compact, _responses_transcript, _server,
    _text, _use)

IMAGE_B64 = "iVBORw0KGgo" * 120  # the image_generation_call case's result: 1320 characters, 990 bytes of image


def _case_item(case: str, kind: str) -> dict[str, Any]:
    return next(item for item in RESPONSES_CASES[case] if item.get("type") == kind)


# -- seal's input and the models' view (openai-responses, openai-chat) -----------------------------------------------

def test_seal_reads_each_responses_call_types_own_fields() -> None:
    """Before, a call whose input is not in ``arguments``, ``input`` or ``action`` read as ``name(null)`` and a
    server-side call's own result was not read: ``[tool call image_generation_call(null)]``,
    ``code_interpreter_call(null)`` without its logs, ``apply_patch_call(null)`` without the file or the diff,
    ``file_search_call(null)`` without its results."""
    dialect = get_dialect("openai-responses")
    lines = {kind: dialect.render_line(_case_item(case, kind)) for case, kind in [
        ("image_generation_call", "image_generation_call"), ("code_interpreter_call", "code_interpreter_call"),
        ("apply_patch_call+apply_patch_call_output", "apply_patch_call"), ("file_search_call", "file_search_call")]}
    assert not [line for line in lines.values() if "(null)" in line]
    assert lines["image_generation_call"] == "assistant: [tool call image_generation_call()]\ntool: [image, 990 bytes]"
    assert lines["code_interpreter_call"] == f"assistant: [tool call code_interpreter_call(print(1))]\ntool: {PAD}"
    assert '"path": "src/parse.py"' in lines["apply_patch_call"] and '"diff": "@@ -1 +1 @@' in lines["apply_patch_call"]
    assert lines["file_search_call"] == (f'assistant: [tool call file_search_call(["record loop"])]\n'
                                         f"tool: spec.md: {PAD}".rstrip())


def test_an_image_generations_base64_is_never_shown_to_the_models_or_seal() -> None:
    """The image is megabytes of base64 a text model cannot read: the models' view and seal's input show its size.
    Before, the models' view pasted it whole into the summary prompt."""
    dialect = get_dialect("openai-responses")
    item = _case_item("image_generation_call", "image_generation_call")
    view = dialect.model_view([item])
    assert view == [{**item, "result": "[image, 990 bytes]"}] and list(view[0]) == list(item)
    assert IMAGE_B64[:40] not in json.dumps(view) and IMAGE_B64[:40] not in dialect.render_line(item)
    assert item["result"] == IMAGE_B64  # the caller's item is untouched
    failed = {"type": "image_generation_call", "id": "ig_2", "status": "failed", "result": None}
    assert dialect.render_line(failed).endswith("tool: [no image: failed]") and dialect.model_view([failed]) == [failed]


def test_a_refusal_reads_as_its_text() -> None:
    """A ``refusal`` content part (Responses, Chat Completions) and a chat message's ``refusal`` field are the
    assistant's words. Before, seal's input read the Responses refusal as ``assistant: `` and the chat one as
    ``assistant: `` too."""
    refusal = "I can't help with that. " * 10
    responses = _case_item("refusal", "message")
    assert get_dialect("openai-responses").render_line(responses) == f"assistant: {refusal}"
    chat = CHAT_CASES["refusal"][0]
    assert get_dialect("openai-chat").render_line(chat) == f"assistant: {refusal}"  # once, not twice
    assert get_dialect("openai-chat").render_line({"role": "assistant", "content": None, "refusal": "No."}) == (
        "assistant: No.")


def test_the_salience_scan_reads_a_code_interpreters_code_and_a_patchs_file() -> None:
    """The decision models' hints read a call as the chat tool call it corresponds to: its code and its patch, not
    ``null``."""
    from compactor.chat import chat_reading

    code = chat_reading(_case_item("code_interpreter_call", "code_interpreter_call"))
    patch = chat_reading(_case_item("apply_patch_call+apply_patch_call_output", "apply_patch_call"))
    assert code[0]["tool_calls"][0]["function"] == {"name": "code_interpreter_call", "arguments": "print(1)"}
    assert "src/parse.py" in patch[0]["tool_calls"][0]["function"]["arguments"]


# -- mask (openai-responses) -----------------------------------------------------------------------------------------

def test_mask_replaces_an_image_generations_result_and_a_code_interpreters_outputs(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """The image (a base64 string, megabytes) and the logs are outputs like any other: mask replaces them in a
    shape the API takes back (``result`` ``null``, as an image call without its image has it: a placeholder string
    is not base64; ``outputs`` a list holding one ``logs`` output), the call kept. Before, both stayed whole."""
    for case, kind, field in [("image_generation_call", "image_generation_call", "result"),
                              ("code_interpreter_call", "code_interpreter_call", "outputs")]:
        items = _responses_transcript(case)
        output = _compact(compact_module, lambda_context, "openai-responses", items, "mask")
        index = next(i for i, item in enumerate(items) if item.get("type") == kind)
        original = items[index]
        size = len(json.dumps(original[field], separators=(",", ":")))
        text = f"[output of {kind} (call {original['id']}) omitted by compaction: {size} bytes]"
        assert output[index] == {**original, field: None if field == "result" else [{"type": "logs", "logs": text}]}


# -- anthropic-messages ----------------------------------------------------------------------------------------------

def _anthropic_mask(module: ModuleType, context: LocalLambdaContext, case: str,
                    message: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The case's first message (7, after the prompt and three cycles) as sent and as mask answers it."""
    items = _anthropic_transcript(case)
    if message is not None:
        items[7] = message
    output = _compact(module, context, "anthropic-messages", items, "mask")
    assert len(output) == len(items)
    return items[7], output[7]


def _stand_in(name: str, call: str, output: Any) -> str:
    return f"[output of {name} (call {call}) omitted by compaction: {dense_size(output)} bytes]"


def test_mask_replaces_server_tools_outputs_in_the_shape_the_api_documents(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """A code execution's, a bash execution's output, a text editor's view of a text file and an MCP tool's result
    (in the assistant message of its call) are tool outputs like any other: mask replaces them, keeping the result's
    type, id and the rest of its content (the return code, the output files). Before, mask read user messages only,
    and left every server tool's result whole."""
    for case, name, call in [("code_execution_tool_result", "code_execution", "srvtoolu_ce"),
                             ("bash_code_execution_tool_result", "bash_code_execution", "srvtoolu_bc")]:
        sent, masked = _anthropic_mask(compact_module, lambda_context, case)
        result = sent["content"][1]["content"]
        assert masked["content"][1] == {**sent["content"][1], "content": {
            **result, "stdout": _stand_in(name, call, PAD), "stderr": ""}}
        assert masked["content"][0] == sent["content"][0] and masked["content"][2] == sent["content"][2]

    sent, masked = _anthropic_mask(compact_module, lambda_context, "text_editor_code_execution_tool_result")
    result = sent["content"][1]["content"]
    assert masked["content"][1]["content"] == {
        **result, "content": _stand_in("text_editor_code_execution", "srvtoolu_te", PAD)}

    sent, masked = _anthropic_mask(compact_module, lambda_context, "mcp_tool_use+mcp_tool_result")
    assert masked["content"][1] == {**sent["content"][1], "content": _stand_in("echo", "mcptoolu_1",
                                                                               sent["content"][1]["content"])}


def test_mask_replaces_a_fetched_page_unless_it_may_be_cited(compact_module: ModuleType,
                                                               lambda_context: LocalLambdaContext) -> None:
    """A fetched page's document becomes a text document holding the placeholder (its title and the fetch's URL
    kept); with ``citations`` enabled the answer after it may cite it by position, so it stays, as a web search's
    results do (their only smaller form is an error code)."""
    sent, masked = _anthropic_mask(compact_module, lambda_context, "web_fetch_tool_result")
    assert masked == sent  # citations enabled
    message = json.loads(json.dumps(ANTHROPIC_CASES["web_fetch_tool_result"][0]))
    document = message["content"][1]["content"]["content"]
    del document["citations"]
    sent, masked = _anthropic_mask(compact_module, lambda_context, "web_fetch_tool_result", message)
    placeholder = _stand_in("web_fetch", "srvtoolu_wf", document["source"]["data"])
    assert masked["content"][1]["content"] == {**sent["content"][1]["content"], "content": {
        **document, "source": {"type": "text", "media_type": "text/plain", "data": placeholder}}}

    sent, masked = _anthropic_mask(compact_module, lambda_context, "server_tool_use+web_search_tool_result+citations")
    assert masked == sent


def test_mask_never_grows_a_short_server_output() -> None:
    """Mask uses a placeholder only where the result is smaller: a short code interpreter log (its one ``logs``
    output's wrapper on top of the placeholder) and a short fetched page (a base64 source becoming a text one) stay."""
    from compactor.compaction.mask import mask

    log = {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "container_id": "cntr_1",
           "code": "print(1)", "outputs": [{"type": "logs", "logs": "x" * 60}]}
    user = {"type": "message", "role": "user", "content": "go"}
    for logs, replaced in (("x" * 60, False), ("x" * 200, True)):
        items = [user, {**log, "outputs": [{"type": "logs", "logs": logs}]}, user, _responses_transcript("refusal")[-1]]
        output, masked = mask(items, keep_recent=1, pinned_indices=None, dialect=get_dialect("openai-responses"))
        assert len(masked) == replaced and (output == items) != replaced
        assert dense_size(output[1]) <= dense_size(items[1])

    for data in ("JVBERi0xLjQ" * 6, "JVBERi0xLjQ" * 60):
        page = {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_wf", "name": "web_fetch", "input": {"url": "https://e.com"}},
            {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_wf", "content": {
                "type": "web_fetch_result", "url": "https://e.com", "content": {
                    "type": "document", "title": "e.pdf",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": data}}}}]}
        items = [{"role": "user", "content": "go"}, page, {"role": "user", "content": "more"},
                 {"role": "assistant", "content": "done"}]
        output, masked = mask(items, keep_recent=1, pinned_indices=[0], dialect=get_dialect("anthropic-messages"))
        assert dense_size(output[1]) <= dense_size(page) and len(masked) == (len(data) > 100)


def test_seal_reads_a_text_editors_view_and_an_advisors_advice() -> None:
    """Before, both read as an empty ``[tool result] ``."""
    dialect = get_dialect("anthropic-messages")
    for case in ("text_editor_code_execution_tool_result", "advisor_tool_result"):
        assert f"[tool result] {PAD}" in dialect.render_line(ANTHROPIC_CASES[case][0])


def test_the_opaque_fields_of_server_tools_results_are_hidden_from_the_models() -> None:
    """A web search's results carry ``encrypted_content`` (and a citation of one its ``encrypted_index``), an advisor's
    redacted advice ``encrypted_content``, an encrypted code execution ``encrypted_stdout``: bytes the API wants back
    verbatim and no model can read. The models' view and what batching counts leave them out; the caller's items
    keep them. Before, the decision and summary prompts carried them."""
    from compactor.compaction.preparation import batching_text, recent_view

    secrets = {f: f"{f}-OPAQUE-" * 40 for f in ("content", "index", "advice", "stdout")}
    message = {"role": "assistant", "content": [
        _server("srvtoolu_ws", "web_search", {"query": "record loop parser bug"}),
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_ws", "content": [
            {"type": "web_search_result", "url": "https://example.com/bug", "title": "Parser bug",
             "encrypted_content": secrets["content"], "page_age": "April 30, 2025"}]},
        {"type": "text", "text": "The loop skips the last record.", "citations": [
            {"type": "web_search_result_location", "url": "https://example.com/bug", "title": "Parser bug",
             "encrypted_index": secrets["index"], "cited_text": "skips the last record"}]},
        _server("srvtoolu_ad", "advisor", {}),
        {"type": "advisor_tool_result", "tool_use_id": "srvtoolu_ad",
         "content": {"type": "advisor_redacted_result", "encrypted_content": secrets["advice"]}},
        _server("srvtoolu_ce", "code_execution", {"code": "print(1)"}),
        {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_ce", "content": {
            "type": "encrypted_code_execution_result", "encrypted_stdout": secrets["stdout"], "stderr": "",
            "return_code": 0, "content": []}}]}
    original = json.dumps(message)
    dialect = get_dialect("anthropic-messages")
    view = dialect.model_view([message])
    shown = json.dumps(view)
    assert not any(secret[:30] in shown for secret in secrets.values()), shown
    assert view[0]["content"][1]["content"] == [{"type": "web_search_result", "url": "https://example.com/bug",
                                                 "title": "Parser bug", "page_age": "April 30, 2025"}]
    assert view[0]["content"][2]["citations"][0]["cited_text"] == "skips the last record"
    assert view[0]["content"][6]["content"]["return_code"] == 0
    counted = batching_text([message], dialect)
    assert counted is not None and not any(secret[:30] in counted for secret in secrets.values())
    assert not any(secret[:30] in recent_view([message], dialect) for secret in secrets.values())
    assert json.dumps(message) == original


def test_a_compaction_blocks_encrypted_content_is_hidden_from_the_models(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """The block's optional ``encrypted_content`` is opaque bytes to a model, as a thinking signature is: the models'
    view leaves it out (its summary stays), and the answer keeps the block byte-identically. Before, the decider's
    recent evidence and the salience scan read it."""
    from compactor.compaction.preparation import recent_view

    secret = "EncryptedCompactionState" * 40
    message = {"role": "assistant", "content": [
        {"type": "compaction", "content": "Summary: the record loop is being fixed.", "encrypted_content": secret},
        _text("Continuing from the summary."), _use("toolu_k")]}
    dialect = get_dialect("anthropic-messages")
    view = dialect.model_view([message])
    assert view[0]["content"][0] == {"type": "compaction", "content": "Summary: the record loop is being fixed."}
    assert view[0]["content"][1:] == message["content"][1:] and "encrypted_content" in message["content"][0]
    assert secret[:30] not in recent_view([message], dialect)

    items = _anthropic_transcript("compaction")
    items[7] = message
    for mode in ("decision", "seal", "mask"):
        output = _compact(compact_module, lambda_context, "anthropic-messages", items, mode)
        assert json.dumps(message) in {json.dumps(m) for m in output}
