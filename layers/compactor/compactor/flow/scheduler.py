"""The DAG executor: every node starts as soon as all its inputs are done, so independent branches
run at the same time (docs/behaviour.md#flow-execution semantics, concurrent instead of one node at a time).

Model nodes run as asyncio tasks; data nodes run inline the moment they are ready. A node that fails
without ``on_error`` stops the flow: nothing new starts and in-flight calls are cancelled (their cost
becomes unknown). Time is bounded per node by :func:`execute.execute_node` (node timeout and the
shared deadline), so the whole run ends by the deadline.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from ..budget import Deadline
from .execute import FAILED, FlowRouter, NodeOutcome, execute_data_node, execute_node
from .graph import DATA, DECISION, INPUT, OUTPUT, AdmittedFlow, FlowNode
from .result import FlowResult, answer_reasons
from .trace import aggregate
from .values import MISSING

CANCELLED = "cancelled"
EventListener = Callable[[dict[str, Any]], None]
# Python 3.12+ starts a node's task in the scheduler's own step (eager start): the call runs until it first
# waits (a provider's answer) without a trip through the event loop, and a call that never waits is done
# at once; the order in which calls start is the same (docs/performance.md).
EAGER_START = sys.version_info >= (3, 12)


def start_task(coroutine: Coroutine[Any, Any, NodeOutcome]) -> asyncio.Task[NodeOutcome]:
    """A task running ``coroutine`` on the running loop, started eagerly where the loop allows it (no
    custom task factory)."""
    loop = asyncio.get_running_loop()
    if EAGER_START and loop.get_task_factory() is None:
        return asyncio.Task(coroutine, loop=loop, eager_start=True)  # type: ignore[call-arg]
    return loop.create_task(coroutine)


def last_user_text(conversation: Sequence[Mapping[str, Any]]) -> str:
    """The text of the last ``user`` message (text parts joined), or "" when there is none."""
    for message in reversed(conversation):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(part.get("text", "") for part in content
                           if isinstance(part, dict) and part.get("type") == "text")
        return ""
    return ""


async def run_flow(admitted: AdmittedFlow, flow_input: Any = MISSING, *, router: FlowRouter,
                   deadline: Deadline, on_event: EventListener | None = None,
                   conversation: Sequence[Mapping[str, Any]] = ()) -> FlowResult:
    """Execute an admitted flow. The input node's value is ``flow_input`` when given, else the last
    user message of ``conversation``; ``conversation`` also precedes the prompt of llm nodes without
    ``context: "inputs"``. ``on_event`` receives ``node_started``/``node_finished`` events
    (``node`` canonical id, ``label`` submitted id, ``kind``, and ``outcome`` when finished)."""
    start_value = flow_input if flow_input is not MISSING else last_user_text(conversation)
    run = _FlowRun(admitted, router=router, deadline=deadline, on_event=on_event, conversation=conversation)
    return await run.execute(start_value)


class _FlowRun:
    """State of one execution: values, trace entries and in-flight tasks by canonical index."""

    def __init__(self, flow: AdmittedFlow, *, router: FlowRouter, deadline: Deadline,
                 on_event: EventListener | None, conversation: Sequence[Mapping[str, Any]]) -> None:
        self.flow = flow
        self.router = router
        self.deadline = deadline
        self.on_event = on_event
        self.conversation = conversation
        self.values: list[Any] = [None] * len(flow.nodes)
        self.tool_calls: dict[int, list[dict[str, Any]]] = {}
        self.entries: dict[int, dict[str, Any]] = {}
        self.answer_reasons: dict[str, str] = {}
        self.waiting = [len(set(node.inputs)) for node in flow.nodes]
        self.ready: deque[int] = deque()
        self.running: dict[asyncio.Task[NodeOutcome], int] = {}
        self.failure: tuple[FlowNode, NodeOutcome] | None = None
        self.finished = False

    async def execute(self, start_value: Any) -> FlowResult:
        self.values[0] = start_value
        self._release(0)
        try:
            while not self.finished and self.failure is None:
                await self._start_ready()
                if self.finished or self.failure is not None or not self.running:
                    break
                if all(task.done() for task in self.running):  # started eagerly and already finished
                    done: Any = list(self.running)
                else:
                    done, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=self.running.__getitem__):
                    index = self.running.pop(task)
                    self._settle(self.flow.nodes[index], task.result())
        finally:
            await self._cancel_running()
        return self._result()

    async def _start_ready(self) -> None:
        while self.ready and self.failure is None:
            node = self.flow.nodes[self.ready.popleft()]
            if node.kind == OUTPUT:
                self.finished = True
                return
            values = [self.values[i] for i in node.inputs]
            if self.on_event is not None:
                self._emit("node_started", node)
            if node.kind == DATA:  # pure and synchronous: run inline, without a coroutine to drive
                self._settle(node, execute_data_node(node, values))
                continue
            proposed = [call for i in node.inputs for call in self.tool_calls.get(i, ())] if self.tool_calls else []
            self.running[start_task(execute_node(
                node, values, router=self.router, deadline=self.deadline, conversation=self.conversation,
                proposed_tool_calls=proposed))] = node.index

    def _settle(self, node: FlowNode, outcome: NodeOutcome) -> None:
        self.entries[node.index] = outcome.entry
        if self.on_event is not None:  # (the event's fields are not even gathered without a listener)
            self._emit("node_finished", node, outcome=outcome.status,
                       **({"error": outcome.error_message} if outcome.error_message else {}))
        if self.failure is not None:  # finished alongside the failing node: traced, not used
            return
        if outcome.status == FAILED:
            self.failure = (node, outcome)
            return
        self.values[node.index] = outcome.value
        if node.kind == DECISION:
            self.answer_reasons.update(answer_reasons(outcome.value))
        if outcome.tool_calls:
            self.tool_calls[node.index] = outcome.tool_calls
        self._release(node.index)

    def _release(self, index: int) -> None:
        for reader in self.flow.successors[index]:
            self.waiting[reader] -= 1
            if self.waiting[reader] == 0:
                self.ready.append(reader)

    async def _cancel_running(self) -> None:
        """Cancel in-flight nodes (flow failure or external cancellation) and trace them."""
        if not self.running:
            return
        for task in self.running:
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
        reason = (f"cancelled: flow stopped at node {self.failure[0].cid}" if self.failure
                  else "cancelled: flow run cancelled")
        for index in sorted(self.running.values()):
            node = self.flow.nodes[index]
            self.entries[index] = {"node": node.cid, "kind": node.kind,
                                   "inputs": [f"n{i}" for i in node.inputs], "error": reason}
            self._emit("node_finished", node, outcome=CANCELLED, error=reason)
        self.running.clear()

    def _emit(self, event: str, node: FlowNode, **details: Any) -> None:
        if self.on_event is not None and node.kind != INPUT:
            self.on_event({"event": event, "node": node.cid, "label": node.label, "kind": node.kind, **details})

    def _result(self) -> FlowResult:
        entries = [self.entries[i] for i in sorted(self.entries)]
        totals = aggregate(entries)
        common = dict(flow_nodes=entries, fingerprint=self.flow.fingerprint, cost_usd=totals.cost_usd,
                      tokens_in=totals.tokens_in, tokens_out=totals.tokens_out,
                      tokens_cached=totals.tokens_cached, answer_reasons=dict(sorted(self.answer_reasons.items())))
        if self.failure is not None:
            node, outcome = self.failure
            return FlowResult(ok=False, output=None, failed_node=node.cid, error_kind=outcome.error_kind,
                              error_message=outcome.error_message, retry_after_s=outcome.retry_after_s, **common)
        output = self.flow.output_node
        return FlowResult(ok=True, output=self.values[output.inputs[0]], failed_node=None, error_kind=None,
                          error_message=None, **common)
