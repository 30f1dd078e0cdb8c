"""Reading a large transcript as a stream: what the depth bound costs, and what it keeps the parser from holding.

Run: ``.venv/bin/python tests/benchmarks/stream_read.py [--mb M] [--repeats N] [--levels D]``

Every windowed job's step and the CLI's large files read transcripts with ``transcript_stream.messages_from``
(docs/scale.md, "Streaming"). A run reads its input several times: the first whole reading of the caller's bytes
refuses a key named twice inside a message (a Python call for every key), the others (the scan's second read, the
windows, the result, every later pass's reads of ``ArrayWriter``'s outputs) do not. An array of M MB (default 64:
corpus sessions, as ``streamed_write.py``'s, written as ``ArrayWriter`` writes a pass output) is read in memory N
times (default 7) each way, in turns:

* ``now``: ``messages_from(..., keys_checked=False)``, the reading of every read but a run's first (16 KiB reads
  through the reader that counts the ``[``, ``{`` and bytes since the last message and searches each read for a
  lone surrogate escape, each message's depth checked);
* ``checked``: ``messages_from`` as the first whole reading of the caller's bytes reads them: ``now``, and every
  key's repetition looked for;
* ``before``: what the reading did until issue 11's twentieth round: ijson's 64 KiB reads, nothing counted or
  searched, each message's depth checked by ``jsonutil.depth_exceeds``;
* ``parse only``: ijson's items alone, nothing checked (the floor).

Every arm must give the same messages. Then two transcripts are read ``checked`` and ``before`` under
``tracemalloc``, the figure the memory the reading held at its peak: one message nested D levels deep (default
12,000: 24 KB of ``[`` and ``]``), which both must refuse, and one message of 120 levels of 40 KB keys (4.8 MB,
within the API's depth), which both must read, in ASCII and with one character past U+FFFF in its first key (which
makes ijson store every deeper name at 4 bytes a character).

Goals: ``now`` takes at most 1.15 of ``before``, ``checked`` at most 1.6 (1.34-1.51 measured, the load moving it:
the key check's cost, paid once a run; its first version, dict subclasses copied afterwards, read 1.70-1.81); at its
peak ``checked`` holds at most 16 MiB on the deep message, and on
the long keys at most half of ``PATH_NAMES_BUDGET`` (128 MiB, the bound on the items' names before the reading
goes path-free: one path of keys of one length holds half of it at most) and four times the text (the text, its
bytes, the message built).
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

GOAL_TIME = 1.15
GOAL_CHECKED = 1.6
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

    return messages_from(lambda: io.BytesIO(data), keys_checked=False)


def read_checked(data: bytes) -> Iterator[dict[str, Any]]:
    from compactor.transcript_stream import messages_from

    return messages_from(lambda: io.BytesIO(data))


def parse_only(data: bytes) -> Iterator[dict[str, Any]]:
    import ijson

    return ijson.items(io.BytesIO(data), "item", use_float=True)


def timed(read: Callable[[bytes], Iterator[dict[str, Any]]], data: bytes) -> tuple[float, int]:
    started = time.perf_counter()
    count = sum(1 for _ in read(data))
    return time.perf_counter() - started, count


def peak_reading(read: Callable[[bytes], Iterator[dict[str, Any]]], data: bytes, *, refused: bool) -> int:
    """The memory traced at the reading's peak; the reading must refuse the transcript, or read it whole."""
    from compactor.transcripts import TranscriptError

    tracemalloc.start()
    try:
        count = len(list(read(data)))
    except TranscriptError as refusal:
        assert refused and "nested deeper than" in str(refusal), refusal
    else:
        assert not refused and count == 1, "the deep transcript was read"
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64.0, help="size of the transcript read (default 64)")
    parser.add_argument("--repeats", type=int, default=7, help="readings each way (default 7)")
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
    arms = {"now": read_now, "checked": read_checked, "before": read_before, "parse only": parse_only}
    first = {name: list(read(data)) for name, read in arms.items()}
    assert first["now"] == first["checked"] == first["before"] == first["parse only"], "the arms gave other messages"
    count = len(first.pop("now"))
    first.clear()
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, read in arms.items():
            elapsed, read_count = timed(read, data)
            assert read_count == count
            seconds[name].append(elapsed)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    ratio, checked = median["now"] / median["before"], median["checked"] / median["before"]
    print(f"stream_read: {len(data) / 1e6:.1f} MB, {count} messages, medians of {args.repeats} in turns")
    for name in arms:
        print(f"  {name:<11} {median[name]:.3f} s ({len(data) / 1e6 / median[name]:.0f} MB/s)")
    time_met, checked_met = ratio <= GOAL_TIME, checked <= GOAL_CHECKED
    print(f"  now / before: {ratio:.2f} (goal <= {GOAL_TIME})  {'OK' if time_met else 'ABOVE GOAL'}")
    print(f"  checked / before: {checked:.2f} (goal <= {GOAL_CHECKED})  {'OK' if checked_met else 'ABOVE GOAL'}")
    print(f"  a run's three readings of its input (one checked) / before: "
          f"{(median['checked'] + 2 * median['now']) / (3 * median['before']):.2f}")

    from compactor.transcript_stream import PATH_NAMES_BUDGET

    levels = args.levels
    deep = ('[{"role": "user", "content": ' + "[" * levels + "]" * levels + "}]").encode()
    def long_keys(first: str) -> bytes:
        return ('[{"role": "user", "content": "x", ' + "".join(
            f'"{index:06d}' + "k" * 39_993 + (first if index == 0 else "k") + '": {' for index in range(120))
            + "}" * 121 + "]").encode()

    keys, wide = long_keys("k"), long_keys("\U0001F600")
    met = time_met and checked_met
    for label, text, refused, goal in (
            (f"a message {levels:,} levels deep", deep, True, GOAL_PEAK),
            ("a message of 120 levels of 40 KB keys", keys, False, PATH_NAMES_BUDGET // 2 + 4 * len(keys)),
            ("the same, an emoji in its first key", wide, False, PATH_NAMES_BUDGET // 2 + 4 * len(wide))):
        peaks = {name: peak_reading(read, text, refused=refused)
                 for name, read in (("checked", read_checked), ("before", read_before))}
        peak_met = peaks["checked"] <= goal
        met &= peak_met
        print(f"  {label} ({len(text) / 1000:.0f} KB), {'refused' if refused else 'read'}: peak traced checked "
              f"{peaks['checked'] / 2 ** 20:.1f} MiB, before {peaks['before'] / 2 ** 20:.0f} MiB (goal checked <= "
              f"{goal / 2 ** 20:.0f} MiB)  {'OK' if peak_met else 'ABOVE GOAL'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
