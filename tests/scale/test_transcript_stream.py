"""Streamed reading of every transcript format, and the CLI's streamed path for large files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from compactor.transcript_stream import ArrayWriter, iter_messages, read_fields
from compactor.transcripts import TranscriptError, parse_transcript

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
])
def test_streamed_reading_matches_parse_transcript(text):
    messages, fields = parse_transcript(text.lstrip("\ufeff"))
    assert list(iter_messages(stream(text))) == messages
    assert read_fields(stream(text)) == fields


def test_claude_code_jsonl_streams_like_it_parses():
    path = next(Path(__file__).resolve().parents[1].glob("fixtures/corpus/*.jsonl"))
    text = path.read_text(encoding="utf-8")
    assert list(iter_messages(io.BytesIO(text.encode()))) == parse_transcript(text)[0]


@pytest.mark.parametrize("text", ["", "   ", "[1, 2]", '{"messages": [1]}', "[{]", "not json\nat all"])
def test_bad_input_is_a_transcript_error(text):
    with pytest.raises(TranscriptError):
        list(iter_messages(stream(text)))


def test_array_writer_reads_back():
    out = io.StringIO()
    writer = ArrayWriter(out)
    for message in MESSAGES:
        writer.write(message)
    writer.finish()
    assert json.loads(out.getvalue()) == MESSAGES
    assert list(iter_messages(stream(out.getvalue()))) == MESSAGES
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
