"""Base64 media in what the models read (docs/formats.md "Images and files"): every base64 payload of an item (an
image, a document, a file, audio, a screenshot) reads in the models' view as ``[<media type>, N bytes]``, in every
format; URLs and file ids stay; the caller's items are never changed; and a unit holding a large screenshot is sent to
the models (its base64 does not count against the summary record's limit, since no model reads it).

Before, the decision and summary prompts carried the base64 (clipped in the evidence, whole in the summarizer's
item): paid input that tells a text model nothing, filling the clip budget instead of the unit's text; and a unit
holding a screenshot over 50,000 bytes was never sent at all (``not_sent``), so decision mode kept every one of them."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
from typing import Any

import pytest

from compactor import service
from compactor.budget import Deadline
from compactor.formats import get_dialect
from compactor.models import CompactRequest
from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
from fakes.routers import provider_router
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply, decision_reply

PNG = b"\x89PNG\r\n\x1a\n"


def _b64(size: int, seed: int = 0) -> str:
    """``size`` bytes (a PNG signature, then incompressible bytes) in base64."""
    return base64.b64encode(PNG + random.Random(seed).randbytes(size - len(PNG))).decode()


DATA = _b64(3000)  # 3,000 bytes: 4,000 base64 characters


def _no_base64(value: Any) -> bool:
    return DATA[100:160] not in json.dumps(value)


# -- the models' view, format by format ------------------------------------------------------------------------------

def test_chat_views_show_each_base64_part_by_its_marker() -> None:
    message = {"role": "user", "content": [
        {"type": "text", "text": "What changed on screen?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{DATA}", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/shot.png"}},
        {"type": "input_audio", "input_audio": {"data": DATA, "format": "wav"}},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{DATA}", "filename": "spec.pdf"}},
        {"type": "file", "file": {"file_data": DATA, "filename": "raw.pdf"}},
        {"type": "file", "file": {"file_id": "file-abc"}}]}
    before = copy.deepcopy(message)
    view = get_dialect("openai-chat").model_view([message])
    assert view[0]["content"] == [
        {"type": "text", "text": "What changed on screen?"},
        {"type": "image_url", "image_url": {"url": "[image/png, 3000 bytes]", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/shot.png"}},
        {"type": "input_audio", "input_audio": {"data": "[audio/wav, 3000 bytes]", "format": "wav"}},
        {"type": "file", "file": {"file_data": "[application/pdf, 3000 bytes]", "filename": "spec.pdf"}},
        {"type": "file", "file": {"file_data": "[file, 3000 bytes]", "filename": "raw.pdf"}},
        {"type": "file", "file": {"file_id": "file-abc"}}]
    assert message == before  # the caller's message is untouched
    plain = {"role": "user", "content": "a data:image/png;base64, in text stays text"}
    assert get_dialect("openai-chat").model_view([plain])[0] is plain  # nothing to replace: the message itself
    printed = {"role": "tool", "tool_call_id": "call_1", "content": [  # a text that only starts like a data: URL
        {"type": "text", "text": f"data:image/png;base64,{DATA[:200]} is what the page printed, then it failed"}]}
    assert get_dialect("openai-chat").model_view([printed])[0] is printed


def test_anthropic_views_show_each_base64_source_by_its_marker() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": DATA}}
    message = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "clicked"}, image]},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": DATA},
         "title": "Spec"},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain text " * 20}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image", "source": {"type": "file", "file_id": "file_011"}}]}
    fetch = {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_fetch", "input": {"url": "https://x/y.pdf"}},
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_1", "content": {
            "type": "web_fetch_result", "url": "https://x/y.pdf", "content": {
                "type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": DATA}}}}]}
    before = copy.deepcopy([message, fetch])
    view = get_dialect("anthropic-messages").model_view([message, fetch])
    marked = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": "[image/png, 3000 bytes]"}}
    assert view[0]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "clicked"}, marked]},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": "[application/pdf, 3000 bytes]"}, "title": "Spec"},
        message["content"][2], message["content"][3], message["content"][4]]
    assert view[1]["content"][1]["content"]["content"]["source"]["data"] == "[application/pdf, 3000 bytes]"
    assert _no_base64(view) and [message, fetch] == before


def test_responses_views_show_each_base64_payload_by_its_marker() -> None:
    items = [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Fill the form."},
            {"type": "input_image", "image_url": f"data:image/jpeg;base64,{DATA}", "detail": "auto"},
            {"type": "input_image", "file_id": "file-1"},
            {"type": "input_file", "filename": "form.pdf", "file_data": f"data:application/pdf;base64,{DATA}"},
            {"type": "input_file", "filename": "raw.pdf", "file_data": DATA},
            {"type": "input_file", "file_url": "https://example.com/form.pdf"}]},
        {"type": "computer_call", "call_id": "call_c", "action": {"type": "screenshot"}},
        {"type": "computer_call_output", "call_id": "call_c",
         "output": {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{DATA}"}},
        {"type": "function_call", "call_id": "call_f", "name": "browser_snapshot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_f", "output": [
            {"type": "input_text", "text": "page loaded"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{DATA}"}]}]
    before = copy.deepcopy(items)
    view = get_dialect("openai-responses").model_view(items)
    assert [part.get("image_url") or part.get("file_data") or part.get("file_id") or part.get("file_url")
            for part in view[0]["content"][1:]] == [
        "[image/jpeg, 3000 bytes]", "file-1", "[application/pdf, 3000 bytes]", "[file, 3000 bytes]",
        "https://example.com/form.pdf"]
    assert view[2]["output"] == {"type": "computer_screenshot", "image_url": "[image/png, 3000 bytes]"}
    assert view[4]["output"][1] == {"type": "input_image", "image_url": "[image/png, 3000 bytes]"}
    assert view[1] is items[1] and view[3] is items[3]  # nothing to replace: the item itself
    assert [list(v) for v in view] == [list(i) for i in items]  # each view item keeps its item's key order
    assert _no_base64(view) and items == before


# -- what the models are sent, through the real transports ------------------------------------------------------------

async def _sealed(fake: FakeProviderServer, fmt: str, items: list[dict[str, Any]]) -> list[str]:
    """The bodies the provider received when ``items`` (of ``fmt``) were sealed, the last unit kept."""
    field = "input" if fmt == "openai-responses" else "messages"
    request = CompactRequest.model_validate({"format": fmt, field: items, "mode": "seal", "keep_recent": 1})
    status, body = await service.compact(request, deadline=Deadline.after_ms(60_000), router=provider_router(fake))
    assert status == 200, body
    return [r.body.decode() for r in fake.requests]


def _screenshot(fmt: str, n: int, data: str) -> list[dict[str, Any]]:
    """A computer-use agent's step ``n`` in ``fmt``: its call, and its result with a screenshot."""
    text = f"Clicked the button number {n}; the dialog shows the record loop settings. " * 8
    if fmt == "anthropic-messages":
        return [{"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "computer",
                                                   "input": {"action": "left_click", "coordinate": [10 * n, 20]}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": [
                    {"type": "text", "text": text},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}]}]
    if fmt == "openai-responses":
        return [{"type": "function_call", "call_id": f"call_{n}", "name": "computer",
                 "arguments": json.dumps({"action": "click", "x": 10 * n})},
                {"type": "function_call_output", "call_id": f"call_{n}", "output": [
                    {"type": "input_text", "text": text},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{data}"}]}]
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{n}", "type": "function", "function": {
                "name": "computer", "arguments": json.dumps({"action": "click", "x": 10 * n})}}]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]}]


def _transcript(fmt: str, data: list[str]) -> list[dict[str, Any]]:
    task = "Open the settings and turn the record loop off. " * 4
    items: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for n, shot in enumerate(data):
        items += _screenshot(fmt, n, shot)
    done = "The record loop is off."
    items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": done}]}
                 if fmt == "openai-responses" else {"role": "assistant", "content": done})
    return items


async def _compact(fake: FakeProviderServer, fmt: str, items: list[dict[str, Any]], choice: str) -> dict[str, Any]:
    def answer(request: RecordedRequest) -> Reply:
        if request.path.endswith("/decisions"):
            return decision_reply({name: {"type": "choice", "choice": choice, "confidence": 1.0}
                                   for name in request.json["questions"]})
        return chat_reply("{}")  # no summary: the units are kept

    fake.responder = answer
    field = "input" if fmt == "openai-responses" else "messages"
    request = CompactRequest.model_validate({"format": fmt, field: items, "keep_recent": 1, "target_ratio": 0.05,
                                             "decision_policy_ir": DEFAULT_DECISIONS_POLICY})
    status, body = await service.compact(request, deadline=Deadline.after_ms(60_000), router=provider_router(fake))
    assert status == 200, body
    return body


FORMATS = ("openai-chat", "anthropic-messages", "openai-responses")


@pytest.mark.parametrize("fmt", FORMATS)
async def test_no_model_request_carries_a_screenshots_base64(fake_provider: FakeProviderServer, fmt: str) -> None:
    """Decision and summary requests show each screenshot as ``[image/png, 3000 bytes]``; the answer keeps every
    byte of the kept items. Before, the decisions' evidence and the summarizer's items carried the base64."""
    items = _transcript(fmt, [DATA] * 4)
    before = copy.deepcopy(items)
    body = await _compact(fake_provider, fmt, items, "summarize")
    decisions = [r.body.decode() for r in fake_provider.requests if r.path.endswith("/decisions")]
    summaries = [r.body.decode() for r in fake_provider.requests if not r.path.endswith("/decisions")]
    assert decisions and summaries
    assert all(DATA[100:160] not in sent for sent in decisions + summaries)
    assert all("[image/png, 3000 bytes]" in sent for sent in summaries)
    assert items == before
    field = "input" if fmt == "openai-responses" else "messages"
    assert body[field] == items  # no summary came back: every item kept, byte for byte


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_unit_holding_a_large_screenshot_is_sent_and_compacted(fake_provider: FakeProviderServer,
                                                                       fmt: str) -> None:
    """A 60 KB screenshot no longer makes its unit too big to send (the summary record counts its marker, as the
    models read it): the decider is asked about it and can archive it. Before, such a unit was over the record's
    50,000 bytes, kept as ``not_sent`` (the ``fragment_or_decision_context_limit``), and the output kept every
    screenshot."""
    shots = [_b64(60_000, seed) for seed in range(4)]
    items = _transcript(fmt, shots)
    body = await _compact(fake_provider, fmt, items, "archive")
    report = body["compaction"]
    asked = {name for r in fake_provider.requests if r.path.endswith("/decisions") for name in r.json["questions"]}
    reasons = {f["id"]: f["reason"] for f in report["fragments"]}
    with_shots = {f"fragment_{1 + 2 * n}" for n in range(4)}
    candidates = {unit for unit in with_shots if reasons[unit] not in ("pinned", "recent_tail")}
    assert len(candidates) >= 2 and candidates <= asked
    assert {reasons[unit] for unit in candidates} == {"archived"}
    assert "fragment_or_decision_context_limit" not in report["reasons"]
    field = "input" if fmt == "openai-responses" else "messages"
    kept = json.dumps(body[field])
    assert sum(shot[:80] in kept for shot in shots) == 4 - len(candidates)


@pytest.mark.parametrize("fmt", ("openai-chat", "anthropic-messages"))
def test_windows_send_and_compact_the_units_holding_screenshots(fmt: str) -> None:
    """The windows of a large transcript (docs/scale.md) batch their candidates as one request does: a unit holding a
    60 KB screenshot is summarized. Before, every such unit was kept (``fragment_or_decision_context_limit``) and
    the output was the input."""
    from compactor.compaction.windowed import compact_in_memory, inline_runner
    from compactor.jsonutil import dense_size
    from fakes.routers import frozen_router

    items = _transcript(fmt, [_b64(60_000, n) for n in range(12)])
    request = CompactRequest.model_validate({"format": fmt, "messages": items,
                                             "decision_policy_ir": DEFAULT_DECISIONS_POLICY})
    router = frozen_router()
    record = asyncio.run(compact_in_memory(request, router=router,
                                           run_window=inline_runner(router, window_budget_ms=60_000)))
    assert "fragment_or_decision_context_limit" not in record.report["reasons"]
    assert record.report["output_bytes"] < 0.2 * dense_size(items)


def test_the_marker_counts_the_bytes_the_base64_decodes_to_whatever_its_line_breaks_and_padding() -> None:
    """N is the decoded size: MIME base64 (a line break every 76 characters, as ``base64.encodebytes`` and many mail
    and PDF tools write it), with CRLF breaks, a trailing newline, or URL-safe without padding all read as the 3,001
    bytes they decode to. Before, each line break counted as 3/4 of a byte: ``[image/png, 3042 bytes]`` for MIME,
    3082 with CRLF, a 30,000-byte screenshot as 30,395."""
    raw = random.Random(7).randbytes(3001)
    mime = base64.encodebytes(raw).decode()
    encodings = [mime, mime.replace("\n", "\r\n"), base64.b64encode(raw).decode() + "\n",
                 base64.urlsafe_b64encode(raw).decode().rstrip("=")]
    for data in encodings:
        assert base64.urlsafe_b64decode(data.replace("\r", "").replace("\n", "") + "=" * (-len(data.strip()) % 4)
                                        ) == raw
        message = {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
            {"type": "text", "text": f"data:image/png;base64,{data}"}]}
        view = get_dialect("anthropic-messages").model_view([message])[0]["content"]
        assert [view[0]["source"]["data"], view[1]["text"]] == ["[image/png, 3001 bytes]"] * 2
        audio = {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}]}
        assert get_dialect("openai-chat").model_view([audio])[0]["content"][0]["input_audio"]["data"] == \
            "[audio/wav, 3001 bytes]"


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_builtin_summary_of_a_unit_holding_a_screenshot_says_it_had_one(fmt: str) -> None:
    """The built-in summarizer reads the marker the view shows: each summary of a unit whose result held a screenshot
    keeps ``[image/png, 60000 bytes]`` after the call. Before, it read a content's text parts only, so the summary
    (the call and the result's text) never said a screenshot had been there, though the prompt showed its marker."""
    from fakes.routers import frozen_router

    items = _transcript(fmt, [_b64(60_000, n) for n in range(6)])
    field = "input" if fmt == "openai-responses" else "messages"
    request = CompactRequest.model_validate({"format": fmt, field: items, "keep_recent": 1, "target_ratio": 0.05,
                                             "mode": "decision"})
    status, body = asyncio.run(service.compact(request, deadline=Deadline.after_ms(60_000), router=frozen_router()))
    assert status == 200, body
    summaries = [json.dumps(item) for item in body[field] if "[Summary of fragment_" in json.dumps(item)]
    assert len(summaries) >= 4
    assert all("[image/png, 60000 bytes]" in summary for summary in summaries)


def test_the_builtin_summary_names_each_image_file_and_audio_part() -> None:
    """Each part holding no text reads as its marker, a file with its name; an image by URL as ``[image]``."""
    from compactor.offline.summarizer import summarize_item

    unit = [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "fetch", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": [
                {"type": "text", "text": "fetched"},
                {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{DATA}", "filename": "spec.pdf"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/shot.png"}},
                {"type": "input_audio", "input_audio": {"data": DATA, "format": "wav"}}]}]
    item = json.dumps(get_dialect("openai-chat").model_view(unit))
    assert summarize_item(item, 2000).splitlines()[-3:] == [
        "[file spec.pdf: application/pdf, 3000 bytes]", "[image]", "[audio/wav, 3000 bytes]"]


def test_a_data_url_that_is_a_whole_content_or_output_reads_as_its_marker_in_every_format() -> None:
    """A tool whose output is a data: URL (a screenshot printed as text) reads as a marker whether its result holds it
    as a text part, a whole string content (chat), a whole string output (Responses) or a tool_result's string
    content (Anthropic), and its unit is measured so for batching. Before, the string content and output were never
    looked at: the models read the base64, and a 60 KB one made its unit too big to send (``not_sent``)."""
    from compactor.compaction.preparation import prepare
    from compactor.compaction.decision import question_template

    shot = f"data:image/png;base64,{_b64(60_000)}"
    cases = {
        "openai-chat": [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                                             "function": {"name": "shot", "arguments": "{}"}}]},
                        {"role": "tool", "tool_call_id": "call_1", "content": shot}],
        "openai-responses": [{"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"},
                             {"type": "function_call_output", "call_id": "call_1", "output": shot}],
        "anthropic-messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot",
                                                                  "input": {}}]},
                               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                             "content": shot}]}],
    }
    for fmt, unit in cases.items():
        before = copy.deepcopy(unit)
        view = json.dumps(get_dialect(fmt).model_view(unit))
        assert "[image/png, 60000 bytes]" in view and shot[100:200] not in view, fmt
        assert unit == before
        task = {"role": "user", "content": "Take a screenshot of the page. " * 4}
        done = ({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}
                if fmt == "openai-responses" else {"role": "assistant", "content": "Done."})
        prep = prepare([task, *unit, *unit, done], keep_recent=1, target_ratio=0.1, pinned_indices=None,
                       question_template=question_template(), dialect=get_dialect(fmt))
        assert 1 in [c.unit.start for batch in prep.batches for c in batch.candidates] and not prep.reasons, fmt


@pytest.mark.parametrize("fmt", FORMATS)
async def test_seals_input_shows_a_data_url_written_as_text_by_its_marker(fake_provider: FakeProviderServer,
                                                                          fmt: str) -> None:
    """Seal mode's summarizer reads a tool output that is a base64 data: URL (a string output, or a text part holding
    one) as ``[image/png, 3000 bytes]``, as the models' view shows it. Before, it read the base64: a 100 KB screenshot
    printed as text was 133 KB of the seal's input, though an image part read as ``[image]``."""
    shot = f"data:image/png;base64,{DATA}"
    items = _transcript(fmt, [DATA] * 4)
    for n, output in ((0, shot), (1, [{"type": "input_text" if fmt == "openai-responses" else "text", "text": shot}])):
        result = items[2 * n + 2]
        if fmt == "anthropic-messages":
            result["content"][0]["content"] = output
        elif fmt == "openai-responses":
            result["output"] = output
        else:
            result["content"] = output
    fake_provider.responder = lambda request: chat_reply("The record loop is off; four screenshots were taken.")
    sent = await _sealed(fake_provider, fmt, items)
    assert sent and all(DATA[100:160] not in text for text in sent)
    assert sum(text.count("[image/png, 3000 bytes]") for text in sent) == 2


def test_a_text_going_on_after_a_data_url_in_words_stays_as_it_is() -> None:
    """A tool's text that prints a data: URL and goes on in plain words (letters and spaces, which the base64 alphabet
    and its line breaks would take in) is no payload: the models read it whole. Before, the words were read as base64,
    so the view showed ``[image/png, 332 bytes]`` alone and the tool's message was lost."""
    text = f"data:image/png;base64,{DATA[:400]} Screenshot of the login form saved to the clipboard"
    for fmt, item in (("openai-chat", {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text",
                                                                                              "text": text}]}),
                      ("anthropic-messages", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                                           "content": text}]})):
        assert get_dialect(fmt).model_view([item])[0] is item, fmt
    shot = f"data:image/png;base64,{base64.encodebytes(random.Random(3).randbytes(300)).decode()}"
    assert get_dialect("openai-chat").model_view([{"role": "user", "content": [{"type": "text", "text": shot}]}]
                                                 )[0]["content"][0]["text"] == "[image/png, 300 bytes]"


# -- base64 in a tool call's arguments ---------------------------------------------------------------------------------

def _saving(fmt: str, n: int, data: str) -> list[dict[str, Any]]:
    """An agent's step ``n`` in ``fmt``: a call writing a PNG file through a tool that takes its bytes as base64 (in the
    call's arguments: a JSON string, or an Anthropic ``tool_use``'s ``input``), and the tool's short answer."""
    arguments = {"path": f"out/chart_{n}.png", "encoding": "base64", "content": data}
    note = f"Saved the chart number {n}; the next one plots the record loop's latency by hour. " * 4
    if fmt == "anthropic-messages":
        return [{"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "write_file",
                                                   "input": arguments}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": note}]}]
    if fmt == "openai-responses":
        return [{"type": "function_call", "call_id": f"call_{n}", "name": "write_file",
                 "arguments": json.dumps(arguments)},
                {"type": "function_call_output", "call_id": f"call_{n}", "output": note}]
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{n}", "type": "function", "function": {
                "name": "write_file", "arguments": json.dumps(arguments)}}]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": note}]


def _saving_transcript(fmt: str, data: list[str]) -> list[dict[str, Any]]:
    items = _transcript(fmt, [])
    return items[:1] + [item for n, shot in enumerate(data) for item in _saving(fmt, n, shot)] + items[1:]


def test_base64_in_a_tool_calls_arguments_reads_as_its_marker_in_every_format() -> None:
    """A call sending a file's bytes as base64 (bare, or a data: URL) reads as ``[data, 3000 bytes]`` (or the URL's
    media type) in the models' view: a Chat Completions call's ``function.arguments`` and a custom tool's ``input``, a
    Responses ``function_call``'s ``arguments`` and a ``custom_tool_call``'s ``input``, an Anthropic ``tool_use``'s
    ``input``; the rest of the arguments' text is kept as it is, and the caller's items are not changed. A hex digest,
    a DNA sequence and a short key stay. Before, the arguments were never looked at (an Anthropic input's data: URL
    aside): the models read the base64 whole."""
    digest, dna, key = "0123456789abcdef" * 16, "ACGT" * 100, DATA[:200]
    arguments = json.dumps({"path": "a.png", "content": DATA, "sha": digest, "dna": dna, "key": key, "lines":
                            base64.encodebytes(base64.b64decode(DATA)).decode(),
                            "image": f"data:image/png;base64,{DATA}"})
    shown = json.dumps({"path": "a.png", "content": "[data, 3000 bytes]", "sha": digest, "dna": dna, "key": key,
                        "lines": "[data, 3000 bytes]", "image": "[image/png, 3000 bytes]"})
    chat = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "write_file", "arguments": arguments}},
        {"id": "call_2", "type": "custom", "custom": {"name": "upload", "input": DATA}},
        {"id": "call_3", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": dna})}}]}
    legacy = {"role": "assistant", "content": None, "function_call": {"name": "write_file", "arguments": arguments}}
    responses = [{"type": "function_call", "call_id": "call_1", "name": "write_file", "arguments": arguments},
                 {"type": "custom_tool_call", "call_id": "call_2", "name": "upload",
                  "input": f"data:image/png;base64,{DATA}"},
                 {"type": "mcp_call", "id": "mcp_1", "server_label": "drive", "name": "upload", "arguments": arguments}]
    anthropic = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "write_file",
                                                   "input": json.loads(arguments)}]}
    before = copy.deepcopy([chat, legacy, responses, anthropic])
    view = get_dialect("openai-chat").model_view([chat, legacy])
    calls = view[0]["tool_calls"]
    assert [calls[0]["function"]["arguments"], calls[1]["custom"]["input"]] == [shown, "[data, 3000 bytes]"]
    assert calls[2] is chat["tool_calls"][2]  # nothing to replace: the call itself
    assert view[1]["function_call"] == {"name": "write_file", "arguments": shown}
    view = get_dialect("openai-responses").model_view(responses)
    assert [view[0]["arguments"], view[1]["input"], view[2]["arguments"]] == [shown, "[image/png, 3000 bytes]", shown]
    view = get_dialect("anthropic-messages").model_view([anthropic])
    assert view[0]["content"][0]["input"] == json.loads(shown)
    assert [chat, legacy, responses, anthropic] == before


@pytest.mark.parametrize("fmt", FORMATS)
async def test_no_model_request_carries_the_base64_of_a_tool_calls_arguments(fake_provider: FakeProviderServer,
                                                                             fmt: str) -> None:
    """Decision and summary requests show a file sent through a call's arguments by its marker; the answer keeps every
    byte of the kept items. Before, both carried the base64 (the summarizer's item whole)."""
    items = _saving_transcript(fmt, [DATA] * 4)
    before = copy.deepcopy(items)
    body = await _compact(fake_provider, fmt, items, "summarize")
    sent = [r.body.decode() for r in fake_provider.requests]
    assert any(r.path.endswith("/decisions") for r in fake_provider.requests) and len(sent) >= 2
    assert all(DATA[100:160] not in text for text in sent)
    assert any("[data, 3000 bytes]" in text for text in sent if "write_file" in text)
    field = "input" if fmt == "openai-responses" else "messages"
    assert body[field] == items == before  # no summary came back: every item kept, byte for byte


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_unit_whose_call_sends_a_large_file_is_sent_and_compacted(fake_provider: FakeProviderServer,
                                                                          fmt: str) -> None:
    """A call writing a 60 KB file through its arguments no longer makes its unit too big to send: the decider is
    asked about it and can archive it. Before, such a unit was over the summary record's 50,000 bytes, kept as
    ``not_sent`` (the ``fragment_or_decision_context_limit``), and the output kept every file's base64."""
    files = [_b64(60_000, seed) for seed in range(4)]
    body = await _compact(fake_provider, fmt, _saving_transcript(fmt, files), "archive")
    report = body["compaction"]
    asked = {name for r in fake_provider.requests if r.path.endswith("/decisions") for name in r.json["questions"]}
    reasons = {f["id"]: f["reason"] for f in report["fragments"]}
    candidates = {f"fragment_{1 + 2 * n}" for n in range(4)} - {u for u, r in reasons.items()
                                                                if r in ("pinned", "recent_tail")}
    assert len(candidates) >= 2 and candidates <= asked
    assert {reasons[unit] for unit in candidates} == {"archived"}
    assert "fragment_or_decision_context_limit" not in report["reasons"]
    field = "input" if fmt == "openai-responses" else "messages"
    kept = json.dumps(body[field])
    assert sum(data[:80] in kept for data in files) == 4 - len(candidates)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_batchs_later_actions_quote_a_calls_base64_by_its_marker(fmt: str) -> None:
    """A call after a batch that writes a file through its arguments is quoted in the batch's ``later`` block as the
    models' view shows it, ``[data, 3000 bytes]``. Before, Chat Completions calls were quoted from the messages as
    they are, so each decision request carried the base64's first 200 characters per such call."""
    from compactor.compaction.decision import question_template
    from compactor.compaction.preparation import prepare

    items = _saving_transcript(fmt, [DATA] * 4)
    prep = prepare(items, keep_recent=3, target_ratio=0.05, pinned_indices=None,
                   question_template=question_template(), dialect=get_dialect(fmt))
    later = json.dumps([batch.later for batch in prep.batches])
    assert "write_file" in later and "[data, 3000 bytes]" in later and DATA[:100] not in later


@pytest.mark.parametrize("fmt", FORMATS)
async def test_seals_input_shows_a_calls_base64_by_its_marker(fake_provider: FakeProviderServer, fmt: str) -> None:
    """Seal mode's summarizer reads a call writing a file through its arguments as ``write_file({… "content": "[data,
    3000 bytes]"})``. Before, it read the base64 whole: with a 50-200 KB screenshot saved after each tool result, the
    seal's one call carried 96 % of the transcript (``model_input.py --screenshots --in-calls``)."""
    items = _saving_transcript(fmt, [DATA] * 4)
    fake_provider.responder = lambda request: chat_reply("Four charts were saved under out/.")
    sent = await _sealed(fake_provider, fmt, items)
    assert sent and all(DATA[100:160] not in text for text in sent)
    assert sum(text.count("[data, 3000 bytes]") for text in sent) >= 3  # each aged call (Anthropic's tail: the last)


@pytest.mark.parametrize("where", ("beside the tool_result", "beside it, after a text"))
def test_the_builtin_summary_says_an_image_beside_a_tool_result_was_there(where: str) -> None:
    """An Anthropic user message may hold an image (or a document) after its tool_result blocks, as a harness attaching
    a screenshot to the results sends it: the built-in summary of its unit says ``[image/png, 60000 bytes]``, as it
    does for an image inside the tool_result. Before, the message was read as its tool_result and its text only, so the
    summary said nothing of the image, though the prompt showed its marker. (Such a message is a human turn, pinned
    by default: the request pins the task only, as a caller naming ``pinned_indices`` does.)"""
    from fakes.routers import frozen_router

    items = _transcript("anthropic-messages", [_b64(60_000, n) for n in range(6)])
    for message in items[2:-1:2]:  # each tool_result: its image moved out beside it
        result = message["content"][0]
        text, image = result["content"]
        result["content"] = text["text"]
        message["content"] = [result, image] if where == "beside the tool_result" else [
            result, {"type": "text", "text": "The screen after the click:"}, image]
    request = CompactRequest.model_validate({"format": "anthropic-messages", "messages": items, "keep_recent": 1,
                                             "target_ratio": 0.05, "mode": "decision", "pinned_indices": [0]})
    status, body = asyncio.run(service.compact(request, deadline=Deadline.after_ms(60_000), router=frozen_router()))
    assert status == 200, body
    summaries = [json.dumps(item) for item in body["messages"] if "[Summary of fragment_" in json.dumps(item)]
    assert len(summaries) >= 4
    assert all("[image/png, 60000 bytes]" in summary for summary in summaries)


# -- an assistant's audio reply (Chat Completions) ---------------------------------------------------------------------

def _spoken(n: int, data: str) -> list[dict[str, Any]]:
    """A voice agent's turn ``n``: the user's question, and the assistant's audio reply as the Chat Completions API
    returns it (``audio``: its id, its base64 ``data``, its transcript)."""
    return [{"role": "user", "content": f"What is step {n} of the record loop's setup? " * 3},
            {"role": "assistant", "content": None, "audio": {
                "id": f"audio_{n}", "data": data, "expires_at": 1767225600,
                "transcript": f"Step {n}: open the settings, then the loop's page, and switch it off. " * 3}}]


async def test_a_unit_holding_an_assistants_audio_reply_is_sent_and_compacted(fake_provider: FakeProviderServer) -> None:
    """An assistant's audio reply of 60 KB (``audio.data``, under two seconds of 16-bit 24 kHz speech) counts as its
    marker in batching, as every other payload does: the decider is asked about its unit and can archive it. Before,
    batching counted the base64 whole: the unit was over the summary record's 50,000 bytes, kept as ``not_sent``
    (the ``fragment_or_decision_context_limit``), and the output kept every reply's audio."""
    replies = [_b64(60_000, seed) for seed in range(4)]
    items = [item for n, data in enumerate(replies) for item in _spoken(n, data)]
    items.append({"role": "user", "content": "Thanks, that is all."})
    before = copy.deepcopy(items)
    body = await _compact(fake_provider, "openai-chat", items, "archive")
    report = body["compaction"]
    asked = {name for r in fake_provider.requests if r.path.endswith("/decisions") for name in r.json["questions"]}
    reasons = {f["id"]: f["reason"] for f in report["fragments"]}
    spoken = {f"fragment_{1 + 2 * n}" for n in range(4)}
    assert spoken <= asked and {reasons[unit] for unit in spoken} == {"archived"}
    assert "fragment_or_decision_context_limit" not in report["reasons"]
    assert not any(data[:80] in json.dumps(body["messages"]) for data in replies)
    assert items == before
    view = get_dialect("openai-chat").media_shown(items[1])
    assert view["audio"] == {**items[1]["audio"], "data": "[audio, 60000 bytes]"}


def _voice_transcript(replies: list[str]) -> list[dict[str, Any]]:
    items = [item for n, data in enumerate(replies) for item in _spoken(n, data)]
    items.append({"role": "user", "content": "Thanks, that is all."})
    return items


def _said(n: int) -> str:
    return f"Step {n}: open the settings, then the loop's page, and switch it off."


def test_the_models_view_shows_an_assistants_audio_reply_by_its_transcript_and_marker() -> None:
    """An assistant's audio reply (its ``content`` null) reads in the models' view as its ``audio`` with the transcript
    whole and the base64 as ``[audio, 60000 bytes]``, in its key order; a reply sent back by its ``id`` alone (later
    turns) reads as that id; an SDK's ``"audio": null`` is left out as every empty field is. Seal's input reads it as
    ``[audio]`` and the transcript. Before, the view left ``audio`` out, so the models read ``content: null``, and
    seal's line was an empty ``assistant: ``."""
    chat = get_dialect("openai-chat")
    reply = _spoken(0, _b64(60_000))[1]
    later = {"role": "assistant", "content": None, "audio": {"id": "audio_0"}}
    dumped = {"role": "assistant", "content": "Done.", "refusal": None, "audio": None, "function_call": None}
    before = copy.deepcopy([reply, later, dumped])
    view = chat.model_view([reply, later, dumped])
    assert view[0] == {"role": "assistant", "content": None, "audio": {**reply["audio"], "data": "[audio, 60000 bytes]"}}
    assert list(view[0]["audio"]) == list(reply["audio"])
    assert view[1] == later
    assert view[2] == {"role": "assistant", "content": "Done."}
    assert [reply, later, dumped] == before  # the caller's messages are untouched
    assert chat.render_line(reply) == f"assistant: [audio] {reply['audio']['transcript']}"
    assert chat.render_line(later) == "assistant: [audio]"
    # a user's audio has no transcript: its marker, in both formats that take it (as before)
    spoken = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Is the loop off?"}, {"type": "input_audio", "input_audio": {
            "data": DATA, "format": "mp3"}}]}
    responses = get_dialect("openai-responses")
    assert responses.model_view([spoken])[0]["content"][1]["input_audio"]["data"] == "[audio/mp3, 3000 bytes]"
    assert responses.render_line(spoken) == "user: Is the loop off? [audio]"


async def test_the_decider_and_the_summarizer_read_what_a_voice_reply_said(fake_provider: FakeProviderServer) -> None:
    """The decisions' evidence and the summarizer's items carry each reply's transcript and its audio's marker, never
    its base64. Before, they carried ``{"role": "assistant", "content": null}``: nothing of what was said."""
    replies = [_b64(60_000, seed) for seed in range(4)]
    items = _voice_transcript(replies)
    before = copy.deepcopy(items)
    body = await _compact(fake_provider, "openai-chat", items, "summarize")
    decisions = [r.body.decode() for r in fake_provider.requests if r.path.endswith("/decisions")]
    summaries = [r.body.decode() for r in fake_provider.requests if not r.path.endswith("/decisions")]
    for n in range(4):
        assert any(_said(n) in sent for sent in decisions) and any(_said(n) in sent for sent in summaries)
    assert sum(sent.count("[audio, 60000 bytes]") for sent in summaries) == 4
    assert not any(data[100:160] in sent for data in replies for sent in decisions + summaries)
    assert items == before and body["messages"] == items  # no summary came back: every item kept, byte for byte


async def test_seals_input_reads_what_a_voice_reply_said(fake_provider: FakeProviderServer) -> None:
    """Seal mode's summarizer reads each aged reply as ``assistant: [audio] <transcript>``. Before, as an empty
    ``assistant: `` line: the sealed summary could not say what the assistant had answered."""
    replies = [_b64(60_000, seed) for seed in range(4)]
    fake_provider.responder = lambda request: chat_reply("Steps 0 to 3 were read out.")
    sent = "".join(await _sealed(fake_provider, "openai-chat", _voice_transcript(replies)))
    assert all(f"assistant: [audio] {_said(n)}" in sent for n in range(4))
    assert not any(data[100:160] in sent for data in replies)


def test_the_builtin_summary_of_a_voice_reply_says_what_was_said() -> None:
    """The built-in summarizer reads a reply's transcript as the message's text, then its audio's marker: each summary
    of a voice reply says what was said. Before, it read ``content: null`` and its summary was a cut of the item's JSON
    (``{"role": "assistant", "content": n…``). (The user's turns are pinned by the request, as by default.)"""
    from compactor.offline.summarizer import summarize_item
    from fakes.routers import frozen_router

    request = CompactRequest.model_validate({
        "format": "openai-chat", "messages": _voice_transcript([_b64(60_000, n) for n in range(6)]),
        "keep_recent": 1, "target_ratio": 0.05, "mode": "decision"})
    status, body = asyncio.run(service.compact(request, deadline=Deadline.after_ms(60_000), router=frozen_router()))
    assert status == 200, body
    summaries = {item["content"].split(";")[0]: item["content"] for item in body["messages"]
                 if "[Summary of fragment_" in str(item.get("content"))}
    assert len(summaries) >= 4
    for head, summary in summaries.items():
        n = (int(head.rsplit("_", 1)[1]) - 1) // 2
        assert summary.splitlines()[1:] == [" ".join([_said(n)] * 3), "[audio, 60000 bytes]"]
    # a reply that speaks and calls a tool: its transcript reads as the agent's notes, before the call
    unit = [{"role": "assistant", "content": None, "audio": {"id": "audio_9", "data": DATA, "transcript": _said(9)},
             "tool_calls": [{"id": "call_1", "type": "function", "function": {
                 "name": "switch", "arguments": json.dumps({"loop": "off"})}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "the loop is off"}]
    summary = summarize_item(json.dumps(get_dialect("openai-chat").model_view(unit)), 2000)
    assert summary.splitlines()[:2] == [_said(9), "[audio, 3000 bytes]"]
