"""Where ``preparation.prepare`` spends its thread CPU time on the 900 KB request of ``compact_overhead.py``.

Run: ``.venv/bin/python tests/benchmarks/stages/prepare_stages.py [--runs N] [--small] [--statements]``
(a diagnostic with no goal, so not among the ``tests/benchmarks/*.py`` that ``make bench`` runs)

``prepare`` gets the arguments ``service.compact`` gives it on that request (caught from one run of the
benchmark's own path), then runs N times untimed (its thread CPU time, median and minimum) and N times with
timers: each function of the stages below is wrapped, and each wrapper adds its thread CPU time less that of
the wrapped functions it calls (exclusive times, so the column adds up to the total with the timers' own cost,
one or two µs a call, spread over the stages). ``--statements`` times each top-level statement of ``prepare``
instead (a copy of its source with a timer after each). ``--small``: the same transcript with 40-character
tool outputs, whose time is the preparation's work per message rather than per character.

Thread CPU time, because the other processes of a shared machine move wall time most; alternate builds (this
tree and another, run in turns) to compare them (docs/performance.md).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import gc
import inspect
import statistics
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # compact_overhead.py

import compact_overhead as bench  # noqa: E402

import compactor.compaction.decision as decision  # noqa: E402
import compactor.compaction.preparation as preparation  # noqa: E402
import compactor.compaction.salience as salience  # noqa: E402
from compactor.formats.openai_chat import OpenAIChat  # noqa: E402

# (owner, name): the functions timed, each exclusive of the others it calls.
STAGES: tuple[tuple[Any, str], ...] = (
    (OpenAIChat, "split_units"), (preparation, "instruction_pins"), (preparation, "_long_content_size"),
    (preparation, "dense_dumps"), (preparation, "instructions_view"), (OpenAIChat, "model_view"),
    (preparation, "recent_view"), (preparation, "BatchSizer"), (preparation, "measured_candidate"),
    (preparation, "fit_batches"), (preparation, "_add_salience"), (preparation, "_view_names"),
    (salience, "names_in"), (preparation, "last_uses"), (preparation, "quoted_actions"),
    (preparation, "text_wire_size"), (preparation, "hint_order"), (preparation, "batch_hint"),
    (preparation, "sized_later_block"), (preparation, "flow_input_size"),
)


def prepare_arguments(small: bool) -> tuple[list[Any], dict[str, Any]]:
    """The messages and keyword arguments ``service.compact`` passes to ``prepare`` on the benchmark's request."""
    body = bench.request_body(bench.transcript(128, 40, tail_chars=40, reread_after=bench.REREAD_AFTER),
                              keep_recent=3) if small else bench.overhead_body()
    caught: dict[str, Any] = {}
    real = decision.prepare

    def catch(messages: list[Any], **kwargs: Any) -> Any:
        caught["messages"], caught["kwargs"] = messages, kwargs
        return real(messages, **kwargs)

    decision.prepare = catch
    try:
        asyncio.run(bench.run_compact(body, bench.FakeTransport()))
    finally:
        decision.prepare = real
    return caught["messages"], caught["kwargs"]


class Timers:
    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.stack = [0.0]  # per open call: the time of the timed calls inside it

    def wrap(self, owner: Any, name: str) -> None:
        function = getattr(owner, name)
        spent, stack, clock = self.spent, self.stack, time.thread_time

        def timed(*args: Any, **kwargs: Any) -> Any:
            stack.append(0.0)
            started = clock()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = clock() - started
                spent[name] += elapsed - stack.pop()
                stack[-1] += elapsed

        setattr(owner, name, timed)


def statement_timed_prepare(spent: dict[str, float]) -> Callable[..., Any]:
    """``prepare`` compiled from its source with a timer after each top-level statement."""
    source = textwrap.dedent(inspect.getsource(preparation.prepare))
    tree = ast.parse(source)
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    body: list[ast.stmt] = ast.parse("__timer(None)").body
    for index, statement in enumerate(function.body):
        body.append(statement)
        if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):  # not the docstring
            label = f"{index:2d} " + (ast.get_source_segment(source, statement) or "").splitlines()[0][:70]
            body.extend(ast.parse(f"__timer({label!r})").body)
    function.body = body
    ast.fix_missing_locations(tree)
    last = [0.0]

    def timer(label: str | None) -> None:
        now = time.thread_time()
        if label is not None:
            spent[label] += now - last[0]
        last[0] = time.thread_time()

    namespace = dict(vars(preparation), __timer=timer)
    exec(compile(tree, preparation.__file__, "exec"), namespace)  # noqa: S102 - the module's own source
    return namespace["prepare"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=41)
    parser.add_argument("--small", action="store_true", help="40-character tool outputs")
    parser.add_argument("--statements", action="store_true", help="time prepare's statements, not its stages")
    args = parser.parse_args()
    messages, kwargs = prepare_arguments(args.small)

    totals = []
    for _ in range(args.runs):
        gc.collect()
        started = time.thread_time()
        preparation.prepare(messages, **kwargs)
        totals.append(time.thread_time() - started)
    print(f"prepare ({'40-character outputs' if args.small else '900 KB request'}): thread CPU median "
          f"{statistics.median(totals) * 1000:.2f} ms, min {min(totals) * 1000:.2f} (n={args.runs}, untimed)")

    per: dict[str, list[float]] = defaultdict(list)
    if args.statements:
        spent: dict[str, float] = defaultdict(float)
        prepare = statement_timed_prepare(spent)
    else:
        timers = Timers()
        for owner, name in STAGES:
            timers.wrap(owner, name)
        spent, prepare = timers.spent, preparation.prepare
    timed = []
    for _ in range(args.runs):
        spent.clear()
        gc.collect()
        started = time.thread_time()
        prepare(messages, **kwargs)
        total = time.thread_time() - started
        timed.append(total)
        for label, seconds in spent.items():
            per[label].append(seconds)
        if not args.statements:
            per["(prepare's own code)"].append(total - sum(spent.values()))
    print(f"  with the timers: median {statistics.median(timed) * 1000:.2f} ms, min {min(timed) * 1000:.2f}; "
          "per stage, median and min (ms):")
    order = sorted(per) if args.statements else sorted(per, key=lambda label: -statistics.median(per[label]))
    for label in order:
        print(f"    {statistics.median(per[label]) * 1000:7.3f} {min(per[label]) * 1000:7.3f}  {label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
