"""Idempotency records and large responses in a directory that several processes share (docs/billing.md).

``compactor serve --workers N`` runs N instances of the function, each a process of its own; a request
goes to the least busy one whatever its ``Idempotency-Key``, so the key's record must be where every
instance sees it, as the DynamoDB table is when deployed. :class:`FileRecordStore` keeps one JSON file
per record; its conditional first write holds an exclusive ``flock`` on the directory's lock file, so of
two instances writing the same key at once one stores its record and the other gets that record back.
Each file is written whole and renamed into place, so a reader never sees half a record. POSIX only
(``fcntl``), like the Lambda runtime; imported only when ``COMPACTOR_IDEMPOTENCY_DIR`` names a directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from compactor.idempotency import record_is_live

_LOCK_FILE = ".lock"


def _file_name(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _write_whole(path: Path, data: bytes) -> None:
    """``data`` into ``path``: written to a temporary file of the same directory, then renamed over it."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class FileRecordStore:
    """A :class:`~compactor.idempotency.RecordStore` over ``directory`` (``<sha256 of key>.json`` each),
    shared by the processes that name the same directory."""

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._threads = threading.Lock()  # flock excludes other processes; this, this process's threads

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
        """The key's record; None when there is none, or when its file is not a record (left empty or cut short
        by a crash of the machine: the rename is not flushed to disk), which the next first write replaces,
        instead of failing every request with that key."""
        try:
            record = json.loads(self._path(key).read_bytes())
        except (FileNotFoundError, ValueError):  # none; or not JSON, or not UTF-8
            return None
        return record if isinstance(record, dict) else None

    def put_new(self, key: str, record: dict[str, Any], *, now: float) -> dict[str, Any] | None:
        with self._exclusive():
            existing = self._read(key)
            if existing is not None and record_is_live(existing, now):
                return existing
            _write_whole(self._path(key), json.dumps(record).encode("utf-8"))
            return None

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
    (a later write under the same name is another file, as S3 keeps versions), named in the reference."""

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, data: bytes) -> dict[str, Any]:
        file = f"{_file_name(name)}-{uuid.uuid4().hex}.body"
        _write_whole(self.directory / file, data)
        return {"name": name, "file": file}

    def get(self, ref: Mapping[str, Any]) -> bytes:
        file = str(ref["file"])
        if Path(file).name != file or file.startswith("."):
            raise ValueError(f"not a stored response: {file!r}")
        return (self.directory / file).read_bytes()
