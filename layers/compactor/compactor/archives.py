"""Restorable archives (docs/archives.md): originals of changed units, content-addressed per caller.

A handle is ``cmp_`` + the first 32 hex digits of the SHA-256 of the unit's dense JSON (the items as
the caller sent them). Originals are stored under the caller's id, so one caller's handles mean
nothing to another; :func:`expand` answers 404 for any handle the caller does not own, without
saying which. The storage is a port: :class:`LocalArchiveStore` (a directory: ``compactor serve`` and
the CLI) here, the S3 adapter in ``compactor_aws.archive_store``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from compactor.jsonutil import dense_dumps
from compactor.records import record
from compactor.side_by_side import each_side_by_side, side_by_side

HANDLE_PREFIX = "cmp_"
HANDLE_RE = re.compile(r"cmp_[0-9a-f]{32}")
ARCHIVE_DIR_ENV = "COMPACTOR_ARCHIVE_DIR"
ORIGINALS_AT_ONCE = 32
"""Originals one request stores or reads at once: each is a request to the store (an S3 round trip, deployed),
and one after another a request's 128 originals took 128 round trips (docs/performance.md, "Restorable
archives")."""


def original_bytes(unit_items: list[Any]) -> bytes:
    return dense_dumps(unit_items).encode("utf-8")


def handle_of(unit_items: list[Any]) -> str:
    return _handle_of_bytes(original_bytes(unit_items))


def _handle_of_bytes(data: bytes) -> str:
    return HANDLE_PREFIX + hashlib.sha256(data).hexdigest()[:32]


def owner_key(caller: str) -> str:
    """The storage name of a caller's namespace (a hash: no caller id reaches a path or key as is)."""
    return hashlib.sha256(caller.encode("utf-8")).hexdigest()[:32]


class ArchiveStore(Protocol):
    def put(self, owner: str, handle: str, data: bytes) -> None: ...

    def get(self, owner: str, handle: str) -> bytes | None: ...


@record(frozen=True)
class Archive:
    """Where one request's originals go: a store and the caller they belong to."""

    store: ArchiveStore
    caller: str


class LocalArchiveStore:
    """Originals as files ``<root>/<owner>/<handle>.json``, written atomically."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def put(self, owner: str, handle: str, data: bytes) -> None:
        folder = self.root / owner
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{handle}.json"
        if target.exists():
            return  # content-addressed: the same handle holds the same bytes
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle_file:
            handle_file.write(data)
        os.replace(tmp, target)

    def get(self, owner: str, handle: str) -> bytes | None:
        try:
            return (self.root / owner / f"{handle}.json").read_bytes()
        except FileNotFoundError:
            return None


def default_local_store() -> LocalArchiveStore:
    """``$COMPACTOR_ARCHIVE_DIR``, else ``~/.compactor/archives``."""
    return LocalArchiveStore(os.environ.get(ARCHIVE_DIR_ENV) or Path.home() / ".compactor" / "archives")


def store_originals(archive: Archive, items: list[Any], manifest: Iterable[dict[str, Any]]) -> None:
    """Store the original of every manifest entry carrying a handle (each once), :data:`ORIGINALS_AT_ONCE` at a
    time, each original's bytes made as its write starts; a failure raises once the writes in flight have ended
    (the later originals are not written; those written stay, harmless under content-addressed keys)."""
    owner = owner_key(archive.caller)

    def originals() -> Iterator[tuple[str, bytes]]:
        seen: set[str] = set()
        for entry in manifest:
            handle = entry.get("handle")
            if handle and handle not in seen:
                seen.add(handle)
                data = original_bytes(items[entry["start"]:entry["end"]])
                assert _handle_of_bytes(data) == handle
                yield handle, data

    for _ in side_by_side(lambda original: archive.store.put(owner, *original), originals(),
                          at_once=ORIGINALS_AT_ONCE):
        pass


def expand(archive: Archive, handles: list[str]) -> tuple[int, dict[str, Any]]:
    """``POST /v1/expand``: ``{"originals": {handle: unit}}`` when the caller owns every handle, else 404. The
    originals are read :data:`ORIGINALS_AT_ONCE` at a time, none when a handle is malformed."""
    from compactor.errors import UnknownHandle

    owner = owner_key(archive.caller)
    wanted = list(dict.fromkeys(handles))
    stored = None
    if all(HANDLE_RE.fullmatch(handle) for handle in wanted):
        stored = each_side_by_side(lambda handle: archive.store.get(owner, handle), wanted, at_once=ORIGINALS_AT_ONCE)
    if stored is None or any(data is None or _handle_of_bytes(data) != handle for handle, data in zip(wanted, stored)):
        return UnknownHandle("unknown handle(s): none of these originals was returned").answer()
    return 200, {"originals": {handle: json.loads(data) for handle, data in zip(wanted, stored)}}
