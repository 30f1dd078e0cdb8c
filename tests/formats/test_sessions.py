"""Claude Code sessions and Codex rollouts compact in their own format through the CLI and the S3 path:
the file comes back as the same kind of file, every line that is not a model item unchanged and in
place, every kept item's line byte-identical."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compactor.call_record import CallRecord
from compactor.container import run_sync
from compactor.models import COMPACT_FIELDS, CompactRequest
from compactor.service import compact_call, request_deadline
from compactor.transcripts import (
    CLAUDE_CODE, CODEX, FILE_FIELDS, REQUEST_FIELDS, TranscriptError, parse_transcript, read_transcript,
)
from compactor_cli.main import main

from .conftest import decision_policy
from .validity import CHAT, CLAUDE_CODE as CLAUDE_CODE_FILE, CODEX as CODEX_FILE, CORPUS, PROBLEMS

SESSIONS = {CLAUDE_CODE: CLAUDE_CODE_FILE, CODEX: CODEX_FILE}
SMALL_CLAUDE_CODE = CORPUS / "ccb_claude-opus-4-5_dependeval-java-accountauthenticator.jsonl"


def _is_item_line(session: str, line: str) -> bool:
    record = json.loads(line)
    if session == CODEX:
        return record.get("type") == "response_item"
    return record.get("type") in ("user", "assistant") and isinstance(record.get("message"), dict)


def _items_of(session: str, text: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in text.splitlines() if _is_item_line(session, line)]
    return [r["payload"] if session == CODEX else r["message"] for r in records]


PARENT = re.compile(r'"parentUuid":("[^"]*"|null)')


def _check_session(session: str, original: str, written: str) -> None:
    """Other lines unchanged and in place (a Claude Code line may point its ``parentUuid`` elsewhere, no
    more), items valid in the format, and Claude Code's parent chain resolves wherever it did."""
    fmt = "openai-responses" if session == CODEX else "anthropic-messages"
    before, after = original.splitlines(), written.splitlines()
    unlinked = (lambda ln: PARENT.sub("", ln, count=1)) if session == CLAUDE_CODE else (lambda ln: ln)
    assert [unlinked(ln) for ln in after if not _is_item_line(session, ln)] == [
        unlinked(ln) for ln in before if not _is_item_line(session, ln)]
    kept_items = {unlinked(ln) for ln in before if _is_item_line(session, ln)}  # a kept line may be relinked
    new = [ln for ln in after if _is_item_line(session, ln) and unlinked(ln) not in kept_items]
    assert new and all("Summary of" in ln or "sealed summary" in ln for ln in new)
    assert PROBLEMS[fmt](_items_of(session, written)) == []
    if session == CLAUDE_CODE:
        old_uuids = {json.loads(ln).get("uuid") for ln in before}
        uuids = {json.loads(ln).get("uuid") for ln in after}
        for line in after:
            parent = json.loads(line).get("parentUuid")
            assert parent is None or parent in uuids or parent not in old_uuids


@pytest.mark.parametrize("session", list(SESSIONS))
def test_session_round_trip_is_byte_identical(session: str) -> None:
    text = SESSIONS[session].read_text(encoding="utf-8")
    transcript = read_transcript(text)

    assert transcript.session == session and transcript.items == _items_of(session, text)
    assert transcript.write_back(CallRecord(status=200, body={"compacted": False}, mode="seal")) == text
    field = "input" if transcript.format == "openai-responses" else "messages"
    request = CompactRequest.model_validate({"format": transcript.format, field: transcript.items,
                                             "keep_recent": len(transcript.items),
                                             "decision_policy_ir": decision_policy()})
    record = run_sync(compact_call(request, deadline=request_deadline()))
    assert record.status == 200 and transcript.write_back(record) == text


@pytest.mark.parametrize("session", list(SESSIONS))
def test_mask_writes_every_masked_item_back(session: str) -> None:
    transcript = read_transcript(SESSIONS[session].read_text(encoding="utf-8"))
    request = CompactRequest.model_validate(transcript.compact_body(mode="mask"))
    record = run_sync(compact_call(request, deadline=request_deadline()))
    written = transcript.write_back(record)

    assert written is not None and len({entry["index"] for entry in record.report["masked"]}) > 1
    assert _items_of(session, written) == record.body[transcript.items_field]


@pytest.mark.parametrize("session", list(SESSIONS))
@pytest.mark.parametrize("mode", ["decision", "seal"])
def test_cli_writes_the_session_back_compacted(tmp_path: Path, session: str, mode: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    source = SESSIONS[session]
    out = tmp_path / "out.jsonl"

    assert main(["compact", str(source), "--mode", mode, "-o", str(out)]) == 0

    written = out.read_text(encoding="utf-8")
    _check_session(session, source.read_text(encoding="utf-8"), written)
    assert out.stat().st_size < source.stat().st_size
    # the line after the report says what is on disk: the session, as JSONL (one record a line)
    kind = {CLAUDE_CODE: "a Claude Code session", CODEX: "a Codex rollout"}[session]
    err = capsys.readouterr().err
    assert f"wrote {out} ({out.stat().st_size} bytes on disk: {kind} as JSONL," in err
    assert "pretty-printed" not in err
    assert all(isinstance(json.loads(line), dict) for line in written.splitlines())


def test_cli_writes_a_large_claude_code_session_back_as_the_session(tmp_path: Path, monkeypatch: Any) -> None:
    """Files over 32 MiB are streamed as chat (docs/scale.md); a Claude Code session that large was read as the chat
    it converts to, and written as a chat array: its thinking blocks, tool references and records gone. It is read
    whole now, as a smaller one, and written back as the session."""
    from compactor_cli import compact_cmd

    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    assert main(["compact", str(CLAUDE_CODE_FILE), "-o", str(small), "-q"]) == 0
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 1000)
    assert main(["compact", str(CLAUDE_CODE_FILE), "-o", str(large), "-q"]) == 0

    written = large.read_text(encoding="utf-8")
    assert written == small.read_text(encoding="utf-8")
    _check_session(CLAUDE_CODE, CLAUDE_CODE_FILE.read_text(encoding="utf-8"), written)
    assert '"tool_reference"' in written and '"thinking"' in written


def _rollout_with_developer_notes() -> str:
    """A Codex rollout whose session gets developer messages mid-way (Codex's approvals and permission
    notes), besides its bookkeeping lines."""
    def line(payload: dict[str, Any], kind: str = "response_item") -> str:
        return json.dumps({"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload}) + "\n"

    def developer(text: str) -> dict[str, Any]:
        return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}

    lines = [line({"id": "s1"}, "session_meta"), line(developer("<permissions>sandboxed</permissions>")),
             line({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the bug"}]})]
    for n in range(8):
        if n in (2, 5):
            lines.append(line(developer(f"Approved command prefix {n}")))
        lines += [line({"type": "reasoning", "summary": [], "encrypted_content": f"opaque {n}"}),
                  line({"type": "function_call", "call_id": f"c{n}", "name": "exec", "arguments": f'{{"cmd": "cat f{n}"}}'}),
                  line({"type": "function_call_output", "call_id": f"c{n}", "output": f"line {n} " * 200}),
                  line({"type": "token_count", "n": n}, "event_msg")]
    lines.append(line({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed."}]}))
    return "".join(lines)


@pytest.mark.parametrize("keep_recent", [1, 2, 4])
def test_a_sealed_rollout_keeps_the_developer_messages_of_its_middle(keep_recent: int) -> None:
    """Seal keeps the developer messages of the sealed middle after its summary. The written rollout read the
    output as a kept head, the summary and a kept tail, so it kept the last input lines in their place: the
    developer messages were lost and the lines kept instead held outputs whose calls were sealed."""
    text = _rollout_with_developer_notes()
    transcript = read_transcript(text)
    request = CompactRequest.model_validate({**transcript.compact_body(mode="seal"), "keep_recent": keep_recent})
    record = run_sync(compact_call(request, deadline=request_deadline()))
    assert record.status == 200 and record.body["compacted"] is True
    written = transcript.write_back(record)

    assert written is not None and _items_of(CODEX, written) == record.body["input"]
    assert sum("Approved command prefix" in ln for ln in written.splitlines()) == 2
    assert PROBLEMS["openai-responses"](_items_of(CODEX, written)) == []


def test_cli_says_a_session_compacted_with_json_is_written_as_the_response_body(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "body.json"

    assert main(["compact", str(SMALL_CLAUDE_CODE), "--json", "-o", str(out)]) == 0

    body = json.loads(out.read_text(encoding="utf-8"))  # one JSON document, not JSONL
    assert "messages" in body and "compaction" in body and out.read_text(encoding="utf-8").startswith('{\n  "')
    assert (f"wrote {out} ({out.stat().st_size} bytes on disk: the /v1/compact response body as pretty-printed "
            "JSON, so larger than the dense size above)") in capsys.readouterr().err


def test_cli_format_detection_and_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = _items_of(CODEX, CODEX_FILE.read_text(encoding="utf-8"))
    array = tmp_path / "items.json"
    array.write_text(json.dumps(items), encoding="utf-8")

    assert main(["compact", str(array), "-q", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert "input" in body and PROBLEMS["openai-responses"](body["input"]) == []
    out = tmp_path / "out.json"
    assert main(["compact", str(array), "-o", str(out)]) == 0  # the items alone, under their own name
    assert PROBLEMS["openai-responses"](json.loads(out.read_text(encoding="utf-8"))) == []
    assert f"wrote {out} ({out.stat().st_size} bytes on disk: the input array as pretty-printed JSON" \
        in capsys.readouterr().err

    assert main(["compact", str(CODEX_FILE), "-q", "--format", "anthropic-messages"]) == 2
    assert "openai-responses, not anthropic-messages" in capsys.readouterr().err


def test_cli_restorable_stores_originals_for_the_local_caller(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    from compactor.archives import Archive, default_local_store, expand
    from compactor_aws.caller import ANONYMOUS

    assert main(["compact", str(CHAT), "-q", "--json", "--restorable"]) == 0
    body = json.loads(capsys.readouterr().out)
    changed = [e for e in body["compaction"]["fragments"] if "handle" in e]
    status, answer = expand(Archive(default_local_store(), ANONYMOUS), [e["handle"] for e in changed])
    items = json.loads(CHAT.read_text(encoding="utf-8"))
    assert changed and status == 200
    assert all(answer["originals"][e["handle"]] == items[e["start"]:e["end"]] for e in changed)


def test_chat_readers_still_get_chat() -> None:
    """``compactor eval`` and other chat-only readers keep receiving a Claude Code session as chat."""
    messages, fields = parse_transcript(SMALL_CLAUDE_CODE.read_text(encoding="utf-8"))
    assert fields == {} and {m["role"] for m in messages} <= {"user", "assistant", "tool"}


@pytest.mark.parametrize("session", list(SESSIONS))
def test_s3_path_writes_the_session_back(s3: Any, s3_module: ModuleType, s3_context: Any, session: str) -> None:
    from tests.s3.conftest import put_and_event

    text = SESSIONS[session].read_text(encoding="utf-8")
    event = put_and_event(s3, f"incoming/{session}.jsonl", text)

    [result] = s3_module.handler(event, s3_context)["results"]

    assert result["result"] == "compacted", result
    written = s3.get_object(Bucket=result["source"]["bucket"], Key=result["key"])
    assert written["ContentType"] == "application/x-ndjson"
    _check_session(session, text, written["Body"].read().decode("utf-8"))


def test_a_file_may_carry_exactly_the_request_fields_of_the_api() -> None:
    """``compactor.transcripts`` spells the field names out (importing the pydantic models would add to
    the window jobs' cold start); they must stay the ``/v1/compact`` fields besides the items."""
    assert sorted(FILE_FIELDS) == sorted(COMPACT_FIELDS)
    assert set(FILE_FIELDS) - set(REQUEST_FIELDS) == {"format", "restorable"}


@pytest.mark.parametrize("session", list(SESSIONS))
def test_line_separators_inside_strings_are_text_not_line_ends(session: str) -> None:
    """JSON strings may hold U+2028, U+2029 and U+0085 unescaped (JavaScript's JSON.stringify writes them so);
    ``str.splitlines`` split a session's lines there and refused them as "not JSON"."""
    text = SESSIONS[session].read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if _is_item_line(session, line) and '"text":"' in line)
    lines[at] = lines[at].replace('"text":"', '"text":"a\u2028b\u2029c\u0085d ', 1)
    changed = "".join(lines)
    transcript = read_transcript(changed)
    assert transcript.session == session and len(transcript.items) == len(_items_of(session, text))
    assert "a\u2028b\u2029c\u0085d " in json.dumps(transcript.items, ensure_ascii=False)
    assert transcript.write_back(CallRecord(status=200, body={"compacted": False}, mode="seal")) == changed


@pytest.mark.parametrize("session", list(SESSIONS))
def test_cli_writes_a_crlf_session_back_with_its_line_ends(tmp_path: Path, session: str) -> None:
    """Untouched lines come back byte for byte: the CLI read files with newlines translated, so a CRLF session
    came back with LF line ends throughout."""
    text = SESSIONS[session].read_text(encoding="utf-8")
    source, out = tmp_path / "crlf.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(text.replace("\n", "\r\n").encode("utf-8"))
    assert main(["compact", str(source), "--mode", "seal", "-o", str(out), "-q"]) == 0
    written = out.read_bytes()
    assert written.count(b"\r\n") == written.count(b"\n") > 1
    before = source.read_bytes().decode("utf-8")
    kept = [PARENT.sub("", line) for line in before.split("\r\n") if line and not _is_item_line(session, line)]
    unlinked = PARENT.sub("", written.decode("utf-8"))  # a Claude Code line may point its parentUuid elsewhere
    assert kept and all(line + "\r\n" in unlinked for line in kept)


def test_jsonl_of_responses_items_reads_as_responses() -> None:
    """JSONL that is no session file is the array of its lines: Responses items (a type, no role) were dropped as
    if they were a session's bookkeeping, and the rest compacted as chat."""
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
             {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "ok"}]
    transcript = read_transcript("\n".join(json.dumps(item) for item in items) + "\n")
    assert transcript.format == "openai-responses" and transcript.items == items
    assert read_transcript(json.dumps(items)).items == items
    with pytest.raises(TranscriptError, match="line 2 is not a message"):
        read_transcript(json.dumps(items[0]) + "\n" + json.dumps({"a": 1}))


def test_claude_code_as_chat_answers_the_calls_before_the_users_text() -> None:
    """A user record holding tool results and text: the tool messages answer the assistant's calls, so they come
    first; the text after them had split the calls from their results."""
    records = [{"type": "assistant", "message": {"role": "assistant", "content": [
                   {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]}},
               {"type": "user", "message": {"role": "user", "content": [
                   {"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}, {"type": "text", "text": "now"}]}}]
    messages, _ = parse_transcript("\n".join(json.dumps(record) for record in records))
    assert [m["role"] for m in messages] == ["assistant", "tool", "user"]
    assert messages[1] == {"role": "tool", "tool_call_id": "t1", "content": "a.py"}


def _record(kind: str, uuid: str, parent: str | None, message: dict[str, Any], sidechain: bool = False
            ) -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": sidechain, "type": kind, "uuid": uuid, "sessionId": "s",
            "message": message}


def _session_with_a_sub_agent() -> list[dict[str, Any]]:
    """Six calls of the main conversation; the third is a Task whose sub-agent's records (``isSidechain``, a chain
    of their own) Claude Code wrote between the call and its result."""
    records = [_record("user", "u0", None, {"role": "user", "content": "Audit the repository."})]
    parent = "u0"
    for n in range(6):
        records.append(_record("assistant", f"a{n}", parent, {"role": "assistant", "id": f"msg_{n}", "content": [
            {"type": "thinking", "thinking": f"think {n} " * 30, "signature": f"sig{n}"},
            {"type": "tool_use", "id": f"toolu_{n}", "name": "Task" if n == 2 else "Read", "input": {"n": n}}]}))
        if n == 2:
            side_parent = "s0"
            records.append(_record("user", "s0", None, {"role": "user", "content": "Read every file."}, True))
            for k in range(4):
                records.append(_record("assistant", f"s{k}a", side_parent, {"role": "assistant", "id": f"smsg_{k}",
                                       "content": [{"type": "tool_use", "id": f"stoolu_{k}", "name": "Read",
                                                    "input": {"k": k}}]}, True))
                records.append(_record("user", f"s{k}r", f"s{k}a", {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": f"stoolu_{k}", "content": f"sub line {k} " * 80}]}, True))
                side_parent = f"s{k}r"
        records.append(_record("user", f"r{n}", f"a{n}", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"line {n} " * 80}]}))
        parent = f"r{n}"
    records.append(_record("assistant", "fin", parent, {"role": "assistant", "id": "msg_fin",
                                                        "content": [{"type": "text", "text": "All audited."}]}))
    return records


def _main_and_sidechain(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    records = [(line, json.loads(line)) for line in text.splitlines()]
    return ([r["message"] for _, r in records if not r.get("isSidechain")],
            [line for line, r in records if r.get("isSidechain")])


@pytest.mark.parametrize("in_flight", [False, True])
@pytest.mark.parametrize("mode, extra", [("decision", {"keep_recent": 2, "target_ratio": 0.05}),
                                         ("seal", {"keep_recent": 3}), ("mask", {})])
def test_a_sub_agents_records_are_kept_out_of_the_session_s_conversation(
        mode: str, extra: dict[str, Any], in_flight: bool) -> None:
    """Claude Code interleaves a sub-agent's records (``isSidechain``) with the session's: they were read as items
    of its conversation. The sub-agent's prompt, a human turn, pinned the Task call's unit whole; seal sealed the
    sub-agent's lines into the session's summary; and while the sub-agent ran (the Task call still unanswered, its
    records last) the turn in progress was the sub-agent's, so decision put a summary right before the session's
    final assistant message, which then no longer started with its thinking. They are kept in place now, as the
    session's bookkeeping is."""
    records = _session_with_a_sub_agent()
    if in_flight:
        records = records[:next(i for i, r in enumerate(records) if r["uuid"] == "r2")]
    text = "\n".join(json.dumps(r) for r in records) + "\n"
    transcript = read_transcript(text)
    main_items, sidechain = _main_and_sidechain(text)
    assert transcript.items == main_items

    request = CompactRequest.model_validate(transcript.compact_body(mode=mode) | extra)
    record = run_sync(compact_call(request, deadline=request_deadline()))
    assert record.status == 200 and record.body["compacted"] is not (mode == "mask" and in_flight)
    written = transcript.write_back(record)
    assert written is not None
    written_items, written_sidechain = _main_and_sidechain(written)
    assert written_sidechain == sidechain
    assert PROBLEMS["anthropic-messages"](written_items) == []
    assert written_items == record.body["messages"]


def _resumed_conversation(text: str) -> list[dict[str, Any]]:
    """The messages Claude Code resumes: the ``parentUuid`` chain from the last message back to its start."""
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    by_uuid = {r["uuid"]: r for r in records if r.get("uuid")}
    chain, at = [], [r for r in records if r.get("type") in ("user", "assistant")][-1]
    while at is not None:
        chain.append(at)
        at = by_uuid.get(at.get("parentUuid"))
    return [r["message"] for r in reversed(chain) if r.get("type") in ("user", "assistant")]


SUMMARY = "This session is being continued from a previous conversation. " + "The build was fixed in part. " * 60


def test_explicit_pins_keep_the_summary_a_native_compaction_resumes_from(tmp_path: Path) -> None:
    """After Claude Code's own compaction (a ``compact_boundary`` record, its ``parentUuid`` null, then the summary
    as a user record) the session resumes from the summary. The default pins hold it (a human turn); with explicit
    pins (``--pin-task``: the first user message only) decision summarized it, and the resumed conversation started
    with an assistant message, which the Messages API refuses."""
    records = _claude_code_with_a_boundary()
    source, out = tmp_path / "session.jsonl", tmp_path / "out.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    assert read_transcript(source.read_text(encoding="utf-8")).conversation_starts == [9]

    assert main(["compact", str(source), "--pin-task", "--keep-recent", "2", "--target-ratio", "0.05",
                 "-o", str(out), "-q"]) == 0
    resumed = _resumed_conversation(out.read_text(encoding="utf-8"))
    assert resumed[0] == {"role": "user", "content": SUMMARY}
    assert PROBLEMS["anthropic-messages"](resumed) == []
    assert len(resumed) < len(_resumed_conversation(source.read_text(encoding="utf-8")))


def _claude_code_with_a_boundary() -> list[dict[str, Any]]:
    """Four Read cycles, Claude Code's own compaction (``compact_boundary``, then its summary as a user record),
    four more cycles and a last answer."""
    def cycles(tag: str, parent: str) -> tuple[list[dict[str, Any]], str]:
        records = []
        for n in range(4):
            records.append(_record("assistant", f"{tag}a{n}", parent, {"role": "assistant", "id": f"{tag}m{n}",
                                   "content": [{"type": "tool_use", "id": f"{tag}t{n}", "name": "Read",
                                                "input": {"n": n}}]}))
            records.append(_record("user", f"{tag}r{n}", f"{tag}a{n}", {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"{tag}t{n}", "content": f"{tag} line {n} " * 80}]}))
            parent = f"{tag}r{n}"
        return records, parent

    before, last = cycles("b", "u0")
    after, end = cycles("c", "summary")
    return [_record("user", "u0", None, {"role": "user", "content": "Fix the build."}), *before,
            {"parentUuid": None, "logicalParentUuid": last, "type": "system", "subtype": "compact_boundary",
             "uuid": "boundary", "content": "Conversation compacted"},
            {**_record("user", "summary", "boundary", {"role": "user", "content": SUMMARY}), "isCompactSummary": True},
            *after, _record("assistant", "fin", end, {"role": "assistant", "content": [{"type": "text",
                                                                                      "text": "Done."}]})]


@pytest.mark.parametrize("mode", ["decision", "seal", "mask"])
def test_history_before_claude_codes_own_compaction_is_kept_and_not_sent(tmp_path: Path, mode: str) -> None:
    """Claude Code resumes from the summary after its ``compact_boundary``: what came before is no longer sent to
    its model. It was compacted as live context (decision summarized the cycles before the boundary, seal sealed
    them into its summary, mask masked their results). Now the request holds the items from the summary on, the
    summary first (pinned, the decision's context), and the lines before the boundary come back byte for byte."""
    records = _claude_code_with_a_boundary()
    text = "\n".join(json.dumps(r) for r in records) + "\n"
    transcript = read_transcript(text)
    body = transcript.compact_body(mode=mode)
    assert body["messages"][0] == {"role": "user", "content": SUMMARY} and len(body["messages"]) == 10
    assert all(" b line " not in json.dumps(m) for m in body["messages"])

    source, out = tmp_path / "session.jsonl", tmp_path / "out.jsonl"
    source.write_text(text, encoding="utf-8")
    assert main(["compact", str(source), "--mode", mode, "--keep-recent", "1", "-o", str(out), "-q"]) == 0
    written = out.read_text(encoding="utf-8").splitlines()
    boundary = next(n for n, ln in enumerate(written) if "compact_boundary" in ln)
    assert written[:boundary + 2] == text.splitlines()[:boundary + 2]  # the history and the summary as they were
    assert written != text.splitlines()  # what follows the summary was compacted
    resumed = _resumed_conversation(out.read_text(encoding="utf-8"))
    assert resumed[0] == {"role": "user", "content": SUMMARY} and PROBLEMS["anthropic-messages"](resumed) == []


def _codex_with_a_compacted_line(replacement: bool = True) -> str:
    def line(payload: dict[str, Any], kind: str = "response_item") -> str:
        return json.dumps({"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload}) + "\n"

    def message(role: str, text: str) -> dict[str, Any]:
        part = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}

    def cycles(tag: str) -> list[str]:
        return [line(p) for n in range(4) for p in (
            {"type": "reasoning", "summary": [], "encrypted_content": f"opaque {tag}{n}"},
            {"type": "function_call", "call_id": f"{tag}{n}", "name": "exec", "arguments": f'{{"cmd": "cat {tag}{n}"}}'},
            {"type": "function_call_output", "call_id": f"{tag}{n}", "output": f"{tag} line {n} " * 200})]

    history = [message("user", "Sync the refs."), message("assistant", "Synced the branches; tags are next."),
               message("user", "Now the tags.")]
    compacted = {"message": "" if replacement else "Synced the branches; tags are next.",
                 **({"replacement_history": history} if replacement else {})}
    return "".join([line({"id": "s1"}, "session_meta"), line(history[0]), *cycles("b"),
                    line(history[1]), line(history[2]), line(compacted, "compacted"), *cycles("c"),
                    line(message("assistant", "Tags synced."))])


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("mode", ["decision", "seal", "mask"])
def test_history_before_a_codex_compacted_line_is_kept_and_not_sent(mode: str, replacement: bool) -> None:
    """Codex resumes a rollout from its last ``compacted`` line: its ``replacement_history`` (or, from an older Codex,
    its summary) stands for everything before, then come the items after the line. The items before it were
    compacted as live context; now they are neither sent nor changed, and decision reads the replacement history as
    pinned context before the items after the line."""
    text = _codex_with_a_compacted_line(replacement)
    transcript = read_transcript(text)
    body = {**transcript.compact_body(mode=mode), "keep_recent": 1}
    context = 0
    if mode == "decision":
        context = 3 if replacement else 1
        assert set(range(context)) <= set(body["pinned_indices"])
        assert "Now the tags." in json.dumps(body["input"][:context]) if replacement else True
    assert len(body["input"]) == context + 13
    assert all(" b line " not in json.dumps(item) for item in body["input"])
    request = CompactRequest.model_validate(body)
    record = run_sync(compact_call(request, deadline=request_deadline()))
    assert record.status == 200 and record.body["compacted"] is True
    assert record.body["input"][:context] == body["input"][:context]
    written = transcript.write_back(record)

    assert written is not None
    boundary = next(n for n, ln in enumerate(text.splitlines()) if '"type": "compacted"' in ln)
    assert written.splitlines()[:boundary + 1] == text.splitlines()[:boundary + 1]
    assert _items_of(CODEX, written)[len(transcript.items[:transcript.resumed_from]):] == record.body["input"][context:]
    assert PROBLEMS["openai-responses"](record.body["input"]) == []


def test_the_report_json_and_s3_outcome_count_the_items_the_agent_compacted_itself(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], s3: Any, s3_module: ModuleType, s3_context: Any) -> None:
    """The items before a session's last ``compact_boundary`` (Claude Code) or ``compacted`` line (Codex) are left out
    of the request and written back as they are; nothing said so: the report, ``--json`` and the S3 job's outcome
    counted only the items sent. Each now says how many were left out (9 Claude Code items, 15 Codex items)."""
    from tests.s3.conftest import put_and_event

    claude = "\n".join(json.dumps(r) for r in _claude_code_with_a_boundary()) + "\n"
    for name, text, left_out, where in (("claude.jsonl", claude, 9, "compact_boundary of a Claude Code session"),
                                        ("codex.jsonl", _codex_with_a_compacted_line(), 15,
                                         "compacted line of a Codex rollout")):
        source = tmp_path / name
        source.write_text(text, encoding="utf-8")
        assert main(["compact", str(source), "--mode", "seal", "--keep-recent", "1", "-o", str(tmp_path / "o")]) == 0
        assert f"already compacted: {left_out} items before the last {where} were left out" in capsys.readouterr().err
        assert main(["compact", str(source), "--mode", "seal", "--keep-recent", "1", "--json", "-q"]) == 0
        assert json.loads(capsys.readouterr().out)["already_compacted"] == left_out
        [result] = s3_module.handler(put_and_event(s3, f"incoming/{name}", text), s3_context)["results"]
        assert result["result"] == "compacted" and result["already_compacted"] == left_out, result
        capsys.readouterr()  # the Lambda's metrics

    main(["compact", str(SESSIONS[CODEX]), "--mode", "seal", "--json", "-q"])
    assert json.loads(capsys.readouterr().out)["already_compacted"] == 0  # a session without one: none left out
