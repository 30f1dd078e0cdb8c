"""The S3 path's jobs (docs/behaviour.md#the-s3-path), storage-agnostic: one uploaded object in, one result object out.

An object under ``incoming/<rel>`` (a ``/v1/compact`` request body, a bare messages array, an object
with ``messages`` or JSONL, in any format of docs/formats.md) becomes ``compacted/<rel>`` holding the
``/v1/compact`` response body (for a Claude Code session or a Codex rollout: the session file itself,
compacted, every other line unchanged), or
``failed/<rel>`` holding ``{"error", "status", "detail"?, "source"}`` when its content is bad. Pure
Python: the storage is any :class:`ObjectStore` (``compactor_aws.s3_store`` on AWS, a dict in tests).

Idempotency: every result carries the source's version id and ETag in its metadata, and results are
serialised deterministically (compact JSON, keys in the service's order, the service's timings left out). A result
is written only where none is: a conditional write (``If-None-Match: *``), so concurrent deliveries of
one event store one result and the stored bytes never change. Only when that write is refused is the
existing object looked at: one of the same source version (``already processed``) or of a newer
version of the key (S3 ``sequencer``) stays, an older version's is replaced conditionally on its
ETag. On the deployed path a redelivered event never gets here: the version's idempotency record
answers it before the object is read (``compactor_aws.billing.run_object_job``,
docs/performance.md#where-the-time-goes).

Defaults (``COMPACTOR_S3_DEFAULTS``): a JSON object of ``/v1/compact`` request fields (``mode``,
``keep_recent``, ``target_ratio``, …). Fields in the object win over the defaults. The mode is chosen
as ``compactor compact`` chooses it (``compactor.transcripts.Transcript.compact_body``): a request
body is inferred exactly as the API infers it, a bare transcript runs in ``decision`` mode unless the
defaults name a ``mode`` (docs/behaviour.md, "Compaction modes").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, Literal, Protocol

from compactor.call_record import counting_calls, crashed
from compactor.errors import InvalidTranscript, JobFailed, KeyTooLong, RequestTooLarge
from compactor.jsonutil import BYTE_ORDER_MARK, JSONLimitError, bounded_loads, dense_dumps
from compactor.records import record

INCOMING_PREFIX = "incoming/"
COMPACTED_PREFIX = "compacted/"
FAILED_PREFIX = "failed/"
MAX_OBJECT_BYTES = 64 * 1024 * 1024
"""Largest transcript object read (far above the API's 6 MB payload limit)."""

DEFAULTS_ENV = "COMPACTOR_S3_DEFAULTS"
JSON_CONTENT_TYPE = "application/json"
ROUTE = "s3_compact"
"""The route S3 jobs are metered and billed under, inline or windowed (docs/billing.md)."""
JSONL_CONTENT_TYPE = "application/x-ndjson"

# User metadata (x-amz-meta-*) of result objects: which source version they were computed from.
META_VERSION = "source-version-id"
META_ETAG = "source-etag"
META_SEQUENCER = "source-sequencer"
META_STATUS = "compactor-status"
NO_VERSION = "null"  # S3's own name for the version id of an object written while versioning was off


class ConfigError(ValueError):
    """The function's configuration (``COMPACTOR_S3_DEFAULTS``) is unusable: an operator must fix it."""


class ObjectTooLarge(Exception):
    """Raised by a store when an object exceeds the size it was allowed to read."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"object is {size} bytes, over the {limit}-byte limit")
        self.size, self.limit = size, limit


class SourceChanged(Exception):
    """Raised by a store when the object read is no longer the one its job was started for (its ETag differs: the key
    was written again meanwhile). A job reading an object several times must not mix two versions' bytes."""


@record(frozen=True)
class StoredObject:
    """What a store's ``get`` returns: the bytes and the identity of the version read."""

    body: bytes
    version_id: str | None
    etag: str


@record(frozen=True)
class ObjectHead:
    """What a store's ``head`` returns: the object's user metadata, its ETag and its version id (None where the
    store has none, or the bucket no versioning)."""

    metadata: Mapping[str, str]
    etag: str
    version_id: str | None = None


class ObjectStore(Protocol):
    def get(self, bucket: str, key: str, *, version_id: str | None, max_bytes: int) -> StoredObject: ...

    def get_if_exists(self, bucket: str, key: str, *, max_bytes: int) -> StoredObject | None:
        """The current version's bytes (as :meth:`get`), None when ``key`` does not exist."""
        ...

    def head_metadata(self, bucket: str, key: str) -> Mapping[str, str] | None: ...

    def head(self, bucket: str, key: str) -> ObjectHead | None: ...

    def put(self, bucket: str, key: str, body: bytes, *, content_type: str, metadata: Mapping[str, str]) -> None: ...

    def put_if(self, bucket: str, key: str, body: bytes, *, content_type: str, metadata: Mapping[str, str],
               replacing: str | None) -> bool:
        """Write only if the key still is as seen: absent (``replacing`` None) or holding the object whose
        ETag is ``replacing``. False when it changed meanwhile (another delivery wrote first)."""
        ...

    def delete_if(self, bucket: str, key: str, *, etag: str, version_id: str | None = None) -> bool:
        """Delete the object looked at: with ``version_id`` (a versioned bucket's, :func:`version_of`), that version
        itself, which never removes an object written since; else ``key`` only if it still holds the object whose ETag
        is ``etag``. False when it changed meanwhile or is gone (without ``version_id``)."""
        ...


class WriteRefused(Exception):
    """A conditional streamed write the store refused: the key changed while it was written (another writer was
    first). Nothing was stored."""


@record(frozen=True)
class Defaults:
    """Parsed ``COMPACTOR_S3_DEFAULTS``."""

    fields: Mapping[str, Any] = field(default_factory=dict)


@record(frozen=True)
class Source:
    """The object an S3 event names (key already URL-decoded)."""

    bucket: str
    key: str
    version_id: str | None = None
    etag: str = ""
    sequencer: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "key": self.key, "version_id": self.version_id, "etag": self.etag}


@record(frozen=True)
class Failure:
    """Bad content: recorded under ``failed/`` with the status the API would have answered."""

    status: int
    error: dict[str, Any]
    detail: list[dict[str, Any]] | None = None


@record(frozen=True)
class Outcome:
    """What one job did: ``compacted`` / ``failed`` (written), ``skipped`` (nothing to do), ``started``
    (a windowed job for a large object: its state machine writes the result)."""

    result: Literal["compacted", "failed", "skipped", "started"]
    source: Source
    key: str | None = None
    status: int | None = None
    reason: str | None = None
    already_compacted: int | None = None
    """A session file's items before its harness's own last compaction, left out and written back as they are
    (``Transcript.already_compacted``); None for other transcripts."""
    billing: str | None = None
    """What the on-failure destination billed for a job whose result was written (:func:`record_gave_up`)."""
    found: Mapping[str, str] | None = field(default=None, compare=False)
    """The user metadata of this version's result, found written by an earlier attempt (``skipped``, ``already
    processed``): what it is billed (``compactor.billing.ResultBill``) when an attempt crashed between writing it and
    billing it (docs/billing.md). Not part of :meth:`as_dict`."""

    def as_dict(self) -> dict[str, Any]:
        out = {"result": self.result, "source": self.source.as_dict(), "key": self.key, "status": self.status}
        if self.already_compacted is not None:
            out["already_compacted"] = self.already_compacted
        if self.billing is not None:
            out["billing"] = self.billing
        return {**out, "reason": self.reason} if self.reason else out


# --------------------------------------------------------------------------------------------- keys


def relative_key(key: str) -> str | None:
    """``<rel>`` of ``incoming/<rel>``; None for keys outside ``incoming/`` and for "folder" markers."""
    if not key.startswith(INCOMING_PREFIX):
        return None
    rel = key[len(INCOMING_PREFIX):]
    return rel if rel and not rel.endswith("/") else None


MAX_KEY_BYTES = 1024
"""S3's longest key (UTF-8 bytes): ``compacted/<rel>`` is one byte longer than ``incoming/<rel>``."""


def result_key(rel: str) -> str:
    return COMPACTED_PREFIX + rel


def failure_key(rel: str) -> str:
    return FAILED_PREFIX + rel


def normalize_etag(etag: str | None) -> str:
    """ETags without the quotes S3 puts around them in HTTP headers (events carry them bare)."""
    return (etag or "").strip().strip('"')


# ------------------------------------------------------------------------------------------ defaults


def load_defaults(text: str | None) -> Defaults:
    """Parse ``COMPACTOR_S3_DEFAULTS`` (empty or unset: the API's field defaults)."""
    if text is None or not text.strip():
        return Defaults()
    try:  # within the bodies' limits: json.loads raised RecursionError on a deep value, failing every event
        data = bounded_loads(text)
    except JSONLimitError as exc:
        raise ConfigError(f"{DEFAULTS_ENV} is not JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{DEFAULTS_ENV} must be a JSON object")
    from compactor.models import COMPACT_FIELDS

    unknown = sorted(set(data) - set(COMPACT_FIELDS))
    if unknown:
        raise ConfigError(f"{DEFAULTS_ENV}: unknown field(s) {', '.join(unknown)}")
    from pydantic import ValidationError

    from compactor.models import CompactRequest

    try:  # the defaults alone must make a valid request
        CompactRequest.model_validate({**data, "messages": []})
    except ValidationError as exc:
        from compactor.errors import describe_validation

        # in the words of the CLI's line (docs/behaviour.md): pydantic's own text spread over lines with its
        # "Value error, " prefixes, the values and a web address for each problem
        raise ConfigError(f"{DEFAULTS_ENV} is not a valid set of request fields: {describe_validation(exc)}") from exc
    return Defaults(fields=data)


def prepare(defaults: Defaults) -> None:
    """Import the compaction mode of a bare transcript under ``defaults`` (an object's own request body may
    name another), so that it loads while a job waits on a request (docs/performance.md#the-s3-paths-requests)."""
    from compactor.compaction import modes
    from compactor.transcripts import TRANSCRIPT_MODE

    modes.get(defaults.fields.get("mode") or TRANSCRIPT_MODE)


# ----------------------------------------------------------------------------------- request building


def _invalid(msg: str, detail: list[dict[str, Any]], status: int = 422) -> Failure:
    return Failure(status, InvalidTranscript(msg).body()["error"], detail)


def not_a_transcript(exc: Exception, *, json_invalid: bool) -> Failure:
    """The 422 of an object that is not a transcript, as an inline job and a windowed one record it: its ``detail``
    is ``json_invalid`` when the API would refuse the bytes as JSON (``json_invalid``: an inline job parses the text
    once more, a windowed job's streamed reading raises ``NotJSON``), else ``value_error``."""
    detail = {"type": "json_invalid", "loc": ["body"], "msg": "JSON decode error", "ctx": {"error": str(exc)}} \
        if json_invalid else {"type": "value_error", "loc": ["body"], "msg": str(exc), "ctx": {"error": str(exc)}}
    return _invalid(f"not a transcript: {exc}", [detail])


def fields_failed(exc: Any) -> Failure:
    """The 422 of an object whose request fields fail validation (``exc``, pydantic's ``ValidationError``), as an
    inline job and a windowed one record it: the API's detail items, each ``loc`` from ``"body"``."""
    from compactor.http_api import validation_detail

    detail = validation_detail(exc.errors())["detail"]
    for item in detail:
        item["loc"] = ["body", *item["loc"]]
    return _invalid(InvalidTranscript.FIELDS_FAILED, detail)


def build_request(body: bytes, defaults: Defaults) -> Any:
    """A validated ``CompactRequest`` for this object, or the :class:`Failure` to record.

    Errors follow the API's 422 ``detail`` items (``loc`` starts with ``"body"``)."""
    return _build(body, defaults)[0]


def _build(body: bytes, defaults: Defaults) -> tuple[Any, Any]:
    """``(request or Failure, transcript or None)``: the transcript writes a session file back."""
    from pydantic import ValidationError

    from compactor.transcripts import TranscriptError, read_transcript
    from compactor.models import CompactRequest

    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _invalid("the object is not UTF-8 text",
                        [{"type": "json_invalid", "loc": ["body", exc.start], "msg": "JSON decode error",
                          "ctx": {"error": "invalid UTF-8"}}]), None
    try:
        transcript = read_transcript(text)
    except TranscriptError as exc:
        if not text.strip():
            return _invalid("the object is empty", [{"type": "missing", "loc": ["body"], "msg": "Field required"}]), None
        return not_a_transcript(exc, json_invalid=_not_json(text)), None
    try:
        return CompactRequest.model_validate(transcript.compact_body(defaults.fields)), transcript
    except ValidationError as exc:
        return fields_failed(exc), None


def _not_json(text: str) -> bool:
    """Whether the API refuses ``text`` (the object decoded, a first byte order mark skipped) as JSON: a mark left is
    a second one, which ``bounded_loads`` would skip as a first."""
    if text.startswith(BYTE_ORDER_MARK):
        return True
    try:
        bounded_loads(text)
    except JSONLimitError:
        return True
    return False


# ------------------------------------------------------------------------------------- result bodies


def result_metadata(source: Source, stored: StoredObject, status: int) -> dict[str, str]:
    """x-amz-meta of a result: the source version it was computed from (ASCII only)."""
    meta = {META_VERSION: stored.version_id or NO_VERSION, META_ETAG: normalize_etag(stored.etag),
            META_STATUS: str(status)}
    if source.sequencer:
        meta[META_SEQUENCER] = source.sequencer
    return meta


def failure_body(failure: Failure, source: Source) -> dict[str, Any]:
    body: dict[str, Any] = {"error": failure.error, "status": failure.status}
    if failure.detail is not None:
        body["detail"] = failure.detail
    body["source"] = source.as_dict()
    return body


VOLATILE_KEYS = frozenset({"latency_ms", "backoff_ms"})
"""Fields of an answer that differ between two runs on the same input (timings): not stored."""
ITEM_FIELDS = frozenset({"messages", "input"})
"""The fields of a body holding the transcript's items (each format's items field, docs/formats.md): stored as
they are. A harness's own fields beside the chat ones (a ``latency_ms`` of a step, say) are content, never
timings of this service's run."""


def encode(body: Any) -> bytes:
    """The stored bytes of a result: compact JSON without :data:`VOLATILE_KEYS` outside the transcript's items
    (:data:`ITEM_FIELDS`), the same for the same compaction (docs/reliability.md)."""
    if isinstance(body, dict):
        stable = {key: item if key in ITEM_FIELDS else _stable(item) for key, item in body.items()
                  if key not in VOLATILE_KEYS}
        return dense_dumps(stable).encode("utf-8")
    return dense_dumps(_stable(body)).encode("utf-8")


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _stable(item) for key, item in value.items() if key not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value


def same_version(metadata: Mapping[str, str] | None, source: Source) -> bool:
    """Whether an existing result was computed from the version this event names. Where both S3 sequencers are known
    they name the same write: in a bucket without versioning the ETag alone took a later write of the same bytes (a
    revert) for the earlier write, whose outcome an intervening version's then deleted as older."""
    if not metadata:
        return False
    recorded = metadata.get(META_SEQUENCER)
    if _later(recorded, source.sequencer) or _later(source.sequencer, recorded):
        return False
    if source.version_id is not None:
        return metadata.get(META_VERSION) == source.version_id and (
            not source.etag or metadata.get(META_ETAG) == normalize_etag(source.etag))
    return bool(source.etag) and metadata.get(META_ETAG) == normalize_etag(source.etag)


def newer_exists(metadata: Mapping[str, str] | None, source: Source) -> bool:
    """Whether an existing result comes from a later write of the key (S3 sequencers, same key)."""
    return _later((metadata or {}).get(META_SEQUENCER), source.sequencer)


def _later(one: str | None, other: str | None) -> bool:
    """Whether the write of S3 sequencer ``one`` came after that of ``other`` (the same key); False when either is
    unknown or not hexadecimal. Sequencers may differ in length: the shorter is right-padded with zeros, then the two
    are compared as strings, as S3's event message structure says (docs/scale.md, "One outcome per object"); comparing
    them as numbers left-padded the shorter one and could order two writes backwards."""
    if not (one and other):
        return False
    width = max(len(one), len(other))
    one, other = one.upper().ljust(width, "0"), other.upper().ljust(width, "0")
    if not all(character in _HEX for character in one + other):
        return False
    return one > other


_HEX = frozenset("0123456789ABCDEF")


# ----------------------------------------------------------------------------------------- the job


Observer = Callable[[Any, float, float], None]
"""``observe(record, started_at, ended_at)``: called with the core's ``CallRecord`` once per compaction run
(``time.time()`` bounds), e.g. to emit metrics and the billing record; skipped jobs run nothing."""


Launcher = Callable[[Source], Outcome]
"""Starts the windowed job of an object too large for one invocation (docs/scale.md)."""


async def run_job(source: Source, *, store: ObjectStore, defaults: Defaults, deadline: Any,
                  router: Any = None, max_bytes: int | None = None, observe: Observer | None = None,
                  launch: Launcher | None = None, windows_until: Any = None,
                  bill: Callable[[], Mapping[str, str]] | None = None) -> Outcome:
    """Compact one object. Bad content ends in ``failed/``; storage and configuration errors raise
    (so the asynchronous invocation retries, then lands in its on-failure destination). With
    ``launch``, an object over ``max_bytes`` becomes a windowed job instead of a 413; a transcript
    over one request's limits is compacted in windows here (decision mode): with ``windows_until``, each
    window with its own flow budget, none past it, as a windowed job's workers run theirs; else all under
    ``deadline``. ``bill()``, asked once the call is observed, is user metadata the result is written with: what the
    job is billed (``compactor.billing.ResultBill``), so that a step finding the result bills it (docs/billing.md)."""
    from compactor.service import compact_call, compact_large

    rel = relative_key(source.key)
    if rel is None:
        return Outcome("skipped", source, reason="outside incoming/")
    if len(result_key(rel).encode("utf-8")) > MAX_KEY_BYTES:  # its failure's key is shorter than the object's
        too_long = KeyTooLong(f"the object's key is too long for its result: compacted/<rel> may have at most "
                              f"{MAX_KEY_BYTES} bytes")
        return _write_failure(store, source, StoredObject(b"", source.version_id, source.etag), rel,
                              Failure(400, too_long.body()["error"]), conditional=True)
    try:
        limit = MAX_OBJECT_BYTES if max_bytes is None else max_bytes
        stored = store.get(source.bucket, source.key, version_id=source.version_id, max_bytes=limit)
    except ObjectTooLarge as exc:
        if launch is not None:
            return launch(source)
        stored = StoredObject(b"", source.version_id, source.etag)
        return _write_failure(store, source, stored, rel, Failure(413, RequestTooLarge(str(exc)).body()["error"]),
                              conditional=True)
    request, transcript = _build(stored.body, defaults)
    if isinstance(request, Failure):
        return _write_failure(store, source, stored, rel, request, conditional=True)
    started_at = time.time()
    with counting_calls() as counted:
        try:
            # A session file is written back from a single request's manifest (Transcript.write_back): never in windows.
            if request.mode_name == "decision" and transcript.session is None and _exceeds_one_request(request):
                record = await compact_large(request, router=router, until=windows_until,
                                             deadline=deadline if windows_until is None else None)
            else:
                record = await compact_call(request, deadline=deadline, router=router)
        except Exception as error:
            # An exception instead of the record (one no handler expects: a 500): observed with its status and what
            # the job is known to have done (its model calls, and their cost when each is known), then raised as a
            # 5xx is, billed nothing (docs/billing.md). It was in no billing line or call metric.
            if observe is not None:
                observe(crashed(error, counted, mode=request.mode_name, route=ROUTE), started_at, time.time())
            raise
    record = record.with_route(ROUTE)
    if observe is not None:
        observe(record, started_at, time.time())
    status, body = record.answer()
    if status >= 500:
        raise RuntimeError(f"compaction failed with status {status}: {body.get('error', {}).get('code')}")
    if status != 200:
        return _write_failure(store, source, stored, rel, Failure(status, body["error"]), conditional=True)
    key = result_key(rel)
    session = transcript.write_back(record)  # a session file is answered by the session, compacted
    skipped = _put_once(store, source, key, encode(body) if session is None else session.encode("utf-8"),
                        content_type=JSON_CONTENT_TYPE if session is None else JSONL_CONTENT_TYPE,
                        metadata={**result_metadata(source, stored, status), **(bill() if bill is not None else {})})
    return skipped or Outcome("compacted", source, key=key, status=status,
                              already_compacted=transcript.already_compacted)


def delivered(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """The outcome (:meth:`Outcome.as_dict`) of a job that found this version's result written by an earlier attempt
    (``skipped``, ``already processed``) and bills it, the earlier attempt having crashed between writing it and
    billing it: ``compacted``, status 200 (a result is written with no other), as that attempt would have answered
    (docs/billing.md)."""
    return {**{name: value for name, value in outcome.items() if name != "reason"}, "result": "compacted",
            "status": 200}


def _exceeds_one_request(request: Any) -> bool:
    from compactor.compaction.decision import exceeds_one_request  # not the windowed module (docs/performance.md#where-the-time-goes)

    return exceeds_one_request(request)


CONCURRENT = "another delivery wrote the result first"
NEWER = "a newer version was processed"
"""Why an outcome was not written, or was withdrawn: the key's newer version has its own (docs/scale.md)."""
PROCESSED = "already processed"
"""Why an outcome was not written: this version's own is there (a redelivered event, a retried step)."""


def _put_once(store: ObjectStore, source: Source, key: str, body: bytes, *, content_type: str,
              metadata: Mapping[str, str]) -> Outcome | None:
    """Write ``key`` where no object is (one request on the usual path); when one is, keep it if it comes
    from this source version or a newer one, else replace it on the condition that it is still the one
    looked at. Then the other place holds no other outcome (:func:`settle`). None when written, else the
    ``skipped`` outcome."""
    if store.put_if(source.bucket, key, body, content_type=content_type, metadata=metadata, replacing=None):
        return settle(store, source, key)
    head = store.head(source.bucket, key)
    existing = head.metadata if head is not None else None
    if same_version(existing, source):  # a crash may have come between the write and its settling (and billing)
        return settle(store, source, key) or Outcome("skipped", source, key=key, reason=PROCESSED, found=existing)
    if newer_exists(existing, source):
        return Outcome("skipped", source, key=key, reason=NEWER)
    if store.put_if(source.bucket, key, body, content_type=content_type, metadata=metadata,
                    replacing=head.etag if head is not None else None):
        return settle(store, source, key)
    return Outcome("skipped", source, key=key, reason=CONCURRENT)


def settle(store: ObjectStore, source: Source, key: str) -> Outcome | None:
    """Once ``key`` (``compacted/<rel>`` or ``failed/<rel>``) holds this version's outcome, the other place holds
    no other: one outcome per key (docs/scale.md, "One outcome per object"). The other place's object is deleted
    (the version looked at in a versioned bucket, else on its ETag: :func:`_delete`) when it comes from an older
    version, or is this version's failure and ``key`` its result (the result supersedes a failure recorded while a
    retry or a windowed job was still running). This version's own object is withdrawn instead when the other place holds a newer version's outcome,
    or this version's result and ``key`` a failure: the ``skipped`` outcome, else None. Two writers of the two
    places each look at the other's after their own write, so the later one always sees the earlier one's;
    outcomes whose order is unknown (no S3 sequencer on one of them) are left as they are."""
    rel = relative_key(source.key)
    assert rel is not None
    success = key == result_key(rel)
    other = failure_key(rel) if success else result_key(rel)
    if len(other.encode("utf-8")) > MAX_KEY_BYTES:  # nothing there, and S3 answers a HEAD of it 400 KeyTooLongError
        return None
    head = store.head(source.bucket, other)
    order = None if head is None else _order(head.metadata, source)
    if head is not None and (order == "older" or (order == "same" and success)):
        _delete(store, source, other, head, same=success)
    elif order == "newer" or order == "same":
        mine = store.head(source.bucket, key)
        if mine is not None and same_version(mine.metadata, source):
            _delete(store, source, key, mine, same=True)
        return Outcome("skipped", source, key=key, reason=NEWER if order == "newer" else PROCESSED)
    return None


def version_of(head: ObjectHead) -> str | None:
    """The version id that names the object ``head`` looked at, and only it: None without versioning, and for S3's
    ``null`` version (written while versioning was off or suspended), which the next such write replaces."""
    return None if head.version_id in (None, NO_VERSION) else head.version_id


def _delete(store: ObjectStore, source: Source, key: str, head: ObjectHead, *, same: bool) -> None:
    """Delete the outcome ``head`` looked at in ``key`` (an older version's, or this one's). Outcomes are deterministic,
    so two versions' results of the same bytes have the same ETag: a delete on the ETag alone (``If-Match``) removed a
    newer version's result written between the look and the delete, and that version was left with no outcome (its
    upload ``running`` for ever). In a versioned bucket the version looked at is deleted instead, which never removes a
    newer one. Such a delete brings back the version below it, an outcome the deleted one had replaced (an older
    version's, as the deleted one was older than this version, or was this version's own): it goes too, and so on down
    while they come from older versions (or this version, with ``same``); one of unknown order stays."""
    while True:
        version = version_of(head)
        if not store.delete_if(source.bucket, key, etag=head.etag, version_id=version) or version is None:
            return
        below = store.head(source.bucket, key)
        order = None if below is None else _order(below.metadata, source)
        if below is None or not (order == "older" or (order == "same" and same)):
            return
        head = below


def _order(metadata: Mapping[str, str], source: Source) -> Literal["same", "newer", "older"] | None:
    """Where the outcome with ``metadata`` stands against this source version: the same version, a newer or an
    older write of the key (their S3 sequencers), None when unknown."""
    if same_version(metadata, source):
        return "same"
    if newer_exists(metadata, source):
        return "newer"
    return "older" if _later(source.sequencer, metadata.get(META_SEQUENCER)) else None


def _write_failure(store: ObjectStore, source: Source, stored: StoredObject, rel: str, failure: Failure, *,
                   conditional: bool = False) -> Outcome:
    """Write ``failed/<rel>``: ``conditional``ly as results are written (see :func:`_put_once`), else as is."""
    identified = Source(source.bucket, source.key, stored.version_id, normalize_etag(stored.etag), source.sequencer)
    key = failure_key(rel)
    body, metadata = encode(failure_body(failure, identified)), result_metadata(source, stored, failure.status)
    if not conditional:
        store.put(source.bucket, key, body, content_type=JSON_CONTENT_TYPE, metadata=metadata)
        return Outcome("failed", source, key=key, status=failure.status)
    return _put_once(store, source, key, body, content_type=JSON_CONTENT_TYPE, metadata=metadata) or Outcome(
        "failed", source, key=key, status=failure.status)


def record_gave_up(store: ObjectStore, source: Source, cause: str | None, *, windowed: bool = False,
                   bill: Callable[[Mapping[str, str]], str | None] | None = None) -> Outcome:
    """Lambda gave up on the object's job (every attempt raised or timed out, or its event grew too old; the
    function's on-failure destination says so, docs/deploy.md): record ``failed/<rel>``, 500 ``job_failed``
    naming ``cause`` (an error's type, never its message, which may quote content), written as results are
    written (never over a result of this version or a newer one), so that ``GET /v1/jobs/{id}`` answers
    ``failed`` (docs/scale.md). Nothing is written when ``compacted/<rel>`` holds this version's result (another
    delivery of the event wrote it, or only billing failed after it) or a newer version's, nor while the version's
    windowed job runs or once it ended done (``windowed``): that job writes the version's outcome, its result or its
    own failure. Before, a job whose inline attempts crashed after starting it was recorded failed while it ran, and
    its result was later written beside that failure. A failed attempt records nothing: a retry may still
    succeed, and a caller must not read ``failed`` meanwhile.

    This version's result written, ``bill(its metadata)`` bills the job if no attempt could (its ledger write failed on
    every one, or an attempt crashed between writing the result and billing it: docs/billing.md), once however often it
    is called, and says what it did (the outcome's ``billing``: None when there was nothing to bill). Such a job used
    to be delivered and never billed."""
    rel = relative_key(source.key)
    if rel is None or len(result_key(rel).encode("utf-8")) > MAX_KEY_BYTES:
        return Outcome("skipped", source, reason="no job of its own")  # a too-long key records its own 400
    if windowed:
        return Outcome("skipped", source, reason="its windowed job writes its outcome")
    head = store.head(source.bucket, result_key(rel))
    if head is not None and same_version(head.metadata, source):
        return Outcome("skipped", source, key=result_key(rel), reason=PROCESSED,
                       billing=bill(head.metadata) if bill is not None else None)
    if head is not None and newer_exists(head.metadata, source):
        return Outcome("skipped", source, key=result_key(rel), reason=NEWER)
    error = JobFailed("the compaction job failed on every attempt" + (f" ({cause})" if cause else ""))
    return _write_failure(store, source, StoredObject(b"", source.version_id, source.etag), rel,
                          Failure(error.status, error.body()["error"]), conditional=True)
