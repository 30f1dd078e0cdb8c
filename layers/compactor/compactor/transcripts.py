"""Reading transcript files (``compactor compact``, the S3 path) in their own format, and writing the
compacted items back in that format (docs/formats.md, "Session files").

Accepted: a JSON array of items, a ``/v1/compact`` request body (or any object with ``messages``, or
``input`` for Responses), JSONL of chat messages, and two agents' session files: Claude Code sessions
(``anthropic-messages``: the ``message`` of each ``user`` / ``assistant`` record) and Codex rollouts
(``openai-responses``: the ``payload`` of each ``response_item`` line). A session file's other lines
are bookkeeping the model never sees; they are written back unchanged, in place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from compactor.formats import FORMAT_NAMES
from compactor.formats.base import ANTHROPIC_BLOCKS, foreign_item, foreign_refusal, langchain_message
from compactor.jsonutil import (
    BYTE_ORDER_MARK,
    SECOND_BYTE_ORDER_MARK,
    JSONLimitError,
    bounded_loads,
    dense_dumps,
)
from compactor.records import record

if TYPE_CHECKING:
    from compactor.call_record import CallRecord

REQUEST_FIELDS = ("mode", "keep_recent", "policy_ir", "max_tokens", "decision_policy_ir", "target_ratio",
                  "pinned_indices")
"""The ``/v1/compact`` fields a transcript file may carry next to its messages (and the S3 path's defaults)."""
FILE_FIELDS = (*REQUEST_FIELDS, "format", "restorable")
"""What a request body in a file may carry: those, plus its format and whether it is restorable."""
TRANSCRIPT_MODE = "decision"
"""The mode of a bare transcript (array or JSONL: no request fields to infer one from) unless told."""
CLAUDE_CODE, CODEX = "claude-code", "codex"
# Record fields a summary record of a Claude Code session copies from the first record it replaces.
_CLAUDE_CODE_ENVELOPE = ("isSidechain", "userType", "entrypoint", "cwd", "sessionId", "version", "gitBranch",
                         "slug", "timestamp")


class TranscriptError(ValueError):
    """The input is not a transcript this command understands (the message says why)."""


class NotJSON(TranscriptError):
    """The input is not one JSON document the API reads (its syntax, a limit of ``jsonutil.bounded_loads``: a key
    twice, too deep, a number too long or out of range; a JSONL file, which no request body is): the S3 path records
    it as the API answers such a body, a 422 whose ``detail`` is ``json_invalid`` (docs/behaviour.md). A streamed
    reading raises it (``compactor.transcript_stream``); an object read whole is judged by its text
    (``object_jobs``)."""


class NotChat(TranscriptError):
    """A transcript read as a stream (docs/scale.md) in one format is in another: ``format`` names it when the stream
    can be read again in that format (an ``anthropic-messages`` item met in a stream read as chat), else None (a
    session file, an ``openai-responses`` transcript: read whole). ``refusal``: for an item of a request's
    messages, the words ``Dialect.validate`` refuses the items with when the format they were read in is the one the
    request names (docs/formats.md "The declared format"), else None; the callable ``refusal`` says it when first
    asked (the streamed reading reads the items again for it, which a stream read again in another format never
    needs)."""

    def __init__(self, message: str, format: str | None = None, *,
                 refusal: Callable[[], str | None] | None = None) -> None:
        super().__init__(message)
        self.format = format
        self._refused = refusal

    @cached_property
    def refusal(self) -> str | None:
        return self._refused() if self._refused is not None else None


@record
class Transcript:
    """The items of a transcript in ``format``; ``session`` files also keep every line to write back."""

    format: str
    items: list[dict[str, Any]]
    fields: dict[str, Any] = field(default_factory=dict)
    session: str | None = None  # CLAUDE_CODE, CODEX or None
    lines: list[str] = field(default_factory=list)  # session files: every line, with its ending
    item_lines: list[int] = field(default_factory=list)  # session files: the line of each item
    request_body: bool = False  # the text was a request body (an object with its items), not a bare transcript
    conversation_starts: list[int] = field(default_factory=list)
    """Claude Code sessions: the user items that start a conversation Claude Code resumes (after a native
    compaction's ``compact_boundary``, its summary), always pinned (:meth:`pinning_starts`)."""
    resumed_from: int = 0
    """Session files: the first item the agent's harness resumes from. The items before it came before the
    harness's own last compaction (Claude Code's ``compact_boundary`` record, Codex's ``compacted`` line): the
    harness no longer sends them to its model, so they are written back as they are and never sent to ours
    (docs/formats.md, "Session files")."""
    resumed_context: list[dict[str, Any]] = field(default_factory=list)
    """Codex rollouts: what the model's context holds at the last ``compacted`` line (its ``replacement_history``),
    which is no item of the rollout. Decision mode reads it as pinned context before the items after that line."""
    sent_context: int = 0  # how many items of :attr:`resumed_context` the last :meth:`compact_body` sent

    @property
    def already_compacted(self) -> int | None:
        """Session files: how many items came before the harness's own last compaction (:attr:`resumed_from`), left
        out of the request and written back as they are; None for other transcripts. The CLI's report and ``--json``
        and the S3 path's outcome say it (docs/formats.md, "Session files")."""
        return self.resumed_from if self.session is not None else None

    @property
    def items_field(self) -> str:
        """The request field that holds the items in this format."""
        return "input" if self.format == "openai-responses" else "messages"

    def compact_body(self, defaults: Mapping[str, Any] | None = None, *, mode: str | None = None) -> dict[str, Any]:
        """The ``/v1/compact`` body for these items: ``defaults`` under the transcript's own fields, ``mode``
        over both. Without a mode, a request body is inferred exactly as the API infers it; a bare
        transcript runs in :data:`TRANSCRIPT_MODE` (docs/behaviour.md, "Compaction modes"). A session file
        sends the items its harness resumes from (:attr:`resumed_from`), after the context it resumes with
        in decision mode (:attr:`resumed_context`)."""
        body = {**(defaults or {}), **self.fields, "format": self.format}
        if mode is not None:
            body["mode"] = mode
        elif body.get("mode") is None and not self.request_body:
            body["mode"] = TRANSCRIPT_MODE
        context = self.resumed_context if body.get("mode") == "decision" else []
        self.sent_context = len(context)
        body[self.items_field] = [*context, *self.items[self.resumed_from:]]
        return self.pinning_starts(body)

    def pinning_starts(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with :attr:`conversation_starts` among its explicit ``pinned_indices``: a summary is an
        assistant message, and a conversation the Messages API is sent must start with a user message. (The
        default pins hold them, the human's turns; explicit pins, such as ``--pin-task``'s, did not: a session
        holding a native compaction came back resuming a conversation that started with an assistant summary.)
        The resumed context sent (:attr:`sent_context`) is pinned too, with the default pins when there are no
        explicit ones: it is in no line a compaction could rewrite."""
        pins = body.get("pinned_indices")
        shift = self.sent_context - self.resumed_from
        starts = {start + shift for start in self.conversation_starts if start >= self.resumed_from}
        starts |= set(range(self.sent_context))
        if starts and pins is None and self.sent_context:
            from compactor.formats import get_dialect

            pins = sorted(get_dialect(self.format).default_pins(body[self.items_field]))
        if starts and isinstance(pins, list) and all(type(pin) is int for pin in pins):
            body["pinned_indices"] = sorted({*pins, *starts})  # other pins: the request's 422
        return body

    def write_back(self, record: CallRecord) -> str | None:
        """A session file holding the compacted items of ``record`` (a compaction of these items),
        every other line in place; ``None`` for transcripts that are not session files.

        A Claude Code record chains to its parent by ``parentUuid``: a new record takes the ``uuid`` of
        the last record it replaces and the ``parentUuid`` of the first, and a kept line whose parent
        was replaced points to what replaced it (only that field of the line changes)."""
        if self.session is None:
            return None
        if not record.body.get("compacted"):
            return "".join(self.lines)
        output = record.body[self.items_field]
        sent = [*self.resumed_context[:self.sent_context], *self.items[self.resumed_from:]]
        shift = self.resumed_from - self.sent_context  # a sent item's index in ``items``
        replaced = [(start + shift, end + shift, new) for start, end, new
                    in _replacements(sent, output, record.report or {}) if start >= self.sent_context]
        dropped = {i for start, end, _ in replaced for i in range(start, end)}
        by_first = {start: (end, new) for start, end, new in replaced}
        relink = self._relinks(replaced) if self.session == CLAUDE_CODE else {}
        line_item = {line: index for index, line in enumerate(self.item_lines)}
        ending = "\r\n" if self.lines and self.lines[0].endswith("\r\n") else "\n"
        out: list[str] = []
        for number, line in enumerate(self.lines):
            index = line_item.get(number)
            if index in by_first:
                end, new = by_first[index]
                out += [self._record(item, index, end - 1, relink) + ending for item in new]
            if index is None or index not in dropped:
                out.append(_relinked(line, relink) if relink else line)
        if out and not self.lines[-1].endswith("\n") and out[-1].endswith("\n"):
            out[-1] = out[-1][:-len(ending)]
        return "".join(out)

    def _relinks(self, replaced: list[tuple[int, int, list[Any]]]) -> dict[str, str | None]:
        """Replaced record uuid -> the uuid standing in for it (None: the chain's start)."""
        records = [json.loads(self.lines[n]) for n in self.item_lines]
        relink: dict[str, str | None] = {}
        for start, end, new in replaced:
            stand_in = records[end - 1].get("uuid") if new else records[start].get("parentUuid")
            for line_record in records[start:end]:
                if isinstance(line_record.get("uuid"), str) and line_record["uuid"] != stand_in:
                    relink[line_record["uuid"]] = stand_in
        for old, new_uuid in list(relink.items()):  # runs next to each other: follow to the end
            seen = {old}
            while new_uuid in relink and new_uuid not in seen:
                seen.add(new_uuid)
                new_uuid = relink[new_uuid]
            relink[old] = new_uuid
        return relink

    def _record(self, item: dict[str, Any], first: int, last: int, relink: dict[str, str | None]) -> str:
        head = json.loads(self.lines[self.item_lines[first]])
        if self.session == CODEX:
            return dense_dumps({"timestamp": head.get("timestamp"), "type": "response_item", "payload": item})
        tail = json.loads(self.lines[self.item_lines[last]])
        parent = head.get("parentUuid")
        line_record = {"parentUuid": relink.get(parent, parent) if isinstance(parent, str) else parent}
        line_record |= {key: head[key] for key in _CLAUDE_CODE_ENVELOPE if key in head}
        line_record |= {"type": item.get("role"), "message": item, "uuid": tail.get("uuid")}
        return dense_dumps(line_record)


def _relinked(line: str, relink: dict[str, str | None]) -> str:
    """The line with its ``parentUuid`` pointed at what replaced its parent (the field alone rewritten)."""
    if '"parentUuid":"' not in line:
        return line
    parent = json.loads(line).get("parentUuid")
    if parent not in relink:
        return line
    return line.replace(f'"parentUuid":{json.dumps(parent)}', f'"parentUuid":{json.dumps(relink[parent])}', 1)


def _replacements(items: list[Any], output: list[Any], report: Mapping[str, Any]
                  ) -> list[tuple[int, int, list[Any]]]:
    """``(start, end, new_items)`` of every run of input items the output replaced (``report``: the
    mode's report, ``CallRecord.report``)."""
    if "masked" in report:  # mask mode: items changed in place
        return [(index, index + 1, [output[index]]) for index in sorted({entry["index"] for entry in report["masked"]})]
    fragments = report.get("fragments")
    if fragments is None:
        return _sealed_runs(items, output)
    runs, position = [], 0
    for entry in fragments:
        size = entry["end"] - entry["start"]
        if entry["action"] == "keep":
            position += size
            continue
        emitted = 1 if entry["action"] == "summarize" or entry.get("handle") else 0
        runs.append((entry["start"], entry["end"], output[position:position + emitted]))
        position += emitted
    return runs


def _sealed_runs(items: list[Any], output: list[Any]) -> list[tuple[int, int, list[Any]]]:
    """Seal mode's runs: its output is a kept head, the sealed summary, the always-pinned items of the sealed
    middle (held, in order: docs/formats.md) and a kept tail. The summary replaces the middle's first run of
    sealed items, in its place; every later run between the held items is replaced by nothing, and the held
    items keep their lines. (Reading the output as head, summary, tail kept the last items of the input in
    place of the held ones: a Codex rollout with developer messages mid-session lost them, and kept outputs
    whose calls were sealed.)"""
    head = 0
    while head < min(len(items), len(output)) and items[head] == output[head]:
        head += 1
    tail = 0  # the kept tail: the longest common suffix after the summary
    while (tail < len(output) - head - 1 and tail < len(items) - head
           and items[len(items) - 1 - tail] == output[len(output) - 1 - tail]):
        tail += 1
    held = iter(output[head + 1:len(output) - tail])
    wanted = next(held, None)
    runs: list[tuple[int, int, list[Any]]] = []
    start = None
    for index in range(head, len(items) - tail):
        if wanted is not None and items[index] == wanted:  # a held item keeps its line
            if start is not None:
                runs.append((start, index, [] if runs else output[head:head + 1]))
                start = None
            wanted = next(held, None)
        elif start is None:
            start = index
    if start is not None:
        runs.append((start, len(items) - tail, [] if runs else output[head:head + 1]))
    return runs


def read_transcript(text: str, format: str | None = None) -> Transcript:
    """The transcript in ``text``; ``format`` (a ``format`` name) overrides what the content suggests. ``text`` is
    as its reader decoded it, a leading byte order mark skipped (an S3 object, a file): one left is a second."""
    if format is not None and format not in FORMAT_NAMES:
        raise TranscriptError(f"unknown format {format!r}; one of {', '.join(FORMAT_NAMES)}")
    if text.startswith(BYTE_ORDER_MARK):  # the JSON reading would skip it as a first one
        raise TranscriptError(SECOND_BYTE_ORDER_MARK)
    if not text.strip():
        raise TranscriptError("the input is empty")
    try:  # the text as it is: JSON's whitespace only around the value, as the API reads a body (not str.strip's)
        data = bounded_loads(text)
    except JSONLimitError as exc:
        if not exc.syntax:
            raise TranscriptError(exc.msg) from None
        transcript = _read_jsonl(text, exc)
        if format is not None and transcript.session is not None and format != transcript.format:
            raise TranscriptError(f"this {transcript.session} session is {transcript.format}, not {format}")
        if format is not None and transcript.session is None:
            transcript.format = format
        return transcript
    if isinstance(data, list):
        items = _check_items(data)
        return Transcript(format or _guess_format(items), items)
    if isinstance(data, dict) and isinstance(data.get("messages") if "messages" in data else data.get("input"), list):
        key = "messages" if "messages" in data else "input"
        _items_where_the_api_reads_them(data, key)
        items = _check_items(data[key])
        # Agent trajectory files carry run metadata next to the items: keep only request fields.
        fields = {k: v for k, v in data.items() if k in FILE_FIELDS}
        chosen = format or fields.pop("format", None) or ("openai-responses" if key == "input" else _guess_format(items))
        fields.pop("format", None)
        return Transcript(chosen, items, fields, request_body=True)
    raise TranscriptError("expected a JSON array of messages, an object with a 'messages' array, or JSONL")


def _items_where_the_api_reads_them(body: dict[str, Any], key: str) -> None:
    """A :class:`TranscriptError` when ``body`` names its ``format`` and holds its items under another field than
    that format's, which the API refuses (``CompactRequest``): an ``openai-responses`` body with ``messages``
    (a file's reading compacted them as its items and dropped its ``input`` without a word), another format's
    without ``messages`` (read from ``input``). A body that names no format is read by its field, as before."""
    named = body.get("format")
    if named == "openai-responses" and key == "messages":
        raise TranscriptError("openai-responses items go in 'input', not 'messages'")
    if named is not None and named != "openai-responses" and key == "input":
        raise TranscriptError(f"{str(named)[:64]} items go in 'messages', not 'input'")


def _guess_format(items: list[dict[str, Any]]) -> str:
    """Responses items carry a ``type`` and no ``role``; Anthropic messages carry typed content blocks
    (``tool_use``, ``tool_result``, ``thinking``) in list contents; anything else reads as chat."""
    formats = {item_format(item) for item in items}
    return next((name for name in ("openai-responses", "anthropic-messages") if name in formats), "openai-chat")


def item_format(item: dict[str, Any]) -> str | None:
    """The format ``item`` reads as when it is not a chat message: ``openai-responses`` (a ``type``, no
    ``role``, or an item reference without its optional ``type``: an ``id`` alone) or ``anthropic-messages`` (typed
    content blocks); None for a chat message, and for another program's record (a Claude Code record, a LangChain
    message: ``formats.base.foreign_item``), which no format holds: read as chat, it is refused naming what it is
    and under ``messages``, as the API names it (it was guessed a Responses item and named ``input[0]``)."""
    if "role" not in item and foreign_item(item) is not None:
        return None
    if "role" not in item and (isinstance(item.get("type"), str) or _bare_reference(item)):
        return "openai-responses"
    content = item.get("content")
    if type(content) is list and any(type(b) is dict and b.get("type") in ANTHROPIC_BLOCKS for b in content):
        return "anthropic-messages"
    return None


def _bare_reference(item: dict[str, Any]) -> bool:
    """An OpenAI Responses item reference without its optional ``type`` (docs/formats.md, "Item references")."""
    return "role" not in item and item.get("type") is None and isinstance(item.get("id"), str)


def _read_jsonl(text: str, not_json: JSONLimitError | None = None) -> Transcript:
    """The JSONL transcript in ``text``, which ``not_json`` says is not one JSON document. When its first line opens
    an array or an object and is no JSON, and the document's reading went past it, the text is no JSONL but that
    document (as the streamed reading takes it), refused where its reading stopped (its line and column). It was
    refused as "line 1 is not JSON", wherever the document broke: a JSON array cut short at its 5,001st line, or
    missing a comma there, read "line 1 is not JSON: Expecting value"."""
    lines = _lines(text)
    records: list[tuple[int, Any]] = []
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            # Without its line feed, as the streamed reading reads a line: a line cut inside a string is an
            # "Unterminated string" on both, where this one read "Invalid control character" (the line feed)
            records.append((number, bounded_loads(line[:-1] if line.endswith("\n") else line)))
        except JSONLimitError as exc:
            if (not records and exc.syntax and not_json is not None and not_json.lineno > 1
                    and line.lstrip(" \t\r\n")[:1] in ("[", "{")):
                raise TranscriptError(f"not JSON: {not_json.placed()}") from None
            raise TranscriptError(f"line {number + 1} is not JSON: {exc.placed(line=False)}") from None
    if any(isinstance(r, dict) and r.get("type") == "response_item" for _, r in records):
        picked = [(n, r["payload"]) for n, r in records
                  if isinstance(r, dict) and r.get("type") == "response_item" and isinstance(r.get("payload"), dict)]
        transcript = _session(CODEX, "openai-responses", lines, picked)
        compacted = [(n, r) for n, r in records if isinstance(r, dict) and r.get("type") == "compacted"]
        if compacted:
            number, line_record = compacted[-1]
            transcript.resumed_from = sum(1 for n, _ in picked if n < number)
            transcript.resumed_context = _codex_context(line_record.get("payload"))
        return transcript
    if any(isinstance(r, dict) and r.get("type") in ("user", "assistant") and isinstance(r.get("message"), dict)
           for _, r in records):
        # A sub-agent's records (``isSidechain``) are another conversation, which Claude Code interleaves with the
        # session's own: kept in place like its bookkeeping (docs/formats.md, "Session files").
        picked = [(n, r["message"]) for n, r in records
                  if isinstance(r, dict) and r.get("type") in ("user", "assistant") and isinstance(r.get("message"), dict)
                  and r.get("isSidechain") is not True]
        transcript = _session(CLAUDE_CODE, "anthropic-messages", lines, picked)
        transcript.conversation_starts = _conversation_starts(records, picked)
        boundaries = [n for n, r in records if isinstance(r, dict) and r.get("type") == "system"
                      and r.get("subtype") == "compact_boundary" and r.get("isSidechain") is not True]
        if boundaries:
            transcript.resumed_from = sum(1 for n, _ in picked if n < boundaries[-1])
        return transcript
    # Any other JSONL is the array of its lines (docs/formats.md): Responses items, which carry a type and no
    # role, read as Responses, as in an array.
    for number, record in records:
        if not isinstance(record, dict) or ("role" not in record and "type" not in record and not _bare_reference(record)):
            raise TranscriptError(f"line {number + 1} is not a message (an object with a role or a type)")
    items = [record for _, record in records]
    return Transcript(_guess_format(items), items)


def _codex_context(payload: Any) -> list[dict[str, Any]]:
    """What a Codex rollout's ``compacted`` line resumes the model's context with: its ``replacement_history``; for
    a Codex that wrote only its summary (``message``), that summary as a user message, as Codex rebuilds it."""
    if not isinstance(payload, dict):
        return []
    history = payload.get("replacement_history")
    if isinstance(history, list):
        return [item for item in history if isinstance(item, dict)]
    summary = payload.get("message")
    if isinstance(summary, str) and summary.strip():
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": summary}]}]
    return []


def _conversation_starts(records: list[tuple[int, Any]], picked: list[tuple[int, dict[str, Any]]]) -> list[int]:
    """The user items of a Claude Code session with no item before them in their ``parentUuid`` chain: the chain
    Claude Code resumes starts there (a native compaction's summary, whose parent is the ``compact_boundary``
    record, whose ``parentUuid`` is null). The first item is left out: the format pins it already."""
    by_uuid = {r["uuid"]: r for _, r in records if isinstance(r, dict) and isinstance(r.get("uuid"), str)}
    line_record = dict(records)
    item_uuids = {line_record[number].get("uuid") for number, _ in picked}
    starts = []
    for index, (number, message) in enumerate(picked[1:], start=1):
        parent, seen = line_record[number].get("parentUuid"), set()
        while isinstance(parent, str) and parent in by_uuid and parent not in item_uuids and parent not in seen:
            seen.add(parent)
            parent = by_uuid[parent].get("parentUuid")
        if parent is None and message.get("role") == "user":
            starts.append(index)
    return starts


def _lines(text: str) -> list[str]:
    """``text``'s lines with their endings, split at line feeds only: JSON strings may hold U+2028, U+2029 and
    U+0085 unescaped, where ``str.splitlines`` would split too."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _session(kind: str, format: str, lines: list[str], picked: list[tuple[int, dict[str, Any]]]) -> Transcript:
    return Transcript(format, [item for _, item in picked], session=kind, lines=lines,
                      item_lines=[number for number, _ in picked])


def parse_transcript(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(messages, request_fields)`` as OpenAI chat messages (a Claude Code session is converted), for
    the tools that read chat only (``compactor eval``); compaction itself uses :func:`read_transcript`."""
    transcript = read_transcript(text)
    if transcript.session == CLAUDE_CODE:
        return _check_items([m for item in transcript.items for m in _anthropic_to_openai(item)]), {}
    if transcript.session == CODEX:
        raise TranscriptError("a Codex rollout is openai-responses; it has no chat messages")
    fields = {k: v for k, v in transcript.fields.items() if k not in ("format", "restorable")}
    return transcript.items, fields


def _jsonl_record_messages(record: Any, number: int) -> list[dict[str, Any]]:
    """A chat message of a JSONL file read as a stream (line ``number``; docs/scale.md). A Claude Code session's
    ``user`` / ``assistant`` record (``anthropic-messages``), a Codex rollout's ``response_item`` and a Responses
    item are :class:`NotChat`; other typed records are a session's bookkeeping. (A Claude Code record was read as
    the chat it converts to: the result was a chat transcript, not the session, without its thinking, images,
    server tools' blocks or tool references, and with the calls of one response stored as several records parted
    from their results.)"""
    if isinstance(record, dict) and "role" in record:
        return [record]
    if isinstance(record, dict) and record.get("type") in ("user", "assistant") and isinstance(
            record.get("message"), dict):
        raise NotChat(f"line {number} is a Claude Code session's {record['type']} record (anthropic-messages)")
    if isinstance(record, dict) and record.get("type") == "response_item":
        raise NotChat(f"line {number} is a Codex rollout's response_item (openai-responses)")
    if isinstance(record, dict) and _responses_item(record):
        raise NotChat(f"line {number} is an openai-responses item ({str(record.get('type') or 'item_reference')[:64]})")
    if isinstance(record, dict) and langchain_message(record):  # no bookkeeping: a message of no format
        raise TranscriptError(foreign_refusal(record, f"line {number}") or "")
    if isinstance(record, dict) and "type" in record:
        return []  # session bookkeeping (queue operations, summaries)
    raise TranscriptError(f"line {number} is not a chat message")


def _responses_item(record: dict[str, Any]) -> bool:
    """A typed record that is a Responses item, not a Claude Code session's bookkeeping: it names a call, or its
    type is one of the items' (a call, its output, reasoning, a reference, an earlier compaction, MCP items)."""
    kind = record.get("type")
    if _bare_reference(record):
        return True
    return isinstance(kind, str) and ("call_id" in record or kind.endswith(("_call", "_call_output")) or kind in (
        "message", "reasoning", "item_reference", "compaction", "compaction_summary", "mcp_list_tools",
        "mcp_approval_request", "mcp_approval_response"))


def _anthropic_to_openai(message: dict[str, Any]) -> list[dict[str, Any]]:
    role, content = message.get("role"), message.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": content}]
    texts, calls, results = [], [], []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "tool_use":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input"))}})
        elif kind == "tool_result":
            body = block.get("content")
            if isinstance(body, list):
                body = "\n".join(b.get("text", "") for b in body if isinstance(b, dict))
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": body})
    out: list[dict[str, Any]] = results  # first: they answer the calls of the message before
    if texts or calls:
        msg: dict[str, Any] = {"role": role, "content": "\n".join(texts) if texts else None}
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def _check_items(items: list[Any]) -> list[dict[str, Any]]:
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise TranscriptError(f"message {index} is not a JSON object")
    return items
