"""Idempotent requests (docs/billing.md): the key's rules, its scope, and the local stores.

Powertools' Idempotency utility runs the protocol (in-progress record, payload check, stored
response); ``compactor_aws.idempotency`` gives it a persistence layer: DynamoDB when deployed, or
:class:`MemoryRecordStore` here for tests and one instance in-process (``compactor serve``'s worker
instances share a directory instead: ``compactor.idempotency_files``). Responses too large for a record
go to a :class:`ResponseStore` (S3 when deployed) and the record points at them. Plain Python.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Protocol

from compactor.records import record

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
TTL_ENV = "COMPACTOR_IDEMPOTENCY_TTL_SECONDS"
DIR_ENV = "COMPACTOR_IDEMPOTENCY_DIR"
"""A directory the local records and large responses are kept in, shared by the processes naming it
(``compactor serve``'s worker instances; ``compactor.idempotency_files``)."""
DEFAULT_TTL_SECONDS = 24 * 3600
"""How long a key's stored response is replayed (and its body checked); afterwards the key is new."""
MIN_TTL_SECONDS = 60
MAX_TTL_SECONDS = 24 * 3600
"""The longest TTL: the bucket's lifecycle rule keeps a large stored response two days, a day longer
(template.yaml bounds ``IdempotencyTtlSeconds`` alike); a record that outlived its body would fail its key's
every replay until it expired."""
BODY_KEEP_SECONDS = 2 * MAX_TTL_SECONDS
"""The local stores keep a large body this long after it was written, as the bucket keeps it two days: a
record's expiry is at most one TTL after its body's write (the body is written just before the record is
completed), so no live record's body is ever removed, whatever TTL the record was written with (two servers
sharing a directory, or a restart with a shorter TTL, cannot remove each other's live bodies)."""
SWEEP_MIN_RECORDS = 64
"""The in-memory stores look for expired entries when they hold twice as many as after their last look (and at
least this many): memory stays within about twice what the live keys hold, at a constant cost per write."""

MAX_INLINE_RESPONSE_BYTES = 300 * 1024
"""Larger response bodies are kept in the :class:`ResponseStore` (a DynamoDB item holds 400 KB)."""


class InvalidIdempotencyKey(ValueError):
    """The header's value breaks the rules of :func:`checked_key`."""


def ttl_seconds(environ: Mapping[str, str] | None = None) -> int:
    """The configured TTL (``COMPACTOR_IDEMPOTENCY_TTL_SECONDS``), at least one minute and at most a day
    (:data:`MAX_TTL_SECONDS`)."""
    raw = (os.environ if environ is None else environ).get(TTL_ENV, "")
    try:
        return min(MAX_TTL_SECONDS, max(MIN_TTL_SECONDS, int(raw))) if raw.strip() else DEFAULT_TTL_SECONDS
    except ValueError:
        return DEFAULT_TTL_SECONDS


def record_expired(record: Mapping[str, Any], now: float) -> bool:
    """Whether ``record``'s ``expiry`` (seconds since the epoch) has passed at ``now``: what DynamoDB's TTL
    deletes, and what the local stores remove when they sweep."""
    expiry = record.get("expiry")
    return not isinstance(expiry, (int, float)) or expiry <= now


def checked_key(value: str) -> str:
    """A usable ``Idempotency-Key``: 1 to 255 printable ASCII characters (no leading/trailing space)."""
    key = value.strip()
    if not key:
        raise InvalidIdempotencyKey(f"{HEADER} must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey(f"{HEADER} must be at most {MAX_KEY_LENGTH} characters")
    if not all(" " <= char <= "~" for char in key):
        raise InvalidIdempotencyKey(f"{HEADER} must be printable ASCII")
    return key


def digest(*parts: str) -> str:
    """SHA-256 hex of the parts, unambiguously joined."""
    hasher = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return hasher.hexdigest()


def scope_id(caller: str, route: str, key: str) -> str:
    """One caller's key on one route: what the stored response and the ledger entry are filed under.
    Two callers choosing the same key never meet."""
    return digest("idempotency", caller, route, key)


def body_hash(body: bytes | str | None) -> str:
    """What "the same body" means: the same bytes."""
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else (body or b"")
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------- ports


class RecordStore(Protocol):
    """Idempotency records by key (what a persistence layer needs), with a conditional first write."""

    def put_new(self, key: str, record: dict[str, Any], *, now: float) -> dict[str, Any] | None:
        """Store ``record`` unless a live record (``expiry`` after ``now``, and for an in-progress one
        ``in_progress_expiry`` after ``now``) holds ``key``; returns that record, else None."""
        ...

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, record: dict[str, Any]) -> None: ...

    def delete(self, key: str) -> None: ...


class ResponseStore(Protocol):
    """Bodies too large for an idempotency record."""

    def put(self, name: str, data: bytes) -> dict[str, Any]:
        """Keep ``data``; returns the reference the record stores."""
        ...

    def get(self, ref: Mapping[str, Any]) -> bytes: ...


# ------------------------------------------------------------------------------------ local adapters


@record
class MemoryRecordStore:
    """A :class:`RecordStore` in a dict (one process: ``compactor serve``, tests). Expired records are removed
    as DynamoDB's TTL removes them (:data:`SWEEP_MIN_RECORDS`), so a long-lived server's memory follows its
    live keys, not every key it ever saw."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _sweep_at: int = field(default=SWEEP_MIN_RECORDS, repr=False)

    def put_new(self, key: str, record: dict[str, Any], *, now: float) -> dict[str, Any] | None:
        with self._lock:
            existing = self.records.get(key)
            if existing is not None and record_is_live(existing, now):
                return dict(existing)
            self.records[key] = dict(record)
            if len(self.records) >= self._sweep_at:
                for old in [name for name, held in self.records.items() if record_expired(held, now)]:
                    del self.records[old]
                self._sweep_at = max(SWEEP_MIN_RECORDS, 2 * len(self.records))
            return None

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            record = self.records.get(key)
            return dict(record) if record is not None else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        with self._lock:
            self.records[key] = dict(record)

    def delete(self, key: str) -> None:
        with self._lock:
            self.records.pop(key, None)


def record_is_live(record: Mapping[str, Any], now: float) -> bool:
    """Whether ``record`` still holds its key at ``now`` (see :meth:`RecordStore.put_new`)."""
    if (record.get("expiry") or 0) <= now:
        return False
    in_progress_until = record.get("in_progress_expiry")  # milliseconds, like Powertools
    if record.get("status") == "INPROGRESS" and in_progress_until is not None:
        return in_progress_until > now * 1000
    return True


@record
class MemoryResponseStore:
    """A :class:`ResponseStore` in a dict. A body is removed once it is ``keep_seconds`` old
    (:data:`BODY_KEEP_SECONDS`: no live record still names it), looked for as :class:`MemoryRecordStore` looks
    for expired records."""

    bodies: dict[str, bytes] = field(default_factory=dict)
    keep_seconds: float = BODY_KEEP_SECONDS
    written: dict[str, float] = field(default_factory=dict, repr=False)
    _sweep_at: int = field(default=SWEEP_MIN_RECORDS, repr=False)

    def put(self, name: str, data: bytes) -> dict[str, Any]:
        now = time.time()
        self.bodies[name] = data
        self.written[name] = now
        if len(self.bodies) >= self._sweep_at:
            for old in [held for held, at in self.written.items() if at <= now - self.keep_seconds]:
                del self.bodies[old], self.written[old]
            self._sweep_at = max(SWEEP_MIN_RECORDS, 2 * len(self.bodies))
        return {"name": name}

    def get(self, ref: Mapping[str, Any]) -> bytes:
        return self.bodies[str(ref["name"])]
