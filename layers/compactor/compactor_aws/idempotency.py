"""Powertools Idempotency for Compactor (docs/billing.md): the persistence layers and the large-response store.

``COMPACTOR_IDEMPOTENCY_TABLE`` set: Powertools' DynamoDB persistence layer (partition key ``id``,
TTL attribute ``expiration``), whose in-progress write can wait on a thread while the invocation does
other work (:class:`OverlappedDynamoDBLayer`). Unset: :class:`RecordStoreLayer` over the core's
:class:`~compactor.idempotency_files.FileRecordStore` in ``COMPACTOR_IDEMPOTENCY_DIR`` when that is set
(``compactor serve``'s worker instances, which share it), else over
:class:`~compactor.idempotency.MemoryRecordStore` (tests, one instance in-process). Bodies over
:data:`~compactor.idempotency.MAX_INLINE_RESPONSE_BYTES` go to :class:`S3ResponseStore`
(``COMPACTOR_RESPONSES_BUCKET``), else to files in that directory, else to memory.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from aws_lambda_powertools.utilities.idempotency import (
    BasePersistenceLayer,
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord

from compactor.idempotency import (
    DIR_ENV, MemoryRecordStore, MemoryResponseStore, RecordStore, ResponseStore, ttl_seconds,
)
from compactor_aws import background

TABLE_ENV = "COMPACTOR_IDEMPOTENCY_TABLE"
BUCKET_ENV = "COMPACTOR_RESPONSES_BUCKET"
RESPONSES_PREFIX = "idempotency/"
KEY_PREFIX = "compactor"
"""Records are named ``compactor#<hash>`` whatever the function's name, so every version shares them."""


class RecordStoreLayer(BasePersistenceLayer):
    """A Powertools persistence layer over a core :class:`~compactor.idempotency.RecordStore`."""

    def __init__(self, store: RecordStore | None = None):
        super().__init__()
        self.store = store if store is not None else MemoryRecordStore()

    def _get_record(self, idempotency_key: str) -> DataRecord:
        record = self.store.get(idempotency_key)
        if record is None:
            raise IdempotencyItemNotFoundError
        return _data_record(idempotency_key, record)

    def _put_record(self, data_record: DataRecord) -> None:
        existing = self.store.put_new(data_record.idempotency_key, _as_dict(data_record), now=time.time())
        if existing is not None:
            old = _data_record(data_record.idempotency_key, existing)
            self._validate_payload(data_payload=data_record, stored_data_record=old)  # other body: 422
            raise IdempotencyItemAlreadyExistsError(old_data_record=old)

    def _update_record(self, data_record: DataRecord) -> None:
        current = self.store.get(data_record.idempotency_key) or {}
        self.store.put(data_record.idempotency_key, {**current, **_as_dict(data_record)})

    def _delete_record(self, data_record: DataRecord) -> None:
        self.store.delete(data_record.idempotency_key)


_MEANWHILE: ContextVar[Callable[[], None] | None] = ContextVar("compactor_idempotency_meanwhile", default=None)


class OverlappedDynamoDBLayer(DynamoDBPersistenceLayer):
    """Powertools' DynamoDB layer, whose in-progress write waits on a container thread
    (``compactor_aws.background``) while the invocation runs the ``meanwhile`` work given to
    :func:`run_once` (docs/performance.md#the-s3-paths-requests). The write, its condition and its
    outcome are Powertools' own: the function runs only after the write succeeded, as without the work."""

    def _put_record(self, data_record: DataRecord) -> None:
        meanwhile = _MEANWHILE.get()
        if meanwhile is None:
            super()._put_record(data_record)
            return
        _MEANWHILE.set(None)  # once: a retried write (Powertools' inconsistent-state loop) just writes
        written = background.start(super()._put_record, data_record)
        try:
            with contextlib.suppress(Exception):  # only preparation: the function meets the error again
                meanwhile()
        finally:
            written.result()


def _as_dict(record: DataRecord) -> dict[str, Any]:
    out = {"status": record.status, "expiry": record.expiry_timestamp, "data": record.response_data,
           "validation": record.payload_hash}
    if record.in_progress_expiry_timestamp is not None:
        out["in_progress_expiry"] = record.in_progress_expiry_timestamp
    return out


def _data_record(key: str, record: Mapping[str, Any]) -> DataRecord:
    return DataRecord(idempotency_key=key, status=record.get("status", ""), expiry_timestamp=record.get("expiry"),
                      in_progress_expiry_timestamp=record.get("in_progress_expiry"),
                      response_data=record.get("data") or "", payload_hash=record.get("validation") or "")


class S3ResponseStore:
    """Large stored responses as objects ``idempotency/<name>`` of a versioned bucket; the reference
    names the object version written, so a later write under the same name cannot change a replay."""

    def __init__(self, bucket: str, client: Any = None):
        self.bucket = bucket
        self._client = client

    @property
    def client(self) -> Any:
        from compactor_aws.s3_store import s3_client

        return self._client if self._client is not None else s3_client()

    def put(self, name: str, data: bytes) -> dict[str, Any]:
        key = RESPONSES_PREFIX + name
        response = self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType="application/json")
        return {"bucket": self.bucket, "key": key, "version_id": response.get("VersionId")}

    def get(self, ref: Mapping[str, Any]) -> bytes:
        params = {"Bucket": ref["bucket"], "Key": ref["key"]}
        if ref.get("version_id"):
            params["VersionId"] = ref["version_id"]
        return self.client.get_object(**params)["Body"].read()


def persistence_layer(environ: Mapping[str, str] | None = None) -> BasePersistenceLayer:
    """DynamoDB when ``COMPACTOR_IDEMPOTENCY_TABLE`` is set, else files in ``COMPACTOR_IDEMPOTENCY_DIR``
    when that is set, else the in-memory layer."""
    env = os.environ if environ is None else environ
    table = env.get(TABLE_ENV)
    if table:
        from compactor_aws.ledger import dynamodb_client

        return OverlappedDynamoDBLayer(table_name=table, boto3_client=dynamodb_client())
    directory = env.get(DIR_ENV)
    if directory:
        from compactor.idempotency_files import FileRecordStore

        return RecordStoreLayer(FileRecordStore(os.path.join(directory, "records"), ttl_seconds(env)))
    return RecordStoreLayer()


def response_store(environ: Mapping[str, str] | None = None) -> ResponseStore:
    """S3 when ``COMPACTOR_RESPONSES_BUCKET`` is set, else files in ``COMPACTOR_IDEMPOTENCY_DIR`` when that
    is set, else memory."""
    env = os.environ if environ is None else environ
    bucket = env.get(BUCKET_ENV)
    if bucket:
        return S3ResponseStore(bucket)
    directory = env.get(DIR_ENV)
    if directory:
        from compactor.idempotency_files import FileResponseStore

        return FileResponseStore(os.path.join(directory, "responses"))
    return MemoryResponseStore()


def new_config() -> IdempotencyConfig:
    """Records keyed by ``scope`` (caller, route and key, or the S3 object version), checked against
    ``body`` (the request's hash), kept for the documented TTL."""
    return IdempotencyConfig(event_key_jmespath="scope", payload_validation_jmespath="body",
                             raise_on_no_idempotency_key=True, expires_after_seconds=ttl_seconds(),
                             hash_function="sha256")


def completed_result(*, scope: str, body: str, layer: BasePersistenceLayer,
                     config: IdempotencyConfig) -> dict[str, Any] | None:
    """The result :func:`run_once` stored under ``scope`` (with ``body``) once its function completed; None when
    there is none: no record, an expired one, or one still in progress (its function running, or crashed hard).
    Reads the record only (DynamoDB ``GetItem``): nothing is written."""
    from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS

    layer.configure(config, key_prefix=KEY_PREFIX)
    try:
        record = layer.get_record({"scope": scope, "body": body})
    except IdempotencyItemNotFoundError:
        return None
    if record is None or record.status != STATUS_CONSTANTS["COMPLETED"]:
        return None
    return record.response_json_as_dict()


def run_once(function: Callable[[], dict[str, Any]], *, scope: str, body: str, layer: BasePersistenceLayer,
             config: IdempotencyConfig, lambda_context: Any = None,
             meanwhile: Callable[[], None] | None = None) -> dict[str, Any]:
    """``function()``'s result, stored under ``scope``: the first call runs it, later calls with the same
    ``body`` get the stored result (``IdempotencyValidationError`` for another body,
    ``IdempotencyAlreadyInProgressError`` while the first still runs). A raising ``function`` stores nothing.

    ``meanwhile``: work without side effects that ``function`` would otherwise do first (importing what it
    needs), run while an :class:`OverlappedDynamoDBLayer` writes the in-progress record, at most once
    (also for a call that then finds the stored result); its errors are dropped. Other layers skip it."""
    if lambda_context is not None:
        config.register_lambda_context(lambda_context)

    def once(payload: dict[str, str]) -> dict[str, Any]:
        return function()

    runner = idempotent_function(once, data_keyword_argument="payload", persistence_store=layer, config=config,
                                 key_prefix=KEY_PREFIX)
    token = _MEANWHILE.set(meanwhile)
    try:
        return runner(payload={"scope": scope, "body": body})
    finally:
        _MEANWHILE.reset(token)
