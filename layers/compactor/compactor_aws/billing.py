"""Billed calls (docs/billing.md): idempotent replay, then exactly one ledger entry, on both front doors.

A POST with ``Idempotency-Key`` runs through Powertools Idempotency, scoped by caller, route and
key: the first request computes and stores ``{status, body or body_ref, facts, time, request_id,
entry_id}``; a retry with the same body gets the stored bytes back (header ``Idempotent-Replayed: true``),
another body is 422, a retry while the first still runs is 409. The S3 path does the same keyed by
the object version. After the result is stored, the ledger entry is written with a conditional
write under an id of that computation (the one kept in the stored record, of the scope and the
computation's time; the object version; or the request id): a retry that finds the result stored writes
the entry the first attempt may have missed, and never a second one, and a key computed again after its
TTL is billed again. A ledger failure fails the call (500 / the Lambda retry), so what was delivered is
what is billed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import field, replace
from functools import cached_property
from typing import Any

from compactor import billing, http_api, idempotency
from compactor.call_record import NO_MODE, CallRecord, counting_calls, crashed
from compactor.container import PerContainer
from compactor.errors import (
    CompactorError,
    IdempotencyInProgress,
    IdempotencyKeyReused,
    IdempotencyUnavailable,
    InvalidIdempotencyKey,
    InvalidRequest,
    InvalidUsageRange,
    ResponseTooLarge,
)
from compactor.jsonutil import dense_dumps
from compactor.records import record
from compactor_aws import background
from compactor_aws.caller import caller_of, calling_as

REPLAYED_HEADER = "Idempotent-Replayed"
S3_CALLER_PREFIX = "s3:"


@record(frozen=True)
class Computed:
    """One call's answer as sent (the body text and its own ``headers``, a router error's ``Retry-After``) and, when the
    call is billed, its billing facts; ``summary``: its observed summary (``compactor_aws.observability.CallSummary``)
    whose billing line waits for its billing to settle (``record_call``'s ``settle_later``)."""

    status: int
    body: str
    facts: dict[str, Any] | None = None
    summary: Any = field(default=None, compare=False)
    headers: dict[str, str] = field(default_factory=dict)


@record(frozen=True)
class Answer:
    """An HTTP answer: status, body and headers."""

    status: int
    body: str
    headers: dict[str, str]


def facts_of(summary: Any) -> dict[str, Any] | None:
    """Billing facts of an observed call (``compactor_aws.observability.CallSummary``); None when the
    call is not billed (not a 2xx, or it could not be observed)."""
    if summary is None or not 200 <= summary.status < 300:
        return None
    return billing.billing_facts(route=summary.route, mode=summary.mode, bytes_in=summary.bytes_in,
                                 bytes_out=summary.bytes_out, model_calls=summary.model_calls,
                                 cost_usd=summary.cost_usd, time=getattr(summary, "time", None))


class Backends:
    """The container's ledger, idempotency persistence and large-response store (from the environment),
    each built on first use: a call without ``Idempotency-Key`` never loads the idempotency utility."""

    @cached_property
    def ledger(self) -> billing.UsageLedger:
        from compactor_aws.ledger import configured_ledger

        return configured_ledger()

    @cached_property
    def layer(self) -> Any:
        from compactor_aws.idempotency import persistence_layer

        return persistence_layer()

    @cached_property
    def config(self) -> Any:
        from compactor_aws.idempotency import new_config

        return new_config()

    @cached_property
    def responses(self) -> idempotency.ResponseStore:
        from compactor_aws.idempotency import response_store

        return response_store()


BACKENDS: PerContainer[Backends] = PerContainer(Backends)
backends = BACKENDS.get


def reset_backends() -> None:
    """Forget the backends and their DynamoDB client (tests that switch environments or mocks)."""
    from compactor_aws import ledger

    BACKENDS.reset()
    ledger.reset_client()


class _NotStored(Exception):
    """A server error or a 429: answered, but neither stored for replay nor billed (:func:`stored_for_replay`)."""

    def __init__(self, computed: Computed):
        super().__init__(computed.status)
        self.computed = computed


def _error(error: CompactorError) -> Answer:
    status, body = error.answer()
    return Answer(status, dense_dumps(body), error.headers())


def answer_call(event: Mapping[str, Any], route: str, compute: Callable[[], Computed],
                lambda_context: Any = None, logger: Any = None) -> Answer:
    """Answer one POST: replayed or computed, then billed once (see the module docstring). With ``logger``, a computed
    call's billing line waiting for its billing (``Computed.summary``) is written once it is settled, ``billed`` or not
    (its answer could not be stored, its ledger write failed), and a replay that writes the entry its computation could
    not writes that entry's line (``compactor_aws.observability``; docs/billing.md)."""
    context = event.get("requestContext") or {}
    request_id = context.get("requestId") or getattr(lambda_context, "aws_request_id", None)
    caller = caller_of(event)
    try:
        raw_key = http_api.header(event, idempotency.HEADER)
    except InvalidRequest as twice:
        return _error(InvalidIdempotencyKey(twice.message))
    if raw_key is None:
        computed, billed = compute(), False
        try:
            _bill(f"req:{request_id}", caller, computed.facts, billing.call_time(computed.facts), request_id, None)
            billed = True
        finally:
            _settled(logger, computed, billed)
        return Answer(computed.status, computed.body, computed.headers)
    try:
        key = idempotency.checked_key(raw_key)
    except idempotency.InvalidIdempotencyKey as exc:
        return _error(InvalidIdempotencyKey(str(exc)))
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyPersistenceLayerError,
        IdempotencyValidationError,
    )

    scope = idempotency.scope_id(caller, route, key)
    fresh: list[Computed] = []

    def compute_and_store() -> dict[str, Any]:
        computed = compute()
        if not stored_for_replay(computed.status):
            raise _NotStored(computed)
        fresh.append(computed)
        return _stored(scope, computed, request_id)

    store = backends()
    billed = False
    try:
        try:
            record = idempotency_run(compute_and_store, scope=scope, body=idempotency.body_hash(event.get("body")),
                                     lambda_context=lambda_context)
        except _NotStored as failed:
            return Answer(failed.computed.status, failed.computed.body, failed.computed.headers)
        except IdempotencyValidationError:
            return _error(IdempotencyKeyReused(f"this {idempotency.HEADER} was used with a different request body"))
        except IdempotencyAlreadyInProgressError:
            return _error(IdempotencyInProgress(
                f"a request with this {idempotency.HEADER} is still running; retry later"))
        except IdempotencyPersistenceLayerError:  # computed, not stored: not delivered, not billed (its line says so)
            return _error(IdempotencyUnavailable("the idempotency store is unavailable; retry later"))
        if fresh:
            body = fresh[0].body
        elif "body" in record:
            body = record["body"]
        else:
            body = store.responses.get(record["body_ref"]).decode("utf-8")
        _bill(keyed_entry_id(scope, record), caller, record.get("facts"), record["time"], record.get("request_id"),
              key, logger=None if fresh else logger, status=int(record["status"]))
        billed = True
        return Answer(int(record["status"]), body, fresh[0].headers if fresh else {REPLAYED_HEADER: "true"})
    finally:
        if fresh:
            _settled(logger, fresh[0], billed)


def stored_for_replay(status: int) -> bool:
    """Whether a keyed call's answer of ``status`` is stored for its key's retries: not a server error nor a 429 (a
    provider's rate limit, ``POST /v1/flows``), which ask to retry later: a retry computes again. A 429 was stored like
    the route's other 4xx, so the retry its ``Retry-After`` asked for was answered the same 429 for the key's TTL."""
    return status < 500 and status != 429


def _settled(logger: Any, computed: Computed, billed: bool) -> None:
    """The billing line of ``computed`` once its billing is settled (``compactor_aws.observability``)."""
    if logger is not None and computed.summary is not None:
        from compactor_aws import observability

        observability.write_settled_line(logger, computed.summary, billed)


def answer_observed(event: Mapping[str, Any], route: str, run: Callable[[], CallRecord], *,
                    lambda_context: Any, logger: Any, metrics: Any, tracer: Any, mode: str = NO_MODE) -> Answer:
    """:func:`answer_call` for a handler's ``run()`` (the core's ``CallRecord``): a computed call is
    observed (metrics, billing log line, trace) by ``compactor_aws.observability`` and billed from that. A ``run()``
    that raises is observed too, with the status the resolver answers (``compactor.call_record.crashed``, in ``mode``,
    the request's: a ``CompactorError``'s own, else 500), never billed, and the exception goes on to the resolver:
    such a call was in no billing line or call metric, though it may have paid for model calls (docs/billing.md)."""
    import time

    from compactor_aws import observability

    def observe(record: CallRecord, text: str, started_at: float) -> Any:
        return observability.record_call(
            record, logger=logger, metrics=metrics, tracer=tracer, started_at=started_at, ended_at=time.time(),
            response_bytes=len(text.encode("utf-8")), settle_later=True, **observability.api_request_details(event))

    def compute() -> Computed:
        started_at = time.time()
        with counting_calls() as counted:
            try:
                record = run()
                text = dense_dumps(record.body)
            except Exception as error:
                failed = crashed(error, counted, mode=mode, route=route)
                observe(failed, dense_dumps(failed.body), started_at)
                raise
        if len(text.encode("utf-8")) > http_api.MAX_RESPONSE_BYTES:
            # The 413 the handler would send instead (http_api.bounded_response), decided here so that it is
            # what is observed, stored and billed: nothing (docs/billing.md). It used to be decided after the
            # call had been billed and its oversized answer stored for replay.
            record = replace(record, status=ResponseTooLarge.status,
                             body=ResponseTooLarge.over(http_api.MAX_RESPONSE_BYTES).body(), headers={})
            text = dense_dumps(record.body)
        summary = observe(record, text, started_at)
        return Computed(record.status, text, facts_of(summary), summary, record.headers)

    return answer_call(event, route, compute, lambda_context, logger)


def keyed_entry_id(scope: str, record: Mapping[str, Any]) -> str:
    """The ledger entry id of a keyed call's idempotency record (docs/billing.md): the one the computation
    stored (``entry_id``, ``idem:<scope hash>:<the computation's time>``), so every replay of this record
    writes the same entry, and a recomputation after the key's TTL (a new record, a new time) another.
    A record stored before records kept an id (issue 11's fourteenth round) keeps the id its entry was
    written under then, ``idem:<scope hash>``: its replay after an upgrade bills nothing more."""
    return record.get("entry_id") or f"idem:{scope}"


def _stored(scope: str, computed: Computed, request_id: str | None) -> dict[str, Any]:
    """The idempotency record's result: status, facts, time, the ledger entry id, and the body inline or by
    reference."""
    now = billing.call_time(computed.facts)
    record: dict[str, Any] = {"status": computed.status, "facts": computed.facts, "time": now,
                              "request_id": request_id, "entry_id": f"idem:{scope}:{now}"}
    data = computed.body.encode("utf-8")
    if len(data) > idempotency.MAX_INLINE_RESPONSE_BYTES:
        record["body_ref"] = backends().responses.put(scope, data)
    else:
        record["body"] = computed.body
    return record


def idempotency_run(function: Callable[[], dict[str, Any]], *, scope: str, body: str,
                    lambda_context: Any = None, meanwhile: Callable[[], None] | None = None) -> dict[str, Any]:
    from compactor_aws.idempotency import run_once

    store = backends()
    return run_once(function, scope=scope, body=body, layer=store.layer, config=store.config,
                    lambda_context=lambda_context, meanwhile=meanwhile)


def _bill(entry_id: str, caller: str, facts: Mapping[str, Any] | None, time: str, request_id: str | None,
          key: str | None, *, logger: Any = None, status: int = 200) -> bool | None:
    """Write the entry of a billed call (``facts``): True when written, False when it was there (billed
    already), None when there is nothing to bill. With ``logger`` (this invocation did not compute the call, so its
    computation's line did not say it was billed), an entry written gets its billing line
    (``compactor_aws.observability.write_entry_line``, answered ``status``)."""
    if not facts:
        return None
    entry = billing.make_entry(entry_id=entry_id, api_key_id=caller, facts=facts, time=time, request_id=request_id,
                               idempotency_key=key)
    written = backends().ledger.record(entry)
    if written and logger is not None:
        from compactor_aws import observability

        observability.write_entry_line(logger, entry, status)
    return written


def run_object_job(source: Any, job: Callable[[], tuple[dict[str, Any], Mapping[str, Any] | billing.ResultBill | None]],
                   lambda_context: Any = None, caller: str | None = None, *,
                   prepare: Callable[[], None] | None = None, logger: Any = None,
                   observed: Sequence[Any] = ()) -> dict[str, Any]:
    """Run an S3 object's job once per object version, as the caller it is billed to (:func:`billed_caller`:
    ``caller``, an API upload's key id, or ``s3:<bucket>``), so that its provider faults change that caller's
    routing only (docs/reliability.md#isolation-one-callers-failures-are-that-callers; every job of a container ran
    as one caller); bill it once, after its result is stored, to that caller.

    ``job()`` stores the result and returns ``(outcome dict, billing facts or None)``; it raises when
    the result could not be stored, and then nothing is recorded, so Lambda's retry runs it again. The facts may be a
    :class:`compactor.billing.ResultBill` instead: the bill of a result an earlier attempt wrote and may not have billed
    (it crashed between the two), which this attempt found and bills as that attempt would have (its caller, time and
    request id: one entry, whichever of them writes it). With ``logger``, an entry this invocation writes for a
    computation it did not make (a replay's, a found result's) gets its billing line (:func:`_bill`), and ``observed``,
    the summaries of the job's own computation (observed with ``record_call``'s ``settle_later``), get theirs once its
    billing is settled: ``billed`` when its entry was written (or found written), also when the invocation then fails
    (its idempotency record could not be completed), not when it failed before or its result was not kept.
    ``prepare()`` (imports the job will need) runs while the in-progress record is written
    (``compactor_aws.idempotency.run_once``'s ``meanwhile``).
    """
    scope = _object_scope(source)
    request_id = getattr(lambda_context, "aws_request_id", None)
    entry_id, billed_to = f"s3:{scope}", billed_caller(source, caller)

    fresh: list[bool] = []
    found: list[bool] = []
    billing_now: list[Future[None]] = []

    def run() -> dict[str, Any]:
        with calling_as(billed_to):
            outcome, facts = job()
        fresh.append(True)
        bill = facts if isinstance(facts, billing.ResultBill) \
            else billing.ResultBill(facts or {}, billed_to, request_id)
        record = {"outcome": outcome, "facts": dict(bill.facts) or None, "time": bill.time,
                  "request_id": bill.request_id,
                  "caller": bill.caller}  # whom a replay, or the on-failure destination, bills (bill_given_up)
        if isinstance(facts, billing.ResultBill):  # an earlier attempt's result: billed below, with its line
            found.append(True)
            record["found"] = True  # a replay that bills it delivers it as this attempt would have
        elif bill.facts:  # the result is stored: its entry (the one a replay writes) is written while Powertools
            # completes the record, one round trip for both (docs/performance.md#where-the-time-goes)
            billing_now.append(background.start(_bill, entry_id, bill.caller, bill.facts, bill.time, bill.request_id,
                                                None))
        return record

    written = False
    try:
        record = idempotency_run(run, scope=scope, body=scope, lambda_context=lambda_context, meanwhile=prepare)
    finally:
        try:
            for billed in billing_now:
                billed.result()  # a failed ledger write fails the invocation: Lambda's retry replays and bills
                written = True
        finally:
            if logger is not None and observed:
                from compactor_aws import observability

                for summary in observed:
                    observability.write_settled_line(logger, summary, written)
    billed_now = (not fresh or bool(found)) and _bill(entry_id, record.get("caller") or billed_to, record.get("facts"),
                                                      record["time"], record.get("request_id"), None, logger=logger)
    if billed_now and record.get("found"):
        # The result an earlier attempt wrote and never billed (it crashed between the two, and counted no outcome
        # or S3ObjectsErrored) is delivered now: answered, and counted, compacted, as a replay that bills is. It was
        # answered skipped ("already processed"), and no attempt counted the object compacted.
        from compactor import object_jobs  # the S3 function's: loaded already

        return object_jobs.delivered(record["outcome"])
    if fresh or billed_now or record["outcome"].get("result") == "skipped":
        # Billed now, a replayed job is delivered now: the attempt that stored its result raised on its ledger write
        # and counted no outcome (S3ObjectsErrored), so this one answers, and counts, its outcome (it said skipped).
        return record["outcome"]
    # A redelivered event: the version's job already ran (and wrote its result), as object_jobs reports it.
    return {**record["outcome"], "result": "skipped", "status": None, "reason": "already processed"}


def result_bill(observed: Sequence[Any], caller: str, request_id: str | None) -> Callable[[], dict[str, str]]:
    """``compactor.object_jobs.run_job``'s ``bill``: the user metadata an inline job's result is written with, what the
    job is billed (:class:`compactor.billing.ResultBill` of its observed summary, the first of ``observed``, billed to
    ``caller``), so that whichever step finds the result bills it (docs/billing.md)."""
    def bill() -> dict[str, str]:
        facts = facts_of(observed[0]) if observed else None
        return billing.ResultBill(facts, caller, request_id).metadata() if facts else {}
    return bill


def job_bill(done: Any, observed: Sequence[Any]) -> dict[str, Any] | billing.ResultBill | None:
    """What an inline job's run (``done``, its ``compactor.object_jobs.Outcome``) bills, for :func:`run_object_job`:
    its own facts when it wrote its result; the bill the result was written with when it found this version's result
    written by an earlier attempt (which may have crashed before billing it); else nothing."""
    if done.result == "compacted":
        return facts_of(observed[0]) if observed else None
    return billing.ResultBill.of_metadata(done.found)


BILLED_NOW = "billed"
BILLED_BEFORE = "already billed"
"""What :func:`bill_given_up` did: wrote the job's entry, or found it written."""


def bill_given_up(source: Any, metadata: Mapping[str, str] | None, caller: Callable[[], str], *,
                  logger: Any = None) -> str | None:
    """Bill the inline job of an object version Lambda gave up on, whose result was written (the S3 function's
    on-failure destination, docs/billing.md), with the entry a retry's replay writes (``s3:<version hash>``, on the
    call's day, to the caller billed), so that a job whose every ledger write failed, or whose attempt crashed between
    writing its result and billing it, is billed once, and never a second time (:data:`BILLED_BEFORE`) when an
    attempt's write succeeded or the destination runs twice. What it is billed: the bill the result was written with
    (``metadata``, :class:`compactor.billing.ResultBill`), whatever became of the job's idempotency record (expired,
    left in progress by a hard crash); for a result written before results carried it, what the completed record kept
    when it was stored, billed to the caller it names or, in a record from before records named it, to ``caller()``
    (the job's: what that version billed). None when nothing says what to bill: an older result whose record is
    gone or was never completed, or a job that billed nothing. With ``logger``, the entry written gets its billing line
    (:func:`_bill`)."""
    from compactor_aws.idempotency import completed_result

    scope = _object_scope(source)
    bill = billing.ResultBill.of_metadata(metadata)
    if bill is None:
        store = backends()
        record = completed_result(scope=scope, body=scope, layer=store.layer, config=store.config)
        if record is None or not record.get("facts"):
            return None
        bill = billing.ResultBill({**record["facts"], "time": record["time"]}, record.get("caller") or caller(),
                                  record.get("request_id"))
    billed = _bill(f"s3:{scope}", bill.caller, bill.facts, bill.time, bill.request_id, None, logger=logger)
    return None if billed is None else BILLED_NOW if billed else BILLED_BEFORE


def _object_scope(source: Any) -> str:
    # Without versioning, the write (its S3 sequencer) beside the ETag: the same bytes written again are another
    # write, and were answered as the earlier one's redelivered event (docs/scale.md, "One outcome per object").
    version = source.version_id or f"etag:{source.etag}" + (f":{source.sequencer}" if source.sequencer else "")
    return idempotency.digest("s3", source.bucket, source.key, version)


def bill_windowed_job(source: Any, observe: Callable[[], Any], caller: str | None,
                      lambda_context: Any = None, *, delivered: bool = True, logger: Any = None) -> None:
    """Bill a windowed job (docs/scale.md) once, after its result is stored: the entry the inline job
    of the same object version would have written (``s3:<version hash>``; the inline job that started
    the windowed one billed nothing), under ``caller`` (an API upload's key id) or ``s3:<bucket>``.
    ``observe()`` writes the job's metrics and billing log line and returns their summary
    (``compactor_aws.observability.record_call``), as the inline job's observer does; it runs once, and
    the entry's facts are read from its summary. Time and facts are kept under the object version's own
    idempotency scope, so a retried assemble step writes the same entry (the conditional write keeps
    one) and never a second, and never observes the job again. A job whose result was not ``delivered`` (a
    newer version's was kept, or it failed) is observed and billed nothing, as the inline job (``run_object_job``'s
    caller), under a record of its own: a result written after the job was recorded failed (a stopped execution's
    last ``assemble``, still running when its end's ``fail`` step ran; docs/scale.md) is observed and billed then,
    where it replayed the failure's record and was delivered unbilled.
    With ``logger``, ``observe()``'s summary waits for its billing line (``record_call``'s ``settle_later``): written
    once the entry is, ``billed`` or not; a retried step that writes the entry writes that entry's line."""
    scope = _object_scope(source)
    request_id = getattr(lambda_context, "aws_request_id", None)
    windowed = idempotency.digest("s3-windowed", scope) if delivered else idempotency.digest(
        "s3-windowed", scope, "undelivered")
    summaries: list[Any] = []

    def observed() -> dict[str, Any]:
        summary = observe()  # every job is observed; one not delivered is billed nothing
        summaries.append(summary)
        facts = facts_of(summary) if delivered else None
        return {"facts": facts, "time": billing.call_time(facts), "request_id": request_id}

    billed = False
    try:
        record = idempotency_run(observed, scope=windowed, body=windowed, lambda_context=lambda_context)
        _bill(f"s3:{scope}", billed_caller(source, caller), record.get("facts"), record["time"],
              record.get("request_id"), None, logger=None if summaries else logger)
        billed = delivered
    finally:
        if logger is not None and summaries:
            from compactor_aws import observability

            observability.write_settled_line(logger, summaries[0], billed)


def billed_caller(source: Any, caller: str | None) -> str:
    """Who an S3 object's job is billed to: ``caller`` (an API upload's key id) or ``s3:<bucket>``."""
    return caller or S3_CALLER_PREFIX + source.bucket


def usage_answer(event: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """``GET /v1/usage``: the caller's own totals per day."""
    # Every value of each (the event's multiValueQueryStringParameters): of a bound given twice, the last was taken.
    query = event.get("multiValueQueryStringParameters") or {}
    given = {name: query.get(name) or [None] for name in ("from", "to")}
    problems = [f"{name} is given {len(values)} times: give it once" for name, values in given.items()
                if len(set(values)) > 1]
    try:
        first, last = billing.parse_range(*(values[0] if len(set(values)) == 1 else None
                                            for values in given.values()))
    except billing.UsageRangeError as exc:
        problems.append(str(exc))
    if problems:
        return InvalidUsageRange("; ".join(problems)).answer()
    caller = caller_of(event)
    return 200, {"api_key_id": caller, **billing.usage_body(caller, first, last, backends().ledger)}
