"""Idempotency records and large responses in a shared directory (``compactor.idempotency_files``), what
``compactor serve``'s worker instances use so that any instance can take any keyed request (docs/billing.md)."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.idempotency import MemoryRecordStore, MemoryResponseStore
from compactor.idempotency_files import SWEEP_INTERVAL_SECONDS, FileRecordStore, FileResponseStore

KEYS = st.sampled_from(["compactor#a", "compactor#b", "k/../c"])
RECORDS = st.fixed_dictionaries(
    {"status": st.sampled_from(["INPROGRESS", "COMPLETED"]), "expiry": st.integers(0, 3000),
     "data": st.text(max_size=20)},
    optional={"in_progress_expiry": st.integers(0, 3_000_000), "validation": st.text(max_size=8)})
OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("put_new"), KEYS, RECORDS, st.floats(0, 3000, allow_nan=False)),
    st.tuples(st.just("put"), KEYS, RECORDS),
    st.tuples(st.just("get"), KEYS),
    st.tuples(st.just("delete"), KEYS),
), max_size=25)


@settings(max_examples=150, deadline=None)
@given(operations=OPERATIONS)
def test_the_file_store_answers_as_the_memory_store(tmp_path_factory: pytest.TempPathFactory,
                                                    operations: list[tuple[Any, ...]]) -> None:
    memory, files = MemoryRecordStore(), FileRecordStore(tmp_path_factory.mktemp("records"))
    for operation in operations:
        name, key, *rest = operation
        if name == "put_new":
            record, now = rest
            assert files.put_new(key, record, now=now) == memory.put_new(key, record, now=now)
        elif name == "put":
            files.put(key, rest[0])
            memory.put(key, rest[0])
        elif name == "get":
            assert files.get(key) == memory.get(key)
        else:
            files.delete(key)
            memory.delete(key)
    for key in ("compactor#a", "compactor#b", "k/../c"):
        assert files.get(key) == memory.get(key)


def _race(directory: str, writer: int, keys: int, start: Any) -> list[int]:
    """Put a record of ``writer`` under each key; the keys this writer won."""
    store = FileRecordStore(directory)
    start.wait()
    won = []
    for key in range(keys):
        if store.put_new(f"k{key}", {"status": "INPROGRESS", "expiry": 10**12, "writer": writer}, now=1.0) is None:
            won.append(key)
    return won


def test_of_processes_writing_one_key_at_once_exactly_one_stores_its_record(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    writers, keys = 4, 60
    with context.Manager() as manager:
        start = manager.Barrier(writers)
        with context.Pool(writers) as pool:
            won = pool.starmap(_race, [(str(tmp_path), writer, keys, start) for writer in range(writers)])
    store = FileRecordStore(tmp_path)
    for key in range(keys):
        winners = [writer for writer in range(writers) if key in won[writer]]
        assert len(winners) == 1
        assert store.get(f"k{key}") == {"status": "INPROGRESS", "expiry": 10**12, "writer": winners[0]}


def test_stored_responses_are_files_each_write_its_own(tmp_path: Path) -> None:
    one, other = FileResponseStore(tmp_path), FileResponseStore(tmp_path)  # two instances, one directory
    first = one.put("scope", b"first body")
    second = other.put("scope", b"second body")
    assert other.get(first) == b"first body"  # a later write under the name does not change a replay
    assert one.get(second) == b"second body"
    for bad in ("../x.body", "/etc/passwd", ".lock"):
        with pytest.raises(ValueError):
            one.get({"name": "scope", "file": bad})


def test_the_layers_follow_the_environment(tmp_path: Path, aws: dict[str, Any]) -> None:
    from compactor_aws.idempotency import (
        MemoryResponseStore, OverlappedDynamoDBLayer, RecordStoreLayer, persistence_layer, response_store,
    )

    shared = {"COMPACTOR_IDEMPOTENCY_DIR": str(tmp_path)}
    layer = persistence_layer(shared)
    assert isinstance(layer, RecordStoreLayer) and isinstance(layer.store, FileRecordStore)
    assert layer.store.directory == tmp_path / "records"
    assert isinstance(response_store(shared), FileResponseStore)
    assert isinstance(persistence_layer({}).store, MemoryRecordStore)
    assert isinstance(response_store({}), MemoryResponseStore)
    named = {**shared, "COMPACTOR_IDEMPOTENCY_TABLE": "t", "COMPACTOR_RESPONSES_BUCKET": "b"}
    assert isinstance(persistence_layer(named), OverlappedDynamoDBLayer)  # a table the shell names wins
    assert not isinstance(response_store(named), FileResponseStore)  # and a bucket


def test_two_instances_over_one_directory_replay_each_other_s_results(tmp_path: Path) -> None:
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyValidationError,
    )

    from compactor_aws.idempotency import RecordStoreLayer, new_config, run_once

    def instance() -> RecordStoreLayer:
        return RecordStoreLayer(FileRecordStore(tmp_path))

    first, second = instance(), instance()
    runs: list[str] = []

    def compute() -> dict[str, Any]:
        runs.append("ran")
        with pytest.raises(IdempotencyAlreadyInProgressError):  # the other instance, while this one runs
            run_once(lambda: {"never": True}, scope="s", body="b", layer=second, config=new_config())
        return {"status": 200, "body": "answer"}

    assert run_once(compute, scope="s", body="b", layer=first, config=new_config()) == {"status": 200,
                                                                                          "body": "answer"}
    assert run_once(lambda: {"never": True}, scope="s", body="b", layer=second, config=new_config()) == {
        "status": 200, "body": "answer"}
    with pytest.raises(IdempotencyValidationError):
        run_once(lambda: {"never": True}, scope="s", body="other", layer=second, config=new_config())
    assert runs == ["ran"]


@pytest.mark.parametrize("damaged", [b"", b'{"status": "COMPL', b"\xff\xfe", b"[1, 2]"])
def test_a_damaged_record_file_is_no_record_and_the_next_first_write_replaces_it(tmp_path: Path,
                                                                                  damaged: bytes) -> None:
    # A file left empty or cut short (the rename is not flushed before a crash of the machine) must not fail
    # every request with its key from then on (docs/billing.md).
    store = FileRecordStore(tmp_path)
    store.put("compactor#k", {"status": "COMPLETED", "expiry": 9e9, "data": "first"})
    next(tmp_path.glob("*.json")).write_bytes(damaged)
    assert store.get("compactor#k") is None
    record = {"status": "INPROGRESS", "expiry": 9e9, "data": "second"}
    assert store.put_new("compactor#k", record, now=0.0) is None
    assert store.get("compactor#k") == record


# ------------------------------------------------------------------------------ expiry (docs/billing.md)

def _aged(path: Path, seconds: float) -> Path:
    """``path`` last written ``seconds`` ago."""
    written = time.time() - seconds
    os.utime(path, (written, written))
    return path


def test_the_memory_store_removes_expired_records_and_keeps_the_live_ones() -> None:
    store = MemoryRecordStore()
    for index in range(100):
        assert store.put_new(f"old{index}", {"status": "COMPLETED", "expiry": 50}, now=1.0) is None
    for index in range(100):
        assert store.put_new(f"new{index}", {"status": "COMPLETED", "expiry": 10**12}, now=100.0) is None
    assert not any(key.startswith("old") for key in store.records)
    assert all(store.get(f"new{index}") == {"status": "COMPLETED", "expiry": 10**12} for index in range(100))


def test_a_long_running_memory_store_holds_about_its_live_keys_not_every_key_it_saw() -> None:
    store, most = MemoryRecordStore(), 0
    for second in range(20_000):  # one new key a second, each remembered for 30 seconds
        store.put_new(f"k{second}", {"status": "COMPLETED", "expiry": second + 30}, now=float(second))
        most = max(most, len(store.records))
    assert most <= 2 * 64


def test_the_memory_response_store_removes_bodies_no_live_record_can_name() -> None:
    store = MemoryResponseStore(keep_seconds=100)
    refs = [store.put(f"old{index}", b"old") for index in range(40)]
    for name in store.written:
        store.written[name] -= 101  # written over two TTLs ago
    kept = [store.put(f"new{index}", b"new") for index in range(40)]
    assert not any(name.startswith("old") for name in store.bodies)
    assert [store.get(ref) for ref in kept] == [b"new"] * 40
    with pytest.raises(KeyError):
        store.get(refs[0])


def test_the_directory_store_removes_expired_records_files_that_are_not_records_and_crash_leftovers(
        tmp_path: Path) -> None:
    now = time.time()
    writer = FileRecordStore(tmp_path, ttl_seconds=100)
    writer.put("expired", {"status": "COMPLETED", "expiry": now - 5})
    writer.put("longer-ttl", {"status": "COMPLETED", "expiry": now + 5000})  # a TTL longer than this store's
    writer.put("expired-recently-written", {"status": "COMPLETED", "expiry": now - 5})
    writer.put("live", {"status": "COMPLETED", "expiry": now + 50})
    files = {key: writer._path(key) for key in ("expired", "longer-ttl", "expired-recently-written", "live")}
    _aged(files["expired"], 200)
    _aged(files["longer-ttl"], 200)
    _aged(files["live"], 50)
    damaged = tmp_path / f"{'0' * 64}.json"
    damaged.write_bytes(b'{"status": "COMPL')
    _aged(damaged, 200)
    leftover = tmp_path / ".tmp-crashed"
    leftover.write_bytes(b"{")
    _aged(leftover, 2 * 3600)
    writing = tmp_path / ".tmp-being-written"
    writing.write_bytes(b"{")

    store = FileRecordStore(tmp_path, ttl_seconds=100)  # another instance, or the next run of the server
    assert store.put_new("new", {"status": "INPROGRESS", "expiry": now + 100}, now=now) is None
    assert not files["expired"].exists() and not damaged.exists() and not leftover.exists()
    assert store.get("longer-ttl") is not None and store.get("live") is not None and writing.exists()
    assert store.get("expired-recently-written") is not None  # not read yet: written less than a TTL ago

    # A process looks at most every SWEEP_INTERVAL_SECONDS, and at its first write.
    _aged(files["expired-recently-written"], 200)
    store.put_new("new2", {"status": "INPROGRESS", "expiry": now + 100}, now=now + 1)
    assert files["expired-recently-written"].exists()
    store.put_new("new3", {"status": "INPROGRESS", "expiry": now + 100}, now=now + SWEEP_INTERVAL_SECONDS)
    assert not files["expired-recently-written"].exists()
    assert store.get("longer-ttl") is not None  # its expiry is still ahead
    assert store.get("live") is None  # its expiry (now + 50) has passed and its file is older than the TTL


def test_the_directory_response_store_removes_bodies_older_than_their_keep_time(tmp_path: Path) -> None:
    old = FileResponseStore(tmp_path, keep_seconds=100)
    stale, fresh = old.put("a", b"stale"), old.put("b", b"fresh")
    _aged(tmp_path / stale["file"], 101)
    leftover = tmp_path / ".tmp-crashed"
    leftover.write_bytes(b"x")
    _aged(leftover, 2 * 3600)
    store = FileResponseStore(tmp_path, keep_seconds=100)
    newest = store.put("c", b"newest")
    assert not (tmp_path / stale["file"]).exists() and not leftover.exists()
    assert store.get(fresh) == b"fresh" and store.get(newest) == b"newest"


def test_the_local_stores_keep_what_the_configured_ttl_asks(tmp_path: Path) -> None:
    from compactor_aws.idempotency import persistence_layer, response_store

    shared = {"COMPACTOR_IDEMPOTENCY_DIR": str(tmp_path), "COMPACTOR_IDEMPOTENCY_TTL_SECONDS": "600"}
    assert persistence_layer(shared).store.ttl_seconds == 600
    # Bodies are kept for the longest TTL's records whatever this store's TTL: another server sharing the
    # directory, or this one's last run, may have written them for a longer one.
    assert response_store(shared).keep_seconds == 2 * 86400
    assert response_store({"COMPACTOR_IDEMPOTENCY_TTL_SECONDS": "600"}).keep_seconds == 2 * 86400


def test_a_server_with_a_shorter_ttl_keeps_the_bodies_another_s_live_records_name(tmp_path: Path) -> None:
    from compactor_aws.idempotency import response_store

    long_ttl = response_store({"COMPACTOR_IDEMPOTENCY_DIR": str(tmp_path)})
    ref = long_ttl.put("scope", b"a large body")
    _aged(tmp_path / "responses" / ref["file"], 600)  # its record, of a day's TTL, is live for hours yet
    short_ttl = response_store({"COMPACTOR_IDEMPOTENCY_DIR": str(tmp_path), "COMPACTOR_IDEMPOTENCY_TTL_SECONDS": "60"})
    short_ttl.put("other", b"another body")
    assert short_ttl.get(ref) == b"a large body"
