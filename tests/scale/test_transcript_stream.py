"""Streamed reading of every transcript format, and the CLI's streamed path for large files."""

from __future__ import annotations

import io
import re
import json
from pathlib import Path

import pytest
from typing import Any

from compactor.transcript_stream import (
    PATH_NAMES_BUDGET, ArrayWriter, IntegerOutside64Bits, NotForTheCBackend, fields_from, messages_from,
)
from compactor.jsonutil import bounded_loads
from compactor.transcripts import TranscriptError, parse_transcript, read_transcript

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "héllo", "n": 1.5},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                   "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]


def stream(text: str) -> io.BytesIO:
    return io.BytesIO(text.encode("utf-8"))


@pytest.mark.parametrize("text", [
    json.dumps(MESSAGES),
    json.dumps(MESSAGES, indent=2),
    "\ufeff" + json.dumps({"target_ratio": 0.3, "messages": MESSAGES, "keep_recent": 2, "other": {"x": [1]}}),
    json.dumps({"messages": MESSAGES, "pinned_indices": [1], "policy_ir": ["policy", ["top"]]}, indent=1),
    "\n".join(json.dumps(m) for m in MESSAGES) + "\n",
    # A null format is no format, as a file read whole takes it (it was an "unknown format 'None'" in a stream).
    json.dumps({"format": None, "messages": MESSAGES, "keep_recent": 2}),
    json.dumps({"messages": MESSAGES, "format": ""}),
])
def test_streamed_reading_matches_parse_transcript(text):
    messages, fields = parse_transcript(text.lstrip("\ufeff"))
    assert list(messages_from(lambda: stream(text))) == messages
    assert fields_from(lambda: stream(text)) == fields


def test_a_claude_code_session_is_not_read_as_chat():
    """A Claude Code session is anthropic-messages (docs/scale.md): read as the chat it converts to, it was compacted
    and written as a chat transcript, without its thinking, images or tool references."""
    from compactor.transcripts import NotChat

    path = next(Path(__file__).resolve().parents[1].glob("fixtures/corpus/*.jsonl"))
    text = path.read_text(encoding="utf-8")
    with pytest.raises(NotChat, match="is a Claude Code session's (user|assistant) record"):
        list(messages_from(lambda: io.BytesIO(text.encode())))


@pytest.mark.parametrize("text", ["", "   ", "[1, 2]", '{"messages": [1]}', "[{]", "not json\nat all"])
def test_bad_input_is_a_transcript_error(text):
    with pytest.raises(TranscriptError):
        list(messages_from(lambda: stream(text)))


def test_array_writer_reads_back():
    out = io.StringIO()
    writer = ArrayWriter(out)
    for message in MESSAGES:
        writer.write(message)
    writer.finish()
    assert json.loads(out.getvalue()) == MESSAGES
    assert list(messages_from(lambda: stream(out.getvalue()))) == MESSAGES
    empty = io.StringIO()
    ArrayWriter(empty).finish()
    assert json.loads(empty.getvalue()) == []


def test_cli_streams_large_files_with_the_in_memory_result(tmp_path, monkeypatch, capsys):
    from compactor_cli import compact_cmd
    from compactor_cli.main import main
    from scale import transcripts

    messages = list(transcripts.messages(1_200_000))
    source = tmp_path / "big.json"
    source.write_text(json.dumps(messages))
    assert main(["compact", str(source), "-o", str(tmp_path / "mem.json"), "--json", "-q"]) == 0
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 1000)
    assert main(["compact", str(source), "-o", str(tmp_path / "stream.json"), "--json"]) == 0
    report = capsys.readouterr().err
    assert "pass 1: window 1 at message 0/" in report and "pass 1:" in report and "of original" in report
    stream_out = tmp_path / "stream.json"
    assert (f"wrote {stream_out} ({stream_out.stat().st_size} bytes on disk: the /v1/compact response body as "
            "JSON, one dense message per line)") in report
    lines = stream_out.read_text().splitlines()
    assert lines[0] == '{"messages":[' and all(line.rstrip(",") == json.dumps(json.loads(line.rstrip(",")),
                                                                             ensure_ascii=False, separators=(",", ":"))
                                               for line in lines[1:-1])
    in_memory = json.loads((tmp_path / "mem.json").read_text())
    streamed = json.loads((tmp_path / "stream.json").read_text())
    assert in_memory["compaction"]["windows"]["passes"][0]["windows"] > 1
    assert streamed["messages"] == in_memory["messages"]
    assert streamed["compaction"] == in_memory["compaction"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.json", "mem.json", "stream.json"]


# Numbers as json.loads reads them: integers of any size the API accepts (ijson's C backend refuses those outside
# 64 bits, and messages_from then reads the stream again with the pure-Python one), floats as floats.
NUMBERS = {"role": "user", "content": "n", "big": 12345678901234567890123, "low": -9223372036854775809,
           "edge": 9223372036854775807, "float": 0.1, "exp": 1e300, "tiny": 5e-324, "neg": -0.0, "one": 1.0,
           "nested": [{"deep": [18446744073709551616, 2.5, 7]}], "zero": 0}


def typed(value):
    """The value with each number's type beside it: an int read as a float (or a Decimal) differs."""
    if isinstance(value, dict):
        return {key: typed(child) for key, child in value.items()}
    if isinstance(value, list):
        return [typed(child) for child in value]
    return [type(value).__name__, value]


class Opener:
    """Opens the same bytes again at each call, counting the calls."""

    def __init__(self, text: str) -> None:
        self.text, self.opened = text, 0

    def __call__(self) -> io.BytesIO:
        self.opened += 1
        return stream(self.text)


PLAIN = [{"role": "user", "content": f"m{i}", "n": i} for i in range(5)]


@pytest.mark.parametrize("text", [
    json.dumps([*PLAIN[:3], NUMBERS, *PLAIN[3:]]),
    json.dumps({"messages": [*PLAIN, NUMBERS], "target_ratio": 0.25, "keep_recent": 2,
                "policy_ir": ["policy", {"weight": 1.5e-3, "n": [1, 2.0, 2 ** 80]}]}),
    json.dumps({"seed": 2 ** 64, "messages": PLAIN, "keep_recent": 2}),
    json.dumps(NUMBERS) + "\n" + json.dumps(NUMBERS),
    json.dumps([NUMBERS]).replace("1e+300", "1E300").replace("0.1", "1e-1"),
])
def test_numbers_read_as_json_loads_reads_them(text):
    messages, fields = parse_transcript(text)
    opener = Opener(text)
    assert typed(list(messages_from(opener))) == typed(messages)
    assert typed(fields_from(opener)) == typed(fields)


def test_the_second_reading_goes_on_after_the_messages_given_and_only_when_needed():
    text = json.dumps([*PLAIN[:3], NUMBERS, *PLAIN[3:]])
    opener = Opener(text)
    read = messages_from(opener)
    assert [next(read) for _ in range(3)] == PLAIN[:3] and opener.opened == 1  # before the integer: one reading
    assert list(read) == [NUMBERS, *PLAIN[3:]] and opener.opened == 2
    plain = Opener(json.dumps(PLAIN))
    assert list(messages_from(plain)) == PLAIN and fields_from(plain) == {} and plain.opened == 2


@pytest.mark.parametrize("text", [
    json.dumps([NUMBERS]).replace("12345678901234567890123", "9" * 5000),  # Python's int refuses it, as the API does
    json.dumps([NUMBERS]).replace("12345678901234567890123", "[" * 300 + "]" * 300),  # deeper than the API's limit
    json.dumps([NUMBERS, 1]),
    json.dumps([NUMBERS])[:-30],
    '[{"integer overflow" 1}]',  # yajl quotes the input after its reason: only the reason counts
])
def test_the_second_reading_refuses_what_the_api_refuses(text):
    with pytest.raises(TranscriptError) as refused:
        list(messages_from(Opener(text)))
    assert not isinstance(refused.value, IntegerOutside64Bits)


def test_a_pass_output_with_integers_outside_64_bits_reads_back():
    out = io.StringIO()
    writer = ArrayWriter(out)
    writer.write(NUMBERS)
    writer.finish()
    assert typed(list(messages_from(Opener(out.getvalue())))) == typed([NUMBERS])


def test_the_cli_streams_a_large_file_with_integers_outside_64_bits(tmp_path, monkeypatch):
    from compactor_cli import compact_cmd
    from compactor_cli.main import main
    from scale import transcripts

    messages = list(transcripts.messages(600_000))
    assert messages[1]["role"] == "user"  # the task, which --pin-task pins: read before the windows
    messages[1] = dict(messages[1], meta={"id": 2 ** 70})
    source = tmp_path / "big.json"
    source.write_text(json.dumps({"mode": "decision", "messages": messages, "keep_recent": 4, "seed": 2 ** 64}))
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 1000)
    assert main(["compact", str(source), "-o", str(tmp_path / "out.json"), "--json", "-q", "--pin-task"]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["compacted"] and out["messages"][:2] == messages[:2]


# Paths: ijson's items name each open level by its path, so a deep transcript held memory with the square of its depth
# (12,000 levels of '[': about 350 MB traced) and long keys with their length, before any message was checked. The
# reader counts the '[' and '{' and the bytes it hands the parser since the last message; past PATH_NAMES_BUDGET the
# stream is read on from the parser's events, which name no path, and a level deeper than the API's is refused.
LEVELS = 12_000


@pytest.mark.parametrize("text", [
    '[{"role": "user", "content": ' + "[" * LEVELS + "]" * LEVELS + "}]",
    '{"messages": [{"role": "user", "content": ' + '{"k": ' * LEVELS + "1" + "}" * LEVELS + "}]}",
    '{"policy_ir": ' + "[" * LEVELS + "]" * LEVELS + ', "messages": [{"role": "user", "content": "a"}]}',
    json.dumps([NUMBERS]) [:-1] + ', {"role": "user", "content": ' + "[" * LEVELS + "]" * LEVELS + "}]",
])
def test_a_deep_transcript_is_refused_before_the_parser_holds_its_paths(text):
    import tracemalloc

    for read in (lambda opener: list(messages_from(opener)), fields_from):
        tracemalloc.start()
        try:
            if text.startswith("[") and read is fields_from:
                assert read(Opener(text)) == {}  # an array has no fields: nothing of it is parsed
                continue
            with pytest.raises(TranscriptError, match="nested deeper than"):
                read(Opener(text))
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak < 16 * 2 ** 20, peak


def openers_in_strings(count: int) -> str:
    """A tool output of JSON text (its braces in a string, not levels of the transcript)."""
    return json.dumps([{"id": i, "tags": ["a", "b"]} for i in range(count // 2)])


@pytest.mark.parametrize("shape", ["array", "object"])
def test_many_openers_in_strings_are_read_as_they_are_path_free(shape):
    deepest = {"role": "user", "content": "x"}
    level: dict[str, Any] = deepest
    for _ in range(127 if shape == "array" else 126):  # the depth a message may have: the body's 128 levels less
        level["c"] = level = {}  # its own level in the body (1 in an array, 2 in an object's messages)
    messages = [*PLAIN[:2], {"role": "tool", "tool_call_id": "c1", "content": openers_in_strings(12_000)},
                deepest, *PLAIN[2:], {"role": "tool", "tool_call_id": "c2", "content": "{" * 9000}]
    text = json.dumps(messages if shape == "array" else {"messages": messages, "keep_recent": 2,
                                                         "pinned_indices": [0], "other": [{"role": "user"}]})
    opener = Opener(text)
    assert list(messages_from(opener)) == messages
    assert opener.opened == 2  # counted until the first big output, then read on path-free
    fields = Opener(text)
    assert fields_from(fields) == ({} if shape == "array" else {"keep_recent": 2, "pinned_indices": [0]})
    assert fields.opened == 1
    scalar = Opener(text.replace('{"role": "user", "content": "m4", "n": 4}', "4"))
    with pytest.raises(TranscriptError, match="message 6 is not a JSON object"):  # read path-free
        list(messages_from(scalar))
    few = Opener(json.dumps(messages[:2] + messages[3:5]))
    assert list(messages_from(few)) == messages[:2] + messages[3:5] and few.opened == 1


def test_the_count_starts_again_at_each_message():
    messages = [{"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 2000, "tags": [[]] * 100}
                for i in range(200)]
    opener = Opener(json.dumps(messages))  # 20,000 openers in all, about 700 a read: never path-free
    assert list(messages_from(opener)) == messages and opener.opened == 1
    fields = Opener(json.dumps({"messages": messages}))
    assert fields_from(fields) == {} and fields.opened == 1


def test_an_integer_outside_64_bits_and_many_openers_read_together():
    messages = [NUMBERS, {"role": "tool", "tool_call_id": "c1", "content": openers_in_strings(12_000)}, *PLAIN]
    opener = Opener(json.dumps({"messages": messages, "seed": 2 ** 70}))
    assert typed(list(messages_from(opener))) == typed(messages)
    assert opener.opened == 3  # C (the integer), pure Python counted (the openers), pure Python path-free
    assert fields_from(Opener(json.dumps({"messages": messages, "seed": 2 ** 70}))) == {}  # not a request field


# Lone surrogates: an escape such as "\ud83d" without its pair, which no UTF-8 text carries and the API refuses. ijson's
# C backend reads a lone high one as "?" and fails to decode a lone low one; json.loads (JSONL) and the pure-Python
# backend keep them, and writing a pass output failed with a UnicodeEncodeError.
def lone(escape: str, shape: str) -> str:
    messages = [*PLAIN[:2], {"role": "user", "content": "ok \\ud83d\\ude00 then " + escape + " end"}, *PLAIN[2:]]
    text = [json.dumps(m).replace("\\\\", "\\") for m in messages]  # the escapes as written, not as text
    if shape == "jsonl":
        return "\n".join(text) + "\n"
    array = "[" + ", ".join(text) + "]"
    return array if shape == "array" else '{"keep_recent": 2, "messages": ' + array + "}"


@pytest.mark.parametrize("shape", ["array", "object", "jsonl"])
@pytest.mark.parametrize("escape", ["\\ud83d", "\\ude00", "\\ude00\\ud83d", "\\udbff"])
def test_a_lone_surrogate_is_refused_as_the_api_refuses_it(shape, escape):
    from compactor.jsonutil import bounded_loads
    from compactor.models import CompactRequest

    text = lone(escape, shape)
    reason = "text must be valid Unicode: it contains a lone surrogate"
    if shape != "jsonl":
        body = bounded_loads(text)
        with pytest.raises(ValueError, match=reason):  # the API's own refusal of the same messages
            CompactRequest.model_validate({"messages": body if shape == "array" else body["messages"]})
    given: list[dict[str, Any]] = []
    with pytest.raises(TranscriptError, match=reason) as refused:
        given.extend(messages_from(Opener(text)))
    assert not isinstance(refused.value, NotForTheCBackend) and given == PLAIN[:2]


@pytest.mark.parametrize("shape", ["array", "object", "jsonl"])
def test_surrogate_pairs_read_at_once_and_escaped_backslashes_as_text(shape):
    text = lone("\\ud83d\\ude00", shape)
    opener = Opener(text)
    assert list(messages_from(opener)) == parse_transcript(text)[0] and opener.opened == 1
    text = lone("\\\\ud83d", shape)  # an escaped backslash, then the text ud83d
    opener = Opener(text)
    read = list(messages_from(opener))
    assert read == parse_transcript(text)[0] and "\\ud83d end" in read[2]["content"]
    assert opener.opened <= 2  # the C backend's reading can read it as a lone surrogate: read again, not refused


@pytest.mark.parametrize("shift", range(-20, 14))
def test_a_surrogate_escape_across_two_reads_is_judged_whole(shift):
    """Judged before its message is given, whichever read holds it, its pair or the message's end."""
    from compactor.transcript_stream import READ_BYTES

    head = '[{"role": "user", "content": "'
    for escape, refused in (("\\ud83d\\ude00", False), ("\\ud83d", True), ("\\ud83d\\u0041", True),
                            ("\\\\ud83d", False)):
        padding = "x" * (READ_BYTES + shift - len(head))  # the escape starts at READ_BYTES + shift
        text = head + padding + escape + 'y"}, {"role": "user", "content": "z"}]'
        opener = Opener(text)
        given: list[dict[str, Any]] = []
        if refused:
            with pytest.raises(TranscriptError, match="lone surrogate"):
                given.extend(messages_from(opener))
            assert given == []  # not the message with the C backend's '?' first
        else:
            assert list(messages_from(opener)) == json.loads(text) and opener.opened <= 2


def nested_keys(levels: int, key_bytes: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": "x"}
    level = message
    for index in range(levels):
        level[f"{index:06d}" + "k" * (key_bytes - 6)] = level = {}
    return message


def traced(read: Any) -> tuple[Any, int]:
    """What ``read()`` gives, and the memory traced at its peak."""
    import tracemalloc

    tracemalloc.start()
    try:
        return read(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", ["array", "object"])
def test_long_keys_are_read_path_free_without_the_parsers_names(shape):
    message = nested_keys(120, 40_000)  # 4.8 MB of keys at 120 levels: within the API's depth
    text = json.dumps([PLAIN[0], message] if shape == "array" else {"messages": [PLAIN[0], message]})
    opener = Opener(text)
    read, peak = traced(lambda: list(messages_from(opener)))
    assert read == [PLAIN[0], message] and opener.opened == 2
    # the text, its bytes, the message built, and the names the items held until the budget sent the reading path-free:
    # along one path of keys of one length, half the bound at most (ijson's items held 286 MiB for the whole message)
    assert peak < PATH_NAMES_BUDGET // 2 + 4 * len(text), peak


@pytest.mark.parametrize("read", [lambda opener: list(messages_from(opener)), fields_from])
def test_many_levels_of_long_keys_are_refused_as_they_open(read):
    import tracemalloc

    keys = "".join(f'"{index:06d}{"k" * 54}": {{' for index in range(4000))  # 264 KB: ijson held 570 MB
    deep = '{"role": "user", "content": "x", ' + keys + "}" * 4000 + "}"  # before refusing it
    text = '{"messages": [' + deep + "]}" if read is not fields_from else '{"policy_ir": ' + deep + ', "messages": []}'
    tracemalloc.start()
    try:
        with pytest.raises(TranscriptError, match="nested deeper than"):
            read(Opener(text))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the items' names until the budget sent the reading path-free; the fields are always read path-free
    assert peak < (16 * 2 ** 20 if read is fields_from else PATH_NAMES_BUDGET), peak


@pytest.mark.parametrize("path_free", [False, True])
@pytest.mark.parametrize("in_object", [False, True])
def test_a_message_may_be_as_deep_as_the_body_allows_the_api_not_deeper(path_free, in_object):
    # The API's 128 levels count from the body's root (bounded_loads): a message of an array is at level 1, one of an
    # object's messages at level 2. A message was given 128 levels of its own, so bodies of 129 and 130 levels, which
    # the API, the S3 path's whole reading and compactor compact below 32 MiB refuse, were compacted when streamed.
    own = 128 - (2 if in_object else 1)
    for levels, refused in ((own, False), (own + 1, True)):
        message = nested_keys(levels, 8)  # its deepest level: the innermost dict
        messages = [PLAIN[0], message] + ([{"role": "tool", "content": "{" * 40_000}] if path_free else [])
        body = {"messages": messages} if in_object else messages
        text = json.dumps(body)
        assert (refused, refused) == (_refused(lambda: bounded_loads(text)), _refused(lambda: read_transcript(text)))
        opener = Opener(text)
        if refused:
            with pytest.raises(TranscriptError, match="nested deeper than 128 levels"):
                list(messages_from(opener))
        else:
            assert list(messages_from(opener))[:2] == [PLAIN[0], message]
            assert opener.opened == (2 if path_free else 1)


@pytest.mark.parametrize("levels, refused", [(128, False), (129, True), (130, True)])
def test_a_member_beside_the_messages_may_be_as_deep_as_the_body_allows_the_api(levels, refused):
    # A member the reading does not keep (metadata) was only bounded by the reading's memory guard (131 levels).
    text = json.dumps({"metadata": nested_keys(levels - 1, 8), "messages": PLAIN})  # the member at level 1
    assert refused == _refused(lambda: bounded_loads(text))
    if refused:
        with pytest.raises(TranscriptError, match="nested deeper than 128 levels"):
            fields_from(Opener(text))
    else:
        assert fields_from(Opener(text)) == {}


def _refused(read: Any) -> bool:
    try:
        read()
    except ValueError:  # JSONLimitError, TranscriptError
        return True
    return False


@pytest.mark.parametrize(("number", "reason"), [
    ("-1e400", "message 1: number out of range"),  # the pure-Python backend makes -inf of it
    ("1e400", "not JSON"),  # and refuses +inf itself
    # bounded_loads' words, as a whole reading refuses it (they were "message 1: number literal longer than ...")
    ("1" * 101, "^number literal longer than 100 characters$"), ("-" + "1" * 100, "^number literal longer than 100"),
])
@pytest.mark.parametrize("shape", ["array", "object"])
def test_after_an_integer_outside_64_bits_what_the_api_refuses_is_refused(number, reason, shape):
    from compactor.jsonutil import JSONLimitError, bounded_loads

    messages = '[{"role": "user", "content": "a", "n": 123456789012345678901234567890}, ' \
               '{"role": "user", "content": "b", "m": ' + number + "}]"
    text = messages if shape == "array" else '{"keep_recent": 2, "messages": ' + messages + "}"
    with pytest.raises(JSONLimitError):  # the API's reading of the same text
        bounded_loads(text)
    with pytest.raises(TranscriptError, match=reason):
        list(messages_from(Opener(text)))
    if shape == "object":  # the field after the messages, whose integer sends the reading to the pure-Python backend
        field = '{"messages": ' + messages + ', "keep_recent": ' + number + "}"
        with pytest.raises(TranscriptError, match=reason.replace("message 1", "the request fields")):
            fields_from(Opener(field))


def test_the_count_starts_again_from_the_read_that_held_the_messages_end():
    """The next message's start may be in that read already (the parser reads ahead to its end): its openers count."""
    from compactor.transcript_stream import READ_BYTES

    head = '[{"role": "user", "content": "'
    first = head + "a" * (READ_BYTES + 50 - len(head) - 3) + '"}'  # ends 50 bytes into the second read
    second = '{"role": "tool", "content": "' + "{" * 1500  # 1,500 openers in the second read
    second += "y" * (2 * READ_BYTES - len(first) - 2 - len(second))
    second += "{" * 1500 + "y" * 14_000 + '"}]'  # and 1,500 in the third
    text = first + ", " + second
    opener = Opener(text)  # 3,000 openers in 32 KiB since the first message: past the budget, read on path-free
    assert list(messages_from(opener)) == json.loads(text) and opener.opened == 2
    opener = Opener(text.replace("{" * 1500 + "y", "y" * 1500 + "y"))  # 1,500 in 16 KiB: within it
    assert len(list(messages_from(opener))) == 2 and opener.opened == 1


@pytest.mark.parametrize("text", [
    '{"messages.item": {"role": "user", "content": "A"}, "messages": ['
    + ", ".join(json.dumps(m) for m in PLAIN) + "]}",
    '{"messages": {"item": {"role": "user", "content": "A"}, "x": 1, "item": {"role": "user", "content": "C"}}}',
    '{"messages": [' + json.dumps(PLAIN[0]) + '], "keep_recent": 2, "messages": [' + json.dumps(PLAIN[1]) + "]}",
    '{"messages": {"item": 1}}', '{"messages": 3, "messages.items": [1]}', '{"other": [{"role": "user"}]}',
    '[{"role": "user", "content": [[{"k": []}]]}, ' + json.dumps(PLAIN[0]) + ", 7]",
])
def test_the_path_free_reading_gives_what_the_items_give(text):
    from compactor.transcript_stream import _messages

    def outcome(**mode: bool) -> Any:
        given: list[Any] = []
        try:
            given.extend(_messages(stream(text), None, **mode))
        except TranscriptError as refused:
            return given, str(refused)
        return given, None

    assert outcome(path_free=True) == outcome()


def test_a_reading_that_goes_path_free_loses_no_message_and_adds_none():
    """A root member named messages.item is one of ijson's items (its path's name): the path-free reading gives
    it too, or the messages it skips on going on would not be the ones given (review22)."""
    messages = [{"role": "user", "content": "x" * 40_000}, {"role": "tool", "content": "{" * 20_000}, PLAIN[2]]
    text = json.dumps({"messages.item": PLAIN[0], "messages": messages})
    opener = Opener(text)
    assert list(messages_from(opener)) == [PLAIN[0], *messages] and opener.opened == 2


def test_wide_names_count_four_bytes_a_character():
    """A key with a character past U+FFFF makes ijson store every deeper name at 4 bytes a character."""
    message: dict[str, Any] = {"role": "user", "content": "x"}
    level = message
    for index in range(120):
        level[f"{index:06d}" + "k" * 39_993 + ("\U0001F600" if index == 0 else "k")] = level = {}
    text = json.dumps([PLAIN[0], message], ensure_ascii=False)
    opener = Opener(text)
    read, peak = traced(lambda: list(messages_from(opener)))
    assert read == [PLAIN[0], message] and opener.opened == 2
    # the names along one path of keys of one length hold at most half the bound: 59 MiB traced here, 120 MiB when
    # counted at 2 bytes a character, 245 MiB at 1
    assert peak < PATH_NAMES_BUDGET // 2 + 4 * len(text), peak


def test_surrogate_escapes_in_fields_upper_case_and_bookkeeping():
    with pytest.raises(TranscriptError, match="the request fields: text must be valid Unicode"):
        fields_from(Opener('{"mode": "x\\ud83dy", "messages": []}'))  # the C backend reads it as "x?y"
    for escape in ("\\uD83D", "\\uDBFF", "\\udbff"):
        with pytest.raises(TranscriptError, match="message 0: text must be valid Unicode"):
            list(messages_from(Opener('[{"role": "user", "content": "a ' + escape + ' b"}]')))
    record = '{"type": "summary", "summary": "cut \\ud83d", "leafUuid": "u"}'  # a session record, no message
    text = record + "\n" + json.dumps({"role": "user", "content": "m0"}) + "\n"
    assert list(messages_from(Opener(text))) == [{"role": "user", "content": "m0"}]


def test_escapes_written_as_text_read_at_once():
    """An even run of backslashes before u: text, not an escape (code that writes such escapes)."""
    for run in (2, 4, 6):
        text = json.dumps([{"role": "tool", "content": "re = /[\\uD83C-\\uDBFF]/"}]).replace("\\\\", "\\" * run)
        opener = Opener(text)
        assert list(messages_from(opener)) == json.loads(text) and opener.opened == 1
    odd = json.dumps([{"role": "tool", "content": "x"}]).replace('"x"', '"\\\\\\ud83d"')  # \\ then a lone escape
    with pytest.raises(TranscriptError, match="lone surrogate"):
        list(messages_from(Opener(odd)))


def test_stopping_a_pure_python_reading_leaves_no_unraisable_error():
    import gc
    import sys

    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        # the integer sends the reading to the pure-Python backend, whose count then stops inside the string
        messages = [{"role": "tool", "tool_call_id": "c1", "content": "a" * 30_000 + "{" * 5_000 + "x" * 30_000}]
        text = json.dumps({"seed": 2 ** 70, "messages": messages})
        assert list(messages_from(Opener(text))) == messages
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert unraisable == []


# A stream is read as openai-chat (docs/scale.md): a transcript in another format is NotChat, never read as chat
# messages it does not hold (a Codex rollout's items were dropped as bookkeeping: no messages at all).
CALL = {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
TOOL_USE = {"role": "assistant", "content": [{"type": "text", "text": "t"}, {"type": "tool_use", "id": "t1"}]}


@pytest.mark.parametrize("text, reason", [
    (json.dumps([PLAIN[0], CALL]), "message 1 is an openai-responses item"),
    (json.dumps({"messages": [PLAIN[0], TOOL_USE]}), "message 1 is an anthropic-messages item"),
    (json.dumps({"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "t"}]}]}),
     "message 0 is an anthropic-messages item"),
    (json.dumps(PLAIN[0]) + "\n" + json.dumps(CALL), "line 2 is an openai-responses item (function_call)"),
    (json.dumps({"type": "function_call_output", "call_id": "c1", "output": "x"}) + "\n" + json.dumps(PLAIN[0]),
     "line 1 is an openai-responses"),
    (json.dumps(PLAIN[0]) + "\n" + json.dumps({"type": "reasoning", "summary": []}),
     "line 2 is an openai-responses item (reasoning)"),
    *[(json.dumps(PLAIN[0]) + "\n" + json.dumps(item), f"line 2 is an openai-responses item ({item['type']})") for item in (
        {"type": "compaction_summary", "encrypted_content": "e"},  # Codex's name of a compaction item
        {"type": "mcp_list_tools", "id": "l1", "server_label": "s", "tools": []},
        {"type": "mcp_approval_request", "id": "r1", "server_label": "s", "name": "n", "arguments": "{}"},
        {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": True})],
    (json.dumps({"type": "session_meta", "payload": {}}) + "\n" + json.dumps({"type": "response_item", "payload": CALL}),
     "line 2 is a Codex rollout's response_item"),
])
def test_messages_in_another_format_are_not_chat(text, reason):
    from compactor.transcripts import NotChat

    with pytest.raises(NotChat, match=re.escape(reason)):
        list(messages_from(Opener(text)))


@pytest.mark.parametrize("text, reason", [
    ('{"input": [], "format": "openai-responses"}', "format is openai-responses"),
    ('{"input": []}', "openai-responses request body"),
])
def test_fields_in_another_format_are_not_chat(text, reason):
    from compactor.transcripts import NotChat

    with pytest.raises(NotChat, match=re.escape(reason)):
        fields_from(Opener(text))


@pytest.mark.parametrize("text, reason", [
    ("{}", "an object with a 'messages' array"),
    ('{"other": [1], "mode": "decision"}', "an object with a 'messages' array"),
    ('{"messages": {"item": {"role": "user"}}}', "'messages' is not an array"),
    ('{"messages": null}', "'messages' is not an array"),
    ('{"messages": [], "keep_recent": 2, "messages": []}', 'the key "messages" appears twice in one object'),
    ('{"messages": [], "keep_recent": 2, "keep_recent": 3}', 'the key "keep_recent" appears twice in one object'),
    ('{"messages.item": {"role": "user", "content": "x"}, "messages": []}', "member named 'messages.item'"),
])
def test_objects_the_stream_cannot_read_as_the_api_are_refused(text, reason):
    """The API refuses an object without a messages array and one naming a member twice; the items of a stream gave no
    messages, both arrays, or a root member named messages.item as a message."""
    from compactor.transcripts import NotChat

    with pytest.raises(TranscriptError, match=re.escape(reason)) as refused:
        fields_from(Opener(text))
    assert not isinstance(refused.value, NotChat)


@pytest.mark.parametrize("format", ["bogus", ["openai-chat"]])
def test_an_unknown_format_is_refused_by_the_requests_validation_as_a_whole_reading_refuses_it(
        format, tmp_path, monkeypatch, capsys):
    """The streamed reading refused it in words of its own ("unknown format 'bogus'; one of ..."): the CLI said
    "big.json: unknown format ..." above 32 MiB and "invalid request: format: ..." below, the S3 windowed job "not a
    transcript: unknown format ..." where the inline job records its fields' validation. It is among the fields now,
    for the request's validation to refuse."""
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    text = json.dumps({"mode": "decision", "format": format, "messages": PLAIN})
    assert fields_from(Opener(text)) == {"mode": "decision", "format": format}
    source = tmp_path / "bogus.json"
    source.write_text(text)
    said = []
    for stream_bytes in (compact_cmd.STREAM_BYTES, 10):  # read whole, then streamed
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", stream_bytes)
        assert main(["compact", str(source), "-q"]) == 2
        said.append(capsys.readouterr().err)
    assert said[0] == said[1] and said[0].startswith("compactor compact: invalid request: format: "), said


def test_the_fields_keep_restorable_and_a_named_chat_format():
    text = json.dumps({"format": "openai-chat", "restorable": True, "messages": PLAIN, "keep_recent": 2})
    assert fields_from(Opener(text)) == {"format": "openai-chat", "restorable": True, "keep_recent": 2}


def test_session_bookkeeping_is_not_a_responses_item():
    """Claude Code records other than user and assistant (summaries, progress, queue operations) carry a type and
    no role, as Responses items do; they are the session's bookkeeping, dropped from the chat the stream reads."""
    records = [{"type": "summary", "summary": "s", "leafUuid": "u"}, {"type": "queue-operation", "operation": "x"},
               {"type": "file-history-snapshot", "messageId": "m"}, {"type": "progress", "data": {}},
               {"role": "user", "content": "hi"}]
    text = "\n".join(json.dumps(record) for record in records)
    assert list(messages_from(Opener(text))) == [{"role": "user", "content": "hi"}]


def test_the_cli_reads_a_large_file_in_another_format_whole(tmp_path, monkeypatch):
    """Files over 32 MiB are streamed as chat; a Codex rollout, a Responses body or a restorable request that large
    was written as an empty compaction (rollout) or without archives: they are read whole instead."""
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
             *[dict(CALL, call_id=f"c{i}") for i in range(30)],
             *[{"type": "function_call_output", "call_id": f"c{i}", "output": "x" * 200} for i in range(30)]]
    rollout = "\n".join(json.dumps({"type": "response_item", "payload": item}) for item in items) + "\n"
    files = {"rollout.jsonl": rollout, "body.json": json.dumps({"format": "openai-responses", "input": items})}
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 1000)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        assert main(["compact", str(tmp_path / name), "-o", str(tmp_path / f"{name}.out"), "--json", "-q"]) == 0
        body = json.loads((tmp_path / f"{name}.out").read_text())
        assert body["input"] == items if body["compacted"] is False else len(body["input"]) > 1, name
    restorable = json.dumps({"restorable": True, "mode": "decision", "messages": list(PLAIN) * 40})
    (tmp_path / "restorable.json").write_text(restorable)
    monkeypatch.setenv("COMPACTOR_ARCHIVE_DIR", str(tmp_path / "archive"))
    assert main(["compact", str(tmp_path / "restorable.json"), "-o", str(tmp_path / "r.out"), "--json", "-q"]) == 0
    assert json.loads((tmp_path / "r.out").read_text())["compaction"].get("windows") is None


def test_the_cli_reads_a_large_file_whole_when_a_later_message_is_in_another_format(tmp_path, monkeypatch, capsys):
    """An Anthropic transcript without a ``format`` usually opens with a plain user message, which reads as chat: only
    its later messages carry blocks. Over the streaming threshold the CLI looked at the first message alone, streamed
    the file and exited 2 on message 1 ("an anthropic-messages item"), where the same file read whole is compacted as
    anthropic-messages. A Responses item after a chat message is read whole now, with the same output; an Anthropic
    transcript is streamed as anthropic-messages, in windows (docs/scale.md; before windows read that format, it was
    read whole too)."""
    from compactor_cli import compact_cmd
    from compactor_cli.main import main
    from scale.test_windowed_anthropic import problems

    anthropic = [{"role": "user", "content": "fix the tests"}]
    for i in range(20):
        anthropic += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "bash",
                                                         "input": {"command": f"cat f{i}.py"}}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                    "content": "x = 1\n" * 200}]}]
    responses = [PLAIN[0], *[item for i in range(20) for item in (
        dict(CALL, call_id=f"c{i}"), {"type": "function_call_output", "call_id": f"c{i}", "output": "x" * 2000})]]
    files = {"anthropic.json": json.dumps({"mode": "decision", "messages": anthropic}),
             "anthropic.jsonl": "\n".join(json.dumps(m) for m in anthropic) + "\n",
             "responses.json": json.dumps(responses)}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        outputs = []
        for threshold in (10**9, 1000):  # read whole, then over the threshold
            monkeypatch.setattr(compact_cmd, "STREAM_BYTES", threshold)
            out = tmp_path / f"{name}.{threshold}.out"
            assert main(["compact", str(tmp_path / name), "-o", str(out), "--json", "-q"]) == 0, capsys.readouterr().err
            body = json.loads(out.read_text())
            body.pop("x_router", None)  # the models' timings
            outputs.append(body)
        if name.startswith("anthropic"):
            streamed = outputs[1]
            assert streamed["compacted"] is True and streamed["compaction"]["windows"]["passes"], name
            assert problems(anthropic, streamed["messages"], keep_recent=1) == [], name
            continue
        assert outputs[0] == outputs[1] and outputs[1]["compacted"] is True, name


def test_the_cli_refuses_pins_past_a_streamed_file(tmp_path, monkeypatch, capsys):
    """A streamed file's ``--pin`` is checked once the stream is counted, as one request's ``pinned_indices``:
    out of range, the CLI answers the API's 400 and exits 1, as for a file read whole (before, it compacted and the
    pin named nothing; then it exited 2, which the README gives to unreadable input)."""
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 1000)
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(list(PLAIN) * 40))
    assert main(["compact", str(path), "-o", str(tmp_path / "out.json"), "-q", "--pin", str(len(PLAIN) * 40)]) == 1
    assert "HTTP 400: " in (err := capsys.readouterr().err) and "pinned_indices must reference existing messages" in err
    assert main(["compact", str(path), "-o", str(tmp_path / "out.json"), "-q", "--pin", "1"]) == 0


def test_the_cli_answers_a_policy_it_cannot_admit_for_a_streamed_file_as_for_a_whole_one(tmp_path, monkeypatch,
                                                                                         capsys):
    """A policy the flow refuses, in a file over the streaming threshold: the same 400 ``invalid_flow`` and exit 1 as
    the file read whole (before: a FlowAdmissionError traceback)."""
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    messages = [{"role": "user", "content": "fix the tests"}]
    for i in range(20):  # old tool calls to compact: the policies are admitted
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                         "name": "bash", "arguments": json.dumps({"command": f"cat f{i}.py"})}}]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "x = 1\n" * 200}]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(messages))
    arguments = ["compact", str(path), "-o", str(tmp_path / "out.json"), "-q", "--decision-policy", '["policy", ["x"]]']
    answers = []
    for threshold in (10**9, 1000):  # read whole, then streamed
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", threshold)
        code = main(arguments)
        err = capsys.readouterr().err
        assert "Traceback" not in err and '"code": "invalid_flow"' in err, err
        assert "flow_ir rejected at admission: decision_policy_ir: ir: " in err and "batch_" not in err, err
        answers.append((code, err))
    assert answers[0] == answers[1] and answers[0][0] == 1
    assert not (tmp_path / "out.json").exists()


def test_a_large_request_body_naming_no_mode_runs_in_the_mode_it_runs_in_read_whole(tmp_path, monkeypatch, capsys):
    """A request body naming no mode and no ``decision_policy_ir`` is sealed read whole (the API's inference,
    docs/behaviour.md "Compaction modes"); over the streaming threshold the CLI compacted it in decision windows, so
    the same file came back in another mode by its size. It is read whole in the mode inferred now; one carrying a
    decision policy, and a bare transcript, still stream in decision windows."""
    from compactor.compaction.preset import default_decision_policy
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    messages = [{"role": "user", "content": "fix the tests"}]
    for i in range(20):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                         "name": "bash", "arguments": json.dumps({"command": f"cat f{i}.py"})}}]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "x = 1\n" * 200}]
    for name, body, mode in (("inferred.json", {"messages": messages, "keep_recent": 2}, "seal"),
                             ("cli-policy.json", {"messages": messages, "keep_recent": 2}, "decision"),
                             ("policy.json", {"messages": messages, "decision_policy_ir": default_decision_policy()},
                              "decision"),
                             ("bare.json", messages, "decision")):
        (tmp_path / name).write_text(json.dumps(body))
        outputs = []
        for threshold in (10**9, 1000):  # read whole, then over the threshold
            monkeypatch.setattr(compact_cmd, "STREAM_BYTES", threshold)
            out = tmp_path / f"{name}.{threshold}.out"
            policy = ["--decision-policy", json.dumps(default_decision_policy())] if name == "cli-policy.json" else []
            assert main(["compact", str(tmp_path / name), "-o", str(out), "--json", "-q", *policy]) == 0, \
                capsys.readouterr().err
            outputs.append(json.loads(out.read_text()))
        whole, streamed = outputs
        assert ("windows" in streamed.get("compaction", {})) is (mode == "decision"), name
        if mode == "seal":
            assert "compaction" not in whole and whole["messages"] == streamed["messages"], name


TWICE = '{"role": "user", "content": "kept", "content": "lost"}'
NESTED_TWICE = '{"role": "user", "content": [{"type": "text", "text": "kept", "text": "lost"}]}'


@pytest.mark.parametrize("text, key", [
    ("[" + TWICE + "]", "content"),
    ('{"messages": [' + json.dumps(PLAIN[0]) + ", " + NESTED_TWICE + "]}", "text"),
    # read by ijson's pure-Python backend (an integer outside 64 bits) and path-free (many openers in a string)
    ("[" + json.dumps(PLAIN[0] | {"n": 2 ** 80}) + ", " + TWICE + "]", "content"),
    ("[" + json.dumps({"role": "tool", "content": "{" * 20_000}) + ", " + NESTED_TWICE + "]", "text"),
    ('{"messages": [], "decision_policy_ir": {"policy": 1, "policy": 2}}', "policy"),
])
def test_a_key_named_twice_inside_a_message_or_a_field_is_refused_as_the_api_refuses_it(text, key):
    """ijson's builders kept the last value of a key named twice inside a message, where the API, the S3 path and
    the CLI's whole reading refuse the object (jsonutil.bounded_loads): a message's two contents came out as one."""
    reason = f'the key "{key}" appears twice in one object: send each key once'
    with pytest.raises(TranscriptError, match=re.escape(reason)):
        fields_from(Opener(text))
        list(messages_from(Opener(text)))


def test_the_messages_read_are_plain_dicts_as_json_loads_builds_them():
    text = json.dumps([{"role": "user", "content": [{"type": "text", "text": "a", "meta": {"k": [{"x": {}}]}}]}])
    for path_free in (False, True):
        from compactor.transcript_stream import _messages

        [message] = _messages(stream(text), None, path_free=path_free)
        nodes, kinds = [message], set()
        while nodes:
            node = nodes.pop()
            kinds.add(type(node))
            nodes.extend(child for child in (node.values() if isinstance(node, dict) else node)
                         if isinstance(child, (dict, list)))
        assert message == json.loads(text)[0] and kinds == {dict, list}


def test_the_cli_refuses_a_large_file_with_a_key_twice_in_a_message_as_it_refuses_a_small_one(tmp_path, monkeypatch,
                                                                                               capsys):
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    source = tmp_path / "twice.json"
    source.write_text("[" + ", ".join([json.dumps(PLAIN[0]), TWICE, json.dumps(PLAIN[1])]) + "]")
    reason = 'the key "content" appears twice in one object: send each key once'
    for stream_bytes in (compact_cmd.STREAM_BYTES, 10):  # read whole, then streamed
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", stream_bytes)
        assert main(["compact", str(source), "-o", str(tmp_path / "out.json"), "-q"]) == 2
        assert capsys.readouterr().err == f"compactor compact: {source}: {reason}\n"
    assert not (tmp_path / "out.json").exists()


def test_a_run_checks_the_keys_of_the_callers_bytes_until_a_reading_has_gone_through_them_whole(monkeypatch):
    """Refusing a key named twice costs the streamed reading a Python call for every key (docs/performance.md,
    "Streamed reading"), which every reading of a run paid: its scan, its windows, its result, its passes' outputs.
    The caller's bytes are checked until one reading has read them whole; the readings after it, and of the passes'
    outputs (ArrayWriter's), are not."""
    from compactor import transcript_stream
    from compactor.compaction.windowed import compact_stream, inline_runner
    from compactor.compaction.windows import Settings
    from compactor.container import run_sync
    from compactor.compaction.preset import default_decision_policy
    from fakes.routers import frozen_router

    checked = []
    keys_once = transcript_stream._keys_once
    monkeypatch.setattr(transcript_stream, "_keys_once", lambda: checked.append(1) or keys_once())
    data = json.dumps(PLAIN * 40).encode()
    router = frozen_router()
    out = io.StringIO()
    run_sync(compact_stream(lambda: io.BytesIO(data), Settings(decision_policy_ir=default_decision_policy()),
                            router=router, run_window=inline_runner(router, window_budget_ms=60_000), out=out,
                            messages_only=True))
    assert len(checked) == 1 and json.loads(out.getvalue())

    # A reading left before its end, or refused, leaves the next one checked.
    from compactor.transcript_stream import CheckedOnce

    first = {"role": "user", "content": "x" * 100_000}  # read before the parser reads the repeated key
    reads = CheckedOnce(Opener("[" + ", ".join([json.dumps(first), json.dumps(first), TWICE]) + "]"))
    assert next(reads()) == first
    for _ in range(2):
        with pytest.raises(TranscriptError, match="appears twice"):
            list(reads())
    assert not reads.checked_whole


def test_a_file_read_again_is_the_file_read_first(tmp_path):
    """A run reads its file several times (the windows are cut from its first readings, whose keys were checked:
    the later ones are not); the file was opened again by its path, and a file changed in between was read as it
    had become."""
    import os

    from compactor.transcript_stream import opener

    path = tmp_path / "t.json"
    path.write_text(json.dumps(PLAIN))
    source = opener(str(path))
    assert list(messages_from(source)) == list(messages_from(source)) == PLAIN
    path.write_text(json.dumps(PLAIN[:1]))  # another size
    with pytest.raises(TranscriptError, match="changed while it was compacted"):
        list(messages_from(source))

    path.write_text(json.dumps(PLAIN))
    source = opener(str(path))
    assert list(messages_from(source)) == PLAIN
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # the same size, written again
    with pytest.raises(TranscriptError, match="changed while"):
        list(messages_from(source))

    path.write_text(json.dumps(PLAIN))
    source = opener(str(path))
    with pytest.raises(TranscriptError, match="changed while"):
        for message in messages_from(source):  # written while it is read
            with path.open("a") as handle:
                handle.write(" ")


_MESSAGE = b'{"role": "user", "content": "kept"}'


@pytest.mark.parametrize(("raw", "not_json"), [
    (b"[" + _MESSAGE + b"] trailing", True),
    (b"[" + _MESSAGE + b"]]", True),
    (b'[{"role": "user", "content": NaN}]', True),
    (b'[{"role": "user", "content": "x", "n": 1e999}]', True),
    (b'[{"role": "user", "content": "x", "n": ' + b"1" * 120 + b"}]", True),
    (b'[{"role": "user", "content": "kept", "content": "lost"}]', True),
    (b'{"messages": [' + _MESSAGE + b'], "messages": []}', True),
    (b"\x0c[" + _MESSAGE + b"]", True),
    (b'[{"role": "user", "content": "A\xff"}]', True),
    (b"\xef\xbb\xbf\xef\xbb\xbf[" + _MESSAGE + b"]", True),
    (b'[{"role": "user", "content": ' + b"[" * 200 + b"]" * 200 + b"}]", True),
    (b"not json\n" + _MESSAGE + b"\n", True),
    (_MESSAGE + b"\n[1]\n", True),  # JSONL: no JSON document the API reads, whatever its lines hold
    (b"[1]", False),
    (b'{"messages": {"item": ' + _MESSAGE + b"}}", False),
    (b"{}", False),
])
def test_what_the_api_does_not_read_as_json_is_refused_as_not_json(raw: bytes, not_json: bool) -> None:
    # The S3 windowed job records a NotJSON with the API's 422 json_invalid detail, as the inline job records the
    # same bytes; it recorded every refusal of the stream as a value_error.
    from compactor.transcripts import NotJSON

    with pytest.raises(TranscriptError) as refused:
        fields_from(lambda: io.BytesIO(raw))
        list(messages_from(lambda: io.BytesIO(raw)))
    assert isinstance(refused.value, NotJSON) is not_json, refused.value


# Number literals longer than the API reads (jsonutil.MAX_NUMBER_CHARS): neither ijson backend gives a number's text, so
# a float of 150 digits was read as its float by the streamed reading, where the API, the S3 path's whole reading and
# compactor compact below 32 MiB refuse the text ("number literal longer than 100 characters").
LONG_LITERALS = ["0." + "1" * 148, "1" + "0" * 99 + "e1", "-" + "1" * 50 + "." + "2" * 49, "1" * 101, "-" + "9" * 100,
                 "1." + "5" * 97 + "E+5", "123.0e-" + "0" * 94 + "7"]


def _streamed(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    source = Opener(text)
    return fields_from(source), list(messages_from(source))


@pytest.mark.parametrize("literal", LONG_LITERALS)
@pytest.mark.parametrize("where", ["array", "message", "field before", "field after", "after a big integer",
                                   "unknown member"])
def test_a_number_literal_longer_than_the_api_reads_is_refused_in_its_words(literal, where):
    from compactor.jsonutil import LONG_NUMBER, JSONLimitError
    from compactor.transcripts import NotJSON

    assert len(literal) > 100
    message = '{"role": "user", "content": "a", "n": ' + literal + "}"
    text = {
        "array": "[" + json.dumps(PLAIN[0]) + ", " + message + "]",
        "message": '{"keep_recent": 2, "messages": [' + message + "]}",
        "field before": '{"target_ratio": ' + literal + ', "messages": [' + json.dumps(PLAIN[0]) + "]}",
        "field after": '{"messages": [' + json.dumps(PLAIN[0]) + '], "keep_recent": ' + literal + "}",
        "after a big integer": "[" + json.dumps(NUMBERS) + ", " + message + "]",  # the pure-Python backend's reading
        "unknown member": '{"messages": [' + json.dumps(PLAIN[0]) + '], "trace": {"x": [' + literal + "]}}",
    }[where]
    with pytest.raises(JSONLimitError) as whole:
        bounded_loads(text)
    assert whole.value.msg == LONG_NUMBER
    with pytest.raises(TranscriptError) as read_whole:
        read_transcript(text)
    with pytest.raises(NotJSON) as streamed:
        _streamed(text)
    assert str(streamed.value) == str(read_whole.value) == LONG_NUMBER


@pytest.mark.parametrize("shift", range(0, 120, 3))
def test_number_literals_and_digits_across_two_reads_read_as_the_api_reads_them(shift):
    """A literal or a string cut between two reads is judged whole: digits in strings (however many, after escaped
    quotes and backslashes) and literals up to 100 characters are read as json.loads reads them, a longer literal
    refused wherever the reads cut it."""
    from compactor.jsonutil import LONG_NUMBER, JSONLimitError
    from compactor.transcript_stream import READ_BYTES

    strings = ['a \\" ' + "7" * 300, "\\\\" + "1" * 150, '\\\\\\"' + "-" + "2" * 120, "3" * 99 + "." + "4" * 99]
    fill = "x" * (READ_BYTES - 60 - shift)
    for literal, accepted in (("0." + "5" * 98, True), ("-" + "6" * 99, True), ("1" * 50 + "e-" + "0" * 47 + "1", True),
                              ("0." + "5" * 99, False), ("-" + "6" * 100, False)):
        for string in strings:
            messages = [{"role": "user", "content": fill}]
            text = (json.dumps(messages)[:-1] + ', {"role": "user", "content": "' + string + '", "n": ' + literal
                    + ', "m": "' + string + '"}]')
            if accepted:
                assert typed(list(messages_from(Opener(text)))) == typed(json.loads(text))
                bounded_loads(text)
            else:
                with pytest.raises(JSONLimitError, match=LONG_NUMBER):
                    bounded_loads(text)
                with pytest.raises(TranscriptError, match=f"^{LONG_NUMBER}$"):
                    list(messages_from(Opener(text)))


def test_digits_only_in_strings_read_as_they_are():
    """Digits in a string that may be a long literal send the stream to the reading that measures the literals, which
    reads every message as the first reading did: none lost, none twice."""
    many = [{"role": "user", "content": f"m{i} \\\" " + "9" * (200 if i % 7 == 3 else 5), "n": i, "f": -1.5e-3}
            for i in range(300)]
    text = json.dumps({"messages": many, "keep_recent": 2, "seed": "8" * 400})
    opener = Opener(text)
    assert list(messages_from(opener)) == many and opener.opened == 2
    assert fields_from(Opener(text)) == {"keep_recent": 2}


def test_the_cli_refuses_a_large_file_with_a_long_number_as_it_refuses_a_small_one(tmp_path, monkeypatch, capsys):
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    source = tmp_path / "long-number.json"
    source.write_text('[{"role": "user", "content": "a"}, {"role": "user", "content": "b", "n": 0.' + "1" * 150 + "}]")
    for stream_bytes in (compact_cmd.STREAM_BYTES, 10):  # read whole, then streamed
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", stream_bytes)
        assert main(["compact", str(source), "-o", str(tmp_path / "out.json"), "-q"]) == 2
        assert capsys.readouterr().err == f"compactor compact: {source}: number literal longer than 100 characters\n"
    assert not (tmp_path / "out.json").exists()


def test_a_file_edited_in_place_keeping_its_size_and_time_is_a_file_changed(tmp_path):
    """The readings compared the file's device, inode, size and modification time only: a file edited in place that
    kept them (an editor or a tool restoring the time, `touch -r`, a clock coarser than two writes) was read as it
    had become, the windows cut from the first reading applied to other messages. A reading that goes through the
    file whole now compares the bytes it read with the first such reading's."""
    import os

    from compactor.transcript_stream import opener

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"keep_recent": 2, "messages": PLAIN}))
    stat = path.stat()
    source = opener(str(path))
    assert list(messages_from(source)) == PLAIN
    with path.open("r+") as handle:  # the same size, in place
        handle.write(path.read_text().replace('"m0"', '"M0"'))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same modification time
    with pytest.raises(TranscriptError, match="changed while it was compacted"):
        list(messages_from(source))
    with pytest.raises(TranscriptError, match="changed while it was compacted"):
        fields_from(source)  # any reading that goes through it whole


def test_the_cli_refuses_a_file_edited_in_place_between_two_readings(tmp_path, monkeypatch, capsys):
    import os

    from compactor import transcript_stream
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    source = tmp_path / "big.json"
    source.write_text(json.dumps({"mode": "decision", "messages": PLAIN * 20}))
    stat = source.stat()
    opener = transcript_stream.opener

    def edited_after_the_first_whole_reading(path):
        open_source = opener(path)
        readings = []

        def opened():
            readings.append(1)
            if len(readings) == 3:  # after the fields' and the first message's readings, and one whole
                with source.open("r+") as handle:
                    handle.write(source.read_text().replace('"m0"', '"M0"'))
                os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
            return open_source()

        return opened

    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 10)
    monkeypatch.setattr(transcript_stream, "opener", edited_after_the_first_whole_reading)
    code = main(["compact", str(source), "-o", str(tmp_path / "out.json"), "-q"])
    changed = "changed while it was compacted (it is read several times): run again once nothing writes it"
    assert (code, capsys.readouterr().err) == (2, f"compactor compact: {source}: {changed}\n")
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("cut", range(1, 33, 4))
def test_a_long_literal_whose_one_run_of_33_digits_two_reads_cut_is_refused(cut):
    """101 characters hold 97 digits at least; in three runs of at most 33 one run has 33: here the only one, cut
    between two reads, which the first read's end and the second's start find together."""
    from compactor.jsonutil import LONG_NUMBER
    from compactor.transcript_stream import READ_BYTES

    literal = "-" + "1" * 33 + "." + "2" * 32 + "e-" + "3" * 32
    assert len(literal) == 101 and json.loads(literal) == 0.0
    head = '[{"role": "user", "content": "'
    start = '"}, {"role": "user", "content": "b", "n": '
    fill = "x" * (READ_BYTES - cut - 1 - len(head) - len(start))  # the run's first `cut` digits in the first read
    text = head + fill + start + literal + "}]"
    assert text[READ_BYTES - cut:READ_BYTES] == "1" * cut
    with pytest.raises(TranscriptError, match=f"^{LONG_NUMBER}$"):
        list(messages_from(Opener(text)))


def _literal(draw: Any) -> str:
    from hypothesis import strategies as st

    digits = st.integers(0, 70).map(lambda n: "".join("1234567890"[i % 10] for i in range(n)))
    whole = draw(st.sampled_from(["0", "-0"]) | st.tuples(st.sampled_from(["", "-"]), digits).map(
        lambda signed: signed[0] + "7" + signed[1]))
    fraction = draw(st.none() | st.integers(1, 60).map(lambda n: "." + "5" * n))
    exponent = draw(st.none() | st.tuples(st.sampled_from("eE"), st.sampled_from(["", "+", "-"]),
                                          st.integers(1, 40)).map(lambda e: e[0] + e[1] + "0" * (e[2] - 1) + "2"))
    return whole + (fraction or "") + (exponent or "")


def _string(draw: Any) -> str:
    from hypothesis import strategies as st

    pieces = st.sampled_from(['\\"', "\\\\", "x", " ", "-", ".", "e", "\\u0041", "\\n"]) | \
        st.integers(1, 120).map(lambda n: "9" * n)
    return '"' + "".join(draw(st.lists(pieces, max_size=12))) + '"'


@pytest.mark.parametrize("read_bytes", [7, 33, 101])
def test_literals_and_strings_read_as_bounded_loads_reads_them_wherever_the_reads_cut_them(read_bytes, monkeypatch):
    """Drawn messages of strings (digits, escaped quotes and backslashes) and number literals of up to about 170
    characters, read in small reads: accepted with the values bounded_loads gives, or refused as it refuses them."""
    from hypothesis import given, strategies as st

    from compactor import transcript_stream
    from compactor.jsonutil import LONG_NUMBER, JSONLimitError
    from property.strategies import ci_settings

    monkeypatch.setattr(transcript_stream, "READ_BYTES", read_bytes)

    @st.composite
    def texts(draw: Any) -> str:
        messages = []
        for _ in range(draw(st.integers(1, 4))):
            members = ['"role": "user"', '"content": ' + _string(draw)]
            for key in draw(st.lists(st.sampled_from("abc"), max_size=3, unique=True)):
                members.append(f'"{key}": ' + (_literal(draw) if draw(st.booleans()) else _string(draw)))
            messages.append("{" + ", ".join(members) + "}")
        return "[" + ", ".join(messages) + "]"

    @ci_settings(150)
    @given(texts())
    def check(text: str) -> None:
        try:
            expected = bounded_loads(text)
        except JSONLimitError as exc:
            assert exc.msg.startswith("number"), exc.msg  # the drawing makes only numbers the API may refuse
            if exc.msg == LONG_NUMBER:
                with pytest.raises(TranscriptError, match=f"^{LONG_NUMBER}$"):
                    list(messages_from(Opener(text)))
            return
        assert typed(list(messages_from(Opener(text)))) == typed(expected)

    check()


@pytest.mark.parametrize("read_bytes", [7, 33])
def test_a_long_literal_whose_run_of_digits_an_earlier_read_held_is_refused(read_bytes, monkeypatch):
    """Its 67 digits in a read before the one that holds its 101st character, which holds fewer than 33 in a row: the
    read that ends its first 101 characters looks at the last read's last 100 bytes with its own (found by the drawn
    test above, in reads of 7 and 33 bytes)."""
    from compactor import transcript_stream
    from compactor.jsonutil import LONG_NUMBER

    monkeypatch.setattr(transcript_stream, "READ_BYTES", read_bytes)
    literal = "7" + "1234567890" * 6 + "123456" + "e+" + "0" * 31 + "2"
    assert len(literal) == 101
    with pytest.raises(TranscriptError, match=f"^{LONG_NUMBER}$"):
        list(messages_from(Opener('[{"role": "user", "content": "", "a": ' + literal + "}]")))


def test_a_streamed_jsonl_of_langchain_messages_is_refused_not_read_as_bookkeeping(tmp_path, monkeypatch, capsys):
    """A JSONL line with a ``type`` and no ``role`` that is no session's record was skipped as a session's bookkeeping:
    a file of LangChain messages (``messages_to_dict``) over the streaming threshold was compacted to ``[]``, exit 0.
    Read whole, it is refused (docs/formats.md "Records of other programs"); streamed, now too."""
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    lines = [{"type": "human", "data": {"content": f"step {n}", "type": "human"}} for n in range(40)]
    path = tmp_path / "langchain.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out.json"
    for threshold in (10**9, 1000):  # read whole, then streamed
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", threshold)
        assert main(["compact", str(path), "-o", str(out), "-q"]) == 2
        err = capsys.readouterr().err
        assert "is a LangChain message (type 'human'), not an item: send OpenAI chat messages" in err, err
        assert not out.exists()
