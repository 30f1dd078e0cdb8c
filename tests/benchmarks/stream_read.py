"""Reading a large transcript as a stream: what the depth bound costs, and what it keeps the parser from holding.

Run: ``.venv/bin/python tests/benchmarks/stream_read.py [--mb M] [--repeats N] [--levels D]``

Every windowed job's step and the CLI's large files read transcripts with ``transcript_stream.messages_from``
(docs/scale.md, "Streaming"). An array of M MB (default 64: corpus sessions, as ``streamed_write.py``'s, written
as ``ArrayWriter`` writes a pass output) is read in memory N times (default 5) each way, in turns:

* ``now``: ``messages_from`` as the steps read (16 KiB reads through the stream that counts the ``[`` and
  ``{`` since the last message, each message's depth checked);
* ``before``: what the reading did until issue 11's twentieth round: ijson's 64 KiB reads, nothing counted,
  each message's depth checked by ``jsonutil.depth_exceeds``;
* ``parse only``: ijson's items alone, nothing checked (the floor).

Every arm must give the same messages. Then a transcript of one message nested D levels deep (default 12,000:
24 KB of ``[`` and ``]``) is read both ways under ``tracemalloc``: each must be refused, and the figure is the
memory the reading held at its peak.

Goals: ``now`` takes at most 1.05 of ``before``, and holds at most 16 MiB at its peak on the deep transcript.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests")]

GOAL_TIME = 1.05
GOAL_PEAK = 16 * 2 ** 20


def read_before(data: bytes) -> Iterator[dict[str, Any]]:
    """The reading as it was: ijson's items on its default reads, each message's depth by ``depth_exceeds``."""
    import ijson

    from compactor.jsonutil import MAX_BODY_DEPTH, depth_exceeds
    from compactor.transcripts import TranscriptError

    for index, message in enumerate(ijson.items(io.BytesIO(data), "item", use_float=True)):
        if depth_exceeds(message, MAX_BODY_DEPTH):
            raise TranscriptError(f"message {index} is nested deeper than {MAX_BODY_DEPTH} levels")
        yield message


def read_now(data: bytes) -> Iterator[dict[str, Any]]:
    from compactor.transcript_stream import messages_from

    return messages_from(lambda: io.BytesIO(data))


def parse_only(data: bytes) -> Iterator[dict[str, Any]]:
    import ijson

    return ijson.items(io.BytesIO(data), "item", use_float=True)


def timed(read: Callable[[bytes], Iterator[dict[str, Any]]], data: bytes) -> tuple[float, int]:
    started = time.perf_counter()
    count = sum(1 for _ in read(data))
    return time.perf_counter() - started, count


def peak_refusing(read: Callable[[bytes], Iterator[dict[str, Any]]], data: bytes) -> int:
    """The memory traced at the reading's peak; the reading must refuse the transcript."""
    from compactor.transcripts import TranscriptError

    tracemalloc.start()
    try:
        list(read(data))
    except TranscriptError as refused:
        assert "nested deeper than" in str(refused), refused
    else:
        raise AssertionError("the deep transcript was read")
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64.0, help="size of the transcript read (default 64)")
    parser.add_argument("--repeats", type=int, default=5, help="readings each way (default 5)")
    parser.add_argument("--levels", type=int, default=12_000, help="depth of the deep transcript (default 12,000)")
    args = parser.parse_args()

    from compactor.transcript_stream import ArrayWriter
    from scale import transcripts

    text = io.StringIO()
    writer = ArrayWriter(text)
    for message in transcripts.messages(int(args.mb * 1_000_000)):
        writer.write(message)
    writer.finish()
    data = text.getvalue().encode("utf-8")
    arms = {"now": read_now, "before": read_before, "parse only": parse_only}
    first = {name: list(read(data)) for name, read in arms.items()}
    assert first["now"] == first["before"] == first["parse only"], "the arms gave other messages"
    count = len(first.pop("now"))
    first.clear()
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, read in arms.items():
            elapsed, read_count = timed(read, data)
            assert read_count == count
            seconds[name].append(elapsed)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    ratio = median["now"] / median["before"]
    print(f"stream_read: {len(data) / 1e6:.1f} MB, {count} messages, medians of {args.repeats} in turns")
    for name in arms:
        print(f"  {name:<11} {median[name]:.3f} s ({len(data) / 1e6 / median[name]:.0f} MB/s)")
    time_met = ratio <= GOAL_TIME
    print(f"  now / before: {ratio:.2f} (goal <= {GOAL_TIME})  {'OK' if time_met else 'ABOVE GOAL'}")

    levels = args.levels
    deep = ('[{"role": "user", "content": ' + "[" * levels + "]" * levels + "}]").encode()
    peaks = {name: peak_refusing(read, deep) for name, read in (("now", read_now), ("before", read_before))}
    peak_met = peaks["now"] <= GOAL_PEAK
    print(f"  a message {levels:,} levels deep ({len(deep) / 1000:.0f} KB), refused: peak traced now "
          f"{peaks['now'] / 2 ** 20:.1f} MiB, before {peaks['before'] / 2 ** 20:.0f} MiB (goal now <= "
          f"{GOAL_PEAK // 2 ** 20} MiB)  {'OK' if peak_met else 'ABOVE GOAL'}")
    return 0 if time_met and peak_met else 1


if __name__ == "__main__":
    sys.exit(main())
