"""Instructions per run of decision mode's stages after the preparation on ``compact_overhead.py``'s 900 KB
request, counted by valgrind: figures that the load of a shared machine does not move.

Run: ``.venv/bin/python tests/benchmarks/stages/after_prepare_instructions.py [--runs N] [--stages ...]``
(a diagnostic with no goal, so not among the ``tests/benchmarks/*.py`` that ``make bench`` runs; it needs
``valgrind``; the setup takes about 20 s under it, each count 20–60 s)

Each stage runs in a process under ``valgrind --tool=cachegrind --cache-sim=no`` (``PYTHONHASHSEED=0``) twice:
once with no run of the stage and once with N, after the same setup (one whole ``service.compact`` of the
request, which catches the stage's arguments); the difference over N is the stage's instructions per run,
reproducible to about 0.05 %. Each run is on a new router, as the goal's runs are:

* ``admit``: ``admit_flow`` of the request's flow term and flow input (new router, so its admission cache
  misses and the two policies are admitted anew);
* ``run``: ``run_flow`` of the admitted flow with the benchmark's fake transports (the admission of each run
  is counted once more and taken off);
* ``report``: ``DecisionMode.report`` (reassembly, the compaction report, the call record) of the run;
* ``compact``: the whole ``service.compact`` of the validated request, the preparation included.

Instruction counts are not time (the fingerprint's ``math.sumprod``, for one, runs many instructions a
cycle), but a change that takes instructions off a stage takes time off it: compare two builds by running
this script in each (docs/performance.md, "After the preparation, seventh round").

``--by-function K``: instead, the K Python functions with the most instructions a run of each stage, callees
included, under ``valgrind --tool=callgrind`` with ``python -X perf``: Python 3.12 gives each Python function
its own small trampoline, which callgrind counts as a function, and names it in ``/tmp/perf-<pid>.map``
(the same N runs less none; the trampolines add about 1.5%; docs/performance.md, "The whole hot path,
eleventh round").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))  # compact_overhead.py

STAGES = ("admit", "run", "report", "compact")


def workload(stage: str, runs: int) -> None:
    """In the process valgrind counts: the setup, then ``runs`` runs of ``stage``."""
    import compact_overhead as bench

    from compactor.budget import Deadline
    from compactor.compaction import decision
    from compactor.flow import admit_flow, run_flow
    from compactor.models import CompactRequest
    from compactor.service import compact

    caught: dict[str, Any] = {}
    admit, report = decision.admit_flow, decision.DecisionMode.report

    def catch_admit(flow_ir: Any, **options: Any) -> Any:
        caught["term"], caught["options"] = flow_ir, options
        return admit(flow_ir, **options)

    def catch_report(self: Any, request: Any, plan: Any, ran: Any) -> Any:
        caught["report"] = (self, request, plan, ran)
        return report(self, request, plan, ran)

    decision.admit_flow = catch_admit  # type: ignore[assignment]
    decision.DecisionMode.report = catch_report  # type: ignore[method-assign]
    body = bench.overhead_body()
    asyncio.run(bench.run_compact(body, bench.FakeTransport()))
    decision.admit_flow, decision.DecisionMode.report = admit, report  # type: ignore[method-assign]
    term, options = caught["term"], caught["options"]
    request = CompactRequest.model_validate_json(body)

    def admitted(router: Any) -> Any:
        return admit_flow(term, admit_policy=router.admit_policy, flow_input=options["flow_input"],
                          flow_input_bytes=options["flow_input_bytes"], cache=router.flow_admissions)

    async def go() -> None:
        for _ in range(runs):
            router = bench.router_for(bench.FakeTransport())
            if stage in ("admit", "run"):
                flow = admitted(router)
                if stage == "run":
                    await run_flow(flow, options["flow_input"], router=router, deadline=Deadline.after_ms(40_000))
            elif stage == "report":
                mode, req, plan, ran = caught["report"]
                report(mode, req, plan, ran)
            else:
                await compact(request, deadline=Deadline.after_ms(40_000), router=router)

    asyncio.run(go())


def instructions(stage: str, runs: int) -> int:
    """The instructions valgrind counts in a process that runs ``stage`` ``runs`` times after the setup."""
    result = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", sys.executable,
         str(HERE), "--inner", stage, str(runs)],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {result.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def _inclusive_by_function(runs: int, stage: str, workdir: str) -> dict[str, int]:
    """Inclusive instructions of each Python function (by its perf trampoline) in a process running ``stage``
    ``runs`` times after the setup."""
    out = os.path.join(workdir, f"callgrind.{runs}")
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--smc-check=all", f"--callgrind-out-file={out}", sys.executable, "-X",
         "perf", str(HERE), "--inner", stage, str(runs)],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    pid = re.search(r"^==(\d+)==", result.stderr, re.MULTILINE)
    perf_map = Path(f"/tmp/perf-{pid.group(1) if pid else 0}.map")
    names = {}
    for line in perf_map.read_text().splitlines():  # "<address> <size> py::<function>:<file>"
        address, _, name = line.split(" ", 2)
        names[int(address, 16)] = name.removeprefix("py::")
    perf_map.unlink()
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                               capture_output=True, text=True, check=True).stdout
    counts: dict[str, int] = {}
    for found in re.finditer(r"^\s*([\d,]+)\s+\([^)]*\)\s+\?\?\?:0x([0-9a-f]+)\s", annotated, re.MULTILINE):
        name = names.get(int(found.group(2), 16))  # a recursive cycle's entries ("0x...'2") are left out
        if name is not None:
            counts[name] = counts.get(name, 0) + int(found.group(1).replace(",", ""))
    return counts


def by_function(stage: str, runs: int) -> list[tuple[str, float]]:
    """Each Python function's inclusive instructions a run of ``stage`` (N runs less none), the most first."""
    import tempfile

    with tempfile.TemporaryDirectory() as workdir:
        none, some = _inclusive_by_function(0, stage, workdir), _inclusive_by_function(runs, stage, workdir)
    per_run = {name: (count - none.get(name, 0)) / runs for name, count in some.items()
               if "/asyncio/" not in name and not name.endswith(str(HERE))}  # the loop's and this script's frames
    return sorted(per_run.items(), key=lambda item: -item[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument("--by-function", type=int, default=0, metavar="K",
                        help="the K Python functions with the most instructions instead (callgrind, -X perf)")
    parser.add_argument("--inner", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        workload(args.inner[0], int(args.inner[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("after_prepare_instructions: valgrind is not installed (apt-get install valgrind)")
        return 1
    if args.by_function:
        for stage in args.stages:
            print(f"{stage}: instructions per run by Python function, callees included "
                  f"(callgrind, python -X perf, {args.runs} runs less none):")
            for name, count in by_function(stage, args.runs)[:args.by_function]:
                print(f"  {count / 1e6:9.2f} M  {name}")
        return 0
    setup = instructions("admit", 0)
    counted: dict[str, int] = {}
    for stage in args.stages:
        counted[stage] = (instructions(stage, args.runs) - setup) // args.runs
    if "run" in counted:
        counted["run"] -= counted["admit"] if "admit" in counted else (instructions("admit", args.runs) - setup) // args.runs
    print(f"instructions per run (valgrind, {args.runs} runs less none, each on a new router):")
    for stage, count in counted.items():
        label = "run (admission taken off)" if stage == "run" else stage
        print(f"  {label:28s} {count / 1e6:9.2f} M")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
