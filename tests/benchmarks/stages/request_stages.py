"""Where the goal's run of ``compact_overhead.py`` spends its thread CPU time, stage by stage.

Run: ``.venv/bin/python tests/benchmarks/stages/request_stages.py [--runs N]``
(a diagnostic with no goal, so not among the ``tests/benchmarks/*.py`` that ``make bench`` runs)

Each run is one of the goal's runs with the in-process fake transports: a new session of the benchmark's shape
(other file names) on a new router, from a collected heap; the body parsed (``bounded_loads``), validated
(``CompactRequest``), compacted (``service.compact``) and its answer encoded (``dense_dumps``). The functions below
are wrapped with a timer each (inclusive times: a stage's line holds the stages it calls, indented under it), and
the medians and minima over the runs are printed, with the request's own total beside them. The timers cost one
or two µs a call, so the lines of functions called many times (the routed calls, the data nodes) read a little
high. ``prepare_stages.py`` breaks the preparation down further, ``after_prepare_instructions.py`` counts
instructions.

Thread CPU, because the other processes of a shared machine move wall time most; alternate builds (this tree and
another, run in turns) to compare them (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # compact_overhead.py

import compact_overhead as bench  # noqa: E402

import compactor.compaction.decision as decision  # noqa: E402
import compactor.flow.admit as admit  # noqa: E402
import compactor.flow.execute as execute  # noqa: E402
import compactor.flow.scheduler as scheduler  # noqa: E402
import compactor.router as router  # noqa: E402
from compactor.budget import Deadline  # noqa: E402
from compactor.jsonutil import bounded_loads, dense_dumps  # noqa: E402
from compactor.models import CompactRequest  # noqa: E402
from compactor.service import compact  # noqa: E402

# (owner, name, depth): the functions timed, each inclusive of what it calls; depth indents the line under its caller.
STAGES: tuple[tuple[Any, str, int], ...] = (
    (decision, "prepare", 1), (decision, "materialise", 1), (decision, "admit_flow", 1),
    (admit, "_exact_text", 2), (admit, "_policy_free_texts", 2), (admit, "_check_node", 2),
    (admit, "_check_flow_input", 2), (admit, "_admit_policies", 2), (admit, "_check_questions_for_host", 2),
    (admit, "_canonicalise", 2), (admit, "content_key", 3), (admit, "canonical_order", 3), (admit, "fingerprint", 3),
    (decision, "run_flow", 1), (router.Router, "decide", 2), (router.Router, "chat", 2),
    (bench.FakeTransport, "decide", 3), (bench.FakeTransport, "chat", 3), (execute, "build_prompt", 2),
    (execute, "parse_json_output", 2), (execute, "validate_answers", 2), (scheduler, "execute_data_node", 2),
    (decision, "reassemble", 1), (decision, "compaction_report", 1), (decision, "flow_facts", 1),
)


def _label(owner: Any, name: str) -> str:
    return f"{owner.__name__.rsplit('.', 1)[-1]}.{name}"


def wrap(owner: Any, name: str, spent: dict[str, float]) -> None:
    function, clock = getattr(owner, name), time.thread_time
    label = _label(owner, name)
    if asyncio.iscoroutinefunction(function):
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return await function(*args, **kwargs)
            finally:
                spent[label] += clock() - started

        setattr(owner, name, timed_async)
    else:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += clock() - started

        setattr(owner, name, timed)


async def one_run(body: str, spent: dict[str, float]) -> None:
    """The goal's run (``compact_overhead.run_compact``) with its four parts timed apart."""
    fake = bench.FakeTransport()
    request_router = bench.router_for(fake)
    gc.collect()
    clock = time.thread_time
    started = clock()
    data = bounded_loads(body)
    parsed = clock()
    request = CompactRequest.model_validate(data)
    validated = clock()
    status, answer = await compact(request, deadline=Deadline.after_ms(40_000), router=request_router)
    compacted = clock()
    dense_dumps(answer)
    done = clock()
    assert status == 200, answer
    spent.update({"request": done - started, "bounded_loads": parsed - started,
                  "CompactRequest.model_validate": validated - parsed, "service.compact": compacted - validated,
                  "dense_dumps(answer)": done - compacted})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=31)
    args = parser.parse_args()
    bodies = [bench.overhead_body(f"_stage{run}") for run in range(args.runs + 1)]  # a new session each run
    spent: dict[str, float] = defaultdict(float)
    asyncio.run(one_run(bodies[-1], spent))  # the process's first use of the path, not counted
    labels = {}
    for owner, name, depth in STAGES:
        wrap(owner, name, spent)
        labels[_label(owner, name)] = depth
    per: dict[str, list[float]] = defaultdict(list)
    for body in bodies[:args.runs]:
        spent.clear()
        asyncio.run(one_run(body, spent))
        for label, seconds in spent.items():
            per[label].append(seconds)
    print(f"request_stages: thread CPU per stage of the goal's run (fake transports), median and min of "
          f"{args.runs} runs (ms):")
    parts = ("request", "bounded_loads", "CompactRequest.model_validate", "service.compact", "dense_dumps(answer)")
    for label in (*parts, *labels):
        if label in per:
            indent = "  " * (labels.get(label, 0) + (label not in ("request", *labels)))
            print(f"  {statistics.median(per[label]) * 1000:7.3f} {min(per[label]) * 1000:7.3f}  {indent}{label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
