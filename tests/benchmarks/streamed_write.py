"""A windowed job's last step as S3's throughput makes it: the result streamed from the last pass's output.

Run: ``.venv/bin/python tests/benchmarks/streamed_write.py [--mb M] [--latency-ms L] [--mb-per-s R] [--repeats N]``

When a windowed job's last pass ends, ``assemble`` streams the pass's output (a JSON array of messages, read from S3
in chunks) into the result object (``large_jobs._write_result``: ``write_body`` into ``S3Store.open_writer``, a
multipart upload of 8 MiB parts). Each pass's output is written the same way. A part is a request that carries
8 MiB, about 0.1 s at one connection's throughput, and a writer that uploads its parts one after another stops
reading and encoding for each. The bucket is ``tests/fakes/slow_s3.py``: a ``moto`` S3 server in a process of its
own that answers every request L ms late (default 25) and moves each request's and answer's body at R MB/s
(default 90, what S3's performance guidelines plan for one connection).

A pass output of M MB (default 64: corpus sessions, as ``windowed_job.py``'s) is stored once, then copied into a
result N times (default 5) each way, in turns: as the writer runs (``s3_store.PARTS_AT_ONCE`` parts uploading while
the text goes on) and with one part at a time (what it did before; docs/performance.md, "Streamed writes"). Every
result must be the same bytes, a whole response body around the pass's messages. The figure is the step's wall
time (the median of N) and the parts it uploaded.

Goal: the step takes at most 0.93 of its time with one part at a time. The gain is smaller than the parts'
round trips suggest, on this rig: reading and encoding the messages is about 1.2 s of the step's CPU either way,
the read's answer keeps arriving into the socket's buffers while a part uploads one at a time, and the ``moto``
server spends about 60 ms of CPU on each part on the same two cores (a request to S3 spends none of the
caller's). Side by side read 0.79-0.89 in this round's runs, the same code with one part at a time in both arms
about 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests")]

BUCKET = "compactor-streamed-write-bench"
GOAL = 0.93
SUMMARY = {"compaction": {"mode": "decision", "windows": {"passes": []}}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=64.0)
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--mb-per-s", type=float, default=90.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from fakes.slow_s3 import SlowS3

    with SlowS3(args.latency_ms, args.mb_per_s):
        from compactor.compaction.windowed import write_body
        from compactor.large_jobs import _messages
        from compactor_aws import s3_store
        from compactor_aws.s3_store import S3Store, s3_client
        from scale import transcripts

        client = s3_client()
        client.create_bucket(Bucket=BUCKET)
        messages = list(transcripts.messages(int(args.mb * 1_000_000)))
        client.put_object(Bucket=BUCKET, Key="work/p1/output.json", Body=json.dumps(messages).encode())
        store = S3Store()
        at_once = s3_store.PARTS_AT_ONCE
        modes = {"side by side": at_once, "one at a time": 1}
        walls: dict[str, list[float]] = {name: [] for name in modes}
        results: set[bytes] = set()
        for repeat in range(args.repeats):
            for name, parts in (modes.items() if repeat % 2 == 0 else reversed(modes.items())):
                key = f"compacted/{name.replace(' ', '-')}-{repeat}.json"
                s3_store.PARTS_AT_ONCE = parts
                try:
                    started = time.perf_counter()
                    with store.open_writer(BUCKET, key, content_type="application/json", metadata={}) as out:
                        write_body(out, _messages(store, BUCKET, "work/p1/output.json", None), SUMMARY,
                                   messages_only=False)
                    walls[name].append(time.perf_counter() - started)
                finally:
                    s3_store.PARTS_AT_ONCE = at_once
                results.add(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
                client.delete_object(Bucket=BUCKET, Key=key)
        part_bytes = s3_store.PART_BYTES
    assert len(results) == 1, "the results differ"
    result = next(iter(results))
    assert json.loads(result) == {"messages": messages, **SUMMARY}, "the result is not the pass's messages"
    parts = -(-len(result) // part_bytes)
    print(f"streamed_write: a {len(result) / 1e6:.1f} MB result ({parts} parts) streamed from a pass output of "
          f"{len(messages)} messages; S3 a moto server answering {args.latency_ms:g} ms late, bodies at "
          f"{args.mb_per_s:g} MB/s a request; every result the same bytes (medians of {args.repeats})")
    for name, measured in walls.items():
        print(f"  {name:13s} ({modes[name]} parts at once): {statistics.median(measured):6.2f} s "
              f"({', '.join(f'{wall:.2f}' for wall in measured)})")
    ratio = statistics.median(walls["side by side"]) / statistics.median(walls["one at a time"])
    met = ratio <= GOAL
    print(f"  side by side / one at a time: {ratio:.2f} (goal ≤ {GOAL:g})  {'OK' if met else 'ABOVE GOAL'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
