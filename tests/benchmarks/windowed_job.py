"""A windowed job's own steps against S3's latency: ``plan`` and ``assemble`` (docs/scale.md).

Run: ``.venv/bin/python tests/benchmarks/windowed_job.py [--mb M] [--latency-ms L] [--mb-per-s R] [--repeats N]``

A transcript too large for one invocation becomes a windowed job: ``plan`` streams it and writes one task per
window, the Distributed Map's workers compact the windows, and ``assemble`` reads every window's task and result
back in order into the pass's output (two requests a window since issue 11's nineteenth round, the task and the
result; three before, with the result's head). Each of those is an S3 round trip, and a 500 MB transcript makes
about 1,000 windows. The bucket here is
``tests/fakes/slow_s3.py``: a ``moto`` S3 server in a process of its own that answers every request L
milliseconds late (default 25) and moves bodies at R MB/s a request (default 90), reached through
``compactor_aws.s3_store.S3Store`` on the container's client, as the steps run deployed.

A transcript of M MB (default 12: corpus sessions, as ``large_transcripts.py``'s) is uploaded under a name per
run, and each is run as a job, step by step in this process, the windows compacted by the bundled offline offers
between the steps (not timed): as the steps run (``large_jobs.WINDOWS_AT_ONCE`` windows in flight) and with one
window at a time (what they did before; docs/performance.md, "Windowed jobs"), N times each (default 3), in
turns. Its outputs are one PutObject each, below a streamed write's first part (``streamed_write.py`` times
those). Every job's result must be the same bytes. The figures are each step's wall time (all passes' ``plan`` and
``assemble`` together; medians of the N) and the S3 requests it made.

Goal: ``plan`` and ``assemble`` together take at most 0.6 of the time they take one window at a time (their CPU,
the scan of the transcript above all, is the same either way).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests")]

from fakes import slow_s3  # noqa: E402 - tests/ is on the path from here

BUCKET = "compactor-windowed-bench"
GOAL = 0.6


class RequestCounter:
    """Counts the S3 requests the client sends (from every thread)."""

    def __init__(self, client: Any) -> None:
        self.lock = threading.Lock()
        self.count = 0
        client.meta.events.register("before-send.s3.*", self.seen)

    def seen(self, **_: Any) -> None:
        with self.lock:
            self.count += 1


def run_job(store: Any, client: Any, counter: RequestCounter, key: str, router: Any
            ) -> tuple[dict[str, float], dict[str, int], bytes]:
    """The job of ``key`` step by step: each step's wall time and S3 requests, and the result's bytes."""
    from compactor import large_jobs
    from compactor.budget import Deadline
    from compactor.object_jobs import Defaults, Source

    head = client.head_object(Bucket=BUCKET, Key=key)
    source = Source(BUCKET, key, head.get("VersionId"), head["ETag"].strip('"'))
    job = large_jobs.job_input(source, max_concurrency=8)["job"]
    wall = {"plan": 0.0, "assemble": 0.0}
    requests = {"plan": 0, "assemble": 0}

    def timed(step: str, call: Any) -> Any:
        counted = counter.count
        started = time.perf_counter()
        out = call()
        wall[step] += time.perf_counter() - started
        requests[step] += counter.count - counted
        return out

    state = timed("plan", lambda: large_jobs.plan(store, job, Defaults()))
    while not state["done"]:
        with store.open(BUCKET, state["windows_key"]) as handle:
            items = json.loads(handle.read())
        for item in items:  # the Distributed Map's workers, one after another here (not timed)
            asyncio.run(large_jobs.run_window(store, BUCKET, item, router=router,
                                              deadline=Deadline.after_ms(600_000)))
        state = timed("assemble", lambda: large_jobs.assemble(store, job))
    assert state["result"] == "compacted", state
    return wall, requests, client.get_object(Bucket=BUCKET, Key=state["key"])["Body"].read()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=12.0)
    slow_s3.add_options(parser)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with slow_s3.from_options(args):
        from compactor import large_jobs
        from compactor_aws.s3_store import S3Store, s3_client
        from fakes.routers import frozen_router
        from scale import transcripts

        client = s3_client()
        client.create_bucket(Bucket=BUCKET)
        counter = RequestCounter(client)
        body = json.dumps(list(transcripts.messages(int(args.mb * 1_000_000)))).encode()
        store, router = S3Store(), frozen_router()
        at_once = large_jobs.WINDOWS_AT_ONCE
        modes = {"side by side": at_once, "one at a time": 1}
        runs: dict[str, list[tuple[dict[str, float], dict[str, int], bytes]]] = {name: [] for name in modes}
        for repeat in range(args.repeats):
            for name, windows_at_once in (modes.items() if repeat % 2 == 0 else reversed(modes.items())):
                key = f"incoming/{name.replace(' ', '-')}-{repeat}.json"  # a job of its own
                client.put_object(Bucket=BUCKET, Key=key, Body=body)
                large_jobs.WINDOWS_AT_ONCE = windows_at_once
                try:
                    runs[name].append(run_job(store, client, counter, key, router))
                finally:
                    large_jobs.WINDOWS_AT_ONCE = at_once
    results = {result for measured in runs.values() for _, _, result in measured}
    assert len(results) == 1, "the jobs' results differ"
    result = next(iter(results))
    passes = json.loads(result)["compaction"]["windows"]["passes"]
    print(f"windowed_job: a {len(body) / 1e6:.1f} MB transcript, {sum(p['windows'] for p in passes)} windows in "
          f"{len(passes)} pass(es), a {len(result) / 1e6:.1f} MB result; S3 a moto server answering "
          f"{args.latency_ms:g} ms late, bodies at {args.mb_per_s:g} MB/s a request; every job's result the same "
          f"bytes (medians of {args.repeats})")
    totals = {}
    for name, measured in runs.items():
        plan = statistics.median(wall["plan"] for wall, _, _ in measured)
        assemble = statistics.median(wall["assemble"] for wall, _, _ in measured)
        totals[name] = statistics.median(wall["plan"] + wall["assemble"] for wall, _, _ in measured)
        requests = measured[0][1]
        print(f"  {name:13s} ({modes[name]} at once): plan {plan:6.2f} s ({requests['plan']} requests), "
              f"assemble {assemble:6.2f} s ({requests['assemble']} requests)")
    ratio = totals["side by side"] / totals["one at a time"]
    met = ratio <= GOAL
    print(f"  plan + assemble, side by side / one at a time: {ratio:.2f} "
          f"({totals['side by side']:.2f} s against {totals['one at a time']:.2f}; goal ≤ {GOAL:g})  "
          f"{'OK' if met else 'ABOVE GOAL'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
