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
* ``copy only``: the array copied, each part uploaded when it is cut, on the step's thread;
* ``before``: what the step did until issue 11's nineteenth round: parsed (as it read then: ijson's items, each
  message's depth checked) and encoded, each part uploaded when it is cut (docs/performance.md, "Streamed writes").

The two arms that upload each part when it is cut give the writer :class:`OneAfterAnother` in place of
``InFlight``: what the writer did before, not ``InFlight`` with one part at a time (which uploads a part while the
next is being made). Every result must be the same bytes. The figures are the step's wall time (the median of N),
its thread's CPU, and the process's CPU (the upload threads' too; the server's is in its own process).

Goal: ``now`` takes at most 0.65 of ``before``.
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

from fakes import slow_s3  # noqa: E402 - tests/ is on the path from here

BUCKET = "compactor-streamed-write-bench"
GOAL = 0.65


class OneAfterAnother:
    """``InFlight`` as the streamed writer had it before: each call made when pushed, on the caller's thread."""

    def __init__(self, at_once: int) -> None:
        self.done: list[Any] = []

    def make_room(self) -> None:
        pass

    def push(self, call: Any, *args: Any) -> None:
        self.done.append(call(*args))

    def results(self) -> list[Any]:
        return self.done

    def close(self) -> None:
        pass


def parsed_again(out: Any, array: Any, summary: dict[str, Any]) -> None:
    """``write_body`` of the pass output parsed and encoded again, read as an :class:`ArrayWriter`'s bytes are read
    today (``keys_checked=False``: bytes a checked reading went through): the ``parts only`` arm."""
    from contextlib import nullcontext

    from compactor.compaction.windowed import write_body
    from compactor.transcript_stream import messages_from

    write_body(out, messages_from(lambda: nullcontext(array), keys_checked=False), summary, messages_only=False)


def parsed_before(out: Any, array: Any, summary: dict[str, Any]) -> None:
    """``write_body_of_array`` as the step wrote the result before: each message parsed, then encoded, read as the
    step read it then (ijson's items, each message's depth checked: ``stream_read.py``'s ``before``). Until issue 11's
    twenty-fourth round this arm read with today's ``messages_from`` and its defaults: the counting reader of the
    twentieth round and the refusal of a key named twice (a Python call for every key), added after the step changed
    and never part of what it did, which made ``before`` slower than it was."""
    import ijson

    from compactor.compaction.windowed import write_body
    from compactor.jsonutil import MAX_BODY_DEPTH, depth_exceeds

    def messages() -> Any:
        for message in ijson.items(array, "item", use_float=True):
            assert not depth_exceeds(message, MAX_BODY_DEPTH)
            yield message

    write_body(out, messages(), summary, messages_only=False)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=64.0)
    slow_s3.add_options(parser)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with slow_s3.from_options(args):
        import io

        from compactor import large_jobs, side_by_side
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
        copy, in_flight = windowed.write_body_of_array, side_by_side.InFlight
        modes = {"now": (copy, in_flight), "parts only": (parsed_again, in_flight),
                 "copy only": (copy, OneAfterAnother), "before": (parsed_before, OneAfterAnother)}
        walls: dict[str, list[float]] = {name: [] for name in modes}
        cpus: dict[str, list[float]] = {name: [] for name in modes}
        process_cpus: dict[str, list[float]] = {name: [] for name in modes}
        results: set[bytes] = set()
        for repeat in range(args.repeats):
            for name, (body, parts) in (modes.items() if repeat % 2 == 0 else reversed(modes.items())):
                windowed.write_body_of_array, side_by_side.InFlight = body, parts  # type: ignore[misc]
                try:
                    started, cpu, process_cpu = time.perf_counter(), time.thread_time(), time.process_time()
                    key, refused = large_jobs._write_result(store, job, state, output_key, None)
                    cpus[name].append(time.thread_time() - cpu)
                    process_cpus[name].append(time.process_time() - process_cpu)
                    walls[name].append(time.perf_counter() - started)
                finally:
                    windowed.write_body_of_array, side_by_side.InFlight = copy, in_flight  # type: ignore[misc]
                assert refused is None, f"the result was not written: {refused}"
                results.add(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
                client.delete_object(Bucket=BUCKET, Key=key)
        part_bytes, at_once = s3_store.PART_BYTES, s3_store.PARTS_AT_ONCE
    assert len(results) == 1, "the results differ"
    result = next(iter(results))
    assert len(json.loads(result)["messages"]) == messages, "the result is not the pass's messages"
    print(f"streamed_write: a {len(result) / 1e6:.1f} MB result ({-(-len(result) // part_bytes)} parts) around a "
          f"pass output of {messages} messages; S3 a moto server answering {args.latency_ms:g} ms late, bodies at "
          f"{args.mb_per_s:g} MB/s a request; every result the same bytes (medians of {args.repeats})")
    before = statistics.median(walls["before"])
    for name, measured in walls.items():
        body, parts = modes[name]
        how = ("copied" if body is copy else "parsed and encoded") + (
            f", {at_once} parts in flight" if parts is in_flight else ", each part uploaded when cut")
        print(f"  {name:10s} ({how}): {statistics.median(measured):5.2f} s ({statistics.median(measured) / before:.2f}"
              f" of before), thread CPU {statistics.median(cpus[name]):5.2f} s, process CPU "
              f"{statistics.median(process_cpus[name]):5.2f} s ({', '.join(f'{wall:.2f}' for wall in measured)})")
    ratio = statistics.median(walls["now"]) / before
    met = ratio <= GOAL
    print(f"  now / before: {ratio:.2f} (goal ≤ {GOAL:g})  {'OK' if met else 'ABOVE GOAL'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
