"""Large transcripts on the S3 path (docs/scale.md): the steps of the windowed-job state machine.

An object too large to compact in one invocation becomes a *windowed job*, run by a Standard state
machine: ``plan`` streams the object once to learn the pass's context (twice for ``anthropic-messages``, whose units
are known once the whole stream is read) and once more to write its window tasks under ``work/<job>/p<n>/`` with the list the Distributed Map reads; one ``window``
worker per item compacts a task (:func:`compactor.compaction.windows.compact_window`, exactly what
runs inline); ``assemble`` concatenates the results in order (a window without a result keeps its
original), then either plans the next pass or writes ``compacted/<rel>``: the ``/v1/compact``
response body, byte for byte what ``compactor compact --json`` writes for the same object, and
returns the job's :class:`~compactor.call_record.CallRecord` (the adapter observes and bills it once,
docs/billing.md). ``fail`` records ``failed/<rel>`` when the execution itself fails, or, when the last ``assemble``
had written the result before failing (on its billing record), returns the job's record to bill. Every step
streams: memory holds a few windows (:data:`WINDOWS_AT_ONCE`, :data:`TASK_BYTES_IN_FLIGHT`) and an output's parts
in flight (the store's writer), never the transcript. Storage-agnostic: the store is :class:`StreamStore`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from typing import IO, Any, Protocol

from compactor.object_jobs import (
    CONCURRENT,
    JSON_CONTENT_TYPE,
    NEWER,
    ROUTE,
    Defaults,
    Failure,
    ObjectStore,
    Source,
    SourceChanged,
    StoredObject,
    WriteRefused,
    _write_failure,
    failure_key,
    newer_exists,
    relative_key,
    result_key,
    result_metadata,
    same_version,
    settle,
)
from compactor.call_record import CallRecord
from compactor.jsonutil import dense_dumps
from compactor.errors import InvalidRequest, JobFailed, RequestTooLarge

# The streamed reader (``compactor.transcript_stream``, with ijson and ``compactor.transcripts``) and the side-by-side
# requests are imported by the steps that read or write a whole pass (``plan``, ``assemble``, ``fail``): a Distributed
# Map item (:func:`run_window`), what a job's first wave of cold workers runs, reads its task and writes its result
# only (docs/performance.md#the-three-rows-above-the-goal-twenty-second-round-issue-11).

WORK_PREFIX = "work/"
WINDOWS_AT_ONCE = 8
"""Window tasks ``plan`` writes, and windows (a task and its result) ``assemble`` reads, at once: each is an S3
request or three, and one window after another a pass of 1,000 windows waited for thousands of round trips
(docs/performance.md, "Windowed jobs")."""
TASK_BYTES_IN_FLIGHT = 64 * 1024 * 1024
"""And at most this much of their tasks' JSON, but for the last window started: a window closes at 4 MB of
messages, but one message may be larger, so a window may be too (docs/scale.md). ``plan`` records each task's
size in the list the Map reads (``task_bytes``); an item without it (a job planned before) weighs
:data:`UNKNOWN_TASK_BYTES`."""
UNKNOWN_TASK_BYTES = TASK_BYTES_IN_FLIGHT // WINDOWS_AT_ONCE
RUN_STATE = "state.json"
"""``work/<job>/state.json``: the run state before the pass the Map runs, that pass's input and its windows' list; the
last ``assemble`` adds the finished run's state (:data:`FINAL`) before it writes the result."""
REPLACED = "the object was replaced while it was compacted"
"""Why a job ended without a result: the caller's object, which the job reads several times, was written again
meanwhile (an unversioned bucket; its ETag changed). The new object's own event starts its own job."""
FINAL = "final"
"""The finished run's state in the run state object: the job's record, which ``fail`` bills when the last ``assemble``
wrote the result and failed on the billing record (docs/billing.md), and which a retry of that ``assemble`` finds."""
FINAL_STATE = "final.json"
"""Where an ``assemble`` before :data:`FINAL` saved the finished run's state (``work/<job>/final.json``): read by ``fail``
for a job whose run state does not have it."""
REPEATED = "already processed"
"""Why a failure was not written because this job's own was there: a retried step, whose outcome was counted."""
RESULT_MAX_BYTES = 5 * 1024**3
"""A window's result is read whole whatever its size: this is S3's largest single ``PutObject``, which wrote it."""


class StreamStore(ObjectStore, Protocol):
    def open(self, bucket: str, key: str, *, version_id: str | None = None,
             etag: str | None = None) -> AbstractContextManager[IO[bytes]]:
        """The object's body as a stream; with ``etag``, only while the object is still the one with that ETag, else
        :class:`~compactor.object_jobs.SourceChanged`."""
        ...

    def open_writer(self, bucket: str, key: str, *, content_type: str, metadata: dict[str, str],
                    conditional: bool = False, replacing: str | None = None) -> AbstractContextManager[IO[str]]: ...


def job_id(source: Source) -> str:
    """The job of one object version: the same id (and execution name) however often it is started. Without versioning,
    the same bytes written again are another write (its S3 sequencer too): they were the earlier write's job, whose
    execution name refused their start ("already started") and to which the on-failure destination deferred."""
    parts = (source.bucket, source.key, source.version_id or "null", source.etag)
    if source.version_id is None and source.sequencer:
        parts += (source.sequencer,)
    text = "\n".join(parts)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def job_input(source: Source, *, max_concurrency: int, caller: str | None = None,
              inline_max_bytes: int | None = None) -> dict[str, Any]:
    """The state machine's execution input for ``source``; ``caller``, the one the job is billed to, is the one its
    windows run as (docs/reliability.md#isolation-one-callers-failures-are-that-callers). ``inline_max_bytes``: the
    size over which the S3 function sent the object here (``S3InlineMaxBytes``), which a refusal for the object's size
    names (:func:`_too_large`)."""
    job = {**source.as_dict(), "sequencer": source.sequencer, "job_id": job_id(source), "caller": caller}
    if inline_max_bytes is not None:
        job["inline_max_bytes"] = inline_max_bytes
    return {"job": job, "max_concurrency": max_concurrency}


def _this_large(job: dict[str, Any]) -> str:
    """What objects a windowed job's size refusal is about: those over the S3 function's inline size, named when the
    execution's input gives it (a job started before it did: "this large"). A caller read "transcripts this large"
    and could not know how large a transcript of that format may be."""
    size = job.get("inline_max_bytes")
    return f"transcripts over {size} bytes" if isinstance(size, int) else "transcripts this large"


def _next_pass(job: dict[str, Any], windows_key: str) -> dict[str, Any]:
    """A step's answer when a pass's windows are to run: the Map reads ``windows_key`` and hands each window's worker
    the bucket and the job's ``caller`` (None for a job started before it was kept)."""
    return {"done": False, "bucket": job["bucket"], "windows_key": windows_key, "caller": job.get("caller")}


def source_of(job: dict[str, Any]) -> Source:
    return Source(job["bucket"], job["key"], job.get("version_id"), job.get("etag") or "", job.get("sequencer"))


def billed_caller(store: ObjectStore, job: dict[str, Any]) -> str | None:
    """The one a job is billed to: the caller the S3 function found, in the execution's input; read from the
    upload's record only for a job started before executions named it (reading it always was one more GET for each
    job that bills, docs/billing.md)."""
    from compactor.jobs import upload_caller

    if job.get("caller"):
        return job["caller"]
    source = source_of(job)
    rel = relative_key(source.key)
    return upload_caller(store, source.bucket, rel) if rel else None


def _work(job: dict[str, Any], name: str) -> str:
    return f"{WORK_PREFIX}{job['job_id']}/{name}"


def _get_json(store: StreamStore, bucket: str, key: str) -> Any:
    with store.open(bucket, key) as handle:
        return json.loads(handle.read())


def _json_bytes(value: Any) -> bytes:
    """A scratch object's bytes (a task, a window's result, the run state, the Map's list): dense JSON of the
    value whole. Never ``object_jobs.encode``, which leaves out the service's timing keys: a message's own
    ``latency_ms`` or a policy's ``backoff_ms`` are what the windows read."""
    return dense_dumps(value).encode("utf-8")


def _put_json(store: StreamStore, bucket: str, key: str, value: Any) -> None:
    _put_bytes(store, bucket, key, _json_bytes(value))


def _put_bytes(store: StreamStore, bucket: str, key: str, data: bytes) -> None:
    store.put(bucket, key, data, content_type=JSON_CONTENT_TYPE, metadata={})


def _messages(store: StreamStore, bucket: str, key: str, version_id: str | None,
              format: str | None = None, *, keys_checked: bool = True,
              etag: str | None = None) -> Iterator[dict[str, Any]]:
    """The messages of an object (``keys_checked``: :func:`~compactor.transcript_stream.messages_from`), with
    ``etag`` only while it is the object with that ETag (:meth:`StreamStore.open`)."""
    from compactor.transcript_stream import messages_from

    return messages_from(lambda: store.open(bucket, key, version_id=version_id, etag=etag), format,
                         keys_checked=keys_checked)


def _pinned(job: dict[str, Any], input_key: str) -> str | None:
    """The ETag every read of the pass input ``input_key`` must find: the caller's object's, which the S3 event named
    (None when it named none); a pass output is the job's own."""
    return None if input_key.startswith(_work(job, "")) else (job.get("etag") or None)


# ------------------------------------------------------------------------------------------ steps


def plan(store: StreamStore, job: dict[str, Any], defaults: Defaults, *, router: Any = None) -> dict[str, Any]:
    """First step: the run's settings from the object's fields and the defaults, then pass 1's windows.
    Bad content ends the job in ``failed/`` (``done``), as for inline jobs, and so do policies ``router`` does not
    admit (400 ``invalid_flow``, as ``compactor compact`` and the inline job answer), before any window is planned:
    every worker would fail on them, and the job wrote the transcript unchanged as its result."""
    from pydantic import ValidationError

    from compactor.compaction.windows import RunState, Settings, admission_probe
    from compactor.container import get_router
    from compactor.errors import InvalidFlow
    from compactor.flow import FlowAdmissionError
    from compactor.formats import WINDOWED_FORMATS
    from compactor.models import CompactRequest
    from compactor.object_jobs import fields_failed, not_a_transcript
    from compactor.transcript_stream import fields_from, whole_read_mode
    from compactor.transcripts import NotChat, NotJSON, TranscriptError

    source = source_of(job)
    rel = relative_key(source.key)
    stored = StoredObject(b"", source.version_id, source.etag)
    if rel is None:
        return {"done": True, "result": "skipped"}
    fields: dict[str, Any] = {}
    try:
        open_source = partial(store.open, source.bucket, source.key, version_id=source.version_id,
                              etag=source.etag or None)
        fields = fields_from(open_source)
        body: dict[str, Any] = {**defaults.fields, **fields, "messages": []}
        # Its fields validated first, as the inline job validates them (422, an unknown format among them), before
        # what only an object this large is refused for (413)
        CompactRequest.model_validate(body)
        if body.get("restorable") is True:
            return _too_large(store, source, stored, rel, f"{_this_large(job)} are compacted in windows, which "
                                                          "keep no restorable archives")
        mode = whole_read_mode(open_source, fields, defaults.fields)  # the mode a smaller object runs in
        if mode != "decision":
            return _too_large(store, source, stored, rel, too_large_for_its_mode(mode, body, _this_large(job)))
        body["mode"] = "decision"  # the preset's decision policy applies when none is named
        request = CompactRequest.model_validate(body)
        settings = Settings.from_request(request)
        try:
            admission_probe(settings, router or get_router())
        except FlowAdmissionError as exc:
            raise InvalidFlow.rejected(exc) from exc
        try:
            windows_key = _plan_pass(store, job, RunState.begin(settings), source.key, source.version_id)
        except NotChat as exc:
            # An object naming no format is read as chat until an Anthropic message shows it is not: the scan
            # meets it before any task is written, and the object is planned again as anthropic-messages.
            if "format" in fields or exc.format is None:
                raise
            settings = Settings(**{**settings.__dict__, "format": exc.format})
            windows_key = _plan_pass(store, job, RunState.begin(settings), source.key, source.version_id)
    except SourceChanged:  # no window ran: nothing to record or bill
        return {"done": True, "result": "skipped", "reason": REPLACED}
    except InvalidRequest as exc:  # an inadmissible policy; pinned_indices past the transcript's messages, known
        # once it is counted
        return _recorded(_write_failure(store, source, stored, rel, Failure(exc.status, exc.body()["error"]),
                                        conditional=True))
    except NotChat as exc:
        try:  # the refusal reads the object again (only when a format is named): it may have been replaced since
            refusal = exc.refusal if fields.get("format") is not None else None
        except SourceChanged:
            return {"done": True, "result": "skipped", "reason": REPLACED}
        if refusal is not None:
            # its named format's items plainly are of another: the 422 the inline job, the API and the CLI answer in
            # the same words (docs/formats.md "The declared format"), not a 413 for a size windows would read
            return _recorded(_write_failure(store, source, stored, rel,
                                            not_a_transcript(TranscriptError(refusal), json_invalid=False),
                                            conditional=True))
        named = (f"; it names openai-chat, so it is not read as {exc.format} (name that format, or none, to compact it "
                 f"in windows)") if exc.format is not None else ""
        smaller = (f"up to {job['inline_max_bytes']} bytes" if isinstance(job.get("inline_max_bytes"), int)
                   else "a smaller one")
        return _too_large(store, source, stored, rel, f"{_this_large(job)} are compacted in windows, which read "
                                                      f"{' and '.join(WINDOWED_FORMATS)} only: {exc}{named} ({smaller} "
                                                      f"is compacted as one request, in its own format)")
    except TranscriptError as exc:
        return _recorded(_write_failure(store, source, stored, rel,
                                        not_a_transcript(exc, json_invalid=isinstance(exc, NotJSON)), conditional=True))
    except ValidationError as exc:
        return _recorded(_write_failure(store, source, stored, rel, fields_failed(exc), conditional=True))
    return _next_pass(job, windows_key)


def too_large_for_its_mode(mode: str, body: dict[str, Any], large: str = "transcripts this large") -> str:
    """Why a transcript over the windowed size is refused in ``mode`` (any but decision, docs/scale.md), ``body`` its
    fields over the defaults: when it names no mode, which mode it was inferred to run in, and how to window it.
    ``large``: what transcripts (:func:`_this_large`)."""
    if body.get("mode") is not None:
        return f"{large} are compacted in decision mode only"
    return (f"{large} are compacted in decision mode only; this request body names no mode and no "
            f"decision_policy_ir, so it runs in {mode} mode, as the API infers it (name mode 'decision' to compact it "
            f"in windows)")


def _too_large(store: StreamStore, source: Any, stored: StoredObject, rel: str, message: str) -> dict[str, Any]:
    """End the job in ``failed/<rel>`` with a 413: what an object this large cannot be (docs/scale.md)."""
    return _recorded(_write_failure(store, source, stored, rel, Failure(413, RequestTooLarge(message).body()["error"]),
                                    conditional=True))


def _plan_pass(store: StreamStore, job: dict[str, Any], state: Any, input_key: str,
               input_version: str | None) -> str:
    """Scan the pass input, write its window tasks and the list of them; save the run state. The keys of the
    caller's object are checked by the scan, which reads it whole before the rest reads it again (the same version:
    unchecked); a pass output, which ``ArrayWriter`` wrote, is read unchecked (docs/scale.md "Streaming")."""
    from compactor.compaction.windows import windows
    from compactor.side_by_side import side_by_side

    bucket, format = job["bucket"], state.settings.format
    number = state.number + 1
    ours = input_key.startswith(_work(job, ""))
    etag = _pinned(job, input_key)
    # The same bytes at every read: a version, or the ETag the event named (an unversioned object may be replaced
    # between reads: a read then raises SourceChanged rather than mix two objects' messages)
    same_bytes = ours or input_version is not None or etag is not None

    def read(keys_checked: bool) -> Iterator[dict[str, Any]]:
        return _messages(store, bucket, input_key, input_version, format, keys_checked=keys_checked, etag=etag)

    context = state.scan(read(not ours), reread=lambda: read(not same_bytes))
    items = []

    def tasks() -> Iterator[tuple[str, bytes]]:
        """Each window's task key and JSON, encoded here, on the scan's thread: a task handed to a writing thread
        is bytes, nothing the scan may still change (and holds only its bytes while in flight)."""
        for task in windows(read(not same_bytes), context,
                            state.pass_settings()):
            task_key, data = _work(job, f"p{number}/w{task['index']}.json"), _json_bytes(task)
            items.append({"task_key": task_key, "result_key": _work(job, f"p{number}/w{task['index']}.result.json"),
                          "task_bytes": len(data)})
            yield task_key, data

    # The scan goes on while the tasks before are written, up to WINDOWS_AT_ONCE of them in flight.
    for _ in side_by_side(lambda keyed: _put_bytes(store, bucket, *keyed), tasks(), at_once=WINDOWS_AT_ONCE,
                          weight=lambda keyed: len(keyed[1]), max_weight=TASK_BYTES_IN_FLIGHT):
        pass
    windows_key = _work(job, f"p{number}/windows.json")
    _put_json(store, bucket, windows_key, items)
    _put_json(store, bucket, _work(job, RUN_STATE), {"state": state.as_dict(), "input_key": input_key,
                                                        "input_version": input_version, "windows_key": windows_key})
    return windows_key


async def run_window(store: StreamStore, bucket: str, item: dict[str, Any], *, router: Any, deadline: Any) -> None:
    """One Distributed Map item: compact its task, write its result. Failures raise (the Map
    tolerates them; the window keeps its original)."""
    from compactor.compaction.windows import compact_window

    task = _get_json(store, bucket, item["task_key"])
    result = await compact_window(task, router=router, deadline=deadline)
    _put_json(store, bucket, item["result_key"], result)


def assemble(store: StreamStore, job: dict[str, Any], *, windows_key: str | None = None) -> dict[str, Any]:
    """After the Map: concatenate the pass's results; plan the next pass or write the final result.
    ``windows_key`` names the pass the Map ran: when the saved state has moved past it, this is a retry of an
    assemble that planned the next pass (its answer was lost), and that pass is what follows; assembling again
    read the next pass's windows, which have no results yet, as all failed and ended the job there."""
    from compactor.compaction.windows import RunState
    from compactor.side_by_side import side_by_side
    from compactor.transcript_stream import ArrayWriter

    bucket = job["bucket"]
    saved = _get_json(store, bucket, _work(job, RUN_STATE))
    if windows_key is not None and saved["windows_key"] != windows_key:
        return _next_pass(job, saved["windows_key"])
    delivered = _delivered(store, job, saved.get(FINAL))
    if delivered is not None:  # a retry of the assemble that wrote the result and failed on its billing record: it
        # assembled the pass again (every window's task and result read, the output and the final state written again)
        return delivered
    state = RunState.from_dict(saved["state"])
    items = _get_json(store, bucket, saved["windows_key"])
    output_key = _work(job, f"p{state.number + 1}/output.json")
    try:
        with store.open_writer(bucket, output_key, content_type=JSON_CONTENT_TYPE, metadata={}) as out:
            writer = ArrayWriter(out)
            assembly = state.assembly(writer.write)
            # In order, the next windows read while this one is added: up to WINDOWS_AT_ONCE in flight.
            for task, result in side_by_side(lambda item: (_get_json(store, bucket, item["task_key"]),
                                                           _result(store, bucket, item["result_key"])),
                                             items, at_once=WINDOWS_AT_ONCE, max_weight=TASK_BYTES_IN_FLIGHT,
                                             weight=lambda item: item.get("task_bytes", UNKNOWN_TASK_BYTES)):
                assembly.add(task, result)
            writer.finish()
            advance, more = state.finish_pass(assembly)
            if not advance:
                raise _Unread
    except _Unread:  # the pass changed nothing: its input stays, and its output, which nothing reads, is not stored
        pass  # (it was: one more PutObject, or a multipart upload's completion)
    if no_window_ran(state):
        return _windows_failed(store, job, state)
    input_key, input_version = (output_key, None) if advance else (saved["input_key"], saved["input_version"])
    if more:
        try:
            return _next_pass(job, _plan_pass(store, job, state, input_key, input_version))
        except SourceChanged:  # the pass changed nothing, and the next reads the caller's object, written again
            return _finished(job, state, result_key(relative_key(job["key"]) or ""), REPLACED)
    # What RecordFailure bills, should billing fail, and what a retry of this step finds.
    _put_json(store, bucket, _work(job, RUN_STATE), {**saved, FINAL: state.as_dict()})
    key, skipped = _write_result(store, job, state, input_key, input_version)
    return _finished(job, state, key, skipped)


class _Unread(Exception):
    """Raised in ``assemble``'s output writer to discard the output (the store's writer aborts on an exception)."""


def _finished(job: dict[str, Any], state: Any, key: str, skipped: str | None) -> dict[str, Any]:
    """The outcome of a job whose result was written (or kept from a newer version), with its record to bill."""
    outcome = {"done": True, "result": "compacted", "key": key, "record": call_record(state)}
    return outcome if skipped is None else {**outcome, "result": "skipped", "reason": skipped}


def no_window_ran(state: Any) -> bool:
    """Whether every window of the job failed (none left a result): nothing was compacted, and the transcript
    unchanged is no result. A later pass whose windows all failed leaves the pass before it as the result."""
    return bool(state.passes) and all(p["failed_windows"] == p["windows"] > 0 for p in state.passes)


def _windows_failed(store: StreamStore, job: dict[str, Any], state: Any) -> dict[str, Any]:
    """End a job whose every window failed in ``failed/<rel>`` (500 ``job_failed``), with the record of that
    failure: observed with the caller's status, never billed (docs/billing.md). It used to write the transcript
    unchanged to ``compacted/<rel>`` with status 200, billed."""
    cause = "every window's worker failed"
    recorded = _job_failed(store, job, cause)
    return {**recorded, "record": _failure_record(state, recorded["status"], cause)}


def _failure_record(state: Any, status: int, cause: str | None,
                    unassembled: list[dict[str, Any]] | None = None) -> CallRecord:
    """The record of a job that failed once its windows had run, as any failed compaction's (docs/billing.md, "A
    failed call's fields"): the caller's status and error, the transcript's ``bytes_in``, no ``bytes_out`` and no
    ``target_met`` (nothing was delivered), the model calls, fallbacks and tokens of every window that left a
    result (the finished passes', and ``unassembled``, those of the pass that failed), and its cost unknown (a
    window that left none may have paid for model calls first, docs/behaviour.md#cost-rules). It used to leave out
    the failed pass's windows and say ``bytes_out`` = ``bytes_in`` and ``target_met: false``, a result's figures."""
    record = call_record(state)
    done = unassembled or []
    tokens_in = (record.tokens_in or 0) + sum(result.get("tokens_in", 0) for result in done)
    tokens_out = (record.tokens_out or 0) + sum(result.get("tokens_out", 0) for result in done)
    return replace(record, status=status, body={"error": _job_failure_error(cause)}, cost_usd=None, bytes_out=None,
                   target_met=None, model_calls=record.model_calls + sum(r.get("model_calls", 0) for r in done),
                   fallbacks=(*record.fallbacks, *(kind for r in done for kind in r.get("fallbacks", ()))),
                   tokens_in=tokens_in or None, tokens_out=tokens_out or None)


def _unassembled_results(store: StreamStore, bucket: str, windows_key: str) -> list[dict[str, Any]]:
    """What the windows of a pass not yet assembled (a failed execution's last pass) counted in the results they
    left (their calls, fallbacks and tokens, not their messages), read as ``assemble`` reads them."""
    from compactor.side_by_side import side_by_side

    counted = ("model_calls", "fallbacks", "tokens_in", "tokens_out")

    def counts(item: dict[str, Any]) -> dict[str, Any] | None:
        result = _result(store, bucket, item["result_key"])
        return None if result is None else {name: result[name] for name in counted if name in result}

    items = _get_json(store, bucket, windows_key)
    found = side_by_side(counts, items, at_once=WINDOWS_AT_ONCE, max_weight=TASK_BYTES_IN_FLIGHT,
                         weight=lambda item: item.get("task_bytes", UNKNOWN_TASK_BYTES))
    return [result for result in found if result is not None]


def call_record(state: Any) -> CallRecord:
    """The finished job's record, what its metrics, billing line and ledger entry read (docs/billing.md):
    the run's totals over every window and pass, on the S3 path's route as the inline job's record."""
    from compactor.compaction.windowed import run_record

    return run_record(state).with_route(ROUTE)


def _result(store: StreamStore, bucket: str, key: str) -> dict[str, Any] | None:
    """A window's result, None when its worker wrote none (the window keeps its original): one request, where a
    head and then a read made two for every window."""
    found = store.get_if_exists(bucket, key, max_bytes=RESULT_MAX_BYTES)
    return None if found is None else json.loads(found.body)


def _write_result(store: StreamStore, job: dict[str, Any], state: Any, input_key: str,
                  input_version: str | None) -> tuple[str, str | None]:
    """The result object around the last input: a pass's output (``assemble`` wrote it as an ``ArrayWriter``
    array) is copied as it is; the transcript itself (no pass changed it) is read message by message. Written
    as the inline job writes its result (``object_jobs._put_once``): never over a result of this version or of a
    newer one, and only if the key is still as seen when the write completes; then ``failed/<rel>`` keeps no other
    outcome (``object_jobs.settle``: a failure recorded while this job ran, say, is deleted). The key and why it was
    not written or was withdrawn (None when it was, or was already by this job)."""
    from compactor.compaction.windowed import run_record, write_body, write_body_of_array

    source = source_of(job)
    rel = relative_key(source.key)
    assert rel is not None
    key = result_key(rel)
    head = store.head(source.bucket, key)
    existing = head.metadata if head is not None else None
    if same_version(existing, source):  # this job's own result: a retried assemble (billing failed after it)
        return key, _settled(store, source, key)
    if newer_exists(existing, source):  # an older version's job ending late (docs/behaviour.md#the-s3-path)
        return key, NEWER
    metadata = result_metadata(source, StoredObject(b"", source.version_id, source.etag), 200)
    summary = run_record(state).body
    try:
        with store.open_writer(source.bucket, key, content_type=JSON_CONTENT_TYPE, metadata=metadata,
                               conditional=True, replacing=head.etag if head is not None else None) as out:
            if input_version is None and input_key.startswith(_work(job, "")):
                with store.open(source.bucket, input_key) as array:
                    write_body_of_array(out, array, summary)
            else:
                # The caller's object, which plan's scan read whole, its keys checked: unchecked when the same bytes
                # (its version, or its ETag, else SourceChanged: the upload of the result is then aborted)
                etag = _pinned(job, input_key)
                write_body(out, _messages(store, source.bucket, input_key, input_version, state.settings.format,
                                          keys_checked=input_version is None and etag is None, etag=etag),
                           summary, messages_only=False)
    except WriteRefused:
        return key, CONCURRENT
    except SourceChanged:
        return key, REPLACED
    return key, _settled(store, source, key)


def _settled(store: StreamStore, source: Source, key: str) -> str | None:
    """Why this job's result was withdrawn once written (``object_jobs.settle``: a newer version's failure is in
    ``failed/<rel>``), None when it stands."""
    withdrawn = settle(store, source, key)
    return None if withdrawn is None else withdrawn.reason


def fail(store: StreamStore, job: dict[str, Any], error: Any = None) -> dict[str, Any]:
    """The execution failed (a step ran out of retries): record ``failed/<rel>`` (status 500; the
    message names the Step Functions error, never its cause, which may quote content), with the record of that
    failure once windows were planned (observed with its status, never billed: docs/billing.md). A job whose result
    was written already (``assemble`` failed after it, writing the billing record) is not a failure: its
    outcome is returned with its record, for the step to bill, and no ``failed/<rel>`` contradicts it."""
    source = source_of(job)
    rel = relative_key(source.key)
    if rel is None:
        return {"done": True, "result": "skipped"}
    saved = store.get_if_exists(source.bucket, _work(job, RUN_STATE), max_bytes=RESULT_MAX_BYTES)
    run = None if saved is None else json.loads(saved.body)
    final = None if run is None else run.get(FINAL)
    if final is None:  # saved apart by an assemble before FINAL
        found = store.get_if_exists(source.bucket, _work(job, FINAL_STATE), max_bytes=RESULT_MAX_BYTES)
        final = None if found is None else json.loads(found.body)
    delivered = _delivered(store, job, final)
    if delivered is not None:
        return delivered
    name = error.get("Error") if isinstance(error, dict) and isinstance(error.get("Error"), str) else None
    cause = name[:100] if name else None
    recorded = _job_failed(store, job, cause)
    if run is None:  # no window was planned: nothing ran to observe
        return recorded
    from compactor.compaction.windows import RunState

    state = RunState.from_dict(run["state"])
    unassembled = _unassembled_results(store, source.bucket, run["windows_key"])
    return {**recorded, "record": _failure_record(state, recorded["status"], cause, unassembled)}


def _job_failure_error(cause: str | None) -> dict[str, Any]:
    return JobFailed("the windowed compaction job failed" + (f" ({cause})" if cause else "")).body()["error"]


def _job_failed(store: StreamStore, job: dict[str, Any], cause: str | None) -> dict[str, Any]:
    """Write ``failed/<rel>`` (500 ``job_failed``) as results are written; ``repeated`` when this job's own
    failure was there already (a retried step: its outcome is counted once)."""
    source = source_of(job)
    rel = relative_key(source.key)
    assert rel is not None
    failure = Failure(500, _job_failure_error(cause))
    written = _write_failure(store, source, StoredObject(b"", source.version_id, source.etag), rel, failure,
                             conditional=True)
    return {**_recorded(written), "key": failure_key(rel), "status": failure.status}


def _recorded(written: Any) -> dict[str, Any]:
    """A step's outcome once it wrote ``failed/<rel>`` (``object_jobs._write_failure``'s outcome): ``repeated`` when
    this job's own failure was there already, a retried step whose outcome was counted by the first."""
    outcome: dict[str, Any] = {"done": True, "result": "failed"}
    return {**outcome, "repeated": True} if written.result == "skipped" and written.reason == REPEATED else outcome


def _delivered(store: StreamStore, job: dict[str, Any], final: dict[str, Any] | None) -> dict[str, Any] | None:
    """The finished job's outcome when ``assemble`` wrote its result (this version's, or kept a newer version's, or
    withdrew its own for a newer version's failure) before failing, else None. ``final`` is the final run state
    ``assemble`` saved first (None: it saved none), its record rebuilt from it."""
    from compactor.compaction.windows import RunState

    if final is None:
        return None
    source = source_of(job)
    rel = relative_key(source.key)
    assert rel is not None
    key = result_key(rel)
    head = store.head(source.bucket, key)
    existing = head.metadata if head is not None else None
    state = RunState.from_dict(final)
    if same_version(existing, source):  # and settled, should the step have failed between its write and settling
        return _finished(job, state, key, _settled(store, source, key))
    if newer_exists(existing, source):
        return _finished(job, state, key, NEWER)
    failure = store.head(source.bucket, failure_key(rel))
    if failure is not None and newer_exists(failure.metadata, source):  # the result withdrawn once written: a newer
        return _finished(job, state, key, NEWER)  # version's failure was there (object_jobs.settle)
    return None
