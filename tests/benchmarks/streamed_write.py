"""A windowed job's last step as S3's throughput makes it: the result written around the last pass's output.

Run: ``.venv/bin/python tests/benchmarks/streamed_write.py [--mb M] [--latency-ms L] [--mb-per-s R] [--repeats N]``

When a windowed job's last pass ends, ``assemble`` writes the result object (``large_jobs._write_result``): the
pass's output (a JSON array of messages ``assemble`` wrote to S3) inside the response body, streamed into
``S3Store.open_writer``, a multipart upload of 8 MiB parts. A part is a request that carries 8 MiB, about 0.1 s
at one connection's throughput. The bucket is ``tests/fakes/slow_s3.py``: a ``moto`` S3 server in a process of its
own that answers every request L ms late (default 25) and moves each request's and answer's body at R MB/s
(default 90, what S3's performance guidelines plan for one connection).

A pass output of M MB (default 64: corpus sessions, as ``windowed_job.py``'s, written as ``assemble`` writes it)
is stored once, and the step runs on it N times (default 5) each way, in turns, on a job ``plan`` started (its
state, not the windows, is what the result's summary reads):

* ``now``: as the step runs (the array copied as it is; ``s3_store.PARTS_AT_ONCE`` parts uploading while the text
  goes on);
* ``parts only``: the array parsed and encoded again message by message, parts side by side;
* ``before``: what the step did until issue 11's nineteenth round: parsed and encoded, one part at a time
  (docs/performance.md, "Streamed writes").

Every result must be the same bytes. The figures are the step's wall time (the median of N) and its thread's CPU.

Goal: ``now`` takes at most 0.65 of ``before`` (0.56 in this round's first run; parts side by side alone about 0.85).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests")]

BUCKET = "compactor-streamed-write-bench"
GOAL = 0.65


def parsed_again(out: Any, array: Any, summary: dict[str, Any]) -> None:
    """``write_body_of_array`` as the step wrote the result before: each message parsed, then encoded."""
    from compactor.compaction.windowed import write_body
    from compactor.transcript_stream import iter_messages

    write_body(out, iter_messages(array), summary, messages_only=False)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=64.0)
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--mb-per-s", type=float, default=90.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from fakes.slow_s3 import SlowS3

    with SlowS3(args.latency_ms, args.mb_per_s):
        import io

        from compactor import large_jobs
        from compactor.compaction import windowed
        from compactor.compaction.windows import RunState
        from compactor.object_jobs import Defaults, Source
        from compactor.transcript_stream import ArrayWriter
        from compactor_aws import s3_store
        from compactor_aws.s3_store import S3Store, s3_client
        from scale import transcripts

        client = s3_client()
        client.create_bucket(Bucket=BUCKET)
        store = S3Store()
        client.put_object(Bucket=BUCKET, Key="incoming/job.json", Body=json.dumps(
            list(transcripts.messages(200_000))).encode())
        head = client.head_object(Bucket=BUCKET, Key="incoming/job.json")
        job = large_jobs.job_input(Source(BUCKET, "incoming/job.json", head.get("VersionId"),
                                          head["ETag"].strip('"')), max_concurrency=8)["job"]
        large_jobs.plan(store, job, Defaults())
        state = RunState.from_dict(large_jobs._get_json(store, BUCKET, large_jobs._work(job, "state.json"))["state"])
        array = io.StringIO()
        writer = ArrayWriter(array)
        messages = 0
        for message in transcripts.messages(int(args.mb * 1_000_000)):
            writer.write(message)
            messages += 1
        writer.finish()
        output_key = large_jobs._work(job, "p1/output.json")
        client.put_object(Bucket=BUCKET, Key=output_key, Body=array.getvalue().encode())
        del array
        at_once, copy = s3_store.PARTS_AT_ONCE, windowed.write_body_of_array
        modes = {"now": (copy, at_once), "parts only": (parsed_again, at_once), "before": (parsed_again, 1)}
        walls: dict[str, list[float]] = {name: [] for name in modes}
        cpus: dict[str, list[float]] = {name: [] for name in modes}
        results: set[bytes] = set()
        for repeat in range(args.repeats):
            for name, (body, parts) in (modes.items() if repeat % 2 == 0 else reversed(modes.items())):
                windowed.write_body_of_array, s3_store.PARTS_AT_ONCE = body, parts
                try:
                    started, cpu = time.perf_counter(), time.thread_time()
                    key = large_jobs._write_result(store, job, state, output_key, None)
                    cpus[name].append(time.thread_time() - cpu)
                    walls[name].append(time.perf_counter() - started)
                finally:
                    windowed.write_body_of_array, s3_store.PARTS_AT_ONCE = copy, at_once
                results.add(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
                client.delete_object(Bucket=BUCKET, Key=key)
        part_bytes = s3_store.PART_BYTES
    assert len(results) == 1, "the results differ"
    result = next(iter(results))
    assert len(json.loads(result)["messages"]) == messages, "the result is not the pass's messages"
    print(f"streamed_write: a {len(result) / 1e6:.1f} MB result ({-(-len(result) // part_bytes)} parts) around a "
          f"pass output of {messages} messages; S3 a moto server answering {args.latency_ms:g} ms late, bodies at "
          f"{args.mb_per_s:g} MB/s a request; every result the same bytes (medians of {args.repeats})")
    for name, measured in walls.items():
        body, parts = modes[name]
        how = "copied" if body is copy else "parsed and encoded"
        print(f"  {name:10s} ({how}, {parts} parts at once): {statistics.median(measured):5.2f} s, thread CPU "
              f"{statistics.median(cpus[name]):5.2f} s ({', '.join(f'{wall:.2f}' for wall in measured)})")
    ratio = statistics.median(walls["now"]) / statistics.median(walls["before"])
    parts_ratio = statistics.median(walls["parts only"]) / statistics.median(walls["before"])
    met = ratio <= GOAL
    print(f"  now / before: {ratio:.2f} (goal ≤ {GOAL:g}); parts only / before: {parts_ratio:.2f}  "
          f"{'OK' if met else 'ABOVE GOAL'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
