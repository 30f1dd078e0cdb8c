"""``compactor.object_jobs`` on its own: keys, defaults, request building and the job over an in-memory store."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from compactor import object_jobs
from compactor.budget import Deadline
from compactor.object_jobs import (
    DEFAULTS_ENV,
    ConfigError,
    Defaults,
    Failure,
    ObjectHead,
    ObjectTooLarge,
    Source,
    StoredObject,
    build_request,
    load_defaults,
    relative_key,
    run_job,
)

from .conftest import transcript


class MemoryStore:
    """An ObjectStore over a dict; counts writes. Writes are conditional like S3's (ETag = a write counter)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], tuple[bytes, dict[str, str]]] = {}
        self.etags: dict[tuple[str, str], str] = {}
        self.puts: list[str] = []
        self.calls: list[tuple[str, str]] = []  # (operation, key) of every request a job made

    def add(self, key: str, body: bytes) -> None:
        self.objects[("b", key)] = (body, {})

    def get(self, bucket: str, key: str, *, version_id: str | None, max_bytes: int) -> StoredObject:
        self.calls.append(("get", key))
        body, _ = self.objects[(bucket, key)]
        if len(body) > max_bytes:
            raise ObjectTooLarge(len(body), max_bytes)
        return StoredObject(body, version_id, '"etag-1"')

    def get_if_exists(self, bucket: str, key: str, *, max_bytes: int) -> StoredObject | None:
        return self.get(bucket, key, version_id=None, max_bytes=max_bytes) if (bucket, key) in self.objects else None

    def head(self, bucket: str, key: str) -> ObjectHead | None:
        self.calls.append(("head", key))
        return self._head(bucket, key)

    def _head(self, bucket: str, key: str) -> ObjectHead | None:
        found = self.objects.get((bucket, key))
        return None if found is None else ObjectHead(found[1], self.etags.get((bucket, key), '"source"'))

    def head_metadata(self, bucket: str, key: str) -> Mapping[str, str] | None:
        found = self.head(bucket, key)
        return None if found is None else found.metadata

    def put(self, bucket: str, key: str, body: bytes, *, content_type: str, metadata: Mapping[str, str]) -> None:
        assert content_type == "application/json"
        self.objects[(bucket, key)] = (body, dict(metadata))
        self.puts.append(key)
        self.etags[(bucket, key)] = f'"w{len(self.puts)}"'

    def put_if(self, bucket: str, key: str, body: bytes, *, content_type: str, metadata: Mapping[str, str],
               replacing: str | None) -> bool:
        self.calls.append(("put_if " + str(replacing), key))
        current = self._head(bucket, key)
        if (current.etag if current is not None else None) != replacing:
            return False
        self.put(bucket, key, body, content_type=content_type, metadata=metadata)
        return True

    def delete_if(self, bucket: str, key: str, *, etag: str, version_id: str | None = None) -> bool:
        self.calls.append((f"delete_if {etag}", key))
        current = self._head(bucket, key)
        if current is None or current.etag != etag:
            return False
        del self.objects[(bucket, key)]
        return True


@pytest.mark.parametrize(("key", "rel"), [
    ("incoming/a.json", "a.json"), ("incoming/x/y z.jsonl", "x/y z.jsonl"), ("incoming/", None),
    ("incoming/dir/", None), ("compacted/a.json", None), ("failed/a.json", None), ("a.json", None),
    ("Incoming/a.json", None),
])
def test_relative_key(key: str, rel: str | None) -> None:
    assert relative_key(key) == rel


def test_defaults_parse_and_validate() -> None:
    assert load_defaults(None) == Defaults() and load_defaults("  ") == Defaults()
    parsed = load_defaults('{"mode": "seal", "keep_recent": 2, "target_ratio": 0.3}')
    assert dict(parsed.fields) == {"mode": "seal", "keep_recent": 2, "target_ratio": 0.3}
    deep = '{"policy_ir": ' + "[" * 2000 + "]" * 2000 + "}"  # fits Lambda's 4 KB of environment
    for bad in ("nope", "[1]", '{"mode": "x"}', '{"colour": 1}', '{"target_ratio": 2}', '{"messages": []}', deep):
        with pytest.raises(ConfigError):
            load_defaults(bad)



def test_defaults_that_fail_validation_are_named_in_one_line_of_the_validators_words() -> None:
    # The ConfigError carried pydantic's text: lines of "Value error, mode must be one of: ... [type=value_error,
    # input_value='x', input_type=str]" and "For further information visit https://errors.pydantic.dev/...".
    with pytest.raises(ConfigError) as raised:
        load_defaults('{"mode": "x", "target_ratio": 2}')
    assert str(raised.value) == (f"{DEFAULTS_ENV} is not a valid set of request fields: target_ratio: Input should be "
                                 "less than or equal to 1; mode: mode must be one of: decision, mask, seal")

def test_the_mode_is_chosen_as_the_cli_and_the_api_choose_it() -> None:
    bare = json.dumps(transcript()).encode()
    assert build_request(bare, Defaults()).mode_name == "decision"  # a bare transcript: decision
    assert build_request(bare, Defaults({"mode": "seal"})).mode_name == "seal"
    assert build_request(bare, Defaults({"mode": "mask"})).mode_name == "mask"
    body = json.dumps({"messages": transcript()}).encode()
    assert build_request(body, Defaults()).mode_name == "seal"  # a request body: inferred as the API does
    explicit_null = json.dumps({"messages": transcript(), "decision_policy_ir": None}).encode()
    assert build_request(explicit_null, Defaults()).mode_name == "seal"
    policy = ["policy", ["not", ["is", "disabled"]], ["neg", ["field", "price_in"]], ["argmax"], ["id"],
              ["always", {"action": "next_candidate"}]]
    with_policy = json.dumps({"messages": transcript(), "decision_policy_ir": policy}).encode()
    assert build_request(with_policy, Defaults()).mode_name == "decision"
    assert build_request(with_policy, Defaults({"mode": "seal"})).mode_name == "seal"  # the object's fields win
    named = json.dumps({"messages": transcript(), "mode": "mask"}).encode()
    assert build_request(named, Defaults({"mode": "seal"})).mode_name == "mask"
    configured = Defaults({"decision_policy_ir": policy})
    assert build_request(body, configured).decision_policy_ir == policy
    assert build_request(body, configured).mode_name == "decision"


def test_object_fields_win_over_defaults() -> None:
    defaults = Defaults(fields={"keep_recent": 3, "target_ratio": 0.2})
    request = build_request(json.dumps({"messages": transcript(), "keep_recent": 1}).encode(), defaults)
    assert (request.keep_recent, request.target_ratio) == (1, 0.2)


@pytest.mark.parametrize(("data", "kind"), [
    (b"", "missing"), (b"\xff\xfe{", "json_invalid"), (b'{"messages": [', "json_invalid"), (b"42", "value_error"),
    (b"[1, 2]", "value_error"), (b'{"messages": "hi"}', "value_error"),
    (b'{"messages": [], "keep_recent": "many"}', "int_type"),
])
def test_bad_content_becomes_a_422_failure(data: bytes, kind: str) -> None:
    failure = build_request(data, Defaults())
    assert isinstance(failure, Failure) and failure.status == 422
    assert failure.error["type"] == "invalid_request_error" and failure.error["code"] == "invalid_transcript"
    assert failure.detail and failure.detail[0]["type"] == kind and failure.detail[0]["loc"][0] == "body"


def test_a_utf8_bom_is_tolerated() -> None:
    assert not isinstance(build_request(b"\xef\xbb\xbf" + json.dumps(transcript()).encode(), Defaults()), Failure)


def test_same_version_and_newer_exists() -> None:
    meta = {"source-version-id": "v2", "source-etag": "e2", "source-sequencer": "00AF"}
    assert object_jobs.same_version(meta, Source("b", "k", "v2", "e2"))
    assert object_jobs.same_version(meta, Source("b", "k", "v2", '"e2"'))
    assert not object_jobs.same_version(meta, Source("b", "k", "v1", "e2"))
    assert not object_jobs.same_version(None, Source("b", "k", "v2", "e2"))
    assert object_jobs.same_version({"source-version-id": "null", "source-etag": "e"}, Source("b", "k", None, "e"))
    assert not object_jobs.same_version({"source-etag": "e"}, Source("b", "k", None, ""))
    assert object_jobs.newer_exists(meta, Source("b", "k", sequencer="00AE"))
    # Sequencers of different lengths: the shorter right-padded with zeros ("AE" is "AE00", after "00AF"), as S3's
    # event message structure says; they were compared as numbers, left-padded ("00AE", before it)
    assert not object_jobs.newer_exists(meta, Source("b", "k", sequencer="AE"))
    assert object_jobs.newer_exists({**meta, "source-sequencer": "00AF01"}, Source("b", "k", sequencer="00AF"))
    assert not object_jobs.newer_exists({**meta, "source-sequencer": "00af"}, Source("b", "k", sequencer="00AF"))
    assert object_jobs.newer_exists({**meta, "source-sequencer": "00af"}, Source("b", "k", sequencer="00AE"))
    assert not object_jobs.newer_exists({**meta, "source-sequencer": "zz"}, Source("b", "k", sequencer="00AE"))
    assert not object_jobs.newer_exists(meta, Source("b", "k", sequencer="00B0"))
    assert not object_jobs.newer_exists(meta, Source("b", "k"))


async def test_run_job_writes_once_and_deterministically() -> None:
    store = MemoryStore()
    store.add("incoming/t.json", json.dumps({"messages": transcript(), "decision_policy_ir": None}).encode())
    source = Source("b", "incoming/t.json", "v1", "etag-1", "01")

    first = await run_job(source, store=store, defaults=Defaults(), deadline=Deadline.after_ms(10_000))
    second = await run_job(source, store=store, defaults=Defaults(), deadline=Deadline.after_ms(10_000))

    assert (first.result, first.key) == ("compacted", "compacted/t.json")
    assert (second.result, second.reason) == ("skipped", "already processed")
    assert store.puts == ["compacted/t.json"]
    body, meta = store.objects[("b", "compacted/t.json")]
    assert meta == {"source-version-id": "v1", "source-etag": "etag-1", "compactor-status": "200",
                    "source-sequencer": "01"}
    assert body == object_jobs.encode(json.loads(body))  # compact JSON, re-encodes to the same bytes


async def test_a_job_reads_the_object_and_writes_once_without_looking_first() -> None:
    """The usual path is three requests (docs/performance.md#where-the-time-goes): the object, the conditional write
    and a look at the other place (``failed/`` for a result, ``compacted/`` for a failure), which keeps no other
    outcome (docs/scale.md); an existing object is looked at only when the conditional write is refused: an older
    version's result is replaced on its ETag, a newer version's stays, and so does this version's."""
    store = MemoryStore()
    store.add("incoming/t.json", json.dumps({"messages": transcript(), "mode": "seal"}).encode())
    store.add("incoming/bad.json", b"not json")

    async def job(key: str, version: str, sequencer: str) -> Any:
        store.calls.clear()
        return await run_job(Source("b", key, version, "etag-1", sequencer), store=store,
                             defaults=Defaults(), deadline=Deadline.after_ms(10_000))

    first = await job("incoming/t.json", "v1", "01")
    assert first.result == "compacted"
    assert store.calls == [("get", "incoming/t.json"), ("put_if None", "compacted/t.json"), ("head", "failed/t.json")]
    failed = await job("incoming/bad.json", "v1", "01")
    assert (failed.result, failed.status) == ("failed", 422)
    assert store.calls == [("get", "incoming/bad.json"), ("put_if None", "failed/bad.json"),
                           ("head", "compacted/bad.json")]

    newer = await job("incoming/t.json", "v3", "03")
    assert newer.result == "compacted"
    assert store.calls[1:] == [("put_if None", "compacted/t.json"), ("head", "compacted/t.json"),
                               ('put_if "w1"', "compacted/t.json"), ("head", "failed/t.json")]
    assert store.objects[("b", "compacted/t.json")][1]["source-version-id"] == "v3"
    late = await job("incoming/t.json", "v2", "02")
    again = await job("incoming/t.json", "v3", "03")
    assert (late.result, late.reason) == ("skipped", "a newer version was processed")
    assert (again.result, again.reason) == ("skipped", "already processed")
    assert store.puts == ["compacted/t.json", "failed/bad.json", "compacted/t.json"]


async def test_run_job_records_too_large_objects() -> None:
    store = MemoryStore()
    store.add("incoming/big.json", b"[" + b" " * 100 + b"]")
    outcome = await run_job(Source("b", "incoming/big.json", "v1", "e"), store=store, defaults=Defaults(),
                            deadline=Deadline.after_ms(1000), max_bytes=50)
    assert (outcome.result, outcome.status) == ("failed", 413)
    body = json.loads(store.objects[("b", "failed/big.json")][0])
    assert body["source"] == {"bucket": "b", "key": "incoming/big.json", "version_id": "v1", "etag": "e"}
    assert body["error"]["code"] == "request_too_large"


class KeyLimitedStore(MemoryStore):
    """S3's refusal of a key over 1,024 bytes: 400 ``KeyTooLongError`` to a HEAD as to a write."""

    def head(self, bucket: str, key: str) -> ObjectHead | None:
        if len(key.encode("utf-8")) > object_jobs.MAX_KEY_BYTES:
            raise RuntimeError("400 KeyTooLongError")
        return super().head(bucket, key)


@pytest.mark.parametrize("length", [1014, 1015])  # incoming/ plus 1015 bytes: S3's longest key, 1024
async def test_a_key_too_long_for_its_result_is_recorded_in_failed(length: int) -> None:
    """compacted/<rel> is one byte longer than incoming/<rel>: at S3's longest key its write failed on every
    attempt (the model calls made again each time) and the event went to the failure queue. Its failure is recorded
    without a look at ``compacted/<rel>`` (one outcome per object, docs/scale.md), a key S3 refuses."""
    store, rel = KeyLimitedStore(), "é" + "a" * (length - 2)  # 2 bytes in UTF-8: the limit counts bytes
    store.add("incoming/" + rel, json.dumps([{"role": "user", "content": "hi"}]).encode())
    outcome = await run_job(Source("b", "incoming/" + rel, "v1", "e"), store=store, defaults=Defaults(),
                            deadline=Deadline.after_ms(1000))
    if length == 1014:
        assert outcome.result == "compacted" and len(outcome.key.encode()) == 1024
        return
    assert (outcome.result, outcome.status) == ("failed", 400) and ("b", "compacted/" + rel) not in store.objects
    assert ("get", "incoming/" + rel) not in store.calls  # refused before the object is read
    body = json.loads(store.objects[("b", "failed/" + rel)][0])
    assert body["error"]["code"] == "key_too_long" and "1024 bytes" in body["error"]["message"]


def test_an_s3_test_event_has_no_records_to_process(s3_module: Any, lambda_context: Any) -> None:
    """S3 sends s3:TestEvent when a notification is set up: it raised KeyError('Records'), so Lambda retried it
    and sent it to the failure queue."""
    event = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-12-02T00:00:00.000Z",
             "Bucket": "b", "RequestId": "r", "HostId": "h"}
    assert s3_module.handler(event, lambda_context) == {"results": []}


async def test_run_job_raises_on_server_side_statuses(monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor import service

    from compactor.call_record import CallRecord

    async def failing(*_: Any, **__: Any) -> CallRecord:
        return CallRecord(status=503, mode="seal",
                          body={"error": {"message": "unavailable", "type": "server_error", "code": "busy"}})

    monkeypatch.setattr(service, "compact_call", failing)
    store = MemoryStore()
    store.add("incoming/t.json", json.dumps(transcript()).encode())
    with pytest.raises(RuntimeError, match="503"):
        await run_job(Source("b", "incoming/t.json", "v1", "e"), store=store, defaults=Defaults(),
                      deadline=Deadline.after_ms(1000))
    assert store.puts == []


def test_the_core_module_imports_no_aws_library() -> None:
    import ast
    from pathlib import Path

    tree = ast.parse(Path(object_jobs.__file__).read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"boto3", "botocore", "aws_lambda_powertools", "compactor_aws"}


@pytest.mark.parametrize(("fields", "loaded", "not_loaded"), [
    ({}, "compactor.compaction.decision", "compactor.compaction.seal"),  # a bare transcript's mode
    ({"mode": "seal"}, "compactor.compaction.seal", "compactor.compaction.decision"),
])
def test_prepare_imports_the_mode_of_a_bare_transcript(fields: dict[str, Any], loaded: str, not_loaded: str) -> None:
    """In a fresh interpreter: what ``prepare`` loads ahead of the job is the mode a bare transcript runs in."""
    import subprocess
    import sys

    script = ("import json, sys; from compactor import object_jobs; "
              f"object_jobs.prepare(object_jobs.Defaults(json.loads({json.dumps(json.dumps(fields))}))); "
              f"print(json.dumps([{loaded!r} in sys.modules, {not_loaded!r} in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [True, False]


@pytest.mark.parametrize("mode", ["decision", "seal"])
async def test_a_messages_own_timing_fields_are_stored_as_the_api_answers_them(mode: str) -> None:
    """The stored result leaves out the service's timings (``latency_ms``/``backoff_ms`` of its trace), not fields
    of the transcript's own items: a harness's ``latency_ms`` beside a message, or under its ``extra``, was dropped
    from ``compacted/<rel>`` while the API answered it (docs/formats.md: kept units keep them byte-identically)."""
    from compactor.service import compact
    from compactor.models import CompactRequest

    messages = transcript()
    messages[1] = {**messages[1], "latency_ms": 812}  # pinned (a user message): kept whole
    messages[-1] = {**messages[-1], "extra": {"latency_ms": 1234, "backoff_ms": [5], "cost": 0.01}}  # the recent tail
    store = MemoryStore()
    store.add("incoming/t.json", json.dumps({"messages": messages, "mode": mode}).encode())
    outcome = await run_job(Source("b", "incoming/t.json", "v1", "etag-1"), store=store, defaults=Defaults(),
                            deadline=Deadline.after_ms(10_000))
    assert outcome.result == "compacted"
    stored = json.loads(store.objects[("b", "compacted/t.json")][0])
    assert stored["messages"][-1] == messages[-1]
    assert mode == "seal" or stored["messages"][1] == messages[1]  # seal summarizes the user turn with the rest
    status, answered = await compact(CompactRequest.model_validate({"messages": messages, "mode": mode}),
                                     deadline=Deadline.after_ms(10_000))
    assert status == 200 and stored["messages"] == answered["messages"]


def test_encode_leaves_out_the_services_timings_only() -> None:
    body = {"messages": [{"role": "assistant", "content": "x", "latency_ms": 3}],
            "x_router": {"decision_trace": {"flow_nodes": [{"node": "n1", "latency_ms": 40, "backoff_ms": 7}]}}}
    assert json.loads(object_jobs.encode(body)) == {
        "messages": [{"role": "assistant", "content": "x", "latency_ms": 3}],
        "x_router": {"decision_trace": {"flow_nodes": [{"node": "n1"}]}}}
    responses = {"input": [{"type": "message", "role": "user", "content": "x", "backoff_ms": 1}], "latency_ms": 2}
    assert json.loads(object_jobs.encode(responses)) == {"input": responses["input"]}


async def test_a_negative_max_tokens_is_named_as_sent_when_the_transcript_needs_windows() -> None:
    """Over one request's limits (compacted in windows), a negative ``max_tokens`` was refused as an ``invalid_flow``
    naming a node of the preset (``batch_0_generate``); one request names it as sent (docs/reliability.md)."""
    from scale import transcripts

    store = MemoryStore()
    body = {"messages": list(transcripts.messages(1_200_000)), "mode": "decision", "max_tokens": -5}
    store.add("incoming/t.json", json.dumps(body).encode())
    outcome = await run_job(Source("b", "incoming/t.json", "v1", "etag-1"), store=store, defaults=Defaults(),
                            deadline=Deadline.after_ms(10_000))
    assert (outcome.result, outcome.status) == ("failed", 400)
    failure = json.loads(store.objects[("b", "failed/t.json")][0])
    assert failure["error"] == {"message": "max_tokens must not be negative", "type": "invalid_request_error",
                                "code": "invalid_max_tokens"}
