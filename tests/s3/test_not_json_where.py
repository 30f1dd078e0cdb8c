"""What a caller reads in ``failed/<rel>`` (and ``GET /v1/jobs/{id}``) for an object that is not JSON: where it broke, in
one line, the same words from the inline job's whole reading and a windowed job's streamed one where both can say it
(docs/scale.md, "Streaming")."""

from __future__ import annotations

import io
import json

import pytest

from compactor.object_jobs import Defaults, Failure, build_request
from compactor.transcript_stream import messages_from
from compactor.transcripts import NotJSON

LINES = [json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}).encode()
         for i in range(6)]


def inline(data: bytes) -> str:
    """The message of the inline job's record of ``data`` (an object of at most ``S3InlineMaxBytes``)."""
    failure = build_request(data, Defaults())
    assert isinstance(failure, Failure) and failure.status == 422, failure
    assert failure.detail[0]["type"] == "json_invalid"
    return failure.error["message"]


def streamed(data: bytes) -> str:
    """What a windowed job's streamed reading refuses ``data`` with (its record: ``not a transcript: <this>``)."""
    with pytest.raises(NotJSON) as refused:
        list(messages_from(lambda: io.BytesIO(data)))
    return str(refused.value)


@pytest.mark.parametrize("data, where", [
    (b"[" + b",\n".join(LINES)[:-20], "not JSON: Unterminated string starting at line 6, column 23"),  # cut short
    (b"[" + b",\n".join(LINES[:3]) + b"\n" + b",\n".join(LINES[3:]) + b"]", "not JSON: Expecting ',' delimiter at line 4, "
                                                                           "column 1"),  # a comma missing
    (b'{"mode": "decision", "messages": [' + b",\n".join(LINES)[:-20], "at line 6, column 23"),
])
def test_a_document_broken_past_its_first_line_is_refused_where_it_broke(data, where):
    # The whole reading fell back to JSONL and refused its first line: "line 1 is not JSON: Expecting value", wherever
    # the document broke (a transcript cut short at its 5,001st line read the same).
    message = inline(data)
    assert message.startswith("not a transcript: not JSON: ") and message.endswith(where), message
    assert "line 1 " not in message


@pytest.mark.parametrize("data, reason", [
    (b"\n".join(LINES) + b"\n" + LINES[0][:-5] + b"\n", "line 7 is not JSON: Unterminated string starting at column 29"),
    (b"\n".join(LINES) + b"\n" + LINES[0][:-5], "line 7 is not JSON: Unterminated string starting at column 29"),
    (b"\n".join(LINES[:3]) + b'\n{"role": "user" "content": "x"}\n' + LINES[3], "line 4 is not JSON: Expecting ',' "
                                                                                    "delimiter at column 17"),
])
def test_a_torn_jsonl_line_is_refused_with_its_column_in_the_same_words_by_both_readings(data, reason):
    # json's words wait for the place ("Unterminated string starting at", "Invalid control character at"): the place
    # was cut off, and the whole reading, which kept a line's line feed, read a line cut inside a string as an
    # "Invalid control character" where the streamed one read an "Unterminated string".
    assert inline(data) == f"not a transcript: {reason}"
    assert streamed(data) == reason


def test_the_streamed_reading_refuses_a_broken_document_in_one_line_naming_how_far_it_read():
    # ijson's C backend (yajl) answers lines of the input around the place with an arrow under it; the record held
    # them as they were: "not JSON: parse error: premature EOF\n   ...\n  (right here) ------^\n".
    data = b"[" + b",\n".join(LINES)[:-20]
    assert streamed(data) == "not JSON: parse error: premature EOF (after 5 messages read whole)"
    missing = b"[" + b",\n".join(LINES[:3]) + b"\n" + b",\n".join(LINES[3:]) + b"]"
    assert streamed(missing) == "not JSON: parse error: after array element, I expect ',' or ']' (after 3 messages read " \
                                "whole)"


@pytest.mark.parametrize("prefix, end", [(b"", b"\n"), (b"", b"\r\n"), (b"\xef\xbb\xbf", b"\n")],
                         ids=["lf", "crlf", "bom"])
def test_a_jsonl_line_s_column_counts_characters_on_both_readings(prefix, end):
    """docs/behaviour.md: the column counts characters (three two-byte 'é' before the place are three columns, not six),
    a CRLF line's return is its own, a leading byte order mark is not counted."""
    bad = '{"role": "user", "content": "ééé" "x"}'.encode()  # the missing comma: character 35, byte 38
    data = prefix + end.join([*LINES[:4], bad]) + end
    reason = "line 5 is not JSON: Expecting ',' delimiter at column 35"
    assert inline(data) == f"not a transcript: {reason}"
    assert streamed(data) == reason
