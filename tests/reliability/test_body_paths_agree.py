"""The same bytes judged the same way on every path that reads a transcript request: the API (its handler, with
the event ``compactor serve`` builds), the S3 path (an object read whole), ``compactor compact`` (a file read
whole) and the streamed reading of large files and objects (docs/behaviour.md#requests-and-responses,
docs/scale.md "Streaming")."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compactor.object_jobs import Defaults, Failure, build_request
from compactor.transcript_stream import fields_from, messages_from, opener
from compactor.transcripts import TranscriptError, read_transcript
from compactor_cli.files import InputError, read_text

from .conftest import post

pytestmark = pytest.mark.usefixtures("bundled_catalog")

MESSAGES = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "Done."}]
BODY = json.dumps({"messages": MESSAGES}).encode("utf-8")


def api(module: ModuleType, raw: bytes) -> tuple[int, Any]:
    status, text = post(module, "compact", raw)
    return status, json.loads(text)


def s3(raw: bytes) -> Any:
    return build_request(raw, Defaults())


def cli(raw: bytes, tmp_path: Path) -> Any:
    path = tmp_path / "transcript.json"
    path.write_bytes(raw)
    return read_transcript(read_text(str(path)))


def streamed(raw: bytes, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    path = tmp_path / "streamed.json"
    path.write_bytes(raw)
    source = opener(str(path))
    return fields_from(source), list(messages_from(source))


def test_a_leading_byte_order_mark_is_skipped_on_every_path(compact_module: ModuleType, tmp_path: Path) -> None:
    # The API answered 422 "Unexpected UTF-8 BOM" where the S3 path and the CLI read the JSON after it.
    raw = b"\xef\xbb\xbf" + BODY

    status, body = api(compact_module, raw)
    assert status == 200, body
    assert body["messages"] == MESSAGES
    assert s3(raw).messages == MESSAGES
    assert cli(raw, tmp_path).items == MESSAGES
    assert streamed(raw, tmp_path) == ({}, MESSAGES)


def test_a_byte_order_mark_inside_a_base64_body_is_skipped_too(compact_module: ModuleType) -> None:
    from compactor_cli.lambda_runtime import LocalLambdaContext

    from ..unit.api.helpers import load_event

    event = load_event("compact-legacy", base64_body=b"\xef\xbb\xbf" + BODY)
    response = compact_module.handler(event, LocalLambdaContext("CompactFunction", timeout_s=60))

    assert response["statusCode"] == 200, response["body"]
    assert json.loads(response["body"])["messages"] == MESSAGES


@pytest.mark.parametrize("raw", [
    b"\xef\xbb\xbf\xef\xbb\xbf" + BODY,
    b"\xef\xbb\xbf\xef\xbb\xbf" + json.dumps(MESSAGES).encode(),
    b"\xef\xbb\xbf\xef\xbb\xbf" + b"".join(json.dumps(message).encode() + b"\n" for message in MESSAGES),
])
def test_two_byte_order_marks_are_refused_on_every_path(compact_module: ModuleType, tmp_path: Path,
                                                        raw: bytes) -> None:
    # The API answered 422 (json.loads's "Unexpected UTF-8 BOM (decode using utf-8-sig)") where the S3 path and the
    # CLI skipped one mark when they decoded the bytes and the JSON reading the other, and read the transcript.
    reason = "two byte order marks at the start: a body or file has at most one"
    # The API reads JSON bodies only.
    _refused_on_every_path(compact_module, tmp_path, raw, reason, by_api=not raw.endswith(b"\n"))


def _refused_on_every_path(compact_module: ModuleType, tmp_path: Path, raw: bytes, reason: str, *,
                           by_api: bool = True, by_stream: bool = True) -> None:
    """``raw`` refused for ``reason`` by the API (422 ``json_invalid``), the S3 path (422), the CLI and the streamed
    reader (a ``TranscriptError``); ``by_api`` / ``by_stream``: whether that reader is asked."""
    if by_api:
        status, body = api(compact_module, raw)
        assert status == 422, body
        assert body["detail"][0]["type"] == "json_invalid" and body["detail"][0]["ctx"]["error"] == reason
    failure = s3(raw)
    assert isinstance(failure, Failure) and failure.status == 422 and reason in failure.error["message"]
    assert failure.detail[0]["type"] == "json_invalid" and failure.detail[0]["ctx"]["error"] == reason, failure
    with pytest.raises(TranscriptError, match=re.escape(reason)):
        cli(raw, tmp_path)
    if by_stream:
        with pytest.raises(TranscriptError, match=re.escape(reason)):
            streamed(raw, tmp_path)


TWO_TRANSCRIPTS = (b'{"messages": [{"role": "user", "content": "first transcript"}], '
                   b'"messages": [{"role": "user", "content": "second transcript"}]}')
A_KEY_TWICE_IN_A_MESSAGE = b'{"messages": [{"role": "user", "content": "kept", "content": "lost"}]}'
A_KEY_TWICE_IN_A_JSONL_LINE = (b'{"role": "user", "content": "kept", "content": "lost"}\n'
                               b'{"role": "assistant", "content": "Done."}\n')


@pytest.mark.parametrize(("raw", "key"), [
    (TWO_TRANSCRIPTS, "messages"),
    (A_KEY_TWICE_IN_A_MESSAGE, "content"),
    (A_KEY_TWICE_IN_A_JSONL_LINE, "content"),
])
def test_a_key_named_twice_in_one_object_is_refused_on_every_path(compact_module: ModuleType, tmp_path: Path,
                                                                  raw: bytes, key: str) -> None:
    # Every reader kept the last value (the streamed reading refused two `messages`, then a key twice inside a message
    # kept its last value there only): one of two transcripts, or one of two contents, was compacted and the other
    # lost without a word.
    reason = f'the key "{key}" appears twice in one object: send each key once'
    _refused_on_every_path(compact_module, tmp_path, raw, reason)


@pytest.mark.parametrize("raw", [
    b'{"role": "user", "content": "A\xed\xa0\x80"}\n{"role": "assistant", "content": "Done."}\n',  # a surrogate, encoded
    b'{"role": "user", "content": "A\xff"}\n{"role": "assistant", "content": "Done."}\n',
])
def test_jsonl_that_is_not_utf8_is_refused_by_the_streamed_reading_too(tmp_path: Path, raw: bytes) -> None:
    # The S3 path and the CLI refuse the bytes; the streamed reading parsed each line with json.loads of bytes, which
    # read ED A0 80 as a lone surrogate into the message, and named an invalid byte an "unreadable number".
    failure = s3(raw)
    assert isinstance(failure, Failure) and failure.error["message"] == "the object is not UTF-8 text"
    with pytest.raises(InputError, match="not UTF-8 text"):
        cli(raw, tmp_path)
    reason = "line 1 is not JSON: not UTF-8 text (an invalid byte at offset 30)"
    with pytest.raises(TranscriptError, match=re.escape(reason)):
        streamed(raw, tmp_path)


@pytest.mark.parametrize("raw", [
    b'[{"role": "user", "content": "A\xff"}, {"role": "assistant", "content": "Done."}]',
    b'{"mode": "decision", "messages": [{"role": "user", "content": "A\xed\xa0\x80"}]}',  # a surrogate, encoded
    b'[{"role": "user", "content": "A\xc3"}]',  # a sequence cut short
])
def test_json_that_is_not_utf8_is_refused_by_the_streamed_reading_as_not_utf8(tmp_path: Path, raw: bytes) -> None:
    # The streamed reading refused it as "not JSON: b'lexical error: invalid bytes in UTF8 string.\n ..." (the C
    # backend's bytes, their repr) or "not JSON: 'utf-8' codec can't decode byte 0xed in position 31" (the
    # pure-Python backend's, a position in one read), where the other paths say it is not UTF-8.
    failure = s3(raw)
    assert isinstance(failure, Failure) and failure.error["message"] == "the object is not UTF-8 text"
    with pytest.raises(InputError, match="not UTF-8 text"):
        cli(raw, tmp_path)
    with pytest.raises(TranscriptError, match=re.escape("not UTF-8 text (an invalid byte in a string)")):
        streamed(raw, tmp_path)


@pytest.mark.parametrize("raw", [
    b"\x0c" + BODY,  # a form feed
    "\u00a0".encode("utf-8") + BODY,  # a no-break space
    b" \xef\xbb\xbf" + BODY,  # a byte order mark that does not lead
    BODY + b"\x0b",  # a vertical tab
    BODY.replace(b'"content"', b'\x0c"content"'),  # between two members of a message (ijson's C backend took it)
])
def test_what_is_not_json_whitespace_is_refused_on_every_path(
    compact_module: ModuleType, tmp_path: Path, raw: bytes,
) -> None:
    # The API refused it (422 json_invalid); the S3 path and the CLI read the body after str.strip(), which takes
    # these away around it, and the streamed reading took a form feed or vertical tab anywhere between values.
    status, body = api(compact_module, raw)
    assert status == 422 and body["detail"][0]["type"] == "json_invalid", body
    failure = s3(raw)
    assert isinstance(failure, Failure) and failure.status == 422, failure
    assert failure.detail[0]["type"] == "json_invalid"
    with pytest.raises(TranscriptError, match="is not JSON"):
        cli(raw, tmp_path)
    with pytest.raises(TranscriptError):
        streamed(raw, tmp_path)


CHAT_ITEM = {"role": "user", "content": "the chat message"}
RESPONSES_ITEM = {"type": "message", "role": "user", "content": "the Responses item"}


@pytest.mark.parametrize(("request_body", "reason"), [
    ({"format": "openai-responses", "messages": [CHAT_ITEM], "input": [RESPONSES_ITEM]},
     "openai-responses items go in 'input', not 'messages'"),
    ({"format": "openai-chat", "input": [CHAT_ITEM]}, "openai-chat items go in 'messages', not 'input'"),
])
def test_items_under_another_field_than_the_named_formats_are_refused_on_every_path(
    compact_module: ModuleType, tmp_path: Path, request_body: dict[str, Any], reason: str,
) -> None:
    # The API refused both (422); the S3 path and the CLI read the first's `messages` as its Responses items and
    # dropped its `input` without a word, and read the second's `input` as chat messages.
    raw = json.dumps(request_body).encode("utf-8")

    status, body = api(compact_module, raw)
    assert status == 422 and body["detail"][0]["msg"] == reason, body
    failure = s3(raw)
    assert isinstance(failure, Failure) and failure.status == 422 and reason in failure.error["message"], failure
    with pytest.raises(TranscriptError, match=re.escape(reason)):
        cli(raw, tmp_path)


def test_items_under_input_in_a_body_naming_no_format_are_responses_items_on_every_path(
    compact_module: ModuleType, tmp_path: Path,
) -> None:
    # The S3 path, the CLI and the streamed reading read them as openai-responses items; the API dropped `input` as an
    # unknown field of an openai-chat request and answered 422 "messages: Field required".
    raw = json.dumps({"input": [RESPONSES_ITEM]}).encode("utf-8")

    status, body = api(compact_module, raw)
    assert status == 200, body
    assert body == {"input": [RESPONSES_ITEM], "compacted": False}
    request = s3(raw)
    assert request.format == "openai-responses" and request.messages == [RESPONSES_ITEM]
    transcript = cli(raw, tmp_path)
    assert transcript.format == "openai-responses" and transcript.items == [RESPONSES_ITEM]


SESSION_LINES = {
    "claude-code": [{"type": "system", "subtype": "init", "uuid": "u0"},
                    {"type": "user", "uuid": "u1", "parentUuid": "u0", "sessionId": "s",
                     "message": {"role": "user", "content": "Fix the bug."}}],
    "codex": [{"timestamp": "2026-07-24T04:28:59.837Z", "type": "session_meta", "payload": {"id": "s"}},
              {"timestamp": "2026-07-24T04:29:00.000Z", "type": "response_item",
               "payload": {"type": "message", "role": "user", "content": "Fix the bug."}}],
}


@pytest.mark.parametrize("kind, where", [("claude-code", "[1] is a Claude Code session record"),
                                         ("codex", "[0] is a Codex rollout line")])
def test_a_session_files_lines_sent_as_items_are_refused_in_the_same_words_on_every_path(
    compact_module: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, where: str,
) -> None:
    # A JSON array of a session file's lines (not the JSONL file, which the CLI and the S3 path read as a session):
    # the API refused Claude Code records as openai-responses items, advising that format, and took Codex lines
    # under it; the S3 path and the CLI guessed openai-responses from their `type` and compacted both.
    raw = json.dumps(SESSION_LINES[kind]).encode("utf-8")

    status, body = api(compact_module, json.dumps({"messages": SESSION_LINES[kind]}).encode("utf-8"))
    assert status == 422, body
    words = body["detail"][0]["msg"]
    assert where in words and "not an item" in words, words
    failure = s3(raw)
    assert isinstance(failure, Failure) and failure.status == 422, failure
    assert failure.detail[0]["msg"].split("] ", 1)[1] == words.split("] ", 1)[1], failure.detail
    from compactor_cli.main import main

    path = tmp_path / "lines.json"
    path.write_bytes(raw)
    assert main(["compact", str(path), "-q", "-o", str(tmp_path / "out.json")]) == 2
    assert words.split("] ", 1)[1] in capsys.readouterr().err


ANTHROPIC = [{"role": "user", "content": "Fix the bug."}]
for _n in range(6):
    ANTHROPIC += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{_n}", "name": "bash",
                                                     "input": {"command": f"cat f{_n}.py"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{_n}", "content": "x = 1\n" * 40}]}]
ANTHROPIC.append({"role": "assistant", "content": "Done."})


CHAT_CALLS = [{"role": "user", "content": "Fix the bug."},
              {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
              {"role": "tool", "tool_call_id": "c1", "content": "x = 1\n" * 40},
              {"role": "assistant", "content": "Done."}]
RESPONSES_CALLS = [{"role": "user", "content": "Fix the bug."},
                   {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "c1", "output": "x = 1\n" * 40},
                   {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}]


def _body(format: str, items: list[dict[str, Any]]) -> bytes:
    field = "input" if format == "openai-responses" else "messages"
    return json.dumps({"format": format, "mode": "decision", field: items}).encode("utf-8")


@pytest.mark.parametrize(("raw", "reason"), [
    (_body("openai-responses", CHAT_CALLS),
     "input[1] looks like openai-chat (a 'tool_calls' field), but the format is openai-responses: "
     "send the items with format openai-chat"),
    (_body("anthropic-messages", CHAT_CALLS),
     "messages[1] looks like openai-chat (a 'tool_calls' field), but the format is anthropic-messages"),
    (_body("openai-chat", ANTHROPIC),
     "messages[1] looks like anthropic-messages (a 'tool_use' block), but the format is openai-chat"),
    (_body("openai-chat", RESPONSES_CALLS),
     "messages[1] looks like openai-responses (type 'function_call' and no role), but the format is openai-chat"),
    (_body("anthropic-messages", RESPONSES_CALLS),
     "messages[1] looks like openai-responses (type 'function_call' and no role), but the format is "
     "anthropic-messages"),
])
def test_items_of_another_format_than_the_named_one_are_refused_on_every_path(
    compact_module: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    raw: bytes, reason: str,
) -> None:
    # Every path compacted them under the named format's rules without a word: Chat calls declared as Responses
    # items paired nothing (their ids are no call_id), and what came back was of neither format. (A body naming
    # openai-chat over Anthropic messages was read as chat on every path, on purpose; it is refused now.)
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    status, body = api(compact_module, raw)
    assert status == 422 and reason in body["detail"][0]["msg"], body
    failure = s3(raw)
    assert isinstance(failure, Failure) and failure.status == 422, failure
    assert reason in failure.detail[0]["msg"], failure
    path = tmp_path / "named.json"
    path.write_bytes(raw)
    for threshold in (10**9, 100):  # read whole, then over the streaming threshold
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", threshold)
        assert main(["compact", str(path), "-o", str(tmp_path / "out.json")]) == 2
        err = capsys.readouterr().err
        assert reason in err and err.count("\n") == 1, err
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(("raw", "words"), [
    (_body("anthropic-messages", CHAT_CALLS),
     "messages[1] looks like openai-chat (a 'tool_calls' field), but the format is anthropic-messages: "
     "send the items with format openai-chat"),
    (json.dumps({"mode": "nope", "messages": MESSAGES}).encode("utf-8"), "mode must be one of: "),
])
def test_a_422_says_the_validators_words_without_pydantics_prefix(
    compact_module: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: bytes, words: str,
) -> None:
    # detail[0].msg began "Value error, " before the words docs/formats.md and docs/behaviour.md quote (the CLI's
    # line did not).
    from compactor_cli.main import main

    status, body = api(compact_module, raw)
    assert status == 422 and body["detail"][0]["msg"].startswith(words), body
    failure = s3(raw)
    assert isinstance(failure, Failure) and failure.detail[0]["msg"].startswith(words), failure
    path = tmp_path / "named.json"
    path.write_bytes(raw)
    assert main(["compact", str(path), "-o", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert re.match(rf"compactor compact: invalid request: (mode: )?{re.escape(words)}", err), err


MIXED = [*CHAT_CALLS[:3], *ANTHROPIC[1:3], {"role": "assistant", "content": "Done."}]
MIXED_WORDS = ("the items are of two formats: messages[1] is the first openai-chat item (a 'tool_calls' field), "
               "messages[3] is the first anthropic-messages item (a 'tool_use' block); send the items of one format")


@pytest.mark.parametrize("order", ["chat first", "anthropic first"])
@pytest.mark.parametrize("named", [None, "openai-chat", "anthropic-messages"])
def test_items_of_two_formats_are_refused_naming_both_on_every_path(
    compact_module: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    order: str, named: str | None,
) -> None:
    # Without a format named, the refusal named the format the transcript was taken to be ("... but the format is
    # anthropic-messages: send the items with format openai-chat"), and naming that format got the opposite refusal.
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    items, words = MIXED, MIXED_WORDS
    if order == "anthropic first":
        items = [MIXED[0], *MIXED[3:5], *MIXED[1:3], MIXED[5]]
        words = ("the items are of two formats: messages[1] is the first anthropic-messages item (a 'tool_use' "
                 "block), messages[3] is the first openai-chat item (a 'tool_calls' field); send the items of one format")
    # in decision mode, which a large file is streamed in (naming none, it is read whole, in the seal mode inferred)
    raw = json.dumps({"mode": "decision", "messages": items} | ({"format": named} if named else {})).encode("utf-8")
    status, body = api(compact_module, raw)
    assert status == 422 and body["detail"][0]["msg"].endswith(words), body
    failure = s3(raw)
    assert isinstance(failure, Failure) and failure.detail[0]["msg"].endswith(words), failure
    path = tmp_path / "mixed.json"
    path.write_bytes(raw)
    for threshold in (10**9, 100):  # read whole, then over the streaming threshold
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", threshold)
        assert main(["compact", str(path), "-o", str(tmp_path / "out.json")]) == 2
        err = capsys.readouterr().err
        assert err.endswith(words + "\n") and err.count("\n") == 1, err



@pytest.mark.parametrize(("items", "words"), [
    ([*CHAT_CALLS[:3], *RESPONSES_CALLS[1:3], CHAT_CALLS[3]],
     "the items are of two formats: messages[1] is the first openai-chat item (a 'tool_calls' field), messages[3] is "
     "the first openai-responses item (type 'function_call' and no role); send the items of one format"),
    ([*MIXED[:5], *RESPONSES_CALLS[1:3], MIXED[5]],
     "the items are of three formats: messages[1] is the first openai-chat item (a 'tool_calls' field), messages[3] "
     "is the first anthropic-messages item (a 'tool_use' block), messages[5] is the first openai-responses item (type "
     "'function_call' and no role); send the items of one format"),
])
def test_a_large_file_names_every_format_its_items_show_as_a_file_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], items: list[Any], words: str,
) -> None:
    # A Chat message in a file read as a stream in anthropic-messages looked for Anthropic items only: with a
    # Responses item but no Anthropic one it was refused as "messages[1] looks like openai-chat ..., send the items
    # with format openai-chat" (whose advice got the other refusal), and a third format went unnamed.
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    path = tmp_path / "mixed.json"
    # in decision mode, which a large file is streamed in
    path.write_bytes(json.dumps({"format": "anthropic-messages", "mode": "decision", "messages": items}).encode())
    for threshold in (10**9, 100):  # read whole, then over the streaming threshold
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", threshold)
        assert main(["compact", str(path), "-o", str(tmp_path / "out.json")]) == 2
        err = capsys.readouterr().err
        assert err.endswith(words + "\n") and err.count("\n") == 1, err

def test_a_bare_transcript_declared_in_another_format_is_refused_by_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # `compactor compact --format openai-responses` on a Chat transcript compacted it as Responses items.
    from compactor_cli.main import main

    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CHAT_CALLS))
    assert main(["compact", "--format", "openai-responses", str(path), "-o", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert "input[1] looks like openai-chat (a 'tool_calls' field), but the format is openai-responses" in err, err


@pytest.mark.parametrize("format", ["openai-chat", "anthropic-messages", "openai-responses"])
def test_messages_every_format_may_hold_are_accepted_in_each(compact_module: ModuleType, format: str) -> None:
    # A role and text content: a Chat message, an Anthropic message and the Responses API's role-only "easy input
    # message" alike, so nothing shows another format.
    items = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "Done."},
             {"role": "user", "content": [{"type": "text" if format != "openai-responses" else "input_text",
                                           "text": "Thanks."}]}]
    status, body = api(compact_module, json.dumps({"format": format, "mode": "mask",
                                                   "input" if format == "openai-responses" else "messages": items
                                                   }).encode("utf-8"))
    assert status == 200, body


def test_the_api_s_422_keeps_a_refusal_naming_three_formats_whole(compact_module: ModuleType) -> None:
    # A 422 message was cut at 200 characters: a refusal naming the first item of each of three formats (or of two at
    # large indices) lost its advice, "send the items of one format", which the CLI and the S3 records kept.
    items = [*MIXED[:5], *RESPONSES_CALLS[1:3], MIXED[5]]
    status, body = api(compact_module, json.dumps({"mode": "decision", "messages": items}).encode("utf-8"))
    msg = body["detail"][0]["msg"]
    assert status == 422 and msg.startswith("the items are of three formats") and len(msg) > 200, body
    assert msg.endswith("send the items of one format"), msg


@pytest.mark.parametrize("body", [
    [{"role": "user", "content": "Fix the test."}, {"role": "assistant", "content": "Done."}],
    [{"messages": [{"role": "user", "content": "first"}]}, {"messages": [{"role": "user", "content": "second"}]}],
])
def test_a_body_that_is_a_json_array_is_refused_saying_what_to_send(compact_module: ModuleType, body: Any) -> None:
    # Powertools' validation reads an array given for the request object as its first member: a bare transcript was
    # answered "messages: Field required" about its first message, and an array of two requests compacted the first
    # and dropped the second with a 200.
    status, answer = api(compact_module, json.dumps(body).encode())

    assert status == 422, answer
    text = json.dumps(answer)
    assert "the body is a JSON array" in text and "'messages'" in text and "'format'" in text


def test_a_lone_surrogate_in_a_transcript_names_its_message(compact_module: ModuleType) -> None:
    # The 422 said "messages: text must be valid Unicode: it contains a lone surrogate (\ud800)" and left the caller
    # to search a transcript of thousands of messages for it.
    raw = ('{"messages": [{"role": "user", "content": "Fix it."}, {"role": "assistant", "content": "Done \\ud800."}]}'
           ).encode()
    status, answer = api(compact_module, raw)

    assert status == 422, answer
    assert answer["detail"][0]["loc"] == ["body", "messages"]
    assert answer["detail"][0]["msg"].endswith("a lone surrogate (\\ud800) in its item 1")
