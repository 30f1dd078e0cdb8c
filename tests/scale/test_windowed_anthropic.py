"""Windowed compaction of Anthropic Messages transcripts (docs/scale.md): a large ``anthropic-messages`` transcript is
compacted in windows by ``compactor compact``'s streamed path and by the S3 path's windowed job, where both read it
whole (the CLI) or refused it (the job, 413). The units, pins and the turn in progress the windows protect are what
one request of the format finds (``Dialect.stream_facts``), so what is written is a valid Anthropic transcript:
every ``tool_use`` still answered by its ``tool_result``, the pins and the tail as they were."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import pytest

from compactor.compaction.units import instruction_pins, tail_indexes, with_dialect_tail
from compactor.formats import get_dialect
from compactor.formats.base import blocks

from scale import transcripts

from .conftest import decision_policy
from .test_windowed_state_machine import aws, worker  # noqa: F401  (the moto state machine's fixtures)

ANTHROPIC = get_dialect("anthropic-messages")


@pytest.fixture(scope="module")
def large() -> list[dict[str, Any]]:
    """About 1.2 MB of the corpus's Claude Code session's messages, one repetition after another (several windows)."""
    return list(transcripts.anthropic_messages(1_200_000))


def problems(original: list[dict[str, Any]], output: list[dict[str, Any]], keep_recent: int) -> list[str]:
    """What is wrong with ``output`` as a compaction of ``original`` (``keep_recent`` explicit): not a valid
    Anthropic transcript, a ``tool_use`` without its ``tool_result`` after it or the other way round, a pin (a human
    turn, the first message) lost or moved out of order, the tail (the last ``keep_recent`` messages, with the last
    two units of the turn in progress) changed."""
    found = []
    try:
        ANTHROPIC.validate(output)
    except ValueError as exc:
        found.append(str(exc))
    if not output or output[0].get("role") != "user":
        found.append("the first message is not a user message")
    uses: set[str] = set()
    results: set[str] = set()
    for index, message in enumerate(output):
        for block in blocks(message.get("content")):
            if block.get("type") == "tool_use":
                uses.add(block["id"])
            if block.get("type") == "tool_result" and block["tool_use_id"] not in uses:
                found.append(f"message {index}: a tool_result before its tool_use {block['tool_use_id']}")
            if block.get("type") == "tool_result":
                results.add(block["tool_use_id"])
    answered = {b["tool_use_id"] for m in original for b in blocks(m.get("content")) if b.get("type") == "tool_result"}
    if unanswered := (uses & answered) - results:
        found.append(f"{len(unanswered)} tool_use(s) without their tool_result, such as {sorted(unanswered)[0]}")
    pins = instruction_pins(original, None, ANTHROPIC)
    position = 0
    for pin in pins:
        while position < len(output) and output[position] != original[pin]:
            position += 1
        if position == len(output):
            found.append(f"pinned message {pin} lost or out of order")
            break
        position += 1
    tail = with_dialect_tail(tail_indexes(len(original), keep_recent), original, ANTHROPIC.split_units(original),
                             ANTHROPIC)
    if output[-len(tail):] != original[tail.start:]:
        found.append(f"the tail from message {tail.start} changed")
    return found


# -- the facts a stream's scan keeps find what the dialect finds for the messages whole ---------------------------


def _random_transcript(rng: random.Random) -> list[dict[str, Any]]:
    """Anthropic messages of every shape the units depend on: calls answered later, several times, never or in
    another turn, ids reused, thinking-only messages, one response stored as several messages, tool references."""
    items: list[dict[str, Any]] = []
    opened: list[str] = []
    for _ in range(rng.randint(0, 30)):
        draw = rng.random()
        if draw < 0.2:
            items.append({"role": "user", "content": rng.choice(["go on", [{"type": "text", "text": "and"}]])})
        elif draw < 0.45:
            content: list[dict[str, Any]] = []
            if rng.random() < 0.3:
                content.append({"type": "thinking", "thinking": "t", "signature": "s"})
            for _ in range(rng.randint(0, 2)):
                opened.append(f"toolu_{rng.randint(0, 8)}")
                content.append({"type": "tool_use", "id": opened[-1], "name": "bash", "input": {}})
            if rng.random() < 0.5 or not content:
                content.append({"type": "text", "text": "ok"})
            message = {"role": "assistant", "content": content}
            if rng.random() < 0.4:
                message["id"] = rng.choice(["msg_1", "msg_2"])
            items.append(message)
        elif draw < 0.55:
            items.append({"role": "assistant", "content": [{"type": "thinking", "thinking": "z", "signature": "s"}],
                          **({"id": "msg_1"} if rng.random() < 0.5 else {})})
        else:
            content = []
            for _ in range(rng.randint(1, 2)):
                call = rng.choice(opened) if opened and rng.random() < 0.8 else f"toolu_{rng.randint(0, 8)}"
                loads = rng.random() < 0.05
                content.append({"type": "tool_result", "tool_use_id": call,
                                "content": [{"type": "tool_reference", "tool_name": "Task"}] if loads else "out"})
            if rng.random() < 0.1:
                content.append({"type": "text", "text": "also"})
            items.append({"role": "user", "content": content})
    return items


def _facts_answers(items: list[dict[str, Any]], pins: list[int] | None) -> tuple[Any, ...]:
    facts = ANTHROPIC.stream_facts()
    for item in items:
        facts.add(item)
    units = facts.units()
    return units, sorted(facts.pins(None if pins is None else set(pins), units)), facts.tail_start(units)


def _dialect_answers(items: list[dict[str, Any]], pins: list[int] | None) -> tuple[Any, ...]:
    units = ANTHROPIC.split_units(items)
    return units, instruction_pins(items, pins, ANTHROPIC), ANTHROPIC.protected_tail_start(items, units)


def test_the_stream_facts_find_the_units_pins_and_turn_the_dialect_finds(large):
    rng = random.Random(8)
    cases = [(large, None), (large, [1, 7, 300])]
    cases += [(items, rng.choice([None, [0], [len(items) // 2]]) if items else None)
              for items in (_random_transcript(rng) for _ in range(3000))]
    for items, pins in cases:
        assert _facts_answers(items, pins) == _dialect_answers(items, pins), items


# -- compactor compact: the streamed path --------------------------------------------------------------------------


def _compact(main: Any, path: Any, out: Any, *extra: str) -> dict[str, Any]:
    assert main(["compact", str(path), "-o", str(out), "--json", "-q", "--mode", "decision", "--keep-recent", "6",
                 *extra]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("shape", ["body", "array", "jsonl"])
def test_the_cli_streams_a_large_anthropic_transcript_in_windows(tmp_path, monkeypatch, large, shape):
    """Over the streaming threshold, an Anthropic transcript (named by its ``format``, or not: a plain first user
    message reads as chat, its later messages show it) was read whole; it is streamed now, never read whole, and
    compacted in windows as the same file is in memory: a valid transcript, every call with its result, its pins and
    tail as they were."""
    from compactor_cli import compact_cmd
    from compactor_cli.main import main

    path = tmp_path / f"big.{shape}"
    text = {"body": lambda: json.dumps({"format": "anthropic-messages", "messages": large}),
            "array": lambda: json.dumps(large),
            "jsonl": lambda: "\n".join(json.dumps(m) for m in large) + "\n"}[shape]()
    path.write_text(text)
    in_memory = _compact(main, path, tmp_path / "mem.json")  # over one request's limits: in windows, in memory
    assert in_memory["compaction"]["windows"]["passes"][0]["windows"] > 1
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 1000)

    def whole(*_: Any, **__: Any) -> None:
        raise AssertionError("the streamed path read the file whole")

    monkeypatch.setattr(compact_cmd, "read_transcript", whole)
    streamed = _compact(main, path, tmp_path / "stream.json")
    assert streamed["messages"] == in_memory["messages"] and streamed["compaction"] == in_memory["compaction"]
    assert streamed["compacted"] is True and streamed["compaction"]["output_bytes"] < len(text) // 2
    assert problems(large, streamed["messages"], keep_recent=6) == []


def test_a_small_anthropic_file_is_compacted_as_before(tmp_path):
    """Within one request's limits an Anthropic transcript is compacted by one request, as before windows read the
    format: the same body as ``/v1/compact`` answers, its manifest and no windows."""
    from compactor.container import run_sync
    from compactor.models import CompactRequest
    from compactor.service import compact_call, request_deadline
    from compactor_cli.main import main

    small = list(transcripts.anthropic_messages(60_000))
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"format": "anthropic-messages", "messages": small}))
    body = _compact(main, path, tmp_path / "out.json")
    assert "windows" not in body["compaction"] and body["compaction"]["fragments"]
    request = CompactRequest.model_validate({"format": "anthropic-messages", "messages": small, "mode": "decision",
                                             "keep_recent": 6})
    answer = run_sync(compact_call(request, deadline=request_deadline())).body
    for key in ("x_router",):
        body.pop(key, None)
        answer.pop(key, None)
    assert body == json.loads(json.dumps(answer))


def test_a_claude_code_session_over_one_requests_limits_is_not_windowed(tmp_path, monkeypatch):
    """A session file is written back line by line from one request's manifest, which windows do not give: it stays
    one request (its candidates past the limits kept), and the session comes back whole."""
    from compactor import service
    from compactor.compaction.decision import exceeds_one_request
    from compactor.models import CompactRequest
    from compactor.transcripts import read_transcript
    from compactor_cli.main import main

    lines = transcripts.ANTHROPIC_SOURCE.read_text(encoding="utf-8").splitlines(keepends=True)
    session = "".join(lines * 6)  # the same records six times over: over one request's limits
    items = read_transcript(session).items
    assert exceeds_one_request(CompactRequest.model_validate({"format": "anthropic-messages", "messages": items,
                                                              "mode": "decision"}))

    async def windowed(*_: Any, **__: Any) -> None:
        raise AssertionError("a session file was compacted in windows")

    monkeypatch.setattr(service, "compact_large", windowed)
    path = tmp_path / "session.jsonl"
    path.write_text(session)
    assert main(["compact", str(path), "-o", str(tmp_path / "out.jsonl"), "-q"]) == 0
    assert all(json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines())


# -- the S3 path's windowed job ------------------------------------------------------------------------------------


def _inline_bytes(data: bytes) -> bytes:
    from compactor.compaction.windowed import compact_stream, inline_runner
    from compactor.compaction.windows import Settings
    from compactor.container import run_sync
    from fakes.routers import frozen_router

    out = io.StringIO()
    router = frozen_router()
    settings = Settings(decision_policy_ir=decision_policy(), format="anthropic-messages")
    run_sync(compact_stream(lambda: io.BytesIO(data), settings, router=router,
                            run_window=inline_runner(router, window_budget_ms=60_000), out=out, messages_only=False))
    return out.getvalue().encode()


@pytest.mark.parametrize("named", [True, False])
def test_a_windowed_job_compacts_a_large_anthropic_transcript(aws, large, named):
    """A windowed job refused an Anthropic transcript (413: windows read chat only); it compacts it in windows now,
    byte for byte as the inline run does, whether the object names its format or its messages show it."""
    from .test_windowed_state_machine import BUCKET, execute

    data = json.dumps({"format": "anthropic-messages", "mode": "decision", "messages": large} if named else large).encode()
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/claude.json", Body=data)
    described = execute(aws, "incoming/claude.json")
    assert described["status"] == "SUCCEEDED", described
    stored = aws["s3"].get_object(Bucket=BUCKET, Key="compacted/claude.json")["Body"].read()
    assert stored == _inline_bytes(data)
    body = json.loads(stored)
    assert body["compaction"]["windows"]["passes"][0]["windows"] > 1 and body["compacted"] is True
    tasks = [o["Key"] for o in aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="work/")["Contents"]
             if o["Key"].endswith("/p1/w0.json")]
    task = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key=tasks[0])["Body"].read())
    assert task["format"] == "anthropic-messages" and task["units"][0] == 0
    assert problems(large, body["messages"], keep_recent=1) == []  # the default tail: at least the last message


def test_the_s3_paths_inline_job_compacts_an_anthropic_transcript_over_one_request_in_windows(large):
    """An object under ``S3InlineMaxBytes`` over one request's limits is compacted in windows by the inline job; an
    Anthropic one ran as one request, its candidates past the limits kept."""
    import asyncio

    from compactor.budget import Deadline
    from compactor.object_jobs import Defaults, Source, run_job
    from fakes.routers import frozen_router
    from s3.test_object_jobs import MemoryStore

    store = MemoryStore()
    store.add("incoming/claude.json", json.dumps({"format": "anthropic-messages", "mode": "decision",
                                                  "keep_recent": 6, "messages": large}).encode())
    outcome = asyncio.run(run_job(Source("b", "incoming/claude.json", etag="etag-1"), store=store, defaults=Defaults(),
                                  deadline=Deadline.after_ms(60_000), router=frozen_router(),
                                  windows_until=Deadline.after_ms(600_000)))
    assert outcome.result == "compacted", outcome
    body = json.loads(store.objects[("b", outcome.key)][0])
    assert body["compaction"]["windows"]["passes"][0]["windows"] > 1
    assert problems(large, body["messages"], keep_recent=6) == []


def test_the_s3_paths_inline_job_writes_a_large_claude_code_session_back_as_the_session(monkeypatch):
    """A Claude Code session over one request's limits stays one request on the S3 path too: it is written back as the
    session, from the manifest windows do not give."""
    import asyncio

    from compactor import service
    from compactor.budget import Deadline
    from compactor.object_jobs import Defaults, Source, run_job
    from fakes.routers import frozen_router
    from s3.test_object_jobs import MemoryStore

    async def windowed(*_: Any, **__: Any) -> None:
        raise AssertionError("a session file was compacted in windows")

    class SessionStore(MemoryStore):
        def put(self, bucket: str, key: str, body: bytes, *, content_type: str, metadata: Any) -> None:
            self.types = [*getattr(self, "types", []), content_type]  # a session file is JSONL
            super().put(bucket, key, body, content_type="application/json", metadata=metadata)

    monkeypatch.setattr(service, "compact_large", windowed)
    lines = transcripts.ANTHROPIC_SOURCE.read_text(encoding="utf-8").splitlines(keepends=True)
    store = SessionStore()
    store.add("incoming/session.jsonl", "".join(lines * 6).encode())
    outcome = asyncio.run(run_job(Source("b", "incoming/session.jsonl", etag="etag-1"), store=store,
                                  defaults=Defaults(), deadline=Deadline.after_ms(60_000), router=frozen_router(),
                                  windows_until=Deadline.after_ms(600_000)))
    assert outcome.result == "compacted", outcome
    written = store.objects[("b", outcome.key)][0].decode()
    assert store.types == ["application/x-ndjson"] and all(json.loads(line) for line in written.splitlines())


# -- reading a stream as anthropic-messages ------------------------------------------------------------------------


def test_a_stream_reads_anthropic_messages_in_that_format():
    """Windows read ``anthropic-messages`` (docs/scale.md): its ``format`` is among the fields (it was ``NotChat``), a
    stream read as chat names the format when it meets an Anthropic message (so it is read again as that), and read
    as that, a Responses item is ``NotChat`` (read whole) and a role the format has not is refused as the API does."""
    from compactor.transcript_stream import fields_from, messages_from
    from compactor.transcripts import NotChat, TranscriptError

    def opener(value: Any) -> Any:
        return lambda: io.BytesIO(json.dumps(value).encode())

    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
    messages = [{"role": "user", "content": "go"}, use, result]
    body = {"format": "anthropic-messages", "system": "be brief", "messages": messages}
    assert fields_from(opener(body)) == {"format": "anthropic-messages"}  # the system prompt is no request field
    assert list(messages_from(opener(body), "anthropic-messages")) == messages
    with pytest.raises(NotChat, match="message 1 is an anthropic-messages item") as read_as_chat:
        list(messages_from(opener(messages)))
    assert read_as_chat.value.format == "anthropic-messages"
    call = {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
    with pytest.raises(NotChat, match="message 1 is an openai-responses item") as responses:
        list(messages_from(opener([messages[0], call]), "anthropic-messages"))
    assert responses.value.format is None
    with pytest.raises(TranscriptError, match="message 1: role must be 'user' or 'assistant'"):
        list(messages_from(opener([messages[0], {"role": "system", "content": "x"}]), "anthropic-messages"))
