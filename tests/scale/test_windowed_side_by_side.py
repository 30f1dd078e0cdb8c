"""A windowed job's ``plan`` writes its window tasks, and ``assemble`` reads the windows back, several at once
(``large_jobs.WINDOWS_AT_ONCE``): each is an S3 round trip, and one window after another a pass of 1,000
windows waited for thousands of them (docs/performance.md, "Windowed jobs"). The result is the same bytes as
one window at a time."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from moto import mock_aws

from compactor import large_jobs
from compactor.budget import Deadline
from compactor.object_jobs import Defaults, Source, build_request
from compactor_aws.s3_store import S3Store
from fakes.routers import frozen_router

REGION, BUCKET = "us-east-1", "compactor-transcripts-test"


class GaugedStore(S3Store):
    """S3Store whose requests on the job's window files take a little longer and are counted in flight. The first
    such request of each ``(step, kind)`` in ``gate`` also waits (up to 10 s) until a second one is in flight: a
    step that makes them side by side starts the next at once, whatever the machine's load, and one that makes
    them in turn never does."""

    def __init__(self, client: Any, *, gate: frozenset[tuple[str, str]] = frozenset()) -> None:
        super().__init__(client)
        self.lock = threading.Condition()
        self.in_flight = 0
        self.most: dict[str, int] = {}
        self.step = ""
        self.gate = gate
        self.gated: set[tuple[str, str]] = set()

    @contextmanager
    def _gauged(self, kind: str, key: str) -> Iterator[None]:
        """Counts a request on a window's file (``/w`` in its key) as ``(step, kind)``: an ``assemble`` plans the
        next pass, whose writes are not its reads."""
        window = re.search(r"/w\d+\.", key) is not None  # a window's task or result, not the list of windows
        if window:
            with self.lock:
                self.in_flight += 1
                gauge = (self.step, kind)
                self.most[gauge] = max(self.most.get(gauge, 0), self.in_flight)
                self.lock.notify_all()
                if gauge in self.gate and gauge not in self.gated:
                    self.gated.add(gauge)
                    self.lock.wait_for(lambda: self.in_flight > 1, timeout=10)
            time.sleep(0.01)
        try:
            yield
        finally:
            if window:
                with self.lock:
                    self.in_flight -= 1
                    self.lock.notify_all()

    def put(self, bucket: str, key: str, body: bytes, **kwargs: Any) -> None:
        with self._gauged("write", key):
            super().put(bucket, key, body, **kwargs)

    def head_metadata(self, bucket: str, key: str) -> Any:
        with self._gauged("read", key):
            return super().head_metadata(bucket, key)

    def get_if_exists(self, bucket: str, key: str, *, max_bytes: int) -> Any:
        with self._gauged("read", key):
            return super().get_if_exists(bucket, key, max_bytes=max_bytes)

    @contextmanager
    def open(self, bucket: str, key: str, *, version_id: str | None = None, etag: str | None = None) -> Iterator[Any]:
        with self._gauged("read", key), super().open(bucket, key, version_id=version_id, etag=etag) as handle:
            yield handle


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        import boto3

        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client


def _run(client: Any, store: GaugedStore, key: str, body: bytes) -> bytes:
    client.put_object(Bucket=BUCKET, Key=key, Body=body)
    head = client.head_object(Bucket=BUCKET, Key=key)
    job = large_jobs.job_input(Source(BUCKET, key, head.get("VersionId"), head["ETag"].strip('"')),
                               max_concurrency=4)["job"]
    router = frozen_router()
    store.step = "plan"
    state = large_jobs.plan(store, job, Defaults())
    while not state["done"]:
        store.step = "window"
        with store.open(BUCKET, state["windows_key"]) as handle:
            for item in json.loads(handle.read()):
                asyncio.run(large_jobs.run_window(store, BUCKET, item, router=router,
                                                  deadline=Deadline.after_ms(120_000)))
        store.step = "assemble"
        state = large_jobs.assemble(store, job)
    assert state["result"] == "compacted", state
    return client.get_object(Bucket=BUCKET, Key=state["key"])["Body"].read()


def test_plan_and_assemble_overlap_their_windows_and_write_the_same_bytes(
        s3: Any, sessions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    body = json.dumps(sessions).encode()
    at_once = large_jobs.WINDOWS_AT_ONCE
    side_by_side = GaugedStore(s3, gate=frozenset({("plan", "write"), ("assemble", "read")}))
    result = _run(s3, side_by_side, "incoming/side-by-side.json", body)
    monkeypatch.setattr(large_jobs, "WINDOWS_AT_ONCE", 1)
    one_at_a_time = GaugedStore(s3)
    reference = _run(s3, one_at_a_time, "incoming/one-at-a-time.json", body)

    windows = json.loads(result)["compaction"]["windows"]["passes"][0]["windows"]
    assert windows >= 3
    assert result == reference
    assert one_at_a_time.most[("plan", "write")] == one_at_a_time.most[("assemble", "read")] == 1
    assert 1 < side_by_side.most[("plan", "write")] <= at_once
    assert 1 < side_by_side.most[("assemble", "read")] <= at_once


def test_windows_heavier_than_the_bytes_in_flight_go_one_at_a_time(
        s3: Any, sessions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    body = json.dumps(sessions).encode()
    reference = _run(s3, GaugedStore(s3), "incoming/by-count.json", body)
    monkeypatch.setattr(large_jobs, "TASK_BYTES_IN_FLIGHT", 1)  # every task weighs more
    store = GaugedStore(s3)

    assert _run(s3, store, "incoming/by-bytes.json", body) == reference
    assert store.most[("plan", "write")] == store.most[("assemble", "read")] == 1


def test_the_map_items_carry_each_tasks_size(s3: Any, sessions: list[dict[str, Any]]) -> None:
    s3.put_object(Bucket=BUCKET, Key="incoming/sizes.json", Body=json.dumps(sessions).encode())
    head = s3.head_object(Bucket=BUCKET, Key="incoming/sizes.json")
    job = large_jobs.job_input(Source(BUCKET, "incoming/sizes.json", head.get("VersionId"),
                                      head["ETag"].strip('"')), max_concurrency=4)["job"]
    state = large_jobs.plan(S3Store(s3), job, Defaults())

    items = json.loads(s3.get_object(Bucket=BUCKET, Key=state["windows_key"])["Body"].read())
    assert len(items) >= 3
    assert all(item["task_bytes"] == s3.head_object(Bucket=BUCKET, Key=item["task_key"])["ContentLength"]
               for item in items)


def test_a_body_around_an_array_writers_array_is_write_bodys_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from compactor.compaction import windowed
    from compactor.transcript_stream import ArrayWriter

    monkeypatch.setattr(windowed, "COPY_CHUNK_BYTES", 3)  # chunks that split the multi-byte characters
    summary = {"compacted": True, "compaction": {"ratio": 0.5, "note": "é"}}
    for messages in ([], [{"role": "user", "content": "héllo — ✓ 𝄞"}, {"role": "assistant", "content": "ok"}]):
        array = io.StringIO()
        writer = ArrayWriter(array)
        for message in messages:
            writer.write(message)
        writer.finish()
        parsed, copied = io.StringIO(), io.StringIO()
        windowed.write_body(parsed, messages, summary, messages_only=False)
        windowed.write_body_of_array(copied, io.BytesIO(array.getvalue().encode()), summary)
        assert copied.getvalue() == parsed.getvalue()


def test_the_result_copies_the_last_pass_output_without_parsing_it(
        s3: Any, sessions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.compaction import windowed
    from contextlib import nullcontext

    from compactor.transcript_stream import messages_from

    body = json.dumps(sessions).encode()
    parsed: list[str] = []
    messages = large_jobs._messages

    def counted(store: Any, bucket: str, key: str, version_id: str | None, format: str | None = None,
                **options: Any) -> Any:
        parsed.append(key)
        return messages(store, bucket, key, version_id, format, **options)

    monkeypatch.setattr(large_jobs, "_messages", counted)
    result = _run(s3, GaugedStore(s3), "incoming/copied.json", body)
    outputs = [key["Key"] for key in s3.list_objects_v2(Bucket=BUCKET, Prefix="work/")["Contents"]
               if key["Key"].endswith("/output.json")]
    monkeypatch.setattr(windowed, "write_body_of_array", lambda out, array, summary: windowed.write_body(
        out, messages_from(lambda: nullcontext(array)), summary, messages_only=False))  # the array parsed and encoded again

    passes = len(json.loads(result)["compaction"]["windows"]["passes"])
    # Only the next pass's plan reads a pass's output message by message (its scan, then its windows).
    assert len(outputs) == passes and sum(key in outputs for key in parsed) == 2 * (passes - 1)
    assert _run(s3, GaugedStore(s3), "incoming/parsed.json", body) == result


def test_a_transcript_no_pass_changed_is_read_again_message_by_message(
        s3: Any, sessions: list[dict[str, Any]]) -> None:
    from compactor.jsonutil import dense_dumps

    key = "incoming/unchanged.json"
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(sessions).encode())  # ", " separators: not the result's
    head = s3.head_object(Bucket=BUCKET, Key=key)
    job = large_jobs.job_input(Source(BUCKET, key, head.get("VersionId"), head["ETag"].strip('"')),
                               max_concurrency=4)["job"]
    store = S3Store(s3)
    _keep_every_window(store, large_jobs.plan(store, job, Defaults()))
    state = large_jobs.assemble(store, job)  # every window's worker kept its original

    result = s3.get_object(Bucket=BUCKET, Key=state["key"])["Body"].read()
    body = json.loads(result)
    assert state["result"] == "compacted" and body["compacted"] is False and body["messages"] == sessions
    assert result.startswith(b'{"messages":[\n' + dense_dumps(sessions[0]).encode() + b",\n")


def test_integers_outside_64_bits_go_through_every_pass(s3: Any, sessions: list[dict[str, Any]]) -> None:
    """ijson's C backend refuses them; the API reads them. Every pass's plan reads them from the object or from
    the last pass's output again with the pure-Python backend (transcript_stream.messages_from)."""
    big = {"id": 2 ** 70, "low": -(2 ** 63) - 1, "ratio": 0.1}
    messages = [dict(sessions[0], meta=big), *sessions[1:-1], dict(sessions[-1], meta=big)]
    result = json.loads(_run(s3, GaugedStore(s3), "incoming/big-integers.json",
                             json.dumps({"mode": "decision", "messages": messages, "keep_recent": 1, "seed": 2 ** 64}).encode()))
    assert len(result["compaction"]["windows"]["passes"]) >= 2
    assert result["messages"][0] == messages[0] and result["messages"][-1] == messages[-1]
    assert type(result["messages"][0]["meta"]["id"]) is int


def _planned(s3: Any, key: str, messages: list[dict[str, Any]]) -> tuple[S3Store, dict[str, Any]]:
    """``messages`` stored at ``key`` (sequencer 0065A1) and its job planned: the store and the job."""
    store = S3Store(s3)
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(messages).encode())
    head = s3.head_object(Bucket=BUCKET, Key=key)
    job = large_jobs.job_input(Source(BUCKET, key, head.get("VersionId"), head["ETag"].strip('"'), "0065A1"),
                               max_concurrency=4)["job"]
    _keep_every_window(store, large_jobs.plan(store, job, Defaults()))
    return store, job


def _keep_every_window(store: S3Store, planned: dict[str, Any]) -> None:
    """Each window of the planned pass keeps its original, as a worker whose flow changed nothing answers (a
    window without a result is a failed worker's: a job of such windows alone fails)."""
    assert not planned["done"]
    for item in json.loads(store.get(BUCKET, planned["windows_key"], version_id=None, max_bytes=10**8).body):
        task = json.loads(store.get(BUCKET, item["task_key"], version_id=None, max_bytes=10**8).body)
        kept = {"index": task["index"], "reasons": [], "ok": True, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0,
                "model_calls": 0, "messages": task["messages"],
                "actions": {"keep": len(task["messages"]), "summarize": 0, "archive": 0}}
        store.put(BUCKET, item["result_key"], json.dumps(kept).encode(), content_type="application/json", metadata={})


def test_an_older_versions_job_never_replaces_a_newer_versions_result(s3: Any, sessions: list[dict[str, Any]]) -> None:
    """docs/behaviour.md: a result is never overwritten by an older version's. A windowed job that ends after a
    newer version of its key was compacted wrote its result (and its failure) over the newer one."""
    from compactor.object_jobs import META_SEQUENCER

    store, older = _planned(s3, "incoming/raced.json", sessions)
    for prefix in ("compacted/", "failed/"):  # the newer version's result and failure, as the inline job stores them
        s3.put_object(Bucket=BUCKET, Key=prefix + "raced.json", Body=b"{}",
                      Metadata={META_SEQUENCER: "0065B2", "source-version-id": "newer"})
    assert large_jobs.fail(store, older, {"Error": "States.Timeout"})["result"] == "failed"
    outcome = large_jobs.assemble(store, older)
    assert (outcome["result"], outcome["reason"]) == ("skipped", "a newer version was processed")
    assert "record" in outcome  # the job ran: it is observed as an inline job whose result a newer one kept
    # RecordFailure after that assemble (failed on its billing record) finds the job done, and bills it the same
    after = large_jobs.fail(store, older, {"Error": "States.TaskFailed"})
    assert (after["result"], after["reason"], after["record"]) == ("skipped", outcome["reason"], outcome["record"])
    for prefix in ("compacted/", "failed/"):
        assert s3.get_object(Bucket=BUCKET, Key=prefix + "raced.json")["Body"].read() == b"{}"


def test_a_result_written_meanwhile_is_not_replaced(s3: Any, sessions: list[dict[str, Any]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The streamed result is stored only if the key is still as looked at when its upload completes."""
    store, job = _planned(s3, "incoming/meanwhile.json", sessions)
    real_head = S3Store.head

    def head_then_another_writes(self: S3Store, bucket: str, name: str) -> Any:
        found = real_head(self, bucket, name)
        if name == "compacted/meanwhile.json":
            s3.put_object(Bucket=BUCKET, Key=name, Body=b"theirs")
        return found

    monkeypatch.setattr(S3Store, "head", head_then_another_writes)
    outcome = large_jobs.assemble(store, job)
    assert (outcome["result"], outcome["reason"]) == ("skipped", "another delivery wrote the result first")
    assert s3.get_object(Bucket=BUCKET, Key="compacted/meanwhile.json")["Body"].read() == b"theirs"
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def _plan_only(client: Any, key: str, body: Any, defaults: Defaults | None = None) -> dict[str, Any]:
    client.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(body).encode())
    head = client.head_object(Bucket=BUCKET, Key=key)
    job = large_jobs.job_input(Source(BUCKET, key, head.get("VersionId"), head["ETag"].strip('"')),
                               max_concurrency=4)["job"]
    return large_jobs.plan(S3Store(client), job, defaults or Defaults())


def test_a_windowed_job_runs_in_the_mode_the_object_would_run_in_read_whole(s3: Any) -> None:
    from compactor.compaction.preset import default_decision_policy

    """A request body naming no mode and no ``decision_policy_ir`` is sealed when read whole, as the API infers it
    (docs/behaviour.md "Compaction modes"); a windowed job compacted the same body in decision windows, so one object
    was compacted in two modes by its size. Such a body is refused now (413, naming the inferred mode), as a named
    seal is; a body whose fields or the defaults make it decision, and a bare transcript, are still planned."""
    from compactor.compaction.preset import default_decision_policy

    messages = [{"role": "user", "content": "fix the tests"}, {"role": "assistant", "content": "done " * 50}]
    for key, body in (("incoming/inferred.json", {"messages": messages}),
                      ("incoming/inferred-keep.json", {"messages": messages, "keep_recent": 1})):
        state = _plan_only(s3, key, body)
        assert state["done"] is True and state["result"] == "failed", state
        failure = json.loads(s3.get_object(Bucket=BUCKET, Key=key.replace("incoming/", "failed/"))["Body"].read())
        assert failure["status"] == 413 and "names no mode and no decision_policy_ir, so it runs in seal mode" in \
            failure["error"]["message"], failure
    for key, body, defaults in (
            ("incoming/named.json", {"mode": "decision", "messages": messages}, None),
            ("incoming/policy.json", {"decision_policy_ir": default_decision_policy(), "messages": messages}, None),
            ("incoming/bare.json", messages, None),
            ("incoming/defaults.json", {"messages": messages}, Defaults(fields={"mode": "decision"}))):
        state = _plan_only(s3, key, body, defaults)
        assert state["done"] is False and "windows_key" in state, (key, state)


ANTHROPIC_CALL = [{"role": "user", "content": "fix the tests"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]
RESPONSES_ITEMS = [{"role": "user", "content": "fix the tests"},
                   {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "c1", "output": "ok"}]


@pytest.mark.parametrize(("format", "messages", "reason"), [
    ("openai-chat", ANTHROPIC_CALL,
     "messages[1] looks like anthropic-messages (a 'tool_use' block), but the format is openai-chat: "
     "send the items with format anthropic-messages"),
    ("openai-chat", RESPONSES_ITEMS,
     "messages[1] looks like openai-responses (type 'function_call' and no role), but the format is openai-chat"),
    ("anthropic-messages", RESPONSES_ITEMS,
     "messages[1] looks like openai-responses (type 'function_call' and no role), but the format is "
     "anthropic-messages"),
])
def test_a_windowed_job_refuses_an_object_whose_named_format_its_items_are_not_of_as_the_inline_job_does(
        s3: Any, format: str, messages: list[dict[str, Any]], reason: str) -> None:
    """Items plainly of another format than the one an object names are the inline job's (and the API's) 422,
    naming the item and its format (docs/formats.md "The declared format"). The windowed job refused them as too
    large (413 ``request_too_large``: windows read chat and Anthropic only), an object naming
    ``anthropic-messages``, which windows read, included. Naming no format, an Anthropic object is planned as that."""
    state = _plan_only(s3, "incoming/named.json", {"format": format, "mode": "decision", "messages": messages})
    assert state["done"] is True and state["result"] == "failed", state
    failure = json.loads(s3.get_object(Bucket=BUCKET, Key="failed/named.json")["Body"].read())
    assert failure["status"] == 422 and failure["error"]["code"] == "invalid_transcript", failure
    assert reason in failure["detail"][0]["msg"], failure
    inline = build_request(json.dumps({"format": format, "mode": "decision", "messages": messages}).encode(),
                           Defaults())
    assert inline.status == 422 and reason in inline.detail[0]["msg"], inline
    if format == "openai-chat" and messages is ANTHROPIC_CALL:
        state = _plan_only(s3, "incoming/unnamed.json", {"mode": "decision", "messages": messages})
        assert state["done"] is False  # naming no format: planned as anthropic-messages, as read whole


FOREIGN_RECORDS = {
    "claude-code": ([{"type": "user", "uuid": "u1", "message": {"role": "user", "content": "fix the tests"}}],
                    "messages[0] is a Claude Code session record (type 'user' with a 'message'), not an item"),
    "langchain": ([{"type": "human", "data": {"content": "fix the tests", "type": "human"}}],
                  "messages[0] is a LangChain message (type 'human'), not an item"),
    "ai-sdk": ([{"role": "user", "content": "fix the tests"},
                {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c1", "toolName": "bash",
                                                   "args": {}}]},
                {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1", "toolName": "bash",
                                              "result": "ok"}]}],
               "messages[1] is a Vercel AI SDK message (a 'tool-call' part), not an item"),
}


@pytest.mark.parametrize("kind", list(FOREIGN_RECORDS))
def test_a_windowed_job_refuses_another_programs_records_as_the_inline_job_does(s3: Any, kind: str) -> None:
    """Records that are no format's items (docs/formats.md "Records of other programs") in an object over
    ``S3InlineMaxBytes``: the inline job's 422 in the same words. The AI SDK's messages, with their ``tool`` role, were
    planned as chat and compacted in windows with nothing pairing their calls and results."""
    messages, words = FOREIGN_RECORDS[kind]
    state = _plan_only(s3, "incoming/foreign.json", {"mode": "decision", "messages": messages})
    assert state["done"] is True and state["result"] == "failed", state
    failure = json.loads(s3.get_object(Bucket=BUCKET, Key="failed/foreign.json")["Body"].read())
    assert failure["status"] == 422 and failure["error"]["code"] == "invalid_transcript", failure
    assert failure["detail"][0]["msg"].startswith(words), failure
    inline = build_request(json.dumps({"mode": "decision", "messages": messages}).encode(), Defaults())
    assert inline.status == 422 and inline.detail[0]["msg"] == failure["detail"][0]["msg"], (inline, failure)


CHAT_CALL = [{"role": "user", "content": "fix the tests"},
             {"role": "assistant", "content": None,
              "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "ok"}]


CHAT_SHOWN, ANTHROPIC_SHOWN = "openai-chat item (a 'tool_calls' field)", "anthropic-messages item (a 'tool_use' block)"


@pytest.mark.parametrize(("named", "chat_first"), [
    (None, True), (None, False), ("openai-chat", True), ("openai-chat", False), ("anthropic-messages", True),
    ("anthropic-messages", False)])
def test_a_windowed_job_refuses_items_of_two_formats_naming_both_as_the_inline_job_does(
        s3: Any, named: str | None, chat_first: bool) -> None:
    """Chat and Anthropic items in one object: naming no format, the refusal named the format the object was
    planned in (``... but the format is anthropic-messages``), whose advice got the opposite refusal."""
    messages = [*CHAT_CALL, *ANTHROPIC_CALL[1:]] if chat_first else [*ANTHROPIC_CALL, *CHAT_CALL[1:]]
    body = {"mode": "decision", "messages": messages} | ({"format": named} if named else {})
    state = _plan_only(s3, "incoming/mixed.json", body)
    assert state["done"] is True and state["result"] == "failed", state
    failure = json.loads(s3.get_object(Bucket=BUCKET, Key="failed/mixed.json")["Body"].read())
    shown = (CHAT_SHOWN, ANTHROPIC_SHOWN) if chat_first else (ANTHROPIC_SHOWN, CHAT_SHOWN)
    words = (f"the items are of two formats: messages[1] is the first {shown[0]}, messages[3] is the first {shown[1]}; "
             "send the items of one format")
    assert failure["status"] == 422 and failure["detail"][0]["msg"].endswith(words), failure
    inline = build_request(json.dumps(body).encode(), Defaults())
    assert inline.status == 422 and inline.detail[0]["msg"] == failure["detail"][0]["msg"], (inline, failure)



RESPONSES_SHOWN = "openai-responses item (type 'function_call' and no role)"


@pytest.mark.parametrize(("named", "messages", "shown"), [
    ("openai-chat", [*ANTHROPIC_CALL, *CHAT_CALL[1:]], (ANTHROPIC_SHOWN, CHAT_SHOWN)),
    ("openai-chat", [CHAT_CALL[0], *RESPONSES_ITEMS[1:], *CHAT_CALL[1:]], (RESPONSES_SHOWN, CHAT_SHOWN)),
    ("anthropic-messages", [CHAT_CALL[0], *RESPONSES_ITEMS[1:], *ANTHROPIC_CALL[1:]],
     (RESPONSES_SHOWN, ANTHROPIC_SHOWN)),
    ("anthropic-messages", [*CHAT_CALL, *ANTHROPIC_CALL[1:], *RESPONSES_ITEMS[1:]],
     (CHAT_SHOWN, ANTHROPIC_SHOWN, RESPONSES_SHOWN)),
])
def test_a_windowed_job_names_the_first_item_of_each_format_wherever_it_comes(
        s3: Any, named: str, messages: list[dict[str, Any]], shown: tuple[str, ...]) -> None:
    """The scan looked only before the item it refused for an item of the format it read: an object naming openai-chat
    whose Anthropic (or Responses) item came before any Chat one was refused as "messages[1] looks like
    anthropic-messages ..., send the items with format anthropic-messages", whose advice got the opposite refusal,
    where the inline job named both; a third format went unnamed."""
    body = {"format": named, "mode": "decision", "messages": messages}
    state = _plan_only(s3, "incoming/mixed.json", body)
    assert state["done"] is True and state["result"] == "failed", state
    failure = json.loads(s3.get_object(Bucket=BUCKET, Key="failed/mixed.json")["Body"].read())
    named_items = ", ".join(f"messages[{1 + 2 * i}] is the first {each}" for i, each in enumerate(shown))
    words = (f"the items are of {'two' if len(shown) == 2 else 'three'} formats: {named_items}; send the items of one "
             "format")
    assert failure["status"] == 422 and failure["detail"][0]["msg"] == words, failure
    inline = build_request(json.dumps(body).encode(), Defaults())  # its detail cut to 200 characters, as the API's
    assert inline.status == 422 and words.startswith(inline.detail[0]["msg"].removesuffix("...")), inline

@pytest.mark.parametrize("versioned", [True, False])
def test_a_job_checks_the_keys_of_the_callers_object_once_and_of_its_own_outputs_never(
        s3: Any, sessions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, versioned: bool) -> None:
    """Refusing a key named twice costs the streamed reading a Python call for every key (docs/performance.md,
    "Streamed reading"); every read of every step paid it. Plan's scan checks the object, which the reads after it
    read at the same version unchecked (an unversioned object too: each read asks for the ETag the event named, so a
    replaced object is refused rather than read unchecked; it used to be checked at every read); a pass output, which
    ArrayWriter wrote, is never checked."""
    if versioned:
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    reads: list[tuple[str, bool]] = []
    messages = large_jobs._messages

    def counted(store: Any, bucket: str, key: str, version_id: str | None, format: str | None = None,
                **options: Any) -> Any:
        reads.append((key, options.get("keys_checked", True)))
        return messages(store, bucket, key, version_id, format, **options)

    monkeypatch.setattr(large_jobs, "_messages", counted)
    result = json.loads(_run(s3, GaugedStore(s3), "incoming/checked.json", json.dumps(sessions).encode()))
    source = [checked for key, checked in reads if key == "incoming/checked.json"]
    outputs = [checked for key, checked in reads if key != "incoming/checked.json"]
    assert len(result["compaction"]["windows"]["passes"]) >= 2 and len(source) == 2 and outputs
    assert source == [True, False] and not any(outputs)
