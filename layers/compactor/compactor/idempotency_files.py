"""Idempotency records and large responses in a directory that several processes share (docs/billing.md).

``compactor serve --workers N`` runs N instances of the function, each a process of its own; a request
goes to the least busy one whatever its ``Idempotency-Key``, so the key's record must be where every
instance sees it, as the DynamoDB table is when deployed. :class:`FileRecordStore` keeps one JSON file
per record; its conditional first write holds an exclusive ``flock`` on the directory's lock file, so of
two instances writing the same key at once one stores its record and the other gets that record back.
Each file is written whole and renamed into place, so a reader never sees half a record. POSIX only
(``fcntl``), like the Lambda runtime; imported only when ``COMPACTOR_IDEMPOTENCY_DIR`` names a directory.

Both stores remove what the deployed stores' expiry removes (DynamoDB's TTL, the bucket's lifecycle rule), so a
directory kept across restarts holds the live keys, not every key it ever saw: each process looks at most every
:data:`SWEEP_INTERVAL_SECONDS`, on a write, for the record files past their ``expiry`` (read only when the file is
older than the TTL, since a record expires at most one TTL after its last write), the bodies older than their
keep time, and the temporary files a crash left.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from compactor.idempotency import BODY_KEEP_SECONDS, DEFAULT_TTL_SECONDS, record_expired, record_is_live

_LOCK_FILE = ".lock"
_TEMPORARY = ".tmp-"
SWEEP_INTERVAL_SECONDS = 600
TEMPORARY_KEEP_SECONDS = 3600
"""A temporary file this old is not a write in progress: its writer died before the rename."""


def _old_entries(directory: Path, suffix: str, before: float) -> Iterator[tuple[Path, bool]]:
    """The files of ``directory`` named ``*suffix`` last written before ``before`` (and False), and the temporary
    files a crash left (and True)."""
    with os.scandir(directory) as entries:
        for entry in entries:
            temporary = entry.name.startswith(_TEMPORARY)
            if not (temporary or entry.name.endswith(suffix)):
                continue
            try:
                written = entry.stat().st_mtime
            except FileNotFoundError:  # removed by another process meanwhile
                continue
            if written < (time.time() - TEMPORARY_KEEP_SECONDS if temporary else before):
                yield Path(entry.path), temporary


def _file_name(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _write_whole(path: Path, data: bytes) -> None:
    """``data`` into ``path``: written to a temporary file of the same directory, then renamed over it."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=_TEMPORARY)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _record_at(path: Path) -> dict[str, Any] | None:
    """The record in ``path``; None when there is none, or when the file is not a record (left empty or cut short
    by a crash of the machine: the rename is not flushed to disk), which the next first write replaces (and a
    sweep removes), instead of failing every request with that key."""
    try:
        record = json.loads(path.read_bytes())
    except (FileNotFoundError, ValueError):  # none; or not JSON, or not UTF-8
        return None
    return record if isinstance(record, dict) else None


class FileRecordStore:
    """A :class:`~compactor.idempotency.RecordStore` over ``directory`` (``<sha256 of key>.json`` each),
    shared by the processes that name the same directory; ``ttl_seconds``: the TTL records are written with
    (a file older than that may have expired, and is read to know)."""

    def __init__(self, directory: str | os.PathLike[str], ttl_seconds: float = DEFAULT_TTL_SECONDS):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ttl_seconds = ttl_seconds
        self._threads = threading.Lock()  # flock excludes other processes; this, this process's threads
        self._next_sweep = float("-inf")  # the first write looks (a directory kept from an earlier run)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        with self._threads, open(self.directory / _LOCK_FILE, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _path(self, key: str) -> Path:
        return self.directory / f"{_file_name(key)}.json"

    def _read(self, key: str) -> dict[str, Any] | None:
        return _record_at(self._path(key))

    def put_new(self, key: str, record: dict[str, Any], *, now: float) -> dict[str, Any] | None:
        with self._exclusive():
            if now >= self._next_sweep:
                self._next_sweep = now + SWEEP_INTERVAL_SECONDS
                self._sweep(now)
            existing = self._read(key)
            if existing is not None and record_is_live(existing, now):
                return existing
            _write_whole(self._path(key), json.dumps(record).encode("utf-8"))
            return None

    def _sweep(self, now: float) -> None:
        """Remove the records expired at ``now`` (and those that are not records), under the exclusive lock."""
        for path, temporary in list(_old_entries(self.directory, ".json", now - self.ttl_seconds)):
            record = None if temporary else _record_at(path)
            if record is not None and not record_expired(record, now):
                continue  # written with a longer TTL than this store's
            with contextlib.suppress(FileNotFoundError):  # (or removed meanwhile)
                path.unlink()

    def get(self, key: str) -> dict[str, Any] | None:
        return self._read(key)

    def put(self, key: str, record: dict[str, Any]) -> None:
        with self._exclusive():
            _write_whole(self._path(key), json.dumps(record).encode("utf-8"))

    def delete(self, key: str) -> None:
        with self._exclusive(), contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()


class FileResponseStore:
    """A :class:`~compactor.idempotency.ResponseStore` over ``directory``: each body a file of its own
    (a later write under the same name is another file, as S3 keeps versions), named in the reference.
    A body is removed once it is ``keep_seconds`` old (:data:`~compactor.idempotency.BODY_KEEP_SECONDS`: no
    live record names it any more), as the bucket's lifecycle rule removes it."""

    def __init__(self, directory: str | os.PathLike[str], keep_seconds: float = BODY_KEEP_SECONDS):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep_seconds = keep_seconds
        self._next_sweep = float("-inf")

    def put(self, name: str, data: bytes) -> dict[str, Any]:
        now = time.time()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_INTERVAL_SECONDS
            for path, _ in list(_old_entries(self.directory, ".body", now - self.keep_seconds)):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        file = f"{_file_name(name)}-{uuid.uuid4().hex}.body"
        _write_whole(self.directory / file, data)
        return {"name": name, "file": file}

    def get(self, ref: Mapping[str, Any]) -> bytes:
        file = str(ref["file"])
        if Path(file).name != file or file.startswith("."):
            raise ValueError(f"not a stored response: {file!r}")
        return (self.directory / file).read_bytes()
