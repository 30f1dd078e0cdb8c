"""Windowed compaction of large transcripts with ``compactor compact`` (docs/scale.md).

Run: ``.venv/bin/python tests/benchmarks/large_transcripts.py [--mb 50] [--keep]``;
``COMPACTOR_BENCH_500MB=1`` (or ``--mb 500``) adds the 500 MB run (several minutes).

A transcript of the given size is written by repeating the corpus tool-call sessions, each repetition
made distinct (working directory, call ids, wording: ``tests/scale/transcripts.py``). ``compactor
compact FILE --json`` runs in a child process with the bundled offline offers; the benchmark prints
its wall time, peak RSS (the child's ``ru_maxrss``) and output bytes, then streams input and output
to check the structural invariants: every pinned message (system, developer, user) is there in order,
the recent tail is unchanged, every tool result follows its call, and the reported output size is the
output's. Goals (50 MB): output <= 20% of the input's bytes, <= 60 s, peak RSS <= 1.5 GB; 500 MB:
peak RSS <= 1.5 GB. Exit 1 when an invariant breaks or a goal is missed.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from scale import transcripts  # noqa: E402

from compactor.chat import has_tool_calls, role_of  # noqa: E402
from compactor.jsonutil import dense_dumps  # noqa: E402
from compactor.transcript_stream import messages_from  # noqa: E402

RATIO_GOAL = 0.20
SECONDS_GOAL = 60.0
RSS_GOAL_MB = 1536
KEEP_RECENT = 6


def _digest(message: dict) -> str:
    return hashlib.sha1(dense_dumps(message).encode("utf-8")).hexdigest()


def _pinned_and_tail(path: Path) -> tuple[list[str], list[str], int]:
    pinned, tail, size, count = [], collections.deque(maxlen=KEEP_RECENT), 2, 0
    for message in messages_from(lambda: open(path, "rb")):
        digest = _digest(message)
        if role_of(message) in ("system", "developer", "user"):
            pinned.append(digest)
        tail.append(digest)
        size += len(dense_dumps(message).encode("utf-8")) + (1 if count else 0)
        count += 1
    return pinned, list(tail), size


def check(source: Path, output: Path) -> tuple[list[str], int, dict]:
    """Problems found (empty when every invariant holds), the output's dense bytes, its report."""
    problems: list[str] = []
    pinned, tail, _ = _pinned_and_tail(source)
    out_pinned, out_tail = [], collections.deque(maxlen=KEEP_RECENT)
    open_calls: set[str] = set()
    size, count = 2, 0
    for message in messages_from(lambda: open(output, "rb")):
        digest = _digest(message)
        if role_of(message) in ("system", "developer", "user"):
            out_pinned.append(digest)
        out_tail.append(digest)
        if role_of(message) == "tool":
            if message.get("tool_call_id") not in open_calls:
                problems.append(f"message {count}: tool result without its call")
        else:
            open_calls = {c.get("id") for c in message.get("tool_calls") or []} if has_tool_calls(message) else set()
        size += len(dense_dumps(message).encode("utf-8")) + (1 if count else 0)
        count += 1
    if out_pinned != pinned:
        problems.append(f"pinned messages changed ({len(pinned)} in, {len(out_pinned)} out)")
    if list(out_tail) != tail:
        problems.append("the recent tail changed")
    report = _report(output)
    if report.get("output_bytes") != size:
        problems.append(f"report says {report.get('output_bytes')} output bytes, the output has {size}")
    return problems[:10], size, report


def _report(output: Path) -> dict:
    """The response body's ``compaction`` (written after the messages)."""
    import ijson

    with open(output, "rb") as handle:
        for item in ijson.items(handle, "compaction", use_float=True):
            return item
    return {}


def run(mb: int, workdir: Path, rss_only: bool) -> bool:
    source = workdir / f"transcript-{mb}mb.json"
    output = workdir / f"compacted-{mb}mb.json"
    with open(source, "w", encoding="utf-8") as handle:
        count = transcripts.write(handle, mb * 1_000_000)
    in_bytes = source.stat().st_size
    print(f"{mb} MB transcript: {count} messages, {in_bytes} bytes")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    child = subprocess.run([str(Path(sys.executable).parent / "compactor"), "compact", str(source), "--json",
                            "-o", str(output)], capture_output=True, text=True)
    seconds = time.monotonic() - started
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if child.returncode != 0:
        print(child.stderr[-2000:])
        print(f"FAIL: compactor compact exited {child.returncode}")
        return False
    if rss_mb < before / 1024:
        print("note: peak RSS of an earlier child is higher; figure is an upper bound")
    problems, out_bytes, report = check(source, output)
    dense_in = report.get("original_bytes") or in_bytes
    ratio = out_bytes / dense_in
    passes = report.get("windows", {}).get("passes", [])
    print(f"  wall {seconds:.1f} s, peak RSS {rss_mb:.0f} MB, output {out_bytes} bytes = {100 * ratio:.1f}% of "
          f"{dense_in}; passes: " + "; ".join(f"{p['windows']} windows {p['input_bytes']}->{p['output_bytes']}"
                                              for p in passes))
    ok = not problems
    for problem in problems:
        print(f"  INVARIANT BROKEN: {problem}")
    goals = [("peak RSS <= 1.5 GB", rss_mb <= RSS_GOAL_MB)]
    if not rss_only:
        goals += [(f"output <= {RATIO_GOAL:.0%} of input", ratio <= RATIO_GOAL), (f"wall <= {SECONDS_GOAL:.0f} s", seconds <= SECONDS_GOAL)]
    for name, met in goals:
        print(f"  goal {name}: {'met' if met else 'MISSED'}")
        ok = ok and met
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, action="append", help="transcript size(s) in MB (default 50)")
    parser.add_argument("--keep", action="store_true", help="keep the files (printed directory)")
    args = parser.parse_args()
    sizes = args.mb or [50] + ([500] if os.environ.get("COMPACTOR_BENCH_500MB") == "1" else [])
    if 500 not in sizes:
        print("(500 MB run skipped; COMPACTOR_BENCH_500MB=1 adds it)")
    ok = True
    with tempfile.TemporaryDirectory(prefix="compactor-bench-") as tmp:
        workdir = Path(tmp)
        for mb in sizes:
            ok = run(mb, workdir, rss_only=mb != 50) and ok
            for path in workdir.iterdir():
                if not args.keep:
                    path.unlink()
        if args.keep:
            print(f"files in {workdir} (deleted on exit)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
