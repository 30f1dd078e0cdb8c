"""Units of transcripts whose calls are answered late: ``paired_split``'s worst cases (docs/performance.md).

Run: ``.venv/bin/python tests/benchmarks/late_answers.py [--items 20000] [--no-cli]``

Three ``anthropic-messages`` transcripts of about ``--items`` messages, each a worst case of the algorithm used
until pair9 (quadratic: it read all that lies between a call and its late answer again for each message it took
into the call's unit, read it again for each unit answered past other work, and copied the unit's open calls for
each message):

* ``one late``: one ``tool_use`` answered after all the other messages (assistant messages, no other work);
* ``many late``: a third of the messages are calls, each followed by a message, all answered after a human turn at
  the end (each call's unit ends there and its answer is a late pair);
* ``parallel``: half the messages are calls in a row, the other half their results;
* ``reused id``: a harness that names every call ``toolu_1``, each answered after a human turn (an approval) and a
  message: each call's unit ends at the turn and its answer is a late pair. pair9's split looked through every unit's
  span of the id at each of its answers (quadratic in the calls: 0.42 s at 16,000 messages, 1.46 s at 32,000).

For each: the seconds of the dialect's unit split (``split_units``, as one request finds the units), of a stream's
facts (``StreamFacts.units``, as a windowed scan finds them), and of ``compactor compact FILE --json -q`` in a child
process with the bundled offline offers (which finds them several times). Each split is also timed on the same shape
a tenth as long, in the same run (the fastest of three each), and the goal is read as a ratio, which a loaded machine
moves far less than a time: each split's time per message at ``--items`` at most ``GOAL_GROWTH`` (3) times its time
per message at a tenth of them. A linear split reads about 1; the quadratic one read about 10.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GOAL_GROWTH = 3.0


def _use(call: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "bash", "input": {}}]}


def _result(call: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": "ok"}]}


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


def one_late(items: int) -> list[dict[str, Any]]:
    return [_text("user", "start"), _use("toolu_late"), *(_text("assistant", f"working {k}") for k in range(items - 3)),
            _result("toolu_late")]


def many_late(items: int) -> list[dict[str, Any]]:
    calls = (items - 3) // 3
    messages = [_text("user", "start")]
    for k in range(calls):
        messages += [_use(f"toolu_{k}"), _text("assistant", f"meanwhile {k}")]
    return [*messages, _text("user", "status?"), _text("assistant", "waiting"),
            *(_result(f"toolu_{k}") for k in range(calls))]


def parallel(items: int) -> list[dict[str, Any]]:
    calls = (items - 1) // 2
    return [_text("user", "start"), *(_use(f"toolu_{k}") for k in range(calls)),
            *(_result(f"toolu_{k}") for k in range(calls))]


def reused_id(items: int) -> list[dict[str, Any]]:
    messages = [_text("user", "start")]
    for k in range((items - 1) // 4):
        messages += [_use("toolu_1"), _text("user", f"approve {k}?"), _text("assistant", "approved"),
                     _result("toolu_1")]
    return messages


def _split_units(dialect: Any, messages: list[dict[str, Any]]) -> tuple[Any, float]:
    """The dialect's units of ``messages`` and the fastest of three splits' seconds."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        units = dialect.split_units(messages)
        best = min(best, time.perf_counter() - started)
    return units, best


def _stream_units(dialect: Any, messages: list[dict[str, Any]]) -> tuple[Any, float]:
    """The units a stream's facts find in ``messages`` and the fastest of three finds' seconds (the facts added
    before the clock)."""
    best = float("inf")
    for _ in range(3):
        facts = dialect.stream_facts()
        for message in messages:
            facts.add(message)
        started = time.perf_counter()
        units = facts.units()
        best = min(best, time.perf_counter() - started)
    return units, best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--no-cli", action="store_true", help="time the splits only")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "layers" / "compactor"))
    from compactor.formats import get_dialect

    dialect = get_dialect("anthropic-messages")
    # The child runs this tree's code, as the splits above do.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "layers" / "compactor"), str(REPO / "cli"), os.environ.get("PYTHONPATH", "")])}
    met = True
    with tempfile.TemporaryDirectory() as workdir:
        for label, shape in (("one late", one_late), ("many late", many_late), ("parallel", parallel),
                             ("reused id", reused_id)):
            messages = shape(args.items)
            units, split = _split_units(dialect, messages)
            streamed, stream = _stream_units(dialect, messages)
            same = streamed == units
            short = shape(args.items // 10)
            split_growth = split / len(messages) / (_split_units(dialect, short)[1] / len(short))
            stream_growth = stream / len(messages) / (_stream_units(dialect, short)[1] / len(short))
            met &= same and split_growth <= GOAL_GROWTH and stream_growth <= GOAL_GROWTH
            line = (f"{label}: {len(messages)} messages, {len(units)} units; split_units {split:.2f} s "
                    f"(per message x{split_growth:.2f} of a tenth as long), StreamFacts.units {stream:.2f} s "
                    f"(x{stream_growth:.2f}){'' if same else ', NOT THE SAME UNITS'}")
            if not args.no_cli:
                path = Path(workdir) / "transcript.json"
                path.write_text(json.dumps({"format": "anthropic-messages", "messages": messages}))
                started = time.monotonic()
                child = subprocess.run([str(Path(sys.executable).parent / "compactor"), "compact", str(path),
                                        "--json", "-q", "-o", str(Path(workdir) / "out.json")],
                                       capture_output=True, text=True, env=env)
                line += f"; compactor compact {time.monotonic() - started:.2f} s (rc {child.returncode})"
                met &= child.returncode == 0
            print(line)
    print(f"goal: each split's time per message grows at most x{GOAL_GROWTH} over ten times the messages  "
          f"{'OK' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
