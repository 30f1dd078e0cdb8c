"""Restorable archives against S3's latency: what ``restorable: true`` adds to a request, and ``POST /v1/expand``.

Run: ``.venv/bin/python tests/benchmarks/archives.py [--latency-ms L] [--mb-per-s R] [--units 32,128] [--repeats 3]``

A restorable decision-mode request stores the original of every unit it summarized or archived, and an expand
reads up to 256 of them back (docs/archives.md): one S3 request per original. The bucket here is
``tests/fakes/slow_s3.py``: a ``moto`` S3 server in a process of its own that answers every request L milliseconds
late (default 25: S3's first-byte latency for small objects in the same region is of that order). The originals
go through ``compactor_aws.archive_store.S3ArchiveStore`` on the container's S3 client, as deployed: signing,
HTTP, parsing.

For each number of units N the same transcript (N tool-call units, every one summarized by the fake transports of
compact_overhead.py) is compacted through ``service.compact`` with ``restorable: true`` and without; the difference
of their wall times (medians of the repeats) is what the originals' storage adds to the request. Then
``service.handle_expand`` reads every handle of the answer back and must return each unit as it was sent. The
figures are in S3 round trips (the wall time over L).

The reference, measured in the same run: the same N writes and N reads made one after another through the same
store (what both did before; docs/performance.md, "Restorable archives"), at least N round trips each.

Goal: at the largest N, the storage and the expand each take at most a quarter of their reference's time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPO / "tests")]

from fakes import slow_s3  # noqa: E402 - tests/ is on the path from here

BUCKET = "compactor-archives-bench"
CALLER = "bench-caller-key"
GOAL = 0.25  # of the time the same requests take one after another
OUTPUT_CHARS = 2000


def _request(units: int, restorable: bool) -> Any:
    from compact_overhead import transcript

    from compactor.models import CompactRequest
    from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY

    return CompactRequest.model_validate({
        "messages": transcript(units, OUTPUT_CHARS), "keep_recent": 1, "target_ratio": 0.1,
        "decision_policy_ir": DEFAULT_DECISIONS_POLICY, "restorable": restorable})


def _compact(request: Any, archive: Any) -> tuple[float, dict[str, Any]]:
    from compact_overhead import FakeTransport, router_for

    from compactor.budget import Deadline
    from compactor.service import compact

    transport = FakeTransport()
    started = time.perf_counter()
    status, answer = asyncio.run(compact(request, deadline=Deadline.after_ms(40_000), router=router_for(transport),
                                         archive=archive))
    elapsed = time.perf_counter() - started
    assert status == 200, answer
    return elapsed, answer


def measure(units: int, repeats: int, archive: Any) -> tuple[float, float, dict[str, Any]]:
    """What ``restorable`` adds to the request's wall time and the expand's wall time (medians), and the units
    stored, by handle."""
    from compactor.service import handle_expand

    restorable, plain = _request(units, True), _request(units, False)
    _compact(plain, archive)  # the process's first use of the path, not counted
    added, expands, answer = [], [], {}
    for _ in range(repeats):
        with_archive, answer = _compact(restorable, archive)
        without, _ = _compact(plain, archive)
        added.append(with_archive - without)
    units_by_handle = {entry["handle"]: restorable.messages[entry["start"]:entry["end"]]
                       for entry in answer["compaction"]["fragments"] if entry.get("handle")}
    assert len(units_by_handle) == units, f"{len(units_by_handle)} handles for {units} units: not every unit stored"
    for _ in range(repeats):
        started = time.perf_counter()
        record = handle_expand(list(units_by_handle), archive=archive)
        expands.append(time.perf_counter() - started)
        assert record.status == 200, record.body
        assert record.body["originals"] == units_by_handle, "the expand did not return the units as sent"
    return statistics.median(added), statistics.median(expands), units_by_handle


def one_after_another(archive: Any, units_by_handle: dict[str, Any]) -> tuple[float, float]:
    """The wall times of writing and of reading the originals one request after another through the same store."""
    from compactor.archives import original_bytes, owner_key

    owner = owner_key(archive.caller)
    started = time.perf_counter()
    for handle, unit in units_by_handle.items():
        archive.store.put(owner, handle, original_bytes(unit))
    written = time.perf_counter()
    for handle in units_by_handle:
        assert archive.store.get(owner, handle) is not None
    return written - started, time.perf_counter() - written


def main() -> int:
    parser = argparse.ArgumentParser()
    slow_s3.add_options(parser, mb_per_s=None)  # its originals are small: the round trips are the subject
    parser.add_argument("--units", default="32,128", help="comma-separated numbers of units (at most 128)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    latency_s = args.latency_ms / 1000

    with slow_s3.from_options(args):
        from compactor.archives import Archive
        from compactor_aws.archive_store import S3ArchiveStore
        from compactor_aws.s3_store import s3_client

        s3_client().create_bucket(Bucket=BUCKET)
        archive = Archive(store=S3ArchiveStore(BUCKET), caller=CALLER)
        sizes = sorted(int(size) for size in args.units.split(","))
        results = {size: measure(size, args.repeats, archive) for size in sizes}
        reference = one_after_another(archive, results[sizes[-1]][2])
    print(f"archives: restorable requests' originals in a moto S3 server answering {args.latency_ms:g} ms late "
          f"(wall times, the medians of {args.repeats}; round trips: the wall time over {args.latency_ms:g} ms)")
    for size, (added_s, expand_s, units_by_handle) in results.items():
        print(f"  {len(units_by_handle):4d} originals: restorable adds {added_s * 1000:7.1f} ms "
              f"({added_s / latency_s:5.1f} round trips); expanding them takes {expand_s * 1000:7.1f} ms "
              f"({expand_s / latency_s:5.1f} round trips)")
    added_s, expand_s, units_by_handle = results[sizes[-1]]
    stored, expanded = added_s / reference[0], expand_s / reference[1]
    met = stored <= GOAL and expanded <= GOAL
    print(f"  the same {len(units_by_handle)} writes one after another: {reference[0] * 1000:.1f} ms "
          f"({reference[0] / latency_s:.1f} round trips); reads: {reference[1] * 1000:.1f} ms "
          f"({reference[1] / latency_s:.1f} round trips)")
    print(f"  the request's storage / one after another: {stored:.2f}; the expand / one after another: "
          f"{expanded:.2f} (goal ≤ {GOAL:g} each)  {'OK' if met else 'ABOVE GOAL'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
